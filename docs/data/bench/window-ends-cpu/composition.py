"""Per trial of a sweep of `myds:every16` (new-user-varied-cpu/myds.py: index % 16 == 0 sleeps
150 ms, any other 3 ms; batch 8): the share of slow samples among the batches its window measured
(the seeded stream of repeat r, after the first batch and the warm-up), the mean build per batch
that share implies, and the row's rate scaled from the long run's 139 samples/s at 2 workers by
the ratio of mean builds (99 ms over all samples).

    PYTHONPATH=. python3 docs/data/bench/window-ends-cpu/composition.py RESULT.json
"""
import itertools
import json
import sys

from loaderbench.measure.sampling import EpochSampler

d = json.load(open(sys.argv[1]))
for r in d["results"]:
    workers = r["settings"]["num_workers"]
    for rep, t in enumerate(r["trials"]):
        n, warm = len(t["step_s"]), t["warmup_batches"]
        idx = list(itertools.islice(iter(EpochSampler(4096, 4096, rep)), 0, 8 * (1 + warm + n)))
        seg = idx[8 * (1 + warm):]
        slow = sum(1 for i in seg if i % 16 == 0)
        build_ms = (len(seg) * 3 + slow * 147) / (len(seg) / 8)
        print(json.dumps({"workers": workers, "repeat": rep, "batches": n, "whole_rounds": n % workers == 0,
                          "slow_share": round(slow / len(seg), 3), "mean_build_ms": round(build_ms),
                          "samples_per_s": round(t["samples"] / sum(t["step_s"]), 1),
                          "scaled_2_workers": round(139 * 99 / build_ms)}))
