"""The compute ceiling per batch size: the step alone, fed one batch already on the device."""

from __future__ import annotations

import dataclasses
import statistics

from loaderbench.errors import StepError
from loaderbench.measure.isolation import Runner
from loaderbench.model import (
    Ceiling,
    CeilingMethod,
    ComputeSpec,
    ConfigResult,
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


CEILING_RECHECK = 0.8
"""A measured ceiling is measured again when a row's median step ran under this share of its
step time (NOTE [a ceiling the rows outran])."""


def recheck_ceilings(
    ceilings: dict[int, Ceiling],
    results: list[ConfigResult],
    config: SweepConfig,
    compute: ComputeSpec,
    runner: Runner,
    cache_dir: str | None,
    obs: SweepObserver,
) -> None:
    """Measure a ceiling again where the rows outran it, keeping the faster reading (in place).

    NOTE [a ceiling the rows outran]
        The compute ceiling is one short run of the step, taken before any config. A step with
        several intra-op threads on a machine with other load can run many times slower for
        those seconds (threads waiting at each parallel region for one that is descheduled):
        on a 2-core machine a small model's train step took 22.9-40.3 ms in the ceiling and
        2.4-6.2 ms in the rows, which then read 103-188% of the ceiling. The step alone is the
        fastest the step runs, so where a row's median step (its compute per batch, the step
        fed a ready batch) ran under CEILING_RECHECK of the ceiling's step time, the ceiling
        was disturbed: it is measured once more and the faster of the two readings is kept,
        the first one in `Ceiling.first_step_s`. A single-process sweep's measured ceilings
        only (an analytic `sleep:` step cannot be disturbed; a distributed job's ceiling is
        every rank's at once)."""
    for bs, ceiling in list(ceilings.items()):
        if ceiling.method is not CeilingMethod.MEASURED or ceiling.world_size > 1:
            continue
        steps = [statistics.median(c for t in r.trials for c in t.compute_s) for r in results
                 if r.settings.batch_size == bs and r.status == "ok" and any(t.compute_s for t in r.trials)]
        fastest = min(steps, default=None)
        if fastest is None or fastest >= CEILING_RECHECK * ceiling.step_s:
            continue
        obs.phase(f"measuring the compute ceiling again (batch {bs}: the rows' steps ran faster than it)")
        outcome = runner(TrialJob(
            LoaderSettings(0, False, False, None, False, bs), config.dataset, compute, config.measure,
            kind="ceiling", seed=config.seed, cache_dir=cache_dir, timeout_s=config.config_timeout_s,
        ))
        again = outcome.ceiling if outcome.status == "ok" else None
        best = ceiling if again is None or again.step_s >= ceiling.step_s else again
        ceilings[bs] = dataclasses.replace(best, first_step_s=ceiling.step_s)
        obs.warning(
            f"compute ceiling at batch {bs} measured again: its step took {ceiling.step_s * 1e3:.1f} ms where "
            f"the rows' steps took {fastest * 1e3:.1f} ms (other load while it ran); kept "
            f"{ceilings[bs].step_s * 1e3:.1f} ms")
