"""The one timing engine: where a step's instants come from (the markers), how recorded instants
become per-batch data-wait, compute and step time (`split_steps`), and where the warm-up ends
(`WarmUp`).

Two loops time a loader with it: the sweep's measuring process (`loop.timed_loop`, which drives
the loader itself) and `loaderbench.watch` (inloop/watcher.py, driven by the user's own loop).
Neither turns instants into seconds on its own: both record `StepInstants` on a marker and hand
them to `split_steps`; `assembly.assemble_trial` makes the `Trial` of either. Nothing here
imports torch except `CudaEventMarker`, so the engine runs with a fake clock in tests.

NOTE [timing model]
    For every step N a loop records instants on one timeline (a marker: `HostMarker` or
    `CudaEventMarker`) and keeps four of them by index (`StepInstants`):
      prev[N]:  where step N begins: the end of step N-1; for the first step of the measured
                window, an instant taken after the window began (so the window meter's start-up,
                about 0.1 s the first time in a process, is in no step); for the first step of
                an epoch in a watched loop, the instant before `iter()` started the workers;
      t0[N]:    the loop asks for batch N (`next()` is called);
      ready[N]: batch N is usable by the step (on the device when there is one: after the
                host-to-device (H2D) copy, or after the CUDA-stream prefetcher's copy; with
                `--decoder nvjpeg`, after the batch was also decoded and cropped on the
                device: NOTE [decoding on the GPU] in workload/decode.py);
      end[N]:   the step's work on batch N has finished.
    Then, per measured step:
      data-wait[N] = ready[N] - t0[N]                    (the consumer had nothing to work on)
      step[N]      = end[N] - prev[N]
      compute[N]   = step[N] - data-wait[N] = (end[N] - ready[N]) + (t0[N] - prev[N])
    so throughput = samples / sum(step) and stall fraction = sum(data-wait) / sum(step).
    In the sweep's loop asking for the next batch is the previous step's end: t0[N] = prev[N] =
    end[N-1] (an epoch restarted inside `next()` is part of that batch's wait). In a watched
    loop t0[N] is the `next()` call; after an explicit `step_end()`, the loop's own work up to
    the next `next()` (logging, say) is t0[N] - prev[N]: compute, never data-wait.

    Which clock gives the instants:
    - `host` (no CUDA): perf_counter when the instant is marked.
    - `sync` (CUDA): perf_counter after synchronising the *compute* stream at every instant.
      Exact, but the host can no longer queue step N+1 while step N runs, which costs a real
      loop a little (a naive host timer without the sync is wrong: queued GPU work leaks into
      the next data-wait).
    - `events` (CUDA, default for GPU steps): CUDA events recorded on the compute stream. An
      event's GPU timestamp is when the stream reached it, i.e. max(previous work finished,
      host enqueued it), so ready[N] - t0[N] is exactly the time the GPU's compute stream sat
      idle waiting for input, kernels still queued from step N-1 never count as data-wait, and
      no step is synchronised: the loop runs like an uninstrumented one. Events are read once,
      after the window (a watch's interval statistics read only the ones already complete).
    A `sleep:` step is host work, so the sweep always times it with host/sync timing.

NOTE [backlog drain]
    With W workers and prefetch factor P, up to W*P batches are built while the loop waits for
    the first batch and for its first (slow) steps. Consuming that backlog is fast and would
    flatter a slow loader ("100 workers feed 100 batches, then a long wait"). Worse, while the
    backlog is consumed the workers refill part of it: with production/consumption rate ratio
    rho < 1 the loop is served without waiting for about W*P / (1 - rho) batches, not W*P.
    So the warm-up is at least max(--warmup-batches, W*P) batches after the first one, and then
    goes on until one of:
      - `next()` has had to block (the ready queue was empty: the backlog is gone);
      - the loader's ready queue is still (nearly) full after that many batches: production
        kept up with consumption, so there is no backlog to flatter anything (read from the
        DataLoader iterator's queue size where the platform supports it; full for the workers
        still at work, since an IterableDataset's worker whose share ran out holds no batch);
      - 8*W*P batches in all: a loader still draining then has rho > ~0.9, and what flattery is
        left is under ~10%; 2*W*P where the loop knows each batch's completion instant (the
        sweep's trials), which holds the row to what the workers produced (NOTE [production in
        the window]).
    Where the ready queue can be read, it ends earlier, after max(--warmup-batches, W) batches,
    at a `next()` that blocked while fewer than W batches were ready: nothing is left of a
    start-up backlog (a backlog still being drained would show as ready batches; a `next()`
    can block on one late worker while the others' batches wait, which the count catches).
    A loader slower than the step reaches this at its second round of batches: each worker
    builds its first batch at start-up, the step takes them faster than they come, and the
    loop waits for the next round. On the H200 case that is one round (about 1 s) per config
    earlier than W*P batches. The sweep's window then runs for at least `batches` batches and
    `min_time_s`; a watched loop's until `max_batches` steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from loaderbench.model import LoaderSettings, Note, split_threshold

Clock = Callable[[], float]


# ---------------------------------------------------------------------------------------------
# The markers: where the instants come from.


class Marker(Protocol):
    """Records instants on one timeline (NOTE [timing model]): `mark()` returns the new
    instant's index; `resolve(wait=...)` the instants in seconds, in order (with `wait=False`
    only those that can be read without waiting)."""

    def mark(self) -> int: ...
    def resolve(self, *, wait: bool = True) -> list[float]: ...


class HostMarker:
    """Instants from a host clock (seconds), after an optional `sync()` (a compute-stream
    synchronise: the `sync` timing)."""

    def __init__(self, clock: Clock = time.perf_counter, sync: Callable[[], None] | None = None) -> None:
        self._clock = clock
        self._sync = sync
        self._t: list[float] = []

    def mark(self) -> int:
        if self._sync is not None:
            self._sync()
        self._t.append(self._clock())
        return len(self._t) - 1

    def resolve(self, *, wait: bool = True) -> list[float]:
        return self._t


class CudaEventMarker:
    """Instants as CUDA events recorded on the current (compute) stream, in seconds from the
    first one. `resolve(wait=True)` synchronises once, on the last event; `resolve(wait=False)`
    reads only the events already complete (`Event.query()`), in order. Resolved events are
    released (the first is kept as the origin, for `seconds`)."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._events: list[Any] = []
        self._t: list[float] = []

    def mark(self) -> int:
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        self._events.append(ev)
        return len(self._events) - 1

    def resolve(self, *, wait: bool = True) -> list[float]:
        if wait and len(self._t) < len(self._events):
            self._events[-1].synchronize()
        origin = self._events[0] if self._events else None
        while len(self._t) < len(self._events):
            i = len(self._t)
            ev = self._events[i]
            if not wait and not ev.query():
                break
            self._t.append(float(origin.elapsed_time(ev)) / 1000.0)  # type: ignore[union-attr]
            if i:
                self._events[i] = None
        return self._t

    def seconds(self, event: Any) -> float:
        """A CUDA event recorded elsewhere (the prefetcher's copy, on its side stream), complete,
        in seconds on this marker's timeline."""
        return float(self._events[0].elapsed_time(event)) / 1000.0


