"""The measurement loop for one config: one fresh DataLoader, timed batch by batch.

This module runs inside the isolated per-config process (see isolation.py); the loop itself
(`timed_loop`) takes its clock and its step markers as parameters so tests drive it with a fake
clock and no hardware.

NOTE [timing model]
    For every batch N the loop records two instants on one timeline:
      ready[N]: the batch is usable by the step (on the device when there is one: after the
                host-to-device (H2D) copy, or after the CUDA-stream prefetcher's copy);
      end[N]:   the step's work on batch N has finished.
    Then, per measured batch:
      data-wait[N] = ready[N] - end[N-1]   (the consumer had nothing to work on)
      compute[N]   = end[N]   - ready[N]
      step[N]      = end[N]   - end[N-1] = data-wait[N] + compute[N]
    so throughput = samples / sum(step) and stall fraction = sum(data-wait) / sum(step).
    end[-1] of the first measured batch is the end of the last warm-up batch.

    Which clock gives ready and end:
    - `host` (no CUDA): perf_counter after `next()` returned, and after the step returned.
    - `sync` (CUDA): perf_counter after synchronising the *compute* stream at both points. Exact,
      but the host can no longer queue step N+1 while step N runs, which costs a real loop a
      little (case C23 documents why naive host timers without the sync are wrong: queued GPU
      work leaks into the next data-wait).
    - `events` (CUDA, default for GPU steps): CUDA events recorded on the compute stream after the
      batch is on the device and after the step's kernels. An event's GPU timestamp is when the
      stream reached it, i.e. max(previous work finished, host enqueued it), so ready[N] -
      end[N-1] is exactly the time the GPU's compute stream sat idle waiting for input, and no
      per-step synchronisation is needed: the loop runs like an uninstrumented one. Events are
      read once, after the window.
    A `sleep:` step is host work, so it always uses host/sync timing.

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
        DataLoader iterator's queue size where the platform supports it);
      - 8*W*P batches in all: a loader still draining then has rho > ~0.9, and what flattery is
        left is under ~10%.
    The window then runs for at least `batches` batches and `min_time_s`.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from loaderbench.meter import WindowMeter, WindowReading
from loaderbench.model import ComputeSpec, DatasetSpec, LoaderSettings, MeasureSpec, Trial
from loaderbench.sampling import TimedBatchSampler

Clock = Callable[[], float]


class StepMarker(Protocol):
    """Records ready/end instants (see NOTE [timing model]); `times()` returns them in seconds."""

    def ready(self) -> None: ...
    def end(self) -> None: ...
    def times(self) -> tuple[list[float], list[float]]: ...


class HostMarker:
    """ready/end from a host clock, after an optional `sync()` (compute-stream synchronise)."""

    def __init__(self, clock: Clock = time.perf_counter, sync: Callable[[], None] | None = None):
        self._clock = clock
        self._sync = sync
        self._ready: list[float] = []
        self._end: list[float] = []

    def ready(self) -> None:
        if self._sync is not None:
            self._sync()
        self._ready.append(self._clock())

    def end(self) -> None:
        if self._sync is not None:
            self._sync()
        self._end.append(self._clock())

    def times(self) -> tuple[list[float], list[float]]:
        return list(self._ready), list(self._end)


class CudaEventMarker:
    """ready/end as CUDA events on the current (compute) stream; read after one synchronise."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._ready: list[Any] = []
        self._end: list[Any] = []

    def _record(self, into: list[Any]) -> None:
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        into.append(ev)

    def ready(self) -> None:
        self._record(self._ready)

    def end(self) -> None:
        self._record(self._end)

    def times(self) -> tuple[list[float], list[float]]:
        self._torch.cuda.synchronize()
        if not self._end:
            return [], []
        to_s = [self.seconds(e) for e in self._ready]
        end_s = [self.seconds(e) for e in self._end]
        return to_s, end_s

    def seconds(self, event: Any) -> float:
        """An event's time in seconds on the same timeline as `times()` (after it)."""
        origin = self._ready[0] if self._ready else self._end[0]
        return float(origin.elapsed_time(event)) / 1000.0


@dataclass
class LoopTimes:
    """Raw output of `timed_loop`: per-batch seconds of the measured window and bookkeeping."""

    first_batch_s: float
    warmup_batches: int
    data_wait_s: list[float]
    compute_s: list[float]
    step_s: list[float]
    host_wait_s: list[float]
    samples: int
    notes: list[str] = field(default_factory=list)
    receive_s: list[float] = field(default_factory=list)
    epoch_gap_s: list[float] = field(default_factory=list)
    sampler_s: list[float] = field(default_factory=list)
    epoch_start_batches: list[int] = field(default_factory=list)


