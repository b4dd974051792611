"""The loader ceiling against an independent sustained draw, interleaved (run on any host):

    PYTHONPATH=. python3 benchmarks/ceiling_check.py --out $OUT/ceiling.json \
        [--configs 14:pin,16:pin] [--rounds 3] [--batch-size 256]
        [--dataset synthetic | tensor:IO_MS | import:MODULE:FACTORY[:JSON_KWARGS]] [--collate-fn MODULE:FN]

For each config and round, in this order: one trial as a sweep's first trial measures it
(`measure.trial.measure_config`, the loader-alone probe included: NOTE [loader ceiling] in
measure/loop.py), then the independent draw: a fresh DataLoader with the same settings over the
same dataset, no step, every batch copied to the GPU where there is one (non_blocking from pinned
memory), `--skip` batches untimed (worker start-up and the start-up backlog), then `--draw`
batches timed to the last copy's end. Records each probe (method, rate or bound, its seconds)
beside the draw it is set against, and the row's own samples/s with the step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.utils.data import BatchSampler

from loaderbench.measure.sampling import EpochSampler
from loaderbench.measure.trial import measure_config
from loaderbench.model import ComputeSpec, DatasetSpec, LoaderSettings, MeasureSpec, TrialJob
from loaderbench.workload.batch import move_to_device
from loaderbench.workload.datasets import build_collate_fn, build_dataset


def sustained_draw(dataset, settings: LoaderSettings, skip: int, draw: int, cuda: bool, collate=None) -> float:
    """Samples/s of `draw` batches after `skip`, no step, H2D copy included (`collate`: the
    DataLoader's collate_fn, None for its default)."""
    kwargs = settings.dataloader_kwargs()
    bs = kwargs.pop("batch_size")
    if collate is not None:
        kwargs["collate_fn"] = collate
    if isinstance(dataset, torch.utils.data.IterableDataset):
        loader = torch.utils.data.DataLoader(dataset, batch_size=bs, **kwargs)
    else:
        sampler = BatchSampler(EpochSampler(len(dataset), (skip + draw + 8) * bs, 0), bs, drop_last=False)
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, **kwargs)
    it = iter(loader)
    for _ in range(skip):
        b = next(it)
        if cuda:
            move_to_device(b, "cuda", non_blocking=settings.pin_memory)
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    samples = 0
    for _ in range(draw):
        b = next(it)
        iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        samples += len(b[0]) if iterable and isinstance(b, (list, tuple)) else bs
        if cuda:
            move_to_device(b, "cuda", non_blocking=settings.pin_memory)
    if cuda:
        torch.cuda.synchronize()
    rate = samples / (time.perf_counter() - t0)
    del it
    return rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", default="14:pin,16:pin")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dataset", default="synthetic")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--compute", default="model:resnet50")
    ap.add_argument("--skip", type=int, default=40)
    ap.add_argument("--draw", type=int, default=160)
    ap.add_argument("--collate-fn", default=None, help="MODULE:FN, with --dataset import:... (as sweep's --collate-fn)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    if args.dataset.startswith("tensor:"):
        spec = DatasetSpec(kind="tensor", io_ms=float(args.dataset.split(":")[1]), sample_shape=(3, 8, 8),
                           num_samples=4096)
    elif args.dataset.startswith("import:"):
        module, factory, *kw = args.dataset.split(":", 3)[1:]
        spec = DatasetSpec(kind="import", factory=f"{module}:{factory}", kwargs=json.loads(kw[0]) if kw else {},
                           collate_fn=args.collate_fn)
    else:
        spec = DatasetSpec()
    kind, _, arg = args.compute.partition(":")
    compute = ComputeSpec(kind="model", model=arg) if kind == "model" else ComputeSpec(kind=kind, ms=float(arg))
    dataset = build_dataset(spec)
    collate = build_collate_fn(spec)
    rows = []
    for rnd in range(args.rounds):
        for c in args.configs.split(","):
            w, _, flags = c.partition(":")
            s = LoaderSettings(int(w), "pin" in flags, "pf" in flags, 2 if int(w) else None, False, args.batch_size)
            t = measure_config(TrialJob(s, spec, compute, MeasureSpec(batches=10, min_time_s=1.0)))
            draw = sustained_draw(dataset, s, args.skip, args.draw, cuda, collate)
            row = {"round": rnd, "config": s.key(), "with_step": t.samples / sum(t.step_s),
                   "probe": t.loader_alone_samples_per_s, "method": t.loader_alone_method,
                   "bound": t.loader_alone_bound_samples_per_s, "reason": t.loader_alone_reason,
                   "probe_read": t.loader_alone_probe_samples_per_s, "probe_s": t.probe_s,
                   "intervals": t.loader_alone_intervals, "draw": draw}
            row["probe_vs_draw"] = None if not t.loader_alone_samples_per_s else t.loader_alone_samples_per_s / draw - 1
            print(json.dumps(row), flush=True)
            rows.append(row)
    summary = {}
    for key in dict.fromkeys(r["config"] for r in rows):
        mine = [r for r in rows if r["config"] == key]
        summary[key] = {"draw_median": statistics.median(r["draw"] for r in mine),
                        "probe_median": statistics.median([r["probe"] for r in mine if r["probe"]] or [0]),
                        "probe_s_median": statistics.median(r["probe_s"] or 0 for r in mine),
                        "methods": [r["method"] for r in mine]}
    print(json.dumps(summary, indent=1))
    with open(args.out, "w") as fh:
        json.dump({"rows": rows, "summary": summary, "args": vars(args)}, fh, indent=1)


if __name__ == "__main__":
    main()
