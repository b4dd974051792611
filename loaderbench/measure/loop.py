"""The sweep's timed loop for one config: one fresh DataLoader, timed batch by batch.

The timed loop (`timed_loop`) and the probes after its window (`probe_receive`, `loader_alone`). It
runs inside the isolated measuring process (measure/isolation.py) and drives the loader itself;
its instants, their split into data-wait, compute and step time, and the warm-up's end come from
the one timing engine, measure/timing.py (NOTE [timing model], NOTE [backlog drain]), which
`loaderbench.watch` shares. It takes its clock and its marker as parameters, so tests drive it with
a fake clock and no hardware.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from loaderbench.measure.timing import (
    Clock,
    FullQueue,
    LoopTimes,
    Marker,
    StepInstants,
    WarmUp,
    median,
    production_rate,
    production_unit_batches,
    split_steps,
    unit_ends,
)
from loaderbench.model import CEILING_SLACK, PROBE_BUILD_SE, Note, WarningKind

Origin = Callable[[Any], "tuple[int | None, float | None]"]
"""(worker id, completion instant) of a raw loader batch: the DataLoader worker that built it
(None: the main process) and when its collate finished there, on the time.perf_counter() clock
(None when unknown); see `CountingCollate` in measure/trial.py."""

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
#     An IterableDataset has no length (`learn_epoch`; one whose own `__len__` says its epoch is
#     longer than WHOLE_EPOCH_WINDOW_MAX batches is not waited for): the window goes on until its
#     first epoch ends, while that epoch is at most WHOLE_EPOCH_WINDOW_MAX batches and the window
#     under EPOCH_WAIT_TIMES its minimum time (a stream without end costs each window that much);
#     the epoch's length is then known and the window ends on whole epochs as above. (A 1-worker
#     row of a 20-batch stream whose `__iter__` spends 1 s on an index each epoch ended its window
#     before the first epoch did and read 75% above a plain loop over real epochs.)
WHOLE_EPOCH_WINDOW_MAX = 200
EPOCH_WAIT_TIMES = 3  # choice: a window waits for an unknown epoch's end at most this many times its minimum time

# NOTE [a window of whole rounds]
#     With W workers, torch's DataLoader hands batches out in turn (worker k mod W builds batch k),
#     so a loader-bound loop runs in rounds of W batches: a wait for the slowest batch of the round,
#     then the rest of the round, already built, in quick steps. A window ended at the first step
#     past --min-time ends where the clock happens to cross that instant, and a long wait covers
#     most of the clock: the window then ends just after a wait and leaves out the quick steps it
#     paid for. A simulation of the hand-out driving this loop (benchmarks/window_uncertainty_sim.py
#     --ends) read such windows' medians 4.2-6.4% under the long-run rate on three latency inputs at
#     2-16 workers (0.2-4.3% where the warm-up ended at a wait); ended on whole rounds, 3.6% under
#     to 2.3% over. The H200 case's steady builds at 12 workers read +2.9% either way: their round
#     is about as long as the window, too far to wait for. The window therefore ends on a whole
#     number of rounds (measured batches a multiple of W) when the round's end is near: at the
#     first step past the minimum time, the batches left to the round's end are taken if, at the
#     window's mean step so far, they take at most WINDOW_ROUND_SLACK of the minimum time;
#     otherwise the window ends there. The decision is a count fixed before the steps it adds are
#     seen, so those steps' lengths do not choose the end. Whole-epoch windows (NOTE [whole epochs
#     in the window]) end on their own boundary instead. A window of a few rounds still holds only
#     a few hundred samples: where samples' costs differ, it reads the cost of the ones it drew
#     (its ± says how far that can be from the long run: analysis/statistics.window_se).
WINDOW_ROUND_SLACK = 0.25  # choice: a window may run this share of --min-time longer to end on a whole round


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
    after_window: Callable[[Iterator[Any], float], list[float] | tuple[list[float], list[float]]] | None = None,
    ready_count: Callable[[], int | None] | None = None,
    full_queue: FullQueue = None,
    restart_epochs: bool = False,
    agree: Callable[[bool], bool] | None = None,
    sampler_time: Callable[[], float] | None = None,
    decode_time: Callable[[], float] | None = None,
    early_warmup: tuple[int, int] | None = None,
    epoch_len: int | None = None,
    learn_epoch: bool = False,
    origin: Origin | None = None,
    cpu_clock: Clock | None = None,
    dispatch_lag: int | None = None,
    round_batches: int = 1,
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
    `sampler_s` (NOTE [sampler cost] in measure/sampling.py). `decode_time()` is its running total
    of seconds spent decoding on the GPU (--decoder nvjpeg): its growth across each measured
    `next()` and `prepare()` is kept in `gpu_decode_s`, and a receive timed in the window leaves
    out what of it fell inside that `next()` (the prefetcher decodes the next batch there). The window positions of batches that
    started an epoch are kept in `epoch_start_batches`; the sampler's seconds up to the first
    batch (an epoch's index list drawn, and the first `num_workers * prefetch_factor` index
    lists) in `first_batch_sampler_s`. With `restart_epochs` and `epoch_len` (batches per
    epoch) at most WHOLE_EPOCH_WINDOW_MAX and `max_batches`, the window ends only after a whole
    number of epochs (NOTE [whole epochs in the window]). The window's first step is timed from
    an instant marked after `on_window_start()` (the meter's start-up is in no step). With
    `origin` (the worker and the completion instant of a raw batch), the worker of every measured
    batch is kept in `batch_workers`, and a `next()` is a receive only when its batch was completed
    before the call (NOTE [receive in the window]). With `cpu_clock` (the main process's CPU
    seconds, all its threads: time.process_time) each receive's CPU seconds are kept beside it in
    `receive_cpu_s` (`after_window` then returns (wall, cpu) lists). With `origin` and
    `dispatch_lag` (the loader sends the task of the batch it hands out at position p when the
    loop took the one at p - dispatch_lag: torch's DataLoader in order, NOTE [production in the
    window]), the workers' production is timed from when each batch's task could start. With
    `round_batches` (the loader's workers: a round of the in-order hand-out) above 1, a window
    past its minimum ends on a whole number of rounds when that end is near (NOTE [a window of
    whole rounds]). Raises ValueError if the loader yields nothing.
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
    taken_at = [clock()]  # when the loop took each batch, the first included (NOTE [production in the window])
    first_origin = origin(batch) if origin is not None else (None, None)
    batch = prepare(batch)
    ready = marker.mark()
    t_first = clock()
    first_batch_s = t_first - t_start
    first_sampler_s = (sampler_time() - first_s0) if sampler_time is not None else None
    first_n = count(batch)
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
    epoch_batches, epoch_samples = 1, first_n  # of the current epoch so far, the first batch's included
    first_epoch: tuple[int, int] | None = None
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
    gpu_decode_s: list[float] = []
    epoch_starts: list[int] = []
    in_window_receive: list[tuple[float, float]] = []  # (wall, CPU) seconds of each receive
    ready_in_window: list[int] = []  # window positions of the batches built before their next()
    warmup_receive: list[tuple[float, float]] = []
    batch_workers: list[int | None] = []
    completions: list[tuple[int, float, int]] = []  # NOTE [production in the window]
    dispatched: list[float | None] = []  # beside each completion: when its task was sent (None: before any take)

    def sent_at(position: int) -> float | None:
        """When the loader sent the task of the batch at `position` (None: with the first tasks)."""
        return None if dispatch_lag is None or position < dispatch_lag else taken_at[position - dispatch_lag]

    if first_origin[0] is not None and first_origin[1] is not None:
        completions.append((first_origin[0], first_origin[1], first_n))
        dispatched.append(None)
    whole_epochs = bool(restart_epochs and epoch_len and epoch_len <= min(max_batches, WHOLE_EPOCH_WINDOW_MAX))
    round_end: int | None = None  # the measured count the window ends at (NOTE [a window of whole rounds])
    if whole_epochs:
        max_batches = -(-max_batches // epoch_len) * epoch_len  # type: ignore[operator]
    while True:
        restarted = False
        s0 = sampler_time() if sampler_time is not None else 0.0
        d0 = decode_time() if decode_time is not None else 0.0
        # NOTE [receive in the window]: a next() on a batch that is already built costs only
        # the receive; measured here for free whenever one is ready, the pause probe after the
        # window (probe_receive) is needed only when too few were. The warm-up's are kept too
        # (the start-up burst hands out batches built while the first ones were received): they
        # count when the window alone timed too few. A batch is ready when the loader has one
        # built; with `origin`, when the one handed out was completed before the call (the
        # loader hands batches out in order: others may be ready while this one is built).
        was_ready = (ready_count is not None and (ready_count() or 0) >= 1) or origin is not None
        c0 = cpu_clock() if cpu_clock is not None else 0.0
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
            if first_epoch is None:
                first_epoch = (epoch_batches, epoch_samples)
                if learn_epoch and epoch_len is None:  # NOTE [whole epochs in the window]: now known
                    epoch_len = first_epoch[0]
                    whole_epochs = epoch_len <= min(max_batches, WHOLE_EPOCH_WINDOW_MAX)
                    if whole_epochs:
                        max_batches = -(-max_batches // epoch_len) * epoch_len
            epoch_batches, epoch_samples = 0, 0
        t_next = clock()
        taken_at.append(t_next)
        c1 = cpu_clock() if cpu_clock is not None else 0.0
        d1 = decode_time() if decode_time is not None else 0.0
        worker, done_at = origin(batch) if origin is not None else (None, None)
        if origin is not None and (done_at is None or done_at > t0):
            was_ready = False
        if was_ready and not restarted:
            # A GPU decode inside next() (the prefetcher's, of the next batch) is no receive.
            (in_window_receive if window_start is not None else warmup_receive).append(
                (t_next - t0 - (d1 - d0), max(0.0, c1 - c0 - (d1 - d0))))
            if window_start is not None and origin is not None:
                ready_in_window.append(measured)  # this batch's window position (NOTE [what the wait is made of])
        s1 = sampler_time() if sampler_time is not None else 0.0
        batch = prepare(batch)
        d2 = decode_time() if decode_time is not None else 0.0
        ready = marker.mark()
        t1 = clock()
        n = count(batch)
        epoch_batches += 1
        epoch_samples += n
        if worker is not None and done_at is not None:
            completions.append((worker, done_at, n))
            dispatched.append(sent_at(len(taken_at) - 1))
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
        if origin is not None:
            batch_workers.append(worker)
        sampler_s.append(s1 - s0)
        gpu_decode_s.append(d2 - d0)
        if restarted:
            epoch_starts.append(measured - 1)
        elapsed = clock() - window_start
        past_minimum = measured >= min_batches and elapsed >= min_time_s
        if past_minimum and round_end is None:
            rest = -measured % max(1, round_batches)
            near = not whole_epochs and rest * elapsed / measured <= WINDOW_ROUND_SLACK * min_time_s
            round_end = measured + rest if near else measured
        done = measured >= max_batches or (past_minimum and measured >= (round_end or 0))
        if whole_epochs:
            done = done and measured % epoch_len == 0  # type: ignore[operator]
        elif learn_epoch and first_epoch is None:
            # An epoch of unknown length: wait for its end while it could be a short one.
            done = done and (epoch_batches > WHOLE_EPOCH_WINDOW_MAX or measured >= max_batches
                             or elapsed >= EPOCH_WAIT_TIMES * min_time_s)
        if agree is not None:
            done = agree(done)
        if done:
            break
    times = marker.resolve(wait=True)
    if on_window_end is not None:
        on_window_end()
    window = split_steps(times, steps[window_from:]) if measured else None
    received: list[tuple[float, float]] = []
    if len(in_window_receive) >= MIN_READY_RECEIVES:
        received = in_window_receive[-64:]
    elif len(in_window_receive) + len(warmup_receive) >= MIN_READY_RECEIVES:
        received = (warmup_receive + in_window_receive)[-64:]
    receive = [w for w, _ in received]
    receive_cpu = [c for _, c in received] if cpu_clock is not None else []
    if after_window is not None and window is not None:
        probed = after_window(it, median(window.step_s) if not receive else -1.0)
        if not receive:
            receive, receive_cpu = probed if isinstance(probed, tuple) else (probed, [])
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
    # The tasks' dispatch, where every batch's worker and completion are known.
    sent = dispatched if dispatch_lag is not None and len(completions) == len(taken_at) else None
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
        receive_cpu_s=receive_cpu if len(receive_cpu) == len(receive) else [],
        epoch_gap_s=epoch_gaps,
        sampler_s=sampler_s if sampler_time is not None else [],
        gpu_decode_s=gpu_decode_s if decode_time is not None else [],
        epoch_start_batches=epoch_starts,
        first_batch_sampler_s=first_sampler_s,
        busy_s=[(times[s.ready], times[s.end]) for s in steps],
        batch_workers=batch_workers,
        completions=completions,
        ready_batches=ready_in_window,
        production_samples_per_s=None if epoch_gaps else production_rate(completions, sent),
        production_unit_batches=None if epoch_gaps or sent is None else production_unit_batches(completions, sent),
        first_epoch=first_epoch,
    )


def probe_receive(
    it: Iterator[Any],
    *,
    num_workers: int,
    prefetch_factor: int,
    period_s: float,
    max_pause_s: float = 5.0,
    ready_count: Callable[[], int | None] | None = None,
    origin: Origin | None = None,
    poll_s: float = 0.02,
    sleep: Callable[[float], None] = time.sleep,
    clock: Clock = time.perf_counter,
    decode_time: Callable[[], float] | None = None,
    cpu_out: list[float] | None = None,
    cpu_clock: Clock = time.process_time,
) -> list[float]:
    """Seconds `next()` takes for batches that are already built: the receive floor (less the
    seconds `decode_time()`, a running total, grew inside it: a GPU decode in the main process).

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
        them in a fraction of the worst-case pause. With `origin` (when each batch was
        completed in its worker), a `next()` that returned a batch completed after it was
        called waited for that batch to be built: it is not a receive and is not kept (the
        batches come in order, so one late worker, or workers with nothing to build, make
        `next()` wait however many other batches are ready).
        A batch its worker completed can still be on its way: the worker's queue sends it, and
        serves each tensor's shared-memory descriptor, from threads that need the worker's GIL,
        which a worker doing Python work holds while it builds its next sample (a worker of 3 ms
        of pure-Python CPU a sample sent a 0.2-MB batch 20-42 ms after completing it, where the
        main process spent about 1.5 ms of CPU taking it). So with `cpu_out` the main process's CPU
        seconds in each kept receive (`cpu_clock`, all its threads: unpickling, mapping shared
        memory, the pin thread's copy) are appended there, one for one; the analysis reads a
        receive as its CPU seconds where the workers were computing
        (`Trial.receives_read_s`). Descriptor round trips to idle workers are waiting, not CPU, and are
        the receive's own cost (113 small tensors from sleeping workers), so the wall seconds stay
        the receive everywhere else.
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
        d0 = decode_time() if decode_time is not None else 0.0
        c0 = cpu_clock() if cpu_out is not None else 0.0
        t0 = clock()
        try:
            b = next(it)
        except StopIteration:
            break
        t1 = clock()
        c1 = cpu_clock() if cpu_out is not None else 0.0
        decoded = (decode_time() - d0) if decode_time is not None else 0.0
        done_at = origin(b)[1] if origin is not None else None
        if done_at is None or done_at <= t0:
            out.append(max(0.0, t1 - t0 - decoded))
            if cpu_out is not None:
                cpu_out.append(max(0.0, c1 - c0 - decoded))
        del b
    return out


PROBE_MIN_INTERVALS = 4  # batches timed over all workers, at least one whole unit per worker (NOTE [loader ceiling])
PROBE_MIN_TIME_S = 0.5
PROBE_MAX_TIME_S = 4.0
PROBE_FALL = 0.3  # a later half this much slower than the earlier one: the earlier drained items built before
PROBE_DRAIN = 1.5  # a worker's leading units this many times its median rate were items it held finished (or half built)
SUSTAINED_SLACK = CEILING_SLACK  # a sustained reading this close below the row's rate with the step is that rate


class Completions:
    """Completion instants of the batches the loader-alone probe received, per worker (NOTE
    [loader ceiling]): the sustained rate, whether it is steady, and a lower bound.

    `add(worker, done_at, samples)` records one batch (worker None: built in the main process);
    one completed at or before `start` (the probe's start, same clock) was built before the probe
    and is only counted as delivered. A worker's timing runs between ends of whole units of its
    work (`unit_ends`): a worker that builds one batch after the other times each build after
    its first completion (that batch was partly built before); one that finishes several
    batches together times whole bursts. The main process (0 workers) builds nothing between
    batches: its timing begins at `start`.
    """

    def __init__(self, start: float) -> None:
        self.start = start
        self.times: dict[int, list[float]] = {}
        self.samples: dict[int, list[int]] = {}
        self.first: dict[int, int] = {}  # per worker, the index its units are found from
        self.delivered: dict[int, int] = {}
        self.fell = False  # a drain of items built before the probe was seen (and dropped)
        self.last: tuple[int, float] | None = None
        self.freed: dict[int, float] = {}  # per worker, when its first batch built before the start was taken

    def add(self, worker: int | None, done_at: float, samples: int, taken_at: float | None = None) -> None:
        w = -1 if worker is None else worker
        if self.last == (w, done_at):
            return  # the same batch again (the CUDA prefetcher's last batch of an epoch pulls none)
        self.last = (w, done_at)
        self.delivered[w] = self.delivered.get(w, 0) + 1
        if done_at <= self.start:
            # Built before the probe: its worker had nothing to build until the first of them was
            # taken (the loader hands a worker its next index as it takes one of its batches).
            if taken_at is not None:
                self.freed.setdefault(w, taken_at)
            return
        if w == -1 and w not in self.times:
            self.times[w], self.samples[w] = [self.start], [0]
        self.times.setdefault(w, []).append(done_at)
        self.samples.setdefault(w, []).append(samples)
        self.first.setdefault(w, 0)

    def ends(self, w: int) -> list[int]:
        """Worker `w`'s unit ends from its current first index (`unit_ends`), counting from the
        start, or from when its first batch built before it was taken (a worker with finished
        batches waiting had nothing to build until then); the main process's timeline already
        begins at the start."""
        return unit_ends(self.times[w], self.first[w], None if w == -1 else max(self.start, self.freed.get(w, 0.0)))

    def one_by_one(self) -> bool:
        """Whether every worker built one batch after the other (each completion ends a unit, no
        bursts): the in-order replay's builds are each one batch's. (Where a drain of items a
        worker held finished was seen, `loader_alone` drops the builds it dropped.)"""
        if -1 in self.times:
            return False
        return all(self.ends(w) == list(range(self.first[w], len(self.times[w]))) for w in self.times)

    def units(self) -> dict[int, int]:
        """Whole units (builds, or bursts) timed per worker that delivered after the start."""
        return {w: max(0, len(self.ends(w)) - 1) for w in self.times}

    def _rate(self, w: int, lo: int, hi: int) -> tuple[int, float]:
        """(samples, seconds) of worker `w`'s batches completed at indices lo+1..hi."""
        ts, ns = self.times[w], self.samples[w]
        return sum(ns[lo + 1:hi + 1]), ts[hi] - ts[lo]

    def rate(self) -> float | None:
        """Samples/s: over the workers with a whole unit timed, the samples of their timed units
        over the seconds those units took, summed; None when no worker timed one."""
        total, any_timed = 0.0, False
        for w in self.times:
            e = self.ends(w)
            if len(e) > 1:
                n, span = self._rate(w, e[0], e[-1])
                if span > 0:
                    total += n / span
                    any_timed = True
        return total if any_timed else None

    def settled(self, need: int) -> bool:
        """Whether the workers that delivered have timed `need` batches among them in whole
        units, at least one unit each, and they ran steadily. Items a worker held finished (a
        buffer it drained) come out far faster than it builds: first, a worker's leading units
        over PROBE_DRAIN times its median rate (samples/s per unit) are dropped; then, over the
        workers with two units or more, when the later half of the units ran PROBE_FALL slower
        than the earlier half, the earlier half is dropped (a drain that was most of them).
        Either way the probe goes on."""
        for w in self.times:
            e = self.ends(w)
            rates = [self._unit_rate(w, a, b) for a, b in zip(e, e[1:])]
            if len(rates) < 2:
                continue
            median = sorted(rates)[len(rates) // 2]
            k = 0
            while k < len(rates) and rates[k] > PROBE_DRAIN * median:
                k += 1
            if k:
                self.first[w] = e[k]
                self.fell = True
        ends = {w: self.ends(w) for w in self.times}  # once, after the drops above
        # Every worker that delivered has a whole unit, and they hold `need` batches among them.
        if not ends or min(len(e) for e in ends.values()) < 2 or sum(e[-1] - e[0] for e in ends.values()) < need:
            return False
        early = late = 0.0
        halves: dict[int, int] = {}
        for w, e in ends.items():
            if len(e) < 3:
                continue
            mid = e[(len(e) - 1) // 2]
            (n1, s1), (n2, s2) = self._rate(w, e[0], mid), self._rate(w, mid, e[-1])
            if s1 <= 0 or s2 <= 0:
                continue
            early += n1 / s1
            late += n2 / s2
            halves[w] = mid
        if early <= 0 or late >= (1.0 - PROBE_FALL) * early:
            return True
        self.fell = True
        self.first.update(halves)
        return False

    def _unit_rate(self, w: int, a: int, b: int) -> float:
        """Samples/s of worker `w`'s unit from completion a to b (inf for no time)."""
        n, span = self._rate(w, a, b)
        return n / span if span > 0 else float("inf")

    def lower_bound(self, now: float) -> float | None:
        """Samples/s the loader surely sustains: the samples of the batches completed after each
        worker's first unit end, over the seconds since the start (each of them was built inside
        that time); None when there is none or a drain was seen (those builds were not all
        real)."""
        if self.fell or now <= self.start:
            return None
        n = 0
        for w, ns in self.samples.items():
            e = self.ends(w)
            if e:
                n += sum(ns[e[0] + 1:])
        return n / (now - self.start) if n else None

    def worker_batches(self, num_workers: int) -> list[int]:
        """Batches delivered per worker (index = worker id), all of the probe's; [] without workers."""
        return [self.delivered.get(w, 0) for w in range(num_workers)]


def delivery_rate(taken: Sequence[tuple[float, float, float, int]]) -> float | None:
    """Samples/s the main process can take batches at (NOTE [loader ceiling]): `taken` holds, per
    batch built inside the probe, when it was asked for, when its worker finished it, when it was
    taken (received, pinned, its H2D copy issued; the last one's after the copy's end), and its
    samples. The main process worked on a batch from the later of its asking and the batch's
    finish to its taking: the samples over those seconds summed. None with fewer than
    PROBE_MIN_INTERVALS + 1 batches.

    >>> delivery_rate([(1.0, 0.5, 1.1, 16), (1.1, 0.6, 1.2, 16), (1.2, 0.7, 1.3, 16), (1.3, 0.8, 1.4, 16),
    ...                (1.4, 0.9, 1.5, 16)])  # every batch was waiting: 0.1 s of the main's time each
    160.0
    >>> delivery_rate([(1.0, 1.0, 1.25, 16)] * 5)  # each taken 0.25 s after its worker finished it
    64.0
    """
    if len(taken) < PROBE_MIN_INTERVALS + 1:
        return None
    busy = sum(max(0.0, t - max(asked, done)) for asked, done, t, _ in taken)
    return sum(n for *_, n in taken) / busy if busy > 0 else None


REPLAY_BATCHES = 4000  # batches the in-order replay hands out (the first quarter is its start)


class InOrderBuilds:
    """Each batch's own build seconds in its worker, for a loader that hands batches out in order
    (NOTE [loader ceiling], the in-order replay).

    A DataLoader with W workers and prefetch_factor P sends batch k's indices to worker k mod W
    when the batch P*W before it is taken (`_try_put_index` after each batch handed out), so
    batch k is built from the later of its worker's previous completion and that send, to its
    own completion. `add(worker, done_at, got, samples)` records each draw in order (`got`: when
    the draw returned; `ahead` draws a wrapper such as a CUDA prefetcher holds ahead of the
    loader shift the send by as many). A draw whose send came before `start` (the probe's
    start) and whose worker's previous batch was completed before it is not timed (the worker
    may have waited in between). Workers that do not take turns (idle shards, in_order off,
    0 workers) or a batch completed before its send switch the builds off (`builds` is None).
    """

    def __init__(self, start: float, num_workers: int, prefetch_factor: int, ahead: int = 0) -> None:
        self.start, self.w, self.p, self.ahead = start, num_workers, max(1, prefetch_factor), ahead
        self.workers: list[int] = []
        self.done: list[float] = []
        self.got: list[float] = []
        self.ok = num_workers > 0
        self.seconds: list[float] = []
        self.samples: list[int] = []
        self.built: list[tuple[int, float]] = []  # per timed build: its worker and completion
        self._mean = self._m2 = 0.0  # seconds per sample over the builds: running mean and sum of squares (Welford)

    def add(self, worker: int | None, done_at: float, got: float, samples: int) -> None:
        if not self.ok:
            return
        i, w = len(self.workers), self.w
        if worker is None or (i < w and worker in self.workers) or (i >= w and worker != self.workers[i - w]):
            self.ok = False
            return
        self.workers.append(worker)
        self.done.append(done_at)
        self.got.append(got)
        if i < w:
            return
        sent_at = i - self.p * w - self.ahead
        if sent_at >= 0:
            began = max(self.done[i - w], self.got[sent_at])
        elif self.done[i - w] > self.start:
            began = self.done[i - w]  # its indices were sent before the probe, so it built right on
        else:
            return
        if done_at < began:
            self.ok = False  # completed before its indices were sent: not a DataLoader's turns
            return
        if done_at > began and samples > 0:
            self.seconds.append(done_at - began)
            self.samples.append(samples)
            self.built.append((worker, done_at))
            per = (done_at - began) / samples
            delta = per - self._mean
            self._mean += delta / len(self.seconds)
            self._m2 += delta * (per - self._mean)

    @property
    def builds(self) -> list[tuple[float, int]] | None:
        """(seconds, samples) per timed build, or None where the batches did not come in turns."""
        return self.builds_after({})

    def builds_after(self, since: dict[int, float]) -> list[tuple[float, int]] | None:
        """`builds` less those a worker completed at or before `since[worker]` (where a drain of
        items it held finished ended, `Completions.first`)."""
        if not self.ok:
            return None
        return [(s, n) for s, n, (w, t) in zip(self.seconds, self.samples, self.built)
                if t > since.get(w, float("-inf"))]

    def spread(self) -> float | None:
        """The relative standard error of the mean seconds per sample over the timed builds
        (stdev / mean / sqrt(n), kept as the builds come: Welford's running variance); None
        before 3 builds or where the builds are off."""
        n = len(self.seconds)
        if not self.ok or n < 3 or self._mean <= 0:
            return None
        return math.sqrt(self._m2 / (n - 1)) / self._mean / math.sqrt(n)


def in_order_rate(builds: Sequence[tuple[float, int]], num_workers: int, prefetch_factor: int, *,
                  batches: int = REPLAY_BATCHES, seed: int = 0) -> float | None:
    """Samples/s a DataLoader delivers in order when its workers' builds are drawn from `builds`
    ((seconds, samples) each, `InOrderBuilds`) and the main process takes each batch as soon as
    it is out (NOTE [loader ceiling]): an event replay of the hand-out (batch k to worker
    k mod num_workers, sent when batch k - prefetch_factor*num_workers is taken; taken once it
    and every batch before it are complete), builds drawn with replacement (a fixed seed, so one
    input gives one answer), timed over whole rounds of num_workers batches after the first
    quarter. None without builds or workers. With equal builds it is the workers' capacity:

    >>> in_order_rate([(0.5, 16)] * 4, 2, 2)  # 2 workers x 16 samples / 0.5 s
    64.0
    """
    if not builds or num_workers <= 0:
        return None
    rng = random.Random(seed)
    w, ahead = num_workers, max(1, prefetch_factor) * num_workers
    rounds = max(8, batches // w)
    n = rounds * w
    sent, free, taken = [0.0] * n, [0.0] * w, [0.0] * n
    counted, now, lo = 0, 0.0, (rounds // 4) * w
    for k in range(n):
        s, m = builds[rng.randrange(len(builds))]
        done = max(free[k % w], sent[k]) + s
        free[k % w] = done
        now = taken[k] = max(now, done)
        if k + ahead < n:
            sent[k + ahead] = now
        if k >= lo:
            counted += m
    span = taken[n - 1] - taken[lo - 1]
    return counted / span if span > 0 else None


def loader_alone(
    it: Iterator[Any],
    prepare: Callable[[Any], Any],
    count: Callable[[Any], int],
    *,
    origin: Origin,
    num_workers: int,
    restart: Callable[[], Iterator[Any]] | None = None,
    min_time_s: float = PROBE_MIN_TIME_S,
    max_time_s: float = PROBE_MAX_TIME_S,
    sync: Callable[[], None] | None = None,
    clock: Clock = time.perf_counter,
    prefetch_factor: int = 2,
    in_order: bool = True,
    ahead: int = 0,
) -> dict[str, Any]:
    """The loader ceiling of this config: the samples/s the live loader sustains with no step,
    measured after the window from when each batch was completed in its worker.

    NOTE [loader ceiling]
        Run on the same DataLoader right after the measured window (and the receive probe,
        which leaves up to W*P batches ready). Every batch carries the worker that built it and
        the instant its collate finished there (`CountingCollate`; time.perf_counter() is
        CLOCK_MONOTONIC on Linux, one timeline for every process). The probe draws batches as
        fast as the loader delivers them, H2D copy included (`prepare`), and times the
        workers, not the draws:
          - a batch completed before the probe began was built before it (the ready backlog,
            batches a worker held finished): it is taken but not timed;
          - each worker's first completion after the start ends a batch it had partly built
            before: its timing starts there; each later completion is one whole build, so a
            worker's rate is its whole builds' samples over the seconds between its first and
            last completion, and the loader's is the sum over workers. A worker that delivers
            nothing has nothing to build (a stream split into fewer shards than workers).
            With 0 workers the main process builds each batch when asked, nothing before:
            its timing begins at the start;
          - a worker can finish several batches' items together (a block of records read or
            decoded at once, a queue filled in `__iter__`) and hand them out back to back: its
            intervals are then a long one per block and short ones between its batches, and
            timing from its first completion to its last reads a burst's batches over part of
            a block's time (an IterableDataset that yields 160 finished items at a time read
            38% above a plain draw at 4 workers, past what they can build; -12% at 1). So a
            worker's timing runs between ends of whole units (`unit_ends`): where it hands out
            bursts its intervals fall in two classes (Otsu's split), the long ones
            PROBE_BURST_RATIO (10) times the short ones or more (builds that vary are not bursts:
            batches of 8 samples of 5 or 120 ms, a tenth of them slow, have intervals 5x
            apart; a burst's short ones are the main process's pace, 1-7 ms against blocks of
            0.3-3 s), and a unit ends at the completion
            before each long interval (the probe's start counts as one more interval, since
            the worker was inside a unit then; for a worker that held finished batches, from
            when the first of them was taken, since it could not build before); otherwise the
            worker builds one batch after the other, every completion ending a unit. (A first
            rule, an interval under half the worker's mean, took the main process's pace
            inside bursts of 20 batches for builds at times: 3 workers read -29% to +305%.)
        What the workers build is the ceiling only while the main process takes batches as fast:
        it receives each one (with pin_memory, from the pin thread) and issues its H2D copy, and
        the workers' first whole builds after the start run before any wait for it can show (on
        the H200 case, 16 workers with pin_memory read 10-13% above a plain draw of the same
        DataLoader). So the main process's own seconds per batch are timed too, from the later
        of its asking and the batch's finish in its worker to its taking (`delivery_rate`), and
        the ceiling is the lower of the two rates.
        It ends once `min_time_s` passed and the workers that delivered have timed
        PROBE_MIN_INTERVALS batches among them in whole units, at least one unit each, that
        ran steadily.
        Items a worker held finished (a shuffle buffer, a queue filled in `__iter__`) come out
        far faster than it builds them: they are short intervals before its first long one,
        its leading units over PROBE_DRAIN times its median rate are dropped, and where the
        later half of the units ran PROBE_FALL slower than the earlier half, the earlier half
        is (`Completions.settled`); the probe goes on.
        The workers' summed rate is what they can build, not what an in-order hand-out
        delivers: a draw waits on each batch's own worker, however many others are done, and
        with builds that vary (storage latency with a long tail) the workers then wait for their
        next indices (at most prefetch_factor batches each are out) while a slow batch holds the
        line. Over 1-2 builds each, timed right after the backlog (all workers busy at once),
        the sum read 1.22-1.24x a 200-batch plain draw at 6 workers of jittered per-sample
        latency on a 2-core machine (1.13-1.43x the long-run in-order rate in a fake-clock
        model). So where the workers take turns (`InOrderBuilds`: worker k mod W, nothing
        handed out in bursts) each batch's own build is timed from its send to its completion,
        the probe goes on until the mean build is known to PROBE_BUILD_SE (within
        `max_time_s`), and the ceiling is `in_order_rate`, the hand-out replayed over those
        builds; `in_order` off, idle workers and bursts keep the workers' rate (nothing out of
        turn waits on a slow batch, or the builds are not one batch's). The workers' rate is
        read when the stop rule above is first met: a long build later could read as a
        burst's end and take a worker's units away.
        Two ways this is not done, and why: half a second of draws after skipping the ready
        backlog is shorter than one worker's build (0.5-0.8 s on a 2-core machine and on the
        H200 case), so it timed the refill after the backlog (55 and 82 samples/s where 2 and
        4 workers of 0.48-s builds sustain 66 and 133); and draws time whatever the workers
        held finished (one such stream read 15x its sustained rate). Drawing needs no skip
        here: what was built before the start is told apart by its completion instant.
        When `max_time_s` passes or the epoch ends first (after one restart, when `restart`
        is given: the timing begins again in the new epoch), the result is a bound, not a
        rate: at least the batches completed after each worker's first unit end over the
        probe's time (`lower_bound`), none
        when a drain was seen; `settle_ceiling` then raises it to the rate the row reached
        with the step, which the loader alone reaches too. A sustained reading below that rate
        was disturbed and is reported as that bound (within SUSTAINED_SLACK it is that rate).
        A config's first trial probes it; its repeats do not (`TrialJob.loader_alone`): the
        ceiling is a column and an input of the model, not what ranks configs.
    Returns {"samples_per_s" (None for a bound), "method" ("sustained" | "bound"),
    "delivery_samples_per_s" (sustained only: the main process's rate, or None),
    "bound_samples_per_s", "reason" (for a bound: "time_cap" | "epoch_end"), "batches" (drawn),
    "worker_batches" (delivered per worker), "intervals" (fewest whole units, builds or bursts,
    timed by a worker that delivered); sustained only: "in_order_samples_per_s" (the replay, or
    None), "workers_samples_per_s" (the workers' summed rate), "builds" (batches whose own build
    was timed), "build_se" (the relative standard error of their mean build where the replay
    used them, else None)}. `prefetch_factor`, `in_order`: the loader's; `ahead`: batches a wrapper (the
    CUDA prefetcher) draws ahead of the loader.
    """
    t0 = clock()
    done = Completions(t0)
    turns = InOrderBuilds(t0, num_workers if in_order else 0, prefetch_factor, ahead)
    taken: list[tuple[float, float, float, int]] = []  # per batch built in the probe: asked, finished, taken, samples
    batches = 0
    reason: str | None = None
    restarted = False
    steady, in_turns = False, False
    rate: float | None = None
    timed: dict[int, int] = {}
    while True:
        asked = clock()
        try:
            raw = next(it)
        except StopIteration:
            if steady:
                break
            if restart is not None and not restarted:  # the next epoch, once; timed afresh
                restarted = True
                it = restart()
                done = Completions(clock())
                turns = InOrderBuilds(done.start, num_workers if in_order else 0, prefetch_factor, 0)
                taken = []
                continue
            reason = "epoch_end"
            break
        got = clock()
        worker, done_at = origin(raw)
        b = prepare(raw)
        del raw
        n = count(b)
        at = done_at if done_at is not None else clock()
        done.add(worker, at, n, taken_at=got)
        turns.add(worker, at, got, n)
        batches += 1
        del b
        now = clock()
        if at > done.start and worker is not None:
            taken.append((asked, at, now, n))
        if not steady and now - t0 >= min_time_s and done.settled(PROBE_MIN_INTERVALS):
            # The workers' rate is read here; builds that vary go on until their mean is known
            # to PROBE_BUILD_SE, for the in-order replay only (a long build later could read as
            # a burst's end and take a worker's units away).
            steady, rate, timed, in_turns = True, done.rate(), done.units(), done.one_by_one()
        if steady:
            spread = turns.spread() if in_turns else None
            if spread is None or spread <= PROBE_BUILD_SE:
                break
        if now - t0 >= max_time_s:
            reason = None if steady else "time_cap"
            break
    if sync is not None:
        sync()
    if not steady:
        timed = done.units()
    out: dict[str, Any] = {"batches": batches, "worker_batches": done.worker_batches(num_workers),
                           "intervals": min(timed.values()) if timed else 0}
    if reason is None:
        if taken:  # the last batch's copy ends at the sync
            taken[-1] = (*taken[-1][:2], clock(), taken[-1][3])
        paced = delivery_rate(taken)
        # Where a drain of held items was seen, its short builds are dropped as the workers'
        # rate dropped them (each worker's builds up to its first kept completion).
        since = {w: done.times[w][done.first[w]] for w in done.times} if done.fell else {}
        builds = turns.builds_after(since) if in_turns else None
        in_turn = in_order_rate(builds, num_workers, prefetch_factor) if builds else None
        # The replay's builds include every whole build the workers' rate timed, and more.
        replayed = in_turn is not None and len(builds or ()) >= num_workers
        own = in_turn if replayed else rate
        rates = [r for r in (own, paced) if r is not None]
        out.update(samples_per_s=min(rates) if rates else None, method="sustained",
                   bound_samples_per_s=None, reason=None, delivery_samples_per_s=paced,
                   in_order_samples_per_s=in_turn, workers_samples_per_s=rate, builds=len(builds or ()),
                   build_se=turns.spread() if replayed else None)
    else:
        out.update(samples_per_s=None, method="bound", bound_samples_per_s=done.lower_bound(clock()), reason=reason)
    return out


def settle_ceiling(probe: dict[str, Any], with_step_samples_per_s: float | None) -> dict[str, Any]:
    """The probe's result (`loader_alone`) held against the rate the row reached with the step
    (samples/s), which the loader alone reaches too (NOTE [loader ceiling]): a bound is at least
    that rate; a sustained reading more than SUSTAINED_SLACK below it is a bound at that rate
    (reason "below_step_rate"), within it it is that rate. Returns a new dict."""
    out = dict(probe)
    if not with_step_samples_per_s or "method" not in out:
        return out
    rate = out.get("samples_per_s")
    if out["method"] == "sustained" and rate is not None:
        if rate >= with_step_samples_per_s:
            return out
        if rate >= (1.0 - SUSTAINED_SLACK) * with_step_samples_per_s:
            out["samples_per_s"] = with_step_samples_per_s
            return out
        out.update(samples_per_s=None, method="bound", reason="below_step_rate", probe_samples_per_s=rate)
    bound = out.get("bound_samples_per_s")
    out["bound_samples_per_s"] = max(bound or 0.0, with_step_samples_per_s)
    return out
