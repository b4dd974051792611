"""The one timing engine (measure/timing.py) and the one Trial assembly (measure/assembly.py): the
sweep's timed loop and `loaderbench.watch` fed the same instants on a fake clock build the same
`Trial`, field by field; the engine's split and warm-up with hand-computed answers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import loaderbench
from loaderbench.machine.gpu import GpuUtilReading
from loaderbench.measure.assembly import assemble_trial
from loaderbench.measure.loop import timed_loop
from loaderbench.measure.meter import WindowReading
from loaderbench.measure.timing import HostMarker, StepInstants, WarmUp, split_steps, warmup_for
from loaderbench.model import LoaderSettings
from loaderbench.workload.batch import inspect_batch
from tests.helpers import FakeClock

# Per batch of an epoch: seconds to load it, seconds of its step (both on the fake clock).
LOAD_S = [0.030, 0.010, 0.050, 0.020, 0.040, 0.000, 0.060, 0.015, 0.025, 0.035, 0.005, 0.045]
STEP_S = [0.012, 0.020, 0.008, 0.016, 0.010, 0.030, 0.006, 0.014, 0.018, 0.022, 0.004, 0.026]
START_S = 0.25  # starting an epoch (its workers)
BATCH = 8
WARMUP = 2
EPOCHS = 2
MEASURED = EPOCHS * len(LOAD_S) - 1 - WARMUP  # the first batch and the warm-up are not measured


class Epochs:
    """An iterable of epochs of len(LOAD_S) batches of BATCH samples on `clock`: starting one
    costs START_S, batch i LOAD_S[i]."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def __iter__(self):
        self.clock.advance(START_S)
        for i, load in enumerate(LOAD_S):
            self.clock.advance(load)
            yield torch.full((BATCH, 3), float(i))


class FakeMeter:
    """Stands for measure.meter.WindowMeter: one fixed reading of the window."""

    reading = WindowReading(
        wall_s=0.9, cpu_s=0.45, main_cpu_s=0.3, processes=1, memory_uss_bytes=1_000_000,
        memory_pss_bytes=1_200_000, read_bytes=None,
        util=GpuUtilReading(util_pct=40.0, window_s=0.9, sample_period_s=None, n_samples=9, note=""),
    )

    def __init__(self, util_sampler, **kw) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> WindowReading:
        return self.reading


def sweep_trial(clock: FakeClock):
    """The sweep's path: its timed loop over the loader (epochs restart inside `next()`), then
    the Trial assembly, as trial.measure_config calls them."""
    settings = LoaderSettings(0, False, False, None, False, BATCH)
    warmup = WarmUp.for_loader(settings, WARMUP)
    first: list = []
    step_s = iter(STEP_S * EPOCHS)

    def count(batch) -> int:
        if not first:
            first.append(inspect_batch(batch))
        return batch.shape[0]

    loop = timed_loop(
        Epochs(clock), lambda b: clock.advance(next(step_s)), count=count, marker=HostMarker(clock=clock),
        clock=clock, warmup_batches=warmup.least, max_warmup_batches=warmup.most, full_queue=warmup.full_queue,
        early_warmup=warmup.early, min_batches=MEASURED, max_batches=MEASURED, min_time_s=0.0, restart_epochs=True,
    )
    return assemble_trial(loop, timing="host", reading=FakeMeter.reading, first_batch=first[0], cuda=False,
                          h2d=False, pin_memory=False, torch_threads_main=torch.get_num_threads(),
                          samples_rule="indices")


def watch_trial(clock: FakeClock, monkeypatch):
    """The watch's path: the user's loop over the same loader, two epochs, the same steps."""
    monkeypatch.setattr("loaderbench.measure.meter.WindowMeter", FakeMeter)
    w = loaderbench.watch(Epochs(clock), clock=clock, timing="host", warmup_batches=WARMUP)
    step_s = iter(STEP_S * EPOCHS)
    for _epoch in range(EPOCHS):
        for _batch in w:
            clock.advance(next(step_s))
    return w.trial()


