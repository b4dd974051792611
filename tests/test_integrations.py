"""The examples under examples/, each the one-line change in a real loop: run in-process on CPU
with tiny models and few steps. The framework ones skip when their extra is not installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from loaderbench.results import read_results
from tests.helpers import FakeClock

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example(name: str):
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_plain_loop_example_writes_a_result_of_the_loop(tmp_path):
    out = example("plain_loop").main(["--output", str(tmp_path / "w.json"), "--sample-ms", "1", "--step-ms", "5"])
    r = read_results(out).results[0]
    assert r.settings.batch_size == 16 and r.settings.num_workers == 0
    t = r.trials[0]
    assert t.samples == 16 * len(t.step_s) and len(t.step_s) == 16 - 1 - t.warmup_batches
    # 0 workers: the loop waits while 16 samples x 1 ms of sleep load each batch (sleeps only
    # overshoot, so at least 16 ms), against about 5 ms of step: loader-bound.
    assert r.summary.verdict == "loader-bound" and r.summary.data_wait_p50_s >= 0.016
    assert r.summary.stall_fraction > 0.2


def test_profiler_example_shows_the_named_ranges():
    assert example("profiler_ranges").main([]) == {"loaderbench.data_wait", "loaderbench.h2d", "loaderbench.step"}


class FakeWriter:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, value, step))


def test_tensorboard_scalars_every_n_steps_with_hand_computed_values():
    import torch

    import loaderbench

    clock = FakeClock()

    def batches():
        for _ in range(23):
            clock.advance(0.030)
            yield torch.zeros(8, 2)

    class Loader:
        def __iter__(self):
            return batches()

    writer = FakeWriter()
    w = loaderbench.watch(Loader(), clock=clock, timing="host", measure_resources=False, warmup_batches=2,
                          tensorboard=writer, log_every_steps=5)
    for _b in w:
        clock.advance(0.010)
    # 23 batches: start-up + 2 warm-up, 20 measured -> 4 intervals of 5 steps, logged at steps 2 + 5k
    tags = sorted({t for t, _, _ in writer.scalars})
    assert tags == ["loaderbench/data_wait_ms", "loaderbench/samples_per_s", "loaderbench/stall_fraction",
                    "loaderbench/step_time_ms"]
    stall = [(v, s) for t, v, s in writer.scalars if t == "loaderbench/stall_fraction"]
    assert [s for _, s in stall] == [7, 12, 17, 22]
    assert all(v == pytest.approx(0.75) for v, _ in stall)
    assert all(v == pytest.approx(200.0) for t, v, _ in writer.scalars if t == "loaderbench/samples_per_s")
    assert all(v == pytest.approx(30.0) for t, v, _ in writer.scalars if t == "loaderbench/data_wait_ms")


def test_tensorboard_example_writes_an_event_file(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = example("tensorboard_scalars").main(["--logdir", str(tmp_path / "tb"), "--every", "10"])
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    assert "loaderbench/stall_fraction" in acc.Tags()["scalars"]
    stalls = [e.value for e in acc.Scalars("loaderbench/stall_fraction")]
    waits = [e.value for e in acc.Scalars("loaderbench/data_wait_ms")]
    assert len(stalls) >= 3
    # 8 samples x 0.5 ms sleep to load a batch against a 4 ms step: about half of each step waits.
    assert all(0.2 < s < 0.9 for s in stalls) and all(w >= 3.5 for w in waits)


def test_lightning_callback_example(tmp_path):
    pytest.importorskip("lightning")
    out = tmp_path / "w.json"
    callback = example("lightning_callback").main(["--output", str(out), "--steps", "24"])
    r = read_results(out).results[0]
    t = r.trials[0]
    assert r.settings.batch_size == 16 and t.samples == 16 * len(t.step_s)
    assert len(t.step_s) == 24 - 1 - t.warmup_batches
    # 0 workers: each step waits for 16 samples of 1 ms of sleep (at least 16 ms, load can only
    # add) against a 10-ms sleep and Lightning's own step; a share of it (0.3) failed where other
    # load on a 2-CPU machine stretched Lightning's step to a stall of 0.24.
    assert r.summary.verdict == "loader-bound" and r.summary.data_wait_p50_s >= 0.016
    assert callback.result is not None


def test_hf_trainer_callback_example_suggests_training_arguments(tmp_path, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    out = tmp_path / "w.json"
    callback = example("hf_trainer_callback").main(["--output", str(out), "--steps", "24"])
    r = read_results(out).results[0]
    assert r.summary.verdict == "loader-bound"
    assert len(r.trials[0].step_s) == 24 - 1 - r.trials[0].warmup_batches
    args = callback.training_arguments
    assert set(args) == {"dataloader_num_workers", "dataloader_pin_memory", "dataloader_prefetch_factor",
                         "dataloader_persistent_workers"}
    assert args["dataloader_num_workers"] == r.summary.workers_needed >= 1
    printed = capsys.readouterr().out
    assert f"TrainingArguments(..., dataloader_num_workers={args['dataloader_num_workers']}," in printed
    assert "predicted, not measured" in printed


def test_the_base_package_imports_no_framework():
    import subprocess

    code = (
        "import sys, loaderbench, loaderbench.inloop.watcher, loaderbench.integrations\n"
        "loaderbench.watch([1])\n"
        "bad = [m for m in ('lightning', 'transformers', 'tensorboard', 'torch.utils.tensorboard') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=EXAMPLES.parent)
