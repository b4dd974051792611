"""Checks before a config runs: shared memory, oversubscription, IterableDataset replication.

Pure functions over numbers, plus two small probes of the dataset (`workload_facts`) that the
parent process runs once before the sweep.

NOTE [shared memory estimate]
    Workers hand batches to the main process through /dev/shm. With W workers and prefetch
    factor P up to W*P batches are in flight, so a config needs about
    bytes_per_batch * W * P of /dev/shm (plus the batch being received). Docker gives a
    container 64 MiB by default, where a worker then dies of SIGBUS. A config whose
    estimate exceeds the free space is skipped with the reason and the fix; one that needs more
    than half of it gets a warning.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from loaderbench.model import ConfigResult, LoaderSettings, Note, WarningKind
from loaderbench.orchestration.observer import SweepObserver
from loaderbench.orchestration.plan import Machine

SHM_WARN_FRACTION = 0.5
REPLICATED_MESSAGE = (
    "IterableDataset duplicated across workers: every worker replays the whole stream (split it "
    "with torch.utils.data.get_worker_info()); this config's samples/s counts duplicates and it is "
    "not ranked"
)


@dataclass(frozen=True)
class WorkloadFacts:
    """What the parent learned from the dataset before the sweep.

    `sample_bytes`: tensor bytes of one sample (None when unknown); `iterable`: an
    IterableDataset; `replicated_across_workers`: True when two workers yielded the same first
    sample (the dataset does not split its stream by worker), None when not checked.
    """

    sample_bytes: int | None
    iterable: bool
    replicated_across_workers: bool | None = None
    num_samples: int | None = None
    sampler_kind: str | None = None  # what the user's --sampler makes: 'sampler' | 'batch_sampler'


def shm_need_bytes(settings: LoaderSettings, sample_bytes: int | None) -> int | None:
    """Estimated /dev/shm bytes for a config: batch bytes * (W * P + 1); 0 without workers."""
    if settings.num_workers == 0:
        return 0
    if sample_bytes is None:
        return None
    in_flight = settings.num_workers * (settings.prefetch_factor or 2) + 1
    return sample_bytes * settings.batch_size * in_flight


def shm_verdict(need_bytes: int | None, free_bytes: int | None) -> tuple[str, str] | None:
    """('skip' | 'warn', message) when the estimate does not fit comfortably, else None."""
    if not need_bytes or not free_bytes:
        return None
    mib = 2**20
    fix = "give the container more shared memory (docker run --shm-size=...) or lower num_workers, prefetch_factor or batch_size"
    if need_bytes > free_bytes:
        return (
            "skip",
            f"shared memory (/dev/shm) too small: this config needs about {need_bytes / mib:,.0f} MiB "
            f"in flight, {free_bytes / mib:,.0f} MiB free; {fix}",
        )
    if need_bytes > SHM_WARN_FRACTION * free_bytes:
        return (
            "warn",
            f"needs about {need_bytes / mib:,.0f} MiB of /dev/shm ({free_bytes / mib:,.0f} MiB free): "
            f"close to the limit; {fix}",
        )
    return None


def host_memory_need_bytes(settings: LoaderSettings, sample_bytes: int | None) -> int | None:
    """Estimated host memory for a config's batches, in bytes: batch bytes x (W x (P + 1) + 3):
    W x P batches in flight, one being built in each worker, and three in the main process (the
    one received, its pinned copy, the one the step holds). None when the sample size is
    unknown. See NOTE [shared memory estimate]."""
    if sample_bytes is None:
        return None
    w = settings.num_workers
    return sample_bytes * settings.batch_size * (w * ((settings.prefetch_factor or 2) + 1) + 3)


def host_memory_verdict(need_bytes: int | None, available_bytes: int | None) -> tuple[str, str] | None:
    """('skip', message) when a config's batches cannot fit in the host memory available, else
    None (a config that would be killed by the out-of-memory killer costs minutes and says
    nothing)."""
    if not need_bytes or not available_bytes or need_bytes <= 0.9 * available_bytes:
        return None
    gib = 2**30
    return (
        "skip",
        f"host memory: the batches of this config need about {need_bytes / gib:,.1f} GiB "
        f"({available_bytes / gib:,.1f} GiB available); lower batch_size, num_workers or prefetch_factor",
    )


# NOTE [room for more workers]
#     A loader bound by latency (network storage, a remote service) gains from more requests in
#     flight, so workers past the CPUs help until something else binds. What binds first, that
#     the sweep can see before running a config: memory (each worker is a process; the measured
#     PSS of the tree at W workers, per process, times the processes wanted) and open files (the
#     main process holds about FDS_PER_WORKER descriptors per worker for its queues and sentinel
#     and, under the 'file_descriptor' sharing strategy, one per tensor of every batch in flight:
#     W x prefetch_factor batches). A count is refused when it would need more than 90% of the
#     memory available or of the soft open-file limit (`room_for_workers`).
FDS_PER_WORKER = 6
FDS_BASE = 64
ROOM_FRACTION = 0.9


def fd_need(num_workers: int, prefetch_factor: int | None, tensor_leaves: int | None, *,
            per_tensor: bool = True) -> int:
    """Descriptors the main process holds for `num_workers` workers (NOTE [room for more
    workers]): FDS_BASE + W x (FDS_PER_WORKER + prefetch_factor x tensors per batch), the last
    term only under the 'file_descriptor' sharing strategy (`per_tensor`)."""
    tensors = (prefetch_factor or 2) * (tensor_leaves or 1) if per_tensor else 0
    return FDS_BASE + num_workers * (FDS_PER_WORKER + tensors)


def room_for_workers(workers: int, *, measured_workers: int, measured_pss_bytes: int | None,
                     memory_available_bytes: int | None, prefetch_factor: int | None,
                     tensor_leaves: int | None, fd_soft_limit: int | None, per_tensor_fds: bool = True) -> str | None:
    """Why `workers` workers would not fit, from a config measured at `measured_workers` (its
    tree's PSS in bytes, its batches' tensors) and the host's limits; None when they fit or
    nothing is known to refuse them (NOTE [room for more workers])."""
    gib = 2**30
    if measured_pss_bytes and memory_available_bytes:
        need = measured_pss_bytes / (measured_workers + 1) * (workers + 1)
        if need > ROOM_FRACTION * memory_available_bytes:
            return (f"memory: {workers} workers would need about {need / gib:,.1f} GiB ({measured_pss_bytes / gib:,.2f} "
                    f"GiB measured at {measured_workers}), {memory_available_bytes / gib:,.1f} GiB available")
    if fd_soft_limit:
        fds = fd_need(workers, prefetch_factor, tensor_leaves, per_tensor=per_tensor_fds)
        if fds > ROOM_FRACTION * fd_soft_limit:
            return f"open files: {workers} workers would hold about {fds:,} descriptors, limit {fd_soft_limit:,} (ulimit -n)"
    return None


def oversubscription(settings: LoaderSettings, usable_cpus: int, main_threads: int | None) -> str | None:
    """A warning when workers exceed the usable CPUs, when workers x their intra-op threads do,
    or when workers + the main process's intra-op threads exceed twice the usable CPUs: before
    measuring, the config *could* oversubscribe the CPUs (workers that wait on I/O do not); the
    analysis calls it oversubscribed only where its measured CPU demand reached them
    (advice.oversubscribed)."""
    if settings.num_workers > usable_cpus:
        return (
            f"could oversubscribe: {settings.num_workers} workers on {usable_cpus} usable CPUs "
            "(num_workers sets processes; they share the CPUs)"
        )
    wt = settings.worker_threads or 1
    if settings.num_workers * wt > usable_cpus:
        return (
            f"could oversubscribe: {settings.num_workers} workers x {wt} intra-op threads = "
            f"{settings.num_workers * wt} threads on {usable_cpus} usable CPUs"
        )
    if main_threads and settings.num_workers and settings.num_workers + main_threads > 2 * usable_cpus:
        return (
            f"could oversubscribe: {settings.num_workers} worker processes + {main_threads} intra-op "
            f"threads in the main process on {usable_cpus} usable CPUs "
            "(torch.set_num_threads sets threads, num_workers sets processes)"
        )
    return None


def workload_facts(dataset: Any, *, check_replication: bool, timeout_s: float = 60.0) -> WorkloadFacts:
    """Probe a built dataset: bytes of one sample; for an IterableDataset with workers planned,
    whether two workers replay the same stream (compares the first sample of worker 0 and of
    worker 1, which a 2-worker DataLoader yields first and second, then their second; where
    they are equal and the stream ends within COUNT_CHECK_S, whether 2 workers yield it twice:
    `_replayed_by_count`). Never raises for the probe itself: an error leaves the field None."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    from loaderbench.workload.batch import inspect_batch

    iterable = isinstance(dataset, IterableDataset)
    sample_bytes: int | None = None
    try:
        first = next(iter(dataset)) if iterable else dataset[0]
        sample_bytes = inspect_batch(first).nbytes
    except Exception:  # noqa: BLE001 - a probe; the sweep reports real errors per config
        first = None
    replicated: bool | None = None
    if iterable and check_replication:
        try:
            asked = _asked_flag()
            loader = DataLoader(dataset, batch_size=None, num_workers=2, timeout=timeout_s,
                                worker_init_fn=None if asked is None else functools.partial(_watch_worker_info, asked))
            it = iter(loader)
            a, b = next(it), next(it)  # worker 0's first sample, worker 1's first
            replicated = _same(a, b, torch)
            if replicated:  # their second samples too, where the stream has them
                try:
                    replicated = _same(next(it), next(it), torch)
                except StopIteration:
                    pass
            del it
            if replicated:
                replicated = _replayed_by_count(dataset, DataLoader, COUNT_CHECK_S,
                                                asked_worker=asked is not None and bool(asked.value))
        except Exception:  # noqa: BLE001
            replicated = None
    try:
        num_samples = None if iterable else len(dataset)
    except TypeError:
        num_samples = None
    return WorkloadFacts(
        sample_bytes=sample_bytes, iterable=iterable, replicated_across_workers=replicated,
        num_samples=num_samples,
    )


