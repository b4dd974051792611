"""The pick's sustained figure: one more trial of the pick over a window of several batches per
worker after the search (orchestration/sustained.py NOTE [the pick's sustained figure])."""

from __future__ import annotations

import pytest

from loaderbench.measure.isolation import Outcome
from loaderbench.model import ComputeSpec, MeasureSpec
from loaderbench.orchestration.config import build_config
from loaderbench.orchestration.plan import Machine, resolve_defaults
from loaderbench.orchestration.run import run_sweep
from loaderbench.orchestration.sustained import measure_sustained, search_reserve_s, sustained_window
from tests.conftest import FakeRunner
from tests.helpers import FakeClock, result, settings, trial


def test_the_window_holds_four_batches_per_worker_where_the_searchs_held_fewer():
    measure = MeasureSpec(batches=10, min_time_s=1.0)
    # 12 workers, windows of 14 and 16 batches: 1.25 per worker (the median) -> 48 batches.
    row = result(settings(12), trial(0.0, 0.05, n=14), trial(0.0, 0.05, n=16))
    window = sustained_window(measure, row)
    assert window is not None and (window.batches, window.min_time_s) == (48, 1.0)
    # 2 workers with 10 batches a window: 5 per worker, already sustained.
    assert sustained_window(measure, result(settings(2), trial(0.0, 0.05, n=10))) is None
    # No workers: nothing built ahead of the window.
    assert sustained_window(measure, result(settings(0), trial(0.0, 0.05, n=10))) is None
    # --batches above 4 per worker stays the lower bound; max_batches is raised to it.
    window = sustained_window(MeasureSpec(batches=40, max_batches=30), result(settings(4), trial(0.0, 0.05, n=12)))
    assert window is not None and (window.batches, window.max_batches) == (40, 40)


def test_it_is_taken_only_when_it_fits_in_the_budget():
    row = result(settings(8), trial(0.0, 0.05, n=10))  # 1.25 batches per worker
    clock = FakeClock()
    clock.advance(100.0)
    ran: list[MeasureSpec] = []

    def run(window):
        ran.append(window)
        clock.advance(5.0)
        return trial(0.0, 0.05, n=window.batches)

    # Trials of 4 s: it keeps 1.5 x 4 = 6 s; 5 s left -> not taken.
    assert measure_sustained(row, MeasureSpec(), run, search_samples_per_s=320.0, deadline=105.0,
                             trial_walls=[4.0, 4.0, 4.0], clock=clock) is None
    assert ran == []
    taken = measure_sustained(row, MeasureSpec(), run, search_samples_per_s=320.0, deadline=106.0,
                              trial_walls=[4.0, 4.0, 4.0], clock=clock)
    assert taken is not None and [w.batches for w in ran] == [32]
    # 32 batches of 16 samples, 50 ms steps: 320 samples/s; 4 per worker against the search's 1.25.
    assert (taken.batches, taken.batches_per_worker, taken.search_batches_per_worker) == (32, 4.0, 1.25)
    assert taken.samples_per_s == pytest.approx(320.0) and taken.wall_s == pytest.approx(5.0)
    assert taken.config == settings(8).key() and taken.trial is not None


def test_the_search_keeps_time_for_it_only_once_its_fastest_row_is_near_the_knee():
    measure, walls = MeasureSpec(), [4.0, 6.0, 8.0]  # median 6 s: 1.5 x 6 = 9 s kept
    near = result(settings(8), trial(0.01, 0.05, n=10))  # 10 ms wait per 50 ms step: stall 1/6
    far = result(settings(2), trial(0.40, 0.05, n=10))  # 400 ms wait per 50 ms step: stall 89%
    assert near.summary.stall_fraction == pytest.approx(1 / 6) and far.summary.stall_fraction > 0.8
    assert search_reserve_s(near, measure, walls) == pytest.approx(9.0)
    # Highly input-bound: the configs with more workers come first.
    assert search_reserve_s(far, measure, walls) == 0.0
    # A row whose windows already held 4 batches per worker needs no longer window; no row, no trial.
    assert search_reserve_s(result(settings(2), trial(0.01, 0.05, n=10)), measure, walls) == 0.0
    assert search_reserve_s(None, measure, walls) == 0.0 and search_reserve_s(near, measure, []) == 0.0


def _search(tmp_path, sustained_step_s: float, fresh_runner=None, workers=(0, 1, 2, 4, 6, 8, 12, 16)):
    """The search of test_sweep (64 ms per batch per worker, 12 ms step: the knee at 6 workers),
    where the pick's sustained trial (a window of 24 batches) reads steps of `sustained_step_s`."""
    def outcome(w: int, batches: int) -> Outcome:
        period = max(0.012, 0.064 / w) if w else 0.076
        if batches >= 24:
            period = sustained_step_s
        return Outcome(status="ok", trial=trial(period - 0.012, 0.012, n=batches))

    class Runner(FakeRunner):
        def __call__(self, job, **kw):
            self.calls.append((job.settings.num_workers, job.seed, job.kind))
            self.jobs.append(job)
            return outcome(job.settings.num_workers, job.measure.batches if job.kind == "config" else 20)

    cfg = build_config(None, {
        "dataset": {"kind": "tensor"}, "compute": {"step": ComputeSpec(kind="sleep", ms=12.0)},
        "grid": {"num_workers": tuple(workers), "batch_size": (16,)},
        "measure": {"repeats": 1, "batches": 10},
    })
    runner = Runner({})
    rs = run_sweep(resolve_defaults(cfg, Machine(cuda=False, usable_cpus=16)), output=tmp_path / "r.json",
                   environment={"usable_cpus": 16}, machine=Machine(cuda=False, usable_cpus=16),
                   runner=runner, fresh_runner=fresh_runner, save=lambda r, p: None)
    return rs, runner