def warmup_for(settings: LoaderSettings, warmup_batches: int) -> tuple[int, int]:
    """(least, most) batches dropped after the first, per NOTE [backlog drain]:
    least = max(warmup_batches, W*P); most = max(least, 8*W*P)."""
    backlog = settings.num_workers * (settings.prefetch_factor or 0)
    least = max(warmup_batches, backlog)
    return least, max(least, 8 * backlog)


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    return ys[len(ys) // 2] if ys else 0.0


def timed_loop(
    batches: Iterable[Any],
    step: Callable[[Any], None],
    *,
    prepare: Callable[[Any], Any] = lambda b: b,
    count: Callable[[Any], int],
    marker: StepMarker,
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
) -> LoopTimes:
    """Run `step` over `batches` and time it per the NOTE [timing model].

    `prepare(batch)` makes a raw loader batch usable (the H2D copy; identity when prefetched or
    on CPU). The first batch is timed from `iter()` (worker start-up) and kept apart; then at
    least `warmup_batches` are dropped, and up to `max_warmup_batches` until `next()` first
    blocks or `ready_count()` (batches the loader has ready) reaches `full_queue` (NOTE [backlog
    drain]); then batches are measured until at least `min_batches` and
    `min_time_s` (host clock) are reached, or `max_batches`, or the loader ends. With
    `restart_epochs`, the end of the loader is the end of an epoch: `iter(batches)` starts the
    next one, and its cost (worker start-up unless persistent) is part of that batch's wait; the
    host time of each restart's first batch is kept in `epoch_gap_s`. The loop keeps no
    reference to a batch beyond its step (case C07). `on_batch(i)` is called after each step with
    the 0-based batch index (progress/heartbeat). `after_window(iterator, period_s)` runs once
    after the window with the live iterator and the median host time per step; the seconds it
    returns are kept as `receive_s` (see `probe_receive`). `agree(flag)` (distributed sweeps:
    True only when every rank's flag is true) makes the two decisions, where the warm-up ends
    and where the window ends, for all ranks at once; it is called at the same batch indices on
    every rank. `sampler_time()` is the main process's running total of seconds spent drawing
    indices (sampling.TimedBatchSampler): its growth across each measured `next()` is kept in
    `sampler_s` (NOTE [sampler cost] in sampling.py). The window positions of batches that
    started an epoch are kept in `epoch_start_batches`. Raises ValueError if the loader yields
    nothing.
    Returns per-batch lists for the measured batches only, in seconds.
    """
    t_start = clock()
    it: Iterator[Any] = iter(batches)
    try:
        batch = next(it)
    except StopIteration:
        raise ValueError("the loader yielded no batch") from None
    batch = prepare(batch)
    marker.ready()
    first_batch_s = clock() - t_start
    step(batch)
    marker.end()
    del batch
    if on_batch is not None:
        on_batch(0)

    index = 0
    measured = 0
    samples = 0
    host_wait: list[float] = []
    periods: list[float] = []
    window_start: float | None = None
    warm = 0
    most = max(warmup_batches, max_warmup_batches or 0)
    notes: list[str] = []
    if warmup_batches == 0:
        window_start = clock()
        if on_window_start is not None:
            on_window_start()
    last_t0: float | None = None
    epoch_gaps: list[float] = []
    sampler_s: list[float] = []
    epoch_starts: list[int] = []
    while True:
        restarted = False
        s0 = sampler_time() if sampler_time is not None else 0.0
        t0 = clock()
        try:
            batch = next(it)
        except StopIteration:
            if not restart_epochs:
                notes.append(f"the loader ended after {index + 1} batches")
                break
            it = iter(batches)  # a new epoch: workers start again unless persistent
            try:
                batch = next(it)
            except StopIteration:
                notes.append("an epoch yielded no batch")
                break
            epoch_gaps.append(clock() - t0)
            restarted = True
        t_next = clock()
        s1 = sampler_time() if sampler_time is not None else 0.0
        batch = prepare(batch)
        marker.ready()
        t1 = clock()
        n = count(batch)
        step(batch)
        marker.end()
        del batch
        index += 1
        if on_batch is not None:
            on_batch(index)
        if window_start is None:
            if last_t0 is not None:
                periods.append(t0 - last_t0)
            last_t0 = t0
            blocked = (t_next - t0) >= max(0.001, 0.1 * _median(periods))
            if index >= warmup_batches and not blocked and index < most:
                n_ready = ready_count() if ready_count is not None else None
                if n_ready is not None and full_queue is not None and n_ready >= full_queue:
                    blocked = True  # not a drain: the loader keeps up, nothing to flatter
            start = index >= warmup_batches and (blocked or index >= most)
            if agree is not None and index >= warmup_batches:
                start = agree(start)
            if start:
                warm = index
                window_start = clock()
                if on_window_start is not None:
                    on_window_start()
            continue
        measured += 1
        samples += n
        host_wait.append(t1 - t0)
        sampler_s.append(s1 - s0)
        if restarted:
            epoch_starts.append(measured - 1)
        elapsed = clock() - window_start
        done = measured >= max_batches or (measured >= min_batches and elapsed >= min_time_s)
        if agree is not None:
            done = agree(done)
        if done:
            break
    ready, end = marker.times()
    if on_window_end is not None:
        on_window_end()
    receive: list[float] = []
    if after_window is not None and measured:
        window_periods = [b - a for a, b in zip(end[-measured - 1:-1], end[-measured:])]
        receive = after_window(it, _median(window_periods))
    if 0 < measured < min_batches:
        notes.append(
            f"only {measured} batches measured (fewer than --batches {min_batches}): numbers are rough"
        )
    if measured == 0:
        raise ValueError(
            f"no batch left to measure after {index} warm-up batches: "
            "lower --warmup-batches or use a longer dataset"
        )
    # Batch 0 is the first batch; 1..warmup are warm-up; the window is the last `measured` ones.
    first = len(end) - measured
    data_wait = [ready[i] - end[i - 1] for i in range(first, len(end))]
    compute = [end[i] - ready[i] for i in range(first, len(end))]
    step_s = [end[i] - end[i - 1] for i in range(first, len(end))]
    return LoopTimes(
        first_batch_s=first_batch_s,
        warmup_batches=warm,
        data_wait_s=data_wait,
        compute_s=compute,
        step_s=step_s,
        host_wait_s=host_wait,
        samples=samples,
        notes=notes,
        receive_s=receive,
        epoch_gap_s=epoch_gaps,
        sampler_s=sampler_s if sampler_time is not None else [],
        epoch_start_batches=epoch_starts,
    )


def probe_receive(
    it: Iterator[Any],
    *,
    num_workers: int,
    prefetch_factor: int,
    period_s: float,
    max_pause_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Clock = time.perf_counter,
) -> list[float]:
    """Seconds `next()` takes for batches that are already built: the receive floor.

    NOTE [receive floor]
        Even a batch that a worker finished long ago costs the main process something to
        receive (unpickling, mapping its shared memory; about 1-2 ms on a 2-core machine for a
        small batch, far more for large ones, case C03). More workers cannot remove it, so a
        stall made of it is not "the loader is late". To measure it, the loop pauses after the
        window long enough for every worker to finish its `prefetch_factor` queued batches
        (each worker builds a batch in at most num_workers x the measured step period), then
        times `next()` alone for up to num_workers x prefetch_factor (at most 8) batches.
    Returns [] for num_workers == 0 or when the loader ends.
    """
    if num_workers <= 0:
        return []
    pause = min(max_pause_s, 1.2 * prefetch_factor * num_workers * period_s + 0.05)
    sleep(pause)
    out: list[float] = []
    for _ in range(min(8, num_workers * prefetch_factor)):
        t0 = clock()
        try:
            b = next(it)
        except StopIteration:
            break
        out.append(clock() - t0)
        del b
    return out


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
        batches (worker start-up is not timed).
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


# ---------------------------------------------------------------------------------------------
# The whole measurement of one config (inside the isolated process).


def resolve_device(measure: MeasureSpec, local_rank: int | None = None) -> str:
    """'cuda:N' or 'cpu' for `measure.device` ('auto' picks cuda:0 when CUDA is available; in a
    distributed sweep 'auto' and 'cuda' pick cuda:LOCAL_RANK, one GPU per rank)."""
    import torch

    if local_rank is not None and measure.device in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{local_rank}"
    if measure.device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if measure.device.startswith("cuda") and not torch.cuda.is_available():
        from loaderbench.errors import UsageError

        raise UsageError("--device cuda requested but CUDA is not available: use --device cpu")
    return "cuda:0" if measure.device == "cuda" else measure.device


def resolve_timing(measure: MeasureSpec, compute: ComputeSpec, device: str) -> str:
    """'host' on CPU (whatever was asked: there is no GPU timeline to read; the trial's `timing`
    records it); on CUDA 'events' for GPU steps (spin/model/none) and 'sync' for sleep, unless
    `--timing` chose one."""
    if not device.startswith("cuda"):
        return "host"
    if measure.timing != "auto":
        return measure.timing
    return "sync" if compute.kind == "sleep" else "events"


class _InspectFirst:
    """Iterates a loader unchanged, handing its first host-side batch to `sink` (pinning and
    bytes must be read before the H2D copy or the prefetcher moves the batch)."""

    def __init__(self, loader: Any, sink: Callable[[Any], Any]) -> None:
        self.loader = loader
        self.sink = sink

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        first = True
        for b in self.loader:
            if first:
                self.sink(b)
                first = False
            yield b


def epoch_mode(spec: DatasetSpec, measure: MeasureSpec, iterable: bool) -> bool:
    """Whether the loop runs real epochs (see MeasureSpec.epoch_batches): with --epoch-batches,
    or for a dataset whose length means something (folder, import, IterableDataset)."""
    return bool(measure.epoch_batches) or iterable or spec.kind in ("folder", "import")


# NOTE [samples per batch]
#     samples/s needs the number of samples in every batch, and a batch need not be one stacked
#     tensor: a numpy collate keeps `[x (B, ...), y (B,)]`, a detection collate keeps
#     `(tuple of B images, tuple of B target dicts)`, so the first tensor's first dimension (3
#     channels) or the outer length (2 parts) says nothing about B. The count is taken where it
#     is known: `CountingCollate` wraps the collate function (it runs in the worker, or in the
#     main process with 0 workers) and hands `len(items)` over with the batch. For a map-style
#     dataset the items are one per index the batch sampler gave; for an IterableDataset they are
#     the items its stream yielded into the batch (fewer at the end of the stream). When an item
#     is itself several samples, `--samples-per-batch N` says so; an IterableDataset batch in
#     which no array or sequence has as many rows as items were collated gets a warning
#     (`check_sample_count`).


class Counted(NamedTuple):
    """A collated batch with the number of samples in it (NOTE [samples per batch]). A
    namedtuple, so pin_memory, the prefetcher and `batch.move_to_device` keep it intact."""

    samples: int
    batch: Any


class CountingCollate:
    """A collate function that returns `Counted(len(items), collate(items))` (picklable, so it
    runs in spawned workers too)."""

    def __init__(self, collate: Callable[[list[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> Counted:
        return Counted(len(items), self.collate(items))


def samples_rule(spec: DatasetSpec, iterable: bool) -> str:
    """How a trial counts the samples of a batch: 'given' (--samples-per-batch), 'items'
    (IterableDataset: items collated) or 'indices' (map-style: indices the batch sampler gave)."""
    if spec.samples_per_batch:
        return "given"
    return "items" if iterable else "indices"


def check_sample_count(items: int | None, sizes: list[int] | None, *, iterable: bool, fixed: int | None) -> str:
    """A warning when an IterableDataset batch of `items` collated items has no array leaf or
    sequence of that many rows (`sizes`: batch.leading_sizes of the first batch): its items are
    probably several samples each. '' otherwise (map-style counts are exact, and a given count
    is the user's).

    >>> check_sample_count(64, [2, 64, 64], iterable=True, fixed=None)
    ''
    """
    if not iterable or fixed or not items or not sizes or items in sizes:
        return ""
    common = max(sorted(set(sizes)), key=sizes.count)
    return (
        f"samples per batch: the DataLoader collated {items} items per batch, but no part of the batch has "
        f"{items} rows (most common first dimension: {common}); if each item of the IterableDataset holds "
        "several samples, give --samples-per-batch"
    )


def _storage_reads(
    dataset: Any, sampler: TimedBatchSampler | None, loop: LoopTimes, batch_size: int,
    read: int | None, wall_s: float,
) -> dict[str, Any]:
    """Bytes the process tree read from storage over the window (psutil read_bytes: page-cache
    hits are not counted) and, for a dataset of files (ImageFolder's `samples`), the bytes the
    measured batches needed; see storage.read_summary."""
    from loaderbench import storage

    out: dict[str, Any] = {"storage_read_bytes": read}
    samples = getattr(dataset, "samples", None)
    if read is None or sampler is None or sampler.indices is None or not samples:
        return out
    try:
        sizes = [os.stat(path).st_size for path, _ in samples]
    except (OSError, TypeError, ValueError):
        return out
    start = (1 + loop.warmup_batches) * batch_size
    stop = start + len(loop.step_s) * batch_size
    needed = storage.needed_bytes(sampler.indices, sizes, start=start, stop=stop)
    summary = storage.read_summary(read, needed, wall_s)
    out.update(
        needed_bytes=needed, storage_mb_per_s=summary.storage_mb_per_s, served_from=summary.served_from
    )
    return out


def _batch_sampler(
    dataset: Any, spec: DatasetSpec, batch_size: int, per_rank: int, seed: int, group: Any
) -> Any:
    """The batch sampler of one trial (map-style datasets).

    The user's own (`spec.sampler`, made by `sampling.call_factory` with the `batch_size`,
    `seed`, `rank` and `world_size` it accepts; a plain sampler is batched by torch's
    `BatchSampler`), else a `BatchSampler` over `sampling.EpochSampler`: seeded random order,
    `per_rank` samples per epoch per rank, drawn in O(indices used) (NOTE [index drawing]). In a
    distributed trial every rank draws the same `per_rank x world_size` stream and `RankShard`
    keeps its own share.
    """
    from torch.utils.data import BatchSampler

    from loaderbench import datasets
    from loaderbench.sampling import EpochSampler, call_factory

    if spec.sampler:
        factory = datasets.load_callable(spec.sampler, "make_sampler", "--sampler")
        made = call_factory(
            factory, dataset, batch_size=batch_size, seed=seed,
            rank=0 if group is None else group.rank, world_size=1 if group is None else group.world_size,
        )
        if spec.sampler_kind == "batch_sampler":
            return made
        return BatchSampler(made, batch_size, drop_last=False)
    world = 1 if group is None else group.world_size
    sampler: Any = EpochSampler(len(dataset), per_rank * world, seed)
    if group is not None:
        from loaderbench.distributed import RankShard

        sampler = RankShard(sampler, group.rank, group.world_size)
    return BatchSampler(sampler, batch_size, drop_last=False)


class WorkerThreadsError(RuntimeError):
    """This config's worker threads would deadlock (worker_threads.prepare_worker_threads)."""


def _set_worker_threads(threads: int, worker_id: int) -> None:
    """worker_init_fn for `--worker-threads`: intra-op threads of each DataLoader worker (torch
    sets 1 in workers by default)."""
    import torch

    torch.set_num_threads(threads)


def _tracking_loader_class() -> type:
    """A DataLoader subclass that remembers its last iterator, so a crash can name how its
    workers died (see `describe_dead_workers`)."""
    from torch.utils.data import DataLoader

    class TrackingLoader(DataLoader):  # type: ignore[type-arg]
        last_iterator: Any = None

        def __iter__(self) -> Any:
            it = super().__iter__()
            self.last_iterator = it
            return it

    return TrackingLoader


def overlap_s(interval: tuple[float, float], others: list[tuple[float, float]]) -> float:
    """Length of `interval` covered by the union of `others` (all in seconds)."""
    a, b = interval
    covered = 0.0
    cursor = a
    for c, d in sorted(others):
        c, d = max(c, cursor), min(d, b)
        if d > c:
            covered += d - c
            cursor = d
    return covered


def copy_statistics(
    copy_events: list[Any], marker: StepMarker, *, measured: int, batches_total: int
) -> tuple[list[float], float | None]:
    """Per measured batch, the H2D copy's seconds; and the fraction of all that copy time that
    ran while the compute stream was busy with a step (hidden), or None when unknown.

    Copy pair i belongs to batch i (batch 0 is the first batch). The hidden fraction needs CUDA
    event timing of the steps (`CudaEventMarker`); with host timing it is None.
    """
    if not copy_events or measured <= 0 or len(copy_events) < batches_total:
        return [], None
    pairs = copy_events[batches_total - measured : batches_total]
    durations = [float(b.elapsed_time(e)) / 1000.0 for b, e in pairs]
    seconds = getattr(marker, "seconds", None)  # CUDA event timing only
    if seconds is None:
        return durations, None
    ready, end = marker.times()
    steps = list(zip(ready, end))
    intervals = [(seconds(b), seconds(e)) for b, e in pairs]
    total = sum(e - b for b, e in intervals)
    if total <= 0:
        return durations, None
    hidden = sum(overlap_s(iv, steps) for iv in intervals)
    return durations, hidden / total


def ready_batches(loader: Any) -> int | None:
    """Batches the loader's current iterator has built and not yet handed out, or None when
    unknown (0 workers, or a platform whose queues cannot report their size).

    Reads the multiprocessing iterator's result queue and its stash of out-of-order batches:
    private torch attributes, read defensively, used only to end the warm-up early.
    """
    it = getattr(loader, "last_iterator", None)
    queue = getattr(it, "_data_queue", None)
    if queue is None:
        return None
    try:
        n = int(queue.qsize())
    except (NotImplementedError, OSError, AttributeError):
        return None
    stash = getattr(it, "_task_info", None) or {}
    try:
        n += sum(1 for v in list(stash.values()) if len(v) == 2)
    except (TypeError, RuntimeError):
        return None
    return n


def describe_dead_workers(loader: Any) -> str:
    """'worker pid 123 killed by SIGBUS' for each worker that died of a signal, from the
    multiprocessing exit codes of the loader's last iterator ('' when none is known).

    torch reports a dead worker as "exited unexpectedly" when it notices through the queue
    rather than through SIGCHLD; the exit code still says which signal killed it.
    """
    import signal as _signal

    it = getattr(loader, "last_iterator", None)
    parts = []
    for w in getattr(it, "_workers", None) or []:
        code = getattr(w, "exitcode", None)
        if code is not None and code < 0:
            try:
                name = _signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            parts.append(f"worker pid {w.pid} killed by {name}")
    return "; ".join(parts)


def measure_config(
    settings: LoaderSettings,
    dataset_spec: DatasetSpec,
    compute_spec: ComputeSpec,
    measure: MeasureSpec,
    *,
    cache_dir: str | None = None,
    seed: int = 0,
    on_batch: Callable[[int], None] | None = None,
    distributed: dict[str, Any] | None = None,
) -> Trial:
    """Build a fresh DataLoader for `settings` and measure it (one trial).

    `distributed`: this process is one rank of a distributed trial (distributed.RankGroup's
    spec): it joins the trial's process group, loads its own shard of the samples on its own
    device, ends each step with the gradient all-reduce, and agrees with the other ranks on the
    window (NOTE [distributed sweep] in distributed.py).

    Raises whatever the dataset, the DataLoader or the step raises (the isolated process turns it
    into a failed row), and ValueError when nothing could be measured.
    """
    import torch
    from torch.utils.data import IterableDataset, default_collate

    from loaderbench import batch as batch_mod
    from loaderbench import compute as compute_mod
    from loaderbench import datasets, gpu
    from loaderbench.prefetch import CUDAPrefetcher

    local_rank = None if distributed is None else int(distributed.get("local_rank", 0))
    device_name = resolve_device(measure, local_rank)
    device = torch.device(device_name)
    timing = resolve_timing(measure, compute_spec, device_name)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    group = None
    if distributed is not None:
        from loaderbench.distributed import RankGroup

        group = RankGroup(distributed, device)

    dataset = datasets.build_dataset(
        dataset_spec, cache_dir=None if cache_dir is None else Path(cache_dir)
    )
    warmup, max_warmup = warmup_for(settings, measure.warmup_batches)
    total_batches = 1 + max_warmup + measure.max_batches
    if settings.main_threads is not None:
        torch.set_num_threads(settings.main_threads)
    kwargs = settings.dataloader_kwargs()
    if settings.worker_threads is not None and settings.num_workers > 0:
        from loaderbench.worker_threads import prepare_worker_threads

        unsafe = prepare_worker_threads(settings.worker_threads, settings.mp_context, num_workers=settings.num_workers)
        if unsafe:
            raise WorkerThreadsError(unsafe)
        kwargs["worker_init_fn"] = functools.partial(_set_worker_threads, settings.worker_threads)
    kwargs["collate_fn"] = CountingCollate(datasets.build_collate_fn(dataset_spec) or default_collate)
    iterable = isinstance(dataset, IterableDataset)
    epochs = epoch_mode(dataset_spec, measure, iterable)
    batch_sampler: TimedBatchSampler | None = None
    if not iterable:
        if epochs and measure.epoch_batches:
            per_epoch = measure.epoch_batches * settings.batch_size
        elif epochs:  # the dataset's own epoch, each rank's share of it
            world = 1 if group is None else group.world_size
            per_epoch = -(-len(dataset) // world)  # type: ignore[arg-type]
        else:  # one long epoch: the dataset's length is arbitrary (synthetic, tensor)
            per_epoch = total_batches * settings.batch_size
        batch_sampler = TimedBatchSampler(
            _batch_sampler(dataset, dataset_spec, settings.batch_size, per_epoch, seed, group),
            record=bool(getattr(dataset, "samples", None)),
            limit=measure.epoch_batches if dataset_spec.sampler else None,
        )
        kwargs["batch_sampler"] = batch_sampler
        del kwargs["batch_size"]
    loader = _tracking_loader_class()(dataset, **kwargs)

    step = compute_mod.build_compute(compute_spec, device, distributed=group is not None)
    first_raw: dict[str, Any] = {}

    def first_batch(c: Counted) -> None:
        first_raw.setdefault("info", batch_mod.inspect_batch(c.batch))
        first_raw.setdefault("sizes", batch_mod.leading_sizes(c.batch))
        first_raw.setdefault("items", c.samples)

    inspected = _InspectFirst(loader, first_batch)
    fixed = dataset_spec.samples_per_batch

    def count(c: Counted) -> int:
        return fixed if fixed else c.samples

    # The H2D copy: done by the prefetcher on its side stream, or here on the compute stream
    # (non_blocking only from pinned memory, where it can be asynchronous), or not at all on CPU.
    # Every copy is bracketed by CUDA events (on the side stream for the prefetcher, on the
    # compute stream otherwise): copy time, GB/s and how much of it compute hid (case C10).
    source: Iterable[Any] = inspected
    copy_here = cuda and not settings.prefetch
    copy_events: list[Any] = []
    if cuda and settings.prefetch:
        prefetcher = CUDAPrefetcher(inspected, device=device, record_copy_events=True)
        source = prefetcher
        copy_events = prefetcher.copy_events

    def prepare(b: Any) -> Any:
        if not copy_here:
            return b
        begin = torch.cuda.Event(enable_timing=True)
        begin.record()
        out = batch_mod.move_to_device(b, device, non_blocking=settings.pin_memory)
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        copy_events.append((begin, end))
        return out

    if timing == "events":
        marker: StepMarker = CudaEventMarker()
    elif timing == "sync":
        stream = torch.cuda.current_stream(device)
        marker = HostMarker(sync=stream.synchronize)
    else:
        marker = HostMarker()

    def reset_gpu() -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)

    meter = WindowMeter(gpu.make_util_sampler(device.index if cuda else None), reset_gpu=reset_gpu if cuda else None)
    window: dict[str, WindowReading] = {}

    def on_window_end() -> None:
        # CPU, memory and GPU utilisation cover the measured window only (not the probe after it).
        window["reading"] = meter.stop()

    alone: dict[str, Any] = {}

    def after_window(it: Iterator[Any], period: float) -> list[float]:
        received = probe_receive(
            it, num_workers=settings.num_workers, prefetch_factor=settings.prefetch_factor or 0,
            period_s=period,
        )
        sync = torch.cuda.synchronize if cuda else None
        alone.update(
            loader_alone(
                it, prepare, count,
                skip=settings.num_workers * (settings.prefetch_factor or 0), sync=sync,
                restart=(lambda: iter(source)) if epochs else None,
            )
        )
        return received

    if group is not None:
        group.barrier()  # every rank has its loader and step built: the trial starts together
    try:
        loop = timed_loop(
            source,
            lambda c: step(c.batch),
            prepare=prepare,
            count=count,
            marker=marker,
            warmup_batches=warmup,
            max_warmup_batches=max_warmup,
            min_batches=measure.batches,
            min_time_s=measure.min_time_s,
            max_batches=measure.max_batches,
            on_batch=on_batch,
            on_window_start=meter.start,
            on_window_end=on_window_end,
            restart_epochs=epochs,
            ready_count=lambda: ready_batches(loader),
            full_queue=max(1, settings.num_workers * (settings.prefetch_factor or 0) - 2),
            after_window=after_window,
            agree=None if group is None else group.agree,
            sampler_time=None if batch_sampler is None else (lambda: batch_sampler.spent_s),
        )
    except RuntimeError as exc:
        dead = describe_dead_workers(loader)
        if dead:
            raise RuntimeError(f"{exc} [{dead}]") from exc
        raise
    reading = window["reading"]
    wall, cpu_s, util = reading.wall_s, reading.cpu_s, reading.util
    info = first_raw.get("info")
    h2d_s, hidden = copy_statistics(
        copy_events, marker, measured=len(loop.step_s), batches_total=1 + loop.warmup_batches + len(loop.step_s)
    )
    reads = _storage_reads(dataset, batch_sampler, loop, settings.batch_size, reading.read_bytes, wall)
    trial = Trial(
        first_batch_s=loop.first_batch_s,
        warmup_batches=loop.warmup_batches,
        data_wait_s=loop.data_wait_s,
        compute_s=loop.compute_s,
        step_s=loop.step_s,
        samples=loop.samples,
        wall_s=wall,
        timing=timing,
        host_wait_s=loop.host_wait_s,
        cpu_time_s=cpu_s,
        processes=reading.processes,
        cpu_util_pct=100.0 * cpu_s / wall if wall > 0 else None,
        main_cpu_util_pct=100.0 * reading.main_cpu_s / wall if wall > 0 else None,
        memory_uss_bytes=reading.memory_uss_bytes,
        memory_pss_bytes=reading.memory_pss_bytes,
        gpu_util_pct=util.util_pct,
        gpu_util_window_s=util.window_s,
        gpu_util_note=util.note or None,
        gpu_sm_active_pct=getattr(util, "sm_active_pct", None),
        gpu_mem_peak_bytes=int(torch.cuda.max_memory_reserved(device)) if cuda else None,
        batch_bytes=None if info is None else info.nbytes,
        numpy_leaves=None if info is None else info.numpy_leaves,
        h2d_bytes_per_batch=None if (info is None or not cuda) else info.tensor_nbytes,
        pinned_leaves=None if info is None else info.pinned_leaves,
        tensor_leaves=None if info is None else info.tensor_leaves,
        torch_threads_main=torch.get_num_threads(),
        torch_threads_worker=(settings.worker_threads or 1) if settings.num_workers else None,
        receive_s=loop.receive_s,
        epoch_gap_s=loop.epoch_gap_s,
        sampler_s=loop.sampler_s,
        epoch_start_batches=loop.epoch_start_batches,
        samples_rule=samples_rule(dataset_spec, iterable),
        loader_alone_samples_per_s=alone.get("samples_per_s"),
        loader_alone_note=alone.get("note"),
        h2d_s=h2d_s,
        h2d_hidden_fraction=hidden,
        **reads,
        notes=list(loop.notes),
        rank=None if group is None else group.rank,
        world_size=None if group is None else group.world_size,
    )
    if group is not None:
        group.barrier()  # ... and ends together (the probes after the window are per rank)
    if cuda and settings.pin_memory and info is not None and info.tensor_leaves and not info.pinned_leaves:
        trial.notes.append("pinning ineffective: pin_memory=True but no tensor leaf of the batch is pinned")
    check = check_sample_count(first_raw.get("items"), first_raw.get("sizes"), iterable=iterable, fixed=fixed)
    if check:
        trial.notes.append(check)
    return trial



def measure_compute_ceiling(
    dataset_spec: DatasetSpec,
    compute_spec: ComputeSpec,
    measure: MeasureSpec,
    batch_size: int,
    *,
    cache_dir: str | None = None,
    clock: Clock = time.perf_counter,
    distributed: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The compute ceiling: the step fed one batch, already on the device, over and over.

    `distributed`: measured on every rank at once with the gradient all-reduce in the step
    (DDP), the ranks agreeing on when to stop; the result is this rank's.

    No loader, no copy: the most samples/s the step can take. One batch of `batch_size` samples
    (indices 0..batch_size-1, wrapping around, collated with the dataset's collate function) is
    moved to the device once; the step then runs `warmup_batches` times untimed and at least
    `batches` times and `min_time_s` seconds timed, end to end (CUDA events around the whole run
    on a GPU, so launch gaps count as they would in training).
    Returns {"samples_per_s", "step_s", "batches", "batch_size", "device"}.
    """
    import torch
    from torch.utils.data import IterableDataset, default_collate

    from loaderbench import batch as batch_mod
    from loaderbench import compute as compute_mod
    from loaderbench import datasets

    local_rank = None if distributed is None else int(distributed.get("local_rank", 0))
    device_name = resolve_device(measure, local_rank)
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    group = None
    if distributed is not None:
        from loaderbench.distributed import RankGroup

        group = RankGroup(distributed, device)
    dataset = datasets.build_dataset(
        dataset_spec, cache_dir=None if cache_dir is None else Path(cache_dir)
    )
    collate = datasets.build_collate_fn(dataset_spec) or default_collate
    if isinstance(dataset, IterableDataset):
        samples = []
        for item in dataset:
            samples.append(item)
            if len(samples) == batch_size:
                break
    else:
        n = len(dataset)  # type: ignore[arg-type]
        samples = [dataset[i % n] for i in range(batch_size)]
    one = batch_mod.move_to_device(collate(samples), device) if cuda else collate(samples)
    step = compute_mod.build_compute(compute_spec, device, distributed=group is not None)
    for _ in range(max(3, measure.warmup_batches)):
        step(one)
    if cuda:
        torch.cuda.synchronize()
    if group is not None:
        group.barrier()
    count = 0
    t0 = clock()
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    while True:
        step(one)
        count += 1
        done = count >= measure.batches and clock() - t0 >= min(measure.min_time_s, 10.0)
        if group is not None:
            done = group.agree(done)
        if done:
            break
    if cuda:
        end.record()
        end.synchronize()
        total_s = start.elapsed_time(end) / 1000.0
    else:
        total_s = clock() - t0
    step_s = total_s / count
    return {
        "samples_per_s": (dataset_spec.samples_per_batch or len(samples)) / step_s,
        "step_s": step_s,
        "batches": count,
        "batch_size": batch_size,
        "device": device_name,
    }