COUNT_CHECK_S = 3.0  # choice: at most this long for each pass that counts a stream's items


def _count(items: Any, deadline_s: float) -> int | None:
    """How many items `items` yields, or None when it has not ended within `deadline_s` of its
    first item (the wait for the first is start-up: workers that spawn and import torch)."""
    import time

    end = None
    n = 0
    for _ in items:
        n += 1
        now = time.monotonic()
        if end is None:
            end = now + deadline_s
        elif now > end:
            return None
    return n


def _replayed_by_count(dataset: Any, loader_cls: Any, deadline_s: float, *, asked_worker: bool = False) -> bool | None:
    """Where two workers' first samples are equal, whether the stream is replayed by every
    worker or only looks so: a stream split across workers whose items are equal in content (an
    all-zero tensor with a label that restarts in each worker's shard) yields its N items once
    over 2 workers, a replayed one 2N. Counts the stream in this process and over a 2-worker
    DataLoader, each within `deadline_s`; True (replayed) where the 2 workers yield 1.5 N items
    or more. Where a count does not end in time: True, unless the workers asked which worker
    they are (`asked_worker`: they read `get_worker_info().id` or `.num_workers`, as a stream
    that splits its work does), then None (not decided, not flagged)."""
    undecided = None if asked_worker else True
    alone = _count(iter(dataset), deadline_s)
    if alone is None:
        return undecided
    if alone == 0:
        return True
    loader = loader_cls(dataset, batch_size=None, num_workers=2, timeout=deadline_s * 4)
    both = _count(iter(loader), deadline_s)
    return undecided if both is None else both >= 1.5 * alone