def marker_for(timing: str, *, clock: Clock = time.perf_counter) -> HostMarker | CudaEventMarker:
    """The marker of a timing method (NOTE [timing model]): 'events' -> `CudaEventMarker`;
    'sync' -> `clock` after synchronising the current CUDA stream; anything else ('host') ->
    `clock` alone."""
    if timing == "events":
        return CudaEventMarker()
    if timing == "sync":
        import torch

        return HostMarker(clock, sync=lambda: torch.cuda.current_stream().synchronize())
    return HostMarker(clock)


# ---------------------------------------------------------------------------------------------
# Recorded instants -> per-batch seconds.


class Instants(Protocol):
    """A step's four instants, as indices into a marker's timeline (NOTE [timing model])."""

    @property
    def prev(self) -> int: ...
    @property
    def t0(self) -> int: ...
    @property
    def ready(self) -> int: ...
    @property
    def end(self) -> int: ...


class StepInstants(NamedTuple):
    """One step's instants (indices into a marker's timeline; NOTE [timing model])."""

    prev: int
    t0: int
    ready: int
    end: int


class StepTimes(NamedTuple):
    """Per step, in seconds: data-wait, compute and step time (NOTE [timing model])."""

    data_wait_s: list[float]
    compute_s: list[float]
    step_s: list[float]


