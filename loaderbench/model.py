"""Typed records shared by every module: settings, workloads, trials, results.

No I/O and no torch here: `show` and `compare` import this on a CPU-only runner and must start
fast. Every record converts to and from plain JSON-able dicts (`to_dict` / `from_dict`), which is
the only serialisation loaderbench uses (no pickle anywhere).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from loaderbench import parsers

Status = Literal["ok", "failed", "hung", "skipped", "interrupted"]
MP_CONTEXTS = parsers.MP_CONTEXTS


class ServedFrom(str, Enum):
    """Where a window's samples came from (storage.read_summary decides it from the bytes read
    from the device, the bytes read() returned and the residency of the files; NOTE [which cache
    served it]). `Trial.served_from` holds the value."""

    STORAGE = "storage"  # at least 90% of the bytes needed came from the device
    PAGE_CACHE = "page cache"  # read() returned them, the device did not: the OS page cache
    MEMORY_FS = "memory filesystem"  # the files live on tmpfs/ramfs: no device to read
    DATASET_CACHE = "dataset cache"  # neither the device nor read() saw them: a cache in the dataset
    CACHE = "cache"  # a cache whose kind the counters cannot tell (e.g. memory-mapped files)
    MIXED = "mixed"  # part from the device, part from a cache
    UNKNOWN = "unknown"  # no counters, or the bytes needed are not known

    @property
    def is_cache(self) -> bool:
        """Whether the samples came from a cache rather than the device."""
        return self in (ServedFrom.PAGE_CACHE, ServedFrom.MEMORY_FS, ServedFrom.DATASET_CACHE, ServedFrom.CACHE)


class Verdict(str, Enum):
    """What binds one measured config (analysis/wait.py decides it from the wait breakdown).

    The values are what the table prints; `Summary.verdict` holds the value.
    """

    COMPUTE_BOUND = "compute-bound"  # the step (almost) never waited
    LOADER_BOUND = "loader-bound"  # workers (or, with 0 workers, the main process) late building batches
    RECEIVE_FLOOR = "receive floor"  # the main process taking finished batches from workers
    H2D_PAGEABLE = "H2D-bound (pageable copy)"  # the host-to-device copy, from pageable memory
    H2D_NOT_HIDDEN = "H2D-bound (copy not hidden)"  # a pinned copy on the step's stream
    EPOCH_START_BOUND = "epoch-start-bound"  # the gaps at epoch starts (workers starting, the pipeline refilling)
    SAMPLER_BOUND = "sampler-bound"  # the sampler drawing indices in the main process
    LOADER_ALONE = "loader alone"  # --compute none: no step to starve


class WaitPart(str, Enum):
    """The measured parts a config's data-wait is split into (NOTE [what the wait is made of] in
    analysis/wait.py)."""

    H2D = "h2d"  # the host-to-device copy on the step's path
    SAMPLER = "sampler"  # drawing indices in the main process
    EPOCH_START = "epoch-start"  # an epoch's start: workers starting, or its first batch built with none in flight
    RECEIVE = "receive"  # taking a finished batch from a worker (the receive floor)
    LOADER = "loader"  # the rest: batches not built in time (fetch + prep)


class FindingKind(str, Enum):
    """The kinds of `Finding` the analysis draws (analysis/advice.py makes them, render/ writes
    their sentences)."""

    KNEE = "knee"  # the recommended config's throughput, stall and input-bound band
    ALSO_FASTEST = "also-fastest"  # the knee is the fastest config ranked
    BEST_WITHIN_TOLERANCE = "best-within-tolerance"  # a faster config exists, within tolerance
    LOADER_ALONE = "loader-alone"  # --compute none: the loader's own ceiling
    REMAINING_WAIT = "remaining-wait"  # what the knee's wait is made of, and what acts on it
    NOT_CLEARED = "not-cleared"  # even the best config is loader-bound, and why
    LOWEST_STALL = "lowest-stall"  # the floor of stall every config pays
    STEP_SLOWER = "step-slower-beside-loader"  # the knee's step runs slower than alone
    STEP_BINDS = "step-binds"  # past the knee the step itself binds
    TRANSFER = "transfer"  # the worker->main hand-off is a large part of the wait
    MORE_NOT_BETTER = "more-not-better"  # configs past the knee cost CPU for little
    STARTUP = "start-up"  # worker start-up against the epoch length
    EPOCH_FASTER = "epoch-faster"  # counting start-up per epoch, another config is faster (predicted)
    THREADS = "threads"  # the knee's thread settings, as code
    OVERSUBSCRIBED = "oversubscribed"  # the knee has more workers (or threads) than CPUs
    MEMORY_PER_WORKER = "memory-per-worker"  # a setting multiplies memory per worker
    PARTIAL_BATCHES = "partial-batches"  # batches held clearly fewer samples than batch_size
    SERVED_FROM_CACHE = "served-from-cache"  # rows whose samples came from a cache, not the device
    OTHER_LOAD = "other-load"  # other processes used the usable CPUs during the windows
    NONE_MEASURED = "none-measured"  # nothing could be ranked


class WarningKind(str, Enum):
    """What a warning on a config (or a note of a trial) is about; its message says it in words."""

    REPLICATED = "replicated"  # an IterableDataset every worker replays: counts duplicates, not ranked
    OVERSUBSCRIBED = "oversubscribed"  # more workers (or threads) than usable CPUs
    SHARED_MEMORY = "shared-memory"  # batches in flight close to the free /dev/shm
    PINNING_INEFFECTIVE = "pinning-ineffective"  # pin_memory=True but no tensor came back pinned
    CACHE_NOT_ACHIEVED = "cache-not-achieved"  # --cache asked for a state the files could not reach
    LOADER_ENDED = "loader-ended"  # the loader ended before the window was full
    FEW_BATCHES = "few-batches"  # fewer batches measured than --batches
    SAMPLE_COUNT = "sample-count"  # an IterableDataset's items may be several samples each
    RANKS_SHARE_STREAM = "ranks-share-stream"  # an IterableDataset on several ranks
    OTHER = "other"

    @classmethod
    def of_text(cls, text: str) -> WarningKind:
        """The kind of a warning written as plain text (result files of schema 1)."""
        for prefix, kind in _WARNING_PREFIXES:
            if prefix in text:
                return kind
        return cls.OTHER


_WARNING_PREFIXES: tuple[tuple[str, WarningKind], ...] = (
    ("IterableDataset duplicated across workers", WarningKind.REPLICATED),
    ("oversubscribed", WarningKind.OVERSUBSCRIBED),
    ("/dev/shm", WarningKind.SHARED_MEMORY),
    ("pinning ineffective", WarningKind.PINNING_INEFFECTIVE),
    ("--cache ", WarningKind.CACHE_NOT_ACHIEVED),
    ("the loader ended after", WarningKind.LOADER_ENDED),
    ("an epoch yielded no batch", WarningKind.LOADER_ENDED),
    ("batches measured (fewer than --batches", WarningKind.FEW_BATCHES),
    ("samples per batch:", WarningKind.SAMPLE_COUNT),
    ("IterableDataset on ", WarningKind.RANKS_SHARE_STREAM),
)


@dataclass(frozen=True)
class Note:
    """A warning on a config, or a note a trial made: `kind` (a WarningKind value) for the code
    to act on, `message` for the person."""

    kind: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | str) -> Note:
        """From `to_dict` output, or from a plain string (schema 1), its kind read from the text."""
        if isinstance(d, str):
            return cls(WarningKind.of_text(d).value, d)
        return cls(str(d.get("kind") or WarningKind.OTHER.value), str(d.get("message") or ""))

    @classmethod
    def of(cls, kind: WarningKind, message: str) -> Note:
        return cls(kind.value, message)


@dataclass
class Finding:
    """One conclusion of the analysis, as data: `kind` names it (analysis/advice.py lists the
    kinds), `config` the settings key it concerns (if any), `data` the figures a sentence needs.
    Sentences are written from findings in render/ only."""

    kind: str
    config: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "config": self.config, "data": dict(self.data)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(kind=str(d["kind"]), config=d.get("config"), data=dict(d.get("data") or {}))


def _onoff(v: Any) -> str:
    return "on" if v else "off"


@dataclass(frozen=True)
class Axis:
    """One grid axis: the one declaration of a DataLoader knob. Everything else is derived from
    it: the `LoaderSettings` field of that name, the TOML key in [grid] and the flag (`--` + name
    with dashes), its parser and default, grid expansion and normalisation, its part of the
    settings key, the DataLoader keyword, the table column and its n/a rule, and its place in
    the structural cost order (analysis/knee.py).

    `parse` takes one value (the flag or TOML key takes a comma list of them); `default` None
    means "chosen for this machine" (sweep.resolve_defaults). `workers_only`: means nothing
    without workers (normalised to `idle` there and shown n/a); `cuda_only`: means nothing
    without CUDA (normalised off, its column hidden). `key(value)` is its part of the settings
    key (None: left out). `order(value)`: smaller is cheaper. `loader_kw`: the DataLoader
    keyword it is (None: not one, or not when None). `optional`: a setting left at torch's
    default unless asked for (its column is hidden then). `outer`: expanded first, so the rows
    of one value read as a worker curve.
    """

    name: str
    parse: Callable[[Any], Any]
    default: tuple[Any, ...] | None
    metavar: str
    help: str
    header: str
    key: Callable[[Any], str | None]
    cell: Callable[[Any], str]
    order: Callable[[Any], int]
    loader_kw: str | None = None
    workers_only: bool = False
    cuda_only: bool = False
    idle: Any = None
    optional: bool = False
    outer: bool = False


GRID_AXES: tuple[Axis, ...] = (
    Axis("num_workers", parsers.int_in(0, 1024), None, "N,N...",
         "DataLoader worker processes (default: 0, powers of two below the usable CPUs, and that count).",
         "workers", lambda v: f"w{v}", str, int, loader_kw="num_workers"),
    Axis("pin_memory", parsers.boolean, (False, True), "off,on", "Pinned (page-locked) host memory for the batches.",
         "pin", lambda v: "pin" if v else "nopin", _onoff, int, loader_kw="pin_memory", cuda_only=True, idle=False),
    Axis("prefetch", parsers.boolean, (False, True), "off,on",
         "loaderbench's CUDA-stream prefetcher (copies batch N+1 while N computes).",
         "prefetch", lambda v: "pf" if v else "nopf", _onoff, int, cuda_only=True, idle=False),
    Axis("prefetch_factor", parsers.int_in(1, 1024), (2,), "N,N...", "Batches each worker builds ahead.",
         "pf", lambda v: f"f{v}" if v is not None else "f-", str, lambda v: v or 0,
         loader_kw="prefetch_factor", workers_only=True, idle=None),
    Axis("persistent_workers", parsers.boolean, (False,), "off,on", "Keep the workers between epochs.",
         "persist", lambda v: "persist" if v else "once", _onoff, int,
         loader_kw="persistent_workers", workers_only=True, idle=False),
    Axis("batch_size", parsers.int_in(1, 1_000_000), None, "N,N...", "Samples per batch (default: 256 with a GPU, 64 without).",
         "batch", lambda v: f"b{v}", str, int, loader_kw="batch_size", outer=True),
    Axis("mp_context", parsers.mp_context, (None,), "fork,spawn,forkserver",
         "Start method of the workers (default: the platform's).",
         "start method", lambda v: v or None, lambda v: v or "default", lambda v: {None: 0, "fork": 0, "forkserver": 1}.get(v, 2),
         loader_kw="multiprocessing_context", workers_only=True, idle=None, optional=True),
    Axis("worker_threads", parsers.int_in(1, 1024), (None,), "N,N...",
         "Intra-op threads set in each worker at start (torch's default is 1).",
         "worker threads", lambda v: None if v is None else f"wt{v}", lambda v: str(v or 1), lambda v: v or 1,
         workers_only=True, idle=None, optional=True),
    Axis("main_threads", parsers.int_in(1, 1024), (None,), "N,N...",
         "Intra-op threads of the main process (default: torch's).",
         "main threads", lambda v: None if v is None else f"mt{v}", lambda v: "default" if v is None else str(v),
         lambda v: v or 0, optional=True),
)
AXES_BY_NAME = {a.name: a for a in GRID_AXES}


@dataclass(frozen=True)
class LoaderSettings:
    """One point of the sweep grid: the `DataLoader` keywords plus loaderbench's `prefetch`; one
    field per axis of GRID_AXES (which says what each means).

    `prefetch_factor` is None when `num_workers == 0` (the DataLoader rejects any other value
    there); `persistent_workers` is then False. `worker_threads` / `main_threads`: intra-op
    threads (`torch.set_num_threads`) set in each worker at start / in the main process; None
    leaves torch's defaults (1 in DataLoader workers, the CPU count in the main process).
    `prefetch` means the CUDA-stream prefetcher (`loaderbench.CUDAPrefetcher`) wraps the loader.
    `mp_context` None means the platform default.
    """

    num_workers: int
    pin_memory: bool
    prefetch: bool
    prefetch_factor: int | None
    persistent_workers: bool
    batch_size: int
    mp_context: str | None = None
    worker_threads: int | None = None
    main_threads: int | None = None

    def key(self) -> str:
        """A short stable identifier, e.g. `w4-pin-pf-f2-once-b64` (used to match configs): every
        axis's part, in GRID_AXES order."""
        parts = (a.key(getattr(self, a.name)) for a in GRID_AXES)
        return "-".join(p for p in parts if p)

    def dataloader_kwargs(self) -> dict[str, Any]:
        """The keyword arguments to pass to `torch.utils.data.DataLoader` (no `prefetch`): the
        axes that are DataLoader keywords, those that mean something without workers only with
        workers, and an optional one only when set."""
        kwargs: dict[str, Any] = {}
        for a in sorted(GRID_AXES, key=lambda a: not a.outer):  # batch_size first, as people write it
            value = getattr(self, a.name)
            if a.loader_kw is None or (a.workers_only and self.num_workers == 0) or (a.optional and value is None):
                continue
            kwargs[a.loader_kw] = value
        return kwargs

    def structural_key(self) -> tuple[int, ...]:
        """The fixed cost order among configs of equal measured cost (NOTE [cost order] in
        analysis/knee.py): every axis's `order`, workers first, then the axes in GRID_AXES
        order, batch size last."""
        first = [a for a in GRID_AXES if a.name == "num_workers"]
        last = [a for a in GRID_AXES if a.outer]
        middle = [a for a in GRID_AXES if a not in first and a not in last]
        return tuple(a.order(getattr(self, a.name)) for a in first + middle + last)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoaderSettings:
        """From `to_dict` output; an axis missing from `d` (a file written before the axis existed)
        takes its idle value."""
        values: dict[str, Any] = {}
        for a in GRID_AXES:
            v = d.get(a.name, a.idle)
            values[a.name] = v if v is None else a.parse(v)
        return cls(**values)


