#!/usr/bin/env bash
# The wait-breakdown verdicts and their remedies on a GPU host (docs/benchmarks.md, section
# "Verdicts and remedies on the GPU"). Usage (GPU host): bash benchmarks/gpu_cases.sh  (logs under $OUT)
#  1. an H2D copy on the step's path: 128 x 3x224x224 float32 (77 MB), 12 workers, pinned, a 30 ms
#     GPU step, prefetcher off and on;
#  2. a batch of 113 tiny tensors (16 images + 16 target dicts of 7 tensors), 2 workers, a 20 ms GPU
#     step, pin_memory off and on, and the same payload packed into 9 tensors;
#  3. worker threads set in forked workers after the parent ran a parallel op (must not hang);
#  4. the GPU tests.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/lb-out}; mkdir -p "$OUT"
run() { local name=$1; shift; timeout 300 python3 -m loaderbench sweep "$@" --search grid --output "$OUT/$name.json" \
  --no-progress --wide > "$OUT/$name.txt" 2>&1; tail -25 "$OUT/$name.txt"; }
run h2d --dataset tensor --sample-shape 3,224,224 --batch-size 128 --compute spin:30 --num-workers 12 \
  --pin-memory on --prefetch off,on --repeats 2 --batches 30 --min-time 2
run tiny --dataset tests.fixture_datasets:make_target_dicts --collate-fn tests.fixture_datasets:collate_target_list \
  --batch-size 16 --compute spin:20 --num-workers 2 --pin-memory off,on --prefetch off --repeats 2 \
  --batches 30 --min-time 2
run packed --dataset tests.fixture_datasets:make_target_dicts --collate-fn tests.fixture_datasets:collate_target_packed \
  --batch-size 16 --compute spin:20 --num-workers 2 --pin-memory off,on --prefetch off --repeats 2 \
  --batches 30 --min-time 2
run threads --dataset tests.fixture_datasets:make_matmul_torch_init --batch-size 16 --compute sleep:4 \
  --num-workers 2 --worker-threads 1,2 --mp-context fork --config-timeout 120 --repeats 1 --batches 20 --min-time 1
timeout 280 python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tail -15 | tee "$OUT/gpu_tests.txt"
