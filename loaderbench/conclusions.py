"""What the analysis concludes, as typed records: one payload class per finding kind, the
recommendation, the ceilings and bounds it derives, the pipeline model's predictions, and the
`Analysis` that `analysis.analyze()` returns.

Pure data: no torch, no I/O, no decisions. analysis/ makes these records; render/ words them and
decides nothing, so a result read back from its JSON renders as it did in memory. Enums stay
enums in memory; a result file holds their values (model.to_json / model.from_json).

To add a finding: a member of `model.FindingKind`, its payload class here (a `Finding` subclass
with `kind` set, listed in `FINDINGS`), the code that draws it in analysis/advice.py, and its
sentence in render/findings.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from loaderbench.model import (
    Ceiling,
    FindingKind,
    InputBound,
    LoaderSettings,
    NodeFigures,
    Record,
    ServedFrom,
    Verdict,
    WaitPart,
    fields_from_json,
)

# ---------------------------------------------------------------------------------------------
# The pipeline model's predictions (analysis/predict.py)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction(Record):
    """A predicted config: samples/s and stall from the model, and, where the config was
    measured too, the measured samples/s and the relative error (predicted / measured - 1);
    `ceiling_share`: the prediction over the compute ceiling at its batch size (set by the
    analysis for the table's predicted rows)."""

    settings: LoaderSettings
    samples_per_s: float
    stall_fraction: float | None
    measured_samples_per_s: float | None = None
    ceiling_share: float | None = None

    @property
    def error(self) -> float | None:
        m = self.measured_samples_per_s
        return None if not m else self.samples_per_s / m - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.settings.key(), **super().to_dict(), "error": self.error}


@dataclass(frozen=True)
class FitInputs(Record):
    """The rates one series' pipeline model was fitted with (NOTE [pipeline model] in
    analysis/predict.py), all in samples/s except `cpu_s_per_sample`; None where nothing
    measured them."""

    configs: list[str] = field(default_factory=list)
    per_worker_samples_per_s: float | None = None
    cpu_s_per_sample: float | None = None
    main_samples_per_s: float | None = None
    zero_workers_samples_per_s: float | None = None
    compute_samples_per_s: float | None = None
    usable_cpus: int | None = None
    sharpness: float | None = None


@dataclass(frozen=True)
class PredictionErrors(Record):
    """Median and p90 of |predicted / measured - 1| over `n` predictions."""

    n: int
    median_abs: float
    p90_abs: float


@dataclass(frozen=True)
class WhatIf(Record):
    """A what-if question: `cpus` usable CPUs, or a storage device of `disk_mb_per_s` MB/s
    (10^6 bytes) and, optionally, `disk_iops` reads/s (the pipeline model answers these: a
    `WhatIfAnswer`), or `ranks` data-parallel ranks (the measured per-step waits answer it: a
    `RanksAnswer`, NOTE [what-if ranks] in analysis/ranks.py)."""

    cpus: int | None = None
    disk_mb_per_s: float | None = None
    disk_iops: float | None = None
    ranks: int | None = None


class WhyNoPrediction(str, Enum):
    """Why a what-if has no answer."""

    NOTHING_MEASURED = "nothing-measured"  # no config was measured
    NO_WORKERS_MEASURED = "no-workers-measured"  # no config of the series was predictable
    BYTES_UNKNOWN = "bytes-unknown"  # the bytes per sample are not known
    NO_CACHED_ROWS = "no-cached-rows"  # no row was served from a cache
    NO_LOADER_RATE = "no-loader-rate"  # the rows served from a cache give no loader rate


@dataclass(frozen=True)
class WhatIfAnswer(Record):
    """The pipeline model's answer to a `WhatIf` for the recommended config's series, a
    prediction: its knee (the fewest workers within the tolerance of the best prediction) and
    the curve of predicted samples/s by num_workers; `shown_workers`, the worker counts a
    sentence quotes (0, powers of two, the CPU count and the knee's neighbours). The storage
    what-if adds what the device feeds and what the model was fitted on. `why` when there is no
    answer."""

    question: WhatIf
    knee: LoaderSettings | None = None
    knee_samples_per_s: float | None = None
    knee_stall_fraction: float | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    shown_workers: list[int] = field(default_factory=list)
    bytes_per_sample: float | None = None
    files_per_sample: float | None = None
    fetch_s_per_sample: float | None = None
    device_samples_per_s: float | None = None
    from_rows: list[LoaderSettings] = field(default_factory=list)
    why: WhyNoPrediction | None = None

    @property
    def knee_workers(self) -> int | None:
        return None if self.knee is None else self.knee.num_workers


