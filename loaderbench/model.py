"""Typed records shared by every module: settings, workloads, trials, results.

No I/O and no torch here: `show` and `compare` import this on a CPU-only runner and must start
fast. Every record converts to and from plain JSON-able dicts (`to_dict` / `from_dict`), which is
the only serialisation loaderbench uses (no pickle anywhere).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

Status = Literal["ok", "failed", "hung", "skipped", "interrupted"]
MP_CONTEXTS = ("fork", "spawn", "forkserver")


class Verdict(str, Enum):
    """What binds one measured config (analysis/wait.py decides it from the wait breakdown).

    The values are what the table prints; `Summary.verdict` holds the value.
    """

    COMPUTE_BOUND = "compute-bound"  # the step (almost) never waited
    LOADER_BOUND = "loader-bound"  # workers (or, with 0 workers, the main process) late building batches
    RECEIVE_FLOOR = "receive floor"  # the main process taking finished batches from workers
    H2D_PAGEABLE = "H2D-bound (pageable copy)"  # the host-to-device copy, from pageable memory
    H2D_NOT_HIDDEN = "H2D-bound (copy not hidden)"  # a pinned copy on the step's stream
    STARTUP_BOUND = "start-up-bound"  # the gaps at epoch starts (worker start-up, refill)
    SAMPLER_BOUND = "sampler-bound"  # the sampler drawing indices in the main process
    LOADER_ALONE = "loader alone"  # --compute none: no step to starve


class WaitPart(str, Enum):
    """The measured parts a config's data-wait is split into (NOTE [what the wait is made of] in
    analysis/wait.py)."""

    H2D = "h2d"  # the host-to-device copy on the step's path
    SAMPLER = "sampler"  # drawing indices in the main process
    STARTUP = "start-up"  # an epoch's start: workers starting (or refilling)
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
    NONE_MEASURED = "none-measured"  # nothing could be ranked


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


@dataclass(frozen=True)
class LoaderSettings:
    """One point of the sweep grid: the `DataLoader` keywords plus loaderbench's `prefetch`.

    `prefetch_factor` is None when `num_workers == 0` (the DataLoader rejects any other value
    there); `persistent_workers` is then False. `worker_threads` / `main_threads`: intra-op
    threads (`torch.set_num_threads`) set in each worker at start / in the main process; None
    leaves torch's defaults (1 in DataLoader workers, the CPU count in the main process). `prefetch` means the CUDA-stream prefetcher
    (`loaderbench.CUDAPrefetcher`) wraps the loader. `mp_context` None means the platform default.
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
        """A short stable identifier, e.g. `w4-pin-pf-f2-b64` (used to match configs)."""
        parts = [f"w{self.num_workers}"]
        parts.append("pin" if self.pin_memory else "nopin")
        parts.append("pf" if self.prefetch else "nopf")
        parts.append(f"f{self.prefetch_factor}" if self.prefetch_factor is not None else "f-")
        parts.append("persist" if self.persistent_workers else "once")
        parts.append(f"b{self.batch_size}")
        if self.mp_context:
            parts.append(self.mp_context)
        if self.worker_threads is not None:
            parts.append(f"wt{self.worker_threads}")
        if self.main_threads is not None:
            parts.append(f"mt{self.main_threads}")
        return "-".join(parts)

    def dataloader_kwargs(self) -> dict[str, Any]:
        """The keyword arguments to pass to `torch.utils.data.DataLoader` (no `prefetch`)."""
        kwargs: dict[str, Any] = {
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
        }
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor
            kwargs["persistent_workers"] = self.persistent_workers
            if self.mp_context:
                kwargs["multiprocessing_context"] = self.mp_context
        return kwargs

    def cost_rank(self) -> tuple[int, int, int, int, int]:
        """Sort key for "cheapest first": fewer workers, pin/prefetch off before on, fewer
        prefetched batches, non-persistent before persistent."""
        return (
            self.num_workers,
            int(self.pin_memory) + int(self.prefetch),
            int(self.prefetch),
            self.prefetch_factor or 0,
            int(self.persistent_workers),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoaderSettings:
        return cls(
            num_workers=int(d["num_workers"]),
            pin_memory=bool(d["pin_memory"]),
            prefetch=bool(d["prefetch"]),
            prefetch_factor=None if d.get("prefetch_factor") is None else int(d["prefetch_factor"]),
            persistent_workers=bool(d.get("persistent_workers", False)),
            batch_size=int(d["batch_size"]),
            mp_context=d.get("mp_context"),
            worker_threads=d.get("worker_threads"),
            main_threads=d.get("main_threads"),
        )


@dataclass(frozen=True)
class DatasetSpec:
    """What to load. `kind` is `synthetic`, `folder`, `tensor` or `import` (`MODULE:FACTORY`).

    - synthetic: `num_samples` JPEGs of `image_size` (W, H), made in memory from `seed`.
    - folder: a torchvision ImageFolder at `data_path`.
    - tensor: `num_samples` tensors of `sample_shape` costing `cpu_ms` busy CPU + `io_ms` sleep.
    - import: `factory` = "module:callable", called with `kwargs`; optional `collate_fn`.

    `sampler`: "module:callable" making the user's own sampler or batch sampler from the dataset
    (map-style datasets; see sampling.call_factory); `sampler_kind` ("sampler" or
    "batch_sampler") is what it turned out to be, filled in before the sweep.
    `samples_per_batch`: the number of samples in every batch, when the DataLoader's own count
    (indices per batch, or items collated for an IterableDataset) is not it (items that are
    themselves several samples).
    """

    kind: str = "synthetic"
    data_path: str | None = None
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
    in runner.py). Then at least `batches` batches and at least `min_time_s` seconds are measured,
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
    needed_bytes: int | None = None
    storage_mb_per_s: float | None = None
    served_from: str | None = None
    cache_state: dict[str, Any] | None = None
    epoch_gap_s: list[float] = field(default_factory=list)
    # Per measured batch, the main-process seconds the sampler spent drawing indices inside that
    # batch's next() (sampling.TimedBatchSampler); [] when not measured (IterableDataset).
    sampler_s: list[float] = field(default_factory=list)
    # Window positions (indices into the per-batch lists) of batches that started an epoch.
    epoch_start_batches: list[int] = field(default_factory=list)
    # How `samples` was counted: 'indices' (map-style: indices per batch), 'items' (an
    # IterableDataset's items collated per batch) or 'given' (--samples-per-batch).
    samples_rule: str | None = None
    numpy_leaves: int | None = None
    loader_alone_samples_per_s: float | None = None
    loader_alone_note: str | None = None  # why the loader ceiling was not probed
    notes: list[str] = field(default_factory=list)
    # Distributed sweeps (torchrun): the rank that measured this trial, the job's world size and,
    # on the trial the leader keeps per repeat (a copy of the slowest rank's), every rank's own
    # trial (as dicts); see distributed.merge_trials.
    rank: int | None = None
    world_size: int | None = None
    rank_trials: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


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
    # The tail of the data-wait distribution (case C04: a spike every num_workers batches).
    data_wait_p90_s: float | None = None
    data_wait_p99_s: float | None = None
    data_wait_max_s: float | None = None
    gpu_util_pct: float | None = None
    gpu_sm_active_pct: float | None = None
    cpu_util_pct: float | None = None
    memory_pss_bytes: int | None = None
    receive_p50_s: float | None = None
    h2d_p50_s: float | None = None
    h2d_gb_per_s: float | None = None
    h2d_hidden_fraction: float | None = None
    batch_bytes: int | None = None
    loader_ceiling_samples_per_s: float | None = None
    storage_mb_per_s: float | None = None
    storage_fraction: float | None = None
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Summary:
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
    warnings: list[str] = field(default_factory=list)
    cache: str = "as-is"
    detail: str | None = None  # the original traceback or stderr tail of a failed config

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
            "warnings": list(self.warnings),
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
            warnings=list(d.get("warnings", [])),
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


SCHEMA_VERSION = 1


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