def split_steps(times: Sequence[float], steps: Iterable[Instants]) -> StepTimes:
    """Per step of `steps` (indices into `times`, the marker's resolved instants in seconds):
    data-wait = t0 -> ready, step = prev -> end, compute = the rest of the step, (end - ready) +
    (t0 - prev) (NOTE [timing model]). Raises IndexError for an instant `times` does not hold."""
    waits: list[float] = []
    compute: list[float] = []
    step: list[float] = []
    for s in steps:
        prev, t0, ready, end = times[s.prev], times[s.t0], times[s.ready], times[s.end]
        waits.append(ready - t0)
        compute.append((end - ready) + (t0 - prev))
        step.append(end - prev)
    return StepTimes(waits, compute, step)


@dataclass
class LoopTimes:
    """What a timed loop measured, before it is a `Trial` (assembly.assemble_trial): per-batch
    seconds of the measured window (`split_steps`) and the loop's bookkeeping.

    `host_wait_s`: per measured batch, the host's seconds from asking for the batch to having
    it; `receive_s`: `next()` times of batches already built (the receive floor);
    `epoch_gap_s`: host seconds of each epoch start's first batch; `sampler_s`: per measured
    batch, the sampler's seconds inside its `next()` ([] when not measured); `gpu_decode_s`: per
    measured batch, the main process's seconds decoding on the GPU inside its `next()` and its
    preparation ([] when not measured);
    `epoch_start_batches`: window positions of batches that started an epoch; `warmup_s`: host
    seconds from the first batch's arrival to the window's start (None when not measured);
    `busy_s`: (ready, end) of every step, the first and the warm-up included, in seconds on the
    marker's timeline (when the compute stream was busy with a step; the sweep's H2D overlap);
    `batch_workers`: per measured batch, the worker that built it (None: the main process; [] when
    the loop was given no way to tell); `completions`: (worker, completion instant in seconds,
    samples) of every batch the loop received from a worker, the first and the warm-up's
    included ([] when it could not tell); `production_samples_per_s`: the workers' sustained
    rate over them (`production_rate`; None when not measured); `ready_batches`: the window
    positions of the batches a worker had completed before the loop's next() for them (known
    only with the loop's `origin`); `production_unit_batches`: the
    batches a worker finishes together (`production_unit_batches`; None when not measured);
    `first_epoch`: (batches, samples) of the first epoch the loop saw end, from the loader's
    first batch to its restart (None where none ended: a loader of unknown length, an
    IterableDataset, tells its epoch only so).
    """

    first_batch_s: float
    warmup_batches: int
    data_wait_s: list[float]
    compute_s: list[float]
    step_s: list[float]
    host_wait_s: list[float]
    samples: int
    notes: list[Note] = field(default_factory=list)
    receive_s: list[float] = field(default_factory=list)
    receive_cpu_s: list[float] = field(default_factory=list)
    epoch_gap_s: list[float] = field(default_factory=list)
    sampler_s: list[float] = field(default_factory=list)
    gpu_decode_s: list[float] = field(default_factory=list)
    epoch_start_batches: list[int] = field(default_factory=list)
    first_batch_sampler_s: float | None = None
    warmup_s: float | None = None
    busy_s: list[tuple[float, float]] = field(default_factory=list)
    batch_workers: list[int | None] = field(default_factory=list)
    completions: list[tuple[int, float, int]] = field(default_factory=list)
    ready_batches: list[int] = field(default_factory=list)
    production_samples_per_s: float | None = None
    production_unit_batches: float | None = None
    first_epoch: tuple[int, int] | None = None