@dataclass(frozen=True)
class RanksAnswer(Record):
    """The answer to `--what-if ranks=N` for the recommended config (`settings`), a prediction
    (NOTE [what-if ranks] in analysis/ranks.py): at `ranks` ranks, from a run of `from_ranks`
    over `steps` measured steps, the samples/s summed over the ranks, the stall fraction, the
    seconds per step and of it the wait for the last rank's data; `correlation`, the ranks'
    measured wait correlation (None with one rank measured: independent draws) and `draws`, the
    independent draws it counts as (e_eff). `measured_*`: the run's own samples/s and
    per-step-maximum stall, for reference. `why` (and no figures) when there is no answer."""

    ranks: int
    settings: LoaderSettings | None = None
    from_ranks: int = 1
    steps: int = 0
    samples_per_s: float | None = None
    stall_fraction: float | None = None
    step_s: float | None = None
    wait_s: float | None = None
    correlation: float | None = None
    draws: float | None = None
    measured_samples_per_s: float | None = None
    measured_stall_fraction: float | None = None
    why: WhyNoPrediction | None = None


@dataclass(frozen=True)
class MoreWorkers(Record):
    """What more workers would likely give a loader-bound watched config (a prediction):
    `workers_needed` (batch build time over the step's cycle) and, with workers, the pipeline
    model's knee on this machine's CPUs; `clears` when that knee's predicted stall leaves the
    input-bound bands (else it is where more workers stop helping), and not when the workers would
    share the step's CPUs (`shares_cpus`)."""

    num_workers: int
    usable_cpus: int | None
    workers_needed: int | None = None
    knee_workers: int | None = None
    knee_samples_per_s: float | None = None
    knee_stall_fraction: float | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    clears: bool = True
    # At 0 workers: the cores the step used while it ran (`step_cores`) and those loading needs to
    # keep pace with it (`load_cores`); `shares_cpus` when together they exceed the usable CPUs, so
    # workers would take the step's CPUs and slow it (predict.step_shares_cpus).
    step_cores: float | None = None
    load_cores: float | None = None
    shares_cpus: bool = False


# ---------------------------------------------------------------------------------------------
# Findings: one payload class per FindingKind
# ---------------------------------------------------------------------------------------------


@dataclass
class Finding(Record):
    """One conclusion of the analysis, as data: its class names its kind (`kind`), its fields
    the figures a sentence needs. Sentences are written from findings in render/ only. A
    result file holds `{"kind": ..., fields...}`."""

    kind: ClassVar[FindingKind]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, **super().to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:  # type: ignore[override]
        """The finding of the class `d["kind"]` names (ValueError for a kind this version does
        not know)."""
        target = FINDINGS[FindingKind(d["kind"])] if cls is Finding else cls
        return target(**fields_from_json(target, d))


@dataclass(frozen=True)
class Difference(Record):
    """One setting on which two configs differ (a grid axis, or a loader argument by its name):
    `value` the first config's, `other` the second's."""

    axis: str
    value: Any
    other: Any


class RemedyKind(str, Enum):
    """What may act on a remaining wait (NOTE [advice the measurements support])."""

    PREFETCH = "prefetch"  # the CUDA-stream prefetcher
    PIN_MEMORY = "pin_memory"
    PERSISTENT_WORKERS = "persistent_workers"
    MORE_WORKERS = "more_workers"
    LARGER_BATCH = "larger_batch"
    PACK_TENSORS = "pack_tensors"  # not a setting: many small tensors packed into a few
    NUMPY_TO_TENSORS = "numpy_to_tensors"  # not a setting: tensors, not numpy arrays, from the collate
    LAZY_SAMPLER = "lazy_sampler"  # not a setting: indices drawn lazily


@dataclass(frozen=True)
class Remedy(Record):
    """A remedy, measured (`settings`: the config with it, its figures and `gain` over the
    knee) or not (`flag`: what would measure it, None for a remedy that is no setting; `in_grid`:
    the sweep's grid already lists it, so no flag is missing: the sweep stopped before it, or
    the search did not measure it). `step_slowdown`: the measured config's step ran that much
    slower beside the loader than alone (over STEP_SLOWED): its figure is no evidence either way."""

    remedy: RemedyKind
    measured: bool
    flag: str | None = None
    settings: LoaderSettings | None = None
    samples_per_s: float | None = None
    ceiling_share: float | None = None
    knee_ceiling_share: float | None = None
    gain: float | None = None
    in_grid: bool = False
    step_slowdown: float | None = None


@dataclass
class Knee(Finding):
    """The recommended config: its throughput, stall and input-bound band, its share of the
    compute ceiling, the other settings the sweep varied (`swept`: grid axes, then loader
    arguments; named at the knee's values), and the spread of its repeats."""

    kind: ClassVar[FindingKind] = FindingKind.KNEE
    settings: LoaderSettings
    samples_per_s: float
    stall_fraction: float
    band: InputBound
    ceiling_share: float | None = None
    swept: list[str] = field(default_factory=list)
    # The spread of its repeats ((max - min) / median) and how many there were; `tolerance`, the
    # knee's: a spread past it makes the figure uncertain by more than the pick's own margin.
    spread: float = 0.0
    repeats: int = 1
    tolerance: float = 0.0


