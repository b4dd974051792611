"""The pick's sustained figure: one more trial of the pick over a window of several batches per
worker after the search (orchestration/sustained.py NOTE [the pick's sustained figure])."""

from __future__ import annotations

import pytest

from loaderbench.measure.isolation import Outcome
from loaderbench.model import ComputeSpec, MeasureSpec, SustainedSettled
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


def test_the_search_keeps_time_for_it_only_once_its_fastest_row_waits_at_most_half_its_time():
    measure, walls = MeasureSpec(), [4.0, 6.0, 8.0]  # median 6 s: 1.5 x 6 = 9 s kept
    near = result(settings(8), trial(0.01, 0.05, n=10))  # 10 ms wait per 50 ms step: stall 1/6
    far = result(settings(2), trial(0.40, 0.05, n=10))  # 400 ms wait per 50 ms step: stall 89%
    assert near.summary.stall_fraction == pytest.approx(1 / 6) and far.summary.stall_fraction > 0.8
    assert search_reserve_s(near, measure, walls) == pytest.approx(9.0)
    # Waiting most of its time: the configs with more workers come first.
    assert search_reserve_s(far, measure, walls) == 0.0
    # Waiting 15 ms per 50-ms step (23%, the H200 case's rows near the knee on a slow day): kept.
    highly = result(settings(8), trial(0.015, 0.05, n=10))
    assert highly.summary.stall_fraction == pytest.approx(0.015 / 0.065)
    assert search_reserve_s(highly, measure, walls) == pytest.approx(9.0)
    # Half the time exactly (50 ms per 50-ms step) still keeps it; 55 ms (52%) does not.
    assert search_reserve_s(result(settings(8), trial(0.05, 0.05, n=10)), measure, walls) == pytest.approx(9.0)
    assert search_reserve_s(result(settings(8), trial(0.055, 0.05, n=10)), measure, walls) == 0.0
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
    # sustained, a step of 14 ms: 1,143 samples/s (the search read +16.7%, past the 5% tolerance: a
    # second window, which reads the same, and the two are pooled).
    rs, runner = _search(tmp_path, 0.014)
    taken = rs.sweep.sustained
    assert taken is not None and taken.config == settings(6).key()
    assert (taken.batches, taken.batches_per_worker) == (24, 4.0)
    assert taken.samples_per_s == pytest.approx(16 / 0.014) and taken.search_samples_per_s == pytest.approx(16 / 0.012)
    assert taken.settled is SustainedSettled.POOLED and taken.windows_samples_per_s == pytest.approx([16 / 0.014] * 2)
    assert taken.second is not None and [j.measure.batches for j in runner.jobs[-2:]] == [24, 24]
    assert rs.sweep.timing.sustained_s >= 0.0 and runner.jobs[-3].measure.batches == 10
    # The row keeps the search's figure (the ranking stands on like windows); the knee states both.
    row = next(r for r in rs.results if r.settings.num_workers == 6)
    assert len(row.trials) == 1 and row.summary.samples_per_s == pytest.approx(16 / 0.012)
    [knee] = [f for f in rs.recommendation.findings if isinstance(f, Knee)]
    assert knee.sustained_samples_per_s == pytest.approx(16 / 0.014) and knee.sustained_batches == 24
    text = " ".join(footer.footer_lines(rs))
    # The band follows the stall stated (the search's windows never waited: not input-bound).
    assert ("6 workers: 1,143 samples/s sustained (2 windows of 24 batches, 4 per worker), stall 14.3% "
            "(moderately input-bound)") in text
    assert row.summary.stall_fraction == pytest.approx(0.0)
    assert ("The search ranked it on windows of 1.7 batches per worker, where it read 1,333 samples/s at a stall of "
            "0.0% (16.7% above the longer windows); the table and what follows compare configs on those windows, "
            "like with like. Its first longer window read 1,143 samples/s, past the 5% tolerance from the search's "
            "figure, and a second read 1,143 samples/s: the two agree, and its figure pools them.") in text
    # In the JSON the analysis hands out, the same figures.
    import json

    from loaderbench.render.sweep import to_json

    doc = json.loads(to_json(rs))
    [k] = [f for f in doc["analysis"]["recommendation"]["findings"] if f["kind"] == "knee"]
    assert k["sustained_samples_per_s"] == pytest.approx(16 / 0.014) and k["sustained_batches_per_worker"] == 4.0
    assert k["sustained_settled"] == "two windows pooled" and k["sustained_windows"] == pytest.approx([16 / 0.014] * 2)
    # The file reads back with the second window and how the figure was settled.
    from loaderbench.results import ResultSet

    back = ResultSet.from_dict(json.loads(json.dumps(rs.to_dict()))).sweep.sustained
    assert back is not None and back.settled is SustainedSettled.POOLED and back.second is not None


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
    # Apart, the direction in words: 300 against 320 sustained is 6.25% below it.
    knee.samples_per_s = 300.0
    knee.sustained_samples_per_s = 320.0
    assert "(6.2% below the longer window)" in sustained_sentence(knee)


