# From the repository root on the 2-core machine: each input swept as a grid (3 repeats), then
# plain loops (ceiling-varied-cpu/plain.py: a fresh DataLoader, 300 batches after 40) with the
# 5-ms step and without it, twice.
V=docs/data/bench/ceiling-varied-cpu
OUT=${OUT:-/tmp/window-uncertainty}; mkdir -p "$OUT"
for ds in bimodal lognormal stall; do
  PYTHONPATH=$V:. python3 -m loaderbench sweep --dataset vards:$ds --batch-size 8 --compute sleep:5 --num-workers 2,4,6 \
    --search grid --repeats 3 --no-profile --no-progress --output "$OUT/$ds.json" > "$OUT/sweep-$ds.txt" 2>&1
  python3 $V/plain.py $ds 8 2,4,6 0.005 >> "$OUT/plain.jsonl"
  python3 $V/plain.py $ds 8 2,4,6 0.0 >> "$OUT/plain.jsonl"
done
for ds in bimodal lognormal stall; do
  python3 $V/plain.py $ds 8 2,4,6 0.005 >> "$OUT/plain.jsonl"
  python3 $V/plain.py $ds 8 2,4,6 0.0 >> "$OUT/plain.jsonl"
done
