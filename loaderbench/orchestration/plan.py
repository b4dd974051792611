"""Planning a sweep before anything runs: the machine it runs on, the defaults that depend on it, the
configs to measure, the baseline config, the cache states, the config's hash and the output path."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loaderbench.analysis.predict import series_of, with_workers
from loaderbench.kinds import KINDS
from loaderbench.model import (
    GRID_AXES,
    ComputeSpec,
    LoaderSettings,
)
from loaderbench.orchestration.config import SweepConfig
from loaderbench.orchestration.grid import GridPoint, default_num_workers, expand_grid
from loaderbench.orchestration.observer import SweepObserver
from loaderbench.storage import data_files

DEFAULT_SLEEP_MS = 100.0


DEFAULT_BATCH_GPU = 256


DEFAULT_BATCH_CPU = 64


def cpus_per_rank(usable_cpus: int, ranks_per_node: int) -> int:
    """The CPUs one rank's loader may use: the node's usable CPUs shared by its ranks (at least 1).

    >>> cpus_per_rank(32, 2), cpus_per_rank(2, 2), cpus_per_rank(3, 4)
    (16, 1, 1)
    """
    return max(1, usable_cpus // max(1, ranks_per_node))


@dataclass(frozen=True)
class Machine:
    """What the defaults depend on (injectable for tests)."""

    cuda: bool
    usable_cpus: int  # on this node
    ranks_per_node: int = 1  # distributed sweeps: ranks (each with its own loader) on this node
    world_size: int = 1  # distributed sweeps: ranks in the whole job

    @property
    def cpus_per_rank(self) -> int:
        """The CPUs one rank's loader may use (all of them for a single-process sweep)."""
        return cpus_per_rank(self.usable_cpus, self.ranks_per_node)


def detect_machine(ranks_per_node: int = 1, world_size: int = 1) -> Machine:
    """CUDA availability (without creating a CUDA context) and the CPUs this process may use."""
    import torch

    from loaderbench.machine.env import usable_cpus

    return Machine(
        cuda=bool(torch.cuda.is_available()), usable_cpus=usable_cpus(), ranks_per_node=ranks_per_node,
        world_size=world_size,
    )


def resolve_defaults(config: SweepConfig, machine: Machine) -> SweepConfig:
    """Fill the machine-dependent defaults: num_workers grid (from the CPUs per rank: the usable
    CPUs divided by the ranks on this node in a distributed sweep), batch size, compute step.

    Without CUDA, a `spin:` or `model:` step on device auto is a usage error raised later by the
    child; `sleep:` stands for the accelerator step there.
    """
    compute = config.compute
    if compute is None:
        compute = (
            ComputeSpec(kind="model", model="resnet50")
            if machine.cuda
            else ComputeSpec(kind="sleep", ms=DEFAULT_SLEEP_MS)
        )
    return replace(config, compute=compute, dense_workers=config.grid["num_workers"] is None).with_grid(
        num_workers=config.grid["num_workers"] or tuple(default_num_workers(machine.cpus_per_rank)),
        batch_size=config.grid["batch_size"] or ((DEFAULT_BATCH_GPU,) if machine.cuda else (DEFAULT_BATCH_CPU,)),
    )


def drop_cuda_values(config: SweepConfig, machine: Machine) -> tuple[SweepConfig, list[str]]:
    """Without CUDA in use, the values of an axis that mean nothing there (`Axis.cuda_values`,
    e.g. `--decoder nvjpeg`) dropped from the grid: the config left, and one line per dropped
    value saying why. UsageError when an axis would be left with no value."""
    if machine.cuda and config.measure.device != "cpu":
        return config, []
    why = "CUDA is not in use (--device cpu)" if machine.cuda else "there is no CUDA GPU here"
    changed: dict[str, tuple[Any, ...]] = {}
    lines: list[str] = []
    for a in GRID_AXES:
        values = config.grid.get(a.name) or ()
        dropped = [v for v in values if v in a.cuda_values]
        if not dropped:
            continue
        kept = tuple(v for v in values if v not in a.cuda_values)
        shown = ",".join(str(v) for v in dropped)
        if not kept:
            from loaderbench.errors import UsageError

            others = ",".join(v for v in a.metavar.split(",") if v not in a.cuda_values)
            raise UsageError(f"{a.flag} {shown} runs on a CUDA GPU and {why}: use {a.flag} {others} (or run it on a GPU)")
        changed[a.name] = kept
        lines.append(f"{a.flag} {shown}: not measured, it runs on a CUDA GPU and {why}")
    return (config.with_grid(**changed) if changed else config), lines