def _asked_flag() -> Any:
    """A flag shared with the probe's workers (`_watch_worker_info` sets it), or None where
    multiprocessing cannot make one here."""
    try:
        import multiprocessing

        return multiprocessing.Value("b", 0)
    except Exception:  # noqa: BLE001 - without it the count alone decides
        return None


def _watch_worker_info(asked: Any, worker_id: int) -> None:
    """The probe's worker_init_fn: puts a WorkerInfo in the worker's place for
    `torch.utils.data.get_worker_info()` that sets `asked` when the dataset reads its `id` or
    `num_workers` (which worker it is, as a stream that splits its work asks; its `seed` alone
    does not split). torch sets the worker's WorkerInfo before it calls worker_init_fn and makes
    the dataset's iterator after. Leaves torch's own in place where its layout differs."""
    try:
        from torch.utils.data._utils import worker as torch_worker

        info: Any = torch_worker._worker_info
        base = type(info)

        class _Watched(base):  # type: ignore[misc, valid-type]
            __slots__ = ()

            def __getattribute__(self, name: str) -> Any:
                if name in ("id", "num_workers"):
                    asked.value = 1
                return base.__getattribute__(self, name)  # type: ignore[call-arg]

        torch_worker._worker_info = _Watched(id=info.id, num_workers=info.num_workers, seed=info.seed,
                                             dataset=info.dataset)
    except Exception:  # noqa: BLE001 - torch's own WorkerInfo stays; the count alone decides
        pass