@dataclass(frozen=True)
class DatasetSpec:
    """What to load. `kind` is `synthetic`, `folder`, `tensor` or `import` (`MODULE:FACTORY`).

    - synthetic: `num_samples` JPEGs of `image_size` (W, H), made in memory from `seed`.
    - folder: a torchvision ImageFolder at `data_path`.
    - tensor: `num_samples` tensors of `sample_shape` costing `cpu_ms` busy CPU + `io_ms` sleep.
    - import: `factory` = "module:callable", called with `kwargs`; optional `collate_fn`;
      `data_path`, when given, names the files it reads (passed as `root` to a factory that
      takes a `root` parameter the kwargs do not set).

    `sampler`: "module:callable" making the user's own sampler or batch sampler from the dataset
    (map-style datasets; see sampling.call_factory); `sampler_kind` ("sampler" or
    "batch_sampler") is what it turned out to be, filled in before the sweep.
    `samples_per_batch`: the number of samples in every batch, when the DataLoader's own count
    (indices per batch, or items collated for an IterableDataset) is not it (items that are
    themselves several samples).
    """

    kind: str = "synthetic"
    data_path: str | list[str] | None = None  # one root (a string) or several (a list)
    num_samples: int = 512
    image_size: tuple[int, int] = (500, 375)
    jpeg_quality: int = 90
    sample_shape: tuple[int, ...] = (3, 64, 64)
    cpu_ms: float = 0.0
    io_ms: float = 0.0
    factory: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    collate_fn: str | None = None
    seed: int = 0
    sampler: str | None = None
    sampler_kind: str | None = None
    samples_per_batch: int | None = None

    @property
    def data_roots(self) -> tuple[str, ...]:
        """The --data paths: the folder dataset's root, or the folders and files a MODULE:FACTORY
        dataset reads ((), when none was given)."""
        if not self.data_path:
            return ()
        return (self.data_path,) if isinstance(self.data_path, str) else tuple(self.data_path)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["image_size"] = list(self.image_size)
        d["sample_shape"] = list(self.sample_shape)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DatasetSpec:
        d = dict(d)
        if "image_size" in d:
            d["image_size"] = tuple(d["image_size"])
        if "sample_shape" in d:
            d["sample_shape"] = tuple(d["sample_shape"])
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class ComputeSpec:
    """The step that consumes each batch: `none`, `sleep` (ms), `spin` (ms, GPU) or `model`."""

    kind: str = "sleep"
    ms: float = 0.0
    model: str | None = None

    def label(self) -> str:
        if self.kind == "none":
            return "none"
        if self.kind == "model":
            return f"model:{self.model}"
        return f"{self.kind}:{self.ms:g}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ComputeSpec:
        return cls(kind=d["kind"], ms=float(d.get("ms", 0.0)), model=d.get("model"))


