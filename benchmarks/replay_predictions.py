"""The model's prediction error on recorded results, without measuring anything.

Usage: python3 benchmarks/replay_predictions.py RESULT.json [...]

For each result file: "sequential" replays the search's order (the file's search steps, else the
table's rows): every config is predicted from the configs measured before it, as the search saw
it; "leave-one-out" predicts every measured config from all the others. Prints median and p90 of
|predicted / measured - 1| per file and pooled over the files (docs/benchmarks.md, "Time to the
answer").
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loaderbench.analysis.predict import predict  # noqa: E402
from loaderbench.results import read_results  # noqa: E402


def spread(errors: list[float]) -> str:
    if not errors:
        return "n/a"
    e = sorted(abs(x) for x in errors)
    p90 = e[min(len(e) - 1, math.ceil(0.9 * len(e)) - 1)]
    return f"median {statistics.median(e):.1%}, p90 {p90:.1%} (n={len(e)})"


def main(paths: list[str]) -> None:
    pooled_seq: list[float] = []
    pooled_loo: list[float] = []
    for path in paths:
        rs = read_results(path)
        cpus = int(rs.environment.get("usable_cpus") or 1)  # the host's: a distributed job's too
        by_key = {r.settings.key(): r for r in rs.results if r.summary is not None}
        steps = [st.config for st in rs.sweep.search.steps] if rs.sweep.search else list(by_key)
        done, seq = [], []
        for config in steps:
            r = by_key.get(config)
            if r is None:
                continue
            if done:
                p = predict(done, [r.settings], cpus)
                if p and r.summary.samples_per_s:
                    seq.append(p[0].samples_per_s / r.summary.samples_per_s - 1.0)
            done.append(r)
        loo = [p.error for p in predict(rs.results, [r.settings for r in rs.results], cpus, exclude_measured=True)
               if p.error is not None]
        pooled_seq += seq
        pooled_loo += loo
        print(f"{Path(path).name}: sequential {spread(seq)}; leave-one-out {spread(loo)}")
    print(f"pooled: sequential {spread(pooled_seq)}; leave-one-out {spread(pooled_loo)}")


if __name__ == "__main__":
    main(sys.argv[1:])
