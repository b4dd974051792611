"""The sweep's figure for its pick against a sustained plain loop at the same settings (run on a GPU host):

    PYTHONPATH=. python3 benchmarks/pick_check.py RESULT.json --out $OUT/pick.json [--rounds 3] [--batches 300]

RESULT.json is a `loaderbench sweep` result (the default sweep: embedded JPEGs + ResNet-50). For its recommended
config, in this order, `--rounds` times: one trial as the sweep measures a config (`measure.trial.measure_config`
with the result's own dataset, step and measure settings: the sweep's window), then a plain loop over a fresh
DataLoader with the same settings and step, no instrumentation (`--warmup` batches untimed, then `--batches` timed,
one synchronise at each end), in a fresh Python process as a training run starts (`--in-process`: in this process,
after the trials before it, which read up to 10% under a fresh one on the H200 host: docs/benchmarks.md, 26c).
Interleaved, so a drift of the host moves both. Records the sweep's own figure for the
pick beside the medians: the sweep's pick within 5% of the plain loop is the target. Where the sweep measured its pick
over a longer window (`sweep.sustained`, the figure its recommendation states), that figure is set against the plain
loop too, and each round also takes one trial with that longer window (`sustained_window`) in turn with the others.

With `--cli`, each round also runs `loaderbench sweep` on the pick's settings alone (`--search grid --repeats 1
--no-profile`, in its own process as a user runs it) and records its row; with `--also-workers 14,16`, the plain
loop at those worker counts too (the other settings the pick's), so the pick is set against the configs beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils.data import DataLoader, RandomSampler

from loaderbench.analysis import statistics as stats
from loaderbench.measure.trial import measure_config
from loaderbench.model import ComputeSpec, DatasetSpec, LoaderSettings, MeasureSpec, TrialJob
from loaderbench.orchestration.sustained import sustained_window
from loaderbench.results import read_results
from loaderbench.workload.batch import move_to_device
from loaderbench.workload.compute import build_compute
from loaderbench.workload.datasets import build_collate_fn, build_dataset
from loaderbench.workload.prefetch import CUDAPrefetcher


def plain_loop_samples_per_s(settings: LoaderSettings, ds_spec: DatasetSpec, step_spec: ComputeSpec,
                             warmup: int, batches: int) -> float:
    """The same DataLoader and step with no instrumentation: samples over the wall time of
    `batches` batches after `warmup`, one synchronise at each end (CUDA when there is one)."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    ds = build_dataset(ds_spec)
    kwargs = settings.dataloader_kwargs()
    collate = build_collate_fn(ds_spec)
    if collate is not None:
        kwargs["collate_fn"] = collate
    loader = DataLoader(ds, sampler=RandomSampler(ds, num_samples=settings.batch_size * (warmup + batches + 64)),
                        **kwargs)
    step = build_compute(step_spec, device)
    source = CUDAPrefetcher(loader, device=device) if settings.prefetch and cuda else loader

    def one(it):
        b = next(it)
        if not (settings.prefetch and cuda):
            b = move_to_device(b, device, non_blocking=settings.pin_memory)
        step(b)

    it = iter(source)
    for _ in range(warmup):
        one(it)
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(batches):
        one(it)
    if cuda:
        torch.cuda.synchronize()
    return settings.batch_size * batches / (time.perf_counter() - t0)


