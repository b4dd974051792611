"""Sweep configuration: defaults < TOML file < command-line flags, validated in one place.

A TOML file has a few top-level keys and four tables (every key optional):

    label = "quick"            # names the run in tables and compare
    baseline_settings = "num_workers=4,pin_memory=off"   # your current settings (headroom line)
    output = "results/quick.json"
    seed = 0
    [dataset]   kind, data, num_samples, image_size, jpeg_quality, sample_shape, cpu_ms, io_ms,
                collate_fn, sampler, samples_per_batch, seed, and a [dataset.kwargs] table for
                a MODULE:FACTORY dataset (a key that the dataset kind does not use is an error)
    [compute]   step = "none" | "sleep:MS" | "spin:MS" | "model:NAME"
    [grid]      num_workers, pin_memory, prefetch, prefetch_factor, persistent_workers,
                batch_size, mp_context, worker_threads, main_threads
                (lists, or comma strings like "0,2,4")
    [measure]   batches, warmup_batches, min_time_s, max_batches, repeats, config_timeout_s,
                tolerance, epoch_batches, cache, drop_caches, timing, device

Flags use the same names with dashes (`--num-workers 0,2,4`). Every error names the file or flag,
the key, and the allowed values (ConfigError / UsageError, exit code 2).
"""

from __future__ import annotations

