"""A sweep on several nodes, end to end: two node agents on this host meet at a loopback
rendezvous (`--nnodes 2 --node-rank 0|1 --rdzv-endpoint 127.0.0.1:PORT`, gloo on the CPU), each
pinned to its own CPU where there are two, each reading its own data folder of sleep-based
samples (latency, not CPU: the ranks do not contend for the cores). The first test is the one
CI runs on every change; the others (2 ranks per node, torchrun, Slurm's variables, a throttled
node, the faults) are slow."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loaderbench.orchestration.distributed import free_port
from tests.fixture_datasets import write_latency_folder

ROOT = Path(__file__).resolve().parents[1]
HOST = socket.gethostname()
SWEEP = ["--dataset", "tests.fixture_datasets:make_folder_latency", "--compute", "sleep:5", "--batch-size", "4",
         "--batches", "5", "--min-time", "0.3", "--repeats", "1", "--search", "grid", "--no-progress"]


def _pinned(cpu: int) -> list[str]:
    """taskset to one CPU, when there are two to give the two nodes."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return ["taskset", "-c", str(cpus[cpu])] if shutil.which("taskset") and len(cpus) >= 2 else []


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    # TMPDIR: the measuring processes' job files live under tmp_path, so their command lines name
    # it (how the leftover check tells this test's processes from any other's).
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT), **extra}


def start_node(tmp_path: Path, rank: int, port: int, *args: str, latency_ms: float = 5.0, pin: bool = True,
               node_flags: bool = True, env: dict[str, str] | None = None) -> subprocess.Popen:
    data = write_latency_folder(tmp_path / f"data{rank}", latency_ms)
    flags = ["--nnodes", "2", "--node-rank", str(rank)] if node_flags else []
    cmd = [*(_pinned(rank) if pin else []), sys.executable, "-m", "loaderbench", "sweep", *SWEEP, *flags,
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-timeout", "120", "--data", data,
           "--output", str(tmp_path / f"r{rank}.json"), *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or _env(tmp_path), start_new_session=True)


def run_nodes(tmp_path: Path, *args: str, node1: tuple[str, ...] = (), timeout: float = 240, **kw) \
        -> tuple[list[tuple[int, str, str]], dict]:
    port = free_port()
    procs = [start_node(tmp_path, 0, port, *args, **kw.get("n0", {}))]
    time.sleep(0.3)
    procs.append(start_node(tmp_path, 1, port, *args, *node1, **kw.get("n1", {})))
    try:
        outs = [(p, *p.communicate(timeout=timeout)) for p in procs]
    finally:
        for p in procs:
            _kill_tree(p.pid)
    out = tmp_path / "r0.json"
    return [(p.returncode, o, e) for p, o, e in outs], (json.loads(out.read_text()) if out.exists() else {})


def _kill_tree(pid: int) -> None:
    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass


def _leftovers(tmp_path: Path) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if "loaderbench.measure.child" in " ".join(p.info["cmdline"] or [])
            and str(tmp_path) in " ".join(p.info["cmdline"] or [])]


def _rate(t: dict) -> float:
    return t["samples"] / sum(t["step_s"])


