"""The default sweep's stated figure for its pick against plain loops run just before and just after
the sweep (run on a GPU host):

    PYTHONPATH=. python3 benchmarks/pick_bracketed.py --out $OUT/bracketed.json --sweeps 3 \
        --like docs/data/bench/gpu-round-16/default-1.json

A shared host drifts 5-10% over a minute, so a plain loop run after a sweep sets the sweep's figure
against a host that has moved. Here `--sweeps` default sweeps (`loaderbench sweep`, each in its own
process as a user runs it, its wall time recorded against the 120-s budget) alternate with slots of
plain loops (`pick_check.fresh_plain_loop_samples_per_s`: the same DataLoader and step with no
instrumentation, each in a fresh process; `--in-process` runs them in this one, as the records
before gpu-round-22 were, which reference_check.py found up to 10% low). Each slot runs a plain loop
at every pick seen so far; the slot before the first sweep runs one at the pick of `--like` (an
earlier default sweep's result), the likeliest pick. A sweep's pick is then bracketed where an
earlier slot ran its settings: its stated figure (the sustained window its recommendation states) is
set against the mean of the loops on either side, else against the loop after it alone (`bracketed`
false). The target: each sweep's stated figure within 5% of its bracket, and the median over the
sweeps.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pick_check import fresh_plain_loop_samples_per_s, plain_loop_samples_per_s  # noqa: E402

from loaderbench.model import ComputeSpec, DatasetSpec, LoaderSettings  # noqa: E402
from loaderbench.results import read_results  # noqa: E402


def pick_of(path: Path) -> tuple[LoaderSettings, float | None, DatasetSpec, ComputeSpec]:
    """A result's recommended settings, its stated (sustained) samples/s, its dataset and step."""
    rs = read_results(path)
    rec = rs.recommendation
    assert rec is not None and rec.settings is not None, f"{path}: no recommended config"
    taken = rs.sweep.sustained
    stated = taken.samples_per_s if taken is not None and taken.config == rec.settings.key() else None
    if stated is None:
        row = next(r for r in rs.results if r.settings == rec.settings and r.summary is not None)
        stated = row.summary.samples_per_s if row.summary else None
    return (rec.settings, stated, DatasetSpec.from_dict(rs.config["dataset"]),
            ComputeSpec.from_dict(rs.config["compute"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--like", required=True, help="an earlier default sweep's result: the first slot's pick")
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--sweep-timeout", type=float, default=150.0)
    ap.add_argument("--in-process", action="store_true",
                    help="run the plain loops in this process (as before; see reference_check.py) rather than fresh ones")
    ap.add_argument("--sweep-args", default="", help="more flags for each sweep (a smoke test off the GPU host)")
    args = ap.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    first, _, dataset, compute = pick_of(Path(args.like))
    seen: dict[str, LoaderSettings] = {first.key(): first}
    slots: list[dict[str, float]] = []
    sweeps: list[dict] = []

    def run_slot() -> None:
        got = {}
        for key, s in seen.items():
            loop = plain_loop_samples_per_s if args.in_process else fresh_plain_loop_samples_per_s
            got[key] = loop(s, dataset, compute, warmup=args.warmup, batches=args.batches)
        slots.append(got)
        print(json.dumps({"slot": len(slots) - 1, "plain": got}), flush=True)

    run_slot()
    for k in range(args.sweeps):
        result = out.parent / f"sweep-{k + 1}.json"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "loaderbench", "sweep", "--output", str(result), "--no-progress",
                               *shlex.split(args.sweep_args)],
                              timeout=args.sweep_timeout, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        (out.parent / f"sweep-{k + 1}.log").write_text(proc.stdout + proc.stderr)
        settings, stated, _, _ = pick_of(result)
        seen.setdefault(settings.key(), settings)
        taken = read_results(result).sweep.sustained
        sweeps.append({"sweep": k + 1, "rc": proc.returncode, "wall_s": wall, "pick": settings.key(),
                       "stated_samples_per_s": stated,
                       # how the stated figure was settled from the longer windows, beside the search's
                       "settled": None if taken is None else taken.settled.value,
                       "windows_samples_per_s": None if taken is None else taken.windows_samples_per_s,
                       "search_samples_per_s": None if taken is None else taken.search_samples_per_s})
        print(json.dumps(sweeps[-1]), flush=True)
        run_slot()
    for k, sw in enumerate(sweeps):
        before, after = slots[k].get(sw["pick"]), slots[k + 1][sw["pick"]]
        sides = [v for v in (before, after) if v is not None]
        sw["plain_before"], sw["plain_after"] = before, after
        sw["bracketed"] = before is not None
        sw["plain_bracket"] = statistics.mean(sides)
        sw["stated_vs_plain"] = sw["stated_samples_per_s"] / sw["plain_bracket"] - 1.0
        sw["stated_vs_plain_after"] = sw["stated_samples_per_s"] / after - 1.0
        sw["plain_all_slots"] = [s[sw["pick"]] for s in slots if sw["pick"] in s]
    errors = [sw["stated_vs_plain"] for sw in sweeps]
    report = {"sweeps": sweeps, "slots": slots,
              "median_stated_vs_plain": statistics.median(errors),
              "within_5pct": sum(abs(e) <= 0.05 for e in errors),
              "walls_s": [sw["wall_s"] for sw in sweeps], "args": vars(args)}
    print(json.dumps(report, indent=1))
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