@dataclass
class ListedFirst(Finding):
    """A tie at the knee that the order of a loader argument's values decided (NOTE [cost order]
    in analysis/knee.py): configs that differ from the knee only in `name` (`--loader-arg`),
    with the values `tied` (in the order the user listed them), measured as fast (within the
    tolerance) and as cheap as the knee's `value`; a loader argument has no known cost order,
    so the value listed first was picked."""

    kind: ClassVar[FindingKind] = FindingKind.LISTED_FIRST
    name: str
    value: Any
    tied: list[Any] = field(default_factory=list)


@dataclass
class AlsoFastest(Finding):
    """The knee is the fastest config ranked (`replicated_excluded`: configs counting duplicate
    samples were left out of the ranking)."""

    kind: ClassVar[FindingKind] = FindingKind.ALSO_FASTEST
    replicated_excluded: bool = False


@dataclass
class BestWithinTolerance(Finding):
    """A faster config (`settings`) is within the tolerance or noise of the knee: what it
    changes buys nothing measurable."""

    kind: ClassVar[FindingKind] = FindingKind.BEST_WITHIN_TOLERANCE
    settings: LoaderSettings
    samples_per_s: float
    tolerance: float
    loader_still_binds: bool
    differs: list[Difference] = field(default_factory=list)


@dataclass
class LoaderAlone(Finding):
    """With `--compute none`: the loader's own ceiling, and the step time it feeds."""

    kind: ClassVar[FindingKind] = FindingKind.LOADER_ALONE
    settings: LoaderSettings
    samples_per_s: float
    step_s: float


@dataclass
class RemainingWait(Finding):
    """What the wait of a config that still waits is made of (`part`, the largest, and every
    part of at least PART_REPORTED of the step in `parts_share`), what the batch is made of,
    and the remedies that act on the largest part (measured ones only where they gained; one
    measured without gain on a row whose step slowed is in `slowed`, not `measured_no_gain`).
    `of_knee`: the recommended config; else a config with workers bound by the hand-off."""

    kind: ClassVar[FindingKind] = FindingKind.REMAINING_WAIT
    settings: LoaderSettings
    of_knee: bool
    part: WaitPart
    workers_restart: bool
    verdict: Verdict
    stall_fraction: float
    wait_p50_s: float
    part_s: float
    parts_share: dict[WaitPart, float] = field(default_factory=dict)
    receive_s: float | None = None
    h2d_s: float | None = None
    h2d_hidden_fraction: float | None = None
    tensor_leaves: int | None = None
    numpy_leaves: int | None = None
    batch_bytes: int | None = None
    remedies: list[Remedy] = field(default_factory=list)
    measured_no_gain: list[Remedy] = field(default_factory=list)
    # Measured without gain, but on a row whose step slowed beside the loader: no evidence.
    slowed: list[Remedy] = field(default_factory=list)


class NotClearedCause(str, Enum):
    """Why no measured setting clears the loader bottleneck."""

    CPU = "cpu"  # the CPUs are saturated
    REPLICATED = "replicated"  # configs with more workers replay the IterableDataset
    STORAGE = "storage"  # the storage device reads alike at every worker count
    NOT_BUILD_RATE = "not_build_rate"  # building batches does not explain the wait
    CORES_SLOWER = "cores_slower"  # the cores delivered less as workers were added
    MORE_WORKERS_FAILED = "more_workers_failed"  # configs with more workers did not run
    IDLE_WORKERS = "idle_workers"  # some workers get no work: the dataset gives work to fewer
    NOT_REACHED = "not_reached"  # the grid's configs with more workers were not reached (stopped)
    GRID_EDGE = "grid_edge"  # the config has the most workers measured


@dataclass(frozen=True)
class CpuBound(Record):
    """The CPUs are saturated: the tree used `cpu_cores` of `usable_cpus`, other processes
    `other_cores` (None unmeasured); `other_named` when that is worth naming, `mostly_other`
    when the other load took more of them than the sweep."""

    cpu_cores: float
    usable_cpus: int | None
    other_cores: float | None = None
    other_named: bool = False
    mostly_other: bool = False


@dataclass(frozen=True)
class CoresSlower(Record):
    """More workers bought nothing at a higher CPU per sample: the cheapest row with at most
    the subject's workers (`w_lo`, `lo_ms` ms of worker CPU per sample) against the dearest with
    more (`settings`, `w_hi`, `hi_ms`, its samples/s and cores, other load during it)."""

    w_lo: int
    lo_ms: float
    w_hi: int
    hi_ms: float
    settings: LoaderSettings
    hi_samples_per_s: float
    cpu_cores: float | None = None
    other_cores: float | None = None
    other_named: bool = False
    usable_cpus: int | None = None


