"""The pick's longer window in the sweep's warm measuring process, the same window in a fresh
process, and a plain loop, interleaved within a minute (run on a GPU host):

    PYTHONPATH=. python3 benchmarks/sustained_reference.py --like docs/data/bench/gpu-round-24/sweep-3.json \
        --out $OUT/sustained.json --rounds 5

The sweep measures its pick's sustained figure (NOTE [the pick's sustained figure]) in the warm
process that measured every config before it. Here one warm process (`WarmRunner`) first measures
the rows `--like` measured, once each, with its short windows (the sweep's history); then, each
round, in a rotating order: the pick's sustained window in that warm process (`warm`), the same
window in a fresh process (`fresh`, `run_isolated`), and `pick_check.fresh_plain_loop_samples_per_s`
(`plain`, 150 batches after 40). Each trial's figure is `trial_samples_per_s` (the window's rate
held to its workers' production); its window's own rate and the production are kept beside it. The
medians of the pairs' ratios say whether the sustained window reads its config as a plain loop
does, and whether the warm process is what moves it. `--arms` picks the arms; `after-drift` is the
warm window right after a trial of the pick with the short windows in a measuring process started
ahead and killed after it (`WarmRunner(one_config=True)`), as a sweep's drift check runs just before
its longer window; `cli` is `loaderbench sweep --search grid` on the pick alone with windows of the
longer window's size, in its own process (`pick_check.cli_samples_per_s`), as a user runs it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pick_check import cli_samples_per_s, fresh_plain_loop_samples_per_s  # noqa: E402

from loaderbench.analysis.statistics import trial_samples_per_s  # noqa: E402
from loaderbench.measure.isolation import run_isolated  # noqa: E402
from loaderbench.measure.warm import WarmRunner  # noqa: E402
from loaderbench.model import ComputeSpec, DatasetSpec, MeasureSpec, Trial, TrialJob  # noqa: E402
from loaderbench.orchestration.sustained import sustained_window  # noqa: E402
from loaderbench.results import read_results  # noqa: E402

SETTLE_S = 8.0  # a process started ahead has imported torch by then


def reading(trial: Trial | None) -> dict[str, float | None]:
    """A trial's figure, its window's own rate and its workers' production, in samples/s."""
    if trial is None:
        return {"figure": None, "window": None, "production": None}
    total = sum(trial.step_s)
    return {"figure": trial_samples_per_s(trial), "window": trial.samples / total if total > 0 else None,
            "production": trial.production_samples_per_s, "stall": sum(trial.data_wait_s) / total if total else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--like", required=True, help="a default sweep's result: its rows, pick, dataset and step")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--history", type=int, default=99, help="at most this many of its rows measured first")
    ap.add_argument("--arms", default="warm,fresh,plain", help="of warm, fresh, plain, after-drift, cli")
    args = ap.parse_args()
    rs = read_results(Path(args.like))
    rec = rs.recommendation
    assert rec is not None and rec.settings is not None, "the result recommends no config"
    pick = rec.settings
    dataset = DatasetSpec.from_dict(rs.config["dataset"])
    compute = ComputeSpec.from_dict(rs.config["compute"])
    measure = MeasureSpec.from_dict(rs.config["measure"])
    row = next(r for r in rs.results if r.settings == pick and r.summary is not None)
    window = sustained_window(measure, row) or measure
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record: dict = {"pick": pick.key(), "window_batches": window.batches, "history": [], "rounds": []}

    def job(settings, spec: MeasureSpec, seed: int, alone: bool) -> TrialJob:
        return TrialJob(settings, dataset, compute, spec, seed=seed, loader_alone=alone)

    with WarmRunner() as warm:
        for i, r in enumerate([r for r in rs.results if r.trials][: args.history]):
            o = warm(job(r.settings, measure, i, True))
            record["history"].append({"config": r.settings.key(), **reading(o.trial)})
            print(json.dumps(record["history"][-1]), flush=True)

        def after_drift(seed: int) -> dict[str, float | None]:
            # The drift check's fresh trial as a sweep runs it: a measuring process started ahead
            # (here SETTLE_S before, its import done), one trial of the pick's short windows, the
            # process's tree killed, then at once the longer window in the warm process.
            with WarmRunner(one_config=True) as fresh:
                fresh.prestart()
                time.sleep(SETTLE_S)
                drift = reading(fresh(job(pick, measure, seed + 1000, False)).trial)
            return {**reading(warm(job(pick, window, seed, False)).trial), "drift_trial": drift["figure"]}

        every = {
            "warm": lambda seed: reading(warm(job(pick, window, seed, False)).trial),
            "after-drift": after_drift,
            "fresh": lambda seed: reading(run_isolated(job(pick, window, seed, False)).trial),
            "cli": lambda seed: {"figure": cli_samples_per_s(pick, rs.config, window.batches)},
            "plain": lambda seed: {"figure": fresh_plain_loop_samples_per_s(pick, dataset, compute, warmup=40,
                                                                            batches=150)},
        }
        names = [a for a in args.arms.split(",") if a]
        arms = {a: every[a] for a in names}
        assert "plain" in arms, "--arms: the plain loop is the reference"
        for k in range(args.rounds):
            got = {}
            for name in names[k % len(names):] + names[: k % len(names)]:
                got[name] = arms[name](100 + k)
            record["rounds"].append(got)
            print(json.dumps({"round": k, **{n: round(v["figure"] or 0, 1) for n, v in got.items()}}), flush=True)
            out.write_text(json.dumps(record, indent=1))

    def ratio(arm: str) -> float | None:
        rs_ = [g[arm]["figure"] / g["plain"]["figure"] for g in record["rounds"]
               if g[arm]["figure"] and g["plain"]["figure"]]
        return statistics.median(rs_) if rs_ else None

    record["median_vs_plain"] = {a: ratio(a) for a in names if a != "plain"}
    out.write_text(json.dumps(record, indent=1))
    print(json.dumps(record["median_vs_plain"]), flush=True)


if __name__ == "__main__":
    main()