def _same(a: Any, b: Any, torch: Any) -> bool:
    """Whether two samples are equal in every part: tensors (shape, dtype, values), numpy
    arrays, containers (same keys or length, parts equal) and other values (==). A label or an
    index that differs makes them different even when the tensors are equal."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and bool(torch.equal(a, b)))
    if type(a).__module__ == "numpy" or type(b).__module__ == "numpy":
        import numpy

        try:
            return bool(numpy.array_equal(a, b))
        except Exception:  # noqa: BLE001 - incomparable parts are different parts
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], torch) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y, torch) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def preflight(
    results: list[ConfigResult],
    facts: WorkloadFacts | None,
    environment: dict[str, Any],
    machine: Machine,
    obs: SweepObserver,
) -> None:
    """Mark configs before they run: skip those that cannot fit in /dev/shm, warn about ones
    close to it and about oversubscription, flag an IterableDataset replayed by every worker.
    In a distributed sweep every rank on the node has its own workers: /dev/shm must hold all
    of theirs, and each rank's workers share the CPUs per rank."""
    free = (environment.get("shm") or {}).get("free_bytes")
    main_threads = environment.get("torch_num_threads")
    for res in results:
        s = res.settings
        if facts is not None:
            need = shm_need_bytes(s, facts.sample_bytes)
            need = None if need is None else need * machine.ranks_per_node
            host_need = host_memory_need_bytes(s, facts.sample_bytes)
            host_need = None if host_need is None else host_need * machine.ranks_per_node
            verdict = shm_verdict(need, free) or host_memory_verdict(
                host_need, environment.get("memory_available_bytes")
            )
            if verdict is not None:
                kind, message = verdict
                if kind == "skip":
                    res.status = "skipped"
                    res.error = message
                    obs.warning(f"{s.key()}: skipped: {message}")
                else:
                    res.warn(Note.of(WarningKind.SHARED_MEMORY, message))
            if facts.replicated_across_workers and s.num_workers >= 2:
                res.warn(Note.of(WarningKind.REPLICATED, REPLICATED_MESSAGE))
        if facts is not None and facts.iterable and machine.world_size > 1:
            res.warn(Note.of(
                WarningKind.RANKS_SHARE_STREAM,
                f"IterableDataset on {machine.world_size} ranks: each rank iterates its own copy; unless "
                "the dataset splits its stream by torch.distributed.get_rank(), the ranks load the same "
                f"samples and samples/s counts each of them {machine.world_size} times",
            ))
        if res.status == "skipped":
            continue  # a config that never runs is not oversubscribed either
        over = oversubscription(s, machine.cpus_per_rank, s.main_threads or main_threads)
        if over and machine.ranks_per_node > 1:
            over += f" (per rank: {machine.usable_cpus} CPUs / {machine.ranks_per_node} ranks on this node)"
        if over:
            res.warn(Note.of(WarningKind.OVERSUBSCRIBED, over))