@dataclass(frozen=True)
class BuildRate(Record):
    """Building batches does not explain the wait: the loader alone delivers `loader_alone`
    samples/s against the compute ceiling, which explains `explained_stall` at most; the wait
    is in its tail (`in_tail`) or a steady cost per batch."""

    loader_alone: float
    compute_ceiling: float
    explained_stall: float
    wait_p50_s: float
    wait_p95_s: float
    in_tail: bool


@dataclass(frozen=True)
class DeviceBinds(Record):
    """The storage device binds: configs with `workers` workers read `mb_per_s` (low, high)
    MB/s from it alike."""

    mb_per_s: tuple[float, float]
    workers: list[int]


@dataclass(frozen=True)
class FailedConfig(Record):
    """A config that did not run (failed, hung or skipped) and why."""

    settings: LoaderSettings
    status: str
    error: str | None = None


@dataclass
class NotCleared(Finding):
    """Even the best ranked config (`of_best`; else the knee) is loader-bound, and why
    (`cause`, with the record of that cause)."""

    kind: ClassVar[FindingKind] = FindingKind.NOT_CLEARED
    settings: LoaderSettings
    of_best: bool
    stall_fraction: float
    band: InputBound
    cause: NotClearedCause | None = None
    cpu: CpuBound | None = None
    cores_slower: CoresSlower | None = None
    build_rate: BuildRate | None = None
    device: DeviceBinds | None = None
    failed: list[FailedConfig] = field(default_factory=list)
    workers_needed: int | None = None
    per_rank: bool = False
    # IDLE_WORKERS: the workers that took part of the config's; NOT_REACHED: the grid's worker
    # counts past it that the stopped sweep did not reach.
    working_workers: int | None = None
    not_reached: list[int] = field(default_factory=list)


@dataclass
class LowestStall(Finding):
    """The floor of stall every config pays (receiving a batch always costs a little)."""

    kind: ClassVar[FindingKind] = FindingKind.LOWEST_STALL
    stall_fraction: float


@dataclass
class StepSlower(Finding):
    """The knee reaches `share` of the compute ceiling because its step runs slower beside the
    loader (`compute_mean_s` vs `alone_s`); `cpu_saturated` when the CPUs are the cause, with
    the CPUs to leave free for the training process (`leave_free_cpus`, from the main process's
    measured `main_cores`: `advice.leave_free_cpus`)."""

    kind: ClassVar[FindingKind] = FindingKind.STEP_SLOWER
    settings: LoaderSettings
    share: float
    ceiling: float
    compute_mean_s: float
    compute_p50_s: float
    alone_s: float
    cpu_saturated: bool = False
    cpu_cores: float | None = None
    usable_cpus: int | None = None
    main_cores: float | None = None
    leave_free_cpus: int | None = None


@dataclass
class StepBinds(Finding):
    """Past the knee the step itself binds (the knee at `share` of the compute ceiling)."""

    kind: ClassVar[FindingKind] = FindingKind.STEP_BINDS
    settings: LoaderSettings
    share: float
    ceiling: float


@dataclass
class Transfer(Finding):
    """The worker->main transfer is a large part of the wait (`mb_per_s` of batches);
    `many_tensors` when the batch crosses as enough tensors to be worth packing."""

    kind: ClassVar[FindingKind] = FindingKind.TRANSFER
    settings: LoaderSettings
    mb_per_s: float
    receive_s: float
    batch_bytes: int | None = None
    tensor_leaves: int | None = None
    numpy_leaves: int | None = None
    many_tensors: bool = False


@dataclass
class MoreNotBetter(Finding):
    """A config past the knee (`settings`) costs `extra_cores` CPU cores for `gain`."""

    kind: ClassVar[FindingKind] = FindingKind.MORE_NOT_BETTER
    settings: LoaderSettings
    extra_cores: float
    gain: float


@dataclass
class Startup(Finding):
    """Worker start-up (`start_s` of the `first_batch_s` first batch; the sampler's draw
    `sampler_s`, named when `sampler_named`) against an epoch of `epoch_batches` (`share`, a
    prediction), and the persistent variant (`alt`) when measured: `advised`, `slower` and
    the epoch-start gaps with and without it."""

    kind: ClassVar[FindingKind] = FindingKind.STARTUP
    settings: LoaderSettings
    first_batch_s: float
    start_s: float
    sampler_s: float
    share: float
    epoch_batches: int
    predicted: bool = True
    sampler_named: bool = False
    measured: bool = False
    advised: bool = False
    alt: LoaderSettings | None = None
    samples_per_s: float | None = None
    knee_samples_per_s: float | None = None
    slower: bool = False
    gap_s: float | None = None
    persistent_gap_s: float | None = None
    in_grid: bool = False  # unmeasured, but the grid lists persistent workers: not reached


