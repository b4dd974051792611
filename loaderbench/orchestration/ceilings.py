"""The compute ceiling per batch size: the step alone, fed one batch already on the device."""

from __future__ import annotations

from loaderbench.errors import StepError
from loaderbench.measure.isolation import Runner
from loaderbench.model import (
    Ceiling,
    ComputeSpec,
    LoaderSettings,
    TrialJob,
)
from loaderbench.orchestration.config import SweepConfig
from loaderbench.orchestration.grid import GridPoint
from loaderbench.orchestration.observer import SweepObserver

_STEP_ERROR = f"{StepError.__name__}: "  # how the measuring process writes a StepError (measure/child.py)


def measure_ceilings(
    config: SweepConfig,
    compute: ComputeSpec,
    points: list[GridPoint],
    runner: Runner,
    cache_dir: str | None,
    obs: SweepObserver,
    *,
    world_size: int = 1,
) -> dict[int, Ceiling]:
    """The compute ceiling per batch size (model.Ceiling).

    In a distributed sweep the ceiling is the whole job's (summed over its `world_size` ranks,
    each rank's own in `rank_samples_per_s`), like the throughput it is compared with.

    A `sleep:MS` step's ceiling is analytic (batch / MS); `none` has none; a GPU or model step
    is measured in a fresh process fed one batch already on the device
    (`runner.measure_compute_ceiling`). A failure is a warning, never the end of the sweep,
    except the user's own step (`step:MODULE:FACTORY`) failing to be made or on its first
    batch: measured before any config, that is the sweep's StepError (one line, exit 2), as
    every config would fail the same way.
    """
    out: dict[int, Ceiling] = {}
    if compute.kind == "none":
        return out
    for bs in sorted({p.settings.batch_size for p in points}):
        if compute.kind != "sleep":
            obs.phase(f"measuring the compute ceiling (batch {bs}: the step alone, no loader)")
        if compute.kind == "sleep":
            step_s = compute.ms / 1000.0
            if step_s > 0:
                out[bs] = Ceiling.analytic(bs, step_s, world_size)
            continue
        outcome = runner(TrialJob(
            LoaderSettings(0, False, False, None, False, bs), config.dataset, compute, config.measure,
            kind="ceiling", seed=config.seed, cache_dir=cache_dir, timeout_s=config.config_timeout_s,
        ))
        if outcome.status == "ok" and outcome.ceiling is not None:
            out[bs] = outcome.ceiling
        elif compute.kind == "step" and (outcome.error or "").startswith(_STEP_ERROR):
            raise StepError(str(outcome.error)[len(_STEP_ERROR):])
        else:
            obs.warning(f"compute ceiling (batch {bs}) not measured: {outcome.error}")
    return out
