"""Typed records shared by every module: settings, workloads, trials, results.

No I/O and no torch here: `show` and `compare` import this on a CPU-only runner and must start
fast. Every record converts to and from plain JSON-able dicts (`to_dict` / `from_dict`), which is
the only serialisation loaderbench uses (no pickle anywhere).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, TypeVar

from loaderbench import parsers

Status = Literal["ok", "failed", "hung", "skipped", "interrupted"]
MP_CONTEXTS = parsers.MP_CONTEXTS
DECODERS = ("pil", "torchvision", "nvjpeg")
"""The decoders of the synthetic dataset's JPEGs (the `decoder` grid axis; workload/decode.py)."""


# ---------------------------------------------------------------------------------------------
# The JSON boundary: records in memory hold enums and typed records; a result file holds their
# plain JSON values. `to_json` and `from_json` convert every `Record` field by field from its
# type hint, so a new field needs no code of its own (and a file written before it existed
# gives its default). A few dozen lines of our own rather than pydantic or cattrs: the result
# format is the core of the tool, and `show` on a CPU-only runner imports nothing more.
# ---------------------------------------------------------------------------------------------

R = TypeVar("R", bound="Record")


def split_threshold(values: Sequence[float]) -> tuple[float, float, float] | None:
    """Otsu's threshold of a 1-D sample (N. Otsu, "A threshold selection method from gray-level
    histograms", IEEE Trans. SMC 9(1), 1979): the split maximising the between-class variance.
    Returns (threshold, mean below, mean above), or None for fewer than two distinct values."""
    v = sorted(values)
    n, total = len(v), sum(v)
    best: tuple[float, float, float] | None = None
    best_var = -1.0
    below = 0.0
    for k in range(1, n):
        below += v[k - 1]
        if v[k] <= v[k - 1]:
            continue
        m0, m1 = below / k, (total - below) / (n - k)
        var = (k / n) * (1 - k / n) * (m1 - m0) ** 2
        if var > best_var:
            best_var, best = var, ((v[k - 1] + v[k]) / 2, m0, m1)
    return best