@dataclass
class EpochFaster(Finding):
    """Counting start-up in every epoch, another config (`settings`) is predicted faster per
    epoch than the steady-state knee."""

    kind: ClassVar[FindingKind] = FindingKind.EPOCH_FASTER
    settings: LoaderSettings
    epoch_samples_per_s: float
    epoch_batches: int
    predicted: bool = True


@dataclass
class Threads(Finding):
    """The knee's thread settings."""

    kind: ClassVar[FindingKind] = FindingKind.THREADS
    settings: LoaderSettings
    worker_threads: int | None = None
    main_threads: int | None = None


@dataclass
class Oversubscribed(Finding):
    """The knee was oversubscribed as measured: its CPU demand (the process tree's `cpu_cores`
    plus what other processes took, `other_cores`) reached the usable CPUs (wait.cpu_saturated).
    `message` is the preflight's warning (more workers or threads than CPUs: it *could*
    oversubscribe); without that demand measured, the preflight's warning stays a warning."""

    kind: ClassVar[FindingKind] = FindingKind.OVERSUBSCRIBED
    settings: LoaderSettings
    message: str
    cpu_cores: float | None = None
    other_cores: float | None = None
    usable_cpus: int | None = None


@dataclass
class MemoryPerWorker(Finding):
    """A setting multiplies memory per worker: `settings` uses `mib_per_worker` MiB (PSS) per
    worker against `ref_mib_per_worker` with `ref`, which differs in one setting only."""

    kind: ClassVar[FindingKind] = FindingKind.MEMORY_PER_WORKER
    settings: LoaderSettings
    mib_per_worker: float
    ref: LoaderSettings
    ref_mib_per_worker: float
    differs: list[Difference] = field(default_factory=list)
    # The rows' PSS as the table's column shows it (MiB).
    pss_mib: float | None = None
    ref_pss_mib: float | None = None


@dataclass
class PartialBatches(Finding):
    """Batches of `batch_size` held `samples_per_batch` samples on average (the median config's;
    `min`-`max` across configs)."""

    kind: ClassVar[FindingKind] = FindingKind.PARTIAL_BATCHES
    batch_size: int
    samples_per_batch: float
    min: float
    max: float


@dataclass(frozen=True)
class ServedRow(Record):
    """One row served from a cache: the bytes read from the device (`read_bytes`) and through
    read() (`read_chars`) against those its samples needed, counted `needed_rule`; the share of
    its files in the page cache after the window; with `later_epochs`, the first epoch's
    device reads against every later epoch's."""

    settings: LoaderSettings
    cache: str
    served_from: ServedFrom
    read_bytes: int | None = None
    read_chars: int | None = None
    needed_bytes: int | None = None
    needed_rule: str | None = None
    resident_fraction: float | None = None
    later_epochs: bool = False
    first_epoch_read_bytes: int | None = None
    later_epoch_read_bytes: int | None = None
    later_epoch_read_chars: int | None = None


class CacheFix(str, Enum):
    """What would measure the device when every row was served from a cache."""

    DATASET_CACHE = "dataset-cache"  # the dataset (or its workers) keeps what it read
    MEMORY_FS = "memory-fs"  # the files live on an in-memory filesystem
    REREAD = "reread"  # --cache cold, but the window read the files again after the page cache held them
    COLD = "cold"  # run with --cache cold (or a dataset larger than RAM)


@dataclass
class ServedFromCache(Finding):
    """Rows whose samples came from a cache, not the device; `uneven`: cache states whose rows
    were served unalike (`storage_rows` from the device); `all_rows` (with `fix`) when every
    measured row was."""

    kind: ClassVar[FindingKind] = FindingKind.SERVED_FROM_CACHE
    rows: list[ServedRow] = field(default_factory=list)
    all_rows: bool = False
    uneven: list[str] = field(default_factory=list)
    storage_rows: list[LoaderSettings] = field(default_factory=list)
    fix: CacheFix | None = None
    # What would serve the uneven rows alike: REREAD where they were measured cold (the window
    # read again pages it had loaded itself), else COLD.
    uneven_fix: CacheFix | None = None


@dataclass
class OtherLoad(Finding):
    """Other processes (and the hypervisor's steal) used the usable CPUs during measured
    windows: up to `max_cores` (at `settings`), median `median_cores` over `configs` configs."""

    kind: ClassVar[FindingKind] = FindingKind.OTHER_LOAD
    settings: LoaderSettings
    median_cores: float
    max_cores: float
    configs: int
    steal_cores: float = 0.0
    steal_named: bool = False
    usable_cpus: int | None = None


@dataclass
class NoneMeasured(Finding):
    """Nothing could be ranked."""

    kind: ClassVar[FindingKind] = FindingKind.NONE_MEASURED


