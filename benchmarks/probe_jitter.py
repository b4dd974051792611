"""The loader-alone probe's timing against the long-run in-order rate, for builds whose time varies
(no device; an event simulation, seconds to run):

    PYTHONPATH=. python3 benchmarks/probe_jitter.py --workers 6 --batch 8 --seeds 20

Each sample takes 5 + 50 * u**3 ms (u uniform on [0, 1), every 17th sample's latency part four
times longer), a jittered storage latency with a long tail. W workers build batches in turn and
hand them out in order, each holding `--prefetch-factor` tasks, as a DataLoader does; the main
process takes each batch as soon as it is out (no step). The long-run in-order rate is the batches
taken between batch 100 and batch 500 over their seconds. The probe is `measure.loop.Completions`
fed the same completions from batch 100 on, stopped by its own rule (`settled`, at least
PROBE_MIN_TIME_S) and, with `--min-units K`, not before every worker timed K whole builds. The
printed ratios (probe over long-run rate; the workers' capacity, W x batch / mean build, over it)
say how far timing builds per worker reads from what an in-order draw delivers.
"""

from __future__ import annotations

import argparse
import random
import statistics

from benchmarks.jitter_dataset import latency_s
from loaderbench.measure.loop import PROBE_MIN_INTERVALS, PROBE_MIN_TIME_S, Completions


def simulate(workers: int, batch: int, prefetch_factor: int, batches: int,
             seed: int) -> tuple[list[float], list[float], list[float]]:
    """(completion s, taken s, build s) per batch of an in-order hand-out: batch k is built by
    worker k % workers once its task was sent (the first prefetch_factor x workers at 0; then
    batch k's when batch k - prefetch_factor x workers is taken) and the worker is free."""
    order = list(range(batches * batch))
    random.Random(seed).shuffle(order)
    build = [sum(latency_s(order[k * batch + j]) for j in range(batch)) for k in range(batches)]
    ahead = prefetch_factor * workers
    sent = [0.0] * batches
    free = [0.0] * workers
    done, taken = [0.0] * batches, [0.0] * batches
    now = 0.0
    for k in range(batches):
        w = k % workers
        done[k] = max(free[w], sent[k]) + build[k]
        free[w] = done[k]
        now = taken[k] = max(now, done[k])
        if k + ahead < batches:
            sent[k + ahead] = now
    return done, taken, build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prefetch-factor", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--min-units", default="1,2,3,4", help="whole builds every worker must time, comma-separated")
    args = ap.parse_args()
    w, b = args.workers, args.batch
    for need in [int(x) for x in args.min_units.split(",")]:
        probe, capacity = [], []
        for seed in range(args.seeds):
            done, taken, build = simulate(w, b, args.prefetch_factor, 600, seed)
            long_run = 400 * b / (taken[499] - taken[99])
            start = taken[100] - 1e-9
            c = Completions(start)
            for k in range(100, 600):
                c.add(k % w, done[k], b, taken_at=taken[k])
                if (taken[k] - start >= PROBE_MIN_TIME_S and c.settled(PROBE_MIN_INTERVALS)
                        and min(c.units().values()) >= need):
                    break
            probe.append((c.rate() or 0.0) / long_run)
            capacity.append(w * b / statistics.mean(build) / long_run)
        print(f"min units {need}: probe / in-order rate median {statistics.median(probe):.3f} "
              f"({min(probe):.3f}-{max(probe):.3f}); capacity / in-order rate {statistics.median(capacity):.3f}")


if __name__ == "__main__":
    main()
