"""run_sweep orchestration with a fake per-config runner: no processes, hand-made outcomes."""

from __future__ import annotations

import pytest

from loaderbench.config import build_config
from loaderbench.measure.isolation import Outcome
from loaderbench.model import ComputeSpec, WarningKind
from loaderbench.preflight import WorkloadFacts, oversubscription, shm_need_bytes, shm_verdict
from loaderbench.sweep import Machine, resolve_defaults, run_sweep
from tests import helpers
from tests.conftest import FakeRunner
from tests.helpers import settings, trial

MACHINE = Machine(cuda=False, usable_cpus=2)
ENV = {"usable_cpus": 2, "shm": {"free_bytes": 64 * 2**20}, "torch_num_threads": 2}


def config(**grid):
    cfg = build_config(None, {
        "dataset": {"kind": "tensor"},
        "compute": {"step": ComputeSpec(kind="sleep", ms=12.0)},
        "grid": {"num_workers": (0, 2, 4), "batch_size": (16,), **grid},
        "measure": {"repeats": 2},
    })
    return resolve_defaults(cfg, MACHINE)


def ok(nw):
    return Outcome(status="ok", trial=trial(0.032 if nw == 0 else 0.001, 0.012))


def test_repeats_are_interleaved_and_saved_after_every_trial(tmp_path):
    saves = []
    runner = FakeRunner({0: ok(0), 2: ok(2), 4: ok(4)})
    rs = run_sweep(config(), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=runner, save=lambda r, p: saves.append(len(r.results)))
    assert [c[0] for c in runner.calls] == [0, 2, 4, 0, 2, 4]
    assert [c[1] for c in runner.calls] == [0, 0, 0, 1, 1, 1]  # a new seed per repeat
    assert saves == [1, 2, 3, 3, 3, 3]
    assert all(len(r.trials) == 2 and r.summary.repeats == 2 for r in rs.results)
    # sleep:12 at batch 16: the analytic compute ceiling, no process started for it.
    assert rs.ceilings["compute"]["16"]["samples_per_s"] == pytest.approx(16 / 0.012)


def test_a_failed_config_is_not_retried_and_never_shows_throughput(tmp_path):
    runner = FakeRunner({0: ok(0), 2: Outcome(status="failed", error="boom"), 4: ok(4)})
    rs = run_sweep(config(), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=runner, save=lambda r, p: None)
    assert [c[0] for c in runner.calls] == [0, 2, 4, 0, 4]
    failed = [r for r in rs.results if r.settings.num_workers == 2][0]
    assert failed.status == "failed" and failed.summary is None and failed.trials == []
    assert rs.recommendation.settings.num_workers == 4


def test_ctrl_c_saves_what_was_measured_and_reraises(tmp_path):
    saved = []

    def interrupt():
        raise KeyboardInterrupt

    runner = FakeRunner({0: ok(0), 2: interrupt, 4: ok(4)})
    with pytest.raises(KeyboardInterrupt):
        run_sweep(config(), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                  runner=runner, save=lambda r, p: saved.append([x.settings.num_workers for x in r.results]))
    assert saved[-1] == [0]


def test_configs_that_cannot_fit_in_shm_are_skipped_with_the_fix(tmp_path):
    # 1 MiB per sample x 16 per batch = 16 MiB per batch; 4 workers x 2 + 1 = 9 in flight =
    # 144 MiB > 64 MiB free: skipped. 2 workers: 80 MiB > 64: skipped too. 0 workers: no shm.
    runner = FakeRunner({0: ok(0), 2: ok(2), 4: ok(4)})
    rs = run_sweep(config(), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=runner, save=lambda r, p: None,
                   facts=WorkloadFacts(sample_bytes=2**20, iterable=False))
    assert {c[0] for c in runner.calls} == {0}
    by = {r.settings.num_workers: r for r in rs.results}
    assert by[4].status == "skipped" and "shared memory (/dev/shm) too small" in by[4].error
    assert "--shm-size" in by[4].error and "144 MiB" in by[4].error


def test_replicated_iterable_configs_are_flagged_and_not_ranked(tmp_path):
    fast = Outcome(status="ok", trial=trial(0.0, 0.001))  # "faster" only because of duplicates
    runner = FakeRunner({0: ok(0), 2: fast, 4: fast})
    rs = run_sweep(config(), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=runner, save=lambda r, p: None,
                   facts=WorkloadFacts(sample_bytes=16, iterable=True, replicated_across_workers=True))
    by = {r.settings.num_workers: r for r in rs.results}
    assert by[2].has(WarningKind.REPLICATED) and by[4].has(WarningKind.REPLICATED)
    assert not by[0].has(WarningKind.REPLICATED)
    assert rs.recommendation.settings.num_workers == 0
    # An unsplit IterableDataset: the advice must not call the only ranked config "the fastest measured" nor ask
    # for more workers (the faster rows count duplicates); the table says why those rows lose.
    reason = helpers.reason(rs.recommendation)
    assert "It is also the fastest config ranked" in reason and "fastest config measured" not in reason
    assert "split its stream with torch.utils.data.get_worker_info(), then sweep again" in reason
    assert "try more workers" not in reason and "Estimate" not in reason
    from loaderbench.render.sweep import row_cells

    assert row_cells(by[2], cuda=False)["verdict"] == "duplicates samples: not ranked"
    assert row_cells(by[0], cuda=False)["verdict"].startswith("loader-bound")


def test_shm_and_oversubscription_rules_are_hand_computed():
    s4 = settings(4, bs=32)
    assert shm_need_bytes(s4, 3 * 2**20) == 3 * 2**20 * 32 * 9
    assert shm_need_bytes(settings(0), 10**9) == 0
    assert shm_verdict(100, 1000) is None
    assert shm_verdict(600, 1000)[0] == "warn"
    assert shm_verdict(1001, 1000)[0] == "skip"
    assert "4 workers on 2 usable CPUs" in oversubscription(s4, 2, 1)
    assert oversubscription(settings(2), 2, 1) is None
    assert "intra-op threads" in oversubscription(settings(8), 8, 16)


@pytest.mark.slow
def test_an_iterable_dataset_replayed_by_every_worker_is_detected():
    # The same with a real 2-worker DataLoader: the unsplit stream gives worker 0 and worker 1
    # the same first sample; the split one does not.
    from loaderbench.preflight import workload_facts
    from tests.fixture_datasets import make_split_stream, make_stream

    assert workload_facts(make_stream(), check_replication=True).replicated_across_workers is True
    assert workload_facts(make_split_stream(), check_replication=True).replicated_across_workers is False
    assert workload_facts(make_stream(), check_replication=False).replicated_across_workers is None
