#!/usr/bin/env bash
# One GPU round in three parts, each under 10 minutes (run on a GPU host; logs under $OUT):
#   bash benchmarks/gpu_round.sh 1   GPU tests, the default sweep (timed), its pick against a plain loop
#   bash benchmarks/gpu_round.sh 2   the decode what-ifs and the profile's cost (whatif_decode_gpu.py),
#                                    the stage profile against independent timing on CUDA
#   bash benchmarks/gpu_round.sh 3   the loader ceiling against a sustained draw, the decoders
#   bash benchmarks/gpu_round.sh 5   the default sweep, its pick against a plain loop, the decode what-ifs
#                                    in what time is left (whatif_decode_gpu.py --total 240)
#   bash benchmarks/gpu_round.sh 6   the default sweep twice (timed), its pick against a plain loop between
#   bash benchmarks/gpu_round.sh 7   the decode what-ifs against measured runs, without the profile-cost pair
#                                    (and, with PICK_OF=RESULT, that result's pick against a plain loop)
#   bash benchmarks/gpu_round.sh 8   the default sweep twice (timed), each one's pick (its sustained figure)
#                                    against a plain loop right after it (SWEEPS=1: once)
#   bash benchmarks/gpu_round.sh 9   the decoder GPU tests, then --decoder nvjpeg at 1 and 4 workers,
#                                    with and without the prefetcher (the GPU decode's wait part)
#   bash benchmarks/gpu_round.sh 10  the loader ceiling against a sustained draw on the GPU case and on
#                                    jittered per-sample latency (benchmarks/jitter_dataset.py), then
#                                    the default sweep (timed)
#   bash benchmarks/gpu_round.sh 11  jittered per-sample latency: a grid sweep at 4, 8 and 16 workers, its pick and
#                                    the 8- and 16-worker rows against plain loops with the step, and 600-batch draws
#   bash benchmarks/gpu_round.sh 12  jittered per-sample latency swept as a user would (the search, its repeats), its
#                                    pick against plain loops with the step; then the default sweep (timed)
#   bash benchmarks/gpu_round.sh 13  jittered per-sample latency: a grid sweep at 4, 8 and 16 workers with 3 repeats (each
#                                    row's ± against plain loops with the step), the ceiling at 32 and 48 workers
#                                    against 600-batch draws; then the default sweep (timed)
# Every file the steps write ends in $OUT/round-N.tgz, with $OUT/steps.txt beside it.
#   bash benchmarks/gpu_round.sh 4   part 1 without the tests, the pick's neighbours' plain loops too,
#                                    and the stage profile against independent timing on CUDA
# Every step has its own timeout, so one that hangs leaves the others' logs.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/lb-out}; mkdir -p "$OUT"
part=${1:?part 1 to 13}
step() {  # step NAME SECONDS CMD...: run CMD with a timeout, its output and wall seconds under $OUT
  local name=$1 limit=$2; shift 2
  local t0=$EPOCHREALTIME
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  printf '%s rc=%s wall_s=%.1f\n' "$name" "$rc" "$(awk "BEGIN{print $EPOCHREALTIME - $t0}")" | tee -a "$OUT/steps.txt"
  tail -n 25 "$OUT/$name.log"
}
jitter_grid() {  # jitter_grid REPEATS ALSO_WORKERS DRAW_CONFIGS: jittered latency swept as a grid at 4, 8 and 16 workers,
  # its pick (and ALSO_WORKERS at the pick's other settings) against plain loops with the step, the loader
  # ceiling at DRAW_CONFIGS against 600-batch draws
  step jitter_sweep 200 python3 -m loaderbench sweep --dataset benchmarks.jitter_dataset:JitteredLatency --batch-size 8 \
    --compute sleep:5 --num-workers 4,8,16 --search grid --repeats "$1" --no-profile --no-progress --output "$OUT/jitter.json"
  step jitter_pick 200 python3 benchmarks/pick_check.py "$OUT/jitter.json" --out "$OUT/jitter-pick.json" --rounds 3 \
    --batches 300 --also-workers "$2"
  step jitter_draw 150 python3 benchmarks/ceiling_check.py --out "$OUT/jitter-draw.json" --configs "$3" --rounds 2 \
    --dataset import:benchmarks.jitter_dataset:JitteredLatency --batch-size 8 --compute sleep:5 --skip 80 --draw 600
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__, torch.get_num_threads())" >> "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"
case $part in
1)
  step gpu_tests 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests
  step default_sweep 165 python3 -m loaderbench sweep --output "$OUT/default.json" --no-progress
  step pick_check 220 python3 benchmarks/pick_check.py "$OUT/default.json" --out "$OUT/pick.json" --rounds 3 --batches 150
  ;;