@dataclass
class Noisy(Finding):
    """A config's throughput spread `spread` of its median over `repeats` repeats, past
    `threshold`: small differences are not to be trusted."""

    kind: ClassVar[FindingKind] = FindingKind.NOISY
    settings: LoaderSettings
    cache: str
    spread: float
    repeats: int
    threshold: float


@dataclass(frozen=True)
class SlowedRow(Record):
    """One row whose step ran slower beside the loader than alone: median compute per batch
    `compute_p50_s` against `alone_s` (`slowdown` = their ratio - 1), and the CPUs: the process
    tree's `cpu_cores`, the main process's `main_cores`, other processes' `other_cores`, of
    `usable_cpus`; `cpu_saturated` when that demand reached them (the training process was
    short of CPU; else the host was disturbed); `leave_free_cpus`, the CPUs the training process
    needs to itself (advice.leave_free_cpus); `repeats`, its trials."""

    settings: LoaderSettings
    compute_p50_s: float
    alone_s: float
    slowdown: float
    cpu_cores: float | None = None
    main_cores: float | None = None
    other_cores: float | None = None
    usable_cpus: int | None = None
    cpu_saturated: bool = False
    leave_free_cpus: int | None = None
    repeats: int = 1


@dataclass
class StepSlowed(Finding):
    """Rows whose step ran over `threshold` slower beside the loader than alone (their verdict
    is `step slowed` where it would otherwise be compute-bound): they do not show what the step
    alone binds, and advice does not rest on them."""

    kind: ClassVar[FindingKind] = FindingKind.STEP_SLOWED
    rows: list[SlowedRow] = field(default_factory=list)
    threshold: float = 0.0


@dataclass(frozen=True)
class IdleRow(Record):
    """One row whose workers did not all take part: of `num_workers`, `no_batch` delivered no
    batch and `few` under IDLE_WORKER_SHARE of an equal share; `worker_batches`, the batches
    each delivered (index = worker id)."""

    settings: LoaderSettings
    num_workers: int
    no_batch: int
    few: int
    worker_batches: list[int] = field(default_factory=list)

    @property
    def working(self) -> int:
        return self.num_workers - self.no_batch - self.few


@dataclass
class IdleWorkers(Finding):
    """Rows with workers that delivered no batch, or under `share` of an equal share: the
    dataset gives work to fewer workers (an IterableDataset split by shard or file into fewer
    shards than workers), so more workers change nothing and the row is bound by those that
    work, never by the receive."""

    kind: ClassVar[FindingKind] = FindingKind.IDLE_WORKERS
    rows: list[IdleRow] = field(default_factory=list)
    share: float = 0.0


@dataclass
class LatencyBound(Finding):
    """A loader-bound config (`settings`: the best, or the knee) whose workers used under
    `threshold` of a core each on average (`worker_cores`): they wait on latency (storage, a
    network), not on the CPUs; requests in flight help past the core count (`usable_cpus`).
    `most_workers`: the most workers measured. The remedies are named in render/."""

    kind: ClassVar[FindingKind] = FindingKind.LATENCY_BOUND
    settings: LoaderSettings
    worker_cores: float
    threshold: float
    usable_cpus: int | None = None
    most_workers: int | None = None


@dataclass(frozen=True)
class EpochIterRow(Record):
    """A row with persistent workers whose epochs' first batches waited `gap_s` on average
    (less the sampler's draw) against `build_s`, one worker's steady build of a batch
    (`build_rule`: "sustained" from the loader ceiling, "window" an upper bound from the window:
    num_workers x its mean step); `epochs`, the epoch starts timed; `iterable`: an
    IterableDataset."""

    settings: LoaderSettings
    gap_s: float
    build_s: float
    build_rule: str
    epochs: int
    iterable: bool = False


@dataclass
class EpochIter(Finding):
    """With persistent workers nothing starts again at an epoch start: the first batch costs one
    build (the pipeline refilling). Rows where it cost `factor` builds or more point at work the
    dataset (or the sampler) does in its own `__iter__` at every epoch (a buffer filled, an
    index rebuilt)."""

    kind: ClassVar[FindingKind] = FindingKind.EPOCH_ITER
    rows: list[EpochIterRow] = field(default_factory=list)
    factor: float = 0.0


@dataclass
class WorkerSlower(Finding):
    """One worker builds a batch in `worker_build_s` (config `settings`, `build_rule` as in
    EpochIterRow) where the main process builds it in `main_build_s` at 0 workers (`main`):
    `factor` or more times slower, the sign of a library that turns its threads off in forked
    children (a tokenizer, an OpenMP pool), which parallel work in the main process does not
    show."""

    kind: ClassVar[FindingKind] = FindingKind.WORKER_SLOWER
    settings: LoaderSettings
    worker_build_s: float
    build_rule: str
    main: LoaderSettings
    main_build_s: float
    factor: float


