"""The host's speed at building the embedded dataset's samples, as a timed reference beside sweeps
run minutes apart on a shared host:

    taskset -c 0-11 python3 benchmarks/host_speed.py --seconds 2 --decoder pil

One process per usable CPU (forked, as DataLoader workers are) builds samples of the embedded
dataset (`SyntheticJPEGDataset`: decode and the training transform, the decoder chosen) for
`--seconds`; prints one JSON line: the processes, the decoder, and the samples/s of all of them
together. Two sweeps compared across a stretch where the host slowed read the slowdown here too: a
prediction made from one sweep and checked against another is read against the ratio of the
references taken beside each (benchmarks/whatif_decode_gpu.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time

SAMPLES = 256


def _build(args: tuple[str, float, int]) -> int:
    """Samples built by one process in `seconds` (after one untimed sample)."""
    decoder, seconds, seed = args
    import torch

    from loaderbench.workload.datasets import SyntheticJPEGDataset, load_synthetic_jpegs

    torch.set_num_threads(1)
    ds = SyntheticJPEGDataset(load_synthetic_jpegs(SAMPLES), decoder=decoder)
    ds[seed % SAMPLES]
    n, end = 0, time.perf_counter() + seconds
    i = seed
    while time.perf_counter() < end:
        ds[i % SAMPLES]
        i += 7
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--decoder", default="pil", choices=["pil", "torchvision"])
    ap.add_argument("--processes", type=int, default=0, help="0: one per usable CPU")
    args = ap.parse_args()
    from loaderbench.workload.datasets import load_synthetic_jpegs

    load_synthetic_jpegs(SAMPLES)  # cached before the processes start
    n = args.processes or len(os.sched_getaffinity(0))
    with mp.get_context("fork").Pool(n) as pool:
        t0 = time.perf_counter()
        counts = pool.map(_build, [(args.decoder, args.seconds, 31 * k) for k in range(n)])
        wall = time.perf_counter() - t0
    print(json.dumps({"processes": n, "decoder": args.decoder, "seconds": args.seconds, "wall_s": wall,
                      "samples": sum(counts), "samples_per_s": sum(counts) / args.seconds}))


if __name__ == "__main__":
    main()