2)
  step whatif_decode 440 python3 benchmarks/whatif_decode_gpu.py --out "$OUT/whatif_decode_gpu.json" --total 420
  step profile_check 110 python3 benchmarks/profile_check.py --case jpeg --device cuda --batch-size 256 --samples 256 --rounds 3 --out "$OUT/profile_check_cuda.json"
  ;;
3)
  step ceiling_check 250 python3 benchmarks/ceiling_check.py --out "$OUT/ceiling.json" --configs 12:pin,16:pin --rounds 2 --draw 100
  step decoder_gpu 260 python3 benchmarks/decoder_gpu.py --out "$OUT/decoder_gpu.json" --rounds 3 --sweep-timeout 150
  ;;
4)
  step default_sweep 165 python3 -m loaderbench sweep --output "$OUT/default.json" --no-progress
  step pick_check 240 python3 benchmarks/pick_check.py "$OUT/default.json" --out "$OUT/pick.json" --rounds 3 --batches 150 --also-workers 12,16
  step profile_check 110 python3 benchmarks/profile_check.py --case jpeg --device cuda --batch-size 256 --samples 256 --rounds 3 --out "$OUT/profile_check_cuda.json"
  ;;
5)
  step default_sweep 165 python3 -m loaderbench sweep --output "$OUT/default.json" --no-progress
  step pick_check 120 python3 benchmarks/pick_check.py "$OUT/default.json" --out "$OUT/pick.json" --rounds 3 --batches 150
  step whatif_decode 260 python3 benchmarks/whatif_decode_gpu.py --out "$OUT/whatif_decode_gpu.json" --total 240
  ;;
6)
  step default_sweep 165 python3 -m loaderbench sweep --output "$OUT/default.json" --no-progress
  step pick_check 200 python3 benchmarks/pick_check.py "$OUT/default.json" --out "$OUT/pick.json" --rounds 3 --batches 150
  step default_sweep2 165 python3 -m loaderbench sweep --output "$OUT/default2.json" --no-progress
  ;;
7)
  step whatif_decode 520 python3 benchmarks/whatif_decode_gpu.py --out "$OUT/whatif_decode_gpu.json" --total 500 --no-pair --budget ${BUDGET:-40}
  [ -n "${PICK_OF:-}" ] && step pick_check 100 python3 benchmarks/pick_check.py "$PICK_OF" --out "$OUT/pick.json" --rounds 3 --batches 150
  ;;
10)
  step ceiling_gpu 300 python3 benchmarks/ceiling_check.py --out "$OUT/ceiling.json" --configs 16:pin,12:pin --rounds 2 --draw 100
  step ceiling_jitter 200 python3 benchmarks/ceiling_check.py --out "$OUT/ceiling-jitter.json" --configs 8,16 --rounds 2 \
    --dataset import:benchmarks.jitter_dataset:JitteredLatency --batch-size 8 --compute sleep:5 --skip 40 --draw 200
  step default_sweep1 150 python3 -m loaderbench sweep --output "$OUT/default-1.json" --no-progress
  ;;
11)
  jitter_grid 1 8,16 16,8
  ;;
12)
  step jitter_search 160 python3 -m loaderbench sweep --dataset benchmarks.jitter_dataset:JitteredLatency --batch-size 8 \
    --compute sleep:5 --no-profile --no-progress --output "$OUT/jitter-search.json"
  step jitter_search_pick 200 python3 benchmarks/pick_check.py "$OUT/jitter-search.json" --out "$OUT/jitter-search-pick.json" \
    --rounds 3 --batches 300
  step default_sweep1 150 python3 -m loaderbench sweep --output "$OUT/default-1.json" --no-progress
  ;;
13)
  jitter_grid 3 4,8 32,48
  step default_sweep1 150 python3 -m loaderbench sweep --output "$OUT/default-1.json" --no-progress
  ;;
8)
  for n in $(seq 1 "${SWEEPS:-2}"); do
    step default_sweep$n 150 python3 -m loaderbench sweep --output "$OUT/default-$n.json" --no-progress
    step pick_check$n 180 python3 benchmarks/pick_check.py "$OUT/default-$n.json" --out "$OUT/pick-$n.json" --rounds 3 --batches 150
  done
  ;;
9)
  step gpu_tests_decode 130 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_decoders.py
  step nvjpeg_sweep 150 python3 -m loaderbench sweep --decoder nvjpeg --num-workers 1,4 --prefetch off,on --pin-memory on --search grid --repeats 1 --no-profile --no-progress --output "$OUT/nvjpeg.json"
  ;;
esac
# Everything in one archive (a device call brings back a few files only), the step log beside it.
(cd "$OUT" && tar czf "round-$part.tgz" --exclude "round-$part.tgz" --exclude steps.txt . 2>/dev/null)
find "$OUT" -mindepth 1 ! -name "round-$part.tgz" ! -name steps.txt -delete