@dataclass(frozen=True)
class Peer(Record):
    """A config measured within the tolerance of the knee's throughput, cheaper by the
    structural order and no dearer on a measured cost, but not picked: outside the tolerance of
    the best (`below_best`, its shortfall: 1 - its samples/s / the best's), where the knee is
    inside; `repeats`, its trials."""

    settings: LoaderSettings
    samples_per_s: float
    below_best: float
    repeats: int = 1


@dataclass
class EqualCheaper(Finding):
    """Configs cheaper (or as cheap) than the knee measured within the tolerance of its
    throughput (`peers`) yet not picked: the pick between them and the knee rests on less than
    the tolerance, so they are named as equal (a rerun may pick one of them)."""

    kind: ClassVar[FindingKind] = FindingKind.EQUAL_CHEAPER
    peers: list[Peer] = field(default_factory=list)
    knee_samples_per_s: float = 0.0
    tolerance: float = 0.0


FINDINGS: dict[FindingKind, type[Finding]] = {
    cls.kind: cls for cls in (
        Knee, AlsoFastest, BestWithinTolerance, LoaderAlone, RemainingWait, NotCleared, LowestStall, StepSlower,
        StepBinds, Transfer, MoreNotBetter, Startup, EpochFaster, Threads, Oversubscribed, MemoryPerWorker,
        PartialBatches, ServedFromCache, OtherLoad, NoneMeasured, Noisy, ListedFirst, StepSlowed, IdleWorkers,
        LatencyBound, EpochIter, WorkerSlower, EqualCheaper,
    )
}
"""The payload class of every finding kind."""


# ---------------------------------------------------------------------------------------------
# The recommendation and the rest of the analysis
# ---------------------------------------------------------------------------------------------


@dataclass
class Recommendation(Record):
    """The knee: the cheapest measured config that keeps the step fed, and why (`findings`,
    worded by render/). `dataloader_call`: the ready-to-paste call (NOTE [the recommended call
    runs as printed] in analysis/advice.py); `imports`: the `from MODULE import NAME` lines it
    needs besides torch's DataLoader (the loader class, sampler factory, collate function);
    `decoder_lines`: the lines before the call that say how its config decodes (the `decoder`
    axis: imports and a comment; advice.decoder_lines); `worker_init_def`: the module-level
    `worker_init_fn` it names, when it names one; `prefetcher_call`: the CUDA prefetcher around
    the loader when `use_prefetcher` (with `decoder=nvjpeg` it decodes each batch)."""

    settings: LoaderSettings | None
    findings: list[Finding] = field(default_factory=list)
    input_bound: InputBound | None = None
    dataloader_call: str = ""
    use_prefetcher: bool = False
    worker_init_def: str | None = None
    imports: list[str] = field(default_factory=list)
    decoder_lines: list[str] = field(default_factory=list)
    prefetcher_call: str = ""


class Baseline(str, Enum):
    """The row the headroom starts from."""

    CURRENT = "current"  # the first measured config matching --baseline-settings
    FIRST = "first"  # the first measured row


class HeadroomBinds(str, Enum):
    STALL = "stall"
    COMPUTE_CEILING = "compute ceiling"


@dataclass(frozen=True)
class Headroom(Record):
    """How much faster the loop could run from `settings` (`which` row): removing all data-wait
    gives at most `max_speedup_from_stall`, the compute ceiling `max_speedup_to_ceiling`; the
    smaller `binds`."""

    settings: LoaderSettings
    which: Baseline
    samples_per_s: float
    stall_fraction: float
    max_speedup_from_stall: float
    max_speedup_to_ceiling: float | None
    binds: HeadroomBinds


class CeilingBinds(str, Enum):
    LOADER = "loader"
    COMPUTE = "compute"
    MATCHED = "matched"  # within `LoaderCeiling.matched_within` of each other


@dataclass(frozen=True)
class MeasuredRate(Record):
    settings: LoaderSettings
    samples_per_s: float


@dataclass(frozen=True)
class LoaderCeiling(Record):
    """The loader ceiling (the loader alone, probed after a window) over the ranked configs,
    against the compute ceiling: the best sustained rate (`settings`), sustained on `probed` of
    `ranked` configs, a bound only (at least the row's own samples/s) on `bounded` of them;
    `lower_bound` when the loop's own throughput was higher than every sustained rate; `binds`
    None when nothing is concluded (from sustained rates only: a bound says the loader alone
    delivers at least a figure, never how much more). `bound_only`: no ranked config has a
    sustained rate; `samples_per_s` (at `settings`) is then the highest bound, the loader alone
    delivers at least that, and `binds` is COMPUTE (the loop itself ran at the compute ceiling)
    or None."""

    samples_per_s: float
    settings: LoaderSettings
    probed: int
    ranked: int
    lower_bound: MeasuredRate | None = None
    compute_ceiling: float | None = None
    binds: CeilingBinds | None = None
    matched_within: float = 0.0
    bounded: int = 0
    bound_only: bool = False