def test_watch_and_sweep_build_the_same_trial_from_the_same_instants(monkeypatch):
    swept = sweep_trial(FakeClock())
    watched = watch_trial(FakeClock(), monkeypatch)
    # Where the two loops differ by design: how samples are counted is each one's own rule, and
    # only the sweep times the warm-up.
    own = {"samples_rule": ("indices", "counted"), "warmup_s": (swept.warmup_s, None)}
    assert (swept.samples_rule, watched.samples_rule) == own["samples_rule"]
    assert watched.warmup_s is None and swept.warmup_s == pytest.approx(STEP_S[0] + sum(
        LOAD_S[i] + STEP_S[i] for i in range(1, 1 + WARMUP)))
    differ = [f.name for f in dataclasses.fields(swept)
              if f.name not in own and getattr(swept, f.name) != getattr(watched, f.name)]
    assert differ == [], {k: (getattr(swept, k), getattr(watched, k)) for k in differ}
    # ... and that common Trial holds the hand-computed answers: the window is batches 3..11 of
    # the first epoch and all 12 of the second, whose first waits for the epoch's start.
    loads = LOAD_S[1 + WARMUP:] + LOAD_S
    steps = STEP_S[1 + WARMUP:] + STEP_S
    assert len(swept.step_s) == MEASURED == 21 and swept.warmup_batches == WARMUP
    assert swept.epoch_start_batches == [len(LOAD_S) - 1 - WARMUP] == [9]
    assert swept.data_wait_s == pytest.approx([*loads[:9], START_S + LOAD_S[0], *loads[10:]])
    assert swept.epoch_gap_s == pytest.approx([START_S + LOAD_S[0]])
    assert swept.compute_s == pytest.approx(steps)
    assert sum(swept.step_s) == pytest.approx(sum(loads) + START_S + sum(steps))
    assert swept.first_batch_s == pytest.approx(START_S + LOAD_S[0])
    assert swept.samples == MEASURED * BATCH and swept.wall_s == 0.9
    assert swept.cpu_util_pct == pytest.approx(50.0) and swept.main_cpu_util_pct == pytest.approx(100 / 3)
    assert swept.gpu_util_pct == 40.0 and swept.batch_bytes == BATCH * 3 * 4


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


def test_a_gpu_decode_in_the_main_thread_is_timed_per_batch_and_left_out_of_the_receive():
    # Each next() hands out a batch already built (1 ms to receive) and decodes the next one on
    # the GPU for 68 ms, as the prefetcher does with --decoder nvjpeg; prepare decodes nothing
    # more. The 69 ms wait: 68 ms GPU decode, 1 ms receive.
    clock = FakeClock()
    spent = [0.0]

    def prefetched():
        for _ in range(30):
            clock.advance(0.001)
            spent[0] += 0.068
            clock.advance(0.068)
            yield [0] * 4

    t = timed_loop(prefetched(), lambda b: clock.advance(0.055), count=len, marker=HostMarker(clock=clock),
                   clock=clock, warmup_batches=2, min_batches=6, min_time_s=0.0, max_batches=6,
                   decode_time=lambda: spent[0], ready_count=lambda: 1)
    assert t.gpu_decode_s == pytest.approx([0.068] * 6)
    assert t.data_wait_s == pytest.approx([0.069] * 6)
    assert t.receive_s and t.receive_s == pytest.approx([0.001] * len(t.receive_s))


def test_a_wait_made_of_the_gpu_decode_is_gpu_decode_bound():
    from loaderbench.analysis import summarize_config
    from loaderbench.analysis.wait import trial_wait_parts
    from loaderbench.model import Verdict, WaitPart
    from tests.helpers import result, settings, trial

    # 69 ms of wait per batch: 68 ms decoding on the GPU in the main process, 1 ms receiving.
    t = trial(0.069, 0.055, n=10)
    t.gpu_decode_s = [0.068] * 10
    t.receive_s = [0.001] * 4
    parts = trial_wait_parts(t, settings(1))
    assert parts[WaitPart.GPU_DECODE] == pytest.approx(0.68) and parts[WaitPart.RECEIVE] == pytest.approx(0.01)
    assert parts[WaitPart.LOADER] == pytest.approx(0.0, abs=1e-9)
    r = result(settings(1), t)
    summarize_config(r)
    assert r.summary.verdict is Verdict.GPU_DECODE_BOUND