# ---------------------------------------------------------------------------------------------
# Production in the window.

# NOTE [production in the window]
#     A window that ends before the workers' backlog is gone reads the backlog, not the rate:
#     with W workers each holding a batch or more finished when the window starts, a window of a
#     few rounds of batches takes them at the step's pace and the loop looks faster than the
#     workers can feed it. On the H200 case (12 workers, about 0.85 s per batch per worker under
#     the step, windows of about 1 s) rows read up to 30% above a sustained plain loop at the same
#     settings; on a sleep-based input of known cost 5-6%. The warm-up's rules (NOTE [backlog
#     drain]) end at a blocked `next()`, but workers in phase deliver a round at once, so a
#     window that starts at one round's arrival and ends after part of the next still takes
#     batches faster than they are built.
#     So the loop keeps, for every batch it received from a worker, the worker and the instant
#     its collate finished there (one clock for every process: CLOCK_MONOTONIC), the first
#     batch's and the warm-up's included. A worker that is never short of work builds one batch
#     after the other: its whole builds are the intervals between its consecutive completions,
#     and its rate is its later batches' samples over the seconds from its first completion to
#     its last. The loader's production is the sum over the workers that delivered, scaled by
#     delivering/timed where a delivering worker timed no whole build. A loader that keeps up
#     waits for room in its queue, so its workers' intervals stretch to the step's pace and the
#     production is what the loop consumed; the warm-up, which consumes the start-up backlog
#     fast, only shortens intervals. A row's samples/s is therefore the lower of the window's
#     consumption and this production (analysis/statistics.trial_samples_per_s), and its stall
#     what the step's compute leaves of a step at that rate. Not measured with epoch restarts in
#     the loop (a restart's gap is no build), without workers, or when the loop cannot tell
#     which worker built a batch.
#     A worker can also wait for room when the loop itself is slow for a while: the main thread's
#     first steps (CUDA and library start-up; nvJPEG's first batch on the H200 case) leave every
#     queue full, and the interval that spans that wait is no build. On the H200 case with
#     --decoder nvjpeg, 1 worker and the prefetcher, such a gap in the warm-up held the row to
#     1,110 samples/s where the window consumed 2,000-2,050. So a worker's interval longer than
#     PRODUCTION_GAP times the median of its intervals is left out of its rate (a batch's build
#     averages its samples' costs: a slow sample does not make a batch's build several times the
#     median).
#     That rule cannot tell a wait for room from a stream that finishes a block of batches at
#     once (a shuffle buffer filled, a record file decoded): its workers' intervals are short
#     within a block and long across one, and dropping the long ones left such rows 5-10% above
#     what their workers build. Where the loader's dispatch is known, the waits are taken out
#     exactly instead: torch's DataLoader in order keeps prefetch_factor x num_workers tasks in
#     flight and sends one more each time it hands a batch out, so the task of the batch handed
#     out at position p was sent when the batch at p - prefetch_factor x num_workers was. With
#     the CUDA prefetcher the loop's next() takes batch k + 1 from the loader while it hands
#     over k, and the completion it records at position k is batch k + 1's (`_InspectFirst` in
#     measure/trial.py), whose task was sent inside the loop's next() at position
#     k - prefetch_factor x num_workers: the same lag in the loop's positions. A worker starts
#     a task when it has finished its previous one and the task has come, so each build runs
#     from the later of the two to its completion, and no interval is left out. The loop's own
#     instant of taking that batch is at or after the send: a build reads at most that much
#     short (the production at most that much high), never long.


