"""The sweep on several nodes against its targets, on one CPU host (docs/benchmarks.md, section 11).

Two node agents meet at a loopback rendezvous (`--nnodes 2 --node-rank 0|1 --rdzv-endpoint
127.0.0.1:PORT`, gloo), each pinned to its own CPU with taskset where a run has 1 rank per node,
each reading its own data folder of sleep-based samples (tests.fixture_datasets:make_folder_latency:
latency, not CPU).

Usage (repository root, PYTHONPATH=.):
    python3 benchmarks/nodes_cpu.py equal [ROUNDS]      # 2 agents x 1 rank vs each node's own sweep; wall time
    python3 benchmarks/nodes_cpu.py throttled [RUNS]    # node 1 3x slower: named as binding; the job's pace
    python3 benchmarks/nodes_cpu.py whatif [ROUNDS]     # --what-if ranks=4 from 1 and 2 ranks vs 4 measured ranks
Result files and logs go under $OUT (default /tmp/lb-nodes); each command prints its figures.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from loaderbench.analysis.ranks import what_if_ranks
from loaderbench.analysis.statistics import step_max_stall
from loaderbench.orchestration.distributed import free_port
from loaderbench.results import read_results
from tests.fixture_datasets import write_latency_folder

OUT = Path(os.environ.get("OUT", "/tmp/lb-nodes"))
DATASET = ["--dataset", "tests.fixture_datasets:make_folder_latency", "--search", "grid", "--no-progress"]


def sweep_cmd(data: str, out: Path, *args: str, cpu: int | None = None) -> list[str]:
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    return [*pin, sys.executable, "-m", "loaderbench", "sweep", *DATASET, "--data", data, "--output", str(out), *args]


def quiet(max_busy_pct: float = 25.0, wait_s: float = 900.0) -> float:
    """Wait (up to `wait_s`) until the host's CPUs are under `max_busy_pct` busy over 3 s (run
    between this script's own runs, that is everyone else's load): the 2-core machine is
    shared, and a rank waiting on a busy core measures its neighbours. Returns that reading."""
    import psutil

    deadline = time.monotonic() + wait_s
    while (busy := psutil.cpu_percent(interval=3.0)) >= max_busy_pct and time.monotonic() < deadline:
        pass
    return busy


def run_all(cmds: list[list[str]], log: Path, stagger_s: float = 0.3) -> tuple[list[int], float]:
    """Start the commands (staggered) once the host is quiet, wait for all; return codes and
    the wall time of the first."""
    print(f"  (CPUs {quiet():.0f}% busy before {log.name})", flush=True)
    t0 = time.monotonic()
    procs = []
    with open(log, "w") as fh:
        for i, cmd in enumerate(cmds):
            if i:
                time.sleep(stagger_s)
            procs.append(subprocess.Popen(cmd, stdout=fh, stderr=fh))
        procs[0].wait()
        wall = time.monotonic() - t0
        for p in procs[1:]:
            p.wait()
    return [p.returncode for p in procs], wall


def nodes_cmds(datas: list[str], out: Path, *args: str, pin: bool = True, nproc: int = 1) -> list[list[str]]:
    port = free_port()
    return [sweep_cmd(d, out if r == 0 else out.with_name(out.stem + f"-node{r}.json"), *args,
                      "--nnodes", str(len(datas)), "--node-rank", str(r), "--rdzv-endpoint", f"127.0.0.1:{port}",
                      "--nproc-per-node", str(nproc), cpu=r if pin else None)
            for r, d in enumerate(datas)]


def rows(path: Path) -> dict[str, dict]:
    data = json.loads(path.read_text())
    return {r["key"]: r for r in data["results"] if r["status"] == "ok"}


def equal(rounds: int) -> None:
    """Target: per-node samples/s within 5% of each node's own single-node sweep; the job's sum
    within 5% of the sum; the 2-node sweep's wall time at most 1.3x the 1-node sweep's."""
    # 4,096 samples: each rank's epoch (its half of its node's folder, as DistributedSampler
    # cuts it) outlasts the window, so no worker restart at an epoch's start lands in it: with
    # 256, the ranks of the 2-node job restarted their workers twice as often as one node alone.
    datas = [write_latency_folder(OUT / f"equal-d{r}", 2.0, n=4096) for r in (0, 1)]
    grid = ["--compute", "sleep:10", "--batch-size", "8", "--num-workers", "0,1,2", "--min-time", "1",
            "--repeats", "3"]
    node_ratios, sum_ratios, walls = [], [], []
    for i in range(rounds):
        singles = [OUT / f"equal-{i}-single{r}.json" for r in (0, 1)]
        codes, wall1 = run_all([sweep_cmd(datas[r], singles[r], *grid, cpu=r) for r in (0, 1)],
                               OUT / f"equal-{i}-single.log", stagger_s=0.0)
        two = OUT / f"equal-{i}-two.json"
        codes2, wall2 = run_all(nodes_cmds(datas, two, *grid), OUT / f"equal-{i}-two.log")
        assert codes == [0, 0] and codes2 == [0, 0], (codes, codes2)
        walls.append(wall2 / wall1)
        own = [rows(p) for p in singles]
        for key, row in rows(two).items():
            nodes = {n["node_rank"]: n["samples_per_s"] for n in row["summary"]["nodes"]}
            alone = [own[r][key]["summary"]["samples_per_s"] for r in (0, 1)]
            ratios = [nodes[r] / alone[r] for r in (0, 1)]
            node_ratios.extend(ratios)
            sum_ratios.append(row["summary"]["samples_per_s"] / sum(alone))
            print(f"round {i} {key:26s} node 0 {nodes[0]:6.0f} vs {alone[0]:6.0f} ({ratios[0] - 1:+.1%}), node 1 "
                  f"{nodes[1]:6.0f} vs {alone[1]:6.0f} ({ratios[1] - 1:+.1%}), job {row['summary']['samples_per_s']:6.0f}"
                  f" vs {sum(alone):6.0f} ({sum_ratios[-1] - 1:+.1%})")
        print(f"round {i}: wall 2 nodes {wall2:.1f} s vs 1 node {wall1:.1f} s = {wall2 / wall1:.2f}x")
    worst = max(node_ratios, key=lambda x: abs(x - 1))
    print(f"per node: largest difference {worst - 1:+.1%} over {len(node_ratios)}; job sum: largest "
          f"{max(sum_ratios, key=lambda x: abs(x - 1)) - 1:+.1%}; wall: median {statistics.median(walls):.2f}x, "
          f"largest {max(walls):.2f}x")


def throttled(runs: int) -> None:
    """Target: node 1 (3x the latency) named as binding in every run; the job's per-rank rate
    within 5% of node 1's own single-node rate."""
    datas = [write_latency_folder(OUT / "thr-d0", 2.0), write_latency_folder(OUT / "thr-d1", 6.0)]
    grid = ["--compute", "sleep:10", "--batch-size", "8", "--num-workers", "0", "--min-time", "2", "--repeats", "1"]
    named, per_rank = 0, []
    for i in range(runs):
        two = OUT / f"thr-{i}-two.json"
        codes, _ = run_all(nodes_cmds(datas, two, *grid), OUT / f"thr-{i}.log")
        assert codes == [0, 0], codes
        (row,) = rows(two).values()
        s = row["summary"]
        named += s["slowest_node"] == 1
        per_rank.append(s["samples_per_s"] / 2)
        print(f"run {i}: binding node {s['slowest_node']} rank {s['slowest_rank']}; per rank {per_rank[-1]:.1f}/s; "
              f"nodes' stall {[round(n['stall_fraction'], 3) for n in s['nodes']]}")
    alone = []
    for i in range(3):
        p = OUT / f"thr-alone-{i}.json"
        codes, _ = run_all([sweep_cmd(datas[1], p, *grid, cpu=1)], OUT / f"thr-alone-{i}.log")
        (row,) = rows(p).values()
        alone.append(row["summary"]["samples_per_s"])
    ref = statistics.median(alone)
    errs = [x / ref - 1 for x in per_rank]
    print(f"node 1 named as binding in {named} of {runs}; node 1 alone {ref:.1f}/s (runs {[round(a, 1) for a in alone]}); "
          f"the job per rank: median {statistics.median(errs):+.1%}, largest {max(errs, key=abs):+.1%}")


