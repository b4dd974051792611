"""A measured compute ceiling that the rows' own steps outran is measured again (NOTE [a ceiling
the rows outran] in orchestration/ceilings.py)."""

from __future__ import annotations

import pytest

from loaderbench.measure.isolation import Outcome
from loaderbench.model import Ceiling, CeilingMethod, ComputeSpec, ConfigResult, DatasetSpec
from loaderbench.orchestration.ceilings import recheck_ceilings
from loaderbench.orchestration.config import SweepConfig
from loaderbench.orchestration.observer import NullObserver
from tests.helpers import settings, trial


class Runner:
    def __init__(self, step_s: float) -> None:
        self.step_s, self.jobs = step_s, []

    def __call__(self, job):
        self.jobs.append(job)
        return Outcome("ok", ceiling=Ceiling(job.settings.batch_size, 32 / self.step_s, self.step_s))


def _rows(compute_s: float) -> list[ConfigResult]:
    return [ConfigResult(settings=settings(w, bs=32), status="ok", trials=[trial(0.001, compute_s, bs=32)])
            for w in (0, 2)]


def _config() -> SweepConfig:
    return SweepConfig(dataset=DatasetSpec(kind="tensor"))


def test_a_ceiling_the_rows_outran_is_measured_again_and_the_faster_kept():
    # The ceiling's step took 40 ms, the rows' steps 2.5 ms: measured again (1.5 ms), kept with
    # its first reading.
    ceilings = {32: Ceiling(32, 800.0, 0.040)}
    runner = Runner(0.0015)
    recheck_ceilings(ceilings, _rows(0.0025), _config(), ComputeSpec(kind="step"), runner, None, NullObserver())
    assert len(runner.jobs) == 1 and runner.jobs[0].kind == "ceiling"
    assert ceilings[32].step_s == pytest.approx(0.0015) and ceilings[32].first_step_s == pytest.approx(0.040)
    assert ceilings[32].samples_per_s == pytest.approx(32 / 0.0015)


def test_a_slower_second_reading_keeps_the_first_and_rows_near_the_ceiling_change_nothing():
    ceilings = {32: Ceiling(32, 800.0, 0.040)}
    recheck_ceilings(ceilings, _rows(0.0025), _config(), ComputeSpec(kind="step"), Runner(0.050), None, NullObserver())
    assert ceilings[32].step_s == pytest.approx(0.040) and ceilings[32].first_step_s == pytest.approx(0.040)
    # Rows at 0.85 of the ceiling's step (over CEILING_RECHECK): nothing measured again.
    ceilings = {32: Ceiling(32, 800.0, 0.040)}
    runner = Runner(0.001)
    recheck_ceilings(ceilings, _rows(0.034), _config(), ComputeSpec(kind="step"), runner, None, NullObserver())
    assert runner.jobs == [] and ceilings[32].first_step_s is None
    # An analytic ceiling (a sleep step) is never measured.
    ceilings = {32: Ceiling(32, 800.0, 0.040, CeilingMethod.ANALYTIC)}
    recheck_ceilings(ceilings, _rows(0.0025), _config(), ComputeSpec(kind="sleep", ms=40), runner, None, NullObserver())
    assert runner.jobs == []


def test_the_header_says_the_ceiling_was_measured_again():
    from io import StringIO

    from rich.console import Console

    from loaderbench.analysis import analyze
    from loaderbench.render.sweep import render_table
    from loaderbench.results import ResultSet

    rs = ResultSet(config={"dataset": {"kind": "tensor"}, "compute": {"kind": "step"}, "measure": {}},
                   environment={"cuda_available": False, "usable_cpus": 2}, results=_rows(0.0025),
                   ceilings={32: Ceiling(32, 32 / 0.0015, 0.0015, first_step_s=0.040)})
    analyze(rs)
    console = Console(width=200, file=StringIO(), record=True, color_system=None)
    render_table(rs, console)
    assert ("compute ceiling at batch 32: 21,333 samples/s (step 1.5 ms; the step fed one batch already on the "
            "device; measured again after the rows' steps ran faster than its first reading, 40.0 ms)") in \
        console.export_text()
