"""loaderbench.sweep(dataset, ...): the sweep from Python, and watch against the sweep."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from torch.utils.data import DataLoader, Dataset

import loaderbench
from loaderbench.errors import DataError, UsageError
from loaderbench.orchestration.api import PICKLED_FACTORY, build_api_config
from loaderbench.workload.datasets import TensorCostDataset
from tests import fixture_datasets
from tests.helpers import measured_again_if_missed


class LocalDataset(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i


LocalDataset.__module__ = "__main__"  # as if defined in a script


def test_options_are_the_commands_parsed_by_the_same_parsers():
    cfg, pickled = build_api_config("tensor", {"num_workers": [0, 2], "pin_memory": "off", "batch_size": 16,
                                               "step": "sleep:12", "io_ms": 2, "repeats": 1, "search": "grid",
                                               "time_budget_s": 30})
    assert pickled is None
    assert cfg.grid["num_workers"] == (0, 2) and cfg.grid["batch_size"] == (16,)
    assert cfg.compute.kind == "sleep" and cfg.compute.ms == 12
    assert cfg.dataset.kind == "tensor" and cfg.dataset.io_ms == 2
    assert (cfg.repeats, cfg.search, cfg.time_budget_s) == (1, "grid", 30)
    cfg, _ = build_api_config("tests.fixture_datasets:make_nested", {"dataset_kwargs": {"n": 8}})
    assert cfg.dataset.factory == "tests.fixture_datasets:make_nested" and cfg.dataset.kwargs == {"n": 8}
    cfg, _ = build_api_config(fixture_datasets.make_nested, {})
    assert cfg.dataset.factory == "tests.fixture_datasets:make_nested"


def test_a_dataset_object_is_pickled_for_the_measuring_process():
    from loaderbench.orchestration.api import load_pickled

    ds = TensorCostDataset(32, (3, 4), 0.0, 0.0)
    cfg, pickled = build_api_config(ds, {})
    try:
        assert cfg.dataset.factory == PICKLED_FACTORY
        assert cfg.dataset.kwargs["name"] == "loaderbench.workload.datasets.TensorCostDataset"
        back = load_pickled(**cfg.dataset.kwargs)
        assert len(back) == 32 and back[5][0].shape == (3, 4)
    finally:
        Path(pickled).unlink()


def test_what_cannot_reach_the_measuring_process_is_refused_with_the_way_out():
    with pytest.raises(DataError, match="defined in __main__.*move the class into a module"):
        build_api_config(LocalDataset(), {})
    with pytest.raises(DataError, match="not importable by name"):
        build_api_config(lambda: LocalDataset(), {})
    with pytest.raises(UsageError, match="unknown option 'num_worker'"):
        build_api_config("tensor", {"num_worker": [2]})
    with pytest.raises(UsageError, match=r"loaderbench.sweep\(batch_size=...\)"):
        build_api_config("tensor", {"batch_size": -1})
    with pytest.raises(TypeError, match="expected a Dataset"):
        build_api_config(3, {})


def test_loaderbench_sweep_is_the_function_even_after_the_orchestration_is_imported():
    import loaderbench.orchestration.execute  # noqa: F401 - the module the command runs
    from loaderbench.orchestration.api import sweep

    assert loaderbench.sweep is sweep


@pytest.mark.slow
def test_sweep_of_a_dataset_object_returns_recommendation_frame_and_saves(tmp_path):
    run = loaderbench.sweep(TensorCostDataset(10_000, (3, 8, 8), 0.0, 1.0), num_workers=[0], batch_size=8,
                            step="sleep:5", search="grid", repeats=1, batches=10, min_time_s=0.3,
                            output=tmp_path / "run.json")
    assert run.path == tmp_path / "run.json" and run.path.exists()
    assert run.recommendation is not None and run.recommendation.settings.num_workers == 0
    assert "DataLoader(dataset, batch_size=8, num_workers=0" in run.recommendation.dataloader_call
    frame = run.frame
    assert list(frame["num_workers"]) == [0] and frame["status"].iloc[0] == "ok"
    # 8 samples x 1 ms to load, 5 ms step: stall about 8 / 13
    assert 0.5 < frame["stall_fraction"].iloc[0] < 0.75
    saved = run.save(tmp_path / "again.json")
    assert loaderbench.load_results(saved)["key"].tolist() == frame["key"].tolist()


AGREE_IO_MS = 5.0
AGREE_BATCH = 4
AGREE_STEP_MS = 12.0


@pytest.mark.slow
@pytest.mark.truth
@pytest.mark.parametrize("workers", [0, 1])
def test_watch_agrees_with_the_sweep_within_two_points_of_stall(workers, tmp_path, record_property):
    """The same settings and workload, measured by the sweep and by watch in a plain loop: a
    tensor dataset of 5 ms per sample (sleep), batch 4, a 12 ms sleep step. With 0 workers the
    loop waits 20 ms a step (stall ~62%); with 1 worker the worker builds a batch in 20 ms while
    the step takes 12 (stall ~40%). Few, long sleeps: their overshoot under load (which moves
    the 1-worker stall by ~3 points per ms of build time) stays small. On a busy 2-core machine
    the sweep's 1-worker stall reads 1-2 points above watch's (its worker shares the CPUs with
    the sweep's parent process too), hence `truth`: it needs a quiet machine."""
    dataset = TensorCostDataset(100_000, (3, 8, 8), 0.0, AGREE_IO_MS)

    def measured(attempt: int) -> tuple[float, float, float, float]:
        # Single runs of either move by 1-2 points on a 2-core VM (the sweep read 46.6-48.7% at 1
        # worker in five runs, watch 45.4-47.2%): the sweep's median of 3 trials against the
        # median of 3 watched runs, as the agreement benchmark compares them.
        run = loaderbench.sweep(dataset, num_workers=[workers], batch_size=AGREE_BATCH,
                                step=f"sleep:{AGREE_STEP_MS:g}", search="grid", repeats=3, batches=100,
                                min_time_s=1.5, output=tmp_path / f"sweep{attempt}.json")
        swept = run.result_set.results[0].summary
        assert swept.repeats == 3
        stalls, rates = [], []
        for _ in range(3):
            loader = DataLoader(dataset, batch_size=AGREE_BATCH, shuffle=True, num_workers=workers)
            w = loaderbench.watch(loader, max_batches=100)
            for i, _batch in enumerate(w):
                time.sleep(AGREE_STEP_MS / 1000)
                if i >= 130:
                    break
            watched = w.result().results[0].summary
            stalls.append(watched.stall_fraction)
            rates.append(watched.samples_per_s)
        print(f"workers={workers}: stall sweep {swept.stall_fraction:.4f} watch {statistics.median(stalls):.4f} "
              f"({stalls}); samples/s sweep {swept.samples_per_s:.1f} watch {statistics.median(rates):.1f}")
        return swept.stall_fraction, statistics.median(stalls), swept.samples_per_s, statistics.median(rates)

    def agree(m: tuple[float, float, float, float]) -> bool:
        stall_sweep, stall_watch, rate_sweep, rate_watch = m
        return abs(stall_watch - stall_sweep) <= 0.02 and rate_watch == pytest.approx(rate_sweep, rel=0.05)

    # A pair that disagrees is measured once more: a burst of other load between the sweep and
    # the watched runs moved the 1-worker stall 3.4 points on a 2-CPU machine with two other
    # busy processes; a timing model that differs misses both.
    attempts = iter(range(2))
    rounds = measured_again_if_missed(lambda: measured(next(attempts)), agree)
    record_property("stall_sweep", rounds[-1][0])
    record_property("stall_watch", rounds[-1][1])
    assert agree(rounds[-1]), rounds


def test_check_refuses_a_baseline_of_a_pickled_dataset_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from loaderbench.cli import app
    from loaderbench.orchestration.api import PICKLED_FACTORY
    from loaderbench.results import ResultSet, save_results

    path = tmp_path / "base.json"
    save_results(ResultSet(config={"dataset": {"kind": "import", "factory": PICKLED_FACTORY,
                                               "kwargs": {"path": "/tmp/gone.pkl"}}}, environment={}, results=[]),
                 path)
    res = CliRunner().invoke(app, ["check", "--baseline", str(path)])
    assert res.exit_code == 2 and "measured from a Dataset object passed to loaderbench.sweep()" in res.output
    assert "Traceback" not in res.output


def test_a_dataset_whose_module_only_this_process_can_import_reaches_the_measuring_process(tmp_path):
    # The module sits in a folder put on sys.path by the caller (as running a script from its
    # folder does), not on PYTHONPATH: the measuring process is given that folder.
    import importlib
    import os
    import sys

    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "only_here_ds.py").write_text(
        "import torch\nfrom torch.utils.data import Dataset\n\n"
        "class OnlyHere(Dataset):\n    def __len__(self):\n        return 4096\n"
        "    def __getitem__(self, i):\n        return torch.zeros(3)\n")
    sys.path.insert(0, str(mods))
    before = os.environ.get("PYTHONPATH")
    try:
        module = importlib.import_module("only_here_ds")
        run = loaderbench.sweep(module.OnlyHere(), num_workers=[0], batch_size=8, step="sleep:2", search="grid",
                                repeats=1, batches=10, min_time_s=0.2, output=tmp_path / "run.json")
    finally:
        sys.path.remove(str(mods))
        sys.modules.pop("only_here_ds", None)
    assert list(run.frame["status"]) == ["ok"]
    assert os.environ.get("PYTHONPATH") == before  # put back


def test_a_python_sweep_where_every_config_failed_raises_instead_of_returning_nothing(tmp_path):
    from loaderbench.errors import NothingMeasured
    from tests.fixture_datasets import FailsOutsideItsProcess

    with pytest.raises(NothingMeasured, match="no config was measured successfully.*cannot read sample"):
        loaderbench.sweep(FailsOutsideItsProcess(), num_workers=[0], batch_size=8, step="sleep:2", search="grid",
                          repeats=1, batches=10, min_time_s=0.2, output=tmp_path / "run.json")
    assert (tmp_path / "run.json").exists()  # what was measured is kept
