"""The isolation boundary: failure causes, and run_isolated with a fake measuring process (no
torch: each test takes a second or so)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from loaderbench.measure.isolation import SHM_FIX, classify_failure, run_isolated
from loaderbench.model import ComputeSpec, DatasetSpec, MeasureSpec, TrialJob
from tests.helpers import settings


def test_worker_deaths_and_limits_are_classified():
    assert classify_failure("RuntimeError: DataLoader worker (pid 12) is killed by signal: Bus error.") == SHM_FIX
    assert "fd limit" in classify_failure("OSError: [Errno 24] Too many open files")
    assert "GPU out of memory" in classify_failure("torch.OutOfMemoryError: CUDA out of memory. Tried")
    assert classify_failure(
        "RuntimeError: DataLoader worker (pid 77) is killed by signal: Segmentation fault."
    ) == "a DataLoader worker was killed by SIGSEGV (Segmentation fault)"
    assert classify_failure("worker (pid 5) is killed by signal: Killed.") == "a DataLoader worker was killed by SIGKILL (Killed)"
    assert classify_failure("worker (pid 5) is killed by signal: Unknown signal 99.") == (
        "a DataLoader worker was killed by signal: Unknown signal 99"
    )
    assert classify_failure("", -signal.SIGKILL) == "the measuring process was killed by SIGKILL (out of memory?)"
    assert classify_failure("", -signal.SIGBUS) == SHM_FIX
    assert classify_failure("Traceback...\nValueError: bad sample 5\n") == "ValueError: bad sample 5"
    assert classify_failure("", 3) == "exit code 3"


# ---- the isolation boundary, with a fake measuring process (no torch, fractions of a second) ----

FAKE = Path(__file__).resolve().parent / "fake_child.py"


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    """An 'interpreter' that runs tests/fake_child.py whatever module it is asked to run."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    script.chmod(0o755)
    return str(script)


def job(timeout_s: float = 30.0, first_batch_timeout_s: float | None = None) -> TrialJob:
    return TrialJob(settings(2), DatasetSpec(kind="tensor"), ComputeSpec(kind="sleep", ms=1.0), MeasureSpec(),
                    timeout_s=timeout_s, first_batch_timeout_s=first_batch_timeout_s)


def run(fake_python: str, mode: str, **kw) -> tuple:
    seen: list[int] = []
    env = dict(os.environ, FAKE_CHILD=mode, **kw.pop("env", {}))
    t0 = time.monotonic()
    out = run_isolated(job(**kw), on_batch=seen.append, python=fake_python, env=env)
    return out, seen, time.monotonic() - t0


def test_a_pickling_error_names_what_to_move_to_module_level_or_to_make_in_the_worker():
    local = classify_failure("AttributeError: Can't pickle local object 'Data.__init__.<locals>.<lambda>'")
    assert "Data.__init__.<locals>.<lambda> cannot be pickled" in local and "define it at module level" in local
    assert "multiprocessing_context='fork'" in local
    main = classify_failure("_pickle.PicklingError: Can't pickle <function <lambda> at 0x7f98>: attribute lookup "
                            "<lambda> on __main__ failed")
    assert "<lambda> cannot be pickled" in main and "module level" in main
    lock = classify_failure("TypeError: cannot pickle '_thread.lock' object")
    assert "a _thread.lock object cannot be pickled: create it in each worker" in lock


