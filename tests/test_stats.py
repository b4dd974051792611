"""Summaries, verdicts and the knee on hand-made trials with analytic answers."""

from __future__ import annotations

import pytest

from loaderbench import stats
from tests.helpers import result, settings, trial


def pipelined(nw: int, build_s: float, step_s: float, floor_s: float = 0.0005):
    """Steady-state wait for `nw` workers each building a batch in `build_s`, `step_s` compute:
    one batch per build_s/nw; wait = max(floor, build_s/nw - step_s); nw=0: serial build."""
    if nw == 0:
        return trial(build_s, step_s)
    return trial(max(floor_s, build_s / nw - step_s), step_s)


def test_percentile_matches_numpy_linear():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert stats.percentile(xs, 50) == 3.0
    assert stats.percentile(xs, 95) == pytest.approx(4.8)
    assert stats.percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError):
        stats.percentile([], 50)


def test_summary_of_the_issue_ground_truth():
    # io 2 ms x 16 samples = 32 ms per batch, 12 ms step: 0 workers -> 44 ms steps.
    s = stats.summarize([pipelined(0, 0.032, 0.012)])
    assert s.samples_per_s == pytest.approx(16 / 0.044)  # ~364
    assert s.stall_fraction == pytest.approx(0.032 / 0.044)  # ~0.73
    assert s.verdict == "loader-bound"
    s4 = stats.summarize([pipelined(4, 0.032, 0.012)])
    assert s4.samples_per_s == pytest.approx(16 / 0.0125, rel=0.01)  # ~1280-1333
    assert s4.verdict == "compute-bound"


@pytest.mark.parametrize(
    "build_s, step_s, expected",
    [
        (0.032, 0.012, 4),  # 32/12 = 2.7 -> 3 not in grid -> 4
        (0.100, 0.050, 2),  # exactly 2 workers keep up
        (0.160, 0.005, 32),  # case C04: 160 ms per batch, 5 ms step -> 32 workers
        (0.010, 0.050, 1),  # fast loader: one worker already hides it
    ],
)
def test_knee_is_the_analytic_worker_count(build_s, step_s, expected):
    grid = [0, 1, 2, 4, 8, 16, 32, 40]
    results = [result(settings(nw), pipelined(nw, build_s, step_s)) for nw in grid]
    knee = stats.find_knee(results)
    assert knee is not None and knee.settings.num_workers == expected


def test_knee_prefers_cheaper_settings_at_equal_throughput():
    rs = [
        result(settings(4, pin=True, pf=True), trial(0.0005, 0.012)),
        result(settings(4), trial(0.0006, 0.012)),
        result(settings(4, pin=True), trial(0.0005, 0.012)),
    ]
    knee = stats.find_knee(rs)
    assert knee is not None and not knee.settings.pin_memory and not knee.settings.prefetch


def test_knee_uses_noise_when_repeats_show_it():
    # best: 3 repeats spread 1000..1300 samples/s; a cheaper config at 900..1050 overlaps it.
    best = result(settings(8), *(trial(0, 16 / r) for r in (1000.0, 1150.0, 1300.0)))
    cheap = result(settings(2), *(trial(0, 16 / r) for r in (900.0, 950.0, 1050.0)))
    assert stats.find_knee([best, cheap], tolerance=0.05) is cheap
    # Without repeats the same medians (950 vs 1150) are 17% apart: the best wins.
    best1 = result(settings(8), trial(0, 16 / 1150.0))
    cheap1 = result(settings(2), trial(0, 16 / 950.0))
    assert stats.find_knee([best1, cheap1], tolerance=0.05) is best1


def test_failed_configs_are_never_the_knee():
    rs = [result(settings(0), status="failed", error="boom"), result(settings(2), trial(0.01, 0.01))]
    assert stats.find_knee(rs).settings.num_workers == 2
    assert stats.find_knee([rs[0]]) is None
    rec = stats.recommend([rs[0]])
    assert rec.settings is None and "no config" in rec.reason


def test_input_bound_bands():
    assert stats.input_bound_band(0.049) == "not input-bound"
    assert stats.input_bound_band(0.05) == "moderately input-bound"
    assert stats.input_bound_band(0.20) == "moderately input-bound"
    assert stats.input_bound_band(0.21) == "highly input-bound"


def test_tail_stalls_count_as_loader_bound_with_zero_median_wait():
    # Case C04: every 10th batch waits 100 ms, the others 0, 5 ms step.
    waits = ([0.0] * 9 + [0.1]) * 4
    s = stats.summarize([trial(0, 0.005, waits=waits)])
    assert s.data_wait_p50_s == 0.0
    assert s.verdict.startswith("loader-bound")


