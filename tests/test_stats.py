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


