"""`CUDAPrefetcher`: copy batch N+1 to the GPU on a side stream while batch N computes.

    prefetcher = CUDAPrefetcher(loader, device=torch.device("cuda"), transform=normalize_on_device)
    for epoch in range(epochs):
        for batch in prefetcher:        # tensors already on the GPU, usable on the current stream
            step(batch)

Without CUDA (or with a CPU device) it is a pass-through that applies `transform`, so the same
loop runs anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from loaderbench.errors import UsageError
from loaderbench.workload.batch import iter_tensors, move_to_device

__all__ = ["CUDAPrefetcher"]

Transform = Callable[[Any], Any]

# NOTE [ CUDA-stream prefetching: who waits for whom, and why record_stream ]
#
# Goal: while the consumer's kernels for batch N run on the consumer ("current") stream, the
# host-to-device copy of batch N+1 (and `transform`, e.g. uint8 -> normalized float) runs on a
# side stream, so the step never waits for a copy. That needs four things:
#
# 1. Consumer waits for copy. Before batch N is handed over,
#    `current_stream.wait_stream(copy_stream)` puts an event wait on the consumer stream: its
#    later kernels cannot read batch N before its copy (and transform) finished. The host does
#    not block. It is issued BEFORE the copy of N+1 is queued; issued after, the consumer would
#    also wait for N+1 and nothing would overlap.
#
# 2. record_stream. Batch N's GPU memory was allocated on the copy stream, and the caching
#    allocator keeps each block in the pool of the stream it was allocated on: when the last
#    reference dies, the block may go to the very next allocation on that stream (the copy of a
#    later batch) although the consumer's kernels queued on batch N may not have run yet.
#    `t.record_stream(current_stream)` for every delivered tensor makes the allocator hold the
#    block until the work queued on the consumer stream at free time has finished.
#
# 3. Copy waits for consumer (the other direction). Before each copy,
#    `copy_stream.wait_stream(current_stream)`: the copy of N+1 starts only after the work the
#    consumer had queued so far (up to step N-1; step N is queued after this) is done, so a copy
#    queued after some memory was released cannot overwrite it while a consumer kernel still
#    reads it, even for tensors point 2 never saw (inside objects we cannot walk). It also bounds
#    how far the copy stream runs ahead: one batch beyond the one in use, so reserved memory
#    holds about two batch sets, not a growing queue. Overlap with step N is kept.
#    Points 2 and 3 each suffice for the reuse pattern here; both are kept so that relaxing one
#    (say, letting copies run further ahead) cannot silently corrupt batches.
#
# 4. One stream per prefetcher, for its whole life. The allocator's pools are per stream: a new
#    stream per epoch (a bug once seen in a popular training library) strands the previous epoch's cached blocks in the old
#    stream's pool, and reserved memory climbs every epoch until the stream pool wraps around.
#
# Memory: about three batch sets are alive at a time (N-1 until the consumer drops it, N in use,
# N+1 being copied). record_stream returns a freed block to the pool only once the consumer
# stream has passed the point where it was freed, so when the host runs far ahead of the GPU (a
# fast loader and a loop that never synchronizes) each step the host is ahead holds one more
# batch set until the GPU catches up. That level is the same every epoch; it does not climb.
#
# The price of the one-ahead pipeline: `next()` hands over batch N only after batch N+1 was
# taken from the loader and its copy queued, so the host wait for N+1 is counted in the wait for
# N (time to first batch includes two loader fetches). Totals over an epoch are unchanged. A
# loader error while fetching N+1 is raised on the `next()` after batch N was delivered, so the
# failing batch index stays right. A non_blocking copy is truly asynchronous only from pinned
# memory: without `pin_memory=True` the copy of N+1 still overlaps little; the prefetcher
# does not pin.


class _Passthrough:
    """Stream protocol without streams: a synchronous move (none on CPU), then `transform`."""

    stream = None
    copy_events: list[Any] = []

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def copy(self, host_batch: Any, transform: Transform | None) -> Any:
        batch = host_batch if self.device.type == "cpu" else move_to_device(host_batch, self.device)
        return batch if transform is None else transform(batch)

    def hand_over(self, batch: Any) -> Any:
        return batch


class _CudaStreams:
    """The stream protocol of NOTE [ CUDA-stream prefetching ]: one side stream, two-way waits."""

    def __init__(self, device: torch.device, record_copy_events: bool = False) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device)  # once per prefetcher (NOTE, point 4)
        self.record_copy_events = record_copy_events
        self.copy_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def copy(self, host_batch: Any, transform: Transform | None) -> Any:
        self.stream.wait_stream(torch.cuda.current_stream(self.device))  # point 3
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            if self.record_copy_events:
                begin = torch.cuda.Event(enable_timing=True)
                begin.record()
            batch = move_to_device(host_batch, self.device, non_blocking=True)
            if self.record_copy_events:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self.copy_events.append((begin, end))
            if transform is not None:
                batch = transform(batch)
        return batch

    def hand_over(self, batch: Any) -> Any:
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_stream(self.stream)  # point 1
        for t in iter_tensors(batch):
            if t.device == self.device:
                t.record_stream(consumer)  # point 2
        return batch


_END = object()


class CUDAPrefetcher:
    """Iterate `loader` with each batch already on `device`, copied one batch ahead.

    Args:
        loader: any re-iterable of batches (usually a `DataLoader`); each `iter()` is an epoch.
            Batches may be any nesting handled by `loaderbench.workload.batch` (tuples, lists, dicts and
            their subclasses, namedtuples, dataclasses, objects with tensor attributes or an own
            `.to()`); non-tensors pass through, container types are kept.
        device: where batches go. None: the current CUDA device, or the CPU when CUDA is not
            available. A CPU (or other non-CUDA) device gives a pass-through without streams:
            batches are moved synchronously (not at all for CPU) and `transform` is applied.
        transform: optional callable `batch -> batch` run after the copy, on the side stream on
            CUDA (so it overlaps compute too), e.g. `loaderbench.workload.compute.normalize_on_device`.
        record_copy_events: instrumentation (loaderbench's sweep uses it): record a pair of
            CUDA timing events on the side stream around every copy, in `copy_events`, one pair
            per batch in delivery order. The caller reads and clears the list.

    Each delivered batch is ready for work queued on the stream that is current when `next()`
    returns; the consumer may edit it in place. The side stream (`copy_stream`) is created once,
    here, and reused by every epoch. See NOTE [ CUDA-stream prefetching ] for the details.

    Raises:
        UsageError: a CUDA device was asked for but CUDA is not available.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: torch.device | str | None = None,
        transform: Transform | None = None,
        *,
        record_copy_events: bool = False,
    ) -> None:
        self.loader = loader
        self.transform = transform
        self.device = _resolve_device(device)
        self._ops: _Passthrough | _CudaStreams = (
            _CudaStreams(self.device, record_copy_events)
            if self.device.type == "cuda"
            else _Passthrough(self.device)
        )

    @property
    def copy_events(self) -> list[Any]:
        """(begin, end) CUDA event pairs of each copy when `record_copy_events` is on."""
        return self._ops.copy_events

    @property
    def copy_stream(self) -> torch.cuda.Stream | None:
        """The side stream the copies run on (None for the pass-through), e.g. to time them
        with CUDA events."""
        return self._ops.stream

    def __len__(self) -> int:
        """The number of batches per epoch: `len(loader)`.

        Raises:
            TypeError: the loader has no length (e.g. an IterableDataset without `__len__`).
        """
        try:
            return len(self.loader)  # type: ignore[arg-type]
        except TypeError as exc:
            raise TypeError(
                f"the wrapped {type(self.loader).__name__} has no len(): {exc}"
            ) from exc

    def __iter__(self) -> Iterator[Any]:
        """One epoch: every batch of `iter(loader)` in order, the partial last one included."""
        ops = self._ops
        transform = self.transform
        it = iter(self.loader)
        host = next(it, _END)
        if host is _END:
            return
        pending = ops.copy(host, transform)
        host = None  # let the host (pinned) buffer go as soon as its copy is queued
        while True:
            batch = ops.hand_over(pending)  # before the next copy is queued (NOTE, point 1)
            pending = _END
            error: Exception | None = None
            try:
                host = next(it, _END)
                if host is not _END:
                    pending = ops.copy(host, transform)
                host = None
            except Exception as exc:  # noqa: BLE001 - deliver batch N first, raise on next call
                error = exc
            yield batch
            del batch
            if error is not None:
                raise error
            if pending is _END:
                return

    def __repr__(self) -> str:
        return (
            f"CUDAPrefetcher(loader={type(self.loader).__name__}, device={self.device}, "
            f"transform={getattr(self.transform, '__name__', self.transform)!r})"
        )


def _resolve_device(device: torch.device | str | None) -> torch.device:
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    dev = torch.device(device)
    if dev.type != "cuda":
        return dev
    if not torch.cuda.is_available():
        raise UsageError(
            f"CUDAPrefetcher: device {dev} asked for but CUDA is not available; "
            "pass device='cpu' (or None) for the pass-through"
        )
    if dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return dev