def test_two_node_agents_measure_every_config_on_both_and_node_0_writes(tmp_path):
    (n0, n1), data = run_nodes(tmp_path, "--num-workers", "0")
    assert n0[0] == 0 and n1[0] == 0, (n0[2], n1[2])
    assert "Traceback" not in n0[2] + n1[2]
    assert n1[1] == "" and not (tmp_path / "r1.json").exists()  # node 1 prints and writes nothing
    layout = data["environment"]["distributed"]
    assert (layout["world_size"], layout["local_world_size"], layout["nnodes"]) == (2, 1, 2)
    assert [(n["node_rank"], n["ranks"], n["host"]) for n in layout["nodes"]] == [(0, [0], HOST), (1, [1], HOST)]
    if _pinned(0):
        assert [n["usable_cpus"] for n in layout["nodes"]] == [1, 1]
    (row,) = data["results"]
    assert row["status"] == "ok", row["error"]
    (merged,) = row["trials"]
    ranks = merged["rank_trials"]
    assert [(t["rank"], t["node_rank"], t["host"]) for t in ranks] == [(0, 0, HOST), (1, 1, HOST)]
    assert len(ranks[0]["step_s"]) == len(ranks[1]["step_s"])  # the same agreed window on both nodes
    s = row["summary"]
    by_node = {n["node_rank"]: n for n in s["nodes"]}
    assert [n["ranks"] for n in s["nodes"]] == [[0], [1]]
    # Each node's samples/s is its rank's; the job's is their sum; the step's all-reduce keeps
    # the two nodes in lockstep, so they move at the same pace.
    assert by_node[0]["samples_per_s"] == pytest.approx(_rate(ranks[0]))
    assert s["samples_per_s"] == pytest.approx(by_node[0]["samples_per_s"] + by_node[1]["samples_per_s"])
    assert by_node[0]["samples_per_s"] == pytest.approx(by_node[1]["samples_per_s"], rel=0.05)
    assert s["slowest_node"] == ranks[s["slowest_rank"]]["node_rank"]
    view = data["analysis"]["per_node"]  # the per-node view of the recommended (the only) config
    assert [(n["figures"]["node_rank"], n["binds"]) for n in view["nodes"]] == [
        (0, s["slowest_node"] == 0), (1, s["slowest_node"] == 1)]
    assert view["slowest_rank"] == s["slowest_rank"] and view["step_stall_fraction"] == s["step_stall_fraction"]
    assert "distributed: 2 ranks on 2 nodes (1 per node)" in n0[1]
    assert f"Binds: node {s['slowest_node']} ({HOST}), rank {s['slowest_rank']}" in n0[1]
    assert not _leftovers(tmp_path)


@pytest.mark.slow
def test_a_throttled_node_is_named_as_the_one_that_binds(tmp_path):
    # Node 1's folder says 15 ms per sample, node 0's 5 ms: node 1's loader is 3x slower.
    (n0, n1), data = run_nodes(tmp_path, "--num-workers", "0", n1={"latency_ms": 15.0})
    assert n0[0] == 0 and n1[0] == 0, (n0[2], n1[2])
    (row,) = data["results"]
    s = row["summary"]
    assert (s["slowest_rank"], s["slowest_node"]) == (1, 1)
    slow, fast = s["nodes"][1], s["nodes"][0]
    assert slow["stall_fraction"] > fast["stall_fraction"]
    assert fast["samples_per_s"] == pytest.approx(slow["samples_per_s"], rel=0.05)  # held back by node 1
    assert f"Binds: node 1 ({HOST}), rank 1" in n0[1]


@pytest.mark.slow
def test_two_ranks_per_node_with_the_node_rank_from_slurm(tmp_path):
    # 4 ranks on 2 CPUs: not pinned (each rank's main process needs a CPU of its node). Node 1
    # takes its count and rank from SLURM_NNODES / SLURM_NODEID.
    slurm = _env(tmp_path, SLURM_NNODES="2", SLURM_NODEID="1")
    (n0, n1), data = run_nodes(tmp_path, "--num-workers", "0", "--nproc-per-node", "2",
                               n0={"pin": False}, n1={"pin": False, "node_flags": False, "env": slurm})
    assert n0[0] == 0 and n1[0] == 0, (n0[2], n1[2])
    layout = data["environment"]["distributed"]
    assert (layout["world_size"], layout["local_world_size"], layout["nnodes"]) == (4, 2, 2)
    assert [n["ranks"] for n in layout["nodes"]] == [[0, 1], [2, 3]]
    ranks = data["results"][0]["trials"][0]["rank_trials"]
    assert [(t["rank"], t["node_rank"]) for t in ranks] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert [n["ranks"] for n in data["results"][0]["summary"]["nodes"]] == [[0, 1], [2, 3]]


