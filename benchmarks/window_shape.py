"""Does the pick's longer window read its config as a plain loop does? Interleaved rounds, for the
pick of an earlier default sweep (run on a GPU host):

    PYTHONPATH=. python3 benchmarks/window_shape.py --like docs/data/bench/gpu-round-24/sweep-3.json \
        --out $OUT/shape.json --rounds 3

Each round, in turn and each in a fresh process: a plain loop of 150 batches after 40
(`pick_check.fresh_plain_loop_samples_per_s`), a plain loop of the sustained window's size after a
warm-up as short as the sweep's (`--short-warmup`, `--short-batches`), and `loaderbench sweep
--search grid` on that config alone with windows of `--short-batches` and of 150 batches
(`pick_check.cli_samples_per_s`). The medians say whether a window of the sustained trial's size,
or the tool's instrumented loop, reads low against the plain loop, before the warm process of a
whole sweep is suspected.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pick_bracketed import pick_of  # noqa: E402
from pick_check import cli_samples_per_s, fresh_plain_loop_samples_per_s  # noqa: E402

from loaderbench.results import read_results  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--like", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--short-warmup", type=int, default=15)
    ap.add_argument("--short-batches", type=int, default=56)
    args = ap.parse_args()
    settings, _, dataset, compute = pick_of(Path(args.like))
    config = read_results(Path(args.like)).config
    kinds = {
        "plain 40+150": lambda: fresh_plain_loop_samples_per_s(settings, dataset, compute, warmup=40, batches=150),
        f"plain {args.short_warmup}+{args.short_batches}": lambda: fresh_plain_loop_samples_per_s(
            settings, dataset, compute, warmup=args.short_warmup, batches=args.short_batches),
        f"loaderbench {args.short_batches}": lambda: cli_samples_per_s(settings, config, args.short_batches),
        "loaderbench 150": lambda: cli_samples_per_s(settings, config, 150),
    }
    got: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(args.rounds):
        for name, fn in kinds.items():
            got[name].append(fn())
            print(json.dumps({"round": r, name: round(got[name][-1], 1)}), flush=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    ref = med["plain 40+150"]
    out = {"config": settings.key(), "readings": got, "medians": med,
           "vs_plain": {k: v / ref - 1.0 for k, v in med.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out["vs_plain"]), flush=True)


if __name__ == "__main__":
    main()
