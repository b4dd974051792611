"""GPU truth benchmarks run on a GPU host:

    PYTHONPATH=. python3 benchmarks/gpu_truth.py --out $OUT/gpu_truth.json

1. Timing attribution: a fast loader (~1 ms/batch) before a 50 ms GPU step must show a few ms
   of data-wait, not 50 ms (a naive host timer is run beside it for contrast); a 30 ms
   loader before the same step must show ~0 with the prefetcher on.
2. Instrumentation overhead: loaderbench's measured throughput for a config vs an uninstrumented
   loop over the same DataLoader and step, interleaved in one run (medians of 3 each).
3. Prefetcher: a compute-bound config with pin + prefetch reaches >= 98% of the compute ceiling,
   and its copy reaches >= 90% of the pinned bandwidth `loaderbench env` measures.

Each measurement uses loaderbench's own measurement code (`measure.trial.measure_config`, the body of
every sweep's per-config process) in this process, one config after another.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.utils.data import DataLoader, RandomSampler

from loaderbench.analysis import statistics as stats
from loaderbench.machine.bandwidth import measure_h2d_bandwidth
from loaderbench.measure.trial import measure_compute_ceiling, measure_config
from loaderbench.model import ComputeSpec, DatasetSpec, LoaderSettings, MeasureSpec, TrialJob
from loaderbench.workload.batch import move_to_device
from loaderbench.workload.compute import build_compute
from loaderbench.workload.datasets import TensorCostDataset
from loaderbench.workload.prefetch import CUDAPrefetcher


def trial_row(name: str, trial, ceiling: float | None = None) -> dict:
    s = stats.summarize([trial])
    row = {
        "case": name,
        "samples_per_s": round(s.samples_per_s, 1),
        "data_wait_p50_ms": round(s.data_wait_p50_s * 1e3, 3),
        "stall_fraction": round(s.stall_fraction, 4),
        "compute_p50_ms": round(s.compute_p50_s * 1e3, 3),
        "h2d_p50_ms": None if s.h2d_p50_s is None else round(s.h2d_p50_s * 1e3, 3),
        "h2d_gb_per_s": None if s.h2d_gb_per_s is None else round(s.h2d_gb_per_s, 2),
        "h2d_hidden": None if s.h2d_hidden_fraction is None else round(s.h2d_hidden_fraction, 3),
        "timing": trial.timing,
    }
    if ceiling:
        row["pct_of_ceiling"] = round(100 * s.samples_per_s / ceiling, 2)
    return row


def naive_host_wait_ms(batch_size: int, io_ms: float, step_ms: float, n: int = 30) -> float:
    """The naive timer: host clock around next() + a pageable .to(device), no sync
    after the step. The pageable copy blocks until the queued step is done, so the step's time
    lands in 'data-wait'."""
    ds = TensorCostDataset(4096, (3, 32, 32), 0.0, io_ms)
    loader = DataLoader(ds, batch_size=batch_size, num_workers=2,
                        sampler=RandomSampler(ds, num_samples=batch_size * (n + 10)))
    step = build_compute(ComputeSpec(kind="spin", ms=step_ms), torch.device("cuda"))
    waits = []
    it = iter(loader)
    for i in range(n + 5):
        t0 = time.perf_counter()
        b = move_to_device(next(it), torch.device("cuda"), non_blocking=False)
        t1 = time.perf_counter()
        step(b)
        if i >= 5:
            waits.append(t1 - t0)
    torch.cuda.synchronize()
    return 1e3 * statistics.median(waits)


def plain_loop_samples_per_s(settings: LoaderSettings, ds_spec: DatasetSpec, step_spec: ComputeSpec,
                             warmup: int, batches: int) -> float:
    """The same DataLoader and step with no instrumentation: wall time with one sync at the end."""
    from loaderbench.workload.datasets import build_dataset

    ds = build_dataset(ds_spec)
    loader = DataLoader(ds, sampler=RandomSampler(ds, num_samples=settings.batch_size * (warmup + batches + 64)),
                        **settings.dataloader_kwargs())
    device = torch.device("cuda")
    step = build_compute(step_spec, device)
    source = CUDAPrefetcher(loader, device=device) if settings.prefetch else loader
    it = iter(source)
    for _ in range(warmup):
        b = next(it)
        if not settings.prefetch:
            b = move_to_device(b, device, non_blocking=settings.pin_memory)
        step(b)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(batches):
        b = next(it)
        if not settings.prefetch:
            b = move_to_device(b, device, non_blocking=settings.pin_memory)
        step(b)
    torch.cuda.synchronize()
    return settings.batch_size * batches / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu_truth.json")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "run this on a host with a CUDA GPU"
    report: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}

    # --- 1. timing attribution ---------------------------------------------------------------
    fast = DatasetSpec(kind="tensor", sample_shape=(3, 32, 32), io_ms=0.03, num_samples=4096)
    slow = DatasetSpec(kind="tensor", sample_shape=(3, 32, 32), io_ms=30.0 / 32, num_samples=4096)
    spin50 = ComputeSpec(kind="spin", ms=50.0)
    m = MeasureSpec(batches=30, warmup_batches=5, min_time_s=1.5, timing="auto", device="cuda")
    rows = []
    s2 = LoaderSettings(2, True, False, 2, False, 32)
    rows.append(trial_row("1a fast loader (~1 ms), 2 workers, spin:50, events", measure_config(TrialJob(s2, fast, spin50, m))))
    rows.append(trial_row("1a same, --timing sync", measure_config(TrialJob(s2, fast, spin50, MeasureSpec(**{**m.to_dict(), "timing": "sync"})))))
    naive = naive_host_wait_ms(32, 0.03, 50.0)
    for pf in (False, True):
        s0 = LoaderSettings(0, True, pf, None, False, 32)
        rows.append(trial_row(f"1b 30 ms loader (0 workers), spin:50, prefetch {'on' if pf else 'off'}, events",
                              measure_config(TrialJob(s0, slow, spin50, m))))
        rows.append(trial_row(f"1b same, prefetch {'on' if pf else 'off'}, --timing sync",
                              measure_config(TrialJob(s0, slow, spin50, MeasureSpec(**{**m.to_dict(), "timing": "sync"})))))
    report["attribution"] = {"rows": rows, "naive_host_timer_wait_ms": round(naive, 2)}

    # --- 3. prefetcher in a compute-bound config; copy bandwidth ----------------------------
    bw = measure_h2d_bandwidth()
    report["bandwidth"] = bw
    big = DatasetSpec(kind="tensor", sample_shape=(3, 224, 224), num_samples=1024)
    spin20 = ComputeSpec(kind="spin", ms=20.0)
    m3 = MeasureSpec(batches=40, warmup_batches=5, min_time_s=2.0, device="cuda")
    ceiling = measure_compute_ceiling(TrialJob(LoaderSettings(0, False, False, None, False, 64), big, spin20, m3, kind="ceiling"))
    report["ceiling"] = ceiling
    rows3 = []
    for pin, pf in ((False, False), (True, False), (False, True), (True, True)):
        s = LoaderSettings(6, pin, pf, 2, False, 64)
        rows3.append(trial_row(f"3 tensor 3x224x224 f32, batch 64, 6 workers, pin {pin}, prefetch {pf}",
                               measure_config(TrialJob(s, big, spin20, m3)), ceiling["samples_per_s"]))
    report["prefetcher"] = rows3
    best = rows3[-1]
    report["target3"] = {
        "pct_of_ceiling": best["pct_of_ceiling"],
        "copy_gb_per_s": best["h2d_gb_per_s"],
        "pct_of_pinned_bandwidth": round(100 * best["h2d_gb_per_s"] / bw["pinned_gb_per_s"], 1),
    }

    # --- 2. instrumentation overhead ---------------------------------------------------------
    s = LoaderSettings(6, True, True, 2, False, 64)
    inst, plain = [], []
    for _ in range(3):
        t = measure_config(TrialJob(s, big, spin20, MeasureSpec(batches=60, warmup_batches=10, min_time_s=2.0, device="cuda")))
        inst.append(stats.trial_samples_per_s(t))
        plain.append(plain_loop_samples_per_s(s, big, spin20, warmup=10 + 12, batches=len(t.step_s)))
    report["overhead"] = {
        "instrumented_samples_per_s": [round(x, 1) for x in inst],
        "plain_samples_per_s": [round(x, 1) for x in plain],
        "ratio_of_medians": round(statistics.median(inst) / statistics.median(plain), 4),
    }

    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