import difflib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderbench.errors import ConfigError
from loaderbench.model import MP_CONTEXTS, ComputeSpec, DatasetSpec, MeasureSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATASET_KINDS = ("synthetic", "folder", "tensor")
TIMINGS = ("auto", "events", "sync", "host")
CACHE_STATES = ("as-is", "cold", "warm", "both")
MAX_WORKERS = 1024
MAX_BATCH = 1_000_000


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep. `None` in `num_workers`, `batch_size` and `compute` means "pick the
    default for this machine" (resolved by `sweep.resolve_defaults`)."""

    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    compute: ComputeSpec | None = None
    num_workers: tuple[int, ...] | None = None
    pin_memory: tuple[bool, ...] = (False, True)
    prefetch: tuple[bool, ...] = (False, True)
    prefetch_factor: tuple[int, ...] = (2,)
    persistent_workers: tuple[bool, ...] = (False,)
    batch_size: tuple[int, ...] | None = None
    mp_context: tuple[str | None, ...] = (None,)
    worker_threads: tuple[int | None, ...] = (None,)
    main_threads: tuple[int | None, ...] = (None,)
    measure: MeasureSpec = field(default_factory=MeasureSpec)
    repeats: int = 3
    config_timeout_s: float = 600.0
    tolerance: float = 0.05
    cache: str = "as-is"
    drop_caches: bool = False
    label: str = ""
    output: str | None = None
    seed: int = 0
    baseline_settings: dict[str, Any] = field(default_factory=dict)
    source: str = "defaults"

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as saved in the result file."""
        return {
            "label": self.label,
            "seed": self.seed,
            "baseline_settings": dict(self.baseline_settings),
            "dataset": self.dataset.to_dict(),
            "compute": None if self.compute is None else self.compute.to_dict(),
            "grid": {
                "num_workers": None if self.num_workers is None else list(self.num_workers),
                "pin_memory": list(self.pin_memory),
                "prefetch": list(self.prefetch),
                "prefetch_factor": list(self.prefetch_factor),
                "persistent_workers": list(self.persistent_workers),
                "batch_size": None if self.batch_size is None else list(self.batch_size),
                "mp_context": list(self.mp_context),
                "worker_threads": list(self.worker_threads),
                "main_threads": list(self.main_threads),
            },
            "measure": {
                **self.measure.to_dict(),
                "repeats": self.repeats,
                "config_timeout_s": self.config_timeout_s,
                "tolerance": self.tolerance,
                "cache": self.cache,
                "drop_caches": self.drop_caches,
            },
            "source": self.source,
        }


# --- value parsers: each raises ValueError with the allowed values ------------------------------


def _int(lo: int, hi: int) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        if isinstance(v, bool):
            raise ValueError(f"expected an integer from {lo} to {hi}")
        if isinstance(v, str):
            v = v.strip()
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise ValueError(f"expected an integer from {lo} to {hi}, got {v!r}") from None
        if isinstance(v, float) and v != n:
            raise ValueError(f"expected an integer from {lo} to {hi}, got {v!r}")
        if not lo <= n <= hi:
            raise ValueError(f"expected an integer from {lo} to {hi}, got {n}")
        return n

    return parse


def _float(lo: float, hi: float) -> Callable[[Any], float]:
    def parse(v: Any) -> float:
        if isinstance(v, bool):
            raise ValueError(f"expected a number from {lo:g} to {hi:g}")
        try:
            x = float(str(v).strip().rstrip("%")) / (100.0 if str(v).strip().endswith("%") else 1.0)
        except ValueError:
            raise ValueError(f"expected a number from {lo:g} to {hi:g}, got {v!r}") from None
        if math.isnan(x) or not lo <= x <= hi:
            raise ValueError(f"expected a number from {lo:g} to {hi:g}, got {v!r}")
        return x

    return parse


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("on", "true", "yes", "1"):
        return True
    if s in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"expected on/off (or true/false), got {v!r}")


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        s = str(v).strip()
        if s not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {v!r}")
        return s

    return parse


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


def _list_of(item: Callable[[Any], Any], *, dedupe: bool = True) -> Callable[[Any], tuple[Any, ...]]:
    def parse(v: Any) -> tuple[Any, ...]:
        raw = [p for p in v.split(",")] if isinstance(v, str) else v
        if not isinstance(raw, (list, tuple)):
            raw = [raw]
        raw = [p.strip() if isinstance(p, str) else p for p in raw]
        if not raw or any(p == "" for p in raw):
            raise ValueError("expected a non-empty comma list (e.g. 0,2,4)")
        out: list[Any] = []
        for p in raw:
            x = item(p)
            if not dedupe or x not in out:
                out.append(x)
        return tuple(out)

    return parse


def _mp_context(v: Any) -> str | None:
    s = str(v).strip()
    if s in ("default", "none", ""):
        return None
    if s not in MP_CONTEXTS:
        raise ValueError(f"expected one of {', '.join(MP_CONTEXTS)}, got {v!r}")
    return s


def _size(v: Any) -> tuple[int, int]:
    if isinstance(v, (list, tuple)) and len(v) == 2:
        w, h = v
    else:
        parts = str(v).lower().replace(",", "x").split("x")
        if len(parts) != 2:
            raise ValueError(f"expected WxH such as 500x375, got {v!r}")
        w, h = parts
    return (_int(8, 16384)(w), _int(8, 16384)(h))


def _shape(v: Any) -> tuple[int, ...]:
    dims = _list_of(_int(1, 1 << 20), dedupe=False)(v)
    if len(dims) > 8:
        raise ValueError("expected at most 8 dimensions such as 3,64,64")
    return dims


def parse_compute(v: Any) -> ComputeSpec:
    """`none`, `sleep:MS`, `spin:MS` or `model:NAME` -> ComputeSpec (ValueError otherwise)."""
    s = str(v).strip()
    if s == "none":
        return ComputeSpec(kind="none")
    kind, _, arg = s.partition(":")
    if kind in ("sleep", "spin"):
        ms = _float(0.0, 60_000.0)(arg) if arg else None
        if ms is None:
            raise ValueError(f"expected {kind}:MS with MS in milliseconds, e.g. {kind}:12")
        return ComputeSpec(kind=kind, ms=ms)
    if kind == "model" and arg:
        return ComputeSpec(kind="model", model=arg)
    raise ValueError(f"expected none, sleep:MS, spin:MS or model:NAME, got {v!r}")


def _dataset_kind(v: Any) -> str:
    s = str(v).strip()
    if s in DATASET_KINDS or (":" in s and all(s.partition(":")[::2])):
        return s
    hint = " (a folder of images: --data PATH)" if "/" in s or "\\" in s else ""
    raise ValueError(f"expected synthetic, folder, tensor or MODULE:FACTORY, got {v!r}{hint}")


# --- the schema: section -> key -> parser ----------------------------------------------------

def _baseline_settings(v: Any) -> dict[str, Any]:
    """`num_workers=4,pin_memory=off` (or a TOML table) -> {"num_workers": 4, "pin_memory": False}."""
    if isinstance(v, dict):
        items = list(v.items())
    else:
        items = []
        for part in str(v).split(","):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"expected key=value pairs such as num_workers=4,pin_memory=off, got {v!r}")
            items.append((key.strip(), value.strip()))
    parsers: dict[str, Callable[[Any], Any]] = {
        "num_workers": _int(0, MAX_WORKERS), "pin_memory": _bool, "prefetch": _bool,
        "prefetch_factor": _int(1, 1024), "persistent_workers": _bool, "batch_size": _int(1, MAX_BATCH),
    }
    out: dict[str, Any] = {}
    for key, value in items:
        if key not in parsers:
            raise ValueError(f"unknown setting {key!r}; use {', '.join(parsers)}")
        out[key] = parsers[key](value)
    return out


SCHEMA: dict[str, dict[str, Callable[[Any], Any]]] = {
    "": {"label": _str, "output": _str, "seed": _int(0, 2**31 - 1), "baseline_settings": _baseline_settings},
    "dataset": {
        "kind": _dataset_kind,
        "data": _str,
        "num_samples": _int(1, 100_000_000),
        "image_size": _size,
        "jpeg_quality": _int(1, 100),
        "sample_shape": _shape,
        "cpu_ms": _float(0.0, 60_000.0),
        "io_ms": _float(0.0, 60_000.0),
        "collate_fn": _str,
        "sampler": _str,
        "samples_per_batch": _int(1, 1_000_000_000),
        "seed": _int(0, 2**31 - 1),
        "kwargs": lambda v: v,
    },
    "compute": {"step": parse_compute},
    "grid": {
        "num_workers": _list_of(_int(0, MAX_WORKERS)),
        "pin_memory": _list_of(_bool),
        "prefetch": _list_of(_bool),
        "prefetch_factor": _list_of(_int(1, 1024)),
        "persistent_workers": _list_of(_bool),
        "batch_size": _list_of(_int(1, MAX_BATCH)),
        "mp_context": _list_of(_mp_context),
        "worker_threads": _list_of(_int(1, 1024)),
        "main_threads": _list_of(_int(1, 1024)),
    },
    "measure": {
        "batches": _int(1, 1_000_000),
        "warmup_batches": _int(0, 100_000),
        "min_time_s": _float(0.0, 86_400.0),
        "max_batches": _int(1, 10_000_000),
        "repeats": _int(1, 100),
        "config_timeout_s": _float(1.0, 7 * 86_400.0),
        "tolerance": _float(0.0, 0.5),
        "epoch_batches": _int(1, 100_000_000),
        "cache": _choice(CACHE_STATES),
        "drop_caches": _bool,
        "timing": _choice(TIMINGS),
        "device": _str,
    },
}


# The [dataset] keys each kind uses (kind, collate_fn, sampler and samples_per_batch apply to
# every kind); any other key given for a kind would be silently ignored, so it is an error.
KIND_KEYS: dict[str, frozenset[str]] = {
    "synthetic": frozenset({"num_samples", "image_size", "jpeg_quality", "seed"}),
    "folder": frozenset({"data"}),
    "tensor": frozenset({"num_samples", "sample_shape", "cpu_ms", "io_ms", "seed"}),
    "import": frozenset({"kwargs"}),
}
COMMON_DATASET_KEYS = frozenset({"kind", "collate_fn", "sampler", "samples_per_batch"})


def flag_name(section: str, key: str) -> str:
    """The command-line flag of a config key: `--num-workers` for grid.num_workers."""
    special = {"min_time_s": "--min-time", "config_timeout_s": "--config-timeout", "step": "--compute",
               "kind": "--dataset"}
    return special.get(key, "--" + key.replace("_", "-"))


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
            parsers = SCHEMA[section]
            if k not in parsers:
                close = difflib.get_close_matches(k, list(parsers), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(
                    f"{source}: unknown key '{_where(section, k)}'{hint}; allowed in "
                    f"[{section}]: {_describe(section)}"
                )
            if section == "dataset" and k == "kwargs" and not isinstance(v, dict):
                raise ConfigError(f"{source}: dataset.kwargs must be a table of keyword arguments")
            try:
                out[section][k] = parsers[k](v)
            except ValueError as exc:
                raise ConfigError(f"{source}: {_where(section, k)}: {exc}") from None
    return out


def build_config(
    config_path: Path | None = None, overrides: dict[str, dict[str, Any]] | None = None
) -> SweepConfig:
    """defaults < TOML file < `overrides` (already parsed flag values, same section layout).

    Raises ConfigError for a bad file and for combinations that cannot work (a folder dataset
    without a data path, a data path for a dataset that takes none).
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
    if ":" in kind and kind not in DATASET_KINDS:
        factory, kind = kind, "import"
    else:
        factory = None
    if kind == "folder" and not data:
        raise ConfigError(f"{source}: dataset 'folder' needs a path: --data PATH (or dataset.data)")
    if data and kind in ("synthetic", "tensor"):
        # A data path implies the folder dataset unless something else was asked for explicitly.
        if "kind" in sections["dataset"]:
            raise ConfigError(f"{source}: --data (dataset.data) is for --dataset folder, not '{kind}'")
        kind = "folder"
    dataset = DatasetSpec(kind=kind, data_path=data, factory=factory, **ds)

    top = sections[""]
    measure_kv = dict(sections["measure"])
    repeats = measure_kv.pop("repeats", 3)
    timeout = measure_kv.pop("config_timeout_s", 600.0)
    tolerance = measure_kv.pop("tolerance", 0.05)
    cache = measure_kv.pop("cache", "as-is")
    drop_caches = measure_kv.pop("drop_caches", False)
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
    grid = sections["grid"]
    return SweepConfig(
        dataset=dataset,
        compute=sections["compute"].get("step"),
        num_workers=grid.get("num_workers"),
        pin_memory=grid.get("pin_memory", (False, True)),
        prefetch=grid.get("prefetch", (False, True)),
        prefetch_factor=grid.get("prefetch_factor", (2,)),
        persistent_workers=grid.get("persistent_workers", (False,)),
        batch_size=grid.get("batch_size"),
        mp_context=grid.get("mp_context", (None,)),
        worker_threads=grid.get("worker_threads", (None,)),
        main_threads=grid.get("main_threads", (None,)),
        measure=measure,
        repeats=repeats,
        config_timeout_s=timeout,
        tolerance=tolerance,
        cache=cache,
        drop_caches=drop_caches,
        label=top.get("label", Path(config_path).stem if config_path else ""),
        output=top.get("output"),
        seed=top.get("seed", 0),
        baseline_settings=top.get("baseline_settings", {}),
        source=source,
    )


def _check_dataset_keys(ds: dict[str, Any], from_file: dict[str, Any], source: str) -> None:
    """ConfigError for a [dataset] key (or its flag) that the dataset kind would ignore."""
    kind = ds.get("kind", "synthetic")
    if "data" in ds and kind in ("synthetic", "tensor") and "kind" not in ds:
        kind = "folder"  # --data alone implies the folder dataset
    kind_name = "import" if ":" in kind and kind not in KIND_KEYS else kind
    allowed = KIND_KEYS.get(kind_name, frozenset()) | COMMON_DATASET_KEYS
    for key in ds:
        if key in allowed or (key == "data" and kind_name in ("synthetic", "tensor")):
            continue  # a data path with an explicit in-memory kind has its own message below
        users = [k for k, keys in KIND_KEYS.items() if key in keys]
        where = f"{source}: dataset.{key}" if key in from_file and ds[key] == from_file[key] else flag_name("dataset", key)
        shown = "MODULE:FACTORY" if kind_name == "import" else kind_name
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