def to_json(value: Any) -> Any:
    """`value` as plain JSON values: a dataclass field by field (its `to_dict` when it has its
    own), an enum as its value, dict keys as strings, tuples as lists."""
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = getattr(value, "to_dict", None)
        if own is not None:
            return own()
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {(k.value if isinstance(k, Enum) else str(k)): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a dataclass's fields (cached per class)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def from_json(hint: Any, data: Any) -> Any:
    """`data` (plain JSON values) as the type `hint` names: records (their `from_dict`), enums
    from their values, ints as floats where a float is meant, dict keys back to enums or ints,
    lists of any of these. `None` stays None (and an empty string is None for an optional enum:
    files of schema 2 and before wrote an undecided verdict so). Raises ValueError or TypeError
    on a value the type cannot take."""
    if hint is Any:
        return data
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if data is None:
            return None
        if len(args) == 1:
            if data == "" and isinstance(args[0], type) and issubclass(args[0], Enum):
                return None
            return from_json(args[0], data)
        return data  # a union of plain types (str | list[str]): JSON keeps them apart
    if origin in (list, tuple):
        items_t = typing.get_args(hint)
        if origin is tuple and items_t and items_t[-1] is not Ellipsis:
            return tuple(from_json(a, v) for a, v in zip(items_t, data))
        item = items_t[0] if items_t else Any
        items = [from_json(item, v) for v in data]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        key_t, val_t = typing.get_args(hint) or (Any, Any)
        return {from_json(key_t, k): from_json(val_t, v) for k, v in data.items()}
    if isinstance(hint, type):
        if issubclass(hint, Enum):
            return hint(data)
        if hint is float:
            return float(data)
        if hint is int and not isinstance(data, bool):
            return int(data)
        if dataclasses.is_dataclass(hint):
            return hint.from_dict(data)  # type: ignore[attr-defined]
    return data


def fields_from_json(cls: type[Any], data: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of `cls` (a dataclass) from `data`: every init field present,
    converted from its hint (`from_json`); unknown keys are left out, missing ones take their
    defaults."""
    hints = _hints(cls)
    return {f.name: from_json(hints[f.name], data[f.name]) for f in dataclasses.fields(cls)
            if f.init and f.name in data}


class Record:
    """A dataclass that crosses the JSON boundary field by field (`to_json` / `from_json`)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: to_json(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[R], d: dict[str, Any]) -> R:
        return cls(**fields_from_json(cls, d))


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

    The values are what the table prints (and the result file holds); `Summary.verdict` holds
    the member.
    """

    COMPUTE_BOUND = "compute-bound"  # the step (almost) never waited
    STEP_SLOWED = "step slowed"  # the step (almost) never waited, but ran over 10% slower than alone
    LOADER_BOUND = "loader-bound"  # workers (or, with 0 workers, the main process) late building batches
    RECEIVE_FLOOR = "receive floor"  # the main process taking finished batches from workers
    H2D_PAGEABLE = "H2D-bound (pageable copy)"  # the host-to-device copy, from pageable memory
    H2D_NOT_HIDDEN = "H2D-bound (copy not hidden)"  # a pinned copy on the step's stream
    EPOCH_START_BOUND = "epoch-start-bound"  # the gaps at epoch starts (workers starting, the pipeline refilling)
    SAMPLER_BOUND = "sampler-bound"  # the sampler drawing indices in the main process
    GPU_DECODE_BOUND = "GPU-decode-bound"  # the main process decoding each batch on the GPU (nvJPEG)
    LOADER_ALONE = "loader alone"  # --compute none: no step to starve


class InputBound(str, Enum):
    """How input-bound a config is, by its stall fraction (the bands and their source are in
    analysis/thresholds.py); `LOADER_ALONE` with `--compute none`, where no step waits."""

    NOT = "not input-bound"
    MODERATELY = "moderately input-bound"
    HIGHLY = "highly input-bound"
    LOADER_ALONE = "loader alone"


WORKERS_COMPUTING = 0.50
"""Cores per worker (per CPU, with more workers than usable CPUs) at or above which a trial's
workers were computing over its window: its
receives then read as the main process's CPU seconds in them where fewer (Trial.receives_read_s),
since such a worker sends a finished batch from threads that wait for its GIL."""
CEILING_SLACK = 0.10
"""A sustained loader ceiling this close below the rate its row reached with the step is that
rate (the noise of either); further below it was disturbed and is shown as a bound at that rate
(NOTE [loader ceiling] in measure/loop.py; analysis/statistics.summarize over the repeats)."""
PROBE_BUILD_SE = 0.04
"""The relative standard error of the mean build that the loader-alone probe's in-order replay
waits for (NOTE [loader ceiling] in measure/loop.py); a replay that ended before its builds
reached it (the probe's time cap) is not set against a row's own uncertainty
(analysis/statistics.probe_settled)."""


class CeilingBound(str, Enum):
    """Why a config's loader ceiling is a bound (at least a figure), not a sustained rate (NOTE
    [loader ceiling] in measure/loop.py; `Trial.loader_alone_reason`)."""

    TIME_CAP = "time_cap"  # a worker could not build its batches within the probe's time
    EPOCH_END = "epoch_end"  # the epoch ended before every worker built its batches in the probe
    BELOW_STEP_RATE = "below_step_rate"  # the probe read below the row's own samples/s with the step
    LEGACY_PROBE = "legacy_probe"  # probed before sustained rates: half a second of draws, not a rate
    OTHER = "other"  # a reason this version does not know


class SustainedSettled(str, Enum):
    """How the pick's sustained figure came from its longer windows (NOTE [the pick's sustained
    figure] in orchestration/sustained.py; analysis.statistics.settle_windows decides it).
    `Sustained.settled` and `Knee.sustained_settled` hold the value."""

    ONE = "one window"  # one window: it agreed with the search's figure, or no time for a second
    POOLED = "two windows pooled"  # two windows within the tolerance of each other
    MIDDLE = "middle of three"  # two windows apart: the middle of their readings and the search's


class WaitPart(str, Enum):
    """The measured parts a config's data-wait is split into (NOTE [what the wait is made of] in
    analysis/wait.py)."""

    H2D = "h2d"  # the host-to-device copy on the step's path
    SAMPLER = "sampler"  # drawing indices in the main process
    EPOCH_START = "epoch-start"  # an epoch's start: workers starting, or its first batch built with none in flight
    RECEIVE = "receive"  # taking a finished batch from a worker (the receive floor)
    GPU_DECODE = "gpu-decode"  # decoding the batch on the GPU in the main process (--decoder nvjpeg)
    LOADER = "loader"  # the rest: batches not built in time (fetch + prep)


class FindingKind(str, Enum):
    """The kinds of finding the analysis draws: one payload class each in conclusions.py
    (analysis/advice.py makes them, render/findings.py writes their sentences)."""

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
    NOISY = "noisy"  # a config's repeats spread too far to trust small differences
    LISTED_FIRST = "listed-first"  # the order of a loader argument's values decided a tie at the knee
    STEP_SLOWED = "step-slowed"  # rows whose step ran over 10% slower than alone beside the loader
    IDLE_WORKERS = "idle-workers"  # workers that delivered no batch, or under a quarter of an equal share
    LATENCY_BOUND = "latency-bound"  # loader-bound rows whose workers wait more than they compute
    EPOCH_ITER = "epoch-iter"  # with persistent workers, each epoch's first batch many builds long
    WORKER_SLOWER = "worker-slower-than-main"  # one worker builds a batch several times slower than 0 workers
    EQUAL_CHEAPER = "equal-cheaper"  # cheaper configs measured within the tolerance of the pick, not picked
    LONG_TAIL = "long-tail"  # the per-sample build time has a long tail; in_order=False measured against it
    BATCHED_FETCH = "batched-fetch"  # a dataset without __getitems__ pays a large fixed cost per item
    DISTURBED_ROWS = "disturbed-rows"  # rows whose own windows ran beside a burst of other load or steal


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
    ("could oversubscribe", WarningKind.OVERSUBSCRIBED),
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
    """A warning on a config, or a note a trial made: `kind` for the code to act on, `message`
    for the person."""

    kind: WarningKind
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "message": self.message}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | str) -> Note:
        """From `to_dict` output, or from a plain string (schema 1), its kind read from the text;
        a kind this version does not know is OTHER."""
        if isinstance(d, str):
            return cls(WarningKind.of_text(d), d)
        try:
            kind = WarningKind(d.get("kind") or WarningKind.OTHER.value)
        except ValueError:
            kind = WarningKind.OTHER
        return cls(kind, str(d.get("message") or ""))

    @classmethod
    def of(cls, kind: WarningKind, message: str) -> Note:
        return cls(kind, message)


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
    keyword it is (None: not one, or not when None). `optional`: a setting left as torch (or
    loaderbench) has it unless asked for: its one default value is not passed as a keyword, and
    its column is hidden while every row has that value. `outer`: expanded first, so the rows
    of one value read as a worker curve. `phrase(value)`: the setting in a sentence (None: the
    name and the cell, "pin_memory on").

    `listed`: no cost order is known between its values, so, as for a loader argument, the value
    listed first wins a tie (`order` is then unused: the position of each config's value in the
    user's list is kept in `LoaderSettings.axis_order`). `cuda_values`: values that mean nothing
    without CUDA: dropped from the grid there, with a line saying so (plan.drop_cuda_values).
    `datasets`: the dataset kinds it applies to (None: every kind); with another kind, giving
    it is a usage error. `min_torch`: the (major, minor) torch version whose DataLoader first
    took the keyword; on an older torch a value other than the default is a usage error that
    says so.
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
    phrase: Callable[[Any], str] | None = None
    listed: bool = False
    cuda_values: tuple[Any, ...] = ()
    datasets: tuple[str, ...] | None = None
    min_torch: tuple[int, int] | None = None

    def words(self, value: Any) -> str:
        """The setting at `value` in a sentence, e.g. "4 workers", "pin_memory on", "CUDA prefetcher off"."""
        return self.phrase(value) if self.phrase is not None else f"{self.name} {self.cell(value)}"

    @property
    def unset(self) -> Any:
        """The value of an `optional` axis that leaves the setting as it is (its one default);
        None for any other axis."""
        return self.default[0] if self.optional and self.default else None

    @property
    def flag(self) -> str:
        """Its command-line flag: `--` + its name with dashes."""
        return "--" + self.name.replace("_", "-")


GRID_AXES: tuple[Axis, ...] = (
    Axis("num_workers", parsers.int_in(0, 1024), None, "N,N...",
         "DataLoader worker processes (default: 0, powers of two below the usable CPUs, and that count).",
         "workers", lambda v: f"w{v}", str, int, loader_kw="num_workers",
         phrase=lambda v: f"{v} worker{'' if v == 1 else 's'}"),
    Axis("pin_memory", parsers.boolean, (False, True), "off,on", "Pinned (page-locked) host memory for the batches.",
         "pin", lambda v: "pin" if v else "nopin", _onoff, int, loader_kw="pin_memory", cuda_only=True, idle=False),
    Axis("prefetch", parsers.boolean, (False, True), "off,on",
         "loaderbench's CUDA-stream prefetcher (copies batch N+1 while N computes).",
         "prefetch", lambda v: "pf" if v else "nopf", _onoff, int, cuda_only=True, idle=False,
         # In sentences, loaderbench's prefetcher is never "prefetch" (prefetch_factor is the DataLoader's).
         phrase=lambda v: f"CUDA prefetcher {_onoff(v)}"),
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
         loader_kw="multiprocessing_context", workers_only=True, idle=None, optional=True,
         phrase=lambda v: f"{v or 'default'} start method"),
    Axis("worker_threads", parsers.int_in(1, 1024), (None,), "N,N...",
         "Intra-op threads set in each worker at start (torch's default is 1).",
         "worker threads", lambda v: None if v is None else f"wt{v}", lambda v: str(v or 1), lambda v: v or 1,
         workers_only=True, idle=None, optional=True,
         phrase=lambda v: f"{v or 1} thread{'' if (v or 1) == 1 else 's'} per worker"),
    Axis("main_threads", parsers.int_in(1, 1024), (None,), "N,N...",
         "Intra-op threads of the main process (default: torch's).",
         "main threads", lambda v: None if v is None else f"mt{v}", lambda v: "default" if v is None else str(v),
         lambda v: v or 0, optional=True,
         phrase=lambda v: "default main threads" if v is None else f"{v} main thread{'' if v == 1 else 's'}"),
    Axis("in_order", parsers.boolean, (True,), "on,off",
         "Hand batches out in sampler order (DataLoader's in_order, torch >= 2.6); off lets a batch that is ready "
         "overtake a slow one.",
         "in order", lambda v: None if v else "unordered", _onoff, lambda v: 0 if v else 1,
         loader_kw="in_order", workers_only=True, idle=True, optional=True, min_torch=(2, 6),
         phrase=lambda v: "in order" if v else "in_order off (ready batches overtake)"),
    Axis("decoder", parsers.choice(DECODERS), ("pil",), ",".join(DECODERS),
         "How the synthetic dataset's JPEGs are decoded and cropped: pil (PIL in the workers), torchvision "
         "(torchvision.io.decode_jpeg and transforms.v2 on uint8 tensors in the workers) or nvjpeg (the workers "
         "send the encoded bytes; each batch is decoded and cropped on the GPU).",
         "decoder", lambda v: None if v == "pil" else v, str, lambda v: 0,
         idle="pil", optional=True, listed=True, cuda_values=("nvjpeg",), datasets=("synthetic",),
         phrase=lambda v: f"{v} decoder"),
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

    `in_order`: DataLoader's `in_order` (torch >= 2.6; True is torch's default, and is not passed).
    `decoder`: how the synthetic dataset's JPEGs are decoded (model.DECODERS; workload/decode.py).

    `loader_args`: the extra keyword arguments of the user's loader class (`--loader-arg
    NAME=V1,V2`, NOTE [loader settings]) as (name, value) pairs in the order the user declared
    them; a dict is accepted and kept in its order. `loader_arg_order`: for each of them, the
    position of its value in the list the user gave (0 = listed first), the only cost order such
    a setting has; it does not take part in equality (two configs with the same values are the
    same config) and defaults to 0 for each. `axis_order`: the same for the grid axes without a
    cost order (`Axis.listed`): (axis name, position) pairs, a dict accepted; an axis left out
    is at position 0.
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
    in_order: bool = True
    decoder: str = "pil"
    loader_args: tuple[tuple[str, Any], ...] = ()
    loader_arg_order: tuple[int, ...] = field(default=(), compare=False)
    axis_order: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        raw: Any = self.axis_order
        listed: dict[str, int] = dict(raw) if isinstance(raw, dict) else {str(k): int(v) for k, v in raw}
        object.__setattr__(self, "axis_order", tuple(
            (a.name, int(listed[a.name])) for a in GRID_AXES if a.listed and int(listed.get(a.name) or 0)))
        args = self.loader_args
        if isinstance(args, dict):
            args = tuple(args.items())
        args = tuple((str(k), v) for k, v in args)
        order = self.loader_arg_order
        if isinstance(order, dict):
            order = tuple(int(order.get(k, 0)) for k, _ in args)
        order = tuple(int(i) for i in order)
        if len(order) != len(args):
            order = (0,) * len(args)
        object.__setattr__(self, "loader_args", args)
        object.__setattr__(self, "loader_arg_order", order)

    def value(self, name: str) -> Any:
        """The value of setting `name`: a grid axis, or a loader argument (KeyError when neither)."""
        if name in AXES_BY_NAME:
            return getattr(self, name)
        for k, v in self.loader_args:
            if k == name:
                return v
        raise KeyError(name)

    def key(self) -> str:
        """A short stable identifier, e.g. `w4-pin-pf-f2-once-b64` (used to match configs): every
        axis's part, in GRID_AXES order, then `NAME=VALUE` for each loader argument
        (`w2-f2-once-b16-snapshot_every_n_steps=1000`)."""
        parts = [a.key(getattr(self, a.name)) for a in GRID_AXES]
        parts += [f"{k}={loader_arg_text(v)}" for k, v in self.loader_args]
        return "-".join(p for p in parts if p)

    def dataloader_kwargs(self) -> dict[str, Any]:
        """The keyword arguments to pass to `torch.utils.data.DataLoader` (or the user's loader
        class) (no `prefetch`): the axes that are DataLoader keywords, those that mean something
        without workers only with workers, an optional one only when set, then the loader
        arguments."""
        kwargs: dict[str, Any] = {}
        for a in sorted(GRID_AXES, key=lambda a: not a.outer):  # batch_size first, as people write it
            value = getattr(self, a.name)
            if a.loader_kw is None or (a.workers_only and self.num_workers == 0) or (a.optional and value == a.unset):
                continue
            kwargs[a.loader_kw] = value
        kwargs.update(self.loader_args)
        return kwargs

    def listed_at(self, name: str) -> int:
        """Where this config's value of axis `name` stood in the user's list (0: listed first;
        `axis_order`)."""
        return dict(self.axis_order).get(name, 0)

    def structural_key(self) -> tuple[int, ...]:
        """The fixed cost order among configs of equal measured cost (NOTE [cost order] in
        analysis/knee.py): every axis's `order`, workers first, then the axes in GRID_AXES
        order, batch size last; then the axes without a cost order (`Axis.listed`) and the
        loader arguments, each by the position of its value in the user's list (no cost order
        is known for them: the value listed first wins a tie)."""
        first = [a for a in GRID_AXES if a.name == "num_workers"]
        last = [a for a in GRID_AXES if a.outer]
        middle = [a for a in GRID_AXES if a not in first and a not in last and not a.listed]
        return (tuple(a.order(getattr(self, a.name)) for a in first + middle + last)
                + tuple(self.listed_at(a.name) for a in GRID_AXES if a.listed) + self.loader_arg_order)

    def to_dict(self) -> dict[str, Any]:
        """The axes by name; with loader arguments, also `loader_args` ({name: value}) and
        `loader_arg_order` ({name: position in the user's list}); with a value of a listed axis
        that was not listed first, `axis_order` ({axis name: position})."""
        d: dict[str, Any] = {a.name: getattr(self, a.name) for a in GRID_AXES}
        if self.loader_args:
            d["loader_args"] = dict(self.loader_args)
            d["loader_arg_order"] = {k: i for (k, _), i in zip(self.loader_args, self.loader_arg_order)}
        if self.axis_order:
            d["axis_order"] = dict(self.axis_order)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoaderSettings:
        """From `to_dict` output; an axis missing from `d` (a file written before the axis existed)
        takes its idle value, and a file without loader arguments has none."""
        values: dict[str, Any] = {}
        for a in GRID_AXES:
            v = d.get(a.name, a.idle)
            values[a.name] = v if v is None else a.parse(v)
        args = tuple((str(k), v) for k, v in (d.get("loader_args") or {}).items())
        order = d.get("loader_arg_order") or {}
        return cls(**values, loader_args=args, loader_arg_order=tuple(int(order.get(k, 0)) for k, _ in args),
                   axis_order=tuple((str(k), int(v)) for k, v in (d.get("axis_order") or {}).items()))


def loader_arg_text(value: Any) -> str:
    """A loader argument's value as the key and the table write it: `1000`, `True`, `None`, `'x'`
    (Python's repr, so it reads as the keyword would be written)."""
    return repr(value)


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
    `sampler_args`: the keywords the sweep passed to that factory (those of `batch_size`, `seed`,
    `rank`, `world_size` its signature accepts: sampling.accepted_keywords) with the values of a
    config's first repeat (`batch_size` the smallest batch size; `rank` and `world_size` None in
    a distributed sweep, where each rank passes its own), also filled in before the sweep: the
    recommended call passes the same.
    `samples_per_batch`: the number of samples in every batch, when the DataLoader's own count
    (indices per batch, or items collated for an IterableDataset) is not it (items that are
    themselves several samples).
    `loader`: "module:name" of the user's loader class, or a factory called like
    `torch.utils.data.DataLoader` (`--loader`; None: torch's DataLoader). NOTE [loader settings]
    in measure/trial.py says how it is measured.
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
    sampler_args: dict[str, Any] | None = None
    loader: str | None = None

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
    """The step that consumes each batch: `none`, `sleep` (ms), `spin` (ms, GPU), `model` (a
    torchvision model's training step) or `step` (the user's own: `factory` = "module:name",
    called with the device, returns the step; workload/compute.py `UserStep`)."""

    kind: str = "sleep"
    ms: float = 0.0
    model: str | None = None
    factory: str | None = None

    def label(self) -> str:
        if self.kind == "none":
            return "none"
        if self.kind == "model":
            return f"model:{self.model}"
        if self.kind == "step":
            return f"step:{self.factory}"
        return f"{self.kind}:{self.ms:g}"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if self.factory is None:
            del d["factory"]  # the other kinds' records stay as they were
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ComputeSpec:
        return cls(kind=d["kind"], ms=float(d.get("ms", 0.0)), model=d.get("model"), factory=d.get("factory"))


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
    receive floor, see runner.probe_receive); `receive_cpu_s`, the main process's CPU seconds
    (all its threads) in each of them, one for one (empty in files written before it was
    recorded; NOTE [receive floor]). `h2d_s`: per measured batch, the host-to-device
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
    # The workers' run-queue delay over the window, in cores x 100 (measure/meter.run_queue_s):
    # runnable, waiting for a CPU.
    workers_runq_pct: float | None = None
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
    receive_cpu_s: list[float] = field(default_factory=list)
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
    # Per measured batch, the main-process seconds spent decoding on the GPU inside that batch's
    # next() and its preparation (--decoder nvjpeg: the decode holds the calling thread, NOTE
    # [decoding on the GPU] in workload/decode.py); [] when there is none.
    gpu_decode_s: list[float] = field(default_factory=list)
    # Window positions (indices into the per-batch lists) of batches that started an epoch; the
    # batches and samples per epoch of a loader that restarts every epoch (its batch sampler's
    # length, the indices it draws; None when unknown: an IterableDataset, a user's sampler, one
    # long epoch, or a watched loop). NOTE [epoch starts weighed once per epoch].
    epoch_start_batches: list[int] = field(default_factory=list)
    epoch_batches: int | None = None
    epoch_samples: int | None = None
    # Main-process seconds the sampler spent before the first batch arrived (drawing an epoch's
    # index list, and the index lists dispatched to the workers); None when not measured.
    first_batch_sampler_s: float | None = None
    # How `samples` was counted: 'indices' (map-style: indices per batch), 'items' (an
    # IterableDataset's items collated per batch) or 'given' (--samples-per-batch).
    samples_rule: str | None = None
    numpy_leaves: int | None = None
    # The loader ceiling (NOTE [loader ceiling] in measure/loop.py). `loader_alone_samples_per_s`
    # is a sustained rate only (None otherwise). `loader_alone_method`: "sustained", "bound" (the
    # loader alone delivers at least `loader_alone_bound_samples_per_s`, never less than the row's
    # own samples/s; `loader_alone_reason` says why no rate: "time_cap", "epoch_end" or
    # "below_step_rate", the probe reading `loader_alone_probe_samples_per_s` below the row's
    # rate), "legacy" (a file's probe from before sustained rates, set on reading it: shown as a
    # bound at the row's own rate, schema.migrate) or None (not probed; a rate set without a method
    # counts as sustained).
    loader_alone_samples_per_s: float | None = None
    loader_alone_note: str | None = None  # why the loader ceiling was not probed, or is only a bound
    loader_alone_method: str | None = None
    loader_alone_bound_samples_per_s: float | None = None
    loader_alone_reason: str | None = None
    loader_alone_probe_samples_per_s: float | None = None
    # The relative standard error of the mean build the in-order replay used (None: no replay).
    loader_alone_build_se: float | None = None
    loader_alone_intervals: int | None = None  # fewest whole units (builds or bursts) a delivering worker timed
    # Batches each DataLoader worker delivered (index = worker id; [] with 0 workers or when not
    # recorded): in the measured window, and in the loader-alone probe.
    worker_batches: list[int] = field(default_factory=list)
    loader_alone_worker_batches: list[int] = field(default_factory=list)
    # The workers' sustained production over the first batch, the warm-up and the window, in
    # samples/s (NOTE [production in the window] in measure/timing.py); None when not measured.
    production_samples_per_s: float | None = None
    # Window positions of the batches a worker had completed before the loop asked for them:
    # their whole wait was taking them (NOTE [what the wait is made of] in analysis/wait.py).
    ready_batches: list[int] = field(default_factory=list)
    # Batches a worker finishes together (a block of items at once: more than 1), the median over
    # its workers (measure/timing.production_unit_batches); None when not measured.
    production_unit_batches: float | None = None
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

    def receives_read_s(self, num_workers: int, usable_cpus: int | None = None) -> list[float]:
        """The trial's receives (`receive_s`), each read as the main process's CPU seconds in it
        where those are fewer (`receive_cpu_s`) when its workers were computing
        (`workers_computing`); else as timed. NOTE [receive floor] in measure/loop.py: a worker
        busy in Python sends a finished batch late, and that wait is the loader's, not the cost
        of taking the batch; round trips to idle workers are the receive's own (113 small tensors
        from sleeping workers)."""
        wall, cpu = self.receive_s, self.receive_cpu_s
        if len(cpu) != len(wall) or not self.workers_computing(num_workers, usable_cpus):
            return list(wall)
        return [min(w, c) for w, c in zip(wall, cpu)]

    def workers_computing(self, num_workers: int, usable_cpus: int | None = None) -> bool:
        """Whether the trial's workers were computing over its window: WORKERS_COMPUTING cores or
        more for each worker that had a CPU ((tree CPU - main process CPU) / min(num_workers,
        `usable_cpus`): 4 workers computing on 1 usable CPU hold 0.25 cores each and the whole
        CPU); False without workers or the CPU readings."""
        if num_workers <= 0 or self.cpu_util_pct is None or self.main_cpu_util_pct is None:
            return False
        share = min(num_workers, usable_cpus) if usable_cpus and usable_cpus > 0 else num_workers
        return max(0.0, self.cpu_util_pct - self.main_cpu_util_pct) / 100.0 / share >= WORKERS_COMPUTING

    def per_rank(self) -> list[Trial]:
        """The ranks' own trials of this repeat (index = rank): `rank_trials`, or this trial
        itself for a single process."""
        return [Trial.from_dict(d) for d in self.rank_trials] if self.rank_trials else [self]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["notes"] = [n.to_dict() for n in self.notes]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        names = {f.name for f in dataclasses.fields(cls)}
        t = cls(**{k: v for k, v in d.items() if k in names})
        t.notes = [n if isinstance(n, Note) else Note.from_dict(n) for n in t.notes]
        return t


class CeilingMethod(str, Enum):
    """How a compute ceiling was found."""

    ANALYTIC = "analytic"  # a sleep:MS step: the batch over the step time
    MEASURED = "measured"  # the step fed one batch already on the device, in a measuring process
    WATCHED = "watched"  # the watched loop's own compute time per step (loaderbench.watch)


@dataclass(frozen=True)
class Ceiling(Record):
    """The compute ceiling at one batch size: the most samples/s the step alone takes, fed a
    batch already on the device (summed over ranks in a distributed sweep, each rank's own in
    `rank_samples_per_s`, index = rank). `step_s`: seconds per step (the slowest rank's);
    `samples_per_batch`: the samples of the batch the step was fed (None: `batch_size`);
    `batches` and `device`: how a measured ceiling was measured; `first_step_s`: the first
    reading's step time where the rows' steps outran it and it was measured again (NOTE [a
    ceiling the rows outran] in orchestration/ceilings.py). The one record of a ceiling:
    `ResultSet.ceilings` holds one per batch size."""

    batch_size: int
    samples_per_s: float
    step_s: float
    method: CeilingMethod = CeilingMethod.MEASURED
    samples_per_batch: float | None = None
    world_size: int = 1
    rank_samples_per_s: tuple[float, ...] = ()
    batches: int | None = None
    device: str | None = None
    first_step_s: float | None = None

    @classmethod
    def analytic(cls, batch_size: int, step_s: float, world_size: int = 1) -> Ceiling:
        """A `sleep:MS` step's ceiling: `batch_size` / `step_s` per rank, times `world_size`
        ranks. Raises ValueError for a step of no time."""
        if step_s <= 0:
            raise ValueError("an analytic ceiling needs a step of some time")
        per_rank = batch_size / step_s
        return cls(batch_size, world_size * per_rank, step_s, CeilingMethod.ANALYTIC, world_size=world_size,
                   rank_samples_per_s=(per_rank,) * world_size if world_size > 1 else ())

    @classmethod
    def merged(cls, ranks: list[Ceiling]) -> Ceiling:
        """A distributed job's ceiling from each rank's (index = rank): samples/s summed over
        ranks, the slowest rank's step time and record, and each rank's own samples/s. Raises
        ValueError for no ranks."""
        if not ranks:
            raise ValueError("a merged ceiling needs at least one rank")
        slowest = max(ranks, key=lambda c: c.step_s)
        return dataclasses.replace(slowest, samples_per_s=sum(c.samples_per_s for c in ranks),
                                   rank_samples_per_s=tuple(c.samples_per_s for c in ranks), world_size=len(ranks))


@dataclass
class NodeFigures(Record):
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


@dataclass
class Summary(Record):
    """Statistics of a config, derived from its trials (medians across repeats), and what the
    analysis judged of it (analysis/: each field says which pass sets it)."""

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
    workers_runq_pct: float | None = None
    memory_pss_bytes: int | None = None
    receive_p50_s: float | None = None
    h2d_p50_s: float | None = None
    h2d_gb_per_s: float | None = None
    h2d_hidden_fraction: float | None = None
    batch_bytes: int | None = None
    # The loader ceiling (NOTE [loader ceiling] in measure/loop.py): the median sustained rate
    # over the trials that probed it; else, when a probe gave only a bound, the highest bound
    # (the loader alone delivers at least that) and why it is one.
    loader_ceiling_samples_per_s: float | None = None
    loader_ceiling_bound_samples_per_s: float | None = None
    loader_ceiling_bound: CeilingBound | None = None
    # The compute ceiling at this config's samples per batch (analysis/ceiling.py).
    compute_ceiling_samples_per_s: float | None = None
    storage_mb_per_s: float | None = None
    storage_fraction: float | None = None
    served_from: ServedFrom | None = None  # the trials' one value, MIXED when they differ
    stall_period_batches: int | None = None
    workers_needed: int | None = None
    # Mean seconds per measured batch of each part of the data-wait (median over repeats), and
    # whether the verdict rests on the tail alone (analysis/wait.py).
    wait_parts_s: dict[WaitPart, float] = field(default_factory=dict)
    tail_only: bool = False
    samples_per_s_min: float | None = None
    samples_per_s_max: float | None = None
    repeats: int = 1
    verdict: Verdict | None = None
    # Distributed sweeps: per rank (index = rank), the median over repeats of that rank's own
    # samples/s and stall fraction; `slowest_rank` is the rank whose loader held the job back
    # (highest stall fraction) in most repeats. None / [] for a single-process sweep.
    world_size: int | None = None
    rank_samples_per_s: list[float] = field(default_factory=list)
    rank_stall_fraction: list[float] = field(default_factory=list)
    slowest_rank: int | None = None
    # -- the summaries pass (analysis/statistics.py) --
    samples_per_batch: float | None = None  # samples per measured batch, as counted (NOTE [samples per batch])
    mean_step_s: float | None = None  # samples per batch x ranks / samples/s: one step's mean time
    spread: float = 0.0  # (max - min) / median of throughput over repeats; 0 with one repeat
    # The relative standard error of the repeats' mean samples/s from their windows' own
    # batch-to-batch variation (None: too few rounds of batches to tell), and how far the row's
    # figure may be off (±, a fraction): the larger of half the spread and two such errors
    # (NOTE [a window's own uncertainty] in analysis/statistics.py).
    window_se: float | None = None
    uncertainty: float = 0.0
    noisy: bool = False  # the uncertainty is past half the noise threshold: small differences are not to be trusted
    ranked: bool = True  # False: it counts duplicate samples (a REPLICATED warning) and is never ranked
    part_cached: bool = False  # part of the samples came from a cache (MIXED, or a middling share read)
    other_cores: float | None = None  # other processes' and steal's cores on the usable CPUs
    # Several ranks: the share of the step time the job waited for the last rank's data (the
    # per-step maximum over ranks of the data-wait; median over repeats), which the slowest
    # rank's own stall undercounts when the ranks' waits come at different steps. Several
    # nodes: each node's figures, the node of the slowest rank, and the MB/s read from storage
    # summed over every node (what a storage shared by every node served the job); [] / None for
    # one node (add_job_statistics).
    step_stall_fraction: float | None = None
    nodes: list[NodeFigures] = field(default_factory=list)
    slowest_node: int | None = None
    job_storage_mb_per_s: float | None = None
    # The workers' own CPU: (the tree's - the main process's) / num_workers, in cores (None without
    # workers or readings); batches each worker delivered in the first trial that counted them
    # (index = worker id), and the workers that delivered none or under IDLE_WORKER_SHARE of an
    # equal share in every trial that counted them, or that delivered none in the loader-alone
    # probe after the window (None: not counted).
    worker_cores: float | None = None
    # Share of each worker's window spent runnable but waiting for a CPU (workers_runq_pct / 100 /
    # num_workers; statistics.worker_queue_share).
    worker_queue_share: float | None = None
    worker_batches: list[int] = field(default_factory=list)
    idle_workers: int | None = None
    # The loader-alone probe's batches per worker where it named more idle workers than the window
    # (a worker whose share ran out during or before the window: statistics.worker_shares); [] else.
    idle_probe_batches: list[int] = field(default_factory=list)
    # -- the ceilings pass (analysis/ceiling.py) --
    ceiling_share: float | None = None  # samples/s over the compute ceiling
    # The mean compute per batch (the step beside the loader) over the step alone (the compute
    # ceiling's), less 1: 0.23 = the step ran 23% slower beside the loader. None: no ceiling.
    step_slowdown: float | None = None
    rank_ceiling_shares: list[float] = field(default_factory=list)  # each rank's over its own ceiling
    # -- the verdicts pass (analysis/wait.py) --
    band: InputBound | None = None
    cpu_saturated: bool | None = None  # the tree and other load used the usable CPUs (None: unknown)
    # Saturated, and the workers runnable without a CPU, or their delay unread (analysis/wait.workers_short_of_cpu).
    workers_short_of_cpu: bool | None = None
    step_slowed: bool = False  # the step ran over STEP_SLOWED slower beside the loader (wait.step_slowed)


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
        return any(w.kind is kind for w in self.warnings)

    @property
    def ranked(self) -> bool:
        """Measured and rankable: status ok, summarised, and not counting duplicate samples."""
        return self.status == "ok" and self.summary is not None and self.summary.ranked

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


SCHEMA_VERSION = 3


# ---------------------------------------------------------------------------------------------
# The stage profile (`loaderbench profile`): raw timings of where each sample's time goes, as the
# measuring code records them (measure/stages.py); analysis/stages.py derives the table.


class StageKind(str, Enum):
    """What a stage of the stage profile is. `where` a stage runs follows from it: the sample's
    stages and collate in each DataLoader worker (in the main process with num_workers=0), the
    rest in the main process."""

    READ = "read"  # file reads: open() and reads of files opened in __getitem__, torchvision.io.read_file
    DECODE = "decode"  # PIL Image.open / load / convert, torchvision.io decode_* / read_image
    TRANSFORM = "transform"  # one transform of a Compose found on the dataset (named by its class)
    REST = "rest"  # the rest of __getitem__: what no interception recognised
    COLLATE = "collate"  # the collate function, per batch
    RECEIVE = "receive"  # the main process taking a built batch from a worker (next() on a ready batch)
    PIN = "pin"  # pinning the batch's tensors (pin_memory=True, CUDA only)
    H2D = "h2d"  # the host-to-device copy (CUDA only)

    @property
    def per_batch(self) -> bool:
        """Whether the stage is timed once per batch (and divided by its samples)."""
        return self in (StageKind.COLLATE, StageKind.RECEIVE, StageKind.PIN, StageKind.H2D)

    @property
    def builds(self) -> bool:
        """Whether the stage is part of building a batch (in a worker, or in the main process
        with num_workers=0): a sample's stages and the collate, not the main process's part."""
        return self not in (StageKind.RECEIVE, StageKind.PIN, StageKind.H2D)


@dataclass(frozen=True)
class Stage:
    """One row of the stage profile: its `name` (unique in the profile: `read`, `decode`, a
    transform's class name such as `RandomResizedCrop`, `#2` added to a repeated one), its
    `kind` (a StageKind value) and `where` it runs ("worker" or "main")."""

    name: str
    kind: str
    where: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Stage:
        return cls(name=str(d["name"]), kind=str(d["kind"]), where=str(d["where"]))


@dataclass
class SampleTiming:
    """One sample through the stage profile, in seconds. `wall_s` / `cpu_s`: per stage name,
    the stage's self time in this sample (time in a nested stage counts for the inner one only;
    CPU is the calling thread's); `calls`: how often each stage was entered. `getitem_wall_s` /
    `getitem_cpu_s`: the whole `__getitem__` (or `next()` of an IterableDataset's iterator) with
    the interceptions in place. `queued_s` (per stage, self time like the others) and
    `getitem_queued_s`: the time the thread was runnable but queued for a CPU (Linux
    schedstat; empty / None where it cannot be read): wall above CPU that is other load on the
    machine, not I/O or a lock."""

    wall_s: dict[str, float]
    cpu_s: dict[str, float]
    getitem_wall_s: float
    getitem_cpu_s: float
    calls: dict[str, int] = field(default_factory=dict)
    queued_s: dict[str, float] = field(default_factory=dict)
    getitem_queued_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SampleTiming:
        return cls(**{k: d[k] for k in ("wall_s", "cpu_s", "getitem_wall_s", "getitem_cpu_s") if k in d},
                   calls=dict(d.get("calls") or {}), queued_s=dict(d.get("queued_s") or {}),
                   getitem_queued_s=d.get("getitem_queued_s"))


@dataclass
class BatchTiming:
    """One batch's per-batch stages (collate, receive, pin, H2D), in seconds of wall, of the
    calling thread's CPU and of its time queued for a CPU, per stage name; `samples` in the
    batch."""

    samples: int
    wall_s: dict[str, float]
    cpu_s: dict[str, float]
    queued_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BatchTiming:
        return cls(samples=int(d["samples"]), wall_s=dict(d["wall_s"]), cpu_s=dict(d["cpu_s"]),
                   queued_s=dict(d.get("queued_s") or {}))


@dataclass(frozen=True)
class FunctionTime:
    """One function of the profiler's pass over `__getitem__` (cProfile): its `function` name,
    `location` (file:line, or `~` for a built-in), `self_s` (time in its own code, callees
    excluded, summed over the pass), `calls`, and for a built-in the Python function that spent
    most of its time calling it (`called_from`)."""

    function: str
    location: str
    self_s: float
    calls: int
    called_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FunctionTime:
        return cls(function=str(d["function"]), location=str(d["location"]), self_s=float(d["self_s"]),
                   calls=int(d["calls"]), called_from=d.get("called_from"))


@dataclass(frozen=True)
class DecoderTiming(Record):
    """The JPEG decoders timed on `images` of the dataset's own JPEGs (captured while the stage
    profile ran), in turns over `rounds`, with `threads` intra-op threads (measure/alternatives.py
    NOTE [the other decoder, timed]): per image, PIL's decode to RGB and torchvision.io's
    `decode_jpeg` on the CPU, in wall and the thread's CPU milliseconds. `transforms`: the names
    of the dataset's transforms that followed the decode, timed on PIL's image
    (`transforms_pil_*`) and on torchvision's uint8 tensor (`transforms_tensor_*`); `dropped`: the
    conversions a tensor does not need (PILToTensor, ToImage), `stopped_at`: the transform that
    refused the tensor (the ones from it on are kept at their PIL cost; None when every one took
    it); `per_transform`: each of them, (CPU ms on PIL's image, CPU ms on the tensor; 0 when
    dropped). None where not measured."""

    images: int
    rounds: int
    threads: int
    pil_ms: float
    pil_cpu_ms: float
    torchvision_ms: float
    torchvision_cpu_ms: float
    transforms: list[str] = field(default_factory=list)
    transforms_pil_ms: float | None = None
    transforms_pil_cpu_ms: float | None = None
    transforms_tensor_ms: float | None = None
    transforms_tensor_cpu_ms: float | None = None
    dropped: list[str] = field(default_factory=list)
    stopped_at: str | None = None
    per_transform: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuDecodeTiming(Record):
    """nvJPEG's batched decode on `device`, timed on a batch of `batch_size` of the dataset's own
    JPEGs (the captured ones, repeated), `reps` times after a warm-up: the GPU milliseconds per
    batch (CUDA events) of `torchvision.io.decode_jpeg(list, device=...)` alone and with each
    image cropped and flipped on the GPU afterwards (workload/decode.GPUDecode), and the calling
    thread's CPU milliseconds per batch (torchvision waits for its decode)."""

    device: str
    batch_size: int
    reps: int
    decode_ms_per_batch: float
    decode_crop_ms_per_batch: float
    cpu_ms_per_batch: float


@dataclass(frozen=True)
class BatchedFetchTiming(Record):
    """A map-style dataset without `__getitems__` asked for `items` samples at once
    (`dataset[list of indices]`), against the same samples one by one, in turns over `rounds`:
    milliseconds per one-item call (`one_ms`) and per list call (`batch_ms`), wall. From them a
    fixed cost per call f and a cost per item v (t(1) = f + v, t(k) = f + k v)."""

    items: int
    rounds: int
    one_ms: float
    batch_ms: float

    @property
    def per_item_ms(self) -> float:
        """v = (t(k) - t(1)) / (k - 1), at least 0."""
        return max(0.0, (self.batch_ms - self.one_ms) / max(1, self.items - 1))

    @property
    def fixed_ms(self) -> float:
        """f = t(1) - v, at least 0: what every one-item call pays whatever it fetches."""
        return max(0.0, self.one_ms - self.per_item_ms)


# The part of a profile `StageRecord.cut_short` names when its time ended before it timed the CPU
# decoders or nvJPEG on the dataset's JPEGs.
DECODER_TIMING = "decoder timing"


@dataclass
class StageRecord:
    """The raw stage profile of one dataset and one set of DataLoader settings.

    `stages`: every stage looked for, in pipeline order. `samples`: the per-sample timings (the
    sample stages), `batches`: the per-batch ones. `plain_s`: `__getitem__` seconds of as many
    other samples fetched without the interceptions, in turn with the timed ones (NOTE [stage
    profile] in measure/stages.py), and `plain_queued_s` the seconds each was queued for a CPU
    (empty where not measured). `functions`: the profiler's pass over `__getitem__` with
    the recognised stages left out, over `attribution_samples` samples whose `__getitem__` took
    `attribution_getitem_s` under the profiler (of which `attribution_stages_s` in recognised
    stages), in turn with `attribution_plain_samples` others that took `attribution_plain_s`
    without it. `decoders`: decode calls per
    decoder (`PIL JPEG`, `torchvision.io decode_jpeg`). `sampled_in`: "this process" or "a
    DataLoader worker". `torch_threads`: the intra-op threads the samples were built with.
    `wall_s`: the whole profile's seconds, against `time_budget_s`; `cut_short`: the parts that
    the budget ended before their sample count. `iterable`: an IterableDataset (items timed
    alternately with and without the interceptions, not the same items twice).
    What else the profile may time (`ProfilePlan.alternatives`; measure/alternatives.py): the JPEG
    decoders on the dataset's own images (`decoder_timing`, from `jpegs_captured` JPEGs), nvJPEG
    on the GPU (`gpu_decode`), and a batched fetch of a dataset without `__getitems__`
    (`batched_fetch`); None where not timed.
    """

    stages: list[Stage]
    samples: list[SampleTiming]
    batches: list[BatchTiming]
    settings: LoaderSettings
    device: str
    plain_s: list[float] = field(default_factory=list)
    plain_queued_s: list[float] = field(default_factory=list)
    functions: list[FunctionTime] = field(default_factory=list)
    attribution_samples: int = 0
    attribution_getitem_s: float = 0.0
    attribution_stages_s: float = 0.0
    attribution_plain_samples: int = 0
    attribution_plain_s: float = 0.0
    decoders: dict[str, int] = field(default_factory=dict)
    sampled_in: str = "this process"
    torch_threads: int | None = None
    wall_s: float = 0.0
    time_budget_s: float = 0.0
    cut_short: list[str] = field(default_factory=list)
    iterable: bool = False
    decoder_timing: DecoderTiming | None = None
    gpu_decode: GpuDecodeTiming | None = None
    batched_fetch: BatchedFetchTiming | None = None
    jpegs_captured: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": [s.to_dict() for s in self.stages],
            "samples": [s.to_dict() for s in self.samples],
            "batches": [b.to_dict() for b in self.batches],
            "settings": self.settings.to_dict(),
            "device": self.device,
            "plain_s": list(self.plain_s),
            "plain_queued_s": list(self.plain_queued_s),
            "functions": [f.to_dict() for f in self.functions],
            "attribution_samples": self.attribution_samples,
            "attribution_getitem_s": self.attribution_getitem_s,
            "attribution_stages_s": self.attribution_stages_s,
            "attribution_plain_samples": self.attribution_plain_samples,
            "attribution_plain_s": self.attribution_plain_s,
            "decoders": dict(self.decoders),
            "sampled_in": self.sampled_in,
            "torch_threads": self.torch_threads,
            "wall_s": self.wall_s,
            "time_budget_s": self.time_budget_s,
            "cut_short": list(self.cut_short),
            "iterable": self.iterable,
            "decoder_timing": None if self.decoder_timing is None else self.decoder_timing.to_dict(),
            "gpu_decode": None if self.gpu_decode is None else self.gpu_decode.to_dict(),
            "batched_fetch": None if self.batched_fetch is None else self.batched_fetch.to_dict(),
            "jpegs_captured": self.jpegs_captured,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StageRecord:
        return cls(
            stages=[Stage.from_dict(s) for s in d["stages"]],
            samples=[SampleTiming.from_dict(s) for s in d["samples"]],
            batches=[BatchTiming.from_dict(b) for b in d["batches"]],
            settings=LoaderSettings.from_dict(d["settings"]),
            device=str(d["device"]),
            plain_s=[float(x) for x in d.get("plain_s") or []],
            plain_queued_s=[float(x) for x in d.get("plain_queued_s") or []],
            functions=[FunctionTime.from_dict(f) for f in d.get("functions") or []],
            attribution_samples=int(d.get("attribution_samples", 0)),
            attribution_getitem_s=float(d.get("attribution_getitem_s", 0.0)),
            attribution_stages_s=float(d.get("attribution_stages_s", 0.0)),
            attribution_plain_samples=int(d.get("attribution_plain_samples", 0)),
            attribution_plain_s=float(d.get("attribution_plain_s", 0.0)),
            decoders=dict(d.get("decoders") or {}),
            sampled_in=str(d.get("sampled_in", "this process")),
            torch_threads=d.get("torch_threads"),
            wall_s=float(d.get("wall_s", 0.0)),
            time_budget_s=float(d.get("time_budget_s", 0.0)),
            cut_short=list(d.get("cut_short") or []),
            iterable=bool(d.get("iterable", False)),
            decoder_timing=None if not d.get("decoder_timing") else DecoderTiming.from_dict(d["decoder_timing"]),
            gpu_decode=None if not d.get("gpu_decode") else GpuDecodeTiming.from_dict(d["gpu_decode"]),
            batched_fetch=None if not d.get("batched_fetch") else BatchedFetchTiming.from_dict(d["batched_fetch"]),
            jpegs_captured=int(d.get("jpegs_captured", 0)),
        )