def test_recommendation_says_when_nothing_clears_the_bottleneck():
    rs = [result(settings(nw), pipelined(nw, 0.4, 0.01)) for nw in (0, 1, 2)]
    for r in rs:
        r.summary.cpu_util_pct = 195.0
    rec = stats.recommend(rs, usable_cpus=2)
    assert rec.settings.num_workers == 2
    assert "no setting in this grid clears the loader bottleneck" in rec.reason
    assert "CPU" in rec.reason and "2 usable CPUs" in rec.reason
    assert rec.dataloader_call == (
        "DataLoader(dataset, batch_size=16, num_workers=2, pin_memory=False, "
        "prefetch_factor=2, persistent_workers=False)"
    )


def test_summary_medians_over_repeats():
    t = [trial(0, 16 / r) for r in (100.0, 300.0, 200.0)]
    s = stats.summarize(t)
    assert s.samples_per_s == pytest.approx(200.0)
    assert (s.samples_per_s_min, s.samples_per_s_max) == pytest.approx((100.0, 300.0))
    assert stats.relative_spread(s) == pytest.approx(1.0)


def with_receive(r, receive_s):
    r.trials[0].receive_s = [receive_s] * 4
    r.summary = stats.summarize(r.trials)
    return r


def test_a_stall_made_of_the_measured_receive_floor_is_not_loader_bound():
    # Measured on this 2-core machine: 4 and 8 workers wait ~1.5 ms per batch before a 12 ms
    # step (stall 11%), and receiving an already-built batch costs ~1.4 ms: not a late loader.
    rs = [
        result(settings(0), trial(0.032, 0.012)),
        with_receive(result(settings(2), trial(0.006, 0.012)), 0.0014),
        with_receive(result(settings(4), trial(0.0016, 0.012)), 0.0014),
        with_receive(result(settings(8), trial(0.0015, 0.012)), 0.0014),
    ]
    rec = stats.recommend(rs)
    assert rec.settings.num_workers == 4
    assert [r.summary.verdict for r in rs] == [
        "loader-bound", "loader-bound", stats.RECEIVE_FLOOR, stats.RECEIVE_FLOOR]
    assert "taking a batch that was already built costs 1.4 ms" in rec.reason
    assert "(1.6%" not in rec.reason and "1.6 ms median wait" in rec.reason
    assert "no setting in this grid clears" not in rec.reason


def test_a_long_wait_with_a_small_receive_floor_stays_loader_bound():
    # Decode-bound on 2 CPUs: 28 ms of waiting per 100 ms step, of which 1.5 ms is receiving.
    r = with_receive(result(settings(2), trial(0.028, 0.100)), 0.0015)
    assert stats.excess_stall_fraction(r.summary) == pytest.approx((0.028 - 0.0015) / 0.128)
    assert r.summary.verdict == "loader-bound"


def test_best_config_at_the_grid_edge_suggests_more_workers():
    rs = [result(settings(2), trial(0.006, 0.012)), result(settings(8), trial(0.003, 0.012))]
    rec = stats.recommend(rs)
    assert "try more workers" in rec.reason


def test_prefetch_without_pinning_names_the_pageable_copy():
    # Measured on the H200: 14 workers, prefetch on, pin off: 7.4 ms of each 62 ms step is the
    # prefetcher's next() doing a pageable 38 MB copy (receive probe 7.2 ms).
    r = with_receive(result(settings(14, pf=True, bs=256), trial(0.0074, 0.055)), 0.0072)
    assert stats.classify(r) == stats.PAGEABLE_H2D
    r2 = with_receive(result(settings(14, pin=True, pf=True, bs=256), trial(0.0074, 0.055)), 0.0072)
    assert stats.classify(r2) == stats.RECEIVE_FLOOR
    assert stats.classify(r, loader_only=True) == stats.LOADER_ALONE


def test_sawtooth_stalls_are_periodic_and_predict_the_workers_needed():
    # Case C04: 160 ms to build a batch of 32, 5 ms step, 10 workers: 10 batches arrive together,
    # then the loop waits for the next round: (160 - 10 x 5) = 110 ms every 10th batch.
    waits = ([0.110] + [0.0] * 9) * 6
    r = result(settings(10, bs=32), trial(0, 0.005, waits=waits, bs=32))
    assert stats.stall_period(r.trials[0].data_wait_s, r.trials[0].step_s) == 10
    assert r.summary.data_wait_p50_s == 0.0
    # The tail: 6 spikes in 60 batches. p90 interpolates at position 0.9 x 59 = 53.1, between the
    # last zero (53) and the first spike (54): 0.1 x 110 ms; p99 and max are the spike.
    assert r.summary.data_wait_p90_s == pytest.approx(0.011)
    assert r.summary.data_wait_p99_s == pytest.approx(0.110)
    assert r.summary.data_wait_max_s == pytest.approx(0.110)
    from loaderbench.model import ResultSet

    rs = ResultSet(config={}, environment={}, results=[r])
    stats.analyze(rs)
    assert r.summary.verdict == "loader-bound (stall every 10 batches)"
    assert r.summary.workers_needed == 32  # 10 x 16 ms mean step / 5 ms = 32, as C04 predicts


