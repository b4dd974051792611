"""Statistics of raw per-batch samples: percentiles, summaries over repeats, the frame."""

from __future__ import annotations

import pytest

from loaderbench.analysis import statistics as stats
from tests.helpers import result, settings, trial


def test_percentile_matches_numpy_linear():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert stats.percentile(xs, 50) == 3.0
    assert stats.percentile(xs, 95) == pytest.approx(4.8)
    assert stats.percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError):
        stats.percentile([], 50)


def test_input_bound_bands():
    from loaderbench.analysis.wait import input_bound_band

    assert input_bound_band(0.049) == "not input-bound"
    assert input_bound_band(0.05) == "moderately input-bound"
    assert input_bound_band(0.20) == "moderately input-bound"
    assert input_bound_band(0.21) == "highly input-bound"


def test_summary_medians_over_repeats():
    t = [trial(0, 16 / r) for r in (100.0, 300.0, 200.0)]
    s = stats.summarize(t)
    assert s.samples_per_s == pytest.approx(200.0)
    assert (s.samples_per_s_min, s.samples_per_s_max) == pytest.approx((100.0, 300.0))
    assert stats.relative_spread(s) == pytest.approx(1.0)


def test_load_results_frame_has_one_row_per_trial_with_the_wait_tail():
    from loaderbench.analysis.frame import to_frame
    from loaderbench.results import ResultSet

    waits = ([0.110] + [0.0] * 9) * 6  # as in the sawtooth above
    rs = ResultSet(config={}, environment={}, results=[
        result(settings(10, bs=32), trial(0, 0.005, waits=waits, bs=32), trial(0, 0.005, waits=waits, bs=32)),
        result(settings(2), status="failed", error="boom"),
    ])
    frame = to_frame(rs)
    assert list(frame["repeat"].fillna(-1)) == [0, 1, -1]
    row = frame.iloc[0]
    assert row["data_wait_p50_s"] == 0.0
    assert row["data_wait_p90_s"] == pytest.approx(0.011)
    assert row["data_wait_p99_s"] == pytest.approx(0.110) and row["data_wait_max_s"] == pytest.approx(0.110)
    assert row["samples_per_s"] == pytest.approx(32 * 60 / (60 * 0.005 + 6 * 0.110))




def test_a_row_held_to_its_workers_production_waits_on_the_loader():
    # 10 batches of 16 in 50-ms steps with no wait: the window reads 320 samples/s, but the
    # workers produced 240 (their completion instants). At 240 a step lasts 16 / 240 = 66.7 ms,
    # 50 of them compute: stall 1 - 0.05 x 240 / 16 = 25%, and the 16.7 ms per batch not seen
    # by the window is the loader's part, so the verdict is loader-bound, not compute-bound.
    from loaderbench.analysis.statistics import summarize, trial_samples_per_s, trial_stall_fraction
    from loaderbench.analysis.wait import production_wait_s, split_waits, verdict_for
    from loaderbench.model import ConfigResult, Trial, Verdict, WaitPart
    from tests.helpers import settings

    t = Trial(0.1, 16, [0.0] * 10, [0.05] * 10, [0.05] * 10, 160, 0.5, "host", production_samples_per_s=240.0)
    assert trial_samples_per_s(t) == pytest.approx(240.0)
    assert trial_stall_fraction(t) == pytest.approx(0.25)
    assert production_wait_s(t) == pytest.approx(16 / 240 - 0.05)
    r = ConfigResult(settings=settings(4, bs=16), status="ok", trials=[t])
    r.summary = summarize([t])
    split_waits([r])
    assert r.summary.wait_parts_s[WaitPart.LOADER] == pytest.approx(16 / 240 - 0.05)
    assert verdict_for(r)[0] is Verdict.LOADER_BOUND
    # Production above the window's rate (a loader that keeps up) changes nothing.
    fast = Trial(0.1, 16, [0.0] * 10, [0.05] * 10, [0.05] * 10, 160, 0.5, "host", production_samples_per_s=500.0)
    assert trial_samples_per_s(fast) == pytest.approx(320.0)
    assert trial_stall_fraction(fast) == 0.0 and production_wait_s(fast) == 0.0


