"""Distributed sweeps end to end: 2 CPU ranks over gloo on one machine.

Each test starts `loaderbench sweep --nproc-per-node 2` (torch's elastic launcher, what torchrun
runs), so every config runs as 2 measuring processes that form a gloo process group.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _sweep(tmp_path: Path, *args: str, timeout: float = 240) -> tuple[subprocess.CompletedProcess, dict]:
    import os

    out = tmp_path / "r.json"
    # TMPDIR: the measuring processes' job files live under tmp_path, so their command lines
    # name it (how the leftover check below tells this test's processes from any other's).
    proc = subprocess.run(
        [sys.executable, "-m", "loaderbench", "sweep", "--nproc-per-node", "2", "--output", str(out),
         "--no-progress", "--repeats", "1", *([] if "--search" in args else ["--search", "grid"]), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    data = json.loads(out.read_text()) if out.exists() else {}
    return proc, data


def _rate(t: dict) -> float:
    return t["samples"] / sum(t["step_s"])


def _stall(t: dict) -> float:
    return sum(t["data_wait_s"]) / sum(t["step_s"])


@pytest.mark.slow
def test_two_ranks_gather_sum_and_slowest_rank_decides(tmp_path):
    # Rank 1's samples sleep 2 ms each (in its main process: num_workers=0), so a batch of 16
    # costs it >= 32 ms against a 10 ms step: rank 1 stalls, and rank 0, which waits for it in
    # the step's all-reduce, does not (its wait shows up as compute time).
    proc, data = _sweep(
        tmp_path, "--dataset", "tests.fixture_datasets:make_rank_skewed", "--compute", "sleep:10",
        "--batch-size", "16", "--batches", "8", "--min-time", "0.3", "--warmup-batches", "2",
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    # Per-rank CPU budget: 2 usable CPUs shared by 2 ranks -> 1 CPU per rank -> workers 0 and 1.
    assert data["config"]["grid"]["num_workers"] == [0, 1]
    assert data["environment"]["distributed"]["world_size"] == 2
    ceiling = data["ceilings"]["compute"]["16"]
    assert ceiling["samples_per_s"] == pytest.approx(2 * 16 / 0.010)
    w0 = next(r for r in data["results"] if r["settings"]["num_workers"] == 0)
    assert w0["status"] == "ok"
    (merged,) = w0["trials"]
    ranks = merged["rank_trials"]
    assert [t["rank"] for t in ranks] == [0, 1] and merged["world_size"] == 2
    # Both ranks measured the same window: same number of batches (agreed start and end).
    assert len(ranks[0]["step_s"]) == len(ranks[1]["step_s"])
    # Synchronous: the ranks move at the same pace (the all-reduce couples them) ...
    assert _rate(ranks[0]) == pytest.approx(_rate(ranks[1]), rel=0.05)
    # ... rank 1 waits for data, rank 0 waits in the all-reduce instead.
    assert _stall(ranks[1]) > 0.5 and _stall(ranks[0]) < 0.25
    # Slowest-rank rule: the job's stall fraction and verdict are rank 1's.
    assert merged["rank"] == 1
    summary = w0["summary"]
    assert summary["slowest_rank"] == 1
    assert summary["stall_fraction"] == pytest.approx(_stall(ranks[1]))
    assert summary["verdict"] == "loader-bound"
    # Throughput is the sum over ranks; a rank's batch costs at least 16 x 2 ms of loading.
    assert summary["samples_per_s"] == pytest.approx(_rate(ranks[0]) + _rate(ranks[1]))
    assert summary["samples_per_s"] < 2 * 16 / 0.032
    assert summary["rank_samples_per_s"] == pytest.approx([_rate(ranks[0]), _rate(ranks[1])])
    assert "distributed: 2 ranks" in proc.stdout and "r1" in proc.stdout


@pytest.mark.slow
def test_failure_or_hang_on_one_rank_ends_that_config_and_the_sweep_goes_on(tmp_path):
    proc, data = _sweep(
        tmp_path, "--dataset", "tests.fixture_datasets:make_rank_faulty", "--compute", "sleep:5",
        "--batch-size", "8", "--num-workers", "0,1,2", "--batches", "5", "--min-time", "0.2",
        "--config-timeout", "15",
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    by_workers = {r["settings"]["num_workers"]: r for r in data["results"]}
    assert by_workers[0]["status"] == "ok"
    raised = by_workers[1]
    assert raised["status"] == "failed"
    assert raised["error"].startswith("rank 1: ") and "corrupt sample" in raised["error"]
    assert "other 1 rank stopped" in raised["error"]
    hung = by_workers[2]
    assert hung["status"] == "hung" and hung["error"].startswith("rank 1: ")
    assert data["recommendation"]["settings"]["num_workers"] == 0
    # No measuring process or worker outlives the sweep.
    leftovers = [
        p for p in psutil.process_iter(["cmdline"])
        if "loaderbench.measure.child" in " ".join(p.info["cmdline"] or []) and str(tmp_path) in " ".join(p.info["cmdline"] or [])
    ]
    assert not leftovers


def test_nproc_per_node_bad_values_are_one_line_errors(tmp_path):
    for value in ("0", "two", "-1"):
        p = subprocess.run(
            [sys.executable, "-m", "loaderbench", "sweep", "--nproc-per-node", value, "--dataset", "tensor"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )
        assert p.returncode == 2, p.stderr
        assert "--nproc-per-node" in p.stderr and "Traceback" not in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1


def test_nproc_per_node_under_a_launcher_is_refused(tmp_path):
    import os

    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    p = subprocess.run(
        [sys.executable, "-m", "loaderbench", "sweep", "--nproc-per-node", "2", "--dataset", "tensor"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=env,
    )
    assert p.returncode == 2 and "already runs under a launcher" in p.stderr


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(_gpus() < 2, reason="needs 2 CUDA GPUs")
def test_two_gpu_ranks_over_nccl(tmp_path):
    # spin:20 is a 20 ms GPU kernel: each rank's ceiling is batch / 20 ms; with 2 workers per
    # rank the tensor loader keeps up, so both GPUs run near their own ceiling, over NCCL.
    proc, data = _sweep(
        tmp_path, "--dataset", "tensor", "--compute", "spin:20", "--batch-size", "32",
        "--num-workers", "2", "--pin-memory", "on", "--prefetch", "on", "--batches", "20",
        "--min-time", "1",
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = data["results"]
    assert row["status"] == "ok", row.get("error")
    (merged,) = row["trials"]
    assert len(merged["rank_trials"]) == 2
    ceiling = data["ceilings"]["compute"]["32"]
    assert len(ceiling["rank_samples_per_s"]) == 2
    for rate, rank_ceiling in zip(row["summary"]["rank_samples_per_s"], ceiling["rank_samples_per_s"]):
        assert rate > 0.9 * rank_ceiling
    # Both GPUs were busy (NVML is read per rank on its own device).
    assert all((t["gpu_util_pct"] or 0) > 50 for t in merged["rank_trials"])


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(_gpus() < 1, reason="needs CUDA")
def test_one_rank_matches_the_single_process_sweep(tmp_path):
    args = ["--dataset", "tensor", "--compute", "spin:20", "--batch-size", "32", "--num-workers", "2",
            "--pin-memory", "on", "--prefetch", "on", "--batches", "20", "--min-time", "1"]
    out1 = tmp_path / "single.json"
    single = subprocess.run(
        [sys.executable, "-m", "loaderbench", "sweep", *args, "--repeats", "1", "--no-progress",
         "--output", str(out1)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert single.returncode == 0, single.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "loaderbench", "sweep", *args, "--repeats", "1", "--no-progress",
         "--nproc-per-node", "1", "--output", str(tmp_path / "one.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    a = json.loads(out1.read_text())["results"][0]["summary"]["samples_per_s"]
    b = json.loads((tmp_path / "one.json").read_text())["results"][0]["summary"]["samples_per_s"]
    assert b == pytest.approx(a, rel=0.05)


SMALL = ["--dataset", "tensor", "--compute", "sleep:10", "--num-workers", "0", "--batches", "5",
         "--min-time", "0.2", "--repeats", "1", "--no-progress"]


@pytest.mark.slow
def test_torchrun_runs_the_same_sweep(tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "loaderbench", "sweep", *SMALL, "--output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    dist = data["environment"]["distributed"]
    assert {k: dist[k] for k in ("world_size", "local_world_size", "launcher", "nnodes")} == {
        "world_size": 2, "local_world_size": 2, "launcher": "torchrun", "nnodes": 1}
    assert [n["ranks"] for n in dist["nodes"]] == [[0, 1]]
    (row,) = data["results"]
    assert len(row["trials"][0]["rank_trials"]) == 2
    assert p.stdout.count("results saved") == 0 and p.stderr.count("results saved") == 1  # rank 0 alone


@pytest.mark.slow
def test_other_launchers_rank_0_hosts_the_store_and_waits_for_the_followers(tmp_path):
    # A launcher that only sets RANK/WORLD_SIZE/MASTER_* (no torchrun agent store): rank 0
    # hosts the store and does not leave before the follower has read "stop".
    import os

    from loaderbench.orchestration.distributed import free_port

    out = tmp_path / "r.json"
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "loaderbench", "sweep", *SMALL, "--output", str(out)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    results = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert results[1] == ("", "")  # the follower prints nothing
    data = json.loads(out.read_text())
    assert data["environment"]["distributed"]["launcher"] == "env"
    assert len(data["results"][0]["trials"][0]["rank_trials"]) == 2


@pytest.mark.slow
def test_sigterm_stops_every_rank_and_its_measuring_process(tmp_path):
    # A launcher stopped from outside (a CI timeout, a scheduler) must leave no measuring process
    # behind: each runs in its own session, so every rank has to kill its own (seen with 2 GPUs).
    import signal
    import time

    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        # Rank 1's measuring process is stuck loading (not in a collective, where gloo would
        # notice a dead peer at once; NCCL does not).
        [sys.executable, "-m", "loaderbench", "sweep", "--nproc-per-node", "2",
         "--dataset", "tests.fixture_datasets:make_rank_stuck", "--batch-size", "4",
         "--compute", "sleep:20", "--num-workers", "0", "--batches", "5", "--min-time", "60",
         "--repeats", "1", "--no-progress", "--output", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )

    def children() -> list[psutil.Process]:
        return [p for p in psutil.Process(proc.pid).children(recursive=True)
                if "loaderbench.measure.child" in " ".join(p.cmdline())]

    deadline = time.monotonic() + 90
    measuring: list[psutil.Process] = []
    while time.monotonic() < deadline and len(measuring) < 2:
        try:
            measuring = children()
        except psutil.Error:
            pass
        time.sleep(0.5)
    assert len(measuring) >= 2, "both ranks' measuring processes should be running"
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "loaderbench: stopped by the launcher (SIGTERM) before any config finished" in err
    _, alive = psutil.wait_procs(measuring, timeout=10)
    assert not alive


def test_more_ranks_than_cpus_is_refused_before_any_rank_starts(tmp_path):
    import os

    too_many = str((len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) + 1)
    p = subprocess.run(
        [sys.executable, "-m", "loaderbench", "sweep", "--nproc-per-node", too_many, "--dataset", "tensor",
         "--device", "cpu", "--output", str(tmp_path / "r.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert p.returncode == 2 and "usable CPUs" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()
