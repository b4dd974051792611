#!/usr/bin/env bash
# A new user's walkthrough on one GPU host (H200, 16 CPUs), following only README.md,
# docs/profile.md, docs/what-if.md and docs/decoders.md (plus the flag tables of docs/sweep.md,
# docs/search.md, docs/commands.md and docs/results.md that they link to), for the embedded
# default dataset (`--dataset synthetic`, the default):
#
#   1. the stage table: where each sample's time goes      (loaderbench profile, table + JSON)
#   2. a what-if beyond the DataLoader settings             (sweep --what-if decode=torchvision,
#                                                            show --what-if ... --format json)
#   3. the measured run that checks it                      (sweep --decoder torchvision)
#
# Run from the repository root:  PYTHONPATH=. OUT=/some/dir bash benchmarks/gpu_walkthrough.sh
# Everything lands in $OUT (default /tmp/lb-walk): <step>.log (stdout+stderr, or stderr alone when
# stdout is the JSON), steps.txt (exit code and wall seconds per step), and walkthrough.tgz (all of
# it, JSON included); the JSON files themselves are removed after the tar, the logs and steps.txt
# are kept. The whole script is held under 540 s of wall time: each step runs under `timeout`
# clipped to what is left of a 520 s deadline, and the sweeps' --time-budget is set from it.
#
# Each step quotes the doc line that leads a new user to it.

set -u
OUT=${OUT:-/tmp/lb-walk}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1                # the repository root
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LB=(python3 -m loaderbench)                      # README: "`python -m loaderbench` works as well as `loaderbench`."

T0=$(date +%s)
DEADLINE=$((T0 + 520))                           # 540 s in all, 20 s kept for the summary and the tar
KILL_GRACE=10                                    # timeout -k: SIGKILL this long after SIGTERM
: > "$OUT/steps.txt"
echo "# step rc wall_s (rc 124/137: timed out; 130: loaderbench interrupted by SIGTERM, partial result saved)" >> "$OUT/steps.txt"

left() { echo $((DEADLINE - $(date +%s))); }

# run_step NAME TIMEOUT_S STDOUT_FILE CMD...
#   STDOUT_FILE "-" : stdout and stderr both to $OUT/NAME.log
#   otherwise       : stdout to STDOUT_FILE (the JSON), stderr to $OUT/NAME.log
run_step() {
    local name=$1 t=$2 so=$3; shift 3
    local l; l=$(( $(left) - KILL_GRACE ))
    if (( l < 10 )); then
        echo "$name skipped 0 (no time left)" >> "$OUT/steps.txt"; return
    fi
    (( t > l )) && t=$l
    local s e rc
    s=$(date +%s.%N)
    {
        echo "\$ timeout $t ${*}"
        echo "# started $(date -u +%FT%TZ), timeout ${t}s"
    } > "$OUT/$name.log"
    if [[ $so == - ]]; then
        timeout -k "$KILL_GRACE" "$t" "$@" >> "$OUT/$name.log" 2>&1; rc=$?
    else
        timeout -k "$KILL_GRACE" "$t" "$@" > "$so" 2>> "$OUT/$name.log"; rc=$?
    fi
    e=$(date +%s.%N)
    local w; w=$(awk -v a="$s" -v b="$e" 'BEGIN{printf "%.1f", b-a}')
    echo "# exit $rc after ${w}s" >> "$OUT/$name.log"
    echo "$name $rc $w" >> "$OUT/steps.txt"
    if [[ $so != - ]]; then
        # a JSON on stdout should parse; say so in the log (no loaderbench code involved)
        python3 -c 'import json,sys; json.load(open(sys.argv[1])); print("# stdout JSON parses:", sys.argv[1])' "$so" \
            >> "$OUT/$name.log" 2>&1 || echo "# stdout is not valid JSON: $so" >> "$OUT/$name.log"
    fi
}

