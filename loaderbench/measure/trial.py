"""One trial in the measuring process: build the dataset, the DataLoader for a config and the step,
run the timed loop (loop.py) with the window meter (meter.py), and assemble the `Trial`
(assembly.py, shared with the watch); or measure the compute ceiling.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from loaderbench.kinds import KINDS
from loaderbench.measure.assembly import assemble_trial
from loaderbench.measure.introspect import (
    TrackedLoader,
    _tracking_loader_class,
    copy_statistics,
    describe_dead_workers,
    ready_batches,
    stop_workers,
    unreadable_internals,
    working_workers,
)
from loaderbench.measure.loop import (
    WHOLE_EPOCH_WINDOW_MAX,
    loader_alone,
    probe_receive,
    settle_ceiling,
    timed_loop,
)
from loaderbench.measure.meter import WindowMeter, WindowReading
from loaderbench.measure.sampling import TimedBatchSampler
from loaderbench.measure.timing import (
    Clock,
    LoopTimes,
    dispatch_lag,
    early_warmup_for,
    full_queue_now,
    marker_for,
    warmup_for,
)
from loaderbench.model import (
    Ceiling,
    CeilingMethod,
    ComputeSpec,
    DatasetSpec,
    LoaderSettings,
    MeasureSpec,
    Note,
    Trial,
    TrialJob,
    WarningKind,
)

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
    bytes must be read before the H2D copy or the prefetcher moves the batch), and keeping the
    worker and completion instant of the latest batch taken from the loader in `last`: with the
    CUDA prefetcher the loop's `next()` takes batch N+1 from the loader while it hands over N,
    so N+1 is the one that `next()` waited for (`origin`)."""

    def __init__(self, loader: Any, sink: Callable[[Any], Any], on_epoch: Callable[[], None] | None = None) -> None:
        self.loader = loader
        self.sink = sink
        self.on_epoch = on_epoch
        self.last: tuple[int | None, float | None] = (None, None)

    def origin(self, _batch: Any = None) -> tuple[int | None, float | None]:
        """(worker id, completion instant) of the latest batch taken from the loader (loop.Origin)."""
        return self.last

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        if self.on_epoch is not None:
            self.on_epoch()
        first = True
        for b in self.loader:
            if first:
                self.sink(b)
                first = False
            self.last = (getattr(b, "worker_id", None), getattr(b, "done_at", None))
            yield b


def epoch_mode(spec: DatasetSpec, measure: MeasureSpec, iterable: bool) -> bool:
    """Whether the loop runs real epochs (see MeasureSpec.epoch_batches): with --epoch-batches,
    or for a dataset whose length means something (kinds.DatasetKind.own_length, or an
    IterableDataset)."""
    return bool(measure.epoch_batches) or iterable or KINDS[spec.kind].own_length


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
    """A collated batch with the number of samples in it (NOTE [samples per batch]), the
    DataLoader worker that built it (None: the main process) and the time.perf_counter() instant
    its collate finished there (NOTE [loader ceiling] in measure/loop.py). A namedtuple, so
    pin_memory, the prefetcher and `batch.move_to_device` keep it intact."""

    samples: int
    batch: Any
    worker_id: int | None = None
    done_at: float | None = None