def test_a_probe_under_its_own_window_stands_where_the_rows_repeats_came_down_to_it():
    # Jittered latency at 16 workers: the first trial's window read 809 samples/s and its probe a
    # sustained 646, more than 10% under it (a bound at 809, "below_step_rate"). Its repeats read
    # 636 and 624: the row's median is 636, and the probe's 646 is a sustained ceiling above it.
    # Repeats that read 800 and 790 keep the bound (the probe read 20% under the row).
    from loaderbench.analysis.statistics import summarize
    from loaderbench.model import CeilingBound

    def trials(*rates: float):
        ts = [trial(0.0, 16 / rate) for rate in rates]
        ts[0].loader_alone_method, ts[0].loader_alone_reason = "bound", "below_step_rate"
        ts[0].loader_alone_bound_samples_per_s, ts[0].loader_alone_probe_samples_per_s = rates[0], 646.0
        return ts

    s = summarize(trials(809.0, 636.0, 624.0))
    assert s.samples_per_s == pytest.approx(636.0)
    assert s.loader_ceiling_samples_per_s == pytest.approx(646.0) and s.loader_ceiling_bound is None
    s = summarize(trials(809.0, 800.0, 790.0))
    assert s.loader_ceiling_samples_per_s is None and s.loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE
    assert s.loader_ceiling_bound_samples_per_s == pytest.approx(809.0)  # its trial's bound, over the median
    # One trial alone: the bound, as before.
    assert summarize(trials(809.0)).loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE


def test_the_loader_ceiling_is_never_shown_below_its_rows_median_rate_past_its_uncertainty():
    # Three repeats at 480, 500 and 520 samples/s (median 500, spread 8%: ±4%, not noisy); the
    # first trial's probe read a sustained 460 (held against its own 480 window, it stood). The
    # row's figure is 500, which the loader alone reaches too: 460 is within 10% of it, so the
    # ceiling is 500. A probe of 400 is past both the 10% and the row's ±4%: a bound, at least
    # 500, "below_step_rate".
    from loaderbench.analysis.statistics import summarize
    from loaderbench.model import CeilingBound

    def trials(alone: float, rates=(480.0, 500.0, 520.0)):
        ts = [trial(0.0, 16 / rate) for rate in rates]
        ts[0].loader_alone_samples_per_s, ts[0].loader_alone_method = alone, "sustained"
        return ts

    s = summarize(trials(460.0))
    assert s.samples_per_s == pytest.approx(500.0) and s.uncertainty == pytest.approx(0.04) and not s.noisy
    assert s.loader_ceiling_samples_per_s == pytest.approx(500.0) and s.loader_ceiling_bound is None
    s = summarize(trials(400.0))
    assert s.loader_ceiling_samples_per_s is None
    assert s.loader_ceiling_bound_samples_per_s == pytest.approx(500.0)
    assert s.loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE
    # Above the row's rate, the probe's reading stands.
    assert summarize(trials(700.0)).loader_ceiling_samples_per_s == pytest.approx(700.0)
    # A bound of the first trial (held against its own 480 window: at least 480) is at least the
    # row's 500 too.
    ts = trials(460.0)
    ts[0].loader_alone_samples_per_s, ts[0].loader_alone_method = None, "bound"
    ts[0].loader_alone_bound_samples_per_s, ts[0].loader_alone_reason = 480.0, "time_cap"
    s = summarize(ts)
    assert s.loader_ceiling_samples_per_s is None and s.loader_ceiling_bound is CeilingBound.TIME_CAP
    assert s.loader_ceiling_bound_samples_per_s == pytest.approx(500.0)
    # Repeats at 400, 500 and 600 (spread 40%: ±20%, noisy): the row's own figure is the less
    # certain one. A probe of 460 or 400, within its ±20%, stands as read; one of 350 is past it:
    # a bound at the low end of the row's ±, 400 (its median is no firmer than that).
    wide = (400.0, 500.0, 600.0)
    s = summarize(trials(460.0, wide))
    assert s.noisy and s.loader_ceiling_samples_per_s == pytest.approx(460.0)
    assert summarize(trials(400.0, wide)).loader_ceiling_samples_per_s == pytest.approx(400.0)
    s = summarize(trials(350.0, wide))
    assert s.loader_ceiling_samples_per_s is None and s.loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE
    assert s.loader_ceiling_bound_samples_per_s == pytest.approx(400.0)