def _windows(periods: list[float]):
    """A `run` for measure_sustained whose successive windows read steps of `periods` (no wait:
    16 samples a batch), each 5 s on the fake clock it returns."""
    clock = FakeClock()
    clock.advance(100.0)
    left = list(periods)
    ran: list[MeasureSpec] = []

    def run(window):
        ran.append(window)
        clock.advance(5.0)
        return trial(0.0, left.pop(0), n=window.batches)

    return run, clock, ran


def test_a_window_that_agrees_with_the_search_stands_alone():
    # 8 workers on windows of 10 batches (1.25 per worker); the search read 320 samples/s, the
    # window 16 / 0.0515 = 311 (-2.9%, inside the 5% tolerance): no second window.
    row = result(settings(8), trial(0.0, 0.05, n=10))
    run, clock, ran = _windows([0.0515, 0.05])
    taken = measure_sustained(row, MeasureSpec(), run, search_samples_per_s=320.0, deadline=None,
                              trial_walls=[4.0], tolerance=0.05, clock=clock)
    assert taken is not None and len(ran) == 1 and taken.second is None
    assert taken.settled is SustainedSettled.ONE and taken.samples_per_s == pytest.approx(16 / 0.0515)
    assert taken.windows_samples_per_s == pytest.approx([16 / 0.0515])


def test_two_windows_that_disagree_leave_the_middle_reading_with_their_spread():
    from loaderbench.conclusions import Knee
    from loaderbench.model import InputBound
    from loaderbench.render.findings import finding_sentence, sustained_sentence

    # The search read 320 samples/s (50 ms steps); the first window 16 / 0.0625 = 256 (-20%: a
    # disturbed host), a second 16 / 0.049 = 326.5. Apart by 27.6%: the middle of 256, 320 and
    # 326.5 is the search's 320, with the search's stall (0).
    row = result(settings(8), trial(0.0, 0.05, n=10))
    run, clock, ran = _windows([0.0625, 0.049])
    taken = measure_sustained(row, MeasureSpec(), run, search_samples_per_s=320.0, deadline=None,
                              trial_walls=[4.0], tolerance=0.05, clock=clock)
    assert taken is not None and [w.batches for w in ran] == [32, 32] and taken.wall_s == pytest.approx(10.0)
    assert taken.settled is SustainedSettled.MIDDLE and taken.samples_per_s == pytest.approx(320.0)
    assert taken.windows_samples_per_s == pytest.approx([256.0, 16 / 0.049]) and taken.stall_fraction == 0.0
    knee = Knee(settings(8), 320.0, 0.0, InputBound.NOT, tolerance=0.05, sustained_samples_per_s=320.0,
                sustained_stall_fraction=0.0, sustained_batches=32, sustained_batches_per_worker=4.0,
                search_batches_per_worker=1.25, sustained_windows=[256.0, 16 / 0.049],
                sustained_settled=SustainedSettled.MIDDLE, sustained_uncertainty=(16 / 0.049 - 256.0) / 320.0 / 2)
    assert finding_sentence(knee, lambda s: "8 workers") == (
        "8 workers: 320 samples/s sustained (the middle of 3 readings: 2 windows of 32 batches, 4 per worker, and "
        "the search's), stall 0.0% (not input-bound).")
    # 326.5 / 256 - 1 = 27.6% apart; the three readings spread (326.5 - 256) / 320 = 22%: half of it the uncertainty.
    assert sustained_sentence(knee) == (
        "The search ranked it on windows of 1.2 batches per worker, where it read 320 samples/s at a stall of 0.0% "
        "(the longer windows read 256 and 327 samples/s); the table and what follows compare configs on those "
        "windows, like with like. Its two longer windows disagree by 28%, past the 5% tolerance (the rate moved "
        "between them: a shared or disturbed host): its figure is the middle of their readings and the search's, "
        "uncertain by ±11% (half the spread of the three; measure longer: --min-time, or --repeats).")


