"""Time to the answer on a CPU machine: the model-guided search against the full grid.

    python3 benchmarks/search_cpu.py [--rounds 1] [--out results/search-cpu.json] [--workloads a,b]
                                     [--modes grid,search]

For each workload (the analytic ones: per-sample sleep in the workers, a sleep step, so the knee
has a hand-computed answer; and the default `loaderbench sweep`), runs side by side, interleaved:

    grid:   --search grid --isolation process --repeats 3   (what a sweep did before the search)
    search: the defaults (--search auto --isolation warm)

and records each run's wall time, its recommended config, the full grid's knee, and the error of
the search's predictions against the grid's medians (>= 3 repeats). Writes JSON after every run
and prints a table at the end. Each sweep runs as `python -m loaderbench sweep` in a subprocess,
exactly as a user runs it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

GRID = "0,1,2,4,6,8"
WORKLOADS: dict[str, dict[str, object]] = {
    # name: flags, analytic knee (fewest workers of GRID within 5% of the best)
    "io2-bs16-s12": {"flags": ["--dataset", "tensor", "--io-ms", "2", "--batch-size", "16", "--compute", "sleep:12",
                               "--num-workers", GRID], "knee": 4},
    "io3-bs8-s16": {"flags": ["--dataset", "tensor", "--io-ms", "3", "--batch-size", "8", "--compute", "sleep:16",
                              "--num-workers", GRID], "knee": 2},
    "io1-bs32-s8": {"flags": ["--dataset", "tensor", "--io-ms", "1", "--batch-size", "32", "--compute", "sleep:8",
                              "--num-workers", GRID], "knee": 6},
    # A loader whose samples cost CPU (1 ms busy + 1 ms sleep each) on 2 CPUs: the CPUs bend the curve.
    "cpu1-io1-bs16-s10": {"flags": ["--dataset", "tensor", "--cpu-ms", "1", "--io-ms", "1", "--batch-size", "16",
                                    "--compute", "sleep:10", "--num-workers", GRID], "knee": None},
    # A fast loader and a long step: one worker is enough (0 workers build in the step's thread).
    "io0.5-bs16-s40": {"flags": ["--dataset", "tensor", "--io-ms", "0.5", "--batch-size", "16", "--compute",
                                 "sleep:40", "--num-workers", GRID], "knee": 1},
    # The default sweep (embedded JPEGs, sleep:100 without a GPU, the default worker grid).
    "default": {"flags": [], "knee": None},
}
MODES = {
    "grid": ["--search", "grid", "--isolation", "process", "--repeats", "3"],
    "search": [],
}


def run(name: str, mode: str, workdir: Path) -> dict[str, object]:
    out = workdir / f"{name}-{mode}-{time.time_ns()}.json"
    cmd = [sys.executable, "-m", "loaderbench", "sweep", *WORKLOADS[name]["flags"], *MODES[mode],  # type: ignore[misc]
           "--no-progress", "--format", "json", "--output", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        return {"name": name, "mode": mode, "wall_s": wall, "error": proc.stderr[-2000:]}
    data = json.loads(out.read_text())
    rec = (data.get("recommendation") or {}).get("settings") or {}
    medians = {r["settings"]["num_workers"]: r["summary"]["samples_per_s"] for r in data["results"]
               if r.get("summary") and not r["settings"].get("pin_memory")}
    return {
        "name": name, "mode": mode, "wall_s": wall, "knee_workers": rec.get("num_workers"),
        "measured_configs": len(data["results"]), "trials": sum(len(r.get("trials") or []) for r in data["results"]),
        "medians": medians, "predictions": (data.get("sweep") or {}).get("predictions") or [],
        "prediction_check": (data.get("sweep") or {}).get("prediction_check"),
        "timing": (data.get("sweep") or {}).get("timing"), "file": str(out),
    }


def prediction_errors(search: dict[str, object], grid: dict[str, object]) -> list[float]:
    """|predicted / grid median - 1| for every config the search predicted (not measured) and
    the grid measured, plus the search's predictions made before measuring a config."""
    med = {int(k): v for k, v in grid["medians"].items()}  # type: ignore[union-attr]
    errs = []
    for p in search.get("predictions") or []:  # type: ignore[union-attr]
        w = p["settings"]["num_workers"]
        if w in med and not p["settings"].get("pin_memory"):
            errs.append(abs(p["samples_per_s"] / med[w] - 1.0))
    return errs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--modes", default=",".join(MODES), help="which of grid,search to run (default both)")
    ap.add_argument("--out", type=Path, default=Path("results/search-cpu.json"))
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/loaderbench-search-cpu"))
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, object]] = []
    for _ in range(args.rounds):
        for name in args.workloads.split(","):
            for mode in args.modes.split(","):
                r = run(name, mode, args.workdir)
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items() if k not in ("medians", "predictions", "prediction_check")}),
                      flush=True)
                args.out.write_text(json.dumps(runs, indent=1))
    print(f"\n{'workload':20} {'grid s':>7} {'search s':>8} {'ratio':>6} {'grid knee':>9} {'search knee':>11} "
          f"{'analytic':>8} {'pred err med/p90':>17}")
    for name in args.workloads.split(","):
        g = [r for r in runs if r["name"] == name and r["mode"] == "grid" and "error" not in r]
        s = [r for r in runs if r["name"] == name and r["mode"] == "search" and "error" not in r]
        if not s:
            print(f"{name:20} failed")
            continue
        if not g:  # --modes search: wall time and pick only
            print(f"{name:20} {'':>7} {statistics.median(r['wall_s'] for r in s):8.1f} {'':>6} {'':>9} "  # type: ignore[misc]
                  f"{str([r['knee_workers'] for r in s]):>11} {str(WORKLOADS[name]['knee']):>8}")
            continue
        gw = statistics.median(r["wall_s"] for r in g)  # type: ignore[misc]
        sw = statistics.median(r["wall_s"] for r in s)  # type: ignore[misc]
        errs = sorted(e for a, b in zip(s, g) for e in prediction_errors(a, b))
        err = (f"{statistics.median(errs):.0%} / {errs[min(len(errs) - 1, int(0.9 * len(errs)))]:.0%}"
               if errs else "n/a")
        print(f"{name:20} {gw:7.1f} {sw:8.1f} {gw / sw:6.1f} {str([r['knee_workers'] for r in g]):>9} "
              f"{str([r['knee_workers'] for r in s]):>11} {str(WORKLOADS[name]['knee']):>8} {err:>17}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