# --- 0. what machine is this (cheap, no loaderbench) ------------------------------------------
{ nvidia-smi -L 2>&1; nproc; timeout 30 python3 -c 'import torch,torchvision;print(torch.__version__, torchvision.__version__, torch.cuda.is_available())' 2>&1; } \
    > "$OUT/machine.log"

# --- 1. the stage table: where each sample's time goes ----------------------------------------
# profile.md: "loaderbench profile    # the embedded JPEGs and their transform"
# On CUDA its defaults are num_workers=1, batch_size=256, pin_memory on; --time-budget 20 s
# (default) "once the dataset is built".
# profile.md: the table and `--format json` are one output each (two runs, two samplings).
run_step profile 60 - "${LB[@]}" profile
run_step profile_json 60 "$OUT/profile.json" "${LB[@]}" profile --format json

# --- 2. the what-if: decode with torchvision.io instead of PIL --------------------------------
# what-if.md: "`--what-if` (on `sweep` and `show`) asks what a change would give: ... another JPEG
#   decoder (`decode=torchvision`, `decode=nvjpeg`)"; the answer reads the sweep's profile of its
#   pick (profile.md: "In the sweep: the profile of the pick", taken unless --no-profile), so this
#   is a plain default sweep (README: "loaderbench sweep") with the what-if asked.
# sweep.md: "--time-budget ... seconds to the answer, counted from the command's start ... default
#   120"; README: "about two minutes on an H200 host with ResNet-50 (97-130 s over five runs)".
# --output: results.md "default results/<label>-<time>.json, or --output FILE" (the result JSON,
#   whatever --format prints); --verbose: the stage table of the pick, the decoders' timings and
#   the what-if in full; --wide: every column in a piped log; --no-progress: small logs.
B1=120
(( $(left) - KILL_GRACE < B1 + 50 )) && B1=$(( $(left) - KILL_GRACE - 50 ))
(( B1 < 20 )) && B1=20
run_step sweep_pil $((B1 + 50)) - "${LB[@]}" sweep --label walk-pil --time-budget "$B1" \
    --what-if decode=torchvision --verbose --wide --no-progress --output "$OUT/sweep_pil.json"

# The what-if on its own, as JSON (what-if.md: "loaderbench show run.json --what-if ..." and
# "`--format json` holds every change with its whole answer (`analysis.beyond_knobs`)"; results.md:
# `analysis.what_if`).
if [[ -s $OUT/sweep_pil.json ]]; then
    run_step whatif_torchvision_json 40 "$OUT/whatif_torchvision.json" "${LB[@]}" show \
        "$OUT/sweep_pil.json" --what-if decode=torchvision --format json
else
    echo "whatif_torchvision_json skipped 0 (no $OUT/sweep_pil.json)" >> "$OUT/steps.txt"
fi

# --- 3. the measured run that checks the what-if ---------------------------------------------
# what-if.md: "The embedded dataset measures the real thing with `--decoder torchvision`
#   ([decoders.md](decoders.md))"; decoders.md: "`torchvision`: torchvision.io.decode_jpeg ...
#   then transforms.v2 RandomResizedCrop(224) and flip on that tensor".
# Same grid and budget as step 2 (the defaults) so that the measured knee is comparable with the
# predicted one.
B2=120
(( $(left) - KILL_GRACE - 25 < B2 + 50 )) && B2=$(( $(left) - KILL_GRACE - 25 - 50 ))
if (( B2 >= 20 )); then
    run_step sweep_torchvision $((B2 + 50)) - "${LB[@]}" sweep --label walk-torchvision \
        --time-budget "$B2" --decoder torchvision --verbose --wide --no-progress \
        --output "$OUT/sweep_torchvision.json"
else
    echo "sweep_torchvision skipped 0 (only ${B2}s of budget left)" >> "$OUT/steps.txt"
fi