class CountingCollate:
    """A collate function that returns `Counted(len(items), collate(items), worker id, the
    instant it finished)` (picklable, so it runs in spawned workers too)."""

    def __init__(self, collate: Callable[[list[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> Counted:
        from torch.utils.data import get_worker_info

        batch = self.collate(items)
        info = get_worker_info()
        return Counted(len(items), batch, None if info is None else info.id, time.perf_counter())


def worker_batches(batch_workers: Sequence[int | None], num_workers: int) -> list[int]:
    """Batches each of `num_workers` workers delivered (index = worker id), from the worker of
    every measured batch; [] without workers.

    >>> worker_batches([0, 0, 0, 0], 4)
    [4, 0, 0, 0]
    """
    out = [0] * num_workers
    for w in batch_workers:
        if w is not None and 0 <= w < num_workers:
            out[w] += 1
    return out


# Why a loader ceiling is a bound (Trial.loader_alone_note, by Trial.loader_alone_reason).
CEILING_BOUND_NOTES = {
    "time_cap": "not a sustained rate where a worker could not build its batches within the probe's time "
                "(at least the row's own samples/s)",
    "epoch_end": "not a sustained rate where the epoch ended before every worker built its batches in the probe "
                 "(at least the row's own samples/s)",
    "below_step_rate": "not a sustained rate where the probe read below the row's own samples/s with the step "
                       "(at least that)",
}


def samples_rule(spec: DatasetSpec, iterable: bool) -> str:
    """How a trial counts the samples of a batch: 'given' (--samples-per-batch), 'items'
    (IterableDataset: items collated) or 'indices' (map-style: indices the batch sampler gave)."""
    if spec.samples_per_batch:
        return "given"
    return "items" if iterable else "indices"


def check_sample_count(items: int | None, sizes: list[int] | None, *, iterable: bool, fixed: int | None,
                       rows: list[int] | None = None, dims: set[int] | None = None) -> str:
    """A warning when the first batch's shape disagrees with its sample count, '' otherwise (a
    given count is the user's). `items`: items the collate was given; `sizes`:
    batch.leading_sizes of the batch; `rows` and `dims`: batch.array_rows and batch.array_dims.

    IterableDataset: no array leaf or sequence has `items` rows, so its items are probably
    several samples each (give --samples-per-batch). Map-style (counted by indices): every array
    leaf leads with the same L < `items` rows and no dimension anywhere is `items`, so the
    collate probably dropped samples (a collate that skips bad ones): samples/s may be
    overstated by up to items / L.

    >>> check_sample_count(64, [2, 64, 64], iterable=True, fixed=None)
    ''
    >>> check_sample_count(16, [2, 12, 12], iterable=False, fixed=None, rows=[12, 12], dims={12, 3, 8})[:24]
    'samples per batch: the c'
    """
    if fixed or not items or not sizes or items in sizes:
        return ""
    if iterable:
        common = max(sorted(set(sizes)), key=sizes.count)
        return (
            f"samples per batch: the DataLoader collated {items} items per batch, but no part of the batch has "
            f"{items} rows (most common first dimension: {common}); if each item of the IterableDataset holds "
            "several samples, give --samples-per-batch"
        )
    if not rows or dims is None or items in dims or len(set(rows)) != 1 or rows[0] >= items:
        return ""
    kept = rows[0]
    return (
        f"samples per batch: the collate function was given {items} indices and returned arrays of {kept} rows: "
        f"if it drops samples, samples/s counts {items} per batch and overstates by up to {items / kept - 1:.0%}"
    )


def _storage_reads(
    dataset: Any, spec: DatasetSpec, sampler: TimedBatchSampler | None, loop: LoopTimes, batch_size: int,
    reading: WindowReading, epoch_io: Sequence[tuple[int | None, int | None]] = (),
) -> dict[str, Any]:
    """Bytes the process tree read over the window: from storage (psutil read_bytes: page-cache
    hits are not counted) and through read() (read_chars: hits included); the bytes the
    measured samples needed, and where they came from (storage.read_summary, NOTE [which cache
    served it]).

    Bytes needed: for a dataset of files with known paths (ImageFolder's `samples`) the sizes of
    the items the window loaded ("exact"); for any other dataset with --data paths, the samples
    measured times the mean bytes per sample, the files' total over the dataset's length
    ("estimated"); unknown otherwise (an IterableDataset without a length).

    Per epoch (`epoch_io`: the tree's counters at each epoch start, warm-up included): the bytes
    each complete epoch read from the device and through read() (`epoch_reads`). When the first
    epoch read at least half the files and every later one under a tenth, the samples after the
    first epoch came from a cache, whichever share of the window they were: `served_from` names
    that cache, judged on the later epochs against the files' total.
    """
    from loaderbench import storage

    read, wall_s = reading.read_bytes, reading.wall_s
    out: dict[str, Any] = {"storage_read_bytes": read, "storage_read_chars": reading.read_chars}
    needed: int | None = None
    samples = getattr(dataset, "samples", None)
    if sampler is not None and sampler.indices is not None and samples:
        try:
            sizes = [os.stat(path).st_size for path, _ in samples]
        except (OSError, TypeError, ValueError):
            sizes = []
        if sizes:
            start = (1 + loop.warmup_batches) * batch_size
            stop = start + len(loop.step_s) * batch_size
            needed = storage.needed_bytes(sampler.indices, sizes, start=start, stop=stop)
            out.update(needed_rule="exact", files_per_sample=1.0)
    files: list[Path] = []
    total_bytes = 0
    if spec.data_roots:
        files = _reused("data_files", spec.data_roots, lambda: storage.data_files(spec))
        total_bytes = _reused("data_bytes", spec.data_roots, lambda: sum(storage.file_sizes(files)))
        if needed is None:
            try:
                length = len(dataset)
            except TypeError:  # an IterableDataset without __len__
                length = 0
            if length > 0 and total_bytes > 0:
                needed = round(loop.samples * total_bytes / length)
                out.update(needed_rule="estimated", files_per_sample=len(files) / length)
    epochs = [(b[0] - a[0], None if a[1] is None or b[1] is None else b[1] - a[1])
              for a, b in zip(epoch_io, epoch_io[1:]) if a[0] is not None and b[0] is not None]
    if epochs:
        out["epoch_reads"] = [list(e) for e in epochs]
    if needed is None:
        return out
    memory_fs = False
    resident = None
    if spec.data_roots:
        fstype = _reused("data_fstype", spec.data_roots, lambda: storage.fstype_of(Path(spec.data_roots[0])))
        memory_fs = storage.is_memory_fs(fstype)
    mapped: bool | None = None

    def look_closer() -> None:  # only when the device gave almost nothing: residency and maps
        nonlocal resident, mapped
        if resident is None and not memory_fs:
            res = storage.residency(files[:: max(1, len(files) // 2000)])  # at most ~2,000 files
            resident = None if res is None or not res[1] else res[0] / res[1]
            mapped = storage.maps_any(files) if resident is not None and resident >= 0.5 else None

    if files and read is not None and read < storage.CACHE_MAX_FRACTION * needed:
        look_closer()
    summary = storage.read_summary(read, needed, wall_s, read_chars=reading.read_chars, memory_fs=memory_fs,
                                   resident_fraction=resident, mapped=mapped)
    if (len(epochs) >= 2 and total_bytes and epochs[0][0] >= 0.5 * total_bytes
            and all(e[0] < storage.CACHE_MAX_FRACTION * total_bytes for e in epochs[1:])):
        later_chars = [e[1] for e in epochs[1:]]
        chars = None if any(c is None for c in later_chars) else min(c for c in later_chars if c is not None)
        look_closer()
        later = storage.read_summary(max(e[0] for e in epochs[1:]), total_bytes, wall_s, read_chars=chars,
                                     memory_fs=memory_fs, resident_fraction=resident, mapped=mapped)
        out["served_after_first_epoch"] = True
        summary = dataclasses.replace(summary, served_from=later.served_from)
    out.update(needed_bytes=needed, storage_mb_per_s=summary.storage_mb_per_s, served_from=summary.served_from,
               data_resident_fraction=resident)
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

    from loaderbench.measure.sampling import EpochSampler, call_factory
    from loaderbench.workload import datasets

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
        from loaderbench.measure.ranks import RankShard

        sampler = RankShard(sampler, group.rank, group.world_size)
    return BatchSampler(sampler, batch_size, drop_last=False)


# NOTE [loader settings]
#     A user's loader (`--loader MODULE:NAME`: a DataLoader subclass such as torchdata's
#     StatefulDataLoader, or a function that builds a loader) is called as the DataLoader is: the
#     dataset, the measured batch sampler (batch_size for an IterableDataset), the counting
#     collate, the grid's keywords and its own keyword arguments (`--loader-arg`: one value of
#     each per config, `LoaderSettings.loader_args`; they apply to torch's DataLoader too, e.g.
#     `in_order`). The measurement reads the loader's live iterator (the batches ready, its
#     workers: measure/introspect.py), which it gets for torch's DataLoader by subclassing it;
#     a user's class is wrapped instead (`TrackedLoader` keeps the iterator its own __iter__
#     returned), so it runs as the user runs it. An iterator that does not keep torch's private
#     attributes is measured without them (a warm-up that ends on its batch count, a receive
#     probe that does not wait for a full queue, workers stopped by the loader's own shutdown),
#     and the row says what could not be read.


def build_loader(dataset: Any, spec: DatasetSpec, kwargs: dict[str, Any]) -> Any:
    """The trial's loader (NOTE [loader settings]): torch's DataLoader (a subclass that keeps its
    iterator), or the user's `spec.loader` called with the same arguments and wrapped in a
    `TrackedLoader`. Raises DataError when the user's loader cannot be imported, and what it
    raises when called."""
    if not spec.loader:
        return _tracking_loader_class()(dataset, **kwargs)
    from loaderbench.workload import datasets

    made = datasets.load_callable(spec.loader, "StatefulDataLoader", "--loader")(dataset, **kwargs)
    if not hasattr(type(made), "__iter__"):
        raise TypeError(f"--loader {spec.loader} returned a {type(made).__name__}, which cannot be iterated; "
                        "it must return a loader (an iterable of batches)")
    return TrackedLoader(made)


class WorkerThreadsError(RuntimeError):
    """This config's worker threads would deadlock (worker_threads.prepare_worker_threads)."""


def _set_worker_threads(threads: int, worker_id: int) -> None:
    """worker_init_fn for `--worker-threads`: intra-op threads of each DataLoader worker (torch
    sets 1 in workers by default)."""
    import torch

    torch.set_num_threads(threads)


@dataclass
class TrialSetup:
    """What both kinds of trial start from: the device, the timing method, the rank group of a
    distributed trial, and the built dataset."""

    device: Any
    device_name: str
    cuda: bool
    timing: str
    group: Any
    dataset: Any


# NOTE [warm measuring process]
#     A measuring process that serves many configs (measure/warm.py) keeps what is costly to
#     build and the same for every config of a sweep: the dataset object (and for a folder, its
#     file list), the compute step (the model on the device, cuDNN's chosen kernels) and the CUDA
#     context. Every config still gets a fresh DataLoader with fresh workers, its own thread
#     settings (the main process's intra-op threads are put back to their start value first),
#     and an emptied CUDA caching allocator; see `reset_between_configs`. `REUSE` is None in a
#     one-config process, so nothing is kept there.
REUSE: dict[str, Any] | None = None


def _reused(kind: str, key: Any, build: Callable[[], Any]) -> Any:
    """`build()`, or the object built for the same `key` earlier in a warm process."""
    if REUSE is None:
        return build()
    slot = f"{kind}:{key!r}"
    if slot not in REUSE:
        REUSE[slot] = build()
    return REUSE[slot]


def keep_between_configs() -> None:
    """Make this process a warm one: datasets and compute steps are kept across configs."""
    import torch

    global REUSE
    REUSE = {"threads": torch.get_num_threads()}


def reset_between_configs() -> None:
    """Put the process back as a fresh config finds it: torch's intra-op threads at their start
    value, garbage collected, the CUDA caching allocator emptied and its peak statistics reset."""
    import gc

    import torch

    if REUSE is not None:
        torch.set_num_threads(int(REUSE["threads"]))
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def set_up(job: TrialJob) -> TrialSetup:
    """Resolve the device (a rank takes cuda:LOCAL_RANK) and the timing, join the rank group of
    a distributed trial, and build the dataset. Raises what building the dataset raises."""
    import torch

    from loaderbench.workload import datasets

    local_rank = None if job.distributed is None else int(job.distributed.get("local_rank", 0))
    device_name = resolve_device(job.measure, local_rank)
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    group = None
    if job.distributed is not None:
        from loaderbench.measure.ranks import RankGroup

        group = RankGroup(job.distributed, device)
    dataset = _reused("dataset", (job.dataset.to_dict(), job.cache_dir), lambda: datasets.build_dataset(
        job.dataset, cache_dir=None if job.cache_dir is None else Path(job.cache_dir)))
    return TrialSetup(device, device_name, cuda, resolve_timing(job.measure, job.compute, device_name), group, dataset)


def _short_or_unsized(dataset: Any, settings: LoaderSettings) -> bool:
    """Whether an IterableDataset's epoch may be short enough to wait for in the window: it has
    no `__len__`, or that length in batches is at most WHOLE_EPOCH_WINDOW_MAX (NOTE [whole
    epochs in the window] in measure/loop.py)."""
    try:
        n = len(dataset)
    except Exception:  # noqa: BLE001 - no length (TypeError), or one that cannot be told
        return True
    return -(-n // max(1, settings.batch_size)) <= WHOLE_EPOCH_WINDOW_MAX


def _epoch_len(batch_sampler: Any) -> int | None:
    """Batches per epoch of a map-style trial (its batch sampler's length), None when unknown."""
    if batch_sampler is None:
        return None
    try:
        n = len(batch_sampler)
    except (TypeError, NotImplementedError):
        return None
    return n if n > 0 else None


def measure_config(job: TrialJob, *, on_batch: Callable[[int], None] | None = None) -> Trial:
    """Build a fresh DataLoader for `job.settings` and measure it (one trial).

    A distributed job (`job.distributed`) is one rank of a distributed trial: it joins the
    trial's process group, loads its own shard of the samples on its own device, ends each step
    with the gradient all-reduce, and agrees with the other ranks on the window (NOTE
    [distributed sweep] in distributed.py). `on_batch(i)` is called after every batch.

    Raises whatever the dataset, the DataLoader or the step raises (the isolated process turns it
    into a failed row), and ValueError when nothing could be measured.
    """
    import torch
    from torch.utils.data import IterableDataset, default_collate

    from loaderbench.machine import gpu
    from loaderbench.workload import batch as batch_mod
    from loaderbench.workload import compute as compute_mod
    from loaderbench.workload import datasets
    from loaderbench.workload.prefetch import CUDAPrefetcher

    t_job = time.perf_counter()
    settings, dataset_spec, compute_spec, measure, seed = job.settings, job.dataset, job.compute, job.measure, job.seed
    setup = set_up(job)
    device, cuda, timing, group, dataset = setup.device, setup.cuda, setup.timing, setup.group, setup.dataset
    # The synthetic dataset decoding with this config's decoder (NOTE [decoding on the GPU] in
    # workload/decode.py): nvjpeg's workers send the encoded bytes, decoded here on the device.
    dataset = _reused("decoder", (dataset_spec.to_dict(), job.cache_dir, settings.decoder),
                      lambda: datasets.with_decoder(setup.dataset, settings.decoder))
    gpu_decode = None
    if settings.decoder == "nvjpeg":
        if not cuda:
            from loaderbench.errors import UsageError

            raise UsageError("--decoder nvjpeg decodes on a CUDA GPU and this trial runs on the CPU; use --decoder "
                             "pil or torchvision")
        from loaderbench.workload.decode import GPUDecode

        gpu_decode = GPUDecode(device)
    # Every batch carries its worker and completion instant (CountingCollate, below): the row is
    # held to the workers' production, so the warm-up need not drain a slow refill to its end.
    warmup, max_warmup = warmup_for(settings, measure.warmup_batches, completions=True)
    total_batches = 1 + max_warmup + measure.max_batches
    if settings.main_threads is not None:
        torch.set_num_threads(settings.main_threads)
    kwargs = settings.dataloader_kwargs()
    if settings.worker_threads is not None and settings.num_workers > 0:
        from loaderbench.measure.threads import prepare_worker_threads

        unsafe = prepare_worker_threads(settings.worker_threads, settings.mp_context, num_workers=settings.num_workers)
        if unsafe:
            raise WorkerThreadsError(unsafe)
        kwargs["worker_init_fn"] = functools.partial(_set_worker_threads, settings.worker_threads)
    collate = datasets.build_collate_fn(dataset_spec) or default_collate
    if gpu_decode is not None:
        from loaderbench.workload.decode import EncodedCollate

        collate = EncodedCollate(collate)
    kwargs["collate_fn"] = CountingCollate(collate)
    iterable = isinstance(dataset, IterableDataset)
    epochs = epoch_mode(dataset_spec, measure, iterable)
    batch_sampler: TimedBatchSampler | None = None
    epoch_samples: int | None = None  # the indices an epoch draws, where that is its samples
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
        if epochs and not dataset_spec.sampler and not dataset_spec.samples_per_batch:
            epoch_samples = per_epoch
    loader = build_loader(dataset, dataset_spec, kwargs)

    step = _reused("step", (compute_spec.to_dict(), str(device), group is not None),
                   lambda: compute_mod.build_compute(compute_spec, device, distributed=group is not None))
    first_raw: dict[str, Any] = {}

    def first_batch(c: Counted) -> None:
        first_raw.setdefault("info", batch_mod.inspect_batch(c.batch))
        if gpu_decode is not None:  # bytes the decoder copies itself, not the H2D copy
            from loaderbench.workload.decode import EncodedJPEGs

            first_raw.setdefault("encoded", sum(x.nbytes for x in c.batch if isinstance(x, EncodedJPEGs)))
        first_raw.setdefault("sizes", batch_mod.leading_sizes(c.batch))
        first_raw.setdefault("rows", batch_mod.array_rows(c.batch))
        first_raw.setdefault("dims", batch_mod.array_dims(c.batch))
        first_raw.setdefault("items", c.samples)

    epoch_io: list[tuple[int | None, int | None]] = []  # the tree's (read_bytes, read_chars) at each epoch start

    def on_epoch() -> None:
        from loaderbench import storage

        epoch_io.append(storage.io_tree())

    inspected = _InspectFirst(loader, first_batch, on_epoch if dataset_spec.data_roots else None)
    fixed = dataset_spec.samples_per_batch

    def count(c: Counted) -> int:
        return fixed if fixed else c.samples

    # The H2D copy: done by the prefetcher on its side stream, or here on the compute stream
    # (non_blocking only from pinned memory, where it can be asynchronous), or not at all on CPU.
    # Every copy is bracketed by CUDA events (on the side stream for the prefetcher, on the
    # compute stream otherwise): copy time, GB/s and how much of it compute hid. With
    # --decoder nvjpeg the batch is then decoded on the device, after the copy and on the same
    # stream (NOTE [decoding on the GPU]), before it is usable.
    source: Iterable[Any] = inspected
    copy_here = cuda and not settings.prefetch
    copy_events: list[Any] = []

    decode_spent = [0.0]  # the main thread's running seconds in the GPU decode

    def decode_on_device(c: Counted) -> Counted:
        if gpu_decode is None:
            return c
        t = time.perf_counter()
        out = c._replace(batch=gpu_decode(c.batch))
        decode_spent[0] += time.perf_counter() - t
        return out

    if cuda and settings.prefetch:
        prefetcher = CUDAPrefetcher(inspected, device=device, record_copy_events=True,
                                    transform=None if gpu_decode is None else decode_on_device)
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
        return decode_on_device(out)

    marker = marker_for(timing)

    def reset_gpu() -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)

    meter = WindowMeter(gpu.make_util_sampler(device.index if cuda else None), reset_gpu=reset_gpu if cuda else None)
    window: dict[str, WindowReading] = {}

    def on_window_end() -> None:
        # CPU, memory and GPU utilisation cover the measured window only (not the probe after it).
        window["reading"] = meter.stop()

    alone: dict[str, Any] = {}

    def after_window(it: Iterator[Any], period: float) -> tuple[list[float], list[float]]:
        t0 = time.perf_counter()
        try:
            return _after_window(it, period)
        finally:
            alone["probe_s"] = time.perf_counter() - t0

    def _after_window(it: Iterator[Any], period: float) -> tuple[list[float], list[float]]:
        # period < 0: the window already timed enough receives (NOTE [receive in the window]).
        cpu: list[float] = []
        received = [] if period < 0 else probe_receive(
            it, num_workers=settings.num_workers, prefetch_factor=settings.prefetch_factor or 0,
            period_s=period, ready_count=lambda: ready_batches(loader), origin=inspected.origin,
            decode_time=None if gpu_decode is None else (lambda: decode_spent[0]), cpu_out=cpu,
        )
        if not job.loader_alone:
            return received, cpu
        sync = torch.cuda.synchronize if cuda else None
        alone.update(
            loader_alone(
                it, prepare, count, origin=inspected.origin, num_workers=settings.num_workers, sync=sync,
                restart=(lambda: iter(source)) if epochs else None,
                prefetch_factor=settings.prefetch_factor or 2, in_order=settings.in_order,
                ahead=1 if cuda and settings.prefetch else 0,
            )
        )
        return received, cpu

    if group is not None:
        group.barrier()  # every rank has its loader and step built: the trial starts together
    setup_s = time.perf_counter() - t_job
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
            full_queue=full_queue_now(settings, lambda: working_workers(loader)),
            early_warmup=early_warmup_for(settings, measure.warmup_batches),
            # Whole epochs only where no files are read (NOTE [whole epochs in the window]).
            epoch_len=_epoch_len(batch_sampler) if epochs and not dataset_spec.data_roots else None,
            learn_epoch=epochs and iterable and not dataset_spec.data_roots and _short_or_unsized(dataset, settings),
            after_window=after_window,
            agree=None if group is None else group.agree,
            sampler_time=None if batch_sampler is None else (lambda: batch_sampler.spent_s),
            decode_time=None if gpu_decode is None else (lambda: decode_spent[0]),
            origin=inspected.origin,
            cpu_clock=time.process_time,
            dispatch_lag=dispatch_lag(settings, own_loader=bool(dataset_spec.loader)),
            round_batches=max(1, settings.num_workers),  # NOTE [a window of whole rounds]
        )
    except RuntimeError as exc:
        dead = describe_dead_workers(loader)
        if dead:
            raise RuntimeError(f"{exc} [{dead}]") from exc
        raise
    unread = unreadable_internals(loader, settings.num_workers) if dataset_spec.loader else []
    t_stop = time.perf_counter()
    stop_workers(loader)  # NOTE [stopping a measured config's workers]
    stop_s = time.perf_counter() - t_stop
    reading = window["reading"]
    info = first_raw.get("info")
    if cuda:
        torch.cuda.synchronize()  # every copy event complete (the prefetcher's run on its side stream)
    h2d_s, hidden = copy_statistics(
        copy_events, loop.busy_s, getattr(marker, "seconds", None),
        measured=len(loop.step_s), batches_total=1 + loop.warmup_batches + len(loop.step_s),
    )
    reads = _storage_reads(dataset, dataset_spec, batch_sampler, loop, settings.batch_size, reading, epoch_io)
    step_total = sum(loop.step_s)
    with_step = loop.samples / step_total if step_total > 0 else None
    if with_step is not None and loop.production_samples_per_s:
        with_step = min(with_step, loop.production_samples_per_s)  # NOTE [production in the window]
    alone = settle_ceiling(alone, with_step)
    if alone.get("method") == "bound":
        alone["note"] = CEILING_BOUND_NOTES.get(alone.get("reason") or "", "not a sustained rate")
    if reads.get("served_from") in ("storage", "mixed") and alone.get("method") is not None:
        # The probe ran after a window that read from the device, on pages that window (and the
        # probe's own new epoch) left in the page cache: it would be a cache's rate, not this
        # config's loader ceiling on this storage.
        alone = {"probe_s": alone.get("probe_s"), "worker_batches": alone.get("worker_batches"), "note": (
            "not a storage rate: after a window served from the device the probe reads pages "
            "the window left in the page cache")}
    trial = assemble_trial(
        loop,
        timing=timing,
        reading=reading,
        first_batch=info,
        cuda=cuda,
        h2d=cuda,
        pin_memory=settings.pin_memory,
        torch_threads_main=torch.get_num_threads(),
        samples_rule=samples_rule(dataset_spec, iterable),
        h2d_s=h2d_s,
        h2d_hidden_fraction=hidden,
        gpu_mem_peak_bytes=int(torch.cuda.max_memory_reserved(device)) if cuda else None,
        torch_threads_worker=(settings.worker_threads or 1) if settings.num_workers else None,
        loader_alone_samples_per_s=alone.get("samples_per_s"),
        loader_alone_note=alone.get("note"),
        loader_alone_method=alone.get("method"),
        loader_alone_bound_samples_per_s=alone.get("bound_samples_per_s"),
        loader_alone_reason=alone.get("reason"),
        loader_alone_probe_samples_per_s=alone.get("probe_samples_per_s"),
        loader_alone_build_se=alone.get("build_se"),
        loader_alone_intervals=alone.get("intervals"),
        loader_alone_worker_batches=list(alone.get("worker_batches") or []),
        worker_batches=worker_batches(loop.batch_workers, settings.num_workers),
        # An IterableDataset has no length: it tells its epoch by ending one in the loop.
        epoch_batches=(None if not epochs else _epoch_len(batch_sampler) if not iterable
                       else loop.first_epoch[0] if loop.first_epoch else None),
        epoch_samples=(epoch_samples if not (epochs and iterable)
                       else loop.first_epoch[1] if loop.first_epoch else None),
        probe_s=alone.get("probe_s"),
        setup_s=setup_s,
        stop_s=stop_s,
        **reads,
        rank=None if group is None else group.rank,
        world_size=None if group is None else group.world_size,
    )
    if group is not None:
        group.barrier()  # ... and ends together (the probes after the window are per rank)
    if first_raw.get("encoded") and trial.h2d_bytes_per_batch is not None:
        trial.h2d_bytes_per_batch = max(0, trial.h2d_bytes_per_batch - int(first_raw["encoded"]))
    check = check_sample_count(first_raw.get("items"), first_raw.get("sizes"), iterable=iterable, fixed=fixed,
                               rows=first_raw.get("rows"), dims=first_raw.get("dims"))
    if check:
        trial.notes.append(Note.of(WarningKind.SAMPLE_COUNT, check))
    if unread:
        trial.notes.append(Note.of(WarningKind.OTHER, f"--loader {dataset_spec.loader}: its iterator does not show "
                                   + " nor ".join(unread)))
    return trial


def measure_compute_ceiling(job: TrialJob, *, clock: Clock = time.perf_counter) -> Ceiling:
    """The compute ceiling at `job.settings.batch_size`: the step fed one batch, already on the
    device, over and over.

    A distributed job is measured on every rank at once with the gradient all-reduce in the step
    (DDP), the ranks agreeing on when to stop; the result is this rank's.

    No loader, no copy: the most samples/s the step can take. One batch of `batch_size` samples
    (indices 0..batch_size-1, wrapping around, collated with the dataset's collate function) is
    moved to the device once; the step then runs `warmup_batches` times untimed and at least
    `batches` times and `min_time_s` seconds timed, end to end (CUDA events around the whole run
    on a GPU, so launch gaps count as they would in training).
    Returns the measured `Ceiling` (its `samples_per_batch`: the samples in the batch fed).
    """
    import torch
    from torch.utils.data import IterableDataset, default_collate

    from loaderbench.workload import batch as batch_mod
    from loaderbench.workload import compute as compute_mod
    from loaderbench.workload import datasets

    dataset_spec, compute_spec, measure, batch_size = job.dataset, job.compute, job.measure, job.settings.batch_size
    setup = set_up(job)
    device, device_name, cuda, group, dataset = setup.device, setup.device_name, setup.cuda, setup.group, setup.dataset
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
    step = _reused("step", (compute_spec.to_dict(), str(device), group is not None),
                   lambda: compute_mod.build_compute(compute_spec, device, distributed=group is not None))
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
    fed = dataset_spec.samples_per_batch or len(samples)
    return Ceiling(batch_size, fed / step_s, step_s, CeilingMethod.MEASURED, samples_per_batch=fed, batches=count,
                   device=device_name)