def plan(config: SweepConfig, machine: Machine) -> list[GridPoint]:
    """The configs to measure, normalised (see grid.py)."""
    axes = {name: values for name, values in config.grid.items() if values}
    axes.setdefault("num_workers", (0,))
    axes.setdefault("batch_size", (DEFAULT_BATCH_CPU,))
    cuda_in_use = machine.cuda and config.measure.device != "cpu"
    return expand_grid(axes, cuda=cuda_in_use, loader_args=config.loader_args)


def baseline_cell(config: SweepConfig, points: list[GridPoint]) -> LoaderSettings | None:
    """The config `--baseline-settings` names: the first grid config that matches it; in a
    model-guided search over every worker count (no --num-workers given), also a worker count
    between the grid's, up to twice its largest (the counts the search may measure). None when
    nothing matches or no baseline was given."""
    wanted = config.baseline_settings
    if not wanted:
        return None
    for p in points:
        if all(_value(p.settings, k) == v for k, v in wanted.items()):
            return p.settings
    w = wanted.get("num_workers")
    top = max((p.settings.num_workers for p in points), default=0)
    if config.search != "auto" or not config.dense_workers or not isinstance(w, int) or not 0 < w <= 2 * top:
        return None
    rest = {k: v for k, v in wanted.items() if k != "num_workers"}
    for p in points:
        if p.settings.num_workers > 0 and all(_value(p.settings, k) == v for k, v in rest.items()):
            return with_workers(p.settings, w)
    return None


def _value(settings: LoaderSettings, name: str) -> Any:
    """A setting's value by name (an axis or a loader argument), None when the config has none."""
    try:
        return settings.value(name)
    except KeyError:
        return None


def check_baseline_settings(config: SweepConfig, points: list[GridPoint]) -> None:
    """UsageError when `--baseline-settings` matches no config the sweep may measure (the
    headroom would otherwise silently start from the first row)."""
    if not config.baseline_settings or baseline_cell(config, points) is not None:
        return
    wanted = config.baseline_settings
    from loaderbench.errors import UsageError

    def show(v: Any) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else str(v)

    given = ",".join(f"{k}={show(v)}" for k, v in wanted.items())
    grid = "; ".join(
        f"{k}: {','.join(sorted({show(_value(p.settings, k)) for p in points}, key=str))}" for k in wanted
    )
    raise UsageError(
        f"--baseline-settings {given} matches no config of this sweep ({grid}); give settings the grid "
        "measures, or add them to the grid"
    )


def config_hash(config: SweepConfig) -> str:
    """Short hash of the resolved config (what was asked), for matching runs."""
    blob = json.dumps(config.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def default_output_path(config: SweepConfig, now: _dt.datetime) -> Path:
    """results/<label or 'sweep'>-<UTC time>.json (the label made safe for a file name)."""
    from loaderbench.results import timestamped_path

    return timestamped_path(config.label or "sweep", now)


def row_order(s: LoaderSettings, order: dict[LoaderSettings, int]) -> tuple[Any, ...]:
    """Table order: the grid's, a worker count between the grid's just before the next count."""
    if s in order:
        return (s.batch_size, order[s], 0)
    after = [i for t, i in order.items() if t.batch_size == s.batch_size and t.num_workers > s.num_workers
             and series_of(t) == series_of(s)]
    return (s.batch_size, min(after) if after else len(order), -1)


def cache_plan(config: SweepConfig, obs: SweepObserver,
               files: list[Path] | None = None) -> tuple[list[Path], tuple[str, ...]]:
    """The dataset files whose page-cache state `--cache` controls (the files under --data, for
    any dataset kind that reads files: storage.data_files), and the states to run each config in
    (`both` = cold then warm; `files`: those already listed, else they are listed here). A
    dataset that names no files has no cache state: n/a, and every config runs as-is (with a
    warning saying how to name them)."""
    if config.cache == "as-is":
        return [], ("as-is",)
    if not config.dataset.data_roots:
        kind = config.dataset.factory or config.dataset.kind
        how = (" give the files it reads with --data PATH (once per folder)" if KINDS[config.dataset.kind].in_files
               else " it is built in memory")
        obs.warning(f"--cache {config.cache}: '{kind}' names no files, so the cache state is n/a;{how}")
        return [], ("as-is",)
    files = data_files(config.dataset) if files is None else files
    return files, (("cold", "warm") if config.cache == "both" else (config.cache,))