def test_a_worker_waiting_for_room_while_the_loop_starts_up_is_no_build():
    from loaderbench.measure.timing import production_rate

    # One worker builds a 256-sample batch every 60 ms; the main thread's first steps take 1 s
    # (a library's start-up), so its queue is full and it waits 1 s once: its rate is
    # 256 / 0.060, not dragged down by the wait.
    done = [0.0, 0.06, 0.12, 1.12] + [1.12 + 0.06 * k for k in range(1, 11)]
    assert production_rate([(0, t, 256) for t in done]) == pytest.approx(256 / 0.060)
    # Two workers, one of them steady at 100 ms, the other with builds of 100 and 300 ms: all kept.
    steady = [(0, 0.1 * k, 16) for k in range(6)]
    uneven = [(1, t, 16) for t in (0.0, 0.1, 0.4, 0.5, 0.8)]
    assert production_rate(steady + uneven) == pytest.approx(16 / 0.1 + 4 * 16 / 0.8)


def _rounds_loop(clock: FakeClock, round_batches: int, *, min_time_s: float, max_batches: int = 1000):
    """4 workers in turn: each round's first batch waits 0.29 s, the other 3 come built; every
    step takes 0.01 s, so a round is 0.33 s and the long-run rate 4 / 0.33 batches/s. The warm-up
    drops a whole round (the first batch and 3 more): the window starts at a round's start."""

    def rounds():
        for k in range(400):
            if k % 4 == 0:
                clock.advance(0.29)
            yield [0] * 8

    return timed_loop(rounds(), lambda b: clock.advance(0.01), count=len, marker=HostMarker(clock=clock),
                      clock=clock, warmup_batches=3, max_warmup_batches=3, min_batches=5,
                      min_time_s=min_time_s, max_batches=max_batches, round_batches=round_batches)


def test_a_window_ends_on_a_whole_round_when_its_end_is_near():
    # 2 s: rounds end at 0.33 x 6 = 1.98 s; the first step past 2 s is the 7th round's wait,
    # ending at 2.28 s after 25 batches. Ended there, the window reads 25 / 2.28 = 10.96
    # batches/s, 9.5% under the long run: it paid for the wait and left out the round's 3 quick
    # batches. The round's end is 3 batches away, 3 x 2.28 / 25 = 0.27 s at the window's mean
    # step, within a quarter of the minimum time (0.5 s): the window takes them and reads the
    # long run's 12.12 exactly.
    first_past = _rounds_loop(FakeClock(), 1, min_time_s=2.0)
    assert len(first_past.step_s) == 25 and sum(first_past.step_s) == pytest.approx(2.28)
    whole = _rounds_loop(FakeClock(), 4, min_time_s=2.0)
    assert len(whole.step_s) == 28 and sum(whole.step_s) == pytest.approx(2.31)
    assert len(whole.step_s) / sum(whole.step_s) == pytest.approx(4 / 0.33)
    # 1 s: the first step past it ends at 1.29 s after 13 batches; the 3 left to the round's end
    # would take 3 x 1.29 / 13 = 0.298 s at the mean step, more than a quarter of 1 s: the
    # window ends where it is. And --max-batches short of the round's end ends the window there.
    assert len(_rounds_loop(FakeClock(), 4, min_time_s=1.0).step_s) == 13
    assert len(_rounds_loop(FakeClock(), 4, min_time_s=2.0, max_batches=26).step_s) == 26


def test_a_window_of_steady_steps_ends_on_whole_rounds_only_within_the_slack():
    # Steps of 0.125 s and no wait: the first step past 1 s is the 8th. A round of 3 is 1 batch
    # away (0.125 s <= 0.25 s), of 5 two (0.25 s: at the limit), of 6 four (0.5 s): too far.
    clock = FakeClock()

    def ends_at(round_batches: int) -> int:
        def steady():
            while True:
                yield [0] * 8

        t = timed_loop(steady(), lambda b: clock.advance(0.125), count=len, marker=HostMarker(clock=clock),
                       clock=clock, warmup_batches=1, max_warmup_batches=1, min_batches=5, min_time_s=1.0,
                       max_batches=1000, round_batches=round_batches)
        return len(t.step_s)

    assert [ends_at(r) for r in (1, 3, 5, 6)] == [8, 9, 10, 8]
