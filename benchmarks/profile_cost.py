"""What the stage profile of the pick adds to a sweep: the default sweep with the profile (the
default) and with --no-profile, interleaved (on, off, off, on, ...), each in its own process.

    PYTHONPATH=. python3 benchmarks/profile_cost.py --pairs 2 --out profile_cost.json
    PYTHONPATH=. python3 benchmarks/profile_cost.py --pairs 1 --time-budget 60 -- --decoder pil   # more sweep flags

Per run: the command's wall time, the sweep's own time since the command started
(`sweep.since_start_s`), the profile's time (`sweep.timing.profile_s`, the dataset built again
included) and its share of the sweep's wall time, the configs measured, the pick and its
samples/s. Then per pair: the profile's share (target <= 10%), the runs' wall times side by side
(on / off) and the pick's samples/s with the profile on against off (the profile runs after the
search, so a difference is the runs' own spread). Both runs stay inside --time-budget: the search
keeps the profile's budget for it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run(profile: bool, budget: float | None, extra: list[str], folder: Path, k: int) -> dict[str, Any]:
    out = folder / f"run{k}-{'on' if profile else 'off'}.json"
    cmd = [sys.executable, "-m", "loaderbench", "sweep", "--output", str(out), "--no-progress", *extra]
    if budget is not None:
        cmd += ["--time-budget", f"{budget:g}"]
    if not profile:
        cmd.append("--no-profile")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        return {"profile": profile, "error": proc.stderr[-2000:], "wall_s": wall}
    data = json.loads(out.read_text())
    sweep = data["sweep"]
    rec = data["recommendation"] or {}
    pick = (rec.get("settings") or {})
    row = next((r for r in data["results"] if r["settings"] == pick), None)
    profile_s = (sweep.get("timing") or {}).get("profile_s") or 0.0
    taken = sweep.get("profile") or {}
    return {
        "profile": profile,
        "wall_s": wall,
        "since_start_s": sweep.get("since_start_s"),
        "sweep_wall_s": sweep.get("sweep_wall_s"),
        "profile_s": profile_s,
        "profile_share_of_wall": profile_s / wall if wall else None,
        "profile_budget_s": taken.get("budget_s"),
        "profile_error": taken.get("error"),
        "in_order": taken.get("in_order"),
        "configs": sum(1 for r in data["results"] if r["status"] != "skipped"),
        "pick": pick.get("num_workers"),
        "pick_samples_per_s": None if row is None or not row.get("summary") else row["summary"]["samples_per_s"],
        "load_average": os.getloadavg()[0],
        "output": str(out),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--time-budget", type=float, default=None, help="--time-budget of every sweep (default: its own)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", default=None, help="folder to keep the result files in (default: a temporary one)")
    ap.add_argument("extra", nargs="*", help="more `loaderbench sweep` flags, after --")
    args = ap.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="profile-cost-"))
    folder.mkdir(parents=True, exist_ok=True)
    runs = []
    order = []
    for p in range(args.pairs):
        order += [True, False] if p % 2 == 0 else [False, True]
    for k, profile in enumerate(order):
        r = run(profile, args.time_budget, args.extra, folder, k)
        runs.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "output"}), flush=True)
    on = [r for r in runs if r["profile"] and "error" not in r]
    off = [r for r in runs if not r["profile"] and "error" not in r]
    pairs = []
    for i in range(0, len(runs) - 1, 2):
        a, b = runs[i], runs[i + 1]
        w_on, w_off = (a, b) if a["profile"] else (b, a)
        if "error" in w_on or "error" in w_off:
            continue
        pairs.append({
            "profile_share_of_wall": w_on["profile_share_of_wall"],
            "wall_on_s": w_on["wall_s"], "wall_off_s": w_off["wall_s"], "wall_on_over_off": w_on["wall_s"] / w_off["wall_s"],
            "pick_on": w_on["pick"], "pick_off": w_off["pick"],
            "pick_samples_per_s_on_over_off": (w_on["pick_samples_per_s"] / w_off["pick_samples_per_s"]
                                               if w_on["pick_samples_per_s"] and w_off["pick_samples_per_s"] else None),
        })
    summary = {
        "runs": runs, "pairs": pairs,
        "median_profile_share": statistics.median(r["profile_share_of_wall"] for r in on) if on else None,
        "max_profile_share": max((r["profile_share_of_wall"] for r in on), default=None),
        "median_profile_s": statistics.median(r["profile_s"] for r in on) if on else None,
        "median_wall_on_s": statistics.median(r["wall_s"] for r in on) if on else None,
        "median_wall_off_s": statistics.median(r["wall_s"] for r in off) if off else None,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
