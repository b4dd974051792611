"""The stage profile against independent timing: does `loaderbench profile` say where a sample's
time goes?

    PYTHONPATH=. python3 benchmarks/profile_check.py --case jpeg --out profile_check.json
    PYTHONPATH=. python3 benchmarks/profile_check.py --case known --out profile_check_known.json

Cases:
- `jpeg`: the embedded synthetic JPEGs (500x375, quality 90) with loaderbench's ImageNet train
  transform (RandomResizedCrop(224), RandomHorizontalFlip, PILToTensor): decode with PIL, then
  the three transforms; with CUDA, batches of `--batch-size` pinned and copied to the GPU.
- `known`: files of 8 MB (a JPEG of 800x600 padded with zeros: reading it is a known cost),
  decoded with PIL, then a Compose of a 2 ms CPU spin, a 4 ms sleep and a 6 ms CPU spin
  (tests/profile_datasets.py: KnownCost).

The independent timing runs each stage alone in a plain loop, nothing intercepted: the decode
of each sample from its bytes, then each transform on the output of the one before (the same
inputs the pipeline gives it), the collate of `--batch-size` samples, and with CUDA the pin and
the copy of that batch (synchronised). `--rounds` rounds of the independent loop and of the
profile take turns, so drift and other load hit both; the stages are compared by their mean
over all rounds. Both run with one intra-op thread, as a DataLoader worker does. Reported per
stage: the profile's ms per sample, the independent ms per sample, their ratio and the stage's
share, in wall time, in wall time less the time queued for a CPU (what the stage takes on a
quiet machine: other load on a shared machine stretches wall times unevenly) and in the thread's
CPU time; whether every stage of at least 5% is within `--tolerance` (10% on the CPU, 15% for the
GPU host's target) by each; the profile's own cost (its timed samples against as many others fetched
plainly, in turn) and how often the profiling thread was queued for a CPU (other load).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch.utils.data import default_collate

from loaderbench.analysis.stages import SHARE_THAT_COUNTS, summarize_profile
from loaderbench.measure.stages import ProfilePlan, RunQueueClock, profile_stages
from loaderbench.model import LoaderSettings, StageRecord
from loaderbench.workload.batch import move_to_device
from loaderbench.workload.datasets import SyntheticJPEGDataset, load_synthetic_jpegs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


_QUEUE = RunQueueClock()


def _timed(times: dict[str, list[float]], name: str, fn: Any, *args: Any) -> Any:
    """`fn(*args)`, its wall seconds appended to times[name], its thread CPU seconds to
    times[name + " cpu"] and its seconds queued for a CPU to times[name + " queued"]."""
    q0 = _QUEUE.seconds()
    t0, c0 = time.perf_counter(), time.thread_time()
    out = fn(*args)
    times.setdefault(name, []).append(time.perf_counter() - t0)
    times.setdefault(name + " cpu", []).append(time.thread_time() - c0)
    times.setdefault(name + " queued", []).append(_QUEUE.seconds() - q0)
    return out


def _decode_bytes(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGB")


def independent(dataset: Any, case: str, indices: list[int], batch_size: int, device: torch.device,
                pin: bool) -> dict[str, list[float]]:
    """Seconds of each stage alone, per sample (and per batch for collate, pin, H2D): wall
    under the stage's name, the thread's CPU under name + " cpu"."""
    times: dict[str, list[float]] = {}
    items: list[Any] = []
    cuda = device.type == "cuda"
    for i in indices:
        if case == "jpeg":
            img = _timed(times, "decode", _decode_bytes, dataset.jpegs[i])
            label = i % dataset.num_classes
        else:
            from tests.profile_datasets import decode, read_file

            data = _timed(times, "read", read_file, dataset.paths[i], dataset.buffer)
            img = _timed(times, "decode", decode, data[: dataset.lengths[i]])
            label = i
        names: dict[str, int] = {}
        for t in dataset.transform.transforms:
            base = type(t).__name__
            names[base] = names.get(base, 0) + 1
            img = _timed(times, base if names[base] == 1 else f"{base} #{names[base]}", t, img)
        items.append((img, label) if case == "jpeg" else (torch.zeros(4), label))
        if len(items) == batch_size:
            batch = _timed(times, "collate", default_collate, items)
            items = []
            if cuda:
                torch.cuda.synchronize()
                if pin:
                    batch = _timed(times, "pin", lambda b: torch.utils.data._utils.pin_memory.pin_memory(b, device),
                                   batch)

                def copy(b: Any) -> Any:
                    out = move_to_device(b, device, non_blocking=pin)
                    torch.cuda.synchronize()
                    return out

                _timed(times, "H2D", copy, batch)
    return times


def build(case: str, tmp: Path) -> Any:
    if case == "jpeg":
        return SyntheticJPEGDataset(load_synthetic_jpegs(512))
    from tests.profile_datasets import KnownCost, write_padded_jpegs

    return KnownCost(write_padded_jpegs(tmp, 24, 8_000_000), cpu=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=("jpeg", "known"), default="jpeg")
    p.add_argument("--samples", type=int, default=128, help="samples the profile times per round")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--tolerance", type=float, default=None, help="default 0.10 on CPU, 0.15 with CUDA")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    device = torch.device("cuda:0" if a.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    tolerance = a.tolerance if a.tolerance is not None else (0.15 if cuda else 0.10)
    torch.set_num_threads(1)  # as in a DataLoader worker, for both
    settings = LoaderSettings(num_workers=0, pin_memory=cuda, prefetch=False, prefetch_factor=None,
                              persistent_workers=False, batch_size=a.batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        dataset = build(a.case, Path(tmp))
        n = len(dataset)
        independent(dataset, a.case, list(range(min(8, n))), a.batch_size, device, cuda)  # warm-up
        reference: dict[str, list[float]] = {}
        records: list[StageRecord] = []
        t_start = time.perf_counter()
        for r in range(a.rounds):
            g = torch.Generator().manual_seed(1000 + r)
            idx = torch.randperm(n, generator=g).tolist()
            idx = (idx * (a.samples // max(1, n) + 1))[: a.samples]
            for k, v in independent(dataset, a.case, idx, a.batch_size, device, cuda).items():
                reference.setdefault(k, []).extend(v)
            records.append(profile_stages(dataset, settings, ProfilePlan(
                samples=a.samples, time_budget_s=600, seed=r, device=str(device), attribute=r == 0)))
        wall_s = time.perf_counter() - t_start
    record = records[0]
    for rec in records[1:]:
        record.samples += rec.samples
        record.plain_s += rec.plain_s
        record.batches += rec.batches
    profile = summarize_profile(record)
    per_batch = {"collate", "pin", "H2D"}
    rows = []
    ok = ok_cpu = ok_unqueued = True
    cpu_total = sum(r.cpu_ms_per_sample or 0.0 for r in profile.stages)
    for row in profile.stages:
        if row.ms_per_sample is None or row.name not in reference:
            continue
        per = a.batch_size if row.name in per_batch else 1
        ref = 1e3 * statistics.fmean(reference[row.name]) / per
        ref_cpu = 1e3 * statistics.fmean(reference[row.name + " cpu"]) / per
        # wall less the time queued for a CPU: what the stage takes on a quiet machine
        ref_unqueued = ref - 1e3 * statistics.fmean(reference[row.name + " queued"]) / per
        unqueued = row.ms_per_sample - (row.queued_ms_per_sample or 0.0)
        unqueued_ratio = unqueued / ref_unqueued if ref_unqueued > 0 else None
        ratio = row.ms_per_sample / ref if ref > 0 else None
        cpu_ratio = (row.cpu_ms_per_sample or 0.0) / ref_cpu if ref_cpu > 0 else None
        checked = (row.share or 0) >= SHARE_THAT_COUNTS
        within = ratio is not None and abs(ratio - 1) <= tolerance
        # CPU time: the stages of at least 5% of the sample's CPU (a sleep's CPU is noise around zero)
        cpu_checked = (row.cpu_ms_per_sample or 0.0) >= SHARE_THAT_COUNTS * cpu_total
        cpu_within = cpu_ratio is not None and abs(cpu_ratio - 1) <= tolerance
        unqueued_within = unqueued_ratio is not None and abs(unqueued_ratio - 1) <= tolerance
        ok = ok and (within or not checked)
        ok_cpu = ok_cpu and (cpu_within or not cpu_checked)
        ok_unqueued = ok_unqueued and (unqueued_within or not checked)
        rows.append({"stage": row.name, "profile_ms": row.ms_per_sample, "independent_ms": ref, "ratio": ratio,
                     "profile_unqueued_ms": unqueued, "independent_unqueued_ms": ref_unqueued,
                     "unqueued_ratio": unqueued_ratio, "unqueued_within": unqueued_within,
                     "profile_cpu_ms": row.cpu_ms_per_sample, "independent_cpu_ms": ref_cpu, "cpu_ratio": cpu_ratio,
                     "share": row.share, "checked": checked, "within": within, "cpu_checked": cpu_checked,
                     "cpu_within": cpu_within})
    out = {
        "case": a.case, "device": str(device), "usable_cpus": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg(), "samples": profile.samples, "rounds": a.rounds, "batch_size": a.batch_size,
        "tolerance": tolerance, "all_checked_within": ok, "all_cpu_checked_within": ok_cpu,
        "all_unqueued_checked_within": ok_unqueued, "stages": rows,
        "rest_ms": profile.stage("rest of __getitem__").ms_per_sample,
        "profile_overhead": profile.cost.overhead, "plain_ms": profile.cost.plain_ms_per_sample,
        "profiled_ms": profile.cost.profiled_ms_per_sample,
        "attribution_overhead": summarize_profile(records[0]).cost.attribution_overhead,
        "queued_share": profile.queued_share, "wall_s": wall_s,
    }
    print(f"case {a.case} on {device}, {out['usable_cpus']} usable CPUs, load average "
          f"{out['load_average'][0]:.1f}; {profile.samples} samples over {a.rounds} rounds")
    print(f"{'stage':<22}{'wall ms':>9}{'alone':>8}{'ratio':>7}{'unqueued':>10}{'alone':>8}{'ratio':>7}"
          f"{'CPU ms':>8}{'alone':>8}{'ratio':>7}{'share':>7}")
    for r in rows:
        mark = "" if not r["checked"] else " " + "/".join(
            ("ok" if r[k] else "OUT") for k in ("within", "unqueued_within"))
        mark += "" if not r["cpu_checked"] else ("/ok" if r["cpu_within"] else "/OUT")
        print(f"{r['stage']:<22}{r['profile_ms']:>9.3f}{r['independent_ms']:>8.3f}{r['ratio']:>7.3f}"
              f"{r['profile_unqueued_ms']:>10.3f}{r['independent_unqueued_ms']:>8.3f}{r['unqueued_ratio'] or 0:>7.3f}"
              f"{r['profile_cpu_ms']:>8.3f}{r['independent_cpu_ms']:>8.3f}{r['cpu_ratio'] or 0:>7.3f}"
              f"{r['share']:>7.1%}{mark}")
    print(f"every stage of at least {SHARE_THAT_COUNTS:.0%} within {tolerance:.0%} (wall / wall less queued / CPU): "
          f"{ok} / {ok_unqueued} / {ok_cpu}")
    print(f"the profile's cost: {out['profiled_ms']:.3f} ms per sample timed against {out['plain_ms']:.3f} "
          f"without ({out['profile_overhead']:+.1%}); cProfile pass {out['attribution_overhead'] or 0:+.1%}; "
          f"queued for a CPU {out['queued_share'] or 0:.1%} of the time")
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
