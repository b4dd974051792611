"""What the DataLoader and CUDA show of a running trial: the loader's ready queue and dead workers
(private torch attributes, read defensively), the H2D copies' events.
"""

from __future__ import annotations

from typing import Any

from loaderbench.measure.loop import StepMarker
from loaderbench.processes import signal_name


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