PRODUCTION_GAP = 4.0  # a worker's interval this many times its median interval is a wait for room, not a build


def _per_worker(completions: Sequence[tuple[int, float, int]],
                dispatched: Sequence[float | None] | None) -> dict[int, list[tuple[float, int, float | None]]]:
    """Per worker, its (completion instant, samples, dispatch instant or None), by completion; a
    batch listed twice (the CUDA prefetcher's last batch of an epoch pulls none) counts once."""
    per: dict[int, list[tuple[float, int, float | None]]] = {}
    sent = list(dispatched) if dispatched is not None else [None] * len(completions)
    for (worker, done_at, samples), at in dict(zip(completions[::-1], sent[::-1])).items():
        per.setdefault(worker, []).append((done_at, samples, at))
    for items in per.values():
        items.sort(key=lambda x: x[0])
    return per


def _busy(items: Sequence[tuple[float, int, float | None]]) -> list[float]:
    """One worker's builds laid end to end (seconds, from 0 at its first completion): each from the
    later of its previous completion and its task's dispatch (NOTE [production in the window])."""
    busy = [0.0]
    for a, b in zip(items, items[1:]):
        came = a[0] if b[2] is None else min(b[0], max(a[0], b[2]))
        busy.append(busy[-1] + b[0] - came)
    return busy


def production_unit_batches(completions: Sequence[tuple[int, float, int]],
                            dispatched: Sequence[float | None]) -> float | None:
    """Batches in a whole unit of a worker's work, the median over the workers with two unit ends
    or more (`unit_ends` of its builds laid end to end, as `production_rate` times them with
    `dispatched`): 1 where workers build one batch after the other, more where they finish a
    block of batches at once. None where no worker shows two unit ends.

    >>> production_unit_batches([(0, 0.0, 16), (0, 0.6, 16), (0, 0.61, 16), (0, 0.62, 16), (0, 1.22, 16),
    ...                          (0, 1.23, 16), (0, 1.24, 16)], [None] + [0.0] * 6)
    3.0
    >>> production_unit_batches([(0, 0.0, 16), (0, 0.1, 16), (0, 0.2, 16)], [None, None, None])
    1.0
    """
    units = []
    for items in _per_worker(completions, dispatched).values():
        ends = unit_ends(_busy(items))
        if len(ends) >= 2:
            units.append((ends[-1] - ends[0]) / (len(ends) - 1))
    return float(median(units)) if units else None


