"""The sweep's timed loop for one config: one fresh DataLoader, timed batch by batch.

The timed loop (`timed_loop`) and the probes after its window (`probe_receive`, `loader_alone`). It
runs inside the isolated measuring process (measure/isolation.py) and drives the loader itself;
its instants, their split into data-wait, compute and step time, and the warm-up's end come from
the one timing engine, measure/timing.py (NOTE [timing model], NOTE [backlog drain]), which
`loaderbench.watch` shares. It takes its clock and its marker as parameters, so tests drive it with
a fake clock and no hardware.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from loaderbench.measure.timing import Clock, LoopTimes, Marker, StepInstants, WarmUp, median, split_steps
from loaderbench.model import Note, WarningKind

MIN_READY_RECEIVES = 5  # receives timed in the window on ready batches that make the pause probe unneeded


# NOTE [whole epochs in the window]
#     When the loader restarts every epoch, the start of an epoch (worker start-up unless
#     persistent_workers, the sampler's first index lists) is a cost of training that recurs
#     once per epoch. A window that ends mid-epoch holds it 0 or 1 times depending on where it
#     began, so two configs could be weighted differently: with epochs of 20 batches, a
#     non-persistent 1-worker row measured 13 batches, no epoch start, and ranked above the
#     persistent one (790 against 771 samples/s) where a whole epoch ran at about 200. Any run of
#     k x E consecutive batches of an epoch of E holds exactly k epoch starts, wherever it begins,
#     so the window ends only at a multiple of E: every row then carries the cost at its share of
#     an epoch. Only for epochs of at most WHOLE_EPOCH_WINDOW_MAX batches: a longer epoch would
#     make every window an epoch long, and there the advice predicts the cost from the first
#     batch's start-up instead (labelled as a prediction). Not for a dataset whose files the
#     sweep knows (a folder, --data): a second epoch reads again what the first left in the page
#     cache, so a window over whole epochs would mix the device's reads with the cache's and a
#     cold-cache row would be partly warm; its window stays in the first epoch.
WHOLE_EPOCH_WINDOW_MAX = 200


def timed_loop(
    batches: Iterable[Any],
    step: Callable[[Any], None],
    *,
    prepare: Callable[[Any], Any] = lambda b: b,
    count: Callable[[Any], int],
    marker: Marker,
    warmup_batches: int,
    min_batches: int,
    max_warmup_batches: int | None = None,
    min_time_s: float,
    max_batches: int,
    clock: Clock = time.perf_counter,
    on_batch: Callable[[int], None] | None = None,
    on_window_start: Callable[[], None] | None = None,
    on_window_end: Callable[[], None] | None = None,
    after_window: Callable[[Iterator[Any], float], list[float]] | None = None,
    ready_count: Callable[[], int | None] | None = None,
    full_queue: int | None = None,
    restart_epochs: bool = False,
    agree: Callable[[bool], bool] | None = None,
    sampler_time: Callable[[], float] | None = None,
    early_warmup: tuple[int, int] | None = None,
    epoch_len: int | None = None,
) -> LoopTimes:
    """Run `step` over `batches` and time it per the NOTE [timing model].

    `prepare(batch)` makes a raw loader batch usable (the H2D copy; identity when prefetched or
    on CPU). The first batch is timed from `iter()` (worker start-up) and kept apart; then at
    least `warmup_batches` are dropped, and up to `max_warmup_batches` until `next()` first
    blocks or `ready_count()` (batches the loader has ready) reaches `full_queue`, or, with
    `early_warmup`, earlier at a blocked `next()` with less than a round of batches ready
    (NOTE [backlog drain]); then batches are measured until at least `min_batches` and
    `min_time_s` (host clock) are reached, or `max_batches`, or the loader ends. With
    `restart_epochs`, the end of the loader is the end of an epoch: `iter(batches)` starts the
    next one, and its cost (worker start-up unless persistent) is part of that batch's wait; the
    host time of each restart's first batch is kept in `epoch_gap_s`. The loop keeps no
    reference to a batch beyond its step (a kept batch would hold a shared-memory descriptor open). `on_batch(i)` is called after each step with
    the 0-based batch index (progress/heartbeat). `after_window(iterator, period_s)` runs once
    after the window with the live iterator and the median host time per step; the seconds it
    returns are kept as `receive_s` (see `probe_receive`). `agree(flag)` (distributed sweeps:
    True only when every rank's flag is true) makes the two decisions, where the warm-up ends
    and where the window ends, for all ranks at once; it is called at the same batch indices on
    every rank. `sampler_time()` is the main process's running total of seconds spent drawing
    indices (sampling.TimedBatchSampler): its growth across each measured `next()` is kept in
    `sampler_s` (NOTE [sampler cost] in measure/sampling.py). The window positions of batches that
    started an epoch are kept in `epoch_start_batches`; the sampler's seconds up to the first
    batch (an epoch's index list drawn, and the first `num_workers * prefetch_factor` index
    lists) in `first_batch_sampler_s`. With `restart_epochs` and `epoch_len` (batches per
    epoch) at most WHOLE_EPOCH_WINDOW_MAX and `max_batches`, the window ends only after a whole
    number of epochs (NOTE [whole epochs in the window]). The window's first step is timed from
    an instant marked after `on_window_start()` (the meter's start-up is in no step). Raises
    ValueError if the loader yields nothing.
    Returns per-batch lists for the measured batches only, in seconds (timing.split_steps of the
    instants `marker` recorded), and the (ready, end) of every step in `busy_s`.
    """
    first_s0 = sampler_time() if sampler_time is not None else 0.0
    t_start = clock()
    start = marker.mark()
    it: Iterator[Any] = iter(batches)
    try:
        batch = next(it)
    except StopIteration:
        raise ValueError("the loader yielded no batch") from None
    batch = prepare(batch)
    ready = marker.mark()
    t_first = clock()
    first_batch_s = t_first - t_start
    first_sampler_s = (sampler_time() - first_s0) if sampler_time is not None else None
    step(batch)
    prev = marker.mark()
    del batch
    # Every step's instants, the first batch's (timed from before `iter()`) and the warm-up's
    # included; the window is steps[window_from:].
    steps = [StepInstants(start, start, ready, prev)]
    window_from = 0
    if on_batch is not None:
        on_batch(0)

    index = 0
    measured = 0
    samples = 0
    host_wait: list[float] = []
    window_start: float | None = None
    warm = 0
    warmup = WarmUp(warmup_batches, max_warmup_batches or 0, full_queue=full_queue, early=early_warmup,
                    ready_count=ready_count)
    notes: list[Note] = []
    if warmup_batches == 0:
        window_start = clock()
        if on_window_start is not None:
            on_window_start()
        prev = marker.mark()  # the window starts here: the meter's start-up is in no step
        window_from = len(steps)
    epoch_gaps: list[float] = []
    sampler_s: list[float] = []
    epoch_starts: list[int] = []
    in_window_receive: list[float] = []
    warmup_receive: list[float] = []
    whole_epochs = bool(restart_epochs and epoch_len and epoch_len <= min(max_batches, WHOLE_EPOCH_WINDOW_MAX))
    if whole_epochs:
        max_batches = -(-max_batches // epoch_len) * epoch_len  # type: ignore[operator]
    while True:
        restarted = False
        s0 = sampler_time() if sampler_time is not None else 0.0
        # NOTE [receive in the window]: a next() on a batch that is already built costs only
        # the receive; measured here for free whenever one is ready, the pause probe after the
        # window (probe_receive) is needed only when too few were. The warm-up's are kept too
        # (the start-up burst hands out batches built while the first ones were received): they
        # count when the window alone timed too few.
        was_ready = ready_count is not None and (ready_count() or 0) >= 1
        t0 = clock()
        try:
            batch = next(it)
        except StopIteration:
            if not restart_epochs:
                notes.append(Note.of(WarningKind.LOADER_ENDED, f"the loader ended after {index + 1} batches"))
                break
            it = iter(batches)  # a new epoch: workers start again unless persistent
            try:
                batch = next(it)
            except StopIteration:
                notes.append(Note.of(WarningKind.LOADER_ENDED, "an epoch yielded no batch"))
                break
            epoch_gaps.append(clock() - t0)
            restarted = True
        t_next = clock()
        if was_ready and not restarted:
            (in_window_receive if window_start is not None else warmup_receive).append(t_next - t0)
        s1 = sampler_time() if sampler_time is not None else 0.0
        batch = prepare(batch)
        ready = marker.mark()
        t1 = clock()
        n = count(batch)
        step(batch)
        end = marker.mark()
        steps.append(StepInstants(prev, prev, ready, end))  # asking for a batch is the last step's end
        prev = end
        del batch
        index += 1
        if on_batch is not None:
            on_batch(index)
        if window_start is None:
            start_window = warmup.over(index, t0, t_next - t0)
            if agree is not None and index >= warmup.earliest:
                start_window = agree(start_window)
            if start_window:
                warm = index
                window_start = clock()
                if on_window_start is not None:
                    on_window_start()
                prev = marker.mark()  # the window starts here: the meter's start-up is in no step
                window_from = len(steps)
            continue
        measured += 1
        samples += n
        host_wait.append(t1 - t0)
        sampler_s.append(s1 - s0)
        if restarted:
            epoch_starts.append(measured - 1)
        elapsed = clock() - window_start
        done = measured >= max_batches or (measured >= min_batches and elapsed >= min_time_s)
        if whole_epochs:
            done = done and measured % epoch_len == 0  # type: ignore[operator]
        if agree is not None:
            done = agree(done)
        if done:
            break
    times = marker.resolve(wait=True)
    if on_window_end is not None:
        on_window_end()
    window = split_steps(times, steps[window_from:]) if measured else None
    receive: list[float] = []
    if len(in_window_receive) >= MIN_READY_RECEIVES:
        receive = in_window_receive[-64:]
    elif len(in_window_receive) + len(warmup_receive) >= MIN_READY_RECEIVES:
        receive = (warmup_receive + in_window_receive)[-64:]
    if after_window is not None and window is not None:
        probed = after_window(it, median(window.step_s) if not receive else -1.0)
        receive = receive or probed
    if 0 < measured < min_batches:
        notes.append(Note.of(
            WarningKind.FEW_BATCHES,
            f"only {measured} batches measured (fewer than --batches {min_batches}): numbers are rough"
        ))
    if window is None:
        raise ValueError(
            f"no batch left to measure after {index} warm-up batches: "
            "lower --warmup-batches or use a longer dataset"
        )
    return LoopTimes(
        first_batch_s=first_batch_s,
        warmup_s=(window_start - t_first) if window_start is not None else 0.0,
        warmup_batches=warm,
        data_wait_s=window.data_wait_s,
        compute_s=window.compute_s,
        step_s=window.step_s,
        host_wait_s=host_wait,
        samples=samples,
        notes=notes,
        receive_s=receive,
        epoch_gap_s=epoch_gaps,
        sampler_s=sampler_s if sampler_time is not None else [],
        epoch_start_batches=epoch_starts,
        first_batch_sampler_s=first_sampler_s,
        busy_s=[(times[s.ready], times[s.end]) for s in steps],
    )


def probe_receive(
    it: Iterator[Any],
    *,
    num_workers: int,
    prefetch_factor: int,
    period_s: float,
    max_pause_s: float = 5.0,
    ready_count: Callable[[], int | None] | None = None,
    poll_s: float = 0.02,
    sleep: Callable[[float], None] = time.sleep,
    clock: Clock = time.perf_counter,
) -> list[float]:
    """Seconds `next()` takes for batches that are already built: the receive floor.

    NOTE [receive floor]
        Even a batch that a worker finished long ago costs the main process something to
        receive (unpickling, mapping its shared memory; about 1-2 ms on a 2-core machine for a
        small batch, far more for large ones). More workers cannot remove it, so a
        stall made of it is not "the loader is late". To measure it, the loop pauses after the
        window long enough for every worker to finish its `prefetch_factor` queued batches
        (each worker builds a batch in at most num_workers x the measured step period), then
        times `next()` alone for up to num_workers x prefetch_factor (at most 8) batches.
        With `ready_count()` (batches the loader has built and not handed out) the pause ends
        as soon as that many are ready, polled every `poll_s`: a loader near its knee fills
        them in a fraction of the worst-case pause.
    Returns [] for num_workers == 0 or when the loader ends.
    """
    if num_workers <= 0:
        return []
    pause = min(max_pause_s, 1.2 * prefetch_factor * num_workers * period_s + 0.05)
    wanted = min(8, num_workers * prefetch_factor)
    if ready_count is None or ready_count() is None:
        sleep(pause)
    else:
        t0 = clock()
        while (ready_count() or 0) < wanted and clock() - t0 < pause:
            sleep(min(poll_s, max(0.0, pause - (clock() - t0))))
    out: list[float] = []
    for _ in range(wanted):
        t0 = clock()
        try:
            b = next(it)
        except StopIteration:
            break
        out.append(clock() - t0)
        del b
    return out


def skip_for(num_workers: int, prefetch_factor: int, ready: int | None) -> int:
    """Batches to take untimed before the loader-alone probe (NOTE [loader ceiling]): the
    `ready` ones already built (when known) and one partly built per worker, never more than
    the `num_workers` x `prefetch_factor` the loader can have outstanding.
    """
    most = num_workers * prefetch_factor
    if ready is None:
        return most
    return min(most, max(0, ready) + num_workers)


def loader_alone(
    it: Iterator[Any],
    prepare: Callable[[Any], Any],
    count: Callable[[Any], int],
    *,
    skip: int,
    restart: Callable[[], Iterator[Any]] | None = None,
    min_batches: int = 5,
    max_batches: int = 200,
    max_time_s: float = 0.5,
    sync: Callable[[], None] | None = None,
    clock: Clock = time.perf_counter,
) -> dict[str, Any]:
    """The loader ceiling of this config: samples/s of the live loader with no step, the H2D copy
    included (`prepare`), measured after the window.

    NOTE [loader ceiling]
        Run on the same DataLoader right after the measured window (and the receive probe, which
        leaves up to W*P batches ready): the first `skip` batches are taken untimed so the ready
        backlog does not flatter it, then batches are drawn as fast as the loader delivers them
        for about `max_time_s` (half a second). This is what the loader alone can feed; set
        against the compute ceiling it says which of the two binds. When the epoch ends after
        at least `min_batches` timed batches, those are the measurement; before, `restart()` (if
        given) starts the next epoch once and the probe begins again after its own `skip`
        batches (worker start-up is not timed). The caller's `skip` is what could flatter:
        the batches built and not yet handed out, plus at most one partly built per worker
        (`skip_for`). A config's first trial probes it; its repeats do not
        (`TrialJob.loader_alone`): the ceiling is a column and an input of the model, not what
        ranks configs, and the probe is 0.5-2 s of every trial (on the H200 case about as long
        as the measured window).
    Returns {"samples_per_s", "batches"}, or {"note": why} when the loader ended before the
    probe could finish (an epoch shorter than `skip` + `min_batches` batches).
    """
    for attempt in range(2):
        samples = batches = 0
        try:
            for _ in range(skip):
                b = next(it)
                del b
            if sync is not None:
                sync()
            t0 = clock()
            while batches < max_batches and (batches < min_batches or clock() - t0 < max_time_s):
                b = prepare(next(it))
                samples += count(b)
                batches += 1
                del b
        except StopIteration:
            if batches < min_batches:  # too few to time: the next epoch, once
                if restart is None or attempt:
                    break
                it = restart()
                continue
        if sync is not None:
            sync()
        elapsed = clock() - t0
        return {"samples_per_s": samples / elapsed if elapsed > 0 else None, "batches": batches}
    return {"note": f"the epoch ended before the probe (it needs {skip + min_batches} batches of one epoch)"}