def whatif(rounds: int) -> None:
    """Target: ranks=4 predicted from runs of 1 and of 2 ranks within 3 points of stall and 10%
    of samples/s of a measured 4-rank run (2 agents x 2 ranks). Samples wait 2 ms, or 80 ms
    with probability 0.05 (a slow read, drawn independently in every rank); the step sleeps
    40 ms, long against what the 4 ranks' own CPU work costs on 2 cores. A run holds about 100
    slow batches per rank: its own spike count moves its stall by a few points."""
    datas = [write_latency_folder(OUT / f"wi-d{r}", 2.0, spike=(0.05, 80.0)) for r in (0, 1)]
    grid = ["--compute", "sleep:40", "--batch-size", "4", "--num-workers", "0", "--min-time", "12", "--repeats", "3"]
    for i in range(rounds):
        paths = {k: OUT / f"wi-{i}-r{k}.json" for k in (1, 2, 4)}
        for k in (1, 2):
            codes, _ = run_all([sweep_cmd(datas[0], paths[k], *grid, "--nproc-per-node", str(k))],
                               OUT / f"wi-{i}-r{k}.log")
            assert codes == [0], codes
        codes, _ = run_all(nodes_cmds(datas, paths[4], *grid, pin=False, nproc=2), OUT / f"wi-{i}-r4.log")
        assert codes == [0, 0], codes
        measured = read_results(paths[4]).results[0]
        assert measured.summary is not None
        m_rate, m_stall = measured.summary.samples_per_s, measured.summary.stall_fraction
        m_step = step_max_stall(measured.trials) or 0.0
        print(f"round {i}: measured 4 ranks: {m_rate:.0f}/s, stall {m_stall:.1%} (slowest rank), "
              f"{m_step:.1%} (per-step maximum)")
        for k in (1, 2):
            row = read_results(paths[k]).results[0]
            w = what_if_ranks(row.trials, 4, row.settings)
            assert w is not None and w.samples_per_s is not None and w.stall_fraction is not None
            print(f"  from {k} rank{'s' if k > 1 else ''} (run: {w.measured_samples_per_s:.0f}/s, stall "
                  f"{w.measured_stall_fraction:.1%}; rho {w.correlation if w.correlation is None else round(w.correlation, 3)}): "
                  f"predicted {w.samples_per_s:.0f}/s ({w.samples_per_s / m_rate - 1:+.1%}), stall {w.stall_fraction:.1%} "
                  f"({100 * (w.stall_fraction - m_step):+.1f} points vs the per-step maximum, "
                  f"{100 * (w.stall_fraction - m_stall):+.1f} vs the slowest rank)")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    what = sys.argv[1] if len(sys.argv) > 1 else "equal"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else {"equal": 3, "throttled": 10, "whatif": 2}[what]
    {"equal": equal, "throttled": throttled, "whatif": whatif}[what](n)
