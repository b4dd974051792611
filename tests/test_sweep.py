"""run_sweep orchestration with a fake per-config runner: no processes, hand-made outcomes."""

from __future__ import annotations

import pytest

from loaderbench.measure.isolation import Outcome
from loaderbench.model import ComputeSpec, WarningKind
from loaderbench.orchestration.config import build_config
from loaderbench.orchestration.plan import Machine, resolve_defaults
from loaderbench.orchestration.preflight import WorkloadFacts, oversubscription, shm_need_bytes, shm_verdict
from loaderbench.orchestration.run import run_sweep
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
        "measure": {"repeats": 2, "search": "grid"},
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
    assert rs.ceilings[16].samples_per_s == pytest.approx(16 / 0.012)


def test_the_loader_ceiling_is_probed_once_per_config(tmp_path):
    # A repeat skips the loader-alone probe of a config whose earlier trial has its figure; one
    # whose probe gave none (2 workers here: the epoch ended first) is probed again.
    def probed(nw):
        def make():
            o = ok(nw)
            o.trial.loader_alone_samples_per_s = None if nw == 2 else 1000.0 * (nw + 1)
            return o
        return make

    runner = FakeRunner({w: probed(w) for w in (0, 2, 4)})
    rs = run_sweep(config(), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=runner, save=lambda r, p: None)
    assert [(c[0], j.loader_alone) for c, j in zip(runner.calls, runner.jobs)] == [
        (0, True), (2, True), (4, True), (0, False), (2, True), (4, False)]
    by = {r.settings.num_workers: r.summary for r in rs.results}
    assert by[4].loader_ceiling_samples_per_s == 5000.0 and by[2].loader_ceiling_samples_per_s is None


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
    # 4 workers on 2 CPUs would be oversubscribed, but a config that never runs gets no such note.
    assert not by[4].has(WarningKind.OVERSUBSCRIBED)


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
    from loaderbench.render.columns import row_cells

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
    from loaderbench.orchestration.preflight import workload_facts
    from tests.fixture_datasets import make_split_stream, make_stream

    assert workload_facts(make_stream(), check_replication=True).replicated_across_workers is True
    assert workload_facts(make_split_stream(), check_replication=True).replicated_across_workers is False
    assert workload_facts(make_stream(), check_replication=False).replicated_across_workers is None


@pytest.mark.slow
def test_a_split_stream_whose_images_are_equal_and_labels_differ_is_not_replicated():
    # Every part of a sample counts: equal tensors with different labels are different samples.
    from loaderbench.orchestration.preflight import workload_facts
    from tests.fixture_datasets import make_replicated_labelled_stream, make_split_labelled_stream

    assert workload_facts(make_split_labelled_stream(), check_replication=True).replicated_across_workers is False
    assert workload_facts(make_replicated_labelled_stream(), check_replication=True).replicated_across_workers is True


@pytest.mark.slow
def test_a_split_stream_whose_samples_are_equal_in_every_worker_is_not_replicated():
    # All-zero tensors with labels that restart in each worker's shard: worker 0's and worker
    # 1's samples are equal item by item, but 2 workers yield the 400 items once (200 each),
    # where a replayed stream yields them twice (800).
    from loaderbench.orchestration.preflight import workload_facts
    from tests.fixture_datasets import make_local_label_stream, make_replicated_local_label_stream

    assert workload_facts(make_local_label_stream(), check_replication=True).replicated_across_workers is False
    assert workload_facts(make_replicated_local_label_stream(), check_replication=True).replicated_across_workers is True


@pytest.mark.slow
def test_a_long_split_stream_of_equal_samples_is_not_flagged_but_a_long_replayed_one_is():
    # 400 equal items at 10 ms: one pass (4 s) outlasts the 3-s count, so the count cannot
    # tell them apart. The split stream's workers read get_worker_info().id (which worker they
    # are): not decided, not flagged. The replayed one never asks: flagged as replayed.
    from loaderbench.orchestration.preflight import COUNT_CHECK_S, workload_facts
    from tests.fixture_datasets import make_long_local_label_stream

    assert 400 * 0.010 > COUNT_CHECK_S
    assert workload_facts(make_long_local_label_stream(), check_replication=True).replicated_across_workers is None
    assert workload_facts(make_long_local_label_stream(replicate=True),
                          check_replication=True).replicated_across_workers is True


def _pipeline_outcome(nw: int, *, build_s: float = 0.064, step_s: float = 0.012) -> Outcome:
    """A loader whose worker builds a 16-sample batch in `build_s`, a `step_s` step: W workers
    deliver a batch every build_s / W (0 workers: build, then step)."""
    period = build_s + step_s if nw == 0 else max(step_s, build_s / nw)
    t = trial(period - step_s, step_s)
    t.loader_alone_samples_per_s = 16 / build_s * max(1, nw)
    t.receive_s = [0.0002] * 4 if nw else []
    return Outcome(status="ok", trial=t)


