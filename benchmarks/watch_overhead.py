"""What loaderbench.watch costs a training loop, on a GPU host:

    PYTHONPATH=. python3 benchmarks/watch_overhead.py --out $OUT/watch_overhead.json

ResNet-50 training steps (loaderbench's `model:resnet50` step: bf16, channels_last) on the
embedded synthetic JPEGs (decode + the ImageNet train transform in the workers), 16 workers,
pin_memory=True, batch 256: the same loop with and without `loaderbench.watch(loader,
device=...)`, interleaved (plain, watched, watched, plain, ...) so drift hits both alike; each
run a fresh DataLoader, `--warmup` batches untimed, then `--batches` timed between two
synchronisations. Reports every run's samples/s, the medians of each mode (at least 3 runs
each) and watched / plain; `--modes` adds watched-nometer (no CPU/memory/NVML meter) and wrapped
(the plain copy inside a generator) to find what a difference comes from. `--source memory`
replaces the loader with 8 pinned batches made once and cycled (no workers, no decoding): the
loop is then bound by the GPU alone, whose rate varies far less from run to run than a
16-worker loader's on a busy host, so a cost of watch of about 1% can show. Besides the ratio
of medians, each repeat's pair (watched against plain or wrapped of the same repeat) gives a
ratio, and their median is reported. First, the main-thread cost of watch per step with no
step and no loader (`per_step_cost`), to set against the step time. `--smoke` runs a seconds-long CPU version (a 5 ms sleep
step, a tensor dataset) that checks the script, not the overhead.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, RandomSampler

import loaderbench
from loaderbench.model import ComputeSpec
from loaderbench.workload.batch import move_to_device
from loaderbench.workload.compute import build_compute
from loaderbench.workload.datasets import SyntheticJPEGDataset, TensorCostDataset, load_synthetic_jpegs


def _moved(loader: DataLoader, device: torch.device) -> Any:
    """The plain loop's copy inside a generator: what a wrapper alone costs or changes."""
    for batch in loader:
        yield move_to_device(batch, device, non_blocking=device.type == "cuda")


def one_run(loader: DataLoader, step: Any, device: torch.device, *, mode: str, warmup: int, batches: int) -> dict:
    """Samples/s of `batches` steps after `warmup`, timed between two synchronisations. `mode`:
    plain (the loop copies), watched, watched-nometer (watch without the CPU/memory/NVML
    meter), wrapped (the plain copy inside a generator)."""
    cuda = device.type == "cuda"
    watched = mode.startswith("watched")
    source: Any = (loaderbench.watch(loader, device=device, max_batches=warmup + batches,
                                     measure_resources=mode != "watched-nometer") if watched
                   else _moved(loader, device) if mode == "wrapped" else loader)
    samples = 0
    t0 = None
    for i, batch in enumerate(source):
        if mode == "plain":
            batch = move_to_device(batch, device, non_blocking=cuda)
        if i == warmup:
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        if i >= warmup:
            samples += int(batch[1].shape[0])
        step(batch)
        if i + 1 >= warmup + batches:
            break
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - (t0 or time.perf_counter())
    out = {"mode": mode, "samples_per_s": samples / elapsed if elapsed > 0 else None}
    if watched:
        s = source.result().results[0].summary
        out["watch_samples_per_s"] = None if s is None else s.samples_per_s
        out["watch_stall_fraction"] = None if s is None else s.stall_fraction
    return out