def test_the_second_window_leaves_the_profile_its_share_of_the_budget():
    # Trials of 4 s keep 1.5 x 4 = 6 s for a window. At 100 s, with the deadline at 112 s, the first
    # window fits (ends at 105 s); a second would need 105 + 6 = 111 s plus the profile's 3 s kept
    # after it: not taken, and the first window's figure stands alone (-20%, said as one window).
    row = result(settings(8), trial(0.0, 0.05, n=10))
    run, clock, ran = _windows([0.0625, 0.049])
    taken = measure_sustained(row, MeasureSpec(), run, search_samples_per_s=320.0, deadline=112.0,
                              trial_walls=[4.0], tolerance=0.05, keep_after_s=3.0, clock=clock)
    assert taken is not None and len(ran) == 1 and taken.settled is SustainedSettled.ONE
    assert taken.samples_per_s == pytest.approx(256.0)
    # With only 1 s kept for the profile it fits (111 + 1 = 112).
    run, clock, ran = _windows([0.0625, 0.049])
    taken = measure_sustained(row, MeasureSpec(), run, search_samples_per_s=320.0, deadline=112.0,
                              trial_walls=[4.0], tolerance=0.05, keep_after_s=1.0, clock=clock)
    assert taken is not None and len(ran) == 2 and taken.settled is SustainedSettled.MIDDLE


def test_a_repeat_spread_just_past_the_tolerance_is_not_printed_as_the_tolerance_itself():
    from loaderbench.conclusions import Knee
    from loaderbench.model import InputBound
    from loaderbench.render.findings import spread_sentence

    # 5.4% of the median rounds to 5%, the tolerance: one decimal shows it is past.
    knee = Knee(settings(4), 600.0, 0.1, InputBound.NOT, spread=0.054, repeats=2, tolerance=0.05)
    assert spread_sentence(knee).startswith("Its 2 repeats spread 5.4% of their median (±3%), past the 5% tolerance")
    # 8% reads in whole percents.
    knee = Knee(settings(4), 600.0, 0.1, InputBound.NOT, spread=0.08, repeats=2, tolerance=0.05)
    assert spread_sentence(knee).startswith("Its 2 repeats spread 8% of their median (±4%), past the 5% tolerance")
    # Repeats that agree (2%) but windows whose rounds vary: two standard errors of 6% are ±12%.
    knee = Knee(settings(4), 600.0, 0.1, InputBound.NOT, spread=0.02, repeats=3, tolerance=0.05, window_se=0.06,
                uncertainty=0.12)
    assert spread_sentence(knee).startswith("Its windows' batches vary so much that its figure may be off by ±12% ")
    # Within half the tolerance: nothing to say.
    knee = Knee(settings(4), 600.0, 0.1, InputBound.NOT, spread=0.02, repeats=3, tolerance=0.05, window_se=0.01,
                uncertainty=0.02)
    assert spread_sentence(knee) == ""


def test_changes_beyond_the_settings_name_the_figure_they_are_weighed_against():
    # A recorded H200 sweep (search-default-h200-7): no setting clears the loader bottleneck; the
    # search read the pick at 3,930 samples/s and its longer window at 3,570. The changes beyond the
    # settings start from the search's figure (like with like with the rows they rest on), and the
    # section says so with the sustained one beside it.
    from pathlib import Path

    from loaderbench.analysis import analyze
    from loaderbench.conclusions import Knee
    from loaderbench.render.pipeline import beyond_knobs_lines
    from loaderbench.results import read_results

    a = analyze(read_results(Path(__file__).resolve().parents[1] / "docs" / "data" / "search-default-h200-7.json"))
    [knee] = [f for f in a.recommendation.findings if isinstance(f, Knee)]
    b = a.beyond_knobs
    assert b is not None and b.settings == knee.settings
    assert round(b.samples_per_s) == round(knee.samples_per_s) == 3930
    assert round(b.sustained_samples_per_s) == round(knee.sustained_samples_per_s) == 3570
    assert beyond_knobs_lines(b, lambda s: s.key())[0].startswith(
        "Beyond the settings (no setting clears the loader bottleneck at 3,930 samples/s by the search's windows "
        "(3,570 over the longer window), stall 15%; each change is weighed against the search's figure, like with "
        "like): ")
    # Each change's line: the prediction, then what runs close behind the step and what more workers
    # alone would reach, each a sentence of its own.
    assert beyond_knobs_lines(b, lambda s: s.key())[3] == (
        "  RandomResizedCrop 2x cheaper: predicted ~4,357 samples/s (1.11x the pick; the loader's rate ~1.1x) at "
        "~15 workers with pin_memory on instead of off, CUDA prefetcher on instead of off (~3,930 with the pick's "
        "pin_memory off, CUDA prefetcher off), then the step binds, clearing the stall. The usable CPUs run close "
        "behind: a measured run there would still read loader-bound. At best with up to 64 workers: ~4,458 with the "
        "change, ~4,130 with more workers alone.")