# --- 4. (if time is left) the other decoder what-if, nvJPEG on the GPU -------------------------
# what-if.md: "A change given twice ... is refused naming it (exit 2)" and several --what-if
# "combine into one question", so decode=nvjpeg is asked apart, from the same result.
if [[ -s $OUT/sweep_pil.json ]] && (( $(left) > 45 )); then
    run_step whatif_nvjpeg_json 30 "$OUT/whatif_nvjpeg.json" "${LB[@]}" show \
        "$OUT/sweep_pil.json" --what-if decode=nvjpeg --format json
fi

# --- summary: the figures to set side by side (reads the JSON files only) -------------------
{
    echo "== what-if lines in the PIL sweep's output"
    grep -n -i -A4 'what if\|decode with torchvision\|beyond the settings' "$OUT/sweep_pil.log" 2>/dev/null | head -60
    echo "== recommendation lines"
    for f in sweep_pil sweep_torchvision; do
        echo "-- $f"; grep -n -A2 '^Recommendation' "$OUT/$f.log" 2>/dev/null | head -8
    done
    timeout 15 python3 - "$OUT" <<'EOF' 2>&1
import json, os, sys
out = sys.argv[1]
def load(n):
    p = os.path.join(out, n)
    try:
        return json.load(open(p))
    except Exception as e:
        print(f"{n}: {type(e).__name__}: {e}"); return None
def short(x, n=1500):
    s = json.dumps(x, default=str); return s if len(s) <= n else s[:n] + " ..."
p = load("profile.json")
if isinstance(p, dict):
    print("== profile.json stages (name, where, ms/sample, share)")
    for s in p.get("stages") or []:
        print("  ", s.get("name"), s.get("where"), s.get("ms_per_sample"), s.get("share"), s.get("na") or "")
    print("  sample_build_ms:", short(p.get("sample_build_ms"), 300))
    print("  cost:", short(p.get("cost"), 400))
for n in ("sweep_pil.json", "sweep_torchvision.json"):
    r = load(n)
    if isinstance(r, dict):
        a = r.get("analysis") or {}
        print(f"== {n}: recommendation"); print("  ", short(r.get("recommendation"), 1200))
        print(f"   sweep.sustained: {short((r.get('sweep') or {}).get('sustained'), 400)}")
        if a.get("what_if") is not None:
            print(f"   analysis.what_if: {short(a.get('what_if'), 1500)}")
for n in ("whatif_torchvision.json", "whatif_nvjpeg.json"):
    r = load(n) if os.path.exists(os.path.join(out, n)) else None
    if isinstance(r, dict):
        print(f"== {n}: analysis.what_if"); print("  ", short((r.get("analysis") or {}).get("what_if"), 1500))
EOF
} > "$OUT/summary.log" 2>&1
echo "total $(( $(date +%s) - T0 ))s" >> "$OUT/steps.txt"

# --- pack everything, keep the logs small --------------------------------------------------
# (tar exits 1 when a file changed as it read it: the archive is still written)
tar -czf "$OUT/walkthrough.tgz.tmp" -C "$OUT" --exclude=walkthrough.tgz --exclude=walkthrough.tgz.tmp .
[[ -s $OUT/walkthrough.tgz.tmp ]] && mv "$OUT/walkthrough.tgz.tmp" "$OUT/walkthrough.tgz"
find "$OUT" -mindepth 1 -type f ! -name walkthrough.tgz ! -name steps.txt ! -name '*.log' -delete
find "$OUT" -mindepth 1 -type d -empty -delete
for f in "$OUT"/*.log; do                          # the full logs are in the tgz
    if [[ -f $f ]] && (( $(wc -c < "$f") > 120000 )); then
        { head -c 60000 "$f"; printf '\n... [cut: full log in walkthrough.tgz] ...\n'; tail -c 50000 "$f"; } > "$f.cut" && mv "$f.cut" "$f"
    fi
done
cat "$OUT/steps.txt"