@dataclass(frozen=True)
class MeasureSpec:
    """How long to measure one config.

    `warmup_batches` are dropped after the first batch; the drop is raised to
    `num_workers * prefetch_factor` so the backlog built during start-up is drained (see the NOTE
    in measure/loop.py). Then at least `batches` batches and at least `min_time_s` seconds are measured,
    capped at `max_batches`. `epoch_batches`: batches per epoch (a new `iter()` of the loader
    every so many batches, so worker start-up and `persistent_workers` count as in training);
    None: a real dataset's own length (folder, import, IterableDataset), one long epoch for the
    synthetic and tensor datasets, whose length is arbitrary.
    """

    batches: int = 10
    warmup_batches: int = 3
    min_time_s: float = 1.0
    max_batches: int = 10_000
    timing: str = "auto"  # auto | events | sync | host
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    epoch_batches: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MeasureSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class TrialJob:
    """One trial for a measuring process to run: what to load, run and measure, and the limits
    of the process that measures it.

    `kind`: "config" (one timed run of `settings`) or "ceiling" (the compute ceiling at
    `settings.batch_size`). `seed`: of this repeat. `timeout_s`: the watchdog's limit for the
    whole trial; `first_batch_timeout_s`: its limit before the first batch (None: `timeout_s`).
    `distributed`: this rank's place in a distributed trial (measure.ranks.RankGroup's spec;
    None for a single process). `loader_alone`: whether the trial probes the loader ceiling after
    its window (False for a config whose earlier trial probed it: NOTE [loader ceiling] in
    measure/loop.py). `cache`: the page-cache state the trial runs in ("as-is", "cold" or
    "warm"), which the parent sets before it starts (on every node of a distributed sweep).
    """

    settings: LoaderSettings
    dataset: DatasetSpec
    compute: ComputeSpec
    measure: MeasureSpec
    kind: str = "config"
    seed: int = 0
    cache_dir: str | None = None
    timeout_s: float = 600.0
    first_batch_timeout_s: float | None = None
    distributed: dict[str, Any] | None = None
    loader_alone: bool = True
    cache: str = "as-is"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "settings": self.settings.to_dict(),
            "dataset": self.dataset.to_dict(),
            "compute": self.compute.to_dict(),
            "measure": self.measure.to_dict(),
            "seed": self.seed,
            "cache_dir": self.cache_dir,
            "timeout_s": self.timeout_s,
            "first_batch_timeout_s": self.first_batch_timeout_s,
            "distributed": self.distributed,
            "loader_alone": self.loader_alone,
            "cache": self.cache,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialJob:
        return cls(
            settings=LoaderSettings.from_dict(d["settings"]),
            dataset=DatasetSpec.from_dict(d["dataset"]),
            compute=ComputeSpec.from_dict(d["compute"]),
            measure=MeasureSpec.from_dict(d["measure"]),
            kind=str(d.get("kind", "config")),
            seed=int(d.get("seed", 0)),
            cache_dir=d.get("cache_dir"),
            timeout_s=float(d.get("timeout_s", 600.0)),
            first_batch_timeout_s=None if d.get("first_batch_timeout_s") is None else float(d["first_batch_timeout_s"]),
            distributed=d.get("distributed"),
            loader_alone=bool(d.get("loader_alone", True)),
            cache=str(d.get("cache", "as-is")),
        )


