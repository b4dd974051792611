"""Sweep configuration: defaults < TOML file < command-line flags, validated in one place.

Every knob is declared once, in OPTIONS (the grid axes come from model.GRID_AXES): its TOML
section and key, its flag (`--` + key with dashes unless named otherwise), its parser, metavar,
help and default. The TOML schema, the `sweep` command's flags and their --help, and the keywords
of `loaderbench.sweep()` are derived from it. The sweep-level options (SWEEP_OPTIONS: repeats,
search, isolation, time_budget_s, config_timeout_s, tolerance, cache, drop_caches, profile) are settings of
the whole sweep rather than of one measurement: each is also the SweepConfig field of its name,
and its declaration's default is the field's, the one in its help and the one a result file
without the key reads back. A TOML file has a few top-level keys and four tables (every key optional):

    label = "quick"            # names the run in tables and compare
    baseline_settings = "num_workers=4,pin_memory=off"   # your current settings (headroom line)
    what_if = ["cpus=8", "decode=torchvision"]           # changes to predict (--what-if), combined
    output = "results/quick.json"
    seed = 0
    [dataset]   kind, data, num_samples, image_size, jpeg_quality, sample_shape, cpu_ms, io_ms,
                collate_fn, sampler, samples_per_batch, seed, and a [dataset.kwargs] table for
                a MODULE:FACTORY dataset (a key that the dataset kind does not use is an error)
    [compute]   step = "none" | "sleep:MS" | "spin:MS" | "model:NAME" | "step:MODULE:FACTORY"
    [loader]    class = "MODULE:NAME" (a DataLoader class, or a factory called like one), and a
                [loader.args] table of its other keyword arguments, each a list of values to
                sweep (in the order to prefer on a tie)
    [grid]      num_workers, pin_memory, prefetch, prefetch_factor, persistent_workers,
                batch_size, mp_context, worker_threads, main_threads, in_order, decoder
                (lists, or comma strings like "0,2,4"; decoder for the synthetic dataset only)
    [measure]   batches, warmup_batches, min_time_s, max_batches, repeats, search, isolation,
                time_budget_s, config_timeout_s, tolerance, epoch_batches, cache, drop_caches,
                profile, timing, device

Every error names the file or flag, the key, and the allowed values (ConfigError / UsageError,
exit code 2).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loaderbench import kinds, parsers
from loaderbench.errors import ConfigError
from loaderbench.model import GRID_AXES, ComputeSpec, DatasetSpec, MeasureSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TIMINGS = ("auto", "events", "sync", "host")
SEARCHES = ("auto", "grid")
ISOLATIONS = ("warm", "process")
CACHE_STATES = ("as-is", "cold", "warm", "both")


def parse_compute(v: Any) -> ComputeSpec:
    """`none`, `sleep:MS`, `spin:MS`, `model:NAME` or `step:MODULE:FACTORY` -> ComputeSpec
    (ValueError otherwise)."""
    s = str(v).strip()
    if s == "none":
        return ComputeSpec(kind="none")
    kind, _, arg = s.partition(":")
    if kind in ("sleep", "spin"):
        ms = parsers.float_in(0.0, 60_000.0)(arg) if arg else None
        if ms is None:
            raise ValueError(f"expected {kind}:MS with MS in milliseconds, e.g. {kind}:12")
        return ComputeSpec(kind=kind, ms=ms)
    if kind == "model" and arg:
        return ComputeSpec(kind="model", model=arg)
    if kind == "step":
        module, sep, name = arg.partition(":")
        if not sep or not module.strip() or not name.strip():
            raise ValueError(f"expected step:MODULE:FACTORY (a function called with the device that returns "
                             f"your train step), e.g. step:mytrain:make_step, got {v!r}")
        return ComputeSpec(kind="step", factory=f"{module.strip()}:{name.strip()}")
    raise ValueError(f"expected none, sleep:MS, spin:MS, model:NAME or step:MODULE:FACTORY, got {v!r}")


def _loader_ref(v: Any) -> str:
    """`MODULE:NAME` of a loader class or factory (ValueError otherwise)."""
    s = parsers.string(v).strip()
    module, sep, name = s.partition(":")
    if not sep or not module.strip() or not name.strip():
        raise ValueError(f"expected MODULE:NAME, e.g. torchdata.stateful_dataloader:StatefulDataLoader, got {v!r}")
    return f"{module.strip()}:{name.strip()}"


# The keyword arguments a loader argument may not name: the grid axes (they have their own flags)
# and what loaderbench passes itself (the dataset, the measured batch sampler, the counting
# collate, the worker threads' init function).
_LOADER_OWN = {
    **{a.loader_kw or a.name: f"--{a.name.replace('_', '-')}" for a in GRID_AXES},
    **{a.name: f"--{a.name.replace('_', '-')}" for a in GRID_AXES},
    "dataset": "the dataset option", "collate_fn": "--collate-fn", "sampler": "--sampler",
    "batch_sampler": "--sampler", "shuffle": "--sampler", "drop_last": "--sampler",
    "worker_init_fn": "--worker-threads",
}


def loader_value(v: Any) -> Any:
    """One value of a loader argument: a TOML scalar as it is; on the command line `none` is
    None, `true`/`false` a bool, a number a number, anything else a string (quotes stripped).
    A list or table is refused (a setting is one value)."""
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if not isinstance(v, str):
        raise ValueError(f"expected a number, true/false, none or a string, got {v!r}")
    t = v.strip()
    low = t.lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    return t


def _loader_arg_name(name: Any) -> str:
    n = str(name).strip()
    if not n.isidentifier():
        raise ValueError(f"expected NAME=V1,V2 with NAME a keyword argument of the loader, got {name!r}")
    if n in _LOADER_OWN:
        raise ValueError(f"{n} is set by loaderbench, not a loader argument: use {_LOADER_OWN[n]}")
    return n


def parse_loader_args(v: Any) -> dict[str, tuple[Any, ...]]:
    """The loader arguments to sweep: `NAME=V1,V2` (the flag, once per argument: a list of such
    strings) or a TOML table {NAME: [V1, V2]} -> {NAME: (V1, V2)}, values in the order given
    (the first is preferred on a tie), repeats dropped. ValueError for a malformed item, a name
    that is a grid axis or set by loaderbench, or a name given twice."""
    items: list[tuple[Any, Any]] = []
    if isinstance(v, dict):
        items = list(v.items())
    else:
        for part in [v] if isinstance(v, str) else list(v):
            name, sep, values = str(part).partition("=")
            if not sep or not values.strip():
                raise ValueError(f"expected NAME=V1,V2 such as snapshot_every_n_steps=1,1000, got {part!r}")
            items.append((name, values))
    out: dict[str, tuple[Any, ...]] = {}
    for name, values in items:
        n = _loader_arg_name(name)
        if n in out:
            raise ValueError(f"{n} is given twice; give all its values at once: {n}=V1,V2")
        if isinstance(values, str):  # a comma list, as on the command line
            raw = values.split(",")
            if any(not x.strip() for x in raw):
                raise ValueError(f"{n}: expected a non-empty comma list of values, got {values!r}")
            parsed = [loader_value(x) for x in raw]
        else:  # TOML or JSON values keep their types
            raw = list(values) if isinstance(values, (list, tuple)) else [values]
            if not raw:
                raise ValueError(f"{n}: expected a non-empty list of values")
            parsed = [_typed_value(n, x) for x in raw]
        out[n] = tuple(dict.fromkeys(parsed))
    return out


def _typed_value(name: str, v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise ValueError(f"{name}: expected numbers, true/false or strings, got {v!r}")


def _what_if_list(v: Any) -> tuple[str, ...]:
    """The what-if changes of a TOML config (`what_if = ["cpus=8", "decode=torchvision"]`, or one
    string): each parsed (analysis.predict.parse_what_if) and combined (split_what_if: a change
    given twice is refused), kept as written. ValueError naming the forms otherwise."""
    from loaderbench.analysis.predict import parse_what_if, split_what_if

    items = [v] if isinstance(v, str) else list(v) if isinstance(v, (list, tuple)) else None
    if items is None or not all(isinstance(x, str) for x in items):
        raise ValueError(f"expected a list of changes such as [\"cpus=8\", \"decode=torchvision\"], got {v!r}")
    split_what_if([parse_what_if(x) for x in items])
    return tuple(x.strip() for x in items)


def _dataset_kind(v: Any) -> str:
    s = str(v).strip()
    if (s in kinds.KINDS and s != "import") or (":" in s and all(s.partition(":")[::2])):
        return s
    hint = " (a folder of images: --data PATH)" if "/" in s or "\\" in s else ""
    names = ", ".join(k for k in kinds.KINDS if k != "import")
    raise ValueError(f"expected {names} or MODULE:FACTORY, got {v!r}{hint}")


_SETTING_PARSERS = {a.name: a.parse for a in GRID_AXES if a.name != "mp_context"}


def _baseline_settings(v: Any) -> dict[str, Any]:
    """`num_workers=4,pin_memory=off` (or a TOML table) -> {"num_workers": 4, "pin_memory": False}.
    A name that is not a grid axis is taken as a loader argument (`loader_value`), which
    `build_config` checks against `--loader-arg`."""
    if isinstance(v, dict):
        items = list(v.items())
    else:
        items = []
        for part in str(v).split(","):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"expected key=value pairs such as num_workers=4,pin_memory=off, got {v!r}")
            items.append((key.strip(), value.strip()))
    out: dict[str, Any] = {}
    for key, value in items:
        if key in _SETTING_PARSERS:
            out[key] = _SETTING_PARSERS[key](value)
        elif str(key).isidentifier() and key not in _LOADER_OWN:
            out[key] = loader_value(value)
        else:
            raise ValueError(f"unknown setting {key!r}; use {', '.join(_SETTING_PARSERS)} or a --loader-arg name")
    return out


@dataclass(frozen=True)
class Option:
    """One knob of a sweep: TOML `section` (`""` for the top level) and `key`, its parser, and
    how the `sweep` command shows it. `flag` None derives `--` + key with dashes; `cli` False
    keeps it TOML-only; `toggle` makes a bare on-flag (`--drop-caches`), or with `negates` a bare
    off-flag (`--no-profile`).

    `sweep_level` (made by `_sweep_option`): a setting of the whole sweep rather than of one
    measurement, kept as the `SweepConfig` field of the same name (not in `MeasureSpec`), whose
    `default` is this entry's: the field's default, `build_config`'s, the value `from_dict`
    takes for a result file written before the key existed, and the one in the help. Its Python
    keyword (`loaderbench.sweep(key=...)`) is the key."""

    section: str
    key: str
    parse: Callable[[Any], Any]
    metavar: str = "VALUE"
    help: str = ""
    flag: str | None = None
    cli: bool = True
    toggle: bool = False
    negates: bool = False  # a toggle that turns the option off (`--no-profile`)
    many: bool = False  # the flag may be given more than once (`--data A --data B`)
    sweep_level: bool = False
    default: Any = None

    @property
    def flag_name(self) -> str:
        return self.flag or "--" + self.key.replace("_", "-")

    def load(self, value: Any) -> Any:
        """A sweep-level value as saved in a result file, converted to the default's type (not
        parsed again: a file keeps what its run used, e.g. `isolation = "watched"`)."""
        return type(self.default)(value)


def _sweep_option(key: str, parse: Callable[[Any], Any], *, default: Any, help: str, metavar: str = "VALUE",
                  **kw: Any) -> Option:
    """The one declaration of a sweep-level option, a key in [measure]: `help` may name
    `{default}` (with a format spec, e.g. `{default:.0%}`), filled in from `default`."""
    return Option("measure", key, parse, metavar, help.format(default=default), sweep_level=True, default=default, **kw)


def _grid_option(axis: Any) -> Option:
    default = "" if axis.default is None or "default" in axis.help else (
        f" (default {','.join(_show(v) for v in axis.default)})")
    return Option("grid", axis.name, parsers.list_of(axis.parse), axis.metavar, axis.help[:-1] + default + ".")


def _show(v: Any) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else "default" if v is None else str(v)


# The sweep-level options, one declaration each (listed in OPTIONS below in the order of --help).
REPEATS = _sweep_option(
    "repeats", parsers.int_in(1, 100), default=3, metavar="N",
    help="Repeats per config, interleaved (default {default}); with --search auto, the most a deciding config gets.")
SEARCH = _sweep_option(
    "search", parsers.choice(SEARCHES), default="auto", metavar="HOW",
    help="auto: measure where the model says the knee is, and its neighbours (default); grid: every config.")
ISOLATION = _sweep_option(
    "isolation", parsers.choice(ISOLATIONS), default="warm", metavar="HOW",
    help="warm: one measuring process kept across configs, fresh DataLoader and workers each (default); "
         "process: a fresh process per config.")
TIME_BUDGET = _sweep_option(
    "time_budget_s", parsers.float_in(1.0, 7 * 86_400.0), default=120.0, metavar="S", flag="--time-budget",
    help="With --search auto, the seconds to the answer, counted from the command's start: no search step or repeat "
         "starts that would end later, keeping time for the drift check (default {default:g}); stopped early, the "
         "pick is the knee of what was measured.")
CONFIG_TIMEOUT = _sweep_option(
    "config_timeout_s", parsers.float_in(1.0, 7 * 86_400.0), default=600.0, metavar="S", flag="--config-timeout",
    help="Watchdog seconds per config: kills its process tree (default {default:g}).")
TOLERANCE = _sweep_option(
    "tolerance", parsers.float_in(0.0, 0.5), default=0.05, metavar="FRACTION",
    help="Knee tolerance against the best, e.g. 5% or 0.05 (default {default:.0%}).")
CACHE = _sweep_option(
    "cache", parsers.choice(CACHE_STATES), default="as-is", metavar="STATE",
    help="Page-cache state of a folder dataset before each config: as-is | cold | warm | both (default {default}).")
DROP_CACHES = _sweep_option(
    "drop_caches", parsers.boolean, default=False, toggle=True,
    help="With --cache cold, as root: drop all caches instead of per-file eviction.")
PROFILE = _sweep_option(
    "profile", parsers.boolean, default=True, toggle=True, negates=True, flag="--no-profile",
    help="Do not take the stage profile of the pick after the search (taken by default: where each sample's time "
         "goes, for the what-ifs on stages and decoders; its time counts against --time-budget).")

OPTIONS: tuple[Option, ...] = (
    Option("", "label", parsers.string, "NAME", "Name of this run (shown by show/compare)."),
    Option("", "output", parsers.string, cli=False),
    Option("", "seed", parsers.int_in(0, 2**31 - 1), "N", "Seed for data and sampling (default 0)."),
    Option("", "baseline_settings", _baseline_settings, "K=V,...",
           "Your current settings for the headroom line, e.g. num_workers=4,pin_memory=off (default: the first row)."),
    Option("", "what_if", _what_if_list, "CHANGE", "The what-if changes to predict (the --what-if flag's), combined.",
           cli=False),
    Option("dataset", "kind", _dataset_kind, "KIND", "synthetic (default) | folder | tensor | MODULE:FACTORY.",
           flag="--dataset"),
    Option("dataset", "data", parsers.paths, "PATH",
           "An image folder (implies --dataset folder), or the files a MODULE:FACTORY dataset reads "
           "(give it once per folder): --cache acts on them and reads are set against them.", many=True),
    Option("dataset", "num_samples", parsers.int_in(1, 100_000_000), "N",
           "Samples in the synthetic/tensor dataset (default 512)."),
    Option("dataset", "image_size", parsers.size, "WxH", "Synthetic image size (default 500x375)."),
    Option("dataset", "jpeg_quality", parsers.int_in(1, 100), "Q", "Synthetic JPEG quality (default 90)."),
    Option("dataset", "sample_shape", parsers.shape, "D,D,...", "tensor dataset sample shape (default 3,64,64)."),
    Option("dataset", "cpu_ms", parsers.float_in(0.0, 60_000.0), "MS", "tensor dataset: busy CPU ms per sample (default 0)."),
    Option("dataset", "io_ms", parsers.float_in(0.0, 60_000.0), "MS",
           "tensor dataset: sleep ms per sample, storage latency (default 0)."),
    Option("dataset", "collate_fn", parsers.string, "MODULE:NAME", "A collate function for your dataset."),
    Option("dataset", "sampler", parsers.string, "MODULE:FACTORY",
           "Your sampler or batch sampler, made from the dataset (map-style datasets)."),
    Option("dataset", "samples_per_batch", parsers.int_in(1, 1_000_000_000), "N",
           "Samples in every batch, when an item holds several (default: counted)."),
    Option("dataset", "seed", parsers.int_in(0, 2**31 - 1), cli=False),
    Option("dataset", "kwargs", parsers.any_value, cli=False),
    Option("compute", "step", parse_compute, "STEP",
           "none | sleep:MS | spin:MS | model:NAME | step:MODULE:FACTORY (your train step: FACTORY(device) returns "
           "a callable taking a batch on the device; default model:resnet50 with a GPU, sleep:100 without).",
           flag="--compute"),
    Option("loader", "class", _loader_ref, "MODULE:NAME",
           "Your loader class, or a factory called like DataLoader (default torch.utils.data.DataLoader).",
           flag="--loader"),
    Option("loader", "args", parse_loader_args, "NAME=V1,V2",
           "A keyword argument of the loader swept as a grid axis, e.g. snapshot_every_n_steps=1,1000 (give the "
           "flag once per argument); no cost order is known, so a tie goes to the value listed first.",
           flag="--loader-arg", many=True),
    *(_grid_option(a) for a in GRID_AXES),
    Option("measure", "batches", parsers.int_in(1, 1_000_000), "N", "Measured batches per config, at least (default 10)."),
    Option("measure", "warmup_batches", parsers.int_in(0, 100_000), "N",
           "Batches dropped after the first (raised to workers x prefetch_factor; default 3)."),
    Option("measure", "min_time_s", parsers.float_in(0.0, 86_400.0), "S",
           "Measure at least this many seconds per config (default 1).", flag="--min-time"),
    Option("measure", "max_batches", parsers.int_in(1, 10_000_000), "N",
           "Measure at most this many batches per config (default 10000)."),
    REPEATS,
    SEARCH,
    ISOLATION,
    TIME_BUDGET,
    CONFIG_TIMEOUT,
    TOLERANCE,
    Option("measure", "epoch_batches", parsers.int_in(1, 100_000_000), "N",
           "Batches per epoch, to weigh worker start-up (default: dataset length / batch size)."),
    CACHE,
    DROP_CACHES,
    PROFILE,
    Option("measure", "timing", parsers.choice(TIMINGS), "HOW", "auto | events | sync | host (default auto)."),
    Option("measure", "device", parsers.string, "DEVICE", "auto | cpu | cuda | cuda:N (default auto)."),
)
SCHEMA: dict[str, dict[str, Callable[[Any], Any]]] = {}
for _o in OPTIONS:
    SCHEMA.setdefault(_o.section, {})[_o.key] = _o.parse
_BY_SECTION = {(o.section, o.key): o for o in OPTIONS}


def option(section: str, key: str) -> Option:
    """The Option of a TOML key (KeyError when there is none)."""
    return _BY_SECTION[(section, key)]


# The keys in [measure] that are not MeasureSpec fields but settings of the whole sweep: each is
# the SweepConfig field of the same name, its default the declaration's.
SWEEP_OPTIONS: tuple[Option, ...] = tuple(o for o in OPTIONS if o.sweep_level)


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep. `grid` maps every axis of model.GRID_AXES to its values; None (for
    num_workers and batch_size) and a None `compute` mean "pick the default for this machine"
    (sweep.resolve_defaults)."""

    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    compute: ComputeSpec | None = None
    grid: dict[str, tuple[Any, ...] | None] = field(default_factory=lambda: {a.name: a.default for a in GRID_AXES})
    measure: MeasureSpec = field(default_factory=MeasureSpec)
    # The sweep-level options: one field per entry of SWEEP_OPTIONS, its default the entry's.
    repeats: int = REPEATS.default
    search: str = SEARCH.default
    isolation: str = ISOLATION.default
    time_budget_s: float = TIME_BUDGET.default
    config_timeout_s: float = CONFIG_TIMEOUT.default
    tolerance: float = TOLERANCE.default
    cache: str = CACHE.default
    drop_caches: bool = DROP_CACHES.default
    profile: bool = PROFILE.default
    # Set by sweep.resolve_defaults when --num-workers was not given: the search may then try
    # every worker count up to the default grid's largest (not saved: the file keeps the grid).
    dense_workers: bool = False
    label: str = ""
    output: str | None = None
    seed: int = 0
    baseline_settings: dict[str, Any] = field(default_factory=dict)
    source: str = "defaults"
    # The loader arguments swept (`--loader-arg`, [loader.args]): name -> values in the order
    # given; every config takes one value of each (grid.expand_grid). The class is
    # `dataset.loader`.
    loader_args: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # The what-if changes to predict (TOML `what_if`; the --what-if flags replace them).
    what_if: tuple[str, ...] = ()

    def with_grid(self, **axes: tuple[Any, ...] | None) -> SweepConfig:
        """A copy with some grid axes replaced."""
        return replace(self, grid={**self.grid, **axes})

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as saved in the result file."""
        return {
            "label": self.label,
            "seed": self.seed,
            "baseline_settings": dict(self.baseline_settings),
            "dataset": self.dataset.to_dict(),
            "compute": None if self.compute is None else self.compute.to_dict(),
            "grid": {a.name: None if self.grid.get(a.name) is None else list(self.grid[a.name])  # type: ignore[arg-type]
                     for a in GRID_AXES},
            "measure": {
                **self.measure.to_dict(),
                **{o.key: getattr(self, o.key) for o in SWEEP_OPTIONS},
            },
            "source": self.source,
            **({"loader_args": {k: list(v) for k, v in self.loader_args.items()}} if self.loader_args else {}),
            **({"what_if": list(self.what_if)} if self.what_if else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepConfig:
        """The config `to_dict` wrote (a result file's `config`), values parsed again; keys a
        later version added take their defaults. Raises ConfigError for a value that no longer
        parses."""
        grid_raw = d.get("grid") or {}
        grid: dict[str, tuple[Any, ...] | None] = {}
        for a in GRID_AXES:
            values = grid_raw.get(a.name, a.default)
            grid[a.name] = None if values is None else tuple(
                v if v is None else a.parse(v) for v in values)
        measure_raw = dict(d.get("measure") or {})
        sweep_level = {o.key: o.load(measure_raw.pop(o.key, o.default)) for o in SWEEP_OPTIONS}
        compute = d.get("compute")
        return cls(
            dataset=DatasetSpec.from_dict(d.get("dataset") or {}),
            compute=None if compute is None else ComputeSpec.from_dict(compute),
            grid=grid,
            measure=MeasureSpec.from_dict(measure_raw),
            **sweep_level,
            label=str(d.get("label") or ""),
            seed=int(d.get("seed") or 0),
            baseline_settings=dict(d.get("baseline_settings") or {}),
            source=str(d.get("source") or "saved config"),
            loader_args={k: tuple(v) for k, v in (d.get("loader_args") or {}).items()},
            what_if=tuple(d.get("what_if") or ()),
        )


def _describe(section: str) -> str:
    return ", ".join(sorted(SCHEMA[section]))


def _where(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def load_toml(path: Path) -> dict[str, Any]:
    """Read a TOML config (ConfigError naming the file when missing or malformed)."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found; see configs/ for examples") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a .toml config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text (UTF-8) TOML file; pass a config such as configs/quick.toml") from None