@dataclass(frozen=True)
class CeilingShown(Record):
    """The compute ceiling of one batch size as the outputs show it: `samples_per_batch`, the
    median samples per batch the measured configs of that size held (None: none measured), and
    `samples_per_s` at that many samples."""

    ceiling: Ceiling
    samples_per_s: float
    samples_per_batch: float | None = None


class FetchPrepBound(str, Enum):
    STORAGE = "storage (fetch)"
    CPU = "CPU (prep)"
    NONE = "none"


@dataclass(frozen=True)
class FetchPrep(Record):
    """The differential split of one config's data-wait (NOTE [ The differential fetch/prep
    split ] in analysis/statistics.py), in seconds per batch: `fetch_s` = cold - warm, `prep_s`
    = warm; `warm_slower_s` when the warm run waited longer (noise: fetch is then 0)."""

    cold_wait_s: float
    warm_wait_s: float
    fetch_s: float
    prep_s: float
    bound: FetchPrepBound
    fetch_fraction: float | None
    warm_slower_s: float | None = None
    key: str = ""


@dataclass(frozen=True)
class Partial(Record):
    """A sweep that stopped before its plan: `finished` configs (of `planned`, for a grid), `short`
    of them with fewer than `repeats` trials; a search plans no fixed set (`searched`)."""

    searched: bool
    finished: int
    planned: int | None = None
    short: int = 0
    repeats: int = 1


@dataclass(frozen=True)
class LoaderClass(Record):
    """The loader measured, where it is not torch's DataLoader or takes arguments of its own:
    `name`, "module:name" of its class (`--loader`, or a watched loader's; None: torch's
    DataLoader); `args`, its own arguments the configs set (`--loader-arg`), in the order
    declared (a column each); `defaults`, a watched loader's own settings left at their
    defaults, as the watch recorded them (`SweepRecord.loader_defaults`)."""

    name: str | None = None
    args: list[str] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeRow(Record):
    """One node in the per-node view: its figures for the config shown (`figures`), what its
    preflight found (`usable_cpus`; `workers_on_gpu_numa_node`, None where not visible) and
    whether it holds the rank that binds (`binds`)."""

    figures: NodeFigures
    usable_cpus: int | None = None
    workers_on_gpu_numa_node: bool | None = None
    binds: bool = False


@dataclass(frozen=True)
class PerNode(Record):
    """A sweep on several nodes, for one config (`settings`: the recommended one, else the
    fastest measured with per-node figures): each node (`nodes`), the rank that binds
    (`slowest_rank`, its stall `slowest_rank_stall_fraction`; its node is the row marked
    `binds`), the share of the step the job waited for its last rank's data
    (`step_stall_fraction`) and the MB/s the storage served summed over the nodes
    (`job_storage_mb_per_s`). num_workers is per rank."""

    settings: LoaderSettings
    nodes: list[NodeRow] = field(default_factory=list)
    slowest_rank: int | None = None
    slowest_rank_stall_fraction: float | None = None
    step_stall_fraction: float | None = None
    job_storage_mb_per_s: float | None = None


@dataclass
class Analysis(Record):
    """What `analysis.analyze()` derives from a result set's raw trials, beside each config's
    `Summary`: the recommendation, the compute ceilings as shown, the headroom from the user's
    settings, the loader ceiling, the fetch/prep splits, the notes on configs (findings beside
    the recommendation), the predictions with their share of the ceiling, the what-if answers
    (the pipeline model's to cpus= or disk=, `what_if`; the per-step waits' to ranks=,
    `what_if_ranks`) and a watched loop's prediction, whether the sweep stopped early, whether
    cold runs were ranked over warm ones, why loader ceilings were not probed, the loader
    measured when it is not torch's DataLoader or takes arguments of its own, a search's configs
    off the grid, and for a sweep on several nodes the per-node view (`per_node`)."""

    recommendation: Recommendation
    compute_ceilings: list[CeilingShown] = field(default_factory=list)
    headroom: Headroom | None = None
    loader_ceiling: LoaderCeiling | None = None
    fetch_prep: list[FetchPrep] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    what_if: WhatIfAnswer | None = None
    what_if_ranks: RanksAnswer | None = None
    more_workers: MoreWorkers | None = None
    partial: Partial | None = None
    cold_ranked: bool = False
    unprobed: list[str] = field(default_factory=list)
    loader: LoaderClass | None = None
    per_node: PerNode | None = None
    # A search's measured configs whose worker count the grid does not list (every count
    # between the grid's, or past them as the search widened), in the order measured.
    off_grid: list[LoaderSettings] = field(default_factory=list)