@pytest.mark.slow
def test_torchrun_on_two_nodes_runs_the_same_sweep(tmp_path):
    port = free_port()
    procs = []
    for rank in (0, 1):
        data = write_latency_folder(tmp_path / f"data{rank}", 5.0)
        procs.append(subprocess.Popen(
            [*_pinned(rank), sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--local-addr", "127.0.0.1",
             "-m", "loaderbench", "sweep", *SWEEP, "--num-workers", "0", "--data", data,
             "--output", str(tmp_path / f"r{rank}.json")],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
            start_new_session=True))
        time.sleep(0.3)
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            _kill_tree(p.pid)
    assert [p.returncode for p in procs] == [0, 0], outs
    # torch's rendezvous numbers the nodes (GROUP_RANK); its node 0 writes, with its own --output.
    written = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in (0, 1) if (tmp_path / f"r{r}.json").exists()]
    assert len(written) == 1
    layout = written[0]["environment"]["distributed"]
    assert (layout["launcher"], layout["nnodes"]) == ("torchrun", 2)
    assert len(written[0]["results"][0]["trials"][0]["rank_trials"]) == 2


@pytest.mark.slow
def test_a_node_that_never_joins_is_one_line_naming_the_endpoint(tmp_path):
    port = free_port()
    p = start_node(tmp_path, 0, port, "--rdzv-timeout", "4")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith(f"loaderbench: error: rendezvous at 127.0.0.1:{port}: 1 of 2 nodes joined within 4 s")
    assert not (tmp_path / "r0.json").exists()
    # Node 1 alone: nothing listens at the endpoint.
    q = start_node(tmp_path, 1, free_port(), "--rdzv-timeout", "2")
    _, err = q.communicate(timeout=120)
    assert q.returncode == 2 and "nothing answered within 2 s, so 1 of 2 nodes (this one) joined" in err


@pytest.mark.slow
def test_nodes_started_with_different_settings_are_refused_before_measuring(tmp_path):
    (n0, n1), data = run_nodes(tmp_path, "--num-workers", "0", node1=("--min-time", "0.5"))
    line = ("loaderbench: error: nodes started with different settings: --min-time (measure.min_time_s) is 0.3 on "
            f"node 0 ({HOST}) and 0.5 on node 1 ({HOST}); start every node with the same settings")
    assert n0[0] == 2 and n1[0] == 2, (n0[2], n1[2])
    assert n0[2].startswith(line) and n1[2].startswith(line)
    assert len(n0[2].strip().splitlines()) == 1 and len(n1[2].strip().splitlines()) == 1
    assert data == {} and not _leftovers(tmp_path)


@pytest.mark.slow
def test_a_node_that_dies_mid_sweep_is_named_and_what_was_measured_is_saved(tmp_path):
    port = free_port()
    args = ("--num-workers", "0,1", "--min-time", "1.5")
    p0 = start_node(tmp_path, 0, port, *args)
    time.sleep(0.3)
    p1 = start_node(tmp_path, 1, port, *args)
    out = tmp_path / "r0.json"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (out.exists() and json.loads(out.read_text() or "{}").get("results")):
            time.sleep(0.2)
        time.sleep(1.0)  # the second config is under way
        _kill_tree(p1.pid)  # node 1 dies: its agent, ranks and measuring processes
        stdout, err = p0.communicate(timeout=120)
    finally:
        _kill_tree(p0.pid)
        _kill_tree(p1.pid)
    assert p0.returncode == 1, err
    assert "Traceback" not in err
    lost = f"node 1 ({HOST}) rank 1: stopped answering (no heartbeat for 15 s): its node was lost"
    assert err.strip().splitlines()[-1].startswith(f"loaderbench: error: {lost}; the configs after it were not run")
    data = json.loads(out.read_text())
    assert data["sweep"]["lost"] == {"rank": 1, "after_s": 15.0, "node_rank": 1, "host": HOST}
    first, second = data["results"]
    assert first["status"] == "ok" and len(first["trials"]) == 1  # measured before: kept
    assert second["status"] in ("failed", "skipped") and lost in second["error"]
    assert "its node was lost" in stdout  # the row says so in the table too
    time.sleep(1)
    for p in _leftovers(tmp_path):
        p.send_signal(signal.SIGKILL)