def test_the_recommendation_states_the_sustained_figure_beside_the_searchs(tmp_path):
    from loaderbench.conclusions import Knee
    from loaderbench.render import footer

    # The search's windows (10 batches, 1.7 per worker) read a 12 ms step at 6 workers: 1,333 samples/s;
    # sustained, a step of 14 ms: 1,143 samples/s (the search read +16.7%).
    rs, runner = _search(tmp_path, 0.014)
    taken = rs.sweep.sustained
    assert taken is not None and taken.config == settings(6).key()
    assert (taken.batches, taken.batches_per_worker) == (24, 4.0)
    assert taken.samples_per_s == pytest.approx(16 / 0.014) and taken.search_samples_per_s == pytest.approx(16 / 0.012)
    assert rs.sweep.timing.sustained_s >= 0.0 and runner.jobs[-1].measure.batches == 24
    # The row keeps the search's figure (the ranking stands on like windows); the knee states both.
    row = next(r for r in rs.results if r.settings.num_workers == 6)
    assert len(row.trials) == 1 and row.summary.samples_per_s == pytest.approx(16 / 0.012)
    [knee] = [f for f in rs.recommendation.findings if isinstance(f, Knee)]
    assert knee.sustained_samples_per_s == pytest.approx(16 / 0.014) and knee.sustained_batches == 24
    text = " ".join(footer.footer_lines(rs))
    # The band follows the stall stated (the search's windows never waited: not input-bound).
    assert "6 workers: 1,143 samples/s sustained (24 batches, 4 per worker), stall 14.3% (moderately input-bound)" in text
    assert row.summary.stall_fraction == pytest.approx(0.0)
    assert ("The search ranked it on windows of 1.7 batches per worker, where it read 1,333 samples/s at a stall of "
            "0.0% (+16.7% against the longer window); the table and what follows compare configs on those windows, "
            "like with like.") in text
    # In the JSON the analysis hands out, the same figures.
    import json

    from loaderbench.render.sweep import to_json

    doc = json.loads(to_json(rs))
    [k] = [f for f in doc["analysis"]["recommendation"]["findings"] if f["kind"] == "knee"]
    assert k["sustained_samples_per_s"] == pytest.approx(16 / 0.014) and k["sustained_batches_per_worker"] == 4.0


def test_an_auto_sweep_of_two_configs_measured_as_a_grid_still_sustains_its_pick(tmp_path):
    # 6 and 8 workers, both at the 12 ms step on 10-batch windows (1.7 and 1.25 batches per
    # worker): the pick, 6 workers (as fast, fewer), is measured over 24 batches.
    rs, runner = _search(tmp_path, 0.014, workers=(6, 8))
    assert rs.sweep.search is None  # measured as a grid
    assert rs.sweep.sustained is not None and rs.sweep.sustained.config == settings(6).key()
    assert rs.sweep.sustained.samples_per_s == pytest.approx(16 / 0.014) and runner.jobs[-1].measure.batches == 24


def test_the_drift_check_is_told_to_leave_the_knees_sustained_trial_its_time(tmp_path, monkeypatch):
    from loaderbench.orchestration import run as run_mod

    seen = []

    def check(result_set, results, done, *args, **kwargs):
        knee = next(r for r in results if r.settings.num_workers == 6)
        wide = next(r for r in results if r.settings.num_workers == 1)  # 10 batches for 1 worker
        seen.append((kwargs["deadline"], kwargs["keep_s"](knee), kwargs["keep_s"](wide), kwargs["warm_trial_s"]))

    monkeypatch.setattr(run_mod, "check_drift", check)
    _search(tmp_path, 0.014, fresh_runner=FakeRunner({}))
    [(deadline, knee_s, wide_s, warm_s)] = seen
    # The knee's windows held 1.7 batches per worker: 1.5 warm trials kept; 1 worker's held 10: none.
    assert deadline is not None and knee_s == pytest.approx(1.5 * warm_s) and knee_s > 0 and wide_s == 0.0


def test_a_pick_with_no_time_for_the_longer_window_says_its_figure_rests_on_the_short_ones(tmp_path, monkeypatch):
    from loaderbench.conclusions import Knee
    from loaderbench.orchestration import run as run_mod
    from loaderbench.render import footer

    monkeypatch.setattr(run_mod, "sustained_fits", lambda deadline, walls: False)
    rs, runner = _search(tmp_path, 0.014)
    assert rs.sweep.sustained is None and rs.sweep.sustained_left_out == settings(6).key()
    assert all(j.measure.batches == 10 for j in runner.jobs if j.kind == "config")  # no longer window taken
    [knee] = [f for f in rs.recommendation.findings if isinstance(f, Knee)]
    assert knee.sustained_left_out and knee.search_batches_per_worker == pytest.approx(10 / 6)
    text = " ".join(footer.footer_lines(rs))
    assert "6 workers: 1,333 samples/s, stall" in text
    assert ("Its figure rests on windows of 1.7 batches per worker: --time-budget left no time to measure it over a "
            "longer window for a sustained figure (give a larger --time-budget).") in text


def test_a_sustained_figure_that_matches_the_searchs_reads_the_same():
    from loaderbench.conclusions import Knee
    from loaderbench.model import InputBound
    from loaderbench.render.findings import sustained_sentence

    knee = Knee(settings(16), 312.168, 0.02, InputBound.NOT, sustained_samples_per_s=312.174,
                sustained_stall_fraction=0.02, sustained_batches=64, sustained_batches_per_worker=4.0,
                search_batches_per_worker=2.6)
    assert "(the same as the longer window)" in sustained_sentence(knee) and "-0.0%" not in sustained_sentence(knee)
