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

With `--ends`, where the window ends: the sweep's own timed loop (`measure.loop.timed_loop`) run
on a simulated clock over the same hand-out, its window ended at the first step past 1 s
(`round_batches=1`) or on whole rounds of W batches (`round_batches=W`, NOTE [a window of whole
rounds] in measure/loop.py); the warm-up drops max(3, W x prefetch_factor) batches, or ends at
the first blocked `next()` after 3. Per input and rule: the median and mean of window / long run.

    PYTHONPATH=. python3 benchmarks/window_uncertainty_sim.py --ends [--windows 300]
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


def every16(rng: random.Random) -> float:
    """8 shuffled samples of 3 ms, each 150 ms instead with probability 1/16."""
    return sum(0.150 if rng.random() < 1 / 16 else 0.003 for _ in range(8))


INPUTS: dict[str, Build] = {"bimodal": bimodal, "lognormal": lognormal, "steady": steady, "every16": every16}


class SimClock:
    """Seconds that move only when the simulation moves them."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class HandOut:
    """torch's in-order hand-out on `clock`: W workers build batch k in turn (worker k mod W), its
    task sent when batch k - prefetch_factor x W is taken; `next()` moves the clock to the batch's
    completion when it is not yet built. `waits[k]`: how long the loop waited for batch k."""

    def __init__(self, clock: SimClock, rng: random.Random, build: Build, workers: int,
                 prefetch_factor: int = 2, total: int = 3000) -> None:
        self.clock, self.rng, self.build, self.workers = clock, rng, build, workers
        self.ahead = workers * prefetch_factor
        self.total = total
        self.free = [0.0] * workers
        self.sent = [0.0] * total
        self.waits: list[float] = []

    def __iter__(self):
        for k in range(self.total):
            done = max(self.free[k % self.workers], self.sent[k]) + self.build(self.rng)
            self.free[k % self.workers] = done
            self.waits.append(max(0.0, done - self.clock.t))
            self.clock.t = max(self.clock.t, done)
            if k + self.ahead < self.total:
                self.sent[k + self.ahead] = self.clock.t
            yield [0] * 8


def run(seed: int, build: Build, workers: int, step_s: float, prefetch_factor: int = 2,
        total: int = 3000) -> tuple[list[float], float]:
    """(the window's step times in seconds, the long-run batches/s) of one simulated loop."""
    clock = SimClock()
    ends = []
    for _ in HandOut(clock, random.Random(seed), build, workers, prefetch_factor, total):
        clock.t += step_s
        ends.append(clock.t)
    first = max(3, workers * prefetch_factor)
    last = first + 1
    while last - first < 10 or ends[last] - ends[first] < 1.0:
        last += 1
    steps = [ends[k] - ends[k - 1] for k in range(first + 1, last + 1)]
    return steps, (total - 500) / (ends[total - 1] - ends[499])


def loop_window(seed: int, build: Build, workers: int, step_s: float, round_batches: int,
                blocked_start: bool) -> float:
    """The timed loop's window figure (batches/s) over one simulated hand-out."""
    from loaderbench.measure.loop import timed_loop
    from loaderbench.measure.timing import HostMarker

    clock = SimClock()
    loader = HandOut(clock, random.Random(seed), build, workers)
    least = 3 if blocked_start else max(3, workers * 2)
    # A blocked next() ends a warm-up of at least 3 batches (WarmUp's rule, its period bar
    # left out): the window starts after a wait, as the sweep's often does.
    early = (least, 1) if blocked_start else None

    def step(_batch: object) -> None:
        clock.t += step_s

    times = timed_loop(loader, step, count=len, marker=HostMarker(clock=clock), clock=clock,
                       warmup_batches=least, max_warmup_batches=least if not blocked_start else 200,
                       early_warmup=early, ready_count=(lambda: 0) if blocked_start else None,
                       min_batches=10, min_time_s=1.0, max_batches=10_000, round_batches=round_batches)
    return len(times.step_s) / sum(times.step_s)


def ends(windows: int) -> None:
    """The window's end rule against the long-run rate (see the module's docstring)."""
    cases = [("every16", 2, 0.005), ("every16", 4, 0.005), ("every16", 6, 0.005), ("bimodal", 2, 0.005),
             ("bimodal", 6, 0.005), ("lognormal", 6, 0.005), ("lognormal", 16, 0.005),
             ("steady", 12, 0.055), ("steady", 16, 0.055)]
    for name, workers, step_s in cases:
        for blocked_start in (False, True):
            row: dict[str, object] = {"input": name, "workers": workers, "step_s": step_s,
                                      "start": "blocked next()" if blocked_start else "fixed count"}
            for label, round_batches in (("first_step_past", 1), ("whole_rounds", workers)):
                ratios = []
                for seed in range(windows):
                    _, long_run = run(seed, INPUTS[name], workers, step_s)
                    ratios.append(loop_window(seed, INPUTS[name], workers, step_s, round_batches, blocked_start)
                                  / long_run)
                row[label] = {"median": round(statistics.median(ratios), 3), "mean": round(statistics.mean(ratios), 3)}
            print(json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=300)
    ap.add_argument("--ends", action="store_true", help="compare where the window ends (see the docstring)")
    args = ap.parse_args()
    if args.ends:
        ends(args.windows)
        return
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