def production_rate(completions: Sequence[tuple[int, float, int]],
                    dispatched: Sequence[float | None] | None = None) -> float | None:
    """The workers' sustained production in samples/s (NOTE [production in the window]) from
    `completions`, (worker id, completion instant in seconds, samples) of each batch received:
    per worker, the samples of its batches after its first over the seconds from its first
    completion to its last, less any interval over PRODUCTION_GAP times the median of its
    intervals (with the batch that ended it: a wait for room, not a build); summed over the
    workers with two completions or more, times delivering / timed workers; a batch listed twice
    counts once. With `dispatched` (beside each completion, the instant its task was sent, on the
    same clock; None: sent with the first tasks) each build runs from the later of the worker's
    previous completion and that instant, and no interval is left out. None when no worker
    completed two batches.

    >>> production_rate([(0, 0.0, 16), (1, 0.1, 16), (0, 1.0, 16), (1, 1.1, 16), (0, 2.0, 16)])
    32.0
    >>> production_rate([(0, 0.0, 16), (1, 0.5, 16), (0, 1.0, 16)])  # worker 1: one batch
    32.0
    >>> production_rate([(0, 0.0, 16), (0, 1.0, 16), (0, 1.0, 16)])  # the last batch seen twice
    16.0
    >>> round(production_rate([(0, 0.0, 16), (0, 0.1, 16), (0, 1.1, 16), (0, 1.2, 16), (0, 1.3, 16)]), 6)  # waits 1 s
    160.0
    >>> # Blocks of 3 batches, each built in 0.6 s, then handed out at once: the rule drops the
    >>> # blocks' builds; the tasks' dispatch (all sent at 0.0) keeps them.
    >>> blocks = [(0, 0.0, 16), (0, 0.6, 16), (0, 0.61, 16), (0, 0.62, 16), (0, 1.22, 16), (0, 1.23, 16), (0, 1.24, 16)]
    >>> round(production_rate(blocks), 6)
    1600.0
    >>> round(production_rate(blocks, [None] + [0.0] * 6), 6)
    77.419355
    >>> # The same worker waiting for room: its third task sent at 0.5 s, its build 0.1 s.
    >>> round(production_rate([(0, 0.0, 16), (0, 0.1, 16), (0, 0.6, 16)], [None, None, 0.5]), 6)
    160.0
    """
    per = _per_worker(completions, dispatched)
    total, timed = 0.0, 0
    for items in per.values():
        if dispatched is not None:
            # The builds laid end to end, timed between ends of whole units (a block's batches
            # are one unit: its first one carries the block's build).
            busy = _busy(items)
            ends = unit_ends(busy)
            gaps = ([] if len(ends) < 2 else
                    [(busy[ends[-1]] - busy[ends[0]], sum(x[1] for x in items[ends[0] + 1: ends[-1] + 1]))])
        else:
            gaps = [(b[0] - a[0], b[1]) for a, b in zip(items, items[1:])]
            if gaps:
                limit = PRODUCTION_GAP * median([g for g, _ in gaps])
                gaps = [(g, n) for g, n in gaps if g <= limit] if limit > 0 else gaps
        span = sum(g for g, _ in gaps)
        if gaps and span > 0:
            total += sum(n for _, n in gaps) / span
            timed += 1
    return total * len(per) / timed if timed else None


PROBE_BURST_RATIO = 10.0  # a worker's long intervals this many times its short ones: it hands out items in bursts


def unit_ends(times: Sequence[float], first: int = 0, start: float | None = None) -> list[int]:
    """Indices into `times` (one worker's completion instants, ascending) that end a whole unit of
    its work, from `first` on (NOTE [loader ceiling] in measure/loop.py): a worker that builds one batch after the
    other ends a unit at every completion; one that finishes several batches' items together (a
    block read or decoded at once, a queue filled in `__iter__`) hands them out in runs of short
    intervals between long ones, and a unit (a burst) ends at the completion before each long
    interval. Short and long are Otsu's two classes of the intervals (`split_threshold`), told
    apart only where the long ones average PROBE_BURST_RATIO times the short ones or more (else
    the intervals are builds that vary). Where two long intervals or more follow the last short
    one, every completion from the first long one on ends one (a drain of held items, then
    steady builds): one long interval alone may be a new burst's first item. `start` (before
    times[0]; only with first == 0) counts as one more interval, from the instant the worker
    could build: a run of items handed out together (a burst seen alone) is not taken for
    builds. [] without a whole unit's end.

    >>> unit_ends([0.0, 1.0, 2.0, 3.0])
    [0, 1, 2, 3]
    >>> unit_ends([0.0, 1.3, 2.0, 3.1])  # builds that vary
    [0, 1, 2, 3]
    >>> unit_ends([0.0, 0.01, 1.0, 1.01, 2.0, 2.01])  # bursts of 2: whole ones end at 1 and 3
    [1, 3]
    >>> unit_ends([0.0, 0.001, 0.002, 0.1, 0.2])  # 2 held items drained, then builds of 0.1 s
    [2, 3, 4]
    >>> unit_ends([1.0, 1.01, 1.02], start=0.0)  # one burst, 1 s into the probe: no whole unit yet
    []
    >>> unit_ends([1.0, 1.01, 1.02, 2.0], start=0.0)  # and the next burst's first item
    [2]
    """
    n = len(times) - 1
    if n - first < 1:
        return [first] if n == first else []
    gaps = [times[i] - times[i - 1] for i in range(first + 1, n + 1)]
    lead = [times[0] - start] if start is not None and first == 0 and start < times[0] else []
    split = split_threshold(lead + gaps)
    if split is None or split[2] < PROBE_BURST_RATIO * max(split[1], 1e-9):
        return list(range(first, n + 1))
    long = [first + 1 + k for k, g in enumerate(gaps) if g >= split[0]]
    if len(long) == n - first:  # no short interval (the start's, a part of a unit, was the short one)
        return list(range(first, n + 1))
    if len(long) >= 2 and len(long) == n + 1 - long[0]:  # a drain, then builds one after the other
        return list(range(long[0] - 1, n + 1))
    return [i - 1 for i in long]