def test_one_window_past_the_tolerance_states_its_figure_as_uncertain_between_the_two_readings():
    # A recorded H200 sweep (gpu-round-24, the third): the search read its pick at 3,695 samples/s,
    # its one longer window at 2,998 (18.9% under, past the 5% tolerance) and no second window fitted
    # before the budget's end. Plain loops at its settings a minute away read 3,764: neither
    # reading holds to 5%, and the figure says it is uncertain between the two, by half their gap
    # (3,695 - 2,998) / 2 / 2,998 = 11.6%.
    from dataclasses import replace
    from pathlib import Path

    from loaderbench.analysis import analyze
    from loaderbench.conclusions import Knee
    from loaderbench.render.findings import finding_sentence, sustained_sentence
    from loaderbench.results import read_results

    path = Path(__file__).resolve().parents[1] / "docs" / "data" / "bench" / "gpu-round-24" / "sweep-3.json"
    a = analyze(read_results(path))
    [knee] = [f for f in a.recommendation.findings if isinstance(f, Knee)]
    assert knee.sustained_settled is SustainedSettled.ONE
    assert round(knee.samples_per_s) == 3695 and round(knee.sustained_samples_per_s) == 2998
    assert knee.sustained_uncertainty == pytest.approx((3695.218 - 2998.274) / 2 / 2998.274, rel=1e-5)
    assert finding_sentence(knee, lambda s: "14 workers").startswith(
        "14 workers: 2,998 samples/s sustained (one window of 56 batches, 4 per worker; the search's read 3,695 "
        "samples/s: uncertain between the two), stall 35.4%")
    assert sustained_sentence(knee).endswith(
        "(23.2% above the longer window); the table and what follows compare configs on those windows, like with "
        "like. That is past the 5% tolerance, and no second window settled them (none fitted in --time-budget, or "
        "it failed): the rate moved between the two (a shared or disturbed host) or the short windows misread it, "
        "so its figure is uncertain, between 2,998 and 3,695 samples/s (give a larger --time-budget for a second "
        "window, or measure longer: --min-time).")
    # Just past the tolerance (4,510 over 4,274: 5.5%, to one decimal) it is uncertain too.
    just = replace(knee, samples_per_s=4510.0, sustained_samples_per_s=4274.0, sustained_windows=[4274.0],
                   sustained_uncertainty=236.0 / 2 / 4274.0)
    assert "(5.5% above the longer window); " in sustained_sentence(just)
    assert "uncertain, between 4,274 and 4,510 samples/s" in sustained_sentence(just)
    # Within the tolerance (the same window at 3,600: 2.6% under) it stands alone, with no uncertainty.
    near = replace(knee, sustained_samples_per_s=3600.0, sustained_windows=[3600.0], sustained_uncertainty=None)
    assert "uncertain" not in finding_sentence(near) + sustained_sentence(near)


def test_the_uncertainty_is_none_where_the_readings_agree_or_were_pooled():
    from loaderbench.analysis.statistics import sustained_uncertainty

    # One window 3% from the search's: they agree. Two pooled (within the tolerance of each other):
    # the pooled figure stands. A tolerance of 0 takes no second window and calls nothing apart.
    assert sustained_uncertainty(4096.0, 4221.0, [4096.0], SustainedSettled.ONE, 0.05) is None
    assert sustained_uncertainty(3050.0, 4000.0, [3000.0, 3100.0], SustainedSettled.POOLED, 0.05) is None
    assert sustained_uncertainty(2998.0, 3695.0, [2998.0], SustainedSettled.ONE, 0.0) is None
    # Two apart: half the spread of 256, 320 and 326.5 over the middle 320 = 11.0%.
    assert sustained_uncertainty(320.0, 320.0, [256.0, 326.5], SustainedSettled.MIDDLE, 0.05) == pytest.approx(
        70.5 / 320 / 2)


