#!/usr/bin/env bash
# GPU smoke run on a GPU host: GPU tests, `loaderbench env`, two small sweeps.
# Usage (device): bash benchmarks/gpu_smoke.sh   (writes logs under $OUT)
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/lb-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__)"
timeout 60 python3 -m loaderbench env 2>&1 | tee "$OUT/env.txt" | tail -60
timeout 240 python3 -m pytest -q -m gpu tests -x -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.txt" | tail -30
timeout 120 python3 -m loaderbench sweep --dataset tensor --io-ms 0.05 --batch-size 64 \
  --compute spin:20 --num-workers 0,2 --batches 20 --min-time 1 --label smoke-spin \
  --output "$OUT/smoke_spin.json" --no-progress 2>&1 | tee "$OUT/smoke_spin.txt"
timeout 200 python3 -m loaderbench sweep --num-workers 14 --batch-size 256 --num-samples 512 \
  --batches 10 --min-time 2 --label smoke-r50 --output "$OUT/smoke_r50.json" --no-progress 2>&1 \
  | tee "$OUT/smoke_r50.txt"
