"""The one timing engine (measure/timing.py): its split of recorded instants and its warm-up, with
hand-computed answers on a fake clock."""

from __future__ import annotations

import pytest

from loaderbench.measure.loop import timed_loop
from loaderbench.measure.timing import HostMarker, StepInstants, WarmUp, split_steps, warmup_for
from loaderbench.model import LoaderSettings
from tests.helpers import FakeClock


def test_split_steps_has_hand_computed_answers():
    # Instants (s): 0 prev, 0.5 t0 (the loop's own work after step_end), 2.0 ready, 2.5 end; then
    # a step whose t0 is its prev (the implicit boundary): 2.5 -> ready 2.6 -> end 3.5.
    times = [0.0, 0.5, 2.0, 2.5, 2.6, 3.5]
    split = split_steps(times, [StepInstants(0, 1, 2, 3), StepInstants(3, 3, 4, 5)])
    assert split.data_wait_s == pytest.approx([1.5, 0.1])
    assert split.compute_s == pytest.approx([1.0, 0.9])  # 0.5 + 0.5 of the loop's own work, then 0.9
    assert split.step_s == pytest.approx([2.5, 1.0])


def test_the_sweeps_window_starts_after_its_meter_started():
    # The meter takes 0.12 s to start: in no step of the window (as in the watch).
    clock = FakeClock()

    def serial():
        for _ in range(20):
            clock.advance(0.030)
            yield [0] * 4

    t = timed_loop(serial(), lambda b: clock.advance(0.010), count=len, marker=HostMarker(clock=clock), clock=clock,
                   warmup_batches=2, min_batches=5, min_time_s=0.0, max_batches=5,
                   on_window_start=lambda: clock.advance(0.120))
    assert t.data_wait_s == pytest.approx([0.030] * 5)
    assert t.step_s == pytest.approx([0.040] * 5)
    assert t.warmup_s == pytest.approx(0.010 + 2 * 0.040)


def test_the_warmup_judges_a_block_against_the_warmups_own_periods():
    # 2 workers x prefetch 2: at least 4 batches dropped. The first batch came after a 2 s
    # start-up; the warm-up's next() calls then come every 10 ms. A 5 ms wait at the 4th is a
    # block (at least a tenth of the 10 ms period): the start-up is no period of the warm-up,
    # or it would have raised the bar to 0.2 s.
    warmup = WarmUp.for_loader(LoaderSettings(2, False, False, 2, False, 16), 3)
    assert (warmup.least, warmup.most) == warmup_for(LoaderSettings(2, False, False, 2, False, 16), 3) == (4, 32)
    assert [warmup.over(seen, 2.0 + 0.01 * seen, 0.0001) for seen in (1, 2, 3)] == [False, False, False]
    assert warmup.periods == pytest.approx([0.01, 0.01])
    assert warmup.over(4, 2.04, 0.005)