def test_no_period_in_steady_or_random_waits():
    assert stats.stall_period([0.001] * 50, [0.01] * 50) is None
    import random

    rng = random.Random(1)
    waits = [0.02 if rng.random() < 0.2 else 0.0 for _ in range(80)]  # stalls at random
    assert stats.stall_period(waits, [0.01] * 80) is None
    # A round of 4 with a second, smaller stall right after the first (seen on 2 cores).
    assert stats.stall_period(([0.025, 0.006, 0.0, 0.0]) * 20, [0.004] * 80) == 4


def test_short_epochs_weigh_worker_startup_and_recommend_persistent_workers():
    # Case C01: 16 spawned workers take 3 s to deliver the first batch; 0 workers start at once but
    # stall. Steady state favours workers; with epochs of 20 batches, start-up dominates.
    r0 = result(settings(0), trial(0.030, 0.010, first_s=0.05))   # 16/0.040 = 400 samples/s
    r4 = result(settings(4), trial(0.0005, 0.010, first_s=3.0))   # ~1524 samples/s steady
    steady = stats.recommend([r0, r4])
    assert steady.settings.num_workers == 4 and steady.settings.persistent_workers is False
    short = stats.recommend([r0, r4], epoch_batches=20)
    assert short.settings.num_workers == 4 and short.settings.persistent_workers is True
    assert "persistent_workers=True" in short.dataloader_call
    assert "Start-up (first batch 3.00 s)" in short.reason
    # per epoch: w0 = 320 / (0.05 + 0.8) = 376/s; w4 = 320 / (3.0 + 0.21) = 100/s
    assert stats.epoch_samples_per_s(r0, 20) == pytest.approx(320 / 0.85)
    # With persistent workers the knee pays start-up once, so 0 workers is not faster per epoch.
    assert "faster per epoch" not in short.reason
    # Long epochs: start-up is noise, nothing changes.
    long = stats.recommend([r0, r4], epoch_batches=100_000)
    assert long.settings.persistent_workers is False and "per epoch" not in long.reason


def test_a_step_slowed_by_cpu_contention_names_the_cpu():
    # Measured on an H200 host with 16 CPUs: 16 workers keep the step fed (stall 4%) but the
    # process tree uses all 16 CPUs and the step takes 60.8 ms instead of 54.5 ms alone.
    r = result(settings(16, pin=True, bs=256), trial(0.0027, 0.0608, bs=256))
    r.summary.cpu_util_pct = 1600.0
    rec = stats.recommend([r], usable_cpus=16, ceilings={256: 256 / 0.0545})
    assert "60.8 ms per batch on average (median 60.8 ms) vs 54.5 ms alone" in rec.reason
    assert "16.0 of 16 usable CPUs" in rec.reason and "binding resource is the CPU" in rec.reason
    fed = result(settings(14, pin=True, bs=256), trial(0.0007, 0.0546, bs=256))
    rec2 = stats.recommend([fed], usable_cpus=16, ceilings={256: 256 / 0.0545})
    assert "Past the knee the step itself binds: the knee runs at 99%" in rec2.reason


def test_load_results_frame_has_one_row_per_trial_with_the_wait_tail():
    from loaderbench.model import ResultSet
    from loaderbench.results import to_frame

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


def test_a_grid_that_ends_while_the_loader_binds_does_not_say_more_workers_buy_nothing():
    # Ctrl-C after 0 and 1 workers of a loader needing ~30: 429 vs 435 samples/s, stall 97%.
    from loaderbench.model import ResultSet

    rs = ResultSet(config={}, environment={}, results=[
        result(settings(0), trial(0.0363, 0.001)),   # 16 / 37.3 ms = 429 samples/s
        result(settings(1), trial(0.0358, 0.001)),   # 16 / 36.8 ms = 435 samples/s
    ])
    stats.analyze(rs)
    reason = rs.recommendation.reason
    assert rs.recommendation.settings.num_workers == 0  # within 5% of the best
    assert "the workers and buffers of this grid buy nothing more, but the loader still binds." in reason
    assert "more workers or buffers buy nothing." not in reason
    assert "The fastest config has the most workers of those measured: try more workers." in reason
