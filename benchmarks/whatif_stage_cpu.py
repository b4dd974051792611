"""`--what-if stage=NAME:F` against real runs with that stage made F times cheaper, on the CPU.

    PYTHONPATH=. python3 benchmarks/whatif_stage_cpu.py --rounds 2 --out whatif_stage_cpu.json

The dataset (tests/profile_datasets.py TwoStages): each sample a small tensor through a
torchvision Compose of two CPU spins, `CpuSpin` (A ms of the thread's CPU) then `CpuCrop` (B ms),
A = 2 and B = 6 by default (`--clock wall`: `Spin` and `Crop2`, spins of wall time, whose cost
other load on a shared machine does not stretch). Each round sweeps it (`--search grid`, `--num-workers` the list given,
a sleep step of `--step-ms`) with the stage profile of the pick, asks the pipeline model
`stage=CpuSpin:F` and `stage=CpuCrop:F` for each factor F, and sweeps the dataset made with that
stage F times cheaper (`--no-profile`), in the same round. Reported per question and worker count:
the predicted samples/s, the measured, and the error (target: within 10%), and at the knee: the
predicted knee's samples/s against the measured pick's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FACTORY = "tests.profile_datasets:make_two_stages"


def sweep(a_ms: float, b_ms: float, args: argparse.Namespace, out: Path, profile: bool) -> Any:
    import loaderbench

    return loaderbench.sweep(
        FACTORY, dataset_kwargs={"a_ms": a_ms, "b_ms": b_ms, "cpu": args.clock == "cpu"}, num_workers=args.workers, batch_size=args.batch_size,
        step=f"sleep:{args.step_ms:g}", search="grid", repeats=args.repeats, min_time_s=args.min_time,
        profile=profile, output=str(out), label=f"a{a_ms:g}-b{b_ms:g}",
    ).result_set


def rates(rs: Any) -> dict[int, float]:
    return {r.settings.num_workers: r.summary.samples_per_s for r in rs.results if r.summary is not None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--a-ms", type=float, default=2.0)
    ap.add_argument("--b-ms", type=float, default=6.0)
    ap.add_argument("--factors", default="2,4")
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--step-ms", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: spins of the thread's CPU time (CpuSpin, CpuCrop); wall: of wall time (Spin, Crop2)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from loaderbench.analysis import analyze
    from loaderbench.analysis.predict import parse_what_if

    folder = Path(tempfile.mkdtemp(prefix="whatif-stage-"))
    factors = [float(f) for f in args.factors.split(",")]
    rounds = []
    t0 = time.monotonic()
    for k in range(args.rounds):
        base = sweep(args.a_ms, args.b_ms, args, folder / f"r{k}-base.json", profile=True)
        prof = base.analysis.profile
        shares = {} if prof is None else {s.name: (s.ms_per_sample, s.cpu_ms_per_sample, s.share) for s in prof.stages}
        entry: dict[str, Any] = {"base": rates(base), "profile_stages": shares, "questions": []}
        names = ("CpuSpin", "CpuCrop") if args.clock == "cpu" else ("Spin", "Crop2")
        for stage, a, b in [(names[0], "a", None), (names[1], None, "b")]:
            for f in factors:
                q = f"stage={stage}:{f:g}"
                what = analyze(base, what_if=[parse_what_if(q)]).what_if
                a_ms = args.a_ms / f if a else args.a_ms
                b_ms = args.b_ms / f if b else args.b_ms
                measured_rs = sweep(a_ms, b_ms, args, folder / f"r{k}-{stage}-{f:g}.json", profile=False)
                measured = rates(measured_rs)
                curve = dict(what.curve) if what is not None else {}
                per = {w: {"predicted": curve.get(w), "measured": m,
                           "error": None if curve.get(w) is None else curve[w] / m - 1.0} for w, m in measured.items()}
                pick = measured_rs.recommendation.settings
                entry["questions"].append({
                    "question": q, "why": None if what is None or what.why is None else what.why.value,
                    "binds": None if what is None or what.binds is None else what.binds.value,
                    "loader_speedup": None if what is None else what.loader_speedup,
                    "by_workers": per,
                    "knee": {"predicted_workers": None if what is None else what.knee_workers,
                             "predicted": None if what is None else what.knee_samples_per_s,
                             "measured_workers": pick.num_workers, "measured": measured.get(pick.num_workers)},
                })
                print(json.dumps({"round": k, "question": q, "by_workers": {w: round(v["error"] or 0, 3)
                                                                           for w, v in per.items()}}), flush=True)
        rounds.append(entry)
    errors = [abs(v["error"]) for r in rounds for q in r["questions"] for v in q["by_workers"].values()
              if v["error"] is not None]
    summary = {"rounds": rounds, "wall_s": time.monotonic() - t0, "load_average": os.getloadavg(),
               "median_abs_error": statistics.median(errors) if errors else None,
               "max_abs_error": max(errors) if errors else None,
               "within_10pct": sum(1 for e in errors if e <= 0.10), "predictions": len(errors)}
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
