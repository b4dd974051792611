"""loaderbench.watch: the sweep's timing model inside a training loop, with a fake clock so every
figure has a hand-computed answer; bad use; the saved file read by show/compare/plot."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from typer.testing import CliRunner

import loaderbench
from loaderbench.cli import app
from loaderbench.inloop.watcher import WatchError, count_samples, read_settings
from loaderbench.model import CeilingMethod
from loaderbench.results import read_results
from tests.helpers import FakeClock

runner = CliRunner()


class TimedLoader:
    """An iterable of `n` batches of `batch` samples: starting an epoch costs `start_s`, each
    batch `load_s` (on the fake clock)."""

    def __init__(self, clock: FakeClock, n: int, load_s: float, batch: int = 8, start_s: float = 0.0):
        self.clock, self.n, self.load_s, self.batch, self.start_s = clock, n, load_s, batch, start_s

    def __iter__(self):
        self.clock.advance(self.start_s)
        for i in range(self.n):
            self.clock.advance(self.load_s)
            yield torch.full((self.batch, 3), float(i))


def watched(clock, loader, **kw):
    kw.setdefault("warmup_batches", 2)
    return loaderbench.watch(loader, clock=clock, measure_resources=False, timing="host", **kw)


def test_stall_fraction_and_samples_per_s_have_hand_computed_answers():
    clock = FakeClock()
    w = watched(clock, TimedLoader(clock, 20, load_s=0.030))
    for _batch in w:
        clock.advance(0.010)  # the step
    t = w.result().results[0].trials[0]
    s = w.result().results[0].summary
    # batch 0 is the start-up, batches 1-2 the warm-up: 17 measured steps of 30 ms wait + 10 ms step
    assert len(t.step_s) == 17 and t.warmup_batches == 2
    assert t.samples == 17 * 8
    assert s.stall_fraction == pytest.approx(0.75)
    assert s.samples_per_s == pytest.approx(8 / 0.040)
    assert s.data_wait_p50_s == pytest.approx(0.030)
    assert s.compute_p50_s == pytest.approx(0.010)
    assert t.first_batch_s == pytest.approx(0.030)
    assert s.verdict == "loader-bound"


@pytest.mark.parametrize("with_step_end", [False, True])
def test_the_meter_starting_is_in_no_step(monkeypatch, with_step_end):
    # The window's CPU/memory/NVML meter takes ~0.1 s to start the first time in a process; it
    # starts when the window begins, and that time must not land in the first measured step.
    from loaderbench.inloop.watcher import Watch

    clock = FakeClock()
    monkeypatch.setattr(Watch, "_start_meter", lambda self: (clock.advance(0.120), setattr(self, "_meter", False)))
    w = loaderbench.watch(TimedLoader(clock, 20, load_s=0.030), clock=clock, timing="host", warmup_batches=2)
    for _batch in w:
        clock.advance(0.010)
        if with_step_end:
            w.step_end()
    t = w.result().results[0].trials[0]
    assert t.data_wait_s == pytest.approx([0.030] * 17)
    assert t.step_s == pytest.approx([0.040] * 17)


def test_step_end_keeps_the_loops_own_work_out_of_data_wait():
    clock = FakeClock()
    w = watched(clock, TimedLoader(clock, 12, load_s=0.020))
    for _batch in w:
        clock.advance(0.010)
        w.step_end()
        clock.advance(0.005)  # logging after the step: not data-wait
    s = w.result().results[0].summary
    assert s.data_wait_p50_s == pytest.approx(0.020)
    assert s.stall_fraction == pytest.approx(0.020 / 0.035)
    assert s.samples_per_s == pytest.approx(8 / 0.035)


def test_epochs_gaps_are_marked_and_time_between_epochs_is_in_no_step():
    clock = FakeClock()
    w = watched(clock, TimedLoader(clock, 10, load_s=0.010, start_s=0.5), warmup_batches=1)
    for _epoch in range(2):
        for _batch in w:
            clock.advance(0.010)
        clock.advance(5.0)  # validation between epochs
    t = w.result().results[0].trials[0]
    # epoch 1: start-up + 1 warm-up, 8 measured; epoch 2: 10 measured, the first an epoch start
    assert len(t.step_s) == 18
    assert t.epoch_start_batches == [8]
    assert t.epoch_gap_s == [pytest.approx(0.51)]
    assert t.data_wait_s[8] == pytest.approx(0.51)
    assert sum(t.step_s) == pytest.approx(17 * 0.020 + 0.52)
    assert t.first_batch_s == pytest.approx(0.51)


def test_a_loop_that_breaks_counts_only_complete_steps():
    clock = FakeClock()
    w = watched(clock, TimedLoader(clock, 30, load_s=0.010))
    for i, _batch in enumerate(w):
        if i == 10:
            break  # batch 10 taken, its step never ran
        clock.advance(0.010)
    t = w.result().results[0].trials[0]
    assert len(t.step_s) == 7  # batches 3..9
    assert t.samples == 7 * 8
    assert sum(t.step_s) == pytest.approx(7 * 0.020)


def test_result_twice_gives_the_same_figures_and_more_steps_count_after():
    clock = FakeClock()
    w = watched(clock, TimedLoader(clock, 15, load_s=0.010))
    it = iter(w)
    for _ in range(10):
        next(it)
        clock.advance(0.030)
    a, b = w.result(), w.result()
    assert a.results[0].summary.samples_per_s == b.results[0].summary.samples_per_s == pytest.approx(8 / 0.040)
    assert len(a.results[0].trials[0].step_s) == len(b.results[0].trials[0].step_s) == 6
    for _ in it:
        clock.advance(0.030)
    assert len(w.result().results[0].trials[0].step_s) == 12


def test_max_batches_bounds_the_window():
    clock = FakeClock()
    w = watched(clock, TimedLoader(clock, 40, load_s=0.010), max_batches=5)
    for _batch in w:
        clock.advance(0.010)
    assert len(w.result().results[0].trials[0].step_s) == 5


def test_empty_loader_and_too_short_loader_say_so_instead_of_numbers():
    clock = FakeClock()
    w = watched(clock, [])
    for _batch in w:
        pass
    r = w.result().results[0]
    assert r.status == "failed" and r.summary is None
    assert "yielded no batch" in r.error
    w = watched(clock, TimedLoader(clock, 3, load_s=0.01), warmup_batches=3)
    for _batch in w:
        clock.advance(0.01)
    r = w.result().results[0]
    assert r.status == "failed" and r.summary is None
    assert r.error.startswith("too few batches to measure: 3 batches seen")
    assert "warmup_batches=3" in r.error and "at least 5 batches are needed" in r.error  # first + 3 + 1 step
    w = watched(clock, TimedLoader(clock, 5, load_s=0.01), warmup_batches=3)
    for _batch in w:
        clock.advance(0.01)
    assert w.result().results[0].status == "ok"  # and 5 are enough
    assert "nothing" in loaderbench.watch([]).report() or "no measurement" in w.report()


def test_bad_use_raises_clear_errors():
    with pytest.raises(TypeError, match=r"watch\(loader\): expected a DataLoader or another iterable of batches, got int"):
        loaderbench.watch(3)

    class Items(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return i

    with pytest.raises(TypeError, match="wrap it first"):
        loaderbench.watch(Items())
    w = loaderbench.watch([torch.zeros(2)], measure_resources=False)
    with pytest.raises(WatchError, match=r"step_end\(\) without a batch"):
        w.step_end()
    with pytest.raises(ValueError, match="timing"):
        loaderbench.watch([], timing="gpu")


def test_datasets_are_refused_and_items_without_batching_count_one_each(tmp_path):
    class Items(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.zeros(3, 16, 16), i  # one sample whose first dimension is 3

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(torch.zeros(3) for _ in range(64))

    with pytest.raises(TypeError, match=r"wrap it first: watch\(DataLoader\(stream, batch_size=\.\.\., or batch_size=None"):
        loaderbench.watch(Stream())
    # batch_size=None: the loader hands out items uncollated, each one sample (not 3)
    clock = FakeClock()
    w = watched(clock, DataLoader(Items(), batch_size=None))
    for _item in w:
        clock.advance(0.001)
    r = w.result().results[0]
    t = r.trials[0]
    assert t.samples == len(t.step_s) and r.settings.batch_size == 1
    assert any("batch_size=None: every item" in n.message for n in t.notes)
    w = watched(FakeClock(), DataLoader(Items(), batch_size=None), samples_per_batch=4)
    for _item in w:
        pass
    t = w.result().results[0].trials[0]
    assert t.samples == 4 * len(t.step_s) and not any("batch_size=None" in n.message for n in t.notes)


def test_output_is_checked_first_and_the_file_says_why_nothing_or_little_was_measured(tmp_path):
    with pytest.raises(ValueError, match=r"watch\(output='w.txt'\): the result file is JSON"):
        loaderbench.watch([], output="w.txt")
    with loaderbench.watch([], output=tmp_path / "empty.json", measure_resources=False) as w:
        for _batch in w:
            pass
    assert read_results(tmp_path / "empty.json").results[0].error.startswith("the loader yielded no batch")
    clock = FakeClock()
    with pytest.raises(RuntimeError, match="disk gone"):
        with watched(clock, TimedLoader(clock, 40, load_s=0.01), output=tmp_path / "died.json") as w:
            for i, _batch in enumerate(w):
                clock.advance(0.01)
                if i == 20:
                    raise RuntimeError("disk gone")
    r = read_results(tmp_path / "died.json").results[0]
    assert r.status == "ok" and len(r.trials[0].step_s) == 20 - 1 - 2  # complete steps before it
    assert any("the loop ended with RuntimeError: disk gone" in n.message for n in r.trials[0].notes)
    with pytest.raises(KeyError):
        with watched(clock, TimedLoader(clock, 40, load_s=0.01), output=tmp_path / "early.json") as w:
            for _batch in w:
                raise KeyError("bad label")
    r = read_results(tmp_path / "early.json").results[0]
    assert r.status == "failed" and "the loop ended with KeyError" in r.error


def test_samples_are_counted_in_batches_of_any_structure():
    assert count_samples({"x": torch.zeros(6, 3), "y": torch.zeros(6)}, 8) == 6
    assert count_samples((np.zeros((5, 2)), np.zeros(5)), None) == 5
    images = tuple(torch.zeros(3, 10 + i, 7) for i in range(4))  # 4 variable-size images
    assert count_samples((images, torch.arange(4)), 16) == 4
    assert count_samples([torch.zeros(3, 9), torch.zeros(3, 8)], 3) == 3
    assert count_samples(torch.zeros(16, 3, 4, 4), 16) == 16


def test_samples_per_batch_given_or_counted_from_dict_batches():
    clock = FakeClock()
    batches = [{"input_ids": torch.zeros(4, 7), "label": torch.zeros(4)} for _ in range(10)]
    w = watched(clock, batches)
    for _b in w:
        clock.advance(0.01)
    assert w.result().results[0].trials[0].samples == 7 * 4
    w = watched(clock, batches, samples_per_batch=lambda b: 2 * len(b["label"]))
    for _b in w:
        clock.advance(0.01)
    assert w.result().results[0].trials[0].samples == 7 * 8


class Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((3,), float(i)), i


def test_settings_are_read_from_the_dataloader():
    loader = DataLoader(Squares(), batch_size=16, num_workers=2, pin_memory=False, prefetch_factor=3,
                        persistent_workers=True)
    s, inner = read_settings(loader)
    assert inner is loader
    assert (s.num_workers, s.pin_memory, s.prefetch_factor, s.persistent_workers, s.batch_size) == (2, False, 3, True, 16)
    s, _ = read_settings(DataLoader(Squares(), batch_size=4))
    assert (s.num_workers, s.prefetch_factor, s.persistent_workers) == (0, None, False)
    s, inner = read_settings([1, 2], batch_size=5)
    assert inner is None and s.batch_size == 5


def test_with_block_saves_a_file_that_show_compare_and_plot_read(tmp_path):
    clock = FakeClock()
    out = tmp_path / "watched.json"
    with watched(clock, TimedLoader(clock, 30, load_s=0.030), output=out) as w:
        for _batch in w:
            clock.advance(0.010)
    rs = read_results(out)
    r = rs.results[0]
    assert r.summary.stall_fraction == pytest.approx(0.75)
    assert rs.ceilings[8].method is CeilingMethod.WATCHED
    assert rs.analysis.headroom.max_speedup_from_stall == pytest.approx(4.0)
    assert rs.analysis.more_workers.workers_needed == 3  # 30 ms to build / 10 ms step
    shown = runner.invoke(app, ["show", str(out)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "loader-bound" in shown.output
    assert "Prediction (batch build time over the step's cycle, not a measurement): about 3 workers" in shown.output
    assert "the watched step's compute time" in shown.output
    data = json.loads(runner.invoke(app, ["show", str(out), "--format", "json"]).output)
    assert data["analysis"]["more_workers"]["workers_needed"] == 3
    same = runner.invoke(app, ["compare", str(out), str(out)])
    assert same.exit_code == 0, same.output
    checked = runner.invoke(app, ["check", "--baseline", str(out), "--no-progress"])
    assert checked.exit_code == 2
    assert "recorded by loaderbench.watch in a training loop, which check cannot run again" in checked.output
    assert "Traceback" not in checked.output and len(checked.output.strip().splitlines()) == 1
    png = tmp_path / "w.png"
    plotted = runner.invoke(app, ["plot", str(out), "--output", str(png)])
    assert plotted.exit_code == 0, plotted.output
    assert png.stat().st_size > 0


def test_report_words_the_figures_and_labels_the_prediction():
    clock = FakeClock()
    w = watched(clock, TimedLoader(clock, 20, load_s=0.030))
    for _batch in w:
        clock.advance(0.010)
    text = w.report()
    assert "throughput 200 samples/s, stall fraction 75.0% (highly input-bound)" in text
    assert "at most 4.00x faster" in text
    assert "not a measurement" in text and "about 3 workers would clear it" in text


def test_with_workers_the_pipeline_model_predicts_the_workers_that_clear_it():
    from loaderbench.analysis.predict import predict_more_workers
    from loaderbench.model import Trial
    from tests.helpers import result, settings

    # 2 workers, each batch 80 ms to build, 10 ms step: 2 workers deliver one batch per 40 ms.
    t = Trial(first_batch_s=0.1, warmup_batches=4, data_wait_s=[0.030] * 40, compute_s=[0.010] * 40,
              step_s=[0.040] * 40, samples=16 * 40, wall_s=1.6, timing="host", receive_s=[0.0005] * 8,
              cpu_util_pct=150.0)
    r = result(settings(2), t)
    r.summary.compute_ceiling_samples_per_s = 16 / 0.010
    pred = predict_more_workers(r, usable=16, tolerance=0.05)
    assert pred.workers_needed == 8  # 2 x 40 ms build time / 10 ms step
    # The hard corner is 1524 / 200 = 7.6 workers (the main thread's rate, step then receive, over
    # one worker's 200 samples/s); the model's soft corner puts the knee a little past it.
    assert 8 <= pred.knee_workers <= 11
    assert 1300 < pred.knee_samples_per_s < 1 / (1 / 1600 + 0.0005 / 16)
    # Its predicted stall is under 10%: it clears the loader bottleneck.
    assert pred.knee_stall_fraction < 0.10 and pred.clears


def test_profiler_ranges_appear_with_annotate():
    clock = FakeClock()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        w = watched(clock, TimedLoader(clock, 6, load_s=0.001), annotate=True, warmup_batches=1)
        for batch in w:
            (batch * 2).sum()
    names = {e.name for e in prof.events()}
    assert {"loaderbench.data_wait", "loaderbench.step"} <= names


def test_real_dataloader_with_sleeps_on_the_host_clock():
    """A real DataLoader (0 workers) whose samples sleep 2 ms, batch 4, and a 12 ms step:
    data-wait about 8 ms of 20 ms (stall ~40%). Loose bounds: the sleeps are real."""
    import time

    class Slow(Dataset):
        def __len__(self):
            return 80

        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.zeros(3), i

    w = loaderbench.watch(DataLoader(Slow(), batch_size=4))
    for _b in w:
        time.sleep(0.012)
    s = w.result().results[0].summary
    t = w.result().results[0].trials[0]
    assert t.timing == "host" and len(t.step_s) == 16
    assert 0.30 < s.stall_fraction < 0.55
    assert t.cpu_util_pct is not None and t.memory_pss_bytes


def test_suggested_settings_take_the_predicted_workers_and_say_so():
    from loaderbench.inloop.watcher import suggested_settings

    clock = FakeClock()
    w = watched(clock, TimedLoader(clock, 20, load_s=0.030))
    for _batch in w:
        clock.advance(0.010)
    assert suggested_settings(w.result()) == {
        "num_workers": 3, "pin_memory": False, "prefetch_factor": 2, "persistent_workers": False, "predicted": True,
    }
    w = watched(clock, TimedLoader(clock, 20, load_s=0.0))
    for _batch in w:
        clock.advance(0.010)
    assert w.result().results[0].summary.verdict == "compute-bound"
    assert suggested_settings(w.result())["num_workers"] == 0 and not suggested_settings(w.result())["predicted"]


def test_a_prediction_that_leaves_a_stall_does_not_say_it_clears_it():
    from dataclasses import replace

    from loaderbench.conclusions import MoreWorkers
    from loaderbench.render.watch import prediction_lines

    base = MoreWorkers(1, 2, knee_workers=4, knee_samples_per_s=1205.0)
    [still] = prediction_lines(replace(base, knee_stall_fraction=0.22, clears=False))
    assert "about 4 workers would give the most that more workers can: ~1,205 samples/s, stall ~22%" in still
    assert "clear" not in still
    [cleared] = prediction_lines(replace(base, knee_stall_fraction=0.03, clears=True))
    assert "about 4 workers would clear it" in cleared


def test_at_0_workers_the_prediction_says_when_workers_would_share_the_steps_cpus():
    from loaderbench.analysis.predict import predict_more_workers
    from loaderbench.render.watch import prediction_lines
    from tests.helpers import result, settings, trial

    # The main process loads for 48 ms, then steps for 52 ms (48% stall) on 2 usable CPUs. It used
    # 1.52 cores: one while loading (0.48) and 2 while stepping (1.04 / 0.52): a step on 2 threads.
    # Workers building at the step's pace need 0.48 / 0.52 = 0.92 cores more: 2.9 > 2 CPUs.
    t = trial(0.048, 0.052)
    t.main_cpu_util_pct = t.cpu_util_pct = 152.0
    pred = predict_more_workers(result(settings(0), t), usable=2, tolerance=0.05)
    assert pred.workers_needed == 1 and pred.shares_cpus and not pred.clears
    assert (pred.step_cores, pred.load_cores) == (2.0, 0.923)
    [line] = prediction_lines(pred)
    assert ("about 1 worker would build batches fast enough (num_workers=0 now), but the step itself used ~2.0 of the "
            "2 usable CPUs and loading needs ~0.9 more: workers would take the step's CPUs and slow it") in line
    assert "would clear it" not in line
    # A step on one thread (1.0 core in all): a worker has the other CPU, and clears it.
    t.main_cpu_util_pct = t.cpu_util_pct = 100.0
    pred = predict_more_workers(result(settings(0), t), usable=2, tolerance=0.05)
    assert pred.step_cores == 1.0 and not pred.shares_cpus and pred.clears
    assert "about 1 worker would clear it" in prediction_lines(pred)[0]


def test_a_watched_step_whose_time_varies_never_puts_the_row_above_its_ceiling():
    # A step of 57 or 110 ms by turns (more of the slow ones, so the median is 110 ms), no wait:
    # the loop ran at the step's own pace, 100% of its ceiling, neither 129% (a median of 57 ms
    # would give 80%) nor above 100%.
    from loaderbench.inloop.result import build_result_set
    from loaderbench.model import ConfigResult, Trial
    from tests.helpers import settings

    compute = [0.057, 0.110, 0.110] * 10
    t = Trial(0.1, 4, [0.0] * 30, compute, list(compute), 16 * 30, sum(compute), "host")
    row = ConfigResult(settings=settings(2), status="ok", trials=[t])
    rs = build_result_set(row, label="w", source="m:f", timing="host", device="cpu", warmup_batches=4,
                          max_batches=30, samples_per_batch=None, cuda=False)
    [ceiling] = rs.ceilings.values()
    assert ceiling.step_s == pytest.approx(sum(compute) / 30)
    s = rs.results[0].summary
    assert s.samples_per_s == pytest.approx(16 * 30 / sum(compute))
    assert s.samples_per_s / s.compute_ceiling_samples_per_s == pytest.approx(1.0)


class _OneShard(torch.utils.data.IterableDataset):
    """An IterableDataset that gives all its `n` items to worker 0 (one shard): the other workers
    yield nothing."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None and info.id != 0:
            return iter(())
        return iter(torch.full((2,), float(i)) for i in range(self.n))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("order", ["map", "one-shard"])
