"""Which reference holds for the pick's figure: a plain loop in a fresh process, a plain loop in a
process that has already run others, and loaderbench's own long window (run on a GPU host):

    PYTHONPATH=. python3 benchmarks/reference_check.py --out $OUT/reference.json \
        --like docs/data/bench/gpu-round-19/sweep-2.json --configs 15:pin:pf,16:pin:pf --rounds 2

`pick_bracketed.py` runs its plain loops one after another in one process (a fresh DataLoader
and step each, the dataset built again), and there the same settings read 10-25% apart between
slots, and 15 workers read under 16 by more than their worker count explains. Here, for each
round and each config of `--configs` (WORKERS[:pin][:pf], the other settings `--like`'s pick's),
in turn: `pick_check.plain_loop_samples_per_s` in a fresh Python process (`fresh`), the same in
this process, which has run every loop before it (`reused`), and `loaderbench sweep --search grid`
on that config alone with a window of `--batches` batches (`cli_long`: the tool's own
measurement over as many batches as the plain loop times). Interleaved, so a drift of the host
moves all three; the medians and their ratios are recorded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pick_check import cli_samples_per_s, fresh_plain_loop_samples_per_s, plain_loop_samples_per_s  # noqa: E402

from loaderbench.model import ComputeSpec, DatasetSpec, LoaderSettings  # noqa: E402
from loaderbench.results import read_results  # noqa: E402


def settings_of(text: str, like: LoaderSettings) -> LoaderSettings:
    """WORKERS[:pin][:pf] -> `like` with those settings."""
    w, *flags = text.split(":")
    return replace(like, num_workers=int(w), pin_memory="pin" in flags, prefetch="pf" in flags,
                   prefetch_factor=like.prefetch_factor or 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--like", required=True, help="a default sweep's result: its dataset, step and pick")
    ap.add_argument("--configs", default="15:pin:pf,16:pin:pf")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--batches", type=int, default=150)
    args = ap.parse_args()
    rs = read_results(args.like)
    assert rs.recommendation is not None and rs.recommendation.settings is not None
    like = rs.recommendation.settings
    dataset, compute = DatasetSpec.from_dict(rs.config["dataset"]), ComputeSpec.from_dict(rs.config["compute"])
    rows = []
    for rnd in range(args.rounds):
        for c in args.configs.split(","):
            s = settings_of(c, like)
            row = {"round": rnd, "config": s.key(), "t": time.time()}
            row["fresh"] = fresh_plain_loop_samples_per_s(s, dataset, compute, args.warmup, args.batches)
            row["reused"] = plain_loop_samples_per_s(s, dataset, compute, warmup=args.warmup, batches=args.batches)
            row["cli_long"] = cli_samples_per_s(s, rs.config, batches=args.batches)
            print(json.dumps(row), flush=True)
            rows.append(row)
    summary = {}
    for key in dict.fromkeys(r["config"] for r in rows):
        mine = [r for r in rows if r["config"] == key]
        med = {k: statistics.median(r[k] for r in mine) for k in ("fresh", "reused", "cli_long")}
        summary[key] = {**med, "reused_vs_fresh": med["reused"] / med["fresh"] - 1.0,
                        "cli_long_vs_fresh": med["cli_long"] / med["fresh"] - 1.0}
    report = {"rows": rows, "summary": summary, "args": vars(args)}
    print(json.dumps(report, indent=1))
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