@dataclass
class Trial:
    """Raw measurements of one fresh DataLoader run of one config (one repeat).

    Per-batch lists have one entry per measured batch (warm-up excluded), all in seconds:
    `data_wait_s` (t1 - t0: blocked on the next batch, H2D included unless prefetched),
    `compute_s` (t2 - t1), `step_s` (t2 of this batch - t2 of the previous one).
    `receive_s`: `next()` times for batches already built, probed after the window (the
    receive floor, see runner.probe_receive). `h2d_s`: per measured batch, the host-to-device
    copy's GPU time from CUDA events; `h2d_hidden_fraction`: the share of that copy time during
    which the compute stream was running a step. Memory is the process tree's summed USS and PSS
    (PSS is the honest total for forked workers that share pages; USS undercounts them).
    """

    first_batch_s: float
    warmup_batches: int
    data_wait_s: list[float]
    compute_s: list[float]
    step_s: list[float]
    samples: int
    wall_s: float
    timing: str
    host_wait_s: list[float] = field(default_factory=list)
    cpu_time_s: float | None = None
    processes: int | None = None  # main process + workers alive at the end of the window
    cpu_util_pct: float | None = None
    main_cpu_util_pct: float | None = None
    # What else used the usable CPUs over the window, in cores x 100 (NOTE [what else ran on the
    # usable CPUs] in measure/meter.py): other processes' busy time, and the hypervisor's steal.
    other_cpu_util_pct: float | None = None
    steal_cpu_util_pct: float | None = None
    memory_uss_bytes: int | None = None
    memory_pss_bytes: int | None = None
    gpu_util_pct: float | None = None
    gpu_util_window_s: float | None = None
    gpu_util_note: str | None = None
    gpu_sm_active_pct: float | None = None
    gpu_mem_peak_bytes: int | None = None
    h2d_bytes_per_batch: int | None = None
    batch_bytes: int | None = None
    pinned_leaves: int | None = None
    tensor_leaves: int | None = None
    torch_threads_main: int | None = None
    torch_threads_worker: int | None = None
    receive_s: list[float] = field(default_factory=list)
    h2d_s: list[float] = field(default_factory=list)
    h2d_hidden_fraction: float | None = None
    storage_read_bytes: int | None = None
    storage_read_chars: int | None = None  # bytes the tree's read() calls returned (cache hits too)
    needed_bytes: int | None = None
    needed_rule: str | None = None  # "exact" (the files of the items loaded) or "estimated" (mean per sample)
    files_per_sample: float | None = None  # file reads per sample: 1 per item, or files / dataset length
    data_resident_fraction: float | None = None  # files under --data in the page cache after the window
    # Per complete epoch of the trial (warm-up included): [bytes from the device, bytes through
    # read()] of the process tree; and whether every epoch after the first came from a cache.
    epoch_reads: list[list[int | None]] = field(default_factory=list)
    served_after_first_epoch: bool = False
    storage_mb_per_s: float | None = None
    served_from: str | None = None
    cache_state: dict[str, Any] | None = None
    epoch_gap_s: list[float] = field(default_factory=list)
    # Per measured batch, the main-process seconds the sampler spent drawing indices inside that
    # batch's next() (sampling.TimedBatchSampler); [] when not measured (IterableDataset).
    sampler_s: list[float] = field(default_factory=list)
    # Window positions (indices into the per-batch lists) of batches that started an epoch.
    epoch_start_batches: list[int] = field(default_factory=list)
    # Main-process seconds the sampler spent before the first batch arrived (drawing an epoch's
    # index list, and the index lists dispatched to the workers); None when not measured.
    first_batch_sampler_s: float | None = None
    # How `samples` was counted: 'indices' (map-style: indices per batch), 'items' (an
    # IterableDataset's items collated per batch) or 'given' (--samples-per-batch).
    samples_rule: str | None = None
    numpy_leaves: int | None = None
    loader_alone_samples_per_s: float | None = None
    loader_alone_note: str | None = None  # why the loader ceiling was not probed
    probe_s: float | None = None  # seconds the probes after the window took (receive, loader alone)
    # Where the rest of a trial's time went (seconds): building the DataLoader and the step
    # before iter(), the warm-up between the first batch and the window, stopping the workers.
    setup_s: float | None = None
    warmup_s: float | None = None
    stop_s: float | None = None
    notes: list[Note] = field(default_factory=list)
    # Distributed sweeps (torchrun): the rank that measured this trial, the job's world size and,
    # on the trial the leader keeps per repeat (a copy of the slowest rank's), every rank's own
    # trial (as dicts); see distributed.merge_trials. `node_rank` and `host`: the node the rank
    # ran on (its node rank in the job, and the host name).
    rank: int | None = None
    world_size: int | None = None
    rank_trials: list[dict[str, Any]] = field(default_factory=list)
    node_rank: int | None = None
    host: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        names = {f.name for f in dataclasses.fields(cls)}
        t = cls(**{k: v for k, v in d.items() if k in names})
        t.notes = [n if isinstance(n, Note) else Note.from_dict(n) for n in t.notes]
        return t


