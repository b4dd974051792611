"""How far a short window of an in-order loader reads from its long-run rate, and whether the
window's own uncertainty (`analysis.statistics.window_se`, batch means over rounds of num_workers
steps) covers that: a simulation of torch's DataLoader hand-out, no processes.

Each input draws a batch's build time (seconds) from a distribution; W workers build batch k in
turn (worker k mod W), its task sent when batch k - prefetch_factor x W is taken; the loop takes
batch k once it is complete and the previous step has ended, then runs a step of fixed length.
A window starts after max(3, W x prefetch_factor) batches and ends after at least 10 batches and
1 s (the sweep's defaults). Per input, over `--windows` seeds: the windows' spread around the
long-run rate (batches 500-3,000 of the same run), the median of the estimated standard error,
and the share of windows whose figure lies within two estimated standard errors of the long-run
rate (among those with an estimate: 4 rounds or more).

    PYTHONPATH=. python3 benchmarks/window_uncertainty_sim.py [--windows 300]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from collections.abc import Callable

from loaderbench.analysis.statistics import window_se
from loaderbench.model import Trial

Build = Callable[[random.Random], float]


def bimodal(rng: random.Random) -> float:
    """8 samples of 5 ms, each 120 ms instead with probability 0.1."""
    return sum(0.120 if rng.random() < 0.1 else 0.005 for _ in range(8))


def lognormal(rng: random.Random) -> float:
    """8 samples of lognormal latency, median 15 ms, sigma 1."""
    return sum(0.015 * math.exp(rng.gauss(0.0, 1.0)) for _ in range(8))


def steady(rng: random.Random) -> float:
    """A batch of about 0.8 s, 5% spread (the H200 case's JPEG batches at 12-16 workers)."""
    return 0.8 * (1.0 + 0.05 * rng.gauss(0.0, 1.0))


INPUTS: dict[str, Build] = {"bimodal": bimodal, "lognormal": lognormal, "steady": steady}


def run(seed: int, build: Build, workers: int, step_s: float, prefetch_factor: int = 2,
        total: int = 3000) -> tuple[list[float], float]:
    """(the window's step times in seconds, the long-run batches/s) of one simulated loop."""
    rng = random.Random(seed)
    free, sent = [0.0] * workers, [0.0] * total
    ends, now = [0.0] * total, 0.0
    for k in range(total):
        done = max(free[k % workers], sent[k]) + build(rng)
        free[k % workers] = done
        taken = max(now, done)
        if k + workers * prefetch_factor < total:
            sent[k + workers * prefetch_factor] = taken
        now = ends[k] = taken + step_s
    first = max(3, workers * prefetch_factor)
    last = first + 1
    while last - first < 10 or ends[last] - ends[first] < 1.0:
        last += 1
    steps = [ends[k] - ends[k - 1] for k in range(first + 1, last + 1)]
    return steps, (total - 500) / (ends[total - 1] - ends[499])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=300)
    args = ap.parse_args()
    cases = [("bimodal", 2, 0.005), ("bimodal", 6, 0.005), ("lognormal", 6, 0.005), ("lognormal", 16, 0.005),
             ("steady", 12, 0.055), ("steady", 16, 0.055)]
    for name, workers, step_s in cases:
        ratios, ses, covered = [], [], []
        for seed in range(args.windows):
            steps, long_run = run(seed, INPUTS[name], workers, step_s)
            ratio = len(steps) / sum(steps) / long_run
            trial = Trial(0.0, 0, [0.0] * len(steps), steps, steps, len(steps), sum(steps), "host")
            se = window_se(trial, workers)
            ratios.append(ratio)
            if se is not None:
                ses.append(se)
                covered.append(abs(ratio - 1.0) <= 2.0 * se)
        print(json.dumps({
            "input": name, "workers": workers, "step_s": step_s,
            "window_vs_long_run_sd": round(statistics.pstdev(ratios), 3),
            "window_vs_long_run_median": round(statistics.median(ratios), 3),
            "estimated": len(ses), "se_median": round(statistics.median(ses), 3) if ses else None,
            "covered_by_2se": round(sum(covered) / len(covered), 3) if covered else None,
        }))


if __name__ == "__main__":
    main()