def test_the_batches_each_worker_delivered_are_counted_in_a_watched_loop(order):
    # A real DataLoader with 3 workers: map-style, they deliver in turn (equal shares, within
    # one); an IterableDataset of one shard, worker 0 delivers every batch and the report names
    # the 2 that delivered none. Its one worker holds at most 2 ready batches, never the 4 of all
    # 3 that mean the loader keeps up, so the warm-up reads the queue as full for the workers
    # still at work (read for all 3, a loaded machine's worker stayed ahead of this loop, which
    # does nothing, to the end of the epoch, and no step was left to measure).
    if order == "map":
        loader = DataLoader(torch.arange(96.0), batch_size=4, num_workers=3)
    else:
        loader = DataLoader(_OneShard(96), batch_size=4, num_workers=3)
    w = loaderbench.watch(loader, measure_resources=False, timing="host", warmup_batches=2)
    for _batch in w:
        pass
    trial = w.trial()
    steps = len(trial.step_s)
    assert steps >= 10 and sum(trial.worker_batches) == steps
    if order == "map":
        assert max(trial.worker_batches) - min(trial.worker_batches) <= 1
        assert "Idle workers" not in w.report()
    else:
        assert trial.worker_batches == [steps, 0, 0]
        assert (f"Idle workers: num_workers=3: 2 of 3 workers delivered no batch ({steps}, 0, 0 batches): the "
                "dataset gives work to 1") in w.report()


