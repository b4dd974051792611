"""The whole `loaderbench sweep` in the parent process: the measuring processes started ahead, the
defaults resolved, the output and workload checked, the environment captured, the sweep run."""

from __future__ import annotations

import datetime as _dt
import functools
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from loaderbench.measure.isolation import Runner, run_isolated
from loaderbench.measure.warm import WarmRunner
from loaderbench.orchestration.config import SweepConfig
from loaderbench.orchestration.drift import drift_may_follow
from loaderbench.orchestration.observer import NullObserver, SweepObserver
from loaderbench.orchestration.plan import (
    Machine,
    check_baseline_settings,
    default_output_path,
    detect_machine,
    drop_cuda_values,
    plan,
    resolve_defaults,
)
from loaderbench.orchestration.profile import profile_pick
from loaderbench.orchestration.run import run_sweep
from loaderbench.orchestration.validate import sampler_args, validate_workload
from loaderbench.results import ResultSet
from loaderbench.storage import data_files


def execute_sweep(
    config: SweepConfig,
    *,
    output: Path | None,
    observer: SweepObserver | None = None,
    cache_dir: str | None = None,
    machine: Machine | None = None,
    runner: Runner = run_isolated,
    distributed: dict[str, Any] | None = None,
    started_at: float | None = None,
    peers: Sequence[Any] = (),
) -> tuple[ResultSet, Path]:
    """The whole `loaderbench sweep`: resolve defaults for this machine, check the output
    location and the workload, capture the environment, run the sweep.

    Raises LoaderbenchError subclasses for bad input before anything is measured, and
    KeyboardInterrupt (after saving what was measured) on Ctrl-C. A distributed sweep's leader
    passes `runner` (distributed.DistributedRunner), the machine with its ranks per node and
    `distributed` (the job's layout, kept in the environment record) and `peers` (the other
    nodes, whose preflight runs on the plan too: nodes.preflight_peers). `started_at`
    (time.monotonic() seconds) is when the command started, which `--time-budget` counts from
    (default: now).
    """
    started_at = time.monotonic() if started_at is None else started_at
    # The warm measuring process starts first: its interpreter and torch's import (seconds on a
    # small machine) then overlap this process's own (detect_machine imports torch) and the checks.
    # So does the fresh one the drift check will use (NOTE [a fresh process, started ahead]).
    warm = WarmRunner() if config.isolation == "warm" and runner is run_isolated else None
    fresh = WarmRunner(one_config=True) if warm is not None and drift_may_follow(config) else None
    try:
        for proc in (warm, fresh):
            if proc is not None:
                proc.prestart()
        return _execute_sweep(config, output=output, observer=observer, cache_dir=cache_dir, machine=machine,
                              runner=runner, distributed=distributed, started_at=started_at, warm=warm,
                              fresh=fresh, peers=peers)
    finally:
        for proc in (warm, fresh):
            if proc is not None:
                proc.close()


def _execute_sweep(config: SweepConfig, *, output: Path | None, observer: SweepObserver | None, cache_dir: str | None,
                   machine: Machine | None, runner: Runner, distributed: dict[str, Any] | None, started_at: float,
                   warm: WarmRunner | None, fresh: WarmRunner | None,
                   peers: Sequence[Any] = ()) -> tuple[ResultSet, Path]:
    from loaderbench.machine.env import capture_environment, preflight_warnings
    from loaderbench.results import check_result_path

    machine = machine or detect_machine()
    config, dropped = drop_cuda_values(resolve_defaults(config, machine), machine)
    now = _dt.datetime.now(_dt.timezone.utc)
    out = output or (Path(config.output) if config.output else default_output_path(config, now))
    check_result_path(out)
    check_baseline_settings(config, plan(config, machine))
    files = data_files(config.dataset)  # a --data path that is missing, unreadable or empty: one line, now
    obs = observer or NullObserver()
    for line in dropped:
        obs.warning(line)
    ds = config.dataset
    if ds.kind == "import" and ds.data_roots and "root" not in ds.kwargs and ds.factory:
        from loaderbench.workload.datasets import takes_root

        if not takes_root(ds.factory):
            obs.warning(
                f"--data: {ds.factory} has no `root` parameter, so the path is not passed to it; --cache and "
                "the bytes read are set against the files under --data: name exactly the files it reads"
            )
    try:
        obs.phase(f"building the dataset ({config.dataset.factory or config.dataset.kind}) to check it")
        facts = validate_workload(config, machine, cache_dir=cache_dir)
        if facts.sampler_kind:
            config = replace(config, dataset=replace(config.dataset, sampler_kind=facts.sampler_kind,
                                                     sampler_args=sampler_args(config, machine.world_size)))
        cuda_in_use = machine.cuda and config.measure.device != "cpu"
        environment = capture_environment(device_index=0 if cuda_in_use else None)
        if distributed is not None:
            environment["distributed"] = distributed
        for w in preflight_warnings(environment):
            obs.warning(w)
        # The stage profile of the pick (NOTE [the sweep's stage profile]), on one node: a distributed
        # sweep's leader, or a runner of the caller's own, takes none.
        profiler = (functools.partial(profile_pick, cache_dir=None if cache_dir is None else Path(cache_dir))
                    if distributed is None and (warm is not None or runner is run_isolated) else None)
        if warm is not None:
            rs = run_sweep(
                config, output=out, environment=environment, machine=machine, observer=obs,
                cache_dir=cache_dir, facts=facts, runner=warm, fresh_runner=fresh or run_isolated, files=files,
                started_at=started_at, profiler=profiler,
            )
            rs.sweep.measuring_processes = warm.starts
        else:
            rs = run_sweep(
                config, output=out, environment=environment, machine=machine, observer=obs,
                cache_dir=cache_dir, facts=facts, runner=runner, files=files, started_at=started_at, peers=peers,
                profiler=profiler,
            )
    except KeyboardInterrupt as exc:
        raise SweepInterruptedAt(out) from exc
    return rs, out


class SweepInterruptedAt(KeyboardInterrupt):
    """Ctrl-C during a sweep; `.output` holds the file with every finished config."""

    def __init__(self, output: Path) -> None:
        super().__init__(str(output))
        self.output = output
