"""A short-epoch image folder's figure against two plain references, quiet and under passing load
(run on the 2-core machine):

    PYTHONPATH=. python3 benchmarks/short_epoch_reference.py --out /tmp/short-epoch.json --rounds 4
    PYTHONPATH=. python3 benchmarks/short_epoch_reference.py --out /tmp/short-epoch-load.json --rounds 4 --load 2

100 images at batch 16 (7 batches an epoch, the last of 4 images), 2 workers that start again
every epoch, a 60-ms sleep for the step: the case of
tests/test_figures.py::test_a_short_epoch_folder_reads_as_a_plain_loop_over_real_epochs. Each
round: a plain loop over 9 epochs (the first left out: imports), `loaderbench sweep` of that one
config (`--batches 10 --repeats 3`), the same plain loop again. Each loop gives two references:
its samples over its whole time (`mean`, what a loop of that length averages) and a whole
epoch's samples over the median epoch's time (`median`, as the sweep's figure is a median of
repeats). `--load N` starts N processes that busy a core for 0.3-1.5 s and sleep 0.3-1.5 s in
turn while the rounds run: load that comes and goes, as on a shared CI machine. Recorded: each
figure and the sweep's ratio to the range of each reference before and after.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torch.utils.data import DataLoader

from loaderbench.workload.datasets import load_image_folder, make_image_folder


def _busy(seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    end = time.time() + seconds
    while time.time() < end:
        until = time.time() + rng.uniform(0.3, 1.5)
        while time.time() < until:
            pass
        time.sleep(rng.uniform(0.3, 1.5))


def plain(root: Path, epochs: int = 9) -> tuple[float, float]:
    """(mean, median) samples/s of a plain loop over `epochs` epochs, the first left out."""
    loader = DataLoader(load_image_folder(str(root)), batch_size=16, shuffle=True, num_workers=2)
    per_epoch, n, t_all = [], 0, 0.0
    for e in range(epochs):
        t0, k = time.perf_counter(), 0
        for _, labels in loader:
            time.sleep(0.060)
            k += len(labels)
        dt = time.perf_counter() - t0
        if e >= 1:
            per_epoch.append(k / dt)
            n, t_all = n + k, t_all + dt
    return n / t_all, statistics.median(per_epoch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--load", type=int, default=0, help="processes of passing load while the rounds run")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="short-epoch-"))
    root = work / "folder"
    make_image_folder(root, images=100, size=(160, 120), classes=2)
    load = [mp.Process(target=_busy, args=(3600.0, i), daemon=True) for i in range(args.load)]
    for p in load:
        p.start()
    rounds = []
    try:
        for i in range(args.rounds):
            before = plain(root)
            out = work / f"r{i}.json"
            subprocess.run([sys.executable, "-m", "loaderbench", "sweep", "--dataset", "folder", "--data", str(root),
                            "--num-workers", "2", "--batch-size", "16", "--compute", "sleep:60", "--batches", "10",
                            "--min-time", "0", "--repeats", "3", "--search", "grid", "--output", str(out),
                            "--no-progress"], check=True, capture_output=True)
            after = plain(root)
            figure = json.loads(out.read_text())["results"][0]["summary"]["samples_per_s"]
            row = {"sweep": figure, "mean_before": before[0], "mean_after": after[0],
                   "median_before": before[1], "median_after": after[1]}
            for ref in ("mean", "median"):
                lo, hi = sorted((row[f"{ref}_before"], row[f"{ref}_after"]))
                row[f"{ref}_ratio"] = figure / lo if figure < lo else figure / hi if figure > hi else 1.0
                row[f"{ref}_within_5pct"] = 0.95 * lo <= figure <= 1.05 * hi
            rounds.append(row)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    finally:
        for p in load:
            p.terminate()
    Path(args.out).write_text(json.dumps({"load_processes": args.load, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
