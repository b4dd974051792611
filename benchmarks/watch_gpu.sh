#!/usr/bin/env bash
# loaderbench.watch on the GPU host (docs/benchmarks.md, "Inside the training loop"). Logs and
# result files under $OUT. Usage (GPU host, repository root): bash benchmarks/watch_gpu.sh
#   1. the GPU tests of watch;
#   2. the overhead: ResNet-50, 16 workers + pin, with and without watch, interleaved, 5 runs each;
#   3. one watched run at the user's settings (4 workers + pin): its verdict and prediction;
#   4. the sweep at 16 workers + pin (prefetcher off), 3 repeats: the stall watch is set against.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/lb-out}; mkdir -p "$OUT"
[ "${SKIP_TESTS:-0}" = 1 ] || timeout 150 python3 -m pytest -q -m gpu tests/test_watch_gpu.py -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/watch_gpu_tests.txt"
timeout 240 python3 benchmarks/watch_overhead.py --repeats 5 --out "$OUT/watch_overhead.json" 2>&1 | tail -3
timeout 90 python3 - "$OUT/watch-w4.json" <<'PY' 2>&1 | tail -12
import sys, torch
from torch.utils.data import DataLoader, RandomSampler
import loaderbench
from loaderbench.compute import build_compute
from loaderbench.datasets import SyntheticJPEGDataset, load_synthetic_jpegs
from loaderbench.model import ComputeSpec
device = torch.device("cuda:0")
step = build_compute(ComputeSpec(kind="model", model="resnet50"), device)
data = SyntheticJPEGDataset(load_synthetic_jpegs(2048))
loader = DataLoader(data, batch_size=256, sampler=RandomSampler(data, replacement=True, num_samples=10**7),
                    num_workers=4, pin_memory=True)
w = loaderbench.watch(loader, device=device, max_batches=40)
for i, batch in enumerate(w):
    step(batch)
    if i >= 45:
        break
w.save(sys.argv[1])
print(w.report())
PY
[ "${SKIP_SWEEP:-0}" = 1 ] || timeout 200 python3 -m loaderbench sweep configs/imagenet-resnet50.toml --num-workers 16 --pin-memory on \
  --prefetch off --search grid --repeats 3 --output "$OUT/sweep-w16.json" --no-progress 2>&1 | tail -4
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
o = json.load(open(f"{out}/watch_overhead.json"))
s = json.load(open(f"{out}/sweep-w16.json"))
stalls = [r["watch_stall_fraction"] for r in o["runs"] if r["mode"] == "watched"]
print("watch stall (16 workers + pin, per run):", [round(x, 4) for x in stalls])
print("sweep stall:", [r["summary"]["stall_fraction"] for r in s["results"]], "samples/s:",
      [r["summary"]["samples_per_s"] for r in s["results"]])
print("overhead: watched / plain", round(o["watched_over_plain"], 4), o["median_samples_per_s"])
PY
