"""What the DataLoader and CUDA show of a running trial: the loader's ready queue and dead workers
(private torch attributes, read defensively), the H2D copies' events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loaderbench.machine.processes import remove_shm_segments, signal_name


def quiet_worker_count_warning() -> None:
    """Silence, in this process, torch's warning on every DataLoader with more workers than it
    suggests: a sweep builds such loaders on purpose and says itself which configs could
    oversubscribe the CPUs before measuring (the preflight's warning), and which did after."""
    import warnings

    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)


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


class TrackedLoader:
    """A user's loader (any class or factory result: NOTE [loader settings] in measure/trial.py)
    that remembers the iterator its own `__iter__` returned, as `_tracking_loader_class` does by
    subclassing DataLoader: a wrapper, so the user's class runs unchanged. `len()` and every
    other attribute are the loader's."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.last_iterator: Any = None

    def __iter__(self) -> Any:
        it = iter(self.loader)
        self.last_iterator = it
        return it

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)


def unreadable_internals(loader: Any, num_workers: int) -> list[str]:
    """What the measurement could not read of the live iterator of a loader with `num_workers`
    workers (its ready queue and its workers, torch's private attributes), named as the row
    says it; [] when all of it reads, or without workers (nothing to read)."""
    it = getattr(loader, "last_iterator", None)
    if it is None or num_workers == 0:
        return []
    missing = []
    if getattr(it, "_data_queue", None) is None:
        missing.append("the batches ready (the warm-up ended on its batch count, the receive probe ran without "
                       "waiting for a full queue)")
    if not getattr(it, "_workers", None):
        missing.append("the workers (stopped by the loader's own shutdown; a dead worker's signal not named)")
    return missing


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
    copy_events: list[Any], busy_s: list[tuple[float, float]], seconds: Callable[[Any], float] | None, *,
    measured: int, batches_total: int,
) -> tuple[list[float], float | None]:
    """Per measured batch, the H2D copy's seconds; and the fraction of all that copy time that
    ran while the compute stream was busy with a step (hidden), or None when unknown.

    Copy pair i belongs to batch i (batch 0 is the first batch). `busy_s`: (ready, end) of every
    step in seconds on the step marker's timeline (timing.LoopTimes.busy_s); `seconds(event)`: a
    copy event's time on that timeline (`CudaEventMarker.seconds`). The hidden fraction needs
    CUDA event timing of the steps; with host timing (`seconds` None) it is None.
    """
    if not copy_events or measured <= 0 or len(copy_events) < batches_total:
        return [], None
    pairs = copy_events[batches_total - measured : batches_total]
    durations = [float(b.elapsed_time(e)) / 1000.0 for b, e in pairs]
    if seconds is None:
        return durations, None
    intervals = [(seconds(b), seconds(e)) for b, e in pairs]
    total = sum(e - b for b, e in intervals)
    if total <= 0:
        return durations, None
    hidden = sum(overlap_s(iv, busy_s) for iv in intervals)
    return durations, hidden / total


def ready_batches(loader: Any) -> int | None:
    """Batches the loader's current iterator has built and not yet handed out, or None when
    unknown (0 workers, or a platform whose queues cannot report their size).

    Reads the multiprocessing iterator's result queues (with pin_memory, the batches waiting
    for the pin thread too) and its stash of out-of-order batches:
    private torch attributes, read defensively, used to end the warm-up early and to size
    the probes after the window.
    """
    it = getattr(loader, "last_iterator", None)
    queue = getattr(it, "_data_queue", None)
    if queue is None:
        return None
    # With pin_memory the data queue holds pinned batches; the ones built and still waiting
    # for the pin thread sit in the workers' result queue.
    queues = [queue]
    built = getattr(it, "_worker_result_queue", None)
    if built is not None and built is not queue:
        queues.append(built)
    try:
        n = sum(int(q.qsize()) for q in queues)
    except (NotImplementedError, OSError, AttributeError):
        return None
    stash = getattr(it, "_task_info", None) or {}
    try:
        n += sum(1 for v in list(stash.values()) if len(v) == 2)
    except (TypeError, RuntimeError):
        return None
    return n


def working_workers(loader: Any) -> int | None:
    """Workers of the loader's current iterator still at work, or None when unknown (0 workers,
    another iterator). An IterableDataset's worker whose share has run out is done for the
    epoch and holds no batch (the multiprocessing iterator's per-worker status, a private torch
    attribute read defensively)."""
    status = getattr(getattr(loader, "last_iterator", None), "_workers_status", None)
    try:
        return None if status is None else sum(1 for s in list(status) if s)
    except TypeError:
        return None


def pending_workers(it: Any) -> dict[int, int] | None:
    """The worker of every batch the multiprocessing iterator `it` has asked for and not yet
    handed out, {batch index: worker id}, or None when unknown (0 workers, another iterator).
    Private torch attributes (the iterator's task table), read defensively; with
    `delivered_by`, the worker of each batch a loop it does not own receives (NOTE [which
    worker built a watched batch])."""
    table = getattr(it, "_task_info", None)
    if not isinstance(table, dict):
        return None
    try:
        return {int(k): int(v[0]) for k, v in list(table.items())}
    except (TypeError, ValueError, IndexError, RuntimeError):
        return None


def delivered_by(before: dict[int, int] | None, it: Any) -> int | None:
    """The worker that built the batch `next(it)` just returned, from `pending_workers(it)`
    taken before that call; None when unknown.

    NOTE [which worker built a watched batch]
        The sweep's own collate tags each batch with its worker; a watched loop's collate is the
        user's, so the watch reads torch's iterator instead: every batch asked of a worker has
        an entry {batch index: (worker id, ...)} in its task table until it is handed out (or
        skipped: the batch of a worker whose IterableDataset ran out, in order before it). The
        entries gone across one `next()` are the batch handed out and any skipped; the handed
        out one is the latest of them. On torch versions whose iterator keeps no such table,
        the counts are not taken (the watch says nothing of idle workers then)."""
    if before is None:
        return None
    after = getattr(it, "_task_info", None)
    if not isinstance(after, dict):
        return None
    try:
        gone = [k for k in before if k not in after]
    except RuntimeError:
        return None
    return before[max(gone)] if gone else None


def stop_workers(loader: Any, *, grace_s: float = 1.0) -> None:
    """Stop the workers of the loader's last iterator without waiting for the batches they are
    building (private torch attributes, read defensively; without them, torch's own shutdown).

    NOTE [stopping a measured config's workers]
        torch's shutdown asks each worker to finish: a worker building a batch finishes it
        first, so stopping W workers costs up to one batch's build time (about a second at 14
        workers on the H200 case; 0.29 s against 0.03 s for two workers building 0.4-s batches
        on 2 CPUs). Once a config's window and probes are over its batches are not needed, so:
        the pin-memory thread is stopped as torch stops it (while every worker is alive, so it
        never reads half a message), the workers' pids are taken off torch's SIGCHLD check
        (which would report them as killed), each worker gets SIGTERM (SIGKILL after
        `grace_s`), and the iterator is closed here: marked shut down and its queues closed
        without waiting on them, and the segments a worker stopped mid-batch left in /dev/shm
        are removed (NOTE [segments a killed worker leaves]). torch's own shutdown must not run after the kill: it sets the
        workers' done event, whose lock a worker holds for a moment on every index it reads,
        and a worker killed inside that moment leaves the lock held for good (the measuring
        process then hung until the config's timeout, once in about 60 trials of 4 workers on
        2 CPUs; torch's comments name the same hang). A dataset's worker is stopped between
        two instructions, as an interrupted training job's would be.
    """
    it = getattr(loader, "last_iterator", None)
    workers = getattr(it, "_workers", None)
    if it is None or not workers or getattr(it, "_shutdown", True):
        return
    signalled = False
    try:
        from torch.utils.data import _utils

        thread = getattr(it, "_pin_memory_thread", None)
        if thread is not None:
            it._pin_memory_thread_done_event.set()
            it._worker_result_queue.put((None, None))
            thread.join()
        if getattr(it, "_worker_pids_set", False):
            _utils.signal_handling._remove_worker_pids(id(it))
            it._worker_pids_set = False
        queues = [*it._index_queues, it._worker_result_queue]
        signalled = True
        for w in workers:
            if w.is_alive():
                w.terminate()
        for w in workers:
            w.join(timeout=grace_s)
            if w.is_alive():
                w.kill()
                w.join(timeout=grace_s)
    except (AttributeError, ImportError, OSError, ValueError):
        if not signalled:
            it._shutdown_workers()  # a torch without these internals: its own shutdown, workers alive
            return
    it._shutdown = True  # so neither torch's shutdown nor the iterator's __del__ touches the done event
    for q in queues:
        try:
            q.cancel_join_thread()
            q.close()
        except (OSError, ValueError):
            pass
    # A worker stopped while creating a batch's segment leaves it in /dev/shm (NOTE [segments a
    # killed worker leaves]); under 'file_descriptor' every named one is such a leftover.
    import torch.multiprocessing

    if torch.multiprocessing.get_sharing_strategy() == "file_descriptor":
        remove_shm_segments([w.pid for w in workers if w.pid is not None and not w.is_alive()])


def describe_dead_workers(loader: Any) -> str:
    """'worker pid 123 killed by SIGBUS' for each worker that died of a signal, from the
    multiprocessing exit codes of the loader's last iterator ('' when none is known).

    torch reports a dead worker as "exited unexpectedly" when it notices through the queue
    rather than through SIGCHLD; the exit code still says which signal killed it.
    """
    it = getattr(loader, "last_iterator", None)
    parts = []
    for w in getattr(it, "_workers", None) or []:
        code = getattr(w, "exitcode", None)
        if code is not None and code < 0:
            parts.append(f"worker pid {w.pid} killed by {signal_name(-code)}")
    return "; ".join(parts)