# ---------------------------------------------------------------------------------------------
# The warm-up (NOTE [backlog drain]).


def warmup_for(settings: LoaderSettings, warmup_batches: int, *, completions: bool = False) -> tuple[int, int]:
    """(least, most) batches dropped after the first, per NOTE [backlog drain]:
    least = max(warmup_batches, W*P); most = max(least, 8*W*P), or max(least, 2*W*P) where the
    loop knows each batch's completion instant (`completions`): the row's samples/s is then held
    to what the workers produced (NOTE [production in the window]), so a slow refill need not be
    drained to its end before the window (on the H200 case such warm-ups took 5 s and more)."""
    backlog = settings.num_workers * (settings.prefetch_factor or 0)
    least = max(warmup_batches, backlog)
    return least, max(least, (2 if completions else 8) * backlog)


def median(xs: Sequence[float]) -> float:
    """The upper median of `xs` (0.0 for none)."""
    ys = sorted(xs)
    return ys[len(ys) // 2] if ys else 0.0


def dispatch_lag(settings: LoaderSettings, *, own_loader: bool) -> int | None:
    """Positions between the batch whose taking sends a task and the batch of that task (NOTE
    [production in the window]): prefetch_factor x num_workers for torch's DataLoader in order;
    None without workers, with in_order off (a ready batch overtakes, and tasks go to workers
    with room, not in turn) or a loader class of the user's own (`own_loader`: its dispatch is
    not known).

    >>> dispatch_lag(LoaderSettings(4, True, True, 2, False, 32), own_loader=False)
    8
    >>> dispatch_lag(LoaderSettings(4, False, False, 3, False, 32), own_loader=True) is None
    True
    """
    if settings.num_workers <= 0 or not settings.in_order or own_loader:
        return None
    return settings.num_workers * (settings.prefetch_factor or 2)


def full_queue_for(settings: LoaderSettings, working: int | None = None) -> int:
    """Ready batches that mean the loader keeps up (NOTE [backlog drain]): W*P - 2, at least 1,
    with W the workers still at work where `working` says (an IterableDataset's worker whose
    share ran out holds no batch: with one shard for 3 workers at P = 2 at most 2 are ever
    ready, never the 4 of all 3, and the warm-up ran to its end while the loader kept up).

    >>> full_queue_for(LoaderSettings(3, False, False, 2, False, 4)), full_queue_for(
    ...     LoaderSettings(3, False, False, 2, False, 4), working=1)
    (4, 1)
    """
    w = settings.num_workers if working is None else min(working, settings.num_workers)
    return max(1, w * (settings.prefetch_factor or 0) - 2)


FullQueue = int | Callable[[], int | None] | None
"""Ready batches that mean the loader keeps up: a count, or read each time (`full_queue_for` of
the workers still at work), or None where unknown."""


def full_queue_now(settings: LoaderSettings, working_count: Callable[[], int | None] | None) -> FullQueue:
    """`full_queue_for(settings)`, read again at each batch from `working_count()` (the workers
    still at work, None when unknown) where that is given."""
    if working_count is None:
        return full_queue_for(settings)
    return lambda: full_queue_for(settings, working_count())


def early_warmup_for(settings: LoaderSettings, warmup_batches: int) -> tuple[int, int] | None:
    """(batches, wave) of the early end of the warm-up (NOTE [backlog drain]): from
    max(warmup_batches, W) batches on, a blocked `next()` with fewer than W batches ready;
    None without workers."""
    w = settings.num_workers
    return (max(warmup_batches, w), w) if w > 0 else None


def warmup_over(seen: int, least: int, most: int, wait_s: float, periods: list[float],
                ready: Callable[[], int | None] | None, full_queue: FullQueue,
                early: tuple[int, int] | None = None) -> bool:
    """Whether the warm-up ends after `seen` batches (NOTE [backlog drain]): at least `least`,
    then on the first `next()` that blocked (its `wait_s` at least a tenth of the median of
    `periods`, the seconds between earlier `next()` calls, and at least 1 ms) or once `ready()`
    batches reach `full_queue` (the loader keeps up: nothing to flatter), at most `most`.
    With `early` = (batches, wave) (`early_warmup_for`) and a known `ready()`, a `next()` that
    blocked after `batches` ends it before `least` when fewer than `wave` batches are ready."""
    blocked = wait_s >= max(0.001, 0.1 * median(periods))
    if seen < least:
        if early is None or seen < early[0] or not blocked or ready is None:
            return False
        n_ready = ready()
        return n_ready is not None and n_ready < early[1]
    if seen >= most or blocked:
        return True
    n_ready = ready() if ready is not None else None
    full = full_queue() if callable(full_queue) else full_queue
    return n_ready is not None and full is not None and n_ready >= full


class WarmUp:
    """Where one loader's warm-up ends (NOTE [backlog drain]): `over(seen, t0, wait_s)` after
    each batch past the first, with `seen` the batches so far after the first, `t0` the host
    instant its `next()` was called (seconds) and `wait_s` how long that call took. It keeps the
    periods between the warm-up's `next()` calls, against which a blocked call is judged.

    `least`/`most`: batches dropped at least / at most (`warmup_for`); `full_queue`: ready
    batches that mean the loader keeps up (`full_queue_for`, or read at each batch from the
    workers still at work: `full_queue_now`); `early`: (batches, wave) of the
    early end (`early_warmup_for`); `ready_count()`: batches the loader has ready, None when
    unknown."""

    def __init__(self, least: int, most: int, *, full_queue: FullQueue = None,
                 early: tuple[int, int] | None = None,
                 ready_count: Callable[[], int | None] | None = None) -> None:
        self.least = least
        self.most = max(least, most)
        self.full_queue = full_queue
        self.early = early
        self.ready_count = ready_count
        self.periods: list[float] = []
        self._last_t0: float | None = None

    @classmethod
    def for_loader(cls, settings: LoaderSettings, warmup_batches: int,
                   ready_count: Callable[[], int | None] | None = None,
                   working_count: Callable[[], int | None] | None = None) -> WarmUp:
        """The warm-up of a DataLoader with `settings` and `--warmup-batches` `warmup_batches`;
        `working_count()`: its workers still at work, None when unknown."""
        least, most = warmup_for(settings, warmup_batches)
        return cls(least, most, full_queue=full_queue_now(settings, working_count),
                   early=early_warmup_for(settings, warmup_batches), ready_count=ready_count)

    @property
    def earliest(self) -> int:
        """The fewest batches after the first at which the warm-up can end."""
        return min(self.least, self.early[0]) if self.early is not None else self.least

    def over(self, seen: int, t0: float, wait_s: float) -> bool:
        if self._last_t0 is not None:
            self.periods.append(t0 - self._last_t0)
        self._last_t0 = t0
        return warmup_over(seen, self.least, self.most, wait_s, self.periods, self.ready_count, self.full_queue,
                           self.early)