def parse_sections(raw: dict[str, Any], *, source: str) -> dict[str, dict[str, Any]]:
    """Validate a raw TOML dict against SCHEMA -> {section: {key: parsed value}}.

    Unknown tables or keys (typos) get a ConfigError naming `source`, the key, a close match and
    the allowed keys; bad values name the key and the allowed values.
    """
    out: dict[str, dict[str, Any]] = {s: {} for s in SCHEMA}
    for key, value in raw.items():
        if key in SCHEMA and key and not isinstance(value, dict):
            raise ConfigError(f"{source}: '{key}' must be a table ([{key}] with keys {_describe(key)})")
        if isinstance(value, dict) and key in SCHEMA and key:
            section_items: list[tuple[str, Any]] = list(value.items())
            section = key
        elif key in SCHEMA[""]:
            section_items = [(key, value)]
            section = ""
        else:
            tables = [s for s in SCHEMA if s]
            close = difflib.get_close_matches(key, tables + list(SCHEMA[""]), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"{source}: unknown key '{key}'{hint}; allowed top-level keys: "
                f"{_describe('')} and tables [{'], ['.join(tables)}]"
            )
        for k, v in section_items:
            parsers_ = SCHEMA[section]
            if k not in parsers_:
                close = difflib.get_close_matches(k, list(parsers_), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(
                    f"{source}: unknown key '{_where(section, k)}'{hint}; allowed in "
                    f"[{section}]: {_describe(section)}"
                )
            if section == "dataset" and k == "kwargs" and not isinstance(v, dict):
                raise ConfigError(f"{source}: dataset.kwargs must be a table of keyword arguments")
            if section == "loader" and k == "args" and not isinstance(v, dict):
                raise ConfigError(f"{source}: loader.args must be a table: [loader.args] NAME = [V1, V2]")
            try:
                out[section][k] = parsers_[k](v)
            except ValueError as exc:
                raise ConfigError(f"{source}: {_where(section, k)}: {exc}") from None
    return out


def build_config(
    config_path: Path | None = None, overrides: dict[str, dict[str, Any]] | None = None
) -> SweepConfig:
    """defaults < TOML file < `overrides` (already parsed flag values, same section layout).

    Raises ConfigError for a bad file and for combinations that cannot work (a folder dataset
    without a data path, a data path for a dataset that takes none, a key the dataset kind does
    not use).
    """
    sections: dict[str, dict[str, Any]] = {s: {} for s in SCHEMA}
    source = "command line"
    from_file: dict[str, dict[str, Any]] = {s: {} for s in SCHEMA}
    if config_path is not None:
        source = str(config_path)
        from_file = parse_sections(load_toml(config_path), source=source)
        for s, kv in from_file.items():
            sections[s].update(kv)
    for s, kv in (overrides or {}).items():
        sections[s].update({k: v for k, v in kv.items() if v is not None})
    _check_dataset_keys(sections["dataset"], from_file["dataset"], source)

    ds = dict(sections["dataset"])
    kind = ds.pop("kind", "synthetic")
    data = ds.pop("data", None)
    factory = None
    if kinds.kind_name(kind) == "import":
        factory, kind = kind, "import"
    if kinds.KINDS[kind].needs_data and not data:
        raise ConfigError(f"{source}: dataset '{kind}' needs a path: --data PATH (or dataset.data)")
    if data and not kinds.KINDS[kind].in_files:
        # A data path implies the folder dataset unless something else was asked for explicitly.
        if "kind" in sections["dataset"]:
            raise ConfigError(
                f"{source}: --data (dataset.data) is for --dataset folder or MODULE:FACTORY, not '{kind}' "
                "(it is built in memory and reads no files)"
            )
        kind = "folder"
    if kind == "folder" and isinstance(data, list):
        raise ConfigError(
            f"{source}: --dataset folder takes one --data folder (an ImageFolder root), got {len(data)}; "
            "several folders are for a MODULE:FACTORY dataset that reads them"
        )
    _check_dataset_axes(kind, sections["grid"], from_file["grid"], source)
    dataset = DatasetSpec(kind=kind, data_path=data, factory=factory, loader=sections["loader"].get("class"), **ds)
    loader_args = sections["loader"].get("args") or {}

    top = sections[""]
    measure_kv = dict(sections["measure"])
    sweep_level = {o.key: measure_kv.pop(o.key, o.default) for o in SWEEP_OPTIONS}
    if "device" in measure_kv:
        dev = measure_kv["device"]
        if dev not in ("auto", "cpu", "cuda") and not (dev.startswith("cuda:") and dev[5:].isdigit()):
            raise ConfigError(f"{source}: --device (measure.device): expected auto, cpu, cuda or cuda:N, got {dev!r}")
    measure = MeasureSpec(**measure_kv)
    if measure.max_batches < measure.batches:
        raise ConfigError(
            f"{source}: --max-batches {measure.max_batches} is below --batches {measure.batches}: "
            "the window could never reach --batches; raise --max-batches or lower --batches"
        )
    return SweepConfig(
        dataset=dataset,
        compute=sections["compute"].get("step"),
        grid={a.name: sections["grid"].get(a.name, a.default) for a in GRID_AXES},
        measure=measure,
        **sweep_level,
        label=top.get("label", Path(config_path).stem if config_path else ""),
        output=top.get("output"),
        seed=top.get("seed", 0),
        baseline_settings=_check_baseline_names(top.get("baseline_settings", {}), loader_args, source),
        source=source,
        loader_args=loader_args,
        what_if=top.get("what_if", ()),
    )


def _check_baseline_names(wanted: dict[str, Any], loader_args: dict[str, tuple[Any, ...]], source: str) -> dict[str, Any]:
    """`wanted` (--baseline-settings), once every name in it is a grid axis or a swept loader
    argument (ConfigError otherwise)."""
    for key in wanted:
        if key not in _SETTING_PARSERS and key not in loader_args:
            where = "--baseline-settings" if source == "command line" else f"{source}: baseline_settings"
            raise ConfigError(
                f"{where}: unknown setting {key!r}; use {', '.join(_SETTING_PARSERS)}"
                + (f" or a swept loader argument ({', '.join(loader_args)})" if loader_args
                   else " (or a loader argument swept with --loader-arg)")
            )
    return wanted


def _check_dataset_axes(kind: str, grid: dict[str, Any], from_file: dict[str, Any], source: str) -> None:
    """ConfigError for a grid axis given for a dataset kind it does not apply to (`Axis.datasets`:
    `--decoder` decodes the synthetic dataset's own JPEGs)."""
    for a in GRID_AXES:
        if a.datasets is None or a.name not in grid or kind in a.datasets:
            continue
        where = f"{source}: grid.{a.name}" if a.name in from_file and grid[a.name] == from_file[a.name] else a.flag
        shown = "MODULE:FACTORY" if kind == "import" else kind
        raise ConfigError(
            f"{where} applies to the {' and '.join(a.datasets)} dataset, not {shown} (a dataset of your own decodes "
            f"as its code does): drop it, or measure the {a.datasets[0]} dataset with --dataset {a.datasets[0]}"
        )


def _check_dataset_keys(ds: dict[str, Any], from_file: dict[str, Any], source: str) -> None:
    """ConfigError for a [dataset] key (or its flag) that the dataset kind would ignore."""
    kind = ds.get("kind", "synthetic")
    if "data" in ds and not kinds.KINDS.get(kinds.kind_name(kind), kinds.KINDS["import"]).in_files and "kind" not in ds:
        kind = "folder"  # --data alone implies the folder dataset
    name = kinds.kind_name(kind)
    allowed = kinds.KINDS[name].keys | kinds.COMMON_KEYS
    for key in ds:
        if key in allowed or (key == "data" and not kinds.KINDS[name].in_files):
            continue  # a data path with an explicit in-memory kind has its own message in build_config
        users = [k for k, spec in kinds.KINDS.items() if key in spec.keys]
        where = f"{source}: dataset.{key}" if key in from_file and ds[key] == from_file[key] else option("dataset", key).flag_name
        shown = "MODULE:FACTORY" if name == "import" else name
        raise ConfigError(
            f"{where} applies to the {' and '.join('MODULE:FACTORY' if u == 'import' else u for u in users)} "
            f"dataset{'s' if len(users) > 1 else ''}, not {shown}: drop it, or choose that dataset with --dataset"
        )


def parse_flag(section: str, key: str, value: Any, flag: str) -> Any:
    """Parse one command-line flag value with the schema's parser; errors name the flag."""
    from loaderbench.errors import UsageError

    try:
        return SCHEMA[section][key](value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
