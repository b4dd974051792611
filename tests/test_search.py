"""The model-guided search against pipelines of known rates (no processes): it finds the knee a
full grid finds, measures fewer configs, never ranks a prediction, and its model predicts the
configs it did not measure."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from loaderbench.analysis import summarize_config
from loaderbench.analysis.ceiling import set_ceilings
from loaderbench.analysis.knee import find_knee
from loaderbench.analysis.predict import Fit, predict, series_of, softmin
from loaderbench.analysis.wait import judge
from loaderbench.model import Ceiling, ConfigResult, LoaderSettings, Verdict
from loaderbench.orchestration.search import Search
from tests.helpers import FakeClock, settings, trial


def pipeline(build_ms_per_sample: float, step_ms: float, *, bs: int = 16, cpus: int = 16,
             cpu_per_sample_s: float = 0.0, receive_ms: float = 0.2,
             outliers: dict[tuple[int, int], float] | None = None,
             slowed: dict[tuple[int, int], float] | None = None,
             other_pct: float = 0.0, queue_share: float | None = None,
             window_high: dict[tuple[int, int], float] | None = None):
    """A loader whose workers each build a batch in bs x build_ms, a step of step_ms, on `cpus`
    CPUs: the measured throughput of W workers is min(W x r, cpus / kappa, C) with r = 1000 /
    build_ms samples/s per worker (0 workers: build, then step). `outliers` maps (workers,
    repeat) to a factor on that trial's throughput (a trial that reads low); `slowed` maps them to
    a factor on that trial's step time (a step that ran slower beside the loader: the trial's
    throughput falls by as much). `other_pct`: other processes' CPU in every window (cores x
    100); `queue_share`: the share of each worker's window it waited for a CPU (None: not read);
    `window_high` maps (workers, repeat) to a factor on that trial's window alone, its probe
    after the window reading the loader's true rate under it ("below_step_rate").
    Returns measure(settings, repeat)."""
    r = 1000.0 / build_ms_per_sample
    c = bs * 1000.0 / step_ms
    calls: list[tuple[LoaderSettings, int]] = []
    results: dict[LoaderSettings, ConfigResult] = {}

    def measure(s: LoaderSettings, repeat: int) -> ConfigResult:
        calls.append((s, repeat))
        w = s.num_workers
        cpu_cap = cpus / cpu_per_sample_s if cpu_per_sample_s else math.inf
        if w == 0:
            loader = r
            rate = 1.0 / (1.0 / r + 1.0 / c)
        else:
            loader = min(w * r, cpu_cap)
            rate = min(loader, c)
        rate *= (outliers or {}).get((w, repeat), 1.0)
        slow = (slowed or {}).get((w, repeat), 1.0)
        rate /= slow
        high = (window_high or {}).get((w, repeat), 1.0)
        rate *= high
        step_s = bs / rate
        compute_s = step_ms / 1000.0 * slow
        t = trial(max(0.0, step_s - compute_s), compute_s, n=30, bs=bs)
        t.loader_alone_samples_per_s = loader
        if high != 1.0:
            t.loader_alone_samples_per_s, t.loader_alone_method, t.loader_alone_reason = None, "bound", "below_step_rate"
            t.loader_alone_bound_samples_per_s, t.loader_alone_probe_samples_per_s = rate, loader
        t.receive_s = [receive_ms / 1000.0] * 4 if w else []
        t.cpu_util_pct = 100.0 * (cpu_per_sample_s * rate + 0.05)
        t.other_cpu_util_pct = other_pct
        t.workers_runq_pct = None if queue_share is None else 100.0 * queue_share * w
        res = results.setdefault(s, ConfigResult(settings=s, status="ok"))
        res.trials.append(t)
        summarize_config(res)
        # The ceilings and verdicts passes, as the sweep's analysis runs them after every trial.
        set_ceilings([res], {bs: Ceiling.analytic(bs, step_ms / 1000.0)}, "sleep")
        judge([res], usable_cpus=cpus)
        return res

    return measure, calls


def grid(workers, **kw) -> list[LoaderSettings]:
    return [settings(w, **kw) if w else settings(0, bs=kw.get("bs", 16)) for w in workers]


@pytest.mark.parametrize("build_ms, step_ms, knee", [
    (2.0, 12.0, 3),   # 32 ms per batch per worker, 12 ms step: 3 workers (32 / 12 = 2.7)
    (3.0, 16.0, 3),   # 24 ms per batch of 8... here bs 16: 48 / 16 = 3
    (1.0, 8.0, 2),    # 16 / 8 = 2
    (5.0, 10.0, 8),   # 80 / 10 = 8
    (0.5, 40.0, 1),   # a fast loader: 1 worker (0 workers build and step in turn)
])
def test_the_search_finds_the_full_grids_knee_with_fewer_configs(build_ms, step_ms, knee):
    cells = grid(range(0, 13))
    measure, calls = pipeline(build_ms, step_ms)
    search = Search(cells, measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=16,
                    cuda=False, dense_workers=False, clock=FakeClock())
    found = find_knee(search.run(), tolerance=0.05)
    full_measure, _ = pipeline(build_ms, step_ms)
    full = find_knee([full_measure(c, 0) for c in cells], tolerance=0.05)
    assert found.settings == full.settings
    assert found.settings.num_workers == knee
    assert len({s for s, _ in calls}) <= 6 < len(cells)
    # Every measured config is one the search chose; the knee's neighbours were measured.
    measured = {s.num_workers for s, _ in calls}
    assert {knee - 1, knee + 1} & set(range(13)) <= measured


def test_a_dense_worker_search_finds_the_knee_between_powers_of_two():
    # 6 workers needed (96 ms per batch per worker, 16 ms step); the default grid is 0,1,2,4,8,16.
    cells = grid([0, 1, 2, 4, 8, 16])
    measure, calls = pipeline(6.0, 16.0)
    search = Search(cells, measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=16,
                    cuda=False, dense_workers=True, clock=FakeClock())
    knee = find_knee(search.run(), tolerance=0.05)
    assert knee.settings.num_workers == 6
    assert {5, 6, 7} <= {s.num_workers for s, _ in calls}


def test_the_cpu_ceiling_bends_the_curve_and_the_model_predicts_it():
    # Each sample costs 10 ms of CPU: 4 CPUs build at most 400 samples/s, whatever the workers;
    # one worker builds 100/s (10 ms per sample); the step could take 1,600/s.
    cells = grid([0, 1, 2, 4, 8, 16])
    measure, calls = pipeline(10.0, 10.0, cpus=4, cpu_per_sample_s=0.010)
    search = Search(cells, measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=4,
                    cuda=False, dense_workers=False, clock=FakeClock())
    ran = search.run()
    knee = find_knee(ran, tolerance=0.05)
    assert knee.settings.num_workers == 4
    [p16] = predict(ran, [settings(16)], 4)
    assert p16.samples_per_s == pytest.approx(400.0, rel=0.15)  # the CPUs bind, not 16 x 100
    assert p16.stall_fraction == pytest.approx(1 - 400 / 1600, abs=0.05)


def test_a_loader_bound_window_stands_for_the_loader_not_a_flattered_probe():
    # 4 workers build 60 samples/s each (240/s), the step could take 1,600/s: the window waits
    # 85% of its time. The probe after the window read 400/s (a backlog, as at many workers on
    # a GPU host): the model takes the window's 60 per worker, so 16 workers predict 960/s,
    # not 1,600 x softmin. A window that waited under a quarter of its time keeps the probe.
    measure, _ = pipeline(1000.0 / 60.0, 10.0)
    row = measure(settings(4), 0)
    row.trials[0].loader_alone_samples_per_s = 400.0
    summarize_config(row)
    row.summary.compute_ceiling_samples_per_s = 1600.0
    assert row.summary.stall_fraction == pytest.approx(0.85, abs=0.01)
    [p16] = predict([row], [settings(16)], 16)
    assert p16.samples_per_s == pytest.approx(softmin(16 * 60.0, 1600.0 / (1 + 1600.0 * 0.0002 / 16), 6.0), rel=0.01)
    assert p16.samples_per_s == pytest.approx(955.0, rel=0.02)
    near, _ = pipeline(1000.0 / 350.0, 10.0)  # 4 x 350 = 1,400/s: waits 12.5% of the time
    row = near(settings(4), 0)
    row.trials[0].loader_alone_samples_per_s = 1500.0
    summarize_config(row)
    row.summary.compute_ceiling_samples_per_s = 1600.0
    assert row.summary.stall_fraction < 0.25
    fitted = predict([row], [settings(2)], 16)[0]
    assert fitted.samples_per_s == pytest.approx(2 * 375.0, rel=0.05)  # 1,500 / 4 per worker


def test_repeats_go_only_to_the_configs_that_decide_the_pick():
    # 2.4 ms per sample: a worker builds 417 samples/s; the 12 ms step takes 1,333/s. 3 workers
    # reach 1,250/s, 6% under the best: near the knee's edge (between 2.5% and 10% under), so a
    # repeat may move it across; 4 (the knee, the best) get repeats with it, 8 does not.
    cells = grid([0, 1, 2, 3, 4, 8])
    measure, calls = pipeline(2.4, 12.0)
    search = Search(cells, measure=measure, tolerance=0.05, repeats=3, budget_s=600, usable_cpus=16,
                    cuda=False, dense_workers=False, clock=FakeClock())
    search.run()
    assert {s.num_workers for s, rep in calls if rep > 0} == {3, 4}
    assert search.log.stopped == "every config near the knee's edge measured 3 times"
    once = Search(cells, measure=pipeline(2.4, 12.0)[0], tolerance=0.05, repeats=1, budget_s=600, usable_cpus=16,
                  cuda=False, dense_workers=False, clock=FakeClock())
    once.run()
    assert once.log.stopped == "every config near the knee's edge measured once"
    # 2 ms per sample: 4 and 8 workers both reach the step's 1,333/s and 2 workers are far
    # below (1,000/s): the ranking is clear, nothing is repeated.
    measure, calls = pipeline(2.0, 12.0)
    search = Search(grid([0, 1, 2, 4, 8]), measure=measure, tolerance=0.05, repeats=3, budget_s=600,
                    usable_cpus=16, cuda=False, dense_workers=False, clock=FakeClock())
    search.run()
    assert all(rep == 0 for _, rep in calls)
    assert search.log.stopped == "the ranking is clear: no config near the knee's edge"


def test_a_first_trial_far_below_the_models_prediction_is_repeated_when_it_decides_the_pick():
    # 2 ms per sample, a 12 ms step: 500 samples/s per worker, the step takes 1,333/s; 4
    # workers reach the step (the knee of 0,1,2,4,6,8), 2 reach 1,000/s. 4 workers' first trial
    # reads 20% low (1,067/s): alone, it puts the knee at 6. The model, fitted on the probe at
    # 1 worker, predicted 4 workers at the step's rate before measuring it: that one trial
    # decides the pick against the model, so it is repeated (with the best), and 4 is the pick.
    cells = grid([0, 1, 2, 4, 6, 8])
    measure, calls = pipeline(2.0, 12.0, cpus=4, outliers={(4, 0): 0.8})
    search = Search(cells, measure=measure, tolerance=0.05, repeats=3, budget_s=600, usable_cpus=4,
                    cuda=False, dense_workers=False, clock=FakeClock())
    results = search.run()
    assert search.predicted[settings(4)] == pytest.approx(1333.3, rel=0.05)
    assert [rep for s, rep in calls if s.num_workers == 4] == [0, 1, 2]
    assert find_knee(results, tolerance=0.05).settings.num_workers == 4
    assert any(st.repeat and st.why.startswith("repeat:") and st.config == settings(4).key() for st in search.log.steps)
    # The same low trial at 2 workers, which the model put far below the best too: no repeat.
    measure, calls = pipeline(2.0, 12.0, cpus=4, outliers={(2, 0): 0.8})
    search = Search(cells, measure=measure, tolerance=0.05, repeats=3, budget_s=600, usable_cpus=4,
                    cuda=False, dense_workers=False, clock=FakeClock())
    results = search.run()
    assert all(rep == 0 for s, rep in calls if s.num_workers == 2)
    assert find_knee(results, tolerance=0.05).settings.num_workers == 4


def test_the_time_budget_stops_the_repeats_and_says_so():
    clock = FakeClock()
    cells = grid([0, 1, 2, 4, 8])
    measure, calls = pipeline(2.0, 12.0)

    def slow(s, rep):
        clock.advance(50.0)
        return measure(s, rep)

    search = Search(cells, measure=slow, tolerance=0.05, repeats=3, budget_s=120, usable_cpus=16,
                    cuda=False, dense_workers=False, clock=clock)
    search.run()
    assert search.log.stopped.startswith("--time-budget reached")
    assert all(rep == 0 for s, rep in calls[:3])


def test_no_step_starts_that_would_end_after_the_budget_with_its_reserve():
    # Every trial takes 10 s; the reserve is three trials (the step and the drift check). With a
    # budget of 95 s, a step may start while clock + 30 < 95, i.e. up to t = 60 s: after the
    # seventh trial (t = 70 s) nothing more starts, so the search ends by 70 s and the check has
    # its 25 s. Without a reserve the same search runs past 95 s.
    def run(reserve):
        clock = FakeClock()
        measure, calls = pipeline(10.0, 10.0)  # a knee past the CPUs: repeats near the edge

        def slow(s, rep):
            clock.advance(10.0)
            return measure(s, rep)

        search = Search(grid([0, 1, 2, 4, 8, 16]), measure=slow, tolerance=0.05, repeats=5, budget_s=95,
                        usable_cpus=16, cuda=False, dense_workers=True, clock=clock,
                        reserve_s=lambda: reserve)
        search.run()
        return clock(), len(calls), search.log.stopped

    end, trials, stopped = run(30.0)
    assert (end, trials) == (70.0, 7) and stopped.startswith("--time-budget reached")
    assert run(0.0)[:2] == (100.0, 10)  # the last repeat started at 90 s, ended past 95


def test_the_budget_reserve_is_the_latest_trials_time_when_they_grew():
    from loaderbench.orchestration.budget import budget_reserve_s

    assert budget_reserve_s([], drift_follows=True) == 0.0
    # Early probes of 4 s, then near-knee configs of 6, 7 and 5 s: one trial is the mean of the
    # latest three (6 s, over the median 4.5), three of them with the drift check to follow.
    walls = [4.0, 4.0, 4.0, 6.0, 7.0, 5.0]
    assert budget_reserve_s(walls, drift_follows=False) == 6.0
    assert budget_reserve_s(walls, drift_follows=True) == 18.0
    # Later trials cheaper than most: the median (6 s) stands.
    assert budget_reserve_s([6.0, 6.0, 6.0, 2.0, 2.0], drift_follows=True) == 18.0


def test_the_report_after_the_measurements_is_inside_the_budget():
    from loaderbench.orchestration.budget import finish_reserve_s, measuring_budget_s

    # The default 120-s budget leaves the measurements 115 s; a 20-s one keeps a tenth, 2 s, and
    # a 60-s one 5 s.
    assert measuring_budget_s(120.0) == 115.0
    assert finish_reserve_s(20.0) == 2.0 and measuring_budget_s(20.0) == 18.0
    assert finish_reserve_s(60.0) == 5.0
    assert finish_reserve_s(0.0) == 0.0


def test_softmin_and_the_zero_worker_series():
    assert softmin(100.0, 1e9, 6.0) == pytest.approx(100.0)
    f = Fit(per_worker=100.0, cpu_s_per_sample=None, main=None, zero_workers=None, compute=400.0, sharpness=6.0)
    assert f.samples_per_s(0, 4) == pytest.approx(1 / (1 / 100 + 1 / 400))  # build, then step
    s = replace(settings(4, pin=True, factor=4), persistent_workers=True)
    assert series_of(s) == settings(0, pin=True)


def test_a_probe_that_fails_moves_the_search_on():
    # The probe's config fails (a worker crashed): the search measures the next count up, and
    # never recommends the failed one.
    measure, calls = pipeline(2.0, 12.0)

    def flaky(s, rep):
        r = measure(s, rep)
        if s.num_workers == 4:
            r.status, r.summary, r.trials, r.error = "failed", None, [], "worker killed"
        return r

    search = Search(grid([0, 1, 2, 4, 8]), measure=flaky, tolerance=0.05, repeats=1, budget_s=600,
                    usable_cpus=16, cuda=False, dense_workers=False, clock=FakeClock())
    knee = find_knee(search.run(), tolerance=0.05)
    assert [s.num_workers for s, _ in calls][:2] == [4, 0]
    assert knee is not None and knee.settings.num_workers == 8


def test_the_users_baseline_settings_are_measured_first():
    cells = grid(range(0, 13))
    measure, calls = pipeline(2.0, 12.0)
    Search(cells, measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=16, cuda=False,
           dense_workers=False, clock=FakeClock(), first=[settings(0)]).run()
    assert calls[0] == (settings(0), 0)


def test_zero_workers_is_measured_only_when_it_may_compete():
    from loaderbench.model import Verdict

    def run(measure):
        s = Search(grid(range(0, 13)), measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=16,
                   cuda=False, dense_workers=False, clock=FakeClock())
        s.run()
        return {r.settings.num_workers for r in s.measured()}

    # 32 ms per batch per worker, 12 ms step: 0 workers (363/s) is under half the knee's 1,333/s.
    measure, _ = pipeline(2.0, 12.0)
    assert 0 not in run(measure)
    # A fast loader and a 40 ms step: 0 workers (333/s) is predicted near the best (400/s).
    measure, _ = pipeline(0.5, 40.0)
    assert 0 in run(measure)

    def handoff_bound(measure):
        """The same pipeline, every row with workers bound by the hand-off to the main process."""
        def measure_handoff(s: LoaderSettings, repeat: int) -> ConfigResult:
            r = measure(s, repeat)
            if s.num_workers:
                r.summary.verdict = Verdict.RECEIVE_FLOOR
            return r
        return measure_handoff

    # The slow loader bound by the hand-off, which 0 workers never pays: 0 workers (a quarter of
    # the best or more) is measured.
    assert 0 in run(handoff_bound(pipeline(2.0, 12.0)[0]))
    # Bound by the hand-off too, but 0 workers is predicted at a tenth of the best (80 ms per
    # batch against 2,400/s with 12 workers): its slow window is not worth measuring.
    assert 0 not in run(handoff_bound(pipeline(5.0, 2.0)[0]))


def test_a_loader_still_starved_at_the_usable_cpus_with_cpus_to_spare_is_searched_past_them():
    # 4 CPUs; a worker builds 16 samples at 5 ms each and is busy 60% of that time (not I/O-bound):
    # W workers give 200 W samples/s until the CPUs cap it at 4 / 0.003 = 1,333/s (W = 6.7). At
    # 4 workers the tree uses 2.45 of 4 CPUs, still loader-bound: the search goes past 4.
    measure, calls = pipeline(5.0, 2.0, cpus=4, cpu_per_sample_s=0.003)
    s = Search(grid(range(0, 5)), measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=4,
               cuda=False, dense_workers=True, clock=FakeClock())
    knee = find_knee(s.run(), tolerance=0.05)
    assert max(c.num_workers for c, _ in calls) > 4
    assert knee.settings.num_workers in (6, 7)  # 6 x 200 = 1,200 is within 10% of 1,333; 5% needs 7


@pytest.mark.parametrize("queue_share, widest", [(None, 8), (0.5, 8), (0.01, 32)])
def test_a_latency_bound_loader_on_cpus_full_of_other_load_is_searched_past_them(queue_share, widest):
    # 2 CPUs, 1.9 of them taken by other processes. Each sample waits 40 ms on latency and uses
    # 0.1 ms of CPU: W workers give 25 W samples/s, the 2-ms step of 16 takes 8,000/s. The tree
    # uses next to nothing, but the CPUs read saturated: without a run-queue reading, or with
    # workers runnable without a CPU half their window, they may be short of CPU and the search
    # stops at twice the grid's widest count; workers that waited for a CPU 1% of their window
    # slept on latency, and the search goes on widening while they starve.
    measure, calls = pipeline(40.0, 2.0, cpus=2, cpu_per_sample_s=0.0001, other_pct=190.0, queue_share=queue_share)
    s = Search(grid(range(0, 5)), measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=2,
               cuda=False, dense_workers=True, clock=FakeClock())
    s.run()
    assert max(c.num_workers for c, _ in calls) >= widest
    if queue_share is None or queue_share >= 0.2:
        assert max(c.num_workers for c, _ in calls) == widest


def test_a_window_that_read_above_its_loaders_sustained_rate_is_repeated_where_it_decides_the_pick():
    # 200 samples/s per worker, a 2-ms step of 16 (8,000/s): loader-bound, 4 workers the best at
    # 800/s, 3 workers 25% under it (no competitor). One window of 4 workers reads 30% high
    # (1,040/s), its probe after it the loader's 800 (more than 10% under: "below_step_rate").
    # That row decides the pick, so it is a competitor and gets repeats; read right, it is not.
    # With its repeats at 800 the median is 800, and the probe's 800 is its sustained ceiling.
    from loaderbench.model import CeilingBound

    def searched(window_high):
        measure, _ = pipeline(5.0, 2.0, window_high=window_high)
        s = Search(grid(range(1, 5)), measure=measure, tolerance=0.05, repeats=3, budget_s=600, usable_cpus=16,
                   cuda=False, dense_workers=False, clock=FakeClock())
        for w in range(1, 5):
            s.results[settings(w)] = measure(settings(w), 0)
        return s, measure

    s, measure = searched({(4, 0): 1.3})
    four = s.results[settings(4)]
    assert four.summary.samples_per_s == pytest.approx(1040.0)
    assert four.summary.loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE
    assert s.above_ceiling() == [four] and four in s.competitors()
    for repeat in (1, 2):
        measure(settings(4), repeat)
    assert four.summary.samples_per_s == pytest.approx(800.0)
    assert four.summary.loader_ceiling_samples_per_s == pytest.approx(800.0) and four.summary.loader_ceiling_bound is None
    s, _ = searched(None)
    assert s.above_ceiling() == [] and s.competitors() == []


def test_more_usable_cpus_never_predict_less_at_the_same_worker_count():
    # A CPU-bent loader measured on 4 CPUs (1 ms of CPU per sample: 4,000/s at most), a 2 ms step.
    from loaderbench.analysis.predict import what_if_cpus

    measure, _ = pipeline(5.0, 2.0, cpus=4, cpu_per_sample_s=0.001)
    rows = [measure(settings(w) if w else settings(0), 0) for w in (0, 1, 2, 4, 8)]
    curves = {k: dict(what_if_cpus(rows, settings(1), k, 0.05, max_workers=16, measured_cpus=4).curve)
              for k in (2, 4, 8, 16)}
    for w in range(0, 17):
        values = [curves[k][w] for k in (2, 4, 8, 16)]
        assert values == sorted(values), (w, values)
    # Where the CPUs bind, more of them lift the curve: 16 workers x 200/s = 3,200/s is under
    # 4 CPUs' 4,000/s and the 8,000/s step; on 2 CPUs the cap is 2,000/s.
    assert curves[2][16] == pytest.approx(2000, rel=0.15) and curves[16][16] > 1.3 * curves[2][16]


def test_a_what_if_anchored_above_the_model_never_passes_the_step():
    # A loader on 2 CPUs (2 ms of CPU per sample: 1,000/s at most), a 2 ms step of 16 (8,000/s)
    # and a 0.2 ms receive: the main thread's rate 1 / (1/8000 + 1/80000) = 7,273/s. The widest
    # rows read 1.4x what the model gives them (a host that ran faster than the CPU figures say),
    # so the anchoring lifts the curve by 1.4: with 64 CPUs it would pass the step (1.4 x ~7,000).
    # It is held at the main thread's rate, and the step binds there.
    from loaderbench.analysis.predict import what_if_cpus
    from loaderbench.conclusions import Binds

    measure, _ = pipeline(5.0, 2.0, cpus=2, cpu_per_sample_s=0.002, outliers={(4, 0): 1.4, (8, 0): 1.4})
    rows = [measure(settings(w) if w else settings(0), 0) for w in (0, 1, 2, 4, 8)]
    answer = what_if_cpus(rows, settings(1), 64, 0.05, measured_cpus=2)
    assert max(x for _, x in answer.curve) == pytest.approx(7273, rel=0.001) and answer.knee_samples_per_s > 6900
    assert answer.binds is Binds.STEP


def test_a_what_if_anchored_above_the_model_never_passes_what_fewer_cpus_build():
    # A loader of 4 ms of CPU per sample (250 samples/s per CPU), measured on 2 CPUs beside a 20 ms
    # step of 16 (800/s): W workers build min(250 W, 500). The 2-worker row read 1.25x (a quiet
    # moment): the anchoring lifts the curve near it by 1.25, but on 1 CPU no worker count builds
    # past 250 samples/s (225-240 were measured there under taskset, where 289 had been predicted).
    from loaderbench.analysis.predict import what_if_cpus

    measure, _ = pipeline(4.0, 20.0, cpus=2, cpu_per_sample_s=0.004, outliers={(2, 0): 1.25})
    rows = [measure(settings(w), 0) for w in (0, 1, 2, 4)]
    answer = what_if_cpus(rows, settings(2), 1, 0.05, measured_cpus=2)
    assert max(x for w, x in answer.curve if w > 0) <= 250 * 1.001
    assert dict(answer.curve)[2] == pytest.approx(250, rel=0.05)
    # At the measured CPUs the rows come out as measured: 625 at 2 workers (1.25 x 500).
    here = what_if_cpus(rows, settings(2), 2, 0.05, measured_cpus=2)
    assert dict(here.curve)[2] == pytest.approx(625, rel=0.001)


def test_the_tables_predicted_rows_are_the_what_ifs_figures_on_the_measured_cpus():
    # 5 ms a sample per worker (200/s each) beside a 20 ms step of 16 (800/s) on 16 CPUs; 2 workers
    # read 0.85x (a slow trial). The table's prediction at 3 workers and the what-if curve at the
    # measured CPUs (what the plateau of the changes beyond the settings reads) are one figure:
    # anchored to the nearest measured row, about 0.85 of the model's own (~580 at 3 workers).
    from loaderbench.analysis.predict import predict, predict_anchored, what_if_cpus

    measure, _ = pipeline(5.0, 20.0, outliers={(2, 0): 0.85})
    rows = [measure(settings(w), 0) for w in (0, 1, 2)]
    [plain] = predict(rows, [settings(3)], 16)
    [shown] = predict_anchored(rows, [settings(3)], 16)
    curve = dict(what_if_cpus(rows, settings(2), 16, 0.05, measured_cpus=16).curve)
    assert shown.samples_per_s == pytest.approx(curve[3], rel=1e-6)
    assert shown.samples_per_s == pytest.approx(0.85 * plain.samples_per_s, rel=0.03)


def test_an_unhidden_copy_without_the_prefetcher_is_on_the_main_threads_path():
    # A receive of 0.2 ms and a copy of 0.8 ms per batch of 16, none of it hidden: without the
    # prefetcher the copy runs before the step, so the main thread spends 1 ms a batch besides the
    # step (16,000 samples/s); with the prefetcher an unhidden copy is inside the receive (80,000).
    from loaderbench.analysis.predict import fit, series_of

    def rows(pf: bool):
        measure, _ = pipeline(5.0, 2.0)
        out = [measure(settings(w, pf=pf), 0) for w in (1, 2, 4)]
        for r in out:
            r.summary.h2d_p50_s, r.summary.h2d_hidden_fraction = 0.0008, 0.0
        return out

    assert fit(rows(False), series_of(settings(1)), 16).main == pytest.approx(16000)
    assert fit(rows(True), series_of(settings(1, pf=True)), 16).main == pytest.approx(80000)


def test_a_flat_what_if_curve_is_not_bound_by_the_workers():
    # A kept 2-CPU result: 1 worker measured 556 samples/s, 2 and more workers no faster. Asked
    # for 4 CPUs, the anchored curve peaks at 1 worker and is flat after it, so what binds there
    # is not "the workers (more of them would go further)".
    from loaderbench.analysis.predict import what_if_cpus
    from loaderbench.conclusions import Binds
    from loaderbench.results import read_results

    rs = read_results(Path(__file__).parent / "data" / "results-v3-profile-cpu.json")
    answer = what_if_cpus(rs.results, rs.recommendation.settings, 4, 0.05, measured_cpus=2)
    curve = dict(answer.curve)
    assert answer.knee_workers == 1 and all(curve[w] <= curve[1] for w in curve)
    assert answer.binds is not Binds.WORKERS


def test_the_what_if_looks_past_twice_the_cpus_when_the_run_measured_more_workers():
    # An I/O-bound loader on 2 CPUs: a worker sleeps 5 ms per sample (0.2 ms of CPU), a 10 ms
    # step of 16: the knee is at 80 / 10 = 8 workers, past twice the CPUs. With K equal to the
    # run's CPUs the what-if gives that knee back (it used to stop looking at 2 x 2 = 4).
    from loaderbench.analysis.predict import what_if_cpus

    measure, _ = pipeline(5.0, 10.0, cpus=2, cpu_per_sample_s=0.0002)
    rows = [measure(settings(w) if w else settings(0), 0) for w in (0, 1, 2, 4, 6, 7, 8, 9, 10)]
    found = what_if_cpus(rows, settings(1), 2, 0.05, measured_cpus=2)
    assert found.knee_workers == 8
    assert max(w for w, _ in found.curve) == 20  # twice the 10 workers measured


def test_a_light_loader_starved_at_twice_the_cpus_is_searched_wider_again():
    # 4 CPUs; a worker builds a sample in 20 ms using 2 ms of CPU (I/O-bound: 0.1 core each), a
    # 10 ms step of 16: W workers give 50 W samples/s up to the step's 1,600/s at W = 32. Twice
    # the CPUs (8) is still starved with CPUs idle: the search widens to 16, then 32.
    measure, calls = pipeline(20.0, 10.0, cpus=4, cpu_per_sample_s=0.002)
    s = Search(grid(range(0, 5)), measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=4,
               cuda=False, dense_workers=True, clock=FakeClock())
    knee = find_knee(s.run(), tolerance=0.05)
    assert max(c.num_workers for c, _ in calls) > 16
    assert 30 <= knee.settings.num_workers <= 32  # 50 W within 5% of 1,600: W >= 30.4


@pytest.mark.parametrize("build_ms, knee_range", [(20.0, (15, 16)), (40.0, (30, 32))])
def test_a_latency_bound_loader_is_searched_far_past_the_cpus(build_ms, knee_range):
    # 2 CPUs; a worker waits `build_ms` per sample (a read from network storage) using 0.5 ms of
    # CPU, batch 8, a 10 ms step of 800 samples/s: W workers give 8 W / (8 x build_ms) samples/s,
    # so the knee is at 16 workers for 20 ms (50 W within 5% of 800: W >= 15.2) and 31-32 for 40
    # ms (25 W: W >= 30.4; 31 reads 775 and is compute-bound, so 30 is within 5% of the best
    # measured), 8 and 16 times the CPUs. The tree's CPU stays under 0.5 of a core: only the
    # loader binds, so the search widens until a count keeps up. It stopped at 8 x the grid's
    # widest count (16) before: the 40-ms loader's knee was out of reach.
    measure, calls = pipeline(build_ms, 10.0, bs=8, cpus=2, cpu_per_sample_s=0.0005)
    s = Search(grid(range(0, 3), bs=8), measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=2,
               cuda=False, dense_workers=True, clock=FakeClock())
    knee = find_knee(s.run(), tolerance=0.05)
    assert knee_range[0] <= knee.settings.num_workers <= knee_range[1]
    assert max(c.num_workers for c, _ in calls) >= knee_range[0]
    assert s.log.widened.refused is None and s.log.widened.workers >= knee_range[1]


def _with_memory(measure, per_process_bytes: int, leaves: int = 2):
    """`measure` whose trials read `per_process_bytes` of PSS per process and `leaves` tensors per batch."""
    def wrapped(st, repeat):
        res = measure(st, repeat)
        for t in res.trials:
            t.memory_pss_bytes = per_process_bytes * (st.num_workers + 1)
            t.tensor_leaves = leaves
        summarize_config(res)
        res.summary.compute_ceiling_samples_per_s = 800.0
        return res
    return wrapped


def test_memory_and_open_files_measured_at_the_widest_count_stop_the_widening():
    from loaderbench.orchestration.search import HostLimits

    # The 40-ms loader of the test above, 200 MiB per process: 8 workers measure 1.76 GiB, 16
    # would need 3.3 GiB; with 3 GiB available (90% of it: 2.7) the search stops at 8 workers
    # and says why, and a count it never measured is never ranked.
    mib = 2**20
    measure, calls = pipeline(40.0, 10.0, bs=8, cpus=2, cpu_per_sample_s=0.0005)
    s = Search(grid(range(0, 3), bs=8), measure=_with_memory(measure, 200 * mib), tolerance=0.05, repeats=1,
               budget_s=600, usable_cpus=2, cuda=False, dense_workers=True, clock=FakeClock(),
               limits=HostLimits(memory_available_bytes=3 * 2**30))
    s.run()
    assert max(c.num_workers for c, _ in calls) == 8
    assert s.log.widened.workers == 8 and s.log.widened.refused.startswith("memory: 16 workers")
    # The widening is a typed record of the search log, through the JSON and back.
    import json

    from loaderbench.results import SearchLog, Widening

    back = SearchLog.from_dict(json.loads(json.dumps(s.log.to_dict())))
    assert isinstance(back.widened, Widening) and back.widened == s.log.widened
    # Open files: 100 tensors per batch, prefetch_factor 2, a soft limit of 1,024: 4 workers hold
    # about 64 + 4 x (6 + 200) = 888 descriptors, over 90% of the limit (922) at 8 (1,712).
    measure, calls = pipeline(40.0, 10.0, bs=8, cpus=2, cpu_per_sample_s=0.0005)
    s = Search(grid(range(0, 3), bs=8), measure=_with_memory(measure, mib, leaves=100), tolerance=0.05,
               repeats=1, budget_s=600, usable_cpus=2, cuda=False, dense_workers=True, clock=FakeClock(),
               limits=HostLimits(fd_soft_limit=1024))
    s.run()
    assert max(c.num_workers for c, _ in calls) == 4
    assert s.log.widened.refused.startswith("open files: 8 workers would hold about 1,712 descriptors")
    # Under the 'file_system' strategy tensors hold no descriptor: 64 + 6 W fits up to 128 workers.
    from loaderbench.orchestration.preflight import fd_need

    assert fd_need(128, 2, 100, per_tensor=False) == 64 + 128 * 6


def test_the_what_if_at_the_measured_cpus_gives_back_the_measured_rows_and_more_cpus_never_less():
    # The model alone is off by a few percent here (its corner is soft); anchored to the rows,
    # the what-if with the machine's own CPUs reproduces them, and with more CPUs never predicts
    # less than was measured on fewer.
    from loaderbench.analysis.predict import what_if_cpus

    measure, _ = pipeline(5.0, 2.0, cpus=4, cpu_per_sample_s=0.001)
    rows = [measure(settings(w) if w else settings(0), 0) for w in (0, 1, 2, 4, 8)]
    measured = {r.settings.num_workers: r.summary.samples_per_s for r in rows}
    same = dict(what_if_cpus(rows, settings(1), 4, 0.05, max_workers=16, measured_cpus=4).curve)
    for w, rate in measured.items():
        assert same[w] == pytest.approx(rate, rel=1e-9)
    more = dict(what_if_cpus(rows, settings(1), 16, 0.05, max_workers=16, measured_cpus=4).curve)
    assert all(more[w] >= 0.999 * rate for w, rate in measured.items())


def two_ranks(build_ms_per_sample: float, step_ms: float, cpu_per_sample_s: float, *, bs: int = 16,
              cpus_per_rank: int = 16):
    """The same pipeline run by two ranks at once (a distributed sweep): each rank's own trial
    as `pipeline` measures it on its share of the CPUs, merged as the distributed sweep merges
    them (samples/s, CPU, loader ceiling and compute ceiling summed over ranks)."""
    from loaderbench.orchestration.distributed import merge_trials

    one, _ = pipeline(build_ms_per_sample, step_ms, bs=bs, cpus=cpus_per_rank, cpu_per_sample_s=cpu_per_sample_s)
    calls: list[LoaderSettings] = []
    results: dict[LoaderSettings, ConfigResult] = {}

    def measure(s: LoaderSettings, repeat: int) -> ConfigResult:
        calls.append(s)
        rank = one(s, repeat)
        t = rank.trials[-1]
        res = results.setdefault(s, ConfigResult(settings=s, status="ok"))
        res.trials.append(merge_trials([t, replace(t)]))
        summarize_config(res)
        res.summary.compute_ceiling_samples_per_s = 2 * rank.summary.compute_ceiling_samples_per_s
        return res

    return measure, calls


def test_a_distributed_search_models_the_whole_job_on_the_jobs_cpus():
    # Per rank: 1 ms per sample per worker (r = 1,000/s), a 4 ms step of 16 (C = 4,000/s), and
    # 3 ms of CPU per sample: one rank's 16 CPUs feed at most 16 / 0.003 = 5,333/s, so per rank
    # the loader binds until 4 workers (4 x 1,000 = C). Summed over two ranks every row doubles
    # (CPU too); the model must predict the job's rows on the job's 32 CPUs (a model on one
    # rank's 16 would cap the job at 5,333/s, a third low).
    cells = grid(range(0, 17))
    measure, calls = two_ranks(1.0, 4.0, 0.003)
    search = Search(cells, measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=16, ranks=2,
                    cuda=False, dense_workers=False, clock=FakeClock())
    knee = find_knee(search.run(), tolerance=0.05)
    assert knee.settings.num_workers == 4
    assert knee.summary.samples_per_s == pytest.approx(2 * 4000, rel=0.01)
    errors = [abs(e["error"]) for e in search.log.to_dict()["predicted_before_measured"]]
    assert errors and max(errors) < 0.10  # a per-rank model would be 50% low
    preds = {p.settings.num_workers: p.samples_per_s for p in predict(search.measured(), cells, 32)}
    assert preds[2] == pytest.approx(2 * 2 * 1000, rel=0.1)
    # Each rank's main process receives its own batches: 16 samples per 0.2 ms, twice.
    from loaderbench.analysis.predict import fit
    assert fit(search.measured(), series_of(settings(4)), 32).main == pytest.approx(2 * 16 / 0.0002)


def test_the_worker_counts_of_the_zero_worker_series_never_loop():
    # 0 workers measured loader-bound with CPUs to spare (a sleep-bound loader): asking for the
    # counts of the series the 0-worker config normalises to must return, not widen forever.
    cells = grid(range(0, 5))
    measure, _ = pipeline(2.0, 12.0, cpus=16)
    search = Search(cells, measure=measure, tolerance=0.05, repeats=1, budget_s=600, usable_cpus=16,
                    cuda=False, dense_workers=True, clock=FakeClock())
    zero = measure(settings(0), 0)
    search.results[zero.settings] = zero
    assert zero.summary.verdict == "loader-bound"
    assert search.workers_of(zero.settings) == [0]
    knee = find_knee(search.run(), tolerance=0.05)
    assert knee.settings.num_workers == 3  # 32 ms per batch per worker over a 12 ms step


def test_a_trial_whose_step_slowed_is_repeated_before_it_decides_the_ranking():
    # 32 ms per batch per worker, a 12 ms step (1,333 samples/s): the knee is 3 workers. The first
    # trial of 4 workers ran its step 25% slower beside the loader (15 ms: 1,067 samples/s, 20%
    # below): more workers than the knee, so the model does not dispute it, and too far below the
    # best to compete. At its step's own pace it would reach the best: it is repeated up to
    # --repeats, and its median then reads what its other trials do.
    cells = grid(range(0, 9))
    measure, calls = pipeline(2.0, 12.0, slowed={(4, 0): 1.25})
    search = Search(cells, measure=measure, tolerance=0.05, repeats=3, budget_s=600, usable_cpus=16,
                    cuda=False, dense_workers=False, clock=FakeClock())
    ran = {r.settings.num_workers: r for r in search.run()}
    assert [rep for s, rep in calls if s.num_workers == 4] == [0, 1, 2]
    assert ran[4].summary.samples_per_s == pytest.approx(16 / 0.012) and not ran[4].summary.step_slowed
    assert find_knee(list(ran.values()), tolerance=0.05).settings.num_workers == 3
    # The same trial without the slowed step (it read 20% low for another reason): one trial.
    measure, calls = pipeline(2.0, 12.0, outliers={(4, 0): 0.8})
    Search(cells, measure=measure, tolerance=0.05, repeats=3, budget_s=600, usable_cpus=16, cuda=False,
           dense_workers=False, clock=FakeClock()).run()
    assert [rep for s, rep in calls if s.num_workers == 4] == [0]


def test_the_search_does_not_widen_past_the_cpus_for_workers_that_get_no_work():
    # 2 workers on 2 CPUs, loader-bound with the CPUs barely used (0.4 cores): widened past the
    # CPUs, unless one of the two workers delivered no batch (the dataset gives work to 1).
    t = trial(0.020, 0.010)
    t.worker_batches, t.cpu_util_pct = [20, 0], 40.0
    starved = ConfigResult(settings=settings(2), status="ok", trials=[t])
    summarize_config(starved)
    search = Search([settings(0), settings(1), settings(2)], measure=lambda s, i: starved, tolerance=0.05,
                    repeats=1, budget_s=60, usable_cpus=2, cuda=False, dense_workers=True)
    search.results[settings(2)] = starved
    assert starved.summary.verdict is Verdict.LOADER_BOUND
    assert search._starved_at(settings(2), 2) is False
    starved.summary.idle_workers = 0
    assert search._starved_at(settings(2), 2) is True