def test_a_batch_handed_out_is_credited_to_the_worker_that_built_it():
    # The iterator's task table before and after one next(): the batch handed out is the latest
    # entry gone (an earlier one gone with it was skipped: its worker's IterableDataset ran out).
    from loaderbench.measure.introspect import delivered_by, pending_workers

    class It:
        _task_info = {5: (1,), 6: (2, "data"), 7: (0,)}

    it = It()
    before = pending_workers(it)
    assert before == {5: 1, 6: 2, 7: 0}
    it._task_info = {7: (0,), 8: (1,)}  # 5 skipped, 6 handed out, 8 asked for
    assert delivered_by(before, it) == 2
    assert pending_workers(object()) is None and delivered_by(None, it) is None
    assert delivered_by(before, object()) is None


def test_a_plain_for_loop_writes_the_output_file_at_the_end_of_each_epoch(tmp_path):
    # No `with` block: the file is written when the loader runs out, and again after the next
    # epoch (covering both).
    clock = FakeClock()
    out = tmp_path / "w.json"
    w = watched(clock, TimedLoader(clock, 20, load_s=0.030), output=out)
    for _batch in w:
        clock.advance(0.010)
    first = read_results(out).results[0]
    assert first.status == "ok" and len(first.trials[0].step_s) == 20 - 1 - first.trials[0].warmup_batches
    for _batch in w:
        clock.advance(0.010)
    assert len(read_results(out).results[0].trials[0].step_s) == len(first.trials[0].step_s) + 20