def test_a_step_that_slowed_over_the_longer_window_alone_is_named_with_its_cpus():
    # A recorded H200 sweep (gpu-round-37, the first): the search read its pick, 17 workers on 16
    # usable CPUs, at 4,646 samples/s with the step at its own pace (median 55.07 ms against 55.05
    # alone: 256 samples over the 4,650.6 ceiling); its one longer window read 3,698 at a stall of 2%:
    # the step itself ran a median 63.53 ms over those 68 batches, +15.4%, with the process tree at
    # 15.87 cores and 0.04 taken by the hypervisor (saturated) and its main process at 0.81. Leave
    # ceil(0.81 x 1.154) = 1 CPU free.
    from pathlib import Path

    from loaderbench.analysis import analyze
    from loaderbench.conclusions import Knee
    from loaderbench.render.findings import sustained_sentence
    from loaderbench.results import read_results

    path = Path(__file__).resolve().parents[1] / "docs" / "data" / "bench" / "gpu-round-37" / "default-1.json"
    a = analyze(read_results(path))
    [knee] = [f for f in a.recommendation.findings if isinstance(f, Knee)]
    slowed = knee.sustained_step
    assert slowed is not None and slowed.repeats == 1
    assert slowed.alone_s == pytest.approx(256 / 4650.629330681683)
    assert slowed.compute_p50_s == pytest.approx(0.0635305176, rel=1e-8)
    assert slowed.slowdown == pytest.approx(0.0635305176 / (256 / 4650.629330681683) - 1.0, rel=1e-8)
    assert slowed.cpu_saturated and slowed.leave_free_cpus == 1
    assert slowed.cpu_cores == pytest.approx(15.871717, rel=1e-6)
    assert slowed.main_cores == pytest.approx(0.807683, rel=1e-5)
    text = sustained_sentence(knee)
    assert ("no second window settled them (none fitted in --time-budget, or it failed): over the longer window the "
            "step itself ran 63.5 ms a batch against 55.0 ms alone (+15%), where the search's windows kept its pace, "
            "so its figure is uncertain, between 3,698 and 4,646 samples/s") in text
    assert text.endswith(
        "The process tree used 15.9 cores of the 16 usable CPUs (its main process 0.8): the training process was "
        "short of CPU (the workers took its cores); leave 1 CPU free for it (fewer workers, or workers kept off its "
        "cores).")
    assert "a shared or disturbed host" not in text


def test_the_longer_window_step_rule_takes_the_median_and_leaves_rows_that_slowed_to_their_own_finding():
    # Hand-made: a step alone of 50 ms (256 samples at 5,120/s). Windows of 10 steps at 50 ms and 6
    # at 60: median 50 ms, not slowed, though the mean is +7.5%. Two windows of 8 steps at 58 ms and 8
    # at 50: the median of the 16 is (50 + 58) / 2 = 54 ms, +8%: under the 10% bound. 12 at 58 and
    # 4 at 50: median 58 ms, +16%, slowed; the CPUs 9.1 cores of 16 (not saturated). The same row
    # whose own windows slowed is left to StepSlowed.
    from loaderbench.analysis.advice import window_step_slowed
    from loaderbench.model import ConfigResult, Summary, Trial

    s = Summary(samples_per_s=4000.0, stall_fraction=0.02, step_p50_s=0.05, compute_p50_s=0.05, samples_per_batch=256.0,
                data_wait_p50_s=0.0, data_wait_p95_s=0.0, first_batch_s=1.0)
    s.compute_ceiling_samples_per_s, s.step_slowdown = 5120.0, 0.0
    row = ConfigResult(settings(8), [], summary=s)

    def window(*steps_ms: float, cpu: float = 910.0) -> Trial:
        return Trial(data_wait_s=[0.0] * len(steps_ms), compute_s=[m / 1e3 for m in steps_ms],
                     step_s=[m / 1e3 for m in steps_ms], samples=256 * len(steps_ms), wall_s=1.0, first_batch_s=1.0,
                     warmup_batches=8, timing="events",
                     cpu_util_pct=cpu, main_cpu_util_pct=95.0)

    assert window_step_slowed(row, [window(*[50.0] * 10, *[60.0] * 6)], 16) is None
    assert window_step_slowed(row, [window(*[58.0] * 8), window(*[50.0] * 8)], 16) is None
    got = window_step_slowed(row, [window(*[58.0] * 12, *[50.0] * 4)], 16)
    assert got is not None and got.compute_p50_s == pytest.approx(0.058) and got.slowdown == pytest.approx(0.16)
    assert not got.cpu_saturated and got.cpu_cores == pytest.approx(9.1) and got.usable_cpus == 16
    s.step_slowed = True
    assert window_step_slowed(row, [window(*[58.0] * 16)], 16) is None