def test_a_window_whose_rounds_vary_states_its_uncertainty_and_a_settled_probe_under_it_stands():
    # 2 workers, batches of 16, compute 5 ms; after a first step of 0.05 s (left out of the
    # window's uncertainty: every window starts alike), the rounds of 2 batches take 0.1 and 0.2 s
    # in turn (waits 0.045, 0.045, 0.095, 0.095 s): 8 rounds, mean 0.15 s, standard deviation
    # 0.05345, so the window's mean is known to 0.05345 / sqrt(8) / 0.15 = 12.6% (±25%). Its
    # rate is 17 x 16 / 1.25 s = 217.6 samples/s; the probe read a sustained 180 (17% under it,
    # timed over builds whose mean it knew to 3%), which the trial held as a bound against its
    # own window ("below_step_rate"). Within the row's own ±25%, the probe's reading stands as
    # the ceiling; the row keeps its own figure and its ±.
    from loaderbench.model import CeilingBound

    waits = [0.045] + [0.045, 0.045, 0.095, 0.095] * 4
    t = trial(0.0, 0.005, waits=waits)
    assert stats.window_se(t, 2) == pytest.approx(0.05345 / 8 ** 0.5 / 0.15, rel=1e-3)
    assert stats.window_se(t, 6) is None  # 2 rounds of 6 after the first step: too few
    t.loader_alone_method, t.loader_alone_reason, t.loader_alone_probe_samples_per_s = "bound", "below_step_rate", 180.0
    t.loader_alone_bound_samples_per_s, t.loader_alone_build_se = 217.6, 0.03
    s = stats.summarize([t], num_workers=2)
    assert s.samples_per_s == pytest.approx(217.6, rel=1e-3) and s.noisy
    assert s.uncertainty == pytest.approx(0.252, abs=1e-3)
    assert s.loader_ceiling_samples_per_s == pytest.approx(180.0) and s.loader_ceiling_bound is None
    # A probe whose replay ended with its mean build known to 8% only (a heavy tail sampled
    # thinly in its time cap) is not set against the row past 10%: a bound, at least the low end
    # of the row's ±, 217.6 x (1 - 0.2523) = 162.8 (a window that read high by as much as it may
    # does not show the loader alone reaches its figure); a trial's bound at its own window that
    # read higher still (260) is no firmer.
    t.loader_alone_build_se = 0.08
    s = stats.summarize([t], num_workers=2)
    assert s.loader_ceiling_samples_per_s is None and s.loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE
    assert s.loader_ceiling_bound_samples_per_s == pytest.approx(162.77, rel=1e-3)
    t.loader_alone_bound_samples_per_s = 260.0
    assert stats.summarize([t], num_workers=2).loader_ceiling_bound_samples_per_s == pytest.approx(162.77, rel=1e-3)
    t.loader_alone_bound_samples_per_s = 217.6
    # A probe 36% under the row is past its ±25%: a bound too.
    t.loader_alone_build_se, t.loader_alone_probe_samples_per_s = 0.03, 139.0
    s = stats.summarize([t], num_workers=2)
    assert s.loader_ceiling_samples_per_s is None and s.loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE
    # Two such trials: their mean is known to 12.6% / sqrt(2).
    assert stats.trials_window_se([t, t], 2) == pytest.approx(0.126 / 2 ** 0.5, abs=1e-3)
    # Rounds of one length (each 0.15 s): no uncertainty from the window, and the probe 16% under
    # the row is a bound at the row's rate.
    even = trial(0.0, 0.005, waits=[0.045] + [0.045, 0.095] * 8)
    assert stats.window_se(even, 2) == pytest.approx(0.0)
    even.loader_alone_method, even.loader_alone_reason, even.loader_alone_probe_samples_per_s = (
        "bound", "below_step_rate", 180.0)
    even.loader_alone_bound_samples_per_s = 217.6
    s = stats.summarize([even], num_workers=2)
    assert s.uncertainty == 0.0 and not s.noisy
    assert s.loader_ceiling_samples_per_s is None and s.loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE
    assert s.loader_ceiling_bound_samples_per_s == pytest.approx(217.6, rel=1e-3)


def test_workers_that_fill_fewer_cpus_than_they_are_read_as_computing():
    # Two workers building on 1 usable CPU (the process tree 100% of a core, the main process 3%):
    # 0.485 cores each, under WORKERS_COMPUTING, yet the one CPU they had was 97% theirs. A
    # receive then waits for that CPU (10 ms timed for 1.2 ms of the main process's CPU): with the
    # usable CPUs known it reads as its CPU seconds; on 2 CPUs the same readings (0.97 of 2 cores)
    # are workers that did not fill them, and the wall seconds stay.
    t = trial(0.040, 0.020)
    t.cpu_util_pct, t.main_cpu_util_pct = 100.0, 3.0
    t.receive_s, t.receive_cpu_s = [0.010, 0.011, 0.009], [0.0012, 0.0011, 0.0013]
    assert not t.workers_computing(2)
    assert t.workers_computing(2, usable_cpus=1)
    assert not t.workers_computing(2, usable_cpus=2)
    assert t.receives_read_s(2, usable_cpus=1) == [0.0012, 0.0011, 0.0013]
    assert t.receives_read_s(2) == [0.010, 0.011, 0.009]
    assert stats.summarize([t], 2, usable_cpus=1).receive_p50_s == pytest.approx(0.0012)
    assert stats.summarize([t], 2).receive_p50_s == pytest.approx(0.010)
    # Sleeping workers (the tree 8% of a core beside the main process's 3%) are waiting, not
    # computing, however few the CPUs: their round trips are the receive's own.
    t.cpu_util_pct = 8.0
    assert not t.workers_computing(4, usable_cpus=1)