def fresh_plain_loop_samples_per_s(settings: LoaderSettings, ds_spec: DatasetSpec, step_spec: ComputeSpec,
                                   warmup: int, batches: int) -> float:
    """`plain_loop_samples_per_s` in a fresh Python process: a process that has run other loops
    before read the same settings up to 10% under a fresh one in the same minute on the H200 host
    (docs/benchmarks.md), so a reference loop starts from nothing, as a training run does."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from pick_check import plain_loop_samples_per_s; "
            "from loaderbench.model import ComputeSpec, DatasetSpec, LoaderSettings; a = json.loads(sys.argv[2]); "
            "print(plain_loop_samples_per_s(LoaderSettings.from_dict(a['s']), DatasetSpec.from_dict(a['d']), "
            "ComputeSpec.from_dict(a['c']), warmup=a['w'], batches=a['b']))")
    arg = json.dumps({"s": settings.to_dict(), "d": ds_spec.to_dict(), "c": step_spec.to_dict(),
                      "w": warmup, "b": batches})
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent), arg],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def cli_samples_per_s(settings: LoaderSettings, config: dict, batches: int | None = None) -> float:
    """`loaderbench sweep` on `settings` alone, in its own process, with the result's dataset and
    step (the synthetic default's or a tensor dataset's flags), with windows of `batches` batches
    (None: the sweep's default): its row's samples/s."""
    ds, comp = config["dataset"], config["compute"]
    step = f"model:{comp['model']}" if comp["kind"] == "model" else f"{comp['kind']}:{comp['ms']:g}"
    onoff = {True: "on", False: "off"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "one.json"
        cmd = [sys.executable, "-m", "loaderbench", "sweep", "--dataset", ds["kind"], "--num-samples",
               str(ds["num_samples"]), "--compute", step, "--batch-size", str(settings.batch_size),
               "--num-workers", str(settings.num_workers), "--pin-memory", onoff[settings.pin_memory],
               "--prefetch", onoff[settings.prefetch], "--prefetch-factor", str(settings.prefetch_factor or 2),
               "--search", "grid", "--repeats", "1", "--no-profile", "--no-progress", "--output", str(out)]
        if ds["kind"] == "tensor":
            cmd += ["--io-ms", f"{ds['io_ms']:g}", "--cpu-ms", f"{ds.get('cpu_ms') or 0:g}"]
        if batches is not None:
            cmd += ["--batches", str(batches)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        row = next(r for r in read_results(out).results if r.summary is not None)
        return row.summary.samples_per_s  # type: ignore[union-attr]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("result")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--cli", action="store_true", help="each round, also `loaderbench sweep` on the pick alone")
    ap.add_argument("--also-workers", default="", help="plain loops at these worker counts too (comma-separated)")
    ap.add_argument("--in-process", action="store_true", help="run the plain loops in this process, not a fresh one")
    args = ap.parse_args()
    rs = read_results(args.result)
    rec = rs.recommendation
    assert rec is not None and rec.settings is not None, "the result recommends no config"
    settings = rec.settings
    row = next(r for r in rs.results if r.settings == settings and r.summary is not None)
    cfg = rs.config
    dataset = DatasetSpec.from_dict(cfg["dataset"])
    compute = ComputeSpec.from_dict(cfg["compute"])
    measure = MeasureSpec.from_dict(cfg["measure"])
    long_window = sustained_window(measure, row)
    plain_loop = plain_loop_samples_per_s if args.in_process else fresh_plain_loop_samples_per_s
    trials, plain, cli, long_trials = [], [], [], []
    others: dict[int, list[float]] = {int(w): [] for w in args.also_workers.split(",") if w}
    for rnd in range(args.rounds):
        t = measure_config(TrialJob(settings, dataset, compute, measure, seed=rnd))
        trials.append(stats.trial_samples_per_s(t))
        plain.append(plain_loop(settings, dataset, compute, warmup=args.warmup, batches=args.batches))
        if long_window is not None:
            t = measure_config(TrialJob(settings, dataset, compute, long_window, seed=rnd))
            long_trials.append(stats.trial_samples_per_s(t))
        if args.cli:
            cli.append(cli_samples_per_s(settings, rs.config))
        for w, got in others.items():
            got.append(plain_loop(replace(settings, num_workers=w), dataset, compute,
                                  warmup=args.warmup, batches=args.batches))
        print(json.dumps({"round": rnd, "trial": trials[-1], "plain": plain[-1], "cli": cli[-1] if cli else None,
                          "sustained_trial": long_trials[-1] if long_trials else None,
                          "others": {w: v[-1] for w, v in others.items()}}), flush=True)
    sweep_figure = row.summary.samples_per_s if row.summary else None
    taken = rs.sweep.sustained
    sustained = taken.samples_per_s if taken is not None and taken.config == settings.key() else None
    report = {
        "sustained_figure_samples_per_s": sustained,
        "sustained_vs_plain": None if not sustained else sustained / statistics.median(plain) - 1.0,
        "sustained_trial_samples_per_s": long_trials,
        "sustained_trial_vs_plain": (statistics.median(long_trials) / statistics.median(plain) - 1.0
                                     if long_trials else None),
        "config": settings.key(),
        "sweep_figure_samples_per_s": sweep_figure,
        "sweep_trials": len(row.trials),
        "trial_samples_per_s": trials,
        "plain_samples_per_s": plain,
        "sweep_vs_plain": None if not sweep_figure else sweep_figure / statistics.median(plain) - 1.0,
        "trial_vs_plain": statistics.median(trials) / statistics.median(plain) - 1.0,
        "cli_samples_per_s": cli,
        "cli_vs_plain": statistics.median(cli) / statistics.median(plain) - 1.0 if cli else None,
        "plain_at_workers": {w: {"samples_per_s": v, "median": statistics.median(v)} for w, v in others.items() if v},
        "args": vars(args),
    }
    print(json.dumps(report, indent=1))
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
