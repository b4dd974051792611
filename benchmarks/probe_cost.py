"""The loader-alone probe of two checkouts side by side: its seconds and its reading per config.

    python3 benchmarks/probe_cost.py OUT.json ROUNDS BEFORE_TREE AFTER_TREE

One trial per config (`measure.trial.measure_config`, a sweep's first trial: the probe after the
window included) from each checkout in turn, the order alternating by round, each in a fresh
interpreter with that checkout on PYTHONPATH. Records per config: the probe's seconds
(`Trial.probe_s`, the receive probe included), the loader ceiling (or its method and bound where
the checkout records them), the row's own samples/s with the step, and the other load on the
usable CPUs during its window.
"""
import json
import os
import subprocess
import sys

TREES = {"before": sys.argv[3], "after": sys.argv[4]}
CHILD = r'''
import json, sys, time
from loaderbench.measure.trial import measure_config
from loaderbench.model import ComputeSpec, DatasetSpec, LoaderSettings, MeasureSpec, TrialJob
cases = json.loads(sys.argv[1])
for c in cases:
    kw = dict(c["spec"])
    if "sample_shape" in kw:
        kw["sample_shape"] = tuple(kw["sample_shape"])
    spec = DatasetSpec(**kw)
    w = c["w"]
    s = LoaderSettings(w, False, False, 2 if w else None, False, c["bs"])
    t = measure_config(TrialJob(s, spec, ComputeSpec(kind="sleep", ms=c["step"]), MeasureSpec(batches=10, min_time_s=1.0)))
    print(json.dumps({"case": c["name"], "w": w, "probe_s": t.probe_s, "ceiling": t.loader_alone_samples_per_s,
        "method": getattr(t, "loader_alone_method", None), "bound": getattr(t, "loader_alone_bound_samples_per_s", None),
        "with_step": t.samples / sum(t.step_s), "other_pct": t.other_cpu_util_pct}), flush=True)
'''
CASES = [
  {"name": "io30-bs16-s100", "spec": {"kind": "tensor", "io_ms": 30.0, "sample_shape": [3, 8, 8], "num_samples": 4096}, "bs": 16, "step": 100.0, "ws": [2, 4]},
  {"name": "io2-bs16-s12", "spec": {"kind": "tensor", "io_ms": 2.0, "sample_shape": [3, 8, 8], "num_samples": 4096}, "bs": 16, "step": 12.0, "ws": [0, 1, 2, 4]},
  {"name": "jpeg-bs64-s100", "spec": {}, "bs": 64, "step": 100.0, "ws": [0, 1, 2, 4]},
]
flat = [dict(c, w=w) for c in CASES for w in c["ws"]]
rounds = int(sys.argv[2])
out = []
for r in range(rounds):
    for v in (("before", "after") if r % 2 == 0 else ("after", "before")):
        p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(flat)], cwd=TREES[v], env=dict(os.environ, PYTHONPATH=TREES[v]), capture_output=True, text=True)
        for line in p.stdout.splitlines():
            rec = dict(json.loads(line), version=v, round=r)
            out.append(rec)
            print(json.dumps(rec), flush=True)
        if p.returncode:
            print(p.stderr[-1500:])
json.dump(out, open(sys.argv[1], "w"), indent=1)