@dataclass
class Summary:
    """Statistics of a config, derived from its trials (medians across repeats)."""

    samples_per_s: float
    stall_fraction: float
    data_wait_p50_s: float
    data_wait_p95_s: float
    compute_p50_s: float
    step_p50_s: float
    first_batch_s: float
    data_wait_mean_s: float = 0.0
    # The tail of the data-wait distribution (a sawtooth shows as a spike every num_workers batches).
    data_wait_p90_s: float | None = None
    data_wait_p99_s: float | None = None
    data_wait_max_s: float | None = None
    gpu_util_pct: float | None = None
    gpu_sm_active_pct: float | None = None
    cpu_util_pct: float | None = None
    main_cpu_util_pct: float | None = None
    other_cpu_util_pct: float | None = None
    steal_cpu_util_pct: float | None = None
    memory_pss_bytes: int | None = None
    receive_p50_s: float | None = None
    h2d_p50_s: float | None = None
    h2d_gb_per_s: float | None = None
    h2d_hidden_fraction: float | None = None
    batch_bytes: int | None = None
    loader_ceiling_samples_per_s: float | None = None
    # The compute ceiling at this config's samples per batch (analysis/ceiling.py).
    compute_ceiling_samples_per_s: float | None = None
    storage_mb_per_s: float | None = None
    storage_fraction: float | None = None
    served_from: str | None = None  # a ServedFrom value, the trials' most common
    stall_period_batches: int | None = None
    workers_needed: int | None = None
    # Mean seconds per measured batch of each part of the data-wait (WaitPart values as keys,
    # median over repeats), and whether the verdict rests on the tail alone (stall under 5% but
    # p95 wait at least half a step).
    wait_parts_s: dict[str, float] = field(default_factory=dict)
    tail_only: bool = False
    samples_per_s_min: float | None = None
    samples_per_s_max: float | None = None
    repeats: int = 1
    verdict: str = ""
    # Distributed sweeps: per rank (index = rank), the median over repeats of that rank's own
    # samples/s and stall fraction; `slowest_rank` is the rank whose loader held the job back
    # (highest stall fraction) in most repeats. None / [] for a single-process sweep.
    world_size: int | None = None
    rank_samples_per_s: list[float] = field(default_factory=list)
    rank_stall_fraction: list[float] = field(default_factory=list)
    slowest_rank: int | None = None
    # Several nodes: each node's figures (analysis/ranks.py `node_figures`), the node of the
    # slowest rank, and the MB/s read from storage summed over every node (what a shared
    # storage served the job). [] / None for one node.
    nodes: list[NodeFigures] = field(default_factory=list)
    slowest_node: int | None = None
    job_storage_mb_per_s: float | None = None
    # Several ranks: the share of the step time the job waited for the last rank's data (the
    # per-step maximum over ranks of the data-wait; median over repeats), which the slowest
    # rank's own stall undercounts when the ranks' waits come at different steps.
    step_stall_fraction: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Summary:
        names = {f.name for f in dataclasses.fields(cls)}
        s = cls(**{k: v for k, v in d.items() if k in names})
        s.nodes = [n if isinstance(n, NodeFigures) else NodeFigures.from_dict(n) for n in s.nodes]
        return s