def per_step_cost(device: torch.device, steps: int = 3000) -> dict[str, float]:
    """Main-thread microseconds per step that the loop itself costs, with no step and no loader:
    8 small batches already on `device`, cycled, through a bare generator and through watch
    (with and without its meter); watch's cost is the difference (its events, clocks, sample
    count). Median of 5 interleaved runs per mode."""
    batches = [[torch.zeros(256, 3, 8, 8, device=device), torch.zeros(256, device=device)] for _ in range(8)]

    def run(mode: str) -> float:
        source: Any = (b for b in itertools.islice(itertools.cycle(batches), steps))
        if mode != "bare":
            source = loaderbench.watch(source, device=device if device.type == "cuda" else None,
                                       max_batches=steps, measure_resources=mode == "watched")
        t0 = time.perf_counter()
        for _ in source:
            pass
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / steps * 1e6

    times: dict[str, list[float]] = {"bare": [], "watched": [], "watched-nometer": []}
    for r in range(5):
        for mode in (list(times) if r % 2 == 0 else list(times)[::-1]):
            times[mode].append(run(mode))
    return {f"{m}_us_per_step": statistics.median(v) for m, v in times.items()}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=Path("watch_overhead.json"))
    p.add_argument("--repeats", type=int, default=3, help="runs per mode (at least 3)")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--smoke", action="store_true", help="a seconds-long CPU check of the script")
    p.add_argument("--modes", default="plain,watched", help="comma list of plain, watched, watched-nometer, wrapped")
    p.add_argument("--source", choices=("jpeg", "memory"), default="jpeg",
                   help="jpeg: the DataLoader over the embedded JPEGs; memory: 8 pinned batches, cycled")
    a = p.parse_args(argv)
    repeats = max(3, a.repeats)
    if a.smoke:
        device = torch.device("cpu")
        dataset: Any = TensorCostDataset(100_000, (3, 8, 8), 0.0, 0.1)
        step = build_compute(ComputeSpec(kind="sleep", ms=5.0), device)
        workers, batch_size, batches, warmup = 2, 16, 20, 5
    else:
        if not torch.cuda.is_available():
            raise SystemExit("watch_overhead.py needs CUDA (or --smoke for the CPU check)")
        device = torch.device("cuda:0")
        torch.cuda.set_device(device)
        dataset = SyntheticJPEGDataset(load_synthetic_jpegs(2048))
        step = build_compute(ComputeSpec(kind="model", model="resnet50"), device)
        workers, batch_size, batches, warmup = a.workers, a.batch_size, a.batches, a.warmup
    modes = [m.strip() for m in a.modes.split(",")]
    memory_batches: list[Any] = []
    if a.source == "memory":
        # Built once by the same loader, then pinned: every run feeds the GPU from host memory.
        first = DataLoader(dataset, batch_size=batch_size, num_workers=workers, shuffle=True)
        memory_batches = [[t.pin_memory() if device.type == "cuda" else t for t in b]
                          for b in itertools.islice(first, 8)]
        workers = 0
    cost = per_step_cost(device)
    print(json.dumps(cost), flush=True)
    runs = []
    for r in range(repeats):
        order = modes if r % 2 == 0 else modes[::-1]
        for mode in order:
            # The embedded JPEGs are 2,048 images: one long epoch drawn from them, as the sweep does.
            loader: Any
            if a.source == "memory":
                loader = itertools.islice(itertools.cycle(memory_batches), warmup + batches + 1)
            else:
                sampler = RandomSampler(dataset, replacement=True, num_samples=10**7)
                loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                                    pin_memory=device.type == "cuda", persistent_workers=False)
            row = one_run(loader, step, device, mode=mode, warmup=warmup, batches=batches)
            row["repeat"] = r
            runs.append(row)
            print(json.dumps(row), flush=True)
    med = {m: statistics.median(x["samples_per_s"] for x in runs if x["mode"] == m) for m in modes}
    by = {(x["mode"], x["repeat"]): x["samples_per_s"] for x in runs}
    paired = {f"watched/{base}": statistics.median(by[("watched", r)] / by[(base, r)] for r in range(repeats))
              for base in ("plain", "wrapped") if "watched" in modes and base in modes}
    result = {
        "source": a.source, "paired_median_ratio": paired, "per_step_cost": cost,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (smoke)",
        "workers": workers, "pin_memory": device.type == "cuda", "batch_size": batch_size,
        "batches": batches, "warmup": warmup, "repeats": repeats, "runs": runs,
        "median_samples_per_s": med,
        "watched_over_plain": med["watched"] / med["plain"] if "watched" in med and "plain" in med else None,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1))
    print("median samples/s: " + ", ".join(f"{m} {x:,.0f}" for m, x in med.items())
          + ("" if result["watched_over_plain"] is None else f" (watched / plain {result['watched_over_plain']:.3f})")
          + "".join(f"; paired {k} {v:.4f}" for k, v in paired.items())
          + f"; written to {a.out}")
    return result


if __name__ == "__main__":
    main()
