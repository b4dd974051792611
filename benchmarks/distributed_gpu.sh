#!/usr/bin/env bash
# Distributed sweeps on a GPU host. Logs and result files go under $OUT.
# NVLink multicast stays off (harmless where there is none).
# Usage (GPU host, repository root):
#   bash benchmarks/distributed_gpu.sh smoke     # GPU tests + a 2-rank ResNet-50 smoke sweep
#   bash benchmarks/distributed_gpu.sh two       # configs/imagenet-resnet50.toml, one rank per GPU
#   bash benchmarks/distributed_gpu.sh one       # the same grid (pin_memory on) on GPU 0 alone:
#                                                # single process, then --nproc-per-node 1
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/lb-out}; mkdir -p "$OUT"
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
case "${1:-smoke}" in
smoke)
  nvidia-smi --query-gpu=name,pci.bus_id --format=csv | tee "$OUT/nvidia-smi.txt"
  nproc | tee -a "$OUT/nvidia-smi.txt"
  timeout 300 python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.txt" | tail -15
  timeout 240 python3 -m loaderbench sweep --nproc-per-node "$NGPU" --num-workers 8 --pin-memory on \
    --prefetch on --batches 10 --min-time 2 --repeats 1 --label smoke-ddp \
    --output "$OUT/smoke_ddp.json" --no-progress 2>&1 | tee "$OUT/smoke_ddp.txt"
  ;;
two)
  timeout 590 python3 -m loaderbench sweep configs/imagenet-resnet50.toml --nproc-per-node "$NGPU" \
    --label "imagenet-resnet50-${NGPU}gpu" --output "$OUT/imagenet_ddp.json" --no-progress 2>&1 \
    | tee "$OUT/imagenet_ddp.txt"
  ;;
one)
  for mode in single nproc1; do
    extra=(); [ "$mode" = nproc1 ] && extra=(--nproc-per-node 1)
    CUDA_VISIBLE_DEVICES=0 timeout 290 python3 -m loaderbench sweep configs/imagenet-resnet50.toml \
      --pin-memory on "${extra[@]}" --label "imagenet-resnet50-1gpu-$mode" \
      --output "$OUT/imagenet_1gpu_$mode.json" --no-progress 2>&1 | tee "$OUT/imagenet_1gpu_$mode.txt"
  done
  ;;
esac