def _searched(tmp_path):
    """The model-guided search over 0-16 workers of `_pipeline_outcome`'s loader on 16 CPUs:
    (the result, the fake runner)."""
    cfg = build_config(None, {
        "dataset": {"kind": "tensor"}, "compute": {"step": ComputeSpec(kind="sleep", ms=12.0)},
        "grid": {"num_workers": (0, 1, 2, 4, 6, 8, 12, 16), "batch_size": (16,)},
        "measure": {"repeats": 1},
    })
    runner = FakeRunner({w: (lambda w=w: _pipeline_outcome(w)) for w in range(17)})
    rs = run_sweep(resolve_defaults(cfg, Machine(cuda=False, usable_cpus=16)), output=tmp_path / "r.json",
                   environment={"usable_cpus": 16}, machine=Machine(cuda=False, usable_cpus=16),
                   runner=runner, save=lambda r, p: None)
    return rs, runner


def test_the_search_measures_the_knee_and_its_neighbours_and_predicts_the_rest(tmp_path):
    # 64 ms per batch per worker, 12 ms step: 6 workers keep up (64 / 12 = 5.3).
    rs, runner = _searched(tmp_path)
    # The last trial is the pick's sustained one (NOTE [the pick's sustained figure]): 4 batches per worker,
    # where the search's windows held 20 / 6 = 3.3; no loader-ceiling probe after it.
    last = runner.jobs[-1]
    assert (last.settings.num_workers, last.measure.batches, last.loader_alone) == (6, 24, False)
    measured = sorted(w for w, _, kind in runner.calls[:-1] if kind == "config")
    assert rs.recommendation.settings.num_workers == 6
    assert {4, 6, 8} <= set(measured) and len(measured) < 8  # the knee, its neighbours, not the grid
    # Only measured configs are rows; the others are predictions, never ranked.
    assert sorted(r.settings.num_workers for r in rs.results) == measured
    predicted = {p.settings.num_workers: p for p in rs.sweep.predictions}
    assert set(predicted) == {0, 1, 2, 4, 6, 8, 12, 16} - set(measured)
    # 12 and 16 workers are past the knee: the model says the step's 1,333/s binds.
    for w in {12, 16} & set(predicted):
        assert predicted[w].samples_per_s == pytest.approx(16 / 0.012, rel=0.10)
    first = rs.sweep.search.steps[0]  # the probe: 16 CPUs / 4
    assert first.config.startswith("w4-") and first.why == "probe: a quarter of the CPUs in workers"


def test_the_drift_check_remeasures_the_competing_configs_in_fresh_processes(tmp_path):
    # The knee (2 workers: as fast as 4, cheaper) measures 26% slower in a fresh process than in
    # the warm one, twice, while a second warm trial reads as the first: confirmed, the configs
    # that compete for the pick are measured again, fresh.
    import time
    from dataclasses import replace

    def probed(o: Outcome) -> Outcome:  # a trial that probed the loader ceiling
        o.trial.loader_alone_samples_per_s = 2000.0
        return o

    def slow_fresh() -> Outcome:  # a fresh process's trial: 50 ms here
        time.sleep(0.05)
        return probed(Outcome(status="ok", trial=trial(0.0055, 0.012)))

    warm = FakeRunner({0: probed(ok(0)), 2: probed(ok(2)), 4: probed(ok(4))})
    fresh = FakeRunner({2: slow_fresh, 4: probed(ok(4))})
    rs = run_sweep(replace(config(), repeats=1), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=warm, fresh_runner=fresh, save=lambda r, p: None)
    drift = rs.sweep.drift
    assert drift.wall_s >= 0.10  # what the check cost: two fresh trials of the knee at least
    assert drift.config.startswith("w2-") and drift.change == pytest.approx(0.013 / 0.0175 - 1, abs=0.01)
    assert drift.confirmed and drift.threshold == pytest.approx(0.10)  # 2 x 5%: no repeats to say more
    assert [w for w, _, _ in fresh.calls] == [2, 2, 4]  # the knee twice, then its competitor
    # The knee's warm trials had probed the loader ceiling, so its first fresh trial does not; the
    # second does, since the fresh trials alone now stand for it (and its competitor's first).
    assert [j.loader_alone for j in fresh.jobs] == [False, True, True]
    assert all(r.summary.loader_ceiling_samples_per_s == 2000.0 for r in rs.results)
    assert sorted(drift.remeasured) == sorted(r.settings.key() for r in rs.results if r.settings.num_workers)
    # Only fresh trials stand for them now: 4 workers are the knee.
    assert [len(r.trials) for r in rs.results] == [1, 2, 1]
    assert rs.recommendation.settings.num_workers == 4