@pytest.mark.slow
def test_an_unpicklable_dataset_under_spawn_fails_at_once_with_the_fix():
    # A dataset holding a lambda, 2 workers under spawn: the row fails when the workers start,
    # with what to move and where, and no watchdog wait.
    from dataclasses import replace

    job = TrialJob(replace(settings(2), mp_context="spawn"),
                   DatasetSpec(kind="import", factory="tests.fixture_datasets:make_holds_lambda"),
                   ComputeSpec(kind="sleep", ms=5.0), MeasureSpec(batches=5, warmup_batches=1, min_time_s=0.0),
                   timeout_s=120)
    out = run_isolated(job, env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    assert out.status == "failed"
    assert "HoldsLambda.__init__.<locals>.<lambda> cannot be pickled" in out.error
    assert "define it at module level" in out.error


def test_a_trial_that_writes_its_result_is_ok_and_its_batches_are_reported(fake_python):
    out, seen, _ = run(fake_python, "ok")
    assert out.status == "ok" and out.trial is not None and out.trial.samples == 4
    assert seen == [0, 1] and out.last_batch == 1


def test_the_watchdog_kills_a_hung_trial_and_keeps_its_stacks(fake_python):
    out, _, wall = run(fake_python, "hang", timeout_s=1.0)
    assert out.status == "hung" and "no end within --config-timeout 1s (after batch 1)" in out.error
    assert 1.0 <= wall < 8.0


def test_a_result_written_before_the_exit_hangs_is_kept(fake_python):
    out, _, wall = run(fake_python, "result-then-hang", timeout_s=1.0)
    assert out.status == "ok" and out.trial is not None
    assert wall < 8.0


def test_a_crash_is_a_failed_row_with_the_last_line_as_its_cause(fake_python):
    out, _, _ = run(fake_python, "crash")
    assert out.status == "failed" and out.error == "ValueError: corrupt sample 17"
    assert "Traceback" in (out.detail or "")


def test_the_first_batch_deadline_ends_a_trial_that_never_starts(fake_python, tmp_path):
    script = Path(fake_python)
    # This child never prints a batch: a first-batch deadline of 1 s ends it, not the 30 s timeout.
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import time; time.sleep(3600)'\n")
    out, seen, wall = run(fake_python, "hang", timeout_s=30.0, first_batch_timeout_s=1.0)
    assert out.status == "hung" and out.error.startswith("no first batch within 1s") and seen == []
    assert wall < 8.0


def test_the_whole_process_tree_is_killed(fake_python, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    out, _, _ = run(fake_python, "children", timeout_s=1.5, env={"FAKE_CHILD_PIDFILE": str(pidfile)})
    assert out.status == "hung"
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the grandchild survived"
        time.sleep(0.05)
    assert json.loads(json.dumps(out.error))  # one line, JSON-able


def test_a_warm_process_serves_configs_and_a_failure_costs_one_config(fake_python):
    from dataclasses import replace

    from loaderbench.measure.warm import WarmRunner

    env = dict(os.environ, FAKE_SEED_1="fail", FAKE_SEED_3="crash", FAKE_SEED_5="hang")
    with WarmRunner(python=fake_python, env=env) as runner:
        outs = []
        for seed in range(7):
            seen: list[int] = []
            outs.append(runner(replace(job(timeout_s=1.0), seed=seed), on_batch=seen.append))
            assert seen == [0]
        # ok (kept process), failed (that process ends), ok (a fresh one), crash, ok, hang, ok.
        assert [o.status for o in outs] == ["ok", "failed", "ok", "failed", "ok", "hung", "ok"]
        assert outs[1].error == "ValueError: bad sample"
        assert "Segmentation fault" in outs[3].error or "SIG" in outs[3].error
        assert outs[5].error.startswith("no end within --config-timeout 1s (after batch 0)")
        pids = [o.trial.samples for o in outs if o.status == "ok"]
        assert len(set(pids)) == 4  # one process per stretch between failures
        assert runner.starts == 4


def test_a_prestarted_warm_process_serves_the_first_config_and_an_unused_one_ends_at_once(fake_python):
    from loaderbench.measure.warm import WarmRunner

    with WarmRunner(python=fake_python) as runner:
        runner.prestart()
        runner.prestart()  # a no-op while it runs
        assert runner.starts == 1
        assert runner(job(timeout_s=5.0)).status == "ok"
        assert runner.starts == 1  # the first config went to the process started early
    # One that never got a job (the sweep stopped on bad input) and is still starting up (10 s)
    # is killed, not waited for.
    unused = WarmRunner(python=fake_python, env=dict(os.environ, FAKE_START_S="10"))
    unused.prestart()
    t0 = time.monotonic()
    unused.close()
    assert time.monotonic() - t0 < 2.0 and unused._proc is None


def test_a_one_config_runner_gives_every_trial_a_process_that_measured_nothing_before(fake_python):
    from loaderbench.measure.warm import WarmRunner

    with WarmRunner(python=fake_python, one_config=True) as runner:
        runner.prestart()
        first = runner(job(timeout_s=5.0))
        assert runner.starts == 1  # the process started ahead took the first trial
        second = runner(job(timeout_s=5.0))
        assert runner.starts == 2
    assert first.status == second.status == "ok"
    assert first.trial.samples != second.trial.samples  # the fake child's pid: two processes


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_killing_a_tree_removes_the_shared_memory_segments_its_processes_left(tmp_path):
    # A measuring process whose worker was killed while creating a batch's segment leaves
    # /dev/shm/torch_<worker pid>_..., which nothing else removes: kill_tree removes the tree's.
    import subprocess

    from loaderbench.measure.isolation import kill_tree

    script = ("import os, time\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    open(f'/dev/shm/torch_{os.getpid()}_12345_1', 'wb').write(b'x' * 4096)\n"
              f"    open('{tmp_path}/child', 'w').write(str(os.getpid()))\n"
              "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 20
    while not (tmp_path / "child").exists() or not (tmp_path / "child").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    segment = Path(f"/dev/shm/torch_{int((tmp_path / 'child').read_text())}_12345_1")
    assert segment.exists()
    kill_tree(proc.pid)
    proc.wait()
    assert not segment.exists()
