"""Where a batch's GPU decode spends its time in a training loop, against the stage profile's
timing of it alone (`measure/alternatives.time_gpu_decode`).

The profile times nvJPEG's batched decode + each image's crop with nothing else on the GPU; in a
loop the same decode runs beside a ResNet-50 step. This script times, in one process, on the
embedded dataset's JPEGs (distinct ones, as a loop sees them, and the profile's 16 repeated), the
crops done for the batch at once (`--crop batch`, GPUDecode's default) or image by image with v2
transforms (`--crop each`):

- `alone_*`: decode (+ crops) with the device idle before each call (what the profile does);
- `after_step`: the decode call right after a step was queued (is it held by the step's kernels?);
- `serialised`: decode, crops, step, batch after batch on one stream (`--decoder nvjpeg`, no
  prefetcher);
- `side_before`: the next batch decoded on a side stream before the step is queued (what the
  CUDA prefetcher does);
- `side_after`: the step queued first, then the next batch decoded on a side stream;
- `step_alone`: the step alone, batch after batch.

Per variant: the wall milliseconds per batch over the whole run (synchronised at both ends), and
the median wall and CPU milliseconds of the decode call, the crops and the step's queueing.

    PYTHONPATH=. python3 benchmarks/nvjpeg_inloop.py --out OUT.json [--batches 24] [--rounds 2] [--crop each]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--crop", choices=("batch", "each"), default="batch",
                    help="crop the batch at once (GPUDecode's default) or each image with v2 transforms")
    args = ap.parse_args()

    import torchvision
    from torchvision.io import ImageReadMode, decode_jpeg

    from loaderbench.model import ComputeSpec
    from loaderbench.workload.compute import build_compute
    from loaderbench.workload.datasets import load_synthetic_jpegs
    from loaderbench.workload.decode import BatchRandomResizedCrop, encoded_bytes, tensor_train_transform

    dev = torch.device("cuda", 0)
    B, N = args.batch_size, args.batches
    jpegs = load_synthetic_jpegs(B * 8)
    distinct = [[encoded_bytes(j) for j in jpegs[i * B:(i + 1) * B]] for i in range(8)]
    repeated = [encoded_bytes(jpegs[i % 16]) for i in range(B)]
    labels = torch.zeros(B, dtype=torch.int64, device=dev)
    crop = tensor_train_transform()
    step = build_compute(ComputeSpec(kind="model", model="resnet50"), dev)
    side = torch.cuda.Stream(dev)

    def decode(imgs: list[torch.Tensor]) -> list[torch.Tensor]:
        return decode_jpeg(imgs, mode=ImageReadMode.RGB, device=dev)

    batch_crop = BatchRandomResizedCrop()

    def crops(decoded: list[torch.Tensor]) -> torch.Tensor:
        if args.crop == "batch":
            return batch_crop(decoded)
        return torch.stack([crop(x) for x in decoded])

    rec: dict[str, dict[str, list[float]]] = {}

    def timed(name: str, key: str, fn: Any, *a: Any) -> Any:
        w, c = time.perf_counter(), time.thread_time()
        out = fn(*a)
        rec.setdefault(name, {}).setdefault(key + "_wall_ms", []).append(1e3 * (time.perf_counter() - w))
        rec[name].setdefault(key + "_cpu_ms", []).append(1e3 * (time.thread_time() - c))
        return out

    def per_batch(name: str, t0: float, n: int) -> None:
        torch.cuda.synchronize(dev)
        rec.setdefault(name, {}).setdefault("per_batch_ms", []).append(1e3 * (time.perf_counter() - t0) / n)

    def alone(name: str, batches: Any, with_crops: bool) -> None:
        for i in range(N):
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            d = timed(name, "decode", decode, batches(i))
            if with_crops:
                timed(name, "crops", crops, d)
            per_batch(name, t0, 1)

    def after_step(name: str) -> None:
        x = crops(decode(distinct[0]))
        for i in range(N):
            torch.cuda.synchronize(dev)
            step((x, labels))
            timed(name, "decode", decode, distinct[i % 8])
        torch.cuda.synchronize(dev)

    def serialised(name: str) -> None:
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for i in range(N):
            d = timed(name, "decode", decode, distinct[i % 8])
            x = timed(name, "crops", crops, d)
            timed(name, "step", step, (x, labels))
        per_batch(name, t0, N)

    def side_stream(name: str, step_first: bool) -> None:
        def prepare(i: int) -> torch.Tensor:
            with torch.cuda.stream(side):
                d = timed(name, "decode", decode, distinct[i % 8])
                return timed(name, "crops", crops, d)

        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        ready = prepare(0)
        for i in range(N):
            torch.cuda.current_stream(dev).wait_stream(side)
            x = ready
            x.record_stream(torch.cuda.current_stream(dev))
            if step_first:
                timed(name, "step", step, (x, labels))
                ready = prepare(i + 1)
            else:
                ready = prepare(i + 1)
                timed(name, "step", step, (x, labels))
        per_batch(name, t0, N)

    def step_alone(name: str) -> None:
        x = crops(decode(distinct[0]))
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(N):
            timed(name, "step", step, (x, labels))
        per_batch(name, t0, N)

    variants = {
        "alone_repeated16": lambda n: alone(n, lambda i: repeated, True),
        "alone_distinct": lambda n: alone(n, lambda i: distinct[i % 8], True),
        "alone_decode_only": lambda n: alone(n, lambda i: distinct[i % 8], False),
        "after_step": after_step,
        "serialised": serialised,
        "side_before": lambda n: side_stream(n, False),
        "side_after": lambda n: side_stream(n, True),
        "step_alone": step_alone,
    }
    # warm-up: every path once, then drop what it recorded
    for name, fn in variants.items():
        fn(name)
    rec.clear()
    for _ in range(args.rounds):
        for name, fn in variants.items():
            fn(name)
    # The profile's own timing of the same JPEGs, in this process, and where the crops' CPU goes.
    from loaderbench.measure.alternatives import time_gpu_decode

    profile_timings = [time_gpu_decode(jpegs[:16], B, "cuda:0") for _ in range(2)]
    with torch.inference_mode():
        alone("alone_inference_mode", lambda i: distinct[i % 8], True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    alone("alone_1_thread", lambda i: distinct[i % 8], True)
    torch.set_num_threads(threads)
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    d = decode(distinct[0])
    prof.enable()
    crops(d)
    prof.disable()
    torch.cuda.synchronize(dev)
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    summary = {name: {k: statistics.median(v) for k, v in d.items()} for name, d in rec.items()}
    out = {"crop": args.crop, "torch": torch.__version__, "torchvision": torchvision.__version__,
           "gpu": torch.cuda.get_device_name(dev), "batch_size": B, "batches": N, "rounds": args.rounds,
           "summary": summary, "raw": rec,
           "profile_timings": [None if t is None else vars(t) for t in profile_timings],
           "crops_profile": text.getvalue()}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    for name, d in summary.items():
        print(name, " ".join(f"{k}={v:.1f}" for k, v in d.items()))
    print("profile's time_gpu_decode:", out["profile_timings"])
    print(text.getvalue()[:6000])


if __name__ == "__main__":
    main()
