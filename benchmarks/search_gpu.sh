#!/usr/bin/env bash
# Time to the answer on the GPU host (docs/benchmarks.md, "Time to the answer"). Usage (GPU host):
#   bash benchmarks/search_gpu.sh [part]      (logs and result files under $OUT)
# part "answer":  1. `loaderbench sweep` with no arguments (search auto, warm process), timed;
#                 2. configs/imagenet-resnet50.toml (no worker list: the search chooses), timed;
# part "whatif":  3. the same config under CPU masks of 8 and 4 CPUs (taskset), to check
#                    `show --what-if cpus=8|4` of the 16-CPU run against them;
# part "fixed":   4. the fixed cost per config: 4 configs near the knee, grid, one repeat, with a
#                    fresh process per config, then with the warm process.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/lb-out}; mkdir -p "$OUT"
part=${1:-answer}
timed() { local name=$1; shift; local t0; t0=$(date +%s.%N)
  timeout 590 "$@" --output "$OUT/$name.json" --no-progress --wide > "$OUT/$name.txt" 2>&1
  echo "$name rc=$? wall_s=$(python3 -c "import sys; print(round($(date +%s.%N) - $t0, 1))")" | tee -a "$OUT/walls.txt"; tail -30 "$OUT/$name.txt"; }
if [ "$part" = answer ]; then
  timed default python3 -m loaderbench sweep
  timed imagenet python3 -m loaderbench sweep configs/imagenet-resnet50.toml
fi
if [ "$part" = whatif ]; then
  timed imagenet-cpus8 taskset -c 0-7 python3 -m loaderbench sweep configs/imagenet-resnet50.toml
  timed imagenet-cpus4 taskset -c 0-3 python3 -m loaderbench sweep configs/imagenet-resnet50.toml
fi
if [ "$part" = fixed ]; then
  for iso in process warm; do
    timed "fixed-$iso-$RANDOM" python3 -m loaderbench sweep configs/imagenet-resnet50.toml --search grid \
      --isolation "$iso" --num-workers 16 --pin-memory on --prefetch off,on --repeats 2
  done
fi