@dataclass
class NodeFigures:
    """One node of a distributed sweep, for one config (medians over repeats): its `ranks`,
    samples/s summed over them, the stall fraction of its slowest rank, the CPU use of its ranks'
    process trees (cores x 100, summed), the bytes its ranks read from storage over the window
    and their MB/s (10^6 bytes/s), summed. None where a rank lacked the reading."""

    node_rank: int
    host: str | None
    ranks: list[int]
    samples_per_s: float
    stall_fraction: float
    cpu_util_pct: float | None = None
    storage_read_bytes: int | None = None
    storage_mb_per_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeFigures:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class ConfigResult:
    """One config of the sweep: its settings, status, error (if any), trials and summary."""

    settings: LoaderSettings
    status: Status
    error: str | None = None
    trials: list[Trial] = field(default_factory=list)
    summary: Summary | None = None
    normalized_from: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[Note] = field(default_factory=list)
    cache: str = "as-is"
    detail: str | None = None  # the original traceback or stderr tail of a failed config

    def has(self, kind: WarningKind) -> bool:
        """Whether a warning of `kind` is on this config."""
        return any(w.kind == kind.value for w in self.warnings)

    def warn(self, note: Note) -> bool:
        """Add `note` unless it is there already; True when it was added."""
        if note in self.warnings:
            return False
        self.warnings.append(note)
        return True

    def key(self) -> str:
        """Settings key, suffixed with the cache state when one was controlled (`-cold`)."""
        return self.settings.key() + ("" if self.cache == "as-is" else "-" + self.cache.replace(" ", ""))

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key(),
            "cache": self.cache,
            "settings": self.settings.to_dict(),
            "status": self.status,
            "error": self.error,
            "warnings": [w.to_dict() for w in self.warnings],
            "detail": self.detail,
            "summary": None if self.summary is None else self.summary.to_dict(),
            "trials": [t.to_dict() for t in self.trials],
            "normalized_from": list(self.normalized_from),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ConfigResult:
        return cls(
            settings=LoaderSettings.from_dict(d["settings"]),
            status=d["status"],
            error=d.get("error"),
            trials=[Trial.from_dict(t) for t in d.get("trials", [])],
            summary=None if d.get("summary") is None else Summary.from_dict(d["summary"]),
            normalized_from=list(d.get("normalized_from", [])),
            warnings=[Note.from_dict(w) for w in d.get("warnings", [])],
            cache=d.get("cache", "as-is"),
            detail=d.get("detail"),
        )


