"""The synthetic dataset's decoders on a GPU host, per image, per batch and in a sweep (about 3
minutes, at most 4):

    PYTHONPATH=. python3 benchmarks/decoder_gpu.py --out $OUT/decoder_gpu.json

1. Per image, in this process on one intra-op thread (as a DataLoader worker runs), the paths
   interleaved round by round over the same JPEGs (the embedded 500x375 ones, ~57 KB): PIL
   decode alone; `torchvision.io.decode_jpeg` on the CPU alone; the `pil` path (PIL decode,
   RandomResizedCrop, flip, PILToTensor); the `torchvision` path (decode_jpeg, then
   transforms.v2 RandomResizedCrop and flip on the uint8 tensor). Milliseconds per image,
   medians over the rounds, and images/s.
2. Per batch of `--batch-size` on the GPU (nvJPEG's batched decode through
   `decode_jpeg(list, device="cuda")`, the encoded bytes in pinned memory as a pinned loader
   leaves them): decode alone, and decode plus the per-image RandomResizedCrop and flip on the
   GPU (`workload.decode.GPUDecode`, what `--decoder nvjpeg` runs). For each: the GPU
   milliseconds per batch from CUDA events on the calling stream, the wall milliseconds per
   batch (the call blocks until nvJPEG's stream is done), the main process's CPU milliseconds
   per image (process time), and images/s.
3. `loaderbench sweep --decoder pil,torchvision,nvjpeg` with ResNet-50 at batch 256, 16
   workers, pin_memory on and the prefetcher off and on (nvJPEG inside the prefetcher, on its
   side stream, and before the step on the step's stream): its result file and table beside
   the JSON, and its rows (samples/s, stall, compute and wait, CPU, verdict) in it.

Writes one JSON (`--out`), the sweep's result file and its table next to it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch


def per_image(jpegs: list[bytes], rounds: int) -> dict[str, Any]:
    """Part 1: ms per image of each CPU path, interleaved rounds, one intra-op thread."""
    from PIL import Image

    from loaderbench.workload.datasets import SyntheticJPEGDataset, with_decoder
    from loaderbench.workload.decode import decode_jpeg_cpu, encoded_bytes

    encoded = [encoded_bytes(j) for j in jpegs]
    pil_ds = SyntheticJPEGDataset(jpegs)
    tv_ds = with_decoder(pil_ds, "torchvision")

    def pil_decode(i: int) -> Any:
        with Image.open(io.BytesIO(jpegs[i])) as im:
            return im.convert("RGB")

    paths = {
        "pil_decode": pil_decode,
        "torchvision_decode": lambda i: decode_jpeg_cpu(encoded[i]),
        "pil_path": lambda i: pil_ds[i],
        "torchvision_path": lambda i: tv_ds[i],
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {k: [] for k in paths}
    try:
        for fn in paths.values():  # warm: first calls load libraries
            fn(0)
        for _ in range(rounds):
            for name, fn in paths.items():
                t0 = time.perf_counter()
                for i in range(len(jpegs)):
                    fn(i)
                times[name].append((time.perf_counter() - t0) / len(jpegs))
    finally:
        torch.set_num_threads(threads)
    out: dict[str, Any] = {}
    for name, ts in times.items():
        ms = 1e3 * statistics.median(ts)
        out[name] = {"ms_per_image": ms, "images_per_s": 1e3 / ms, "rounds_ms": [1e3 * t for t in ts]}
    out["torchvision_over_pil_path"] = out["pil_path"]["ms_per_image"] / out["torchvision_path"]["ms_per_image"]
    out["images"] = len(jpegs)
    return out


def per_batch(jpegs: list[bytes], batch_size: int, batches: int) -> dict[str, Any]:
    """Part 2: nvJPEG per batch on the GPU, decode alone and with the crops."""
    from loaderbench.workload.decode import EncodedJPEGs, GPUDecode, encoded_bytes

    picks = [jpegs[i % len(jpegs)] for i in range(batch_size)]
    enc = EncodedJPEGs.pack([encoded_bytes(j) for j in picks]).pin_memory()
    decoder = GPUDecode("cuda")
    out: dict[str, Any] = {"batch_size": batch_size, "batches": batches, "encoded_bytes_per_batch": enc.nbytes}

    def decode_only() -> Any:
        from torchvision.io import ImageReadMode, decode_jpeg

        return decode_jpeg(enc.images(), mode=ImageReadMode.RGB, device="cuda")

    runs = {"decode": decode_only, "decode_and_crop": lambda: decoder.decode(enc)}
    for name, fn in runs.items():
        for _ in range(3):  # nvJPEG's handle and buffers, the kernels' first launches
            fn()
        torch.cuda.synchronize()
        gpu_ms, wall_ms = [], []
        cpu0 = time.process_time()
        for _ in range(batches):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            begin.record()
            fn()
            end.record()
            end.synchronize()
            wall_ms.append(1e3 * (time.perf_counter() - t0))
            gpu_ms.append(begin.elapsed_time(end))
        cpu_s = time.process_time() - cpu0
        out[name] = {
            "gpu_ms_per_batch": statistics.median(gpu_ms),
            "wall_ms_per_batch": statistics.median(wall_ms),
            "cpu_ms_per_image": 1e3 * cpu_s / (batches * batch_size),
            "images_per_s": 1e3 * batch_size / statistics.median(wall_ms),
            "gpu_ms": gpu_ms,
        }
    return out


def sweep(out_dir: Path, label: str, timeout_s: float, workers: int, batch_size: int) -> dict[str, Any]:
    """Part 3: the sweep over the three decoders; its rows."""
    result = out_dir / f"{label}.json"
    cmd = [sys.executable, "-m", "loaderbench", "sweep", "--decoder", "pil,torchvision,nvjpeg",
           "--num-workers", str(workers), "--pin-memory", "on", "--prefetch", "on,off",
           "--batch-size", str(batch_size), "--compute", "model:resnet50", "--search", "grid", "--repeats", "1",
           "--batches", "20", "--min-time", "2", "--config-timeout", "120", "--label", label,
           "--output", str(result), "--no-progress", "--wide"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # SIGTERM: the sweep saves what it measured and ends its measuring processes (they run
        # in their own session, which a kill of the sweep alone would leave running).
        proc.terminate()
        try:
            text, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
        text += f"\nstopped after {timeout_s:g} s"
    code = proc.returncode
    (out_dir / f"{label}.txt").write_text(text)
    out = {"command": " ".join(cmd[1:]), "exit_code": code, "wall_s": time.perf_counter() - t0}
    if not result.exists():
        return {**out, "rows": [], "tail": text[-2000:]}
    return {**out, **rows_of(json.loads(result.read_text()))}


def rows_of(data: dict[str, Any]) -> dict[str, Any]:
    """A sweep's rows, its knee and its compute ceiling, from its result file's JSON."""
    rows = []
    for r in data["results"]:
        s, m = r["settings"], r.get("summary") or {}
        rows.append({
            "key": r["key"], "decoder": s.get("decoder"), "prefetch": s["prefetch"], "status": r["status"],
            "error": r.get("error"), "samples_per_s": m.get("samples_per_s"),
            "stall_fraction": m.get("stall_fraction"), "compute_p50_ms": 1e3 * (m.get("compute_p50_s") or 0),
            "data_wait_p50_ms": 1e3 * (m.get("data_wait_p50_s") or 0),
            "cpu_cores": (m.get("cpu_util_pct") or 0) / 100, "gpu_util_pct": m.get("gpu_util_pct"),
            "verdict": m.get("verdict"),
        })
    rec = data.get("recommendation") or {}
    knee = rec.get("settings") or {}
    return {"rows": rows, "knee": {"decoder": knee.get("decoder"), "prefetch": knee.get("prefetch"),
                                   "dataloader_call": rec.get("dataloader_call")},
            "compute_ceiling": (data.get("analysis") or {}).get("compute_ceiling")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the JSON to write (the sweep's files go beside it)")
    ap.add_argument("--images", type=int, default=64, help="JPEGs timed per round in part 1")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--batches", type=int, default=10, help="batches timed per run in part 2")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--sweep-timeout", type=float, default=170.0, help="seconds the sweep may take")
    ap.add_argument("--no-sweep", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("decoder_gpu.py: needs a CUDA GPU (nvJPEG and the ResNet-50 sweep)")
    import torchvision

    from loaderbench.workload.datasets import load_synthetic_jpegs

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    jpegs = load_synthetic_jpegs(512)  # the sweep's dataset (and its cache file)
    report: dict[str, Any] = {
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "gpu": torch.cuda.get_device_name(0), "cpus": len(os.sched_getaffinity(0)),
        "jpeg_bytes_median": statistics.median(len(j) for j in jpegs),
    }
    report["per_image"] = per_image(jpegs[: args.images], args.rounds)
    out.write_text(json.dumps(report, indent=2))
    report["per_batch"] = per_batch(jpegs, args.batch_size, args.batches)
    out.write_text(json.dumps(report, indent=2))
    if not args.no_sweep:
        report["sweep"] = sweep(out.parent, out.stem + "-sweep", args.sweep_timeout, args.workers, args.batch_size)
    report["wall_s"] = time.perf_counter() - t0
    out.write_text(json.dumps(report, indent=2))
    pi, pb = report["per_image"], report["per_batch"]
    print(f"per image (1 thread): PIL decode {pi['pil_decode']['ms_per_image']:.2f} ms, torchvision decode "
          f"{pi['torchvision_decode']['ms_per_image']:.2f} ms; pil path {pi['pil_path']['ms_per_image']:.2f} ms, "
          f"torchvision path {pi['torchvision_path']['ms_per_image']:.2f} ms "
          f"({pi['torchvision_over_pil_path']:.2f}x)")
    for name in ("decode", "decode_and_crop"):
        b = pb[name]
        print(f"nvJPEG {name} per batch of {pb['batch_size']}: {b['gpu_ms_per_batch']:.1f} ms GPU, "
              f"{b['wall_ms_per_batch']:.1f} ms wall, {b['cpu_ms_per_image']:.3f} ms CPU per image, "
              f"{b['images_per_s']:,.0f} images/s")
    for r in (report.get("sweep") or {}).get("rows", []):
        print(f"sweep {r['key']}: {r['status']} {r['samples_per_s'] or 0:,.0f} samples/s, stall "
              f"{(r['stall_fraction'] or 0):.0%}, compute {r['compute_p50_ms']:.1f} ms, {r['verdict']}")
    print(f"wrote {out} in {report['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