def _drift_with_deadline(tmp_path, monkeypatch, deadline_in_s: float, knee_again=None, keep_s: float = 0.0):
    """The drift above (the knee 26% slower fresh, twice), on a clock that a fresh trial moves by
    10 s and a warm one by 3 s, with --time-budget ending `deadline_in_s` after the check starts;
    `knee_again`: the knee's (2 workers') second warm trial, when not as its first; `keep_s`: the
    seconds the check leaves for what follows it on the knee (the pick's sustained trial)."""
    from dataclasses import replace

    from loaderbench.orchestration import drift as drift_mod
    from loaderbench.orchestration import run as run_mod

    clock = [1000.0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return clock[0]

    def after(seconds: float, outcome):
        def run() -> Outcome:
            clock[0] += seconds
            return outcome()
        return run

    def timed(*args, **kwargs):
        return drift_mod.check_drift(*args, **{**kwargs, "deadline": clock[0] + deadline_in_s,
                                               "keep_s": lambda knee: keep_s})

    monkeypatch.setattr(drift_mod, "time", Clock)
    monkeypatch.setattr(run_mod, "time", Clock)  # the warm trials' pace: 3 s each
    monkeypatch.setattr(run_mod, "check_drift", timed)
    warm = FakeRunner({w: after(3.0, lambda w=w: ok(w)) for w in (0, 2, 4)})
    if knee_again is not None:
        knee_trials = iter([ok(2), knee_again])
        warm = FakeRunner({**warm.outcomes, 2: after(3.0, lambda: next(knee_trials))})
    fresh = FakeRunner({2: after(10.0, lambda: Outcome(status="ok", trial=trial(0.0055, 0.012))),
                        4: after(10.0, lambda: ok(4))})
    rs = run_sweep(replace(config(), repeats=1), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=warm, fresh_runner=fresh, save=lambda r, p: None)
    return rs, fresh


def test_a_confirmed_drift_with_no_time_left_keeps_every_row_warm_and_names_them(tmp_path, monkeypatch):
    # 31 s left: the first fresh trial (10 s) leaves 21, enough for the two that confirm it (2 x
    # 10); then 8 s are left, short of the competing config's fresh trial: it is not measured
    # again, the knee keeps its warm trials too (like with like), and the check names it.
    from loaderbench.render import footer

    rs, fresh = _drift_with_deadline(tmp_path, monkeypatch, 31.0)
    drift = rs.sweep.drift
    assert drift.confirmed and drift.remeasured == [] and not drift.unconfirmed_for_budget
    assert [w for w, _, _ in fresh.calls] == [2, 2]  # the knee's two fresh trials, nothing more
    assert [r.settings.num_workers for r in rs.results if r.settings.key() in drift.not_remeasured] == [4]
    assert [len(r.trials) for r in rs.results] == [1, 2, 1]  # the knee: its warm trial and the warm repeat
    line = next(x for x in footer.drift_lines(rs, lambda s: f"{s.num_workers} workers"))
    assert "--time-budget left no time to measure the configs competing with it again (4 workers)" in line


def test_a_tripped_drift_with_no_time_to_confirm_it_stays_one_unconfirmed_check(tmp_path, monkeypatch):
    # 12 s left: after the first fresh trial (10 s), the two that would confirm it (20 s) do not
    # fit, nor one more warm trial (3 s): the check is that one trial, unconfirmed, and every row
    # keeps its warm trials.
    from loaderbench.render import footer

    rs, fresh = _drift_with_deadline(tmp_path, monkeypatch, 12.0)
    drift = rs.sweep.drift
    assert drift.unconfirmed_for_budget and not drift.confirmed and drift.remeasured == []
    assert [w for w, _, _ in fresh.calls] == [2] and len(drift.fresh_trials_samples_per_s) == 1
    assert [len(r.trials) for r in rs.results] == [1, 1, 1]
    line = next(x for x in footer.drift_lines(rs, lambda s: f"{s.num_workers} workers"))
    assert "--time-budget left no time to confirm it with one more trial of each kind" in line
    # 25 s left: no time for the second fresh trial (10 s after the warm one), time for one more
    # warm trial (3 s), a repeat the knee keeps; the check stays unconfirmed.
    rs, fresh = _drift_with_deadline(tmp_path, monkeypatch, 25.0)
    drift = rs.sweep.drift
    assert drift.unconfirmed_for_budget and not drift.confirmed
    assert [w for w, _, _ in fresh.calls] == [2] and [len(r.trials) for r in rs.results] == [1, 2, 1]
    assert drift.warm_trials_samples_per_s == pytest.approx([16 / 0.013] * 2, rel=0.01)
    line = next(x for x in footer.drift_lines(rs, lambda s: f"{s.num_workers} workers"))
    assert ("measured -25.7% in a fresh process against its warm trial, past the drift threshold (10%); "
            "--time-budget left no time to confirm it with a second fresh trial, only for one more warm trial (a "
            "repeat it keeps): warm 1,231 / 1,231, fresh 914 samples/s") in line
    # The pick's figure (its warm trials, 16 / 0.013 = 1,231 samples/s) is contradicted by the fresh
    # trial (16 / 0.0175 = 914, -26%): the recommendation says so in the default output.
    from loaderbench.conclusions import Knee

    [knee] = [f for f in rs.recommendation.findings if isinstance(f, Knee)]
    assert knee.settings.num_workers == 2 and knee.samples_per_s == pytest.approx(16 / 0.013, rel=0.01)
    assert knee.fresh_samples_per_s == pytest.approx(16 / 0.0175, rel=0.01) and knee.drift_threshold == pytest.approx(0.1)
    assert ("A fresh process measured it again at 914 samples/s (-26%), past the 10% drift threshold, and "
            "--time-budget left no time to settle which holds: read its figure as uncertain by 26%, and so the pick "
            "among configs within that of it (give a larger --time-budget, or --isolation process).") in " ".join(
        footer.footer_lines(rs))
    # Settled (the check confirmed or not in time), nothing is said beside the pick.
    rs, _ = _drift_with_deadline(tmp_path, monkeypatch, 100.0)
    assert "A fresh process measured it again" not in " ".join(footer.footer_lines(rs))


def test_the_trials_that_confirm_a_drift_leave_the_picks_sustained_trial_its_time(tmp_path, monkeypatch):
    # 31 s left: the first fresh trial (10 s) leaves 21, enough for the two that confirm it (20 s)
    # alone, not with 5 s kept for the pick's longer window: the check stays one trial, and the
    # one more warm trial (3 s + 5 kept) is taken.
    rs, fresh = _drift_with_deadline(tmp_path, monkeypatch, 31.0, keep_s=5.0)
    drift = rs.sweep.drift
    assert drift.unconfirmed_for_budget and not drift.confirmed
    assert [w for w, _, _ in fresh.calls] == [2] and [len(r.trials) for r in rs.results] == [1, 2, 1]
    # With 19 s kept, not even the warm trial fits (3 + 19 > 21).
    rs, fresh = _drift_with_deadline(tmp_path, monkeypatch, 31.0, keep_s=19.0)
    assert rs.sweep.drift.unconfirmed_for_budget and [len(r.trials) for r in rs.results] == [1, 1, 1]
    # Nothing kept: confirmed, as before.
    rs, fresh = _drift_with_deadline(tmp_path, monkeypatch, 31.0)
    assert rs.sweep.drift.confirmed and [w for w, _, _ in fresh.calls] == [2, 2]


def test_a_knee_picked_on_a_lucky_trial_is_settled_by_its_warm_repeat_when_no_fresh_one_fits(tmp_path, monkeypatch):
    # The knee (2 workers) read 1,231 samples/s once, then 914 fresh (-26%); 25 s left: no time to
    # confirm, time for one warm trial, which reads 914 too (16 / 0.0175): the first trial was
    # lucky. The knee's figure is now its two warm trials' median, 1,072; 4 workers (1,231) are
    # 15% faster and the pick; the fresh trial contradicts no figure the recommendation gives.
    from loaderbench.conclusions import Knee
    from loaderbench.render import footer

    rs, fresh = _drift_with_deadline(tmp_path, monkeypatch, 25.0,
                                     knee_again=Outcome(status="ok", trial=trial(0.0055, 0.012)))
    assert [w for w, _, _ in fresh.calls] == [2] and rs.sweep.drift.unconfirmed_for_budget
    two = next(r for r in rs.results if r.settings.num_workers == 2)
    assert two.summary.samples_per_s == pytest.approx((16 / 0.013 + 16 / 0.0175) / 2, rel=0.01)
    [knee] = [f for f in rs.recommendation.findings if isinstance(f, Knee)]
    assert knee.settings.num_workers == 4 and knee.fresh_samples_per_s is None
    assert "A fresh process measured it again" not in " ".join(footer.footer_lines(rs))


def test_a_drift_the_second_fresh_trial_does_not_confirm_changes_nothing(tmp_path):
    # The first fresh trial of the knee reads 26% slow, the second as the warm ones: noise, not
    # drift. The knee's extra warm trial is a repeat it keeps; nothing is measured again and the
    # warm trials rank the configs; the footer says so.
    from dataclasses import replace

    from loaderbench.render.footer import search_lines

    answers = iter([Outcome(status="ok", trial=trial(0.0055, 0.012)), ok(2)])
    warm = FakeRunner({0: ok(0), 2: ok(2), 4: ok(4)})
    fresh = FakeRunner({2: lambda: next(answers), 4: ok(4)})
    rs = run_sweep(replace(config(), repeats=1), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=warm, fresh_runner=fresh, save=lambda r, p: None)
    drift = rs.sweep.drift
    assert [w for w, _, _ in fresh.calls] == [2, 2]
    assert [w for w, _, _ in warm.calls].count(2) == 2
    assert not drift.confirmed and drift.remeasured == []
    assert drift.fresh_trials_samples_per_s == pytest.approx([16 / 0.0175, 16 / 0.013], rel=0.01)
    assert [len(r.trials) for r in rs.results] == [1, 2, 1]
    assert rs.recommendation.settings.num_workers == 2
    text = " ".join(search_lines(rs))
    assert "fresh 914 / 1,231 and warm 1,231 / 1,231 samples/s overlap: not confirmed" in text
    assert "x2" not in text  # the check's warm trial is a repeat, not one the search asked for


def test_a_knee_picked_on_a_lucky_trial_is_not_taken_for_drift(tmp_path):
    # 2 workers measured once at 1,231 samples/s (a lucky trial); measured again it reads 914
    # whether warm or fresh. Warm 1,231 / 914 and fresh 914 / 914 overlap: no drift, nothing
    # measured fresh beyond the check, and the knee keeps both warm trials.
    from dataclasses import replace

    warm_answers = iter([ok(2), Outcome(status="ok", trial=trial(0.0055, 0.012))])
    warm = FakeRunner({0: ok(0), 2: lambda: next(warm_answers), 4: ok(4)})
    fresh = FakeRunner({2: Outcome(status="ok", trial=trial(0.0055, 0.012)), 4: ok(4)})
    rs = run_sweep(replace(config(), repeats=1), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=warm, fresh_runner=fresh, save=lambda r, p: None)
    drift = rs.sweep.drift
    assert not drift.confirmed and drift.remeasured == []
    assert [w for w, _, _ in fresh.calls] == [2, 2]
    assert drift.warm_trials_samples_per_s == pytest.approx([16 / 0.013, 16 / 0.0175], rel=0.01)
    assert len(next(r for r in rs.results if r.settings.num_workers == 2).trials) == 2


def test_the_drift_threshold_grows_with_the_noise_the_repeats_showed():
    # Two configs repeated with spreads of 20% and 30% of their medians: one fresh trial must
    # move more than twice the median spread (50%) to count; without repeats, twice the tolerance.
    from loaderbench.analysis import summarize_config
    from loaderbench.model import ConfigResult
    from loaderbench.orchestration.drift import drift_threshold

    def repeated(step_a, step_b):
        r = ConfigResult(settings=settings(2), status="ok", trials=[trial(0.0, step_a), trial(0.0, step_b)])
        summarize_config(r)
        return r

    a = repeated(0.010, 0.012)  # 1,600 and 1,333/s: (1600 - 1333) / 1467 = 18.2%
    b = repeated(0.010, 0.013)  # 1,600 and 1,231/s: 26.1%
    spreads = [(1600 - 1600 / 1.2) / (1600 + 1600 / 1.2) * 2, (1600 - 1600 / 1.3) / (1600 + 1600 / 1.3) * 2]
    assert drift_threshold([a, b], 0.05) == pytest.approx(2 * (spreads[0] + spreads[1]) / 2, rel=0.01)
    assert drift_threshold([ConfigResult(settings=settings(2), status="ok", trials=[trial(0.0, 0.01)])], 0.05) == 0.10
    # A knee whose windows' rounds vary: its two trials' windows each known to 6.67% (rounds of 2
    # batches of 16 and 24 ms in turn, 10 rounds): two such windows differ by up to
    # 2 x sqrt(2) x 6.67% = 18.9% from their batches alone.
    waits = [0.004] + [0.004, 0.004, 0.020, 0.004] * 5  # (the first step is left out)
    knee = ConfigResult(settings=settings(2), status="ok", trials=[trial(0.0, 0.012, waits=waits)] * 2)
    assert drift_threshold([knee], 0.05, knee) == pytest.approx(2 * 2 ** 0.5 * 0.0667, abs=1e-3)


def test_no_drift_keeps_the_warm_trials_and_says_so(tmp_path):
    from dataclasses import replace

    warm = FakeRunner({0: ok(0), 2: ok(2), 4: ok(4)})
    fresh = FakeRunner({2: ok(2)})
    rs = run_sweep(replace(config(), repeats=1), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=warm, fresh_runner=fresh, save=lambda r, p: None)
    assert rs.sweep.drift.remeasured == [] and abs(rs.sweep.drift.change) < 0.01
    knee = [r for r in rs.results if r.settings.num_workers == 2][0]
    assert len(knee.trials) == 1  # the fresh trial is a check, not a repeat
    assert rs.sweep.drift.fresh_samples_per_s == pytest.approx(16 / 0.013, rel=0.01)
    assert [w for w, _, _ in fresh.calls] == [2]  # within the threshold: no second fresh trial


def test_a_fresh_check_within_the_tolerance_never_moves_the_pick(tmp_path):
    # Warm: 2 workers at 16 / 13.0 ms, 4 workers at 16 / 12.8 ms (1.5% apart: equal, so 2 is the
    # knee). The fresh check of 2 workers reads 7% slower (within twice the 5% tolerance). Folded
    # in as a repeat, it would pull 2 workers' median 3.5% down, 5% below 4 workers, and move the
    # pick to 4 on a measurement of another kind; the pick stays 2.
    from dataclasses import replace

    warm = FakeRunner({0: ok(0), 2: Outcome(status="ok", trial=trial(0.001, 0.012)),
                       4: Outcome(status="ok", trial=trial(0.0008, 0.012))})
    fresh = FakeRunner({2: Outcome(status="ok", trial=trial(0.002, 0.012))})
    rs = run_sweep(replace(config(), repeats=1, tolerance=0.05), output=tmp_path / "r.json", environment=ENV,
                   machine=MACHINE, runner=warm, fresh_runner=fresh, save=lambda r, p: None)
    drift = rs.sweep.drift
    assert drift.config.startswith("w2-") and drift.change == pytest.approx(0.013 / 0.014 - 1, abs=0.005)
    assert drift.remeasured == []
    assert rs.recommendation.settings.num_workers == 2


def test_baseline_settings_between_the_grids_counts_are_measured_first_by_the_search(tmp_path):
    # No --num-workers: the search may measure any count up to twice the grid's largest (2 CPUs:
    # grid 0,1,2), so num_workers=4 is a valid baseline; it is measured first and starts the headroom.
    cfg = build_config(None, {
        "dataset": {"kind": "tensor"}, "compute": {"step": ComputeSpec(kind="sleep", ms=12.0)},
        "grid": {"batch_size": (16,)}, "measure": {"repeats": 1}, "": {"baseline_settings": {"num_workers": 4}},
    })
    runner = FakeRunner({w: (lambda w=w: _pipeline_outcome(w)) for w in range(9)})
    from loaderbench.orchestration.plan import check_baseline_settings, plan

    resolved = resolve_defaults(cfg, MACHINE)
    check_baseline_settings(resolved, plan(resolved, MACHINE))  # no UsageError
    rs = run_sweep(resolved, output=tmp_path / "r.json", environment=ENV, machine=MACHINE, runner=runner,
                   save=lambda r, p: None)
    assert [w for w, _, kind in runner.calls if kind == "config"][0] == 4
    assert rs.analysis.headroom.settings.key().startswith("w4-") and rs.analysis.headroom.which == "current"


def test_a_stream_every_worker_replays_is_measured_as_a_grid(tmp_path):
    # Only a measured row shows the duplicates: the search is not used for such a stream.
    from dataclasses import replace

    from loaderbench.orchestration.preflight import WorkloadFacts

    runner = FakeRunner({0: ok(0), 2: ok(2), 4: ok(4)})
    facts = WorkloadFacts(sample_bytes=64, iterable=True, replicated_across_workers=True)
    rs = run_sweep(replace(config(), repeats=1, search="auto"), output=tmp_path / "r.json", environment=ENV,
                   machine=MACHINE, runner=runner, save=lambda r, p: None, facts=facts)
    assert sorted(w for w, _, _ in runner.calls) == [0, 2, 4] and rs.sweep.search is None


def test_a_budget_spent_before_the_search_measures_one_config_and_says_so(tmp_path):
    # The command started 200 s ago (a slow dataset check): --time-budget 120 is spent. The
    # search still measures one config (its probe) to have an answer, starts nothing more, and
    # the footer gives the time since the command started, past the budget.
    import time
    from dataclasses import replace

    from loaderbench.render.footer import search_lines

    runner = FakeRunner({w: (lambda w=w: ok(w)) for w in range(9)})
    cfg = replace(config(num_workers=(0, 1, 2, 4, 8)), repeats=3, search="auto", time_budget_s=120.0)
    rs = run_sweep(cfg, output=tmp_path / "r.json", environment=ENV, machine=MACHINE, runner=runner,
                   save=lambda r, p: None, started_at=time.monotonic() - 200.0)
    assert len([c for c in runner.calls if c[2] == "config"]) == 1
    assert rs.sweep.since_start_s >= 200.0
    text = " ".join(search_lines(rs))
    assert "measured 1 config (" in text and "since the command started, past --time-budget 120 s" in text


def test_the_step_that_makes_the_drift_check_run_needs_only_its_own_time(tmp_path):
    # Trials of 0.4 s and 1.6 s of budget left at the start (the report's 5 s kept apart:
    # measuring_budget_s). Two configs measured, 0.8 s left:
    # the third step fits alone (the check would not run without it, so no time is kept for
    # the check); three measured, 0.4 s left: no step fits with the check's two trials, so the
    # search stops and the check runs.
    import time
    from dataclasses import replace

    def slow(w):
        def make():
            time.sleep(0.4)
            return ok(w)
        return make

    from loaderbench.orchestration.budget import measuring_budget_s

    runner = FakeRunner({w: slow(w) for w in range(9)})
    fresh = FakeRunner({w: (lambda w=w: ok(w)) for w in range(9)})
    cfg = replace(config(num_workers=(0, 1, 2, 4, 8)), repeats=3, search="auto", time_budget_s=120.0)
    rs = run_sweep(cfg, output=tmp_path / "r.json", environment=ENV, machine=MACHINE, runner=runner,
                   fresh_runner=fresh, save=lambda r, p: None,
                   started_at=time.monotonic() - (measuring_budget_s(120.0) - 1.6))
    assert len([c for c in runner.calls if c[2] == "config"]) == 3
    assert rs.sweep.search.stopped.startswith("--time-budget reached")
    assert len(fresh.calls) == 1 and rs.sweep.drift is not None


def test_the_drift_checks_fresh_process_is_started_ahead_only_where_cpus_and_configs_allow(monkeypatch):
    from dataclasses import replace

    from loaderbench.machine import env
    from loaderbench.orchestration.drift import drift_may_follow

    cfg = build_config(None, {"dataset": {"kind": "tensor"}, "compute": {"step": ComputeSpec(kind="sleep", ms=12.0)}})
    monkeypatch.setattr(env, "usable_cpus", lambda: 2)
    assert not drift_may_follow(cfg)  # three imports queue on 2 CPUs
    monkeypatch.setattr(env, "usable_cpus", lambda: 16)
    assert drift_may_follow(cfg)  # the default worker grid: three counts or more
    one = replace(cfg, grid={**cfg.grid, "num_workers": (4,), "pin_memory": (False,), "prefetch": (False,)})
    assert not drift_may_follow(one)  # one config: no drift check
    # One worker count, pin_memory x prefetch on a GPU machine: four configs.
    assert drift_may_follow(replace(cfg, grid={**cfg.grid, "num_workers": (4,)}))


def test_the_warm_measuring_process_starts_before_this_process_imports_torch(monkeypatch, tmp_path):
    # detect_machine imports torch (seconds on 2 CPUs): the measuring process's own import runs
    # meanwhile, so it must have been started already.
    from loaderbench.measure.warm import WarmRunner
    from loaderbench.orchestration import execute as orchestrate

    seen = []

    class Stop(Exception):
        pass

    def prestart(self):
        seen.append(("prestart", self.one_config))

    def detect(*a, **k):
        seen.append(("detect_machine", None))
        raise Stop

    monkeypatch.setattr(WarmRunner, "prestart", prestart)
    monkeypatch.setattr(orchestrate, "detect_machine", detect)
    monkeypatch.setattr(orchestrate, "drift_may_follow", lambda config: True)
    with pytest.raises(Stop):
        orchestrate.execute_sweep(config(), output=tmp_path / "r.json")
    assert seen == [("prestart", False), ("prestart", True), ("detect_machine", None)]


def test_where_the_trials_time_went_adds_up_to_their_wall_time(tmp_path, monkeypatch):
    # Each trial takes 2.0 s of the (fake) clock; its record itemises 0.01 set-up, 0.5 first
    # batch, 0.2 warm-up, a window of 20 x 13 ms = 0.26, 0.3 of probes and 0.04 of stop: the
    # rest, 0.69 s per trial, is the measuring process's round trip.
    from dataclasses import replace
    from types import SimpleNamespace

    from loaderbench.orchestration import run as orchestrate

    clock = [100.0]
    monkeypatch.setattr(orchestrate, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def made() -> Outcome:
        clock[0] += 2.0
        t = replace(trial(0.001, 0.012), setup_s=0.01, warmup_s=0.2, probe_s=0.3, stop_s=0.04)
        return Outcome(status="ok", trial=t)

    rs = run_sweep(replace(config(), repeats=1), output=tmp_path / "r.json", environment=ENV, machine=MACHINE,
                   runner=FakeRunner({0: made, 2: made, 4: made}), save=lambda r, p: None)
    t = rs.sweep.timing
    assert t.trials == 3 and t.trial_wall_s == pytest.approx(6.0)
    assert t.window_s == pytest.approx(3 * 0.26) and t.probe_s == pytest.approx(0.9)
    assert t.other_s == pytest.approx(3 * (2.0 - 0.01 - 0.5 - 0.2 - 0.26 - 0.3 - 0.04))


def test_a_config_that_failed_is_not_predicted_as_if_it_had_not_been_tried():
    from loaderbench.orchestration.run import add_predictions
    from loaderbench.results import ResultSet

    rows = [helpers.result(settings(0), trial(0.032, 0.012)), helpers.result(settings(1), trial(0.020, 0.012)),
            helpers.result(settings(2), status="failed", error="OSError: read error")]
    rs = ResultSet(config={}, environment={}, results=rows)
    add_predictions(rs, [settings(w) for w in (0, 1, 2, 4)], usable_cpus=2)
    assert [p.settings.num_workers for p in rs.sweep.predictions] == [4]


def test_the_warm_up_loads_no_more_of_a_batch_than_an_eighth_of_the_memory_holds_with_its_copy(monkeypatch):
    # 1 MiB samples, batch 64, 64 MiB available: the warm-up in the sweep's own process loads 4
    # samples (8 MiB with their collated copy), not the batch of 64 (a 12 MiB sample at batch 20,000 once took 12 GiB there
    # before the preflight skipped the config).
    import torch
    from torch.utils.data import Dataset

    from loaderbench.machine import env
    from loaderbench.orchestration.validate import warm_up

    calls = []

    class Big(Dataset):
        def __len__(self):
            return 1000

        def __getitem__(self, i):
            calls.append(i)
            return torch.zeros(2**18)  # 1 MiB of float32

    monkeypatch.setattr(env, "memory_available_bytes", lambda: 64 * 2**20)
    cfg = config(batch_size=(64,))
    warm_up(Big(), cfg, sample_bytes=2**20)
    assert calls == list(range(4))
    calls.clear()
    warm_up(Big(), cfg)  # the sample's size unknown: the whole batch
    assert calls == list(range(64))


def test_a_search_that_ends_on_its_own_is_not_partial_without_a_drift_check_or_profile(tmp_path):
    # No fresh process and no profile after the search (as on several nodes): the result is still
    # analysed with the search's log in place, so an ended search reads as ended, not "stopped".
    from dataclasses import replace

    workers = (0, 1, 2, 3, 4, 6, 8)
    runner = FakeRunner({w: ok(w) for w in workers})
    cfg = replace(config(num_workers=workers), search="auto", repeats=1)
    rs = run_sweep(cfg, output=tmp_path / "r.json", environment=ENV, machine=MACHINE, runner=runner,
                   save=lambda r, p: None)
    assert rs.sweep.search is not None and not rs.sweep.interrupted
    assert len(rs.results) < len(workers)  # the search left configs of the grid unmeasured
    assert rs.analysis is not None and rs.analysis.partial is None


def test_a_search_the_budget_ended_before_more_workers_does_not_say_try_more_workers(tmp_path, monkeypatch):
    # The budget ends after the probe (4 workers: 64 ms a batch per worker, 16 ms a batch, a 12 ms
    # step: loader-bound at 250 samples/s). More workers were the search's next step: the advice
    # names the budget, not a flag to add, and predicts nothing beyond the settings.
    from loaderbench.conclusions import NotCleared, NotClearedCause
    from loaderbench.orchestration.search import Search
    from loaderbench.render import footer

    monkeypatch.setattr(Search, "out_of_time", lambda self: len(self.results) >= 1)
    rs, runner = _searched(tmp_path)
    assert [r.settings.num_workers for r in rs.results] == [4] and rs.sweep.search.budget_ended
    [nc] = [f for f in rs.recommendation.findings if isinstance(f, NotCleared)]
    assert nc.cause is NotClearedCause.NOT_REACHED and nc.by_budget and nc.not_reached == [6, 8, 12, 16]
    text = " ".join(footer.footer_lines(rs))
    assert ("The configs with more workers (6, 8, 12, 16 workers) were not reached: --time-budget ended the search "
            "before them; give a larger --time-budget to measure them.") in text
    assert "try more workers" not in text and "Beyond the settings" not in text
    assert rs.analysis.beyond_knobs is None