@dataclass
class Recommendation:
    """The knee: the cheapest measured config that keeps the step fed, and why (`findings`,
    written as sentences by render/)."""

    settings: LoaderSettings | None
    findings: list[Finding] = field(default_factory=list)
    input_bound: str = ""  # "not input-bound" | "moderately input-bound" | "highly input-bound"
    dataloader_call: str = ""
    use_prefetcher: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": None if self.settings is None else self.settings.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "input_bound": self.input_bound,
            "dataloader_call": self.dataloader_call,
            "use_prefetcher": self.use_prefetcher,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Recommendation:
        s = d.get("settings")
        return cls(
            settings=None if s is None else LoaderSettings.from_dict(s),
            findings=[Finding.from_dict(f) for f in d.get("findings") or []],
            input_bound=d.get("input_bound", ""),
            dataloader_call=d.get("dataloader_call", ""),
            use_prefetcher=bool(d.get("use_prefetcher", False)),
        )


SCHEMA_VERSION = 2


@dataclass
class ResultSet:
    """A whole sweep as saved to JSON (`schema_version` changes only when the format does)."""

    config: dict[str, Any]
    environment: dict[str, Any]
    results: list[ConfigResult] = field(default_factory=list)
    recommendation: Recommendation | None = None
    label: str = ""
    created_utc: str = ""
    tool_version: str = ""
    config_hash: str = ""
    ceilings: dict[str, Any] = field(default_factory=dict)
    analysis: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": "loaderbench",
            "tool_version": self.tool_version,
            "created_utc": self.created_utc,
            "label": self.label,
            "config_hash": self.config_hash,
            "config": self.config,
            "environment": self.environment,
            "ceilings": self.ceilings,
            "results": [r.to_dict() for r in self.results],
            "analysis": self.analysis,
            "recommendation": None if self.recommendation is None else self.recommendation.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResultSet:
        rec = d.get("recommendation")
        return cls(
            schema_version=int(d["schema_version"]),
            tool_version=d.get("tool_version", ""),
            created_utc=d.get("created_utc", ""),
            label=d.get("label", ""),
            config_hash=d.get("config_hash", ""),
            config=d.get("config", {}),
            environment=d.get("environment", {}),
            ceilings=d.get("ceilings", {}),
            results=[ConfigResult.from_dict(r) for r in d.get("results", [])],
            analysis=d.get("analysis", {}),
            recommendation=None if rec is None else Recommendation.from_dict(rec),
        )
