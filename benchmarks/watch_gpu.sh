#!/usr/bin/env bash
# loaderbench.watch on the GPU host (docs/benchmarks.md, "Inside the training loop"). Logs and
# result files under $OUT. Usage (GPU host, repository root): bash benchmarks/watch_gpu.sh [part]
#   tests:     the GPU tests of watch;
#   overhead:  watch's main-thread cost per step, then ResNet-50 steps fed from 8 pinned batches
#              in memory (GPU-bound: a stable rate), plain / wrapped / watched interleaved, 7 runs
#              each; then the same on the real loader (embedded JPEGs, 16 workers + pin), 5 runs;
#   agreement: one watched run at the user's settings (4 workers + pin: its verdict and
#              prediction; 60 batches after the warm-up) and the sweep at the same settings and
#              batch count, interleaved, 3 of each; then the same at 16 workers + pin;
#   all (default): the three.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/lb-out}; mkdir -p "$OUT"
part=${1:-all}
if [ "$part" = tests ] || [ "$part" = all ]; then
  timeout 150 python3 -m pytest -q -m gpu tests/test_watch_gpu.py -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/watch_gpu_tests.txt"
fi
if [ "$part" = overhead ] || [ "$part" = all ]; then
  timeout 200 python3 benchmarks/watch_overhead.py --source memory --repeats 7 --modes plain,wrapped,watched \
    --out "$OUT/watch_overhead_memory.json" 2>&1 | grep -v '"mode"' | tail -3
  timeout 280 python3 benchmarks/watch_overhead.py --source jpeg --repeats 5 --modes plain,wrapped,watched \
    --out "$OUT/watch_overhead_jpeg.json" 2>&1 | tail -2
fi
watch_once() {  # $1 workers, $2 output
timeout 120 python3 - "$1" "$2" <<'PY' 2>&1 | tail -6
import sys, torch
from torch.utils.data import DataLoader, RandomSampler
import loaderbench
from loaderbench.workload.compute import build_compute
from loaderbench.workload.datasets import SyntheticJPEGDataset, load_synthetic_jpegs
from loaderbench.model import ComputeSpec
workers, out = int(sys.argv[1]), sys.argv[2]
device = torch.device("cuda:0")
step = build_compute(ComputeSpec(kind="model", model="resnet50"), device)
data = SyntheticJPEGDataset(load_synthetic_jpegs(2048))
loader = DataLoader(data, batch_size=256, sampler=RandomSampler(data, replacement=True, num_samples=10**7),
                    num_workers=workers, pin_memory=True)
w = loaderbench.watch(loader, device=device, max_batches=60)
for i, batch in enumerate(w):
    step(batch)
    if i >= 80:
        break
w.save(out)
print(w.report())
PY
}
if [ "$part" = agreement ] || [ "$part" = all ]; then
  for workers in ${AGREE_WORKERS:-4 16}; do
    for r in 1 2 3; do
      watch_once "$workers" "$OUT/watch-w$workers-$r.json"
      timeout 150 python3 -m loaderbench sweep configs/imagenet-resnet50.toml --num-workers "$workers" --pin-memory on \
        --prefetch off --search grid --repeats 1 --batches 60 --max-batches 60 \
        --output "$OUT/sweep-w$workers-$r.json" --no-progress 2>&1 | tail -2
    done
  done
  python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
from loaderbench.results import read_results
out = sys.argv[1]
for w in (4, 16):
    pairs = []
    for r in (1, 2, 3):
        try:
            a = read_results(f"{out}/watch-w{w}-{r}.json").results[0].summary
            b = read_results(f"{out}/sweep-w{w}-{r}.json").results[0].summary
        except (OSError, IndexError, ValueError):
            continue
        pairs.append((a.stall_fraction, b.stall_fraction, a.samples_per_s, b.samples_per_s))
    if pairs:
        print(f"w{w}: watch / sweep stall per pair", [(round(x, 3), round(y, 3)) for x, y, _, _ in pairs],
              "samples/s", [(round(p), round(q)) for _, _, p, q in pairs],
              "median stall watch", round(statistics.median(p[0] for p in pairs), 4),
              "sweep", round(statistics.median(p[1] for p in pairs), 4))
PY
fi
