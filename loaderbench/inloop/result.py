"""A watched run as a result: the config's trial gathered from every rank, the one-config
`ResultSet` (analysed, with the watched compute ceiling and the analysis's prediction of what
more workers would give), and the DataLoader settings to try next."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from loaderbench.model import (
    GRID_AXES,
    Ceiling,
    CeilingMethod,
    ComputeSpec,
    ConfigResult,
    DatasetSpec,
    MeasureSpec,
    Trial,
)
from loaderbench.results import ResultSet, SweepRecord


def process_group() -> tuple[int, int, int]:
    """(world size, rank, ranks on this node) of an initialised torch.distributed group, else
    (1, 0, 1)."""
    import os

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 1, 0, 1
    world = dist.get_world_size()
    return world, dist.get_rank(), int(os.environ.get("LOCAL_WORLD_SIZE", world))


def gather_trial(trial: Trial | None, why_unmeasured: Callable[[], str]) -> tuple[Trial | None, str | None]:
    """The config's trial and, when there is none, why: this process's `trial`, or under
    torch.distributed (a process group initialised, more than one rank) the job's, gathered from
    every rank with `all_gather_object` (a collective: every rank must call it at the same point
    of the loop) and merged (distributed.merge_trials: the slowest rank's waits, each rank's own
    trial kept). `why_unmeasured()` words why this rank measured no step."""
    from loaderbench.orchestration.distributed import merge_trials

    world, rank, _local = process_group()
    if world <= 1:
        return trial, None if trial is not None else why_unmeasured()
    import torch.distributed as dist

    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, None if trial is None else trial.to_dict())
    trials = [None if d is None else Trial.from_dict(d) for d in gathered]
    missing = [r for r, x in enumerate(trials) if x is None]
    if not missing:
        return merge_trials([x for x in trials if x is not None]), None
    return None, f"rank {missing[0]} measured no step" + (f": {why_unmeasured()}" if rank in missing else "")


def build_result_set(row: ConfigResult, *, label: str, source: str, timing: str, device: str,
                     warmup_batches: int, max_batches: int, samples_per_batch: int | None, cuda: bool,
                     world: tuple[int, int] = (1, 1), loader: str | None = None,
                     loader_defaults: dict[str, Any] | None = None) -> ResultSet:
    """The ResultSet of a watched run: `row` analysed as a one-config sweep (analysis.analyze),
    its compute ceiling taken from the measured compute time per step (`ResultSet.ceilings`,
    method "watched": the step's own time, which on CUDA events is the GPU's time from batch
    ready to step end), and the analysis's prediction of what more workers would give
    (`Analysis.more_workers`). `loader`: the watched loader's class when it is not torch's
    DataLoader (`dataset.loader`), and `loader_defaults` its own settings left at their
    defaults (recorded in `SweepRecord.loader_defaults`, named in `Analysis.loader`; those set
    otherwise are the row's `loader_args`)."""
    import datetime as _dt

    from loaderbench._version import __version__
    from loaderbench.analysis import analyze
    from loaderbench.machine.env import capture_environment, usable_cpus
    from loaderbench.orchestration.config import SweepConfig

    config = SweepConfig(
        dataset=DatasetSpec(kind="import", factory=source, samples_per_batch=samples_per_batch, loader=loader),
        compute=ComputeSpec(kind="model", model="watched"),
        grid={a.name: (getattr(row.settings, a.name),) for a in GRID_AXES},
        loader_args={k: (v,) for k, v in row.settings.loader_args},
        measure=MeasureSpec(batches=1, warmup_batches=warmup_batches, min_time_s=0.0, max_batches=max_batches,
                            timing=timing, device=device),
        repeats=1, search="grid", isolation="watched", label=label, source="watch",
    )
    try:
        environment = capture_environment(device_index=_device_index(device) if cuda else None)
    except Exception as exc:  # noqa: BLE001 - a result without an environment record beats none
        environment = {"usable_cpus": usable_cpus(), "error": f"{type(exc).__name__}: {exc}"}
    if world[0] > 1:
        environment["distributed"] = {"world_size": world[0], "local_world_size": world[1], "watched": True}
    ceilings: dict[int, Ceiling] = {}
    if row.trials:
        per_rank = [Trial.from_dict(d) for d in row.trials[0].rank_trials] or row.trials
        rates, steps, held = [], [], []
        for t in per_rank:
            # The mean, not the median: throughput is the samples over the summed step times, so
            # only the summed compute bounds it (a step of 57 or 110 ms by turns put a row at
            # 111% of a median-based ceiling).
            c = statistics.fmean(t.compute_s) if t.compute_s else 0.0
            spb = t.samples / len(t.step_s)
            if c > 0:
                rates.append(spb / c)
                steps.append(c)
                held.append(spb)
        if rates and len(rates) == len(per_rank):
            ceilings[row.settings.batch_size] = Ceiling(
                row.settings.batch_size, sum(rates), max(steps), CeilingMethod.WATCHED,
                samples_per_batch=statistics.median(held), world_size=len(per_rank))
    rs = ResultSet(
        config={**config.to_dict(), "watch": True},
        environment=environment,
        results=[row],
        label=label,
        created_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        tool_version=__version__,
        config_hash="",
        ceilings=ceilings,
        sweep=SweepRecord(loader_defaults=dict(loader_defaults or {})),
    )
    analyze(rs)
    return rs


def _device_index(device: str) -> int | None:
    import torch

    d = torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def suggested_settings(rs: ResultSet) -> dict[str, Any]:
    """The DataLoader settings to try next after a watched run, by the DataLoader's keyword
    names (num_workers, pin_memory, prefetch_factor, persistent_workers) plus `predicted`
    (True when num_workers comes from the prediction, not from what was measured): the
    predicted workers for a loader-bound run (`Analysis.more_workers`), pin_memory for a
    pageable H2D copy, persistent_workers when epoch starts bind; else the watched settings."""
    from loaderbench.model import Verdict

    row = rs.results[0]
    s = row.settings
    verdict = row.summary.verdict if row.summary is not None else None
    pred = None if rs.analysis is None else rs.analysis.more_workers
    workers = (pred and (pred.knee_workers or pred.workers_needed)) or s.num_workers
    workers = max(int(workers), s.num_workers)
    return {
        "num_workers": workers,
        "pin_memory": s.pin_memory or verdict is Verdict.H2D_PAGEABLE,
        "prefetch_factor": (s.prefetch_factor or 2) if workers else None,
        "persistent_workers": bool(workers) and (s.persistent_workers or verdict is Verdict.EPOCH_START_BOUND),
        "predicted": workers != s.num_workers,
    }
