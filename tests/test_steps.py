"""The user's own train step (`--compute step:MODULE:FACTORY`): built once per measuring process
from the factory, its compute ceiling measured as for `model:NAME`, bad factories refused in one
line before anything is measured."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import default_collate
from typer.testing import CliRunner

from loaderbench import kinds
from loaderbench.cli import app
from loaderbench.errors import StepError
from loaderbench.model import ComputeSpec, DatasetSpec, LoaderSettings, MeasureSpec, TrialJob
from loaderbench.orchestration.api import build_api_config
from loaderbench.orchestration.config import parse_compute
from loaderbench.workload.compute import UserStep, build_compute
from tests import fixture_loaders
from tests.helpers import measured_again_if_missed

ROOT = Path(__file__).resolve().parents[1]
FIX = "tests.fixture_loaders"
CPU = torch.device("cpu")
runner = CliRunner()
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the measuring processes import tests.fixture_loaders from here


def test_step_names_a_factory_and_is_part_of_the_workload():
    spec = parse_compute(f"step:{FIX}:make_mlp_step")
    assert (spec.kind, spec.factory, spec.label()) == ("step", f"{FIX}:make_mlp_step", f"step:{FIX}:make_mlp_step")
    assert ComputeSpec.from_dict(spec.to_dict()) == spec
    assert "factory" not in ComputeSpec(kind="model", model="resnet50").to_dict()  # old records unchanged
    other = parse_compute(f"step:{FIX}:make_resnet50_step")
    assert kinds.workload_fingerprint({"compute": spec.to_dict()}) != kinds.workload_fingerprint({"compute": other.to_dict()})
    for bad in ("step:", "step:mytrain", "step::make_step"):
        with pytest.raises(ValueError, match="expected step:MODULE:FACTORY"):
            parse_compute(bad)


def test_the_step_trains_the_users_model_on_the_batch():
    step = build_compute(parse_compute(f"step:{FIX}:make_mlp_step"), CPU)
    assert isinstance(step, UserStep) and step.name == f"step:{FIX}:make_mlp_step"
    ds = fixture_loaders.make_features(64)
    batch = default_collate([ds[i] for i in range(32)])
    before = [p.detach().clone() for p in step.step.model.parameters()]
    step(batch)
    step(batch)
    assert all(not torch.equal(b, a) for b, a in zip(before, step.step.model.parameters()))


@pytest.mark.parametrize("factory, message", [
    ("tests.no_such_module:make_step",
     "cannot import module 'tests.no_such_module' for --compute step:tests.no_such_module:make_step"),
    (f"{FIX}:no_such_step", f"module '{FIX}' has no attribute 'no_such_step' (from --compute step:{FIX}:no_such_step)"),
    (f"{FIX}:NOT_A_FUNCTION", f"--compute step:{FIX}:NOT_A_FUNCTION is a int, not a callable"),
    (f"{FIX}:make_step_raises", f"--compute step:{FIX}:make_step_raises: the factory raised FileNotFoundError: "
                                "checkpoint.pt; it is called with the torch.device to train on"),
    (f"{FIX}:make_step_not_callable", f"--compute step:{FIX}:make_step_not_callable: the factory returned a dict, "
                                      "not a callable"),
])
def test_a_bad_factory_is_one_line_naming_it(factory, message):
    with pytest.raises(StepError) as err:
        build_compute(ComputeSpec(kind="step", factory=factory), CPU)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_step_that_fails_on_its_first_batch_is_one_line_naming_it():
    step = build_compute(ComputeSpec(kind="step", factory=f"{FIX}:make_step_fails_first"), CPU)
    with pytest.raises(StepError, match=rf"--compute step:{FIX}:make_step_fails_first: the step failed on the first "
                                        r"batch with RuntimeError: mat1 and mat2 shapes cannot be multiplied"):
        step(torch.zeros(16, 3))


def test_the_python_api_takes_the_step_factory_and_the_loader_class():
    cfg, _ = build_api_config(fixture_loaders.make_features, {
        "step": fixture_loaders.make_mlp_step, "loader": fixture_loaders.SnapshotLoader,
        "loader_args": {"snapshot_every": [1000, 1], "mode": "slow"}, "batch_size": 32,
    })
    assert cfg.compute == ComputeSpec(kind="step", factory=f"{FIX}:make_mlp_step")
    assert cfg.dataset.loader == f"{FIX}:SnapshotLoader"
    assert cfg.loader_args == {"snapshot_every": (1000, 1), "mode": ("slow",)}
    cfg, _ = build_api_config("tensor", {"step": f"step:{FIX}:make_mlp_step", "loader": f"{FIX}:generator_loader"})
    assert cfg.compute.factory == f"{FIX}:make_mlp_step" and cfg.dataset.loader == f"{FIX}:generator_loader"

    def local_step(device):
        return lambda batch: None

    from loaderbench.errors import DataError

    with pytest.raises(DataError, match=r"loaderbench.sweep\(step\): the step .*local_step.* is not importable"):
        build_api_config("tensor", {"step": local_step})


def _sweep(tmp_path: Path, *args: str):
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["sweep", "--dataset", f"{FIX}:make_features", "--batch-size", "64", "--num-workers",
                              "0", "--repeats", "1", "--search", "grid", "--output", str(out), "--no-progress", *args])
    return res, out


def test_a_factory_that_cannot_be_imported_ends_the_sweep_before_any_process_measures(tmp_path):
    res, out = _sweep(tmp_path, "--compute", "step:tests.no_such_module:make_step")
    assert res.exit_code == 2, res.output
    [line] = res.output.strip().splitlines()
    assert line.startswith("loaderbench: error: cannot import module 'tests.no_such_module' for --compute "
                           "step:tests.no_such_module:make_step")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("factory, message", [
    ("make_step_raises", "the factory raised FileNotFoundError: checkpoint.pt"),
    ("make_step_not_callable", "the factory returned a dict, not a callable"),
    ("make_step_fails_first", "the step failed on the first batch with RuntimeError: mat1 and mat2 shapes"),
])
def test_a_factory_that_fails_in_the_measuring_process_ends_the_sweep_in_one_line_before_any_config(
        tmp_path, factory, message):
    res, out = _sweep(tmp_path, "--compute", f"step:{FIX}:{factory}", "--num-workers", "0,2")
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines[-1].startswith(f"loaderbench: error: --compute step:{FIX}:{factory}: {message}"), res.output
    assert "Traceback" not in res.output and len([ln for ln in lines if "error" in ln]) == 1
    assert not out.exists()  # nothing was measured, so nothing is lost


def _plain_step_s(batch, seconds: float, clock=time.thread_time) -> float:
    """Seconds per call of a freshly made MLP step, in a plain loop (3 calls untimed)."""
    step = fixture_loaders.make_mlp_step(CPU)
    for _ in range(3):
        step(batch)
    n, t0 = 0, clock()
    while True:
        step(batch)
        n += 1
        if clock() - t0 >= seconds:
            return (clock() - t0) / n


@pytest.mark.slow
@pytest.mark.truth
def test_the_compute_ceiling_of_the_users_step_is_the_step_alone_in_a_plain_loop():
    # The compute ceiling (what the measuring process runs: trial.measure_compute_ceiling, the
    # factory's step fed one batch) against a plain loop of the same step, in turn five times,
    # each ceiling against the plain loop just before it, compared by the median of those ratios
    # (the host's drift between rounds, 2.8 to 4.0 ms a step in one run, cancels in a pair). Both on one intra-op thread and timed with the same clock, this
    # thread's CPU time: on two CPUs shared with other work, wall time timed the other load more
    # than the step (0.24 s against 4 ms per step with two threads; 2.4 to 5.1 ms between two
    # plain loops seconds apart with one), which a ratio cannot cancel.
    from loaderbench.measure.trial import measure_compute_ceiling

    ds = fixture_loaders.make_features()
    batch = default_collate([ds[i] for i in range(64)])
    job = TrialJob(LoaderSettings(0, False, False, None, False, 64),
                   DatasetSpec(kind="import", factory=f"{FIX}:make_features"),
                   ComputeSpec(kind="step", factory=f"{FIX}:make_mlp_step"),
                   MeasureSpec(batches=20, warmup_batches=3, min_time_s=0.5, device="cpu"), kind="ceiling")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def median_ratio() -> float:
        plain, ceilings = [], []
        for _ in range(5):
            plain.append(_plain_step_s(batch, 0.5))
            ceilings.append(measure_compute_ceiling(job, clock=time.thread_time))
        assert all(c.samples_per_batch == 64 and c.samples_per_s == pytest.approx(64 / c.step_s) for c in ceilings)
        return sorted(c.step_s / p for c, p in zip(ceilings, plain))[2]

    # Five pairs measured once more where their median misses: in one full run of the suite the
    # pairs' ratios spread 0.87-1.41 (even this thread's CPU time moved 15% between loops), alone
    # minutes later they were within the bound.
    try:
        ratios = measured_again_if_missed(median_ratio, lambda r: abs(r - 1.0) <= 0.10)
    finally:
        torch.set_num_threads(threads)
    assert abs(ratios[-1] - 1.0) <= 0.10, ratios


@pytest.mark.slow
def test_a_sweep_with_the_users_step_measures_its_ceiling_and_names_it(tmp_path):
    res, out = _sweep(tmp_path, "--compute", f"step:{FIX}:make_mlp_step", "--batches", "10", "--min-time", "0.3",
                      "--main-threads", "1")
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    ceiling = data["ceilings"]["compute"]["64"]
    assert ceiling["method"] == "measured" and ceiling["samples_per_batch"] == 64 and ceiling["step_s"] > 0
    assert data["config"]["compute"] == {"kind": "step", "ms": 0.0, "model": None, "factory": f"{FIX}:make_mlp_step"}
    assert f"step: step:{FIX}:make_mlp_step" in res.stdout
    [row] = data["results"]
    assert row["status"] == "ok" and row["summary"]["compute_ceiling_samples_per_s"] == pytest.approx(
        ceiling["samples_per_s"])


@pytest.mark.gpu
@needs_cuda
def test_gpu_a_users_resnet50_step_has_the_ceiling_of_model_resnet50():
    # The same model and training step, built by the user's factory or by model:resnet50: the
    # same compute ceiling, within 5%.
    from loaderbench.measure.trial import measure_compute_ceiling

    dataset = DatasetSpec(kind="synthetic", num_samples=256, image_size=(256, 256))
    measure = MeasureSpec(batches=30, warmup_batches=5, min_time_s=3.0, device="cuda")

    def ceiling(compute: ComputeSpec) -> float:
        job = TrialJob(LoaderSettings(0, False, False, None, False, 128), dataset, compute, measure, kind="ceiling")
        return float(measure_compute_ceiling(job).samples_per_s)

    rates = {}
    for _ in range(2):  # interleaved, so a clock change weighs on both alike
        for spec in (ComputeSpec(kind="model", model="resnet50"), ComputeSpec(kind="step", factory=f"{FIX}:make_resnet50_step")):
            rates.setdefault(spec.kind, []).append(ceiling(spec))
    model, user = max(rates["model"]), max(rates["step"])
    assert abs(user / model - 1.0) <= 0.05, rates


@pytest.mark.slow
def test_a_distributed_sweep_initialises_the_process_group_before_the_factory_wraps_its_model_in_ddp(tmp_path):
    import os
    import subprocess
    import sys

    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "loaderbench", "sweep", "--nproc-per-node", "2", "--dataset", f"{FIX}:make_features",
         "--compute", f"step:{FIX}:make_ddp_mlp_step", "--batch-size", "16", "--num-workers", "0", "--batches", "8",
         "--min-time", "0.3", "--repeats", "1", "--search", "grid", "--output", str(out), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    ceiling = data["ceilings"]["compute"]["16"]
    # Measured on both ranks at once, each with its DDP model (the factory raises without a group).
    assert ceiling["method"] == "measured" and ceiling["world_size"] == 2 and len(ceiling["rank_samples_per_s"]) == 2
    assert ceiling["samples_per_s"] == pytest.approx(sum(ceiling["rank_samples_per_s"]))
    [row] = data["results"]
    assert row["status"] == "ok" and [t["rank"] for t in row["trials"][0]["rank_trials"]] == [0, 1]
