"""The recommendation: the knee, and what the measurements say about it, as typed findings.

Pure: no torch, no I/O. Sentences are written from the findings in render/.

NOTE [advice the measurements support]
    Advice must never contradict a measured row. Every remedy offered for the knee's remaining
    wait (the CUDA-stream prefetcher for an H2D copy on the step's path, pin_memory for a
    pageable copy or a slow hand-off, persistent_workers for epoch start-up, more workers for a
    late loader, a larger batch for a per-batch receive cost) is looked up in the grid: the
    knee's settings with that one change. When it was measured, the finding quotes its measured
    samples/s and share of the compute ceiling, and offers it only when it measured faster;
    when it measured no faster, the finding says so; when it was not measured, the finding says
    "not measured" and names the flag that would measure it. A remedy that is not a setting
    (pack many small tensors, numpy arrays to tensors) is named from what the batch is made of.
    The `DataLoader(...)` call is always the knee's own measured settings.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from loaderbench.analysis.knee import DEFAULT_TOLERANCE, best_of, find_knee, rankable
from loaderbench.analysis.statistics import input_bound_band
from loaderbench.analysis.wait import LOADER_BOUND_STALL, mean_step_s, samples_per_batch
from loaderbench.model import (
    GRID_AXES,
    ConfigResult,
    Finding,
    FindingKind,
    LoaderSettings,
    Recommendation,
    ServedFrom,
    Verdict,
    WaitPart,
    WarningKind,
)

CPU_SATURATED = 0.85  # share of the usable CPUs the process tree used: CPU saturation
SMALL_TENSORS = 16  # tensors per batch from which packing them is worth naming
PART_REPORTED = 0.05  # a wait part is reported when it is at least this share of the step
TRANSFER_MIN_MB_PER_S = 10.0  # below this, what the hand-off costs is not its bytes


# NOTE [the recommended call runs as printed]
#     The `DataLoader(...)` line is the call the sweep made for the knee, written so that it runs
#     where the user's dataset is called `dataset`, after the imports `call_imports` lists: the
#     loader class (`--loader`, its own name), the same keywords, the user's sampler factory
#     called with exactly the keywords the sweep passed it (those of batch_size, seed, rank and
#     world_size its signature accepts, recorded in `dataset.sampler_args`: a factory
#     `make_sampler(dataset, seed=0)` is never printed with a `batch_size=` it would refuse), the
#     user's collate function, the worker threads' init function (defined by
#     `worker_threads_def`), and the loader's own arguments (`--loader-arg`) last. In a
#     distributed sweep each rank passed its own rank and world size, so those read them from
#     torch.distributed.


def dataloader_call(settings: LoaderSettings, dataset: dict[str, Any] | None = None) -> str:
    """A ready-to-paste call of the loader for these settings (only keywords that apply), per
    NOTE [the recommended call runs as printed] (`dataset`: the config's [dataset] table). A
    batch sampler replaces `batch_size` (the DataLoader takes one or the other). A result file
    without `sampler_args` (written before they were recorded) shows a batch sampler factory
    called with `batch_size`, a sampler factory with the dataset alone.

    >>> s = LoaderSettings(4, True, False, 2, False, 32)
    >>> dataloader_call(s, {"sampler": "mydata:buckets", "sampler_kind": "batch_sampler", "sampler_args": {"seed": 0}})
    'DataLoader(dataset, batch_sampler=buckets(dataset, seed=0), num_workers=4, pin_memory=True, prefetch_factor=2, persistent_workers=False)'
    """
    d = dataset or {}
    own = dict(settings.loader_args)
    kw: dict[str, str] = {k: repr(v) for k, v in settings.dataloader_kwargs().items() if k not in own}
    factory = str(d.get("sampler") or "")
    if factory:
        name = _name(factory)
        args = d.get("sampler_args")
        if args is None:  # a file from before the arguments were recorded
            args = {"batch_size": settings.batch_size} if d.get("sampler_kind") == "batch_sampler" else {}
        made = f"{name}(" + ", ".join(["dataset"] + [f"{k}={_sampler_value(k, v, settings)}" for k, v in args.items()]) + ")"
        if d.get("sampler_kind") == "batch_sampler":
            kw.pop("batch_size", None)
            kw = {"batch_sampler": made, **kw}
        else:
            kw = {**{k: v for k, v in kw.items() if k == "batch_size"}, "sampler": made,
                  **{k: v for k, v in kw.items() if k != "batch_size"}}
    if d.get("collate_fn"):
        kw["collate_fn"] = _name(str(d["collate_fn"]))
    if settings.decoder == "nvjpeg":  # the workers send the encoded bytes (NOTE [decoding on the GPU])
        kw["collate_fn"] = f"EncodedCollate({kw.get('collate_fn', 'default_collate')})"
    if settings.worker_threads not in (None, 1) and settings.num_workers > 0:
        # What --worker-threads set in each worker (1 is torch's own setting there): a function
        # defined at module level, which spawn and forkserver workers can unpickle (a lambda
        # cannot be); the table prints its definition (WORKER_THREADS_FN).
        kw["worker_init_fn"] = WORKER_THREADS_FN
    kw.update({k: repr(v) for k, v in own.items()})
    loader = _name(str(d["loader"])) if d.get("loader") else "DataLoader"
    return f"{loader}(" + ", ".join(["dataset"] + [f"{k}={v}" for k, v in kw.items()]) + ")"


def _name(ref: str) -> str:
    """The name a `module:name` reference is called by once imported (`call_imports`)."""
    return ref.rpartition(":")[2].strip()


def _sampler_value(key: str, value: Any, settings: LoaderSettings) -> str:
    if key == "batch_size":
        return repr(settings.batch_size)
    if value is None and key in ("rank", "world_size"):
        return f"torch.distributed.get_{key}()"
    return repr(value)


def call_imports(dataset: dict[str, Any] | None) -> list[str]:
    """The imports the recommended call needs besides torch's DataLoader (NOTE [the recommended
    call runs as printed]): `from MODULE import NAME` for the loader class, the sampler factory
    and the collate function the sweep used, one line per module, in that order."""
    d = dataset or {}
    names: dict[str, list[str]] = {}
    for key in ("loader", "sampler", "collate_fn"):
        ref = d.get(key)
        if not ref or ":" not in str(ref):
            continue
        module, _, attr = str(ref).partition(":")
        first = attr.strip().split(".")[0]
        names.setdefault(module.strip(), [])
        if first not in names[module.strip()]:
            names[module.strip()].append(first)
    return [f"from {m} import {', '.join(ns)}" for m, ns in names.items()]


def decoder_lines(settings: LoaderSettings, dataset: dict[str, Any] | None = None) -> list[str]:
    """The lines printed before the recommended call that say how its config decodes (the
    `decoder` axis; workload/decode.py): none for `pil`, the dataset's own PIL path; a comment
    naming the decode and crop for `torchvision`; for `nvjpeg` the imports the call's
    `collate_fn=EncodedCollate(...)` and the GPU decode need, and a comment saying where the
    batch is decoded (the prefetcher's transform, `prefetcher_call`, or the loop before the
    step)."""
    d = dataset or {}
    if settings.decoder == "torchvision":
        return ["# decoder=torchvision: each sample decoded by torchvision.io.decode_jpeg and cropped by "
                "transforms.v2 (RandomResizedCrop(224), RandomHorizontalFlip) on its uint8 tensor, in the workers: "
                'SyntheticJPEGDataset(jpegs, decoder="torchvision")']
    if settings.decoder != "nvjpeg":
        return []
    where = ("as the prefetcher's transform, on its side stream while the step before runs" if settings.prefetch
             else 'in the loop, before the step, on its stream: batch = GPUDecode("cuda")(batch)')
    lines = ["from loaderbench.workload.decode import EncodedCollate, GPUDecode"]
    if not d.get("collate_fn"):
        lines.append("from torch.utils.data import default_collate")
    lines.append('# decoder=nvjpeg: the dataset returns each JPEG\'s bytes (SyntheticJPEGDataset(jpegs, decoder="nvjpeg")), '
                 "EncodedCollate packs a batch of them, GPUDecode decodes it with torchvision.io.decode_jpeg(images, "
                 f"device=\"cuda\") and crops it on the GPU, {where}")
    return lines


def prefetcher_call(settings: LoaderSettings) -> str:
    """The CUDA prefetcher around the recommended loader: with `--decoder nvjpeg` it decodes each
    batch as its transform (NOTE [decoding on the GPU])."""
    if settings.decoder == "nvjpeg":
        return 'loaderbench.CUDAPrefetcher(loader, transform=GPUDecode("cuda"))'
    return "loaderbench.CUDAPrefetcher(loader)"


WORKER_THREADS_FN = "set_worker_threads"


def worker_threads_def(threads: int) -> str:
    """The module-level `worker_init_fn` that the recommended call names (`dataloader_call`)."""
    return f"def {WORKER_THREADS_FN}(worker_id): torch.set_num_threads({threads})"



def recommend(
    results: Sequence[ConfigResult],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    usable_cpus: int | None = None,
    loader_only: bool = False,
    epoch_batches: int | None = None,
    dataset: dict[str, Any] | None = None,
) -> Recommendation:
    """The knee (analysis/knee.py) as a recommendation, with the findings that explain it.

    Findings, in order: KNEE; ALSO_FASTEST or BEST_WITHIN_TOLERANCE; LOADER_ALONE (with
    `loader_only`, `--compute none`); REMAINING_WAIT (the knee still waits: what the wait is made
    of and the remedies, per NOTE [advice the measurements support]); NOT_CLEARED (even the best
    config is loader-bound: CPU saturation at 85% of `usable_cpus`, a replicated IterableDataset,
    or the grid's edge with the workers-needed estimate); LOWEST_STALL; STEP_SLOWER / STEP_BINDS /
    TRANSFER (why the curve flattens past the knee, against each config's compute ceiling,
    `Summary.compute_ceiling_samples_per_s`); MORE_NOT_BETTER; STARTUP and EPOCH_FASTER (with `epoch_batches`, batches per epoch per
    rank: worker start-up against the epoch, predicted where the window did not span an epoch);
    THREADS; OVERSUBSCRIBED; OTHER_LOAD.
    """
    knee = find_knee(results, tolerance=tolerance)
    best = best_of(results)
    if knee is None or best is None:
        return Recommendation(settings=None, findings=[Finding(FindingKind.NONE_MEASURED.value)])
    ok = rankable(results)
    ks, bs = knee.summary, best.summary
    assert ks is not None and bs is not None
    band = Verdict.LOADER_ALONE.value if loader_only else input_bound_band(ks.stall_fraction)
    out = [
        Finding(FindingKind.KNEE.value, knee.settings.key(), {
            "num_workers": knee.settings.num_workers, "pin_memory": knee.settings.pin_memory,
            "prefetch": knee.settings.prefetch, "samples_per_s": ks.samples_per_s,
            "stall_fraction": ks.stall_fraction, "band": band,
            "ceiling_share": _share(knee),
            # The other axes the sweep varied, at the knee's values (the headline names them).
            "swept": {ax.name: getattr(knee.settings, ax.name) for ax in GRID_AXES
                      if ax.name not in ("num_workers", "pin_memory", "prefetch")
                      and not (ax.workers_only and knee.settings.num_workers == 0)
                      and len({getattr(r.settings, ax.name) for r in ok}) > 1},
        })
    ]
    if best is not knee:
        out.append(Finding(FindingKind.BEST_WITHIN_TOLERANCE.value, best.settings.key(), {
            "samples_per_s": bs.samples_per_s, "tolerance": tolerance,
            "loader_still_binds": Verdict.LOADER_BOUND.value in (bs.verdict, ks.verdict),
            "differs": _differs(best.settings, knee.settings),
        }))
    else:
        replicated = any(r.has(WarningKind.REPLICATED) for r in results if r.status == "ok")
        out.append(Finding(FindingKind.ALSO_FASTEST.value, knee.settings.key(), {"replicated_excluded": replicated}))
    if loader_only:
        out.append(Finding(FindingKind.LOADER_ALONE.value, best.settings.key(), {
            "samples_per_s": bs.samples_per_s, "step_s": bs.step_p50_s,
        }))
    else:
        out.extend(remaining_wait(knee, ok))
        # Workers that bought nothing because the hand-off binds: when the knee has no workers,
        # say why (a batch of many tiny tensors, or numpy arrays, makes every worker config
        # wait on the main process).
        handoff = [r for r in ok if r.settings.num_workers > 0
                   and r.summary.verdict == Verdict.RECEIVE_FLOOR.value]  # type: ignore[union-attr]
        if handoff and knee.settings.num_workers == 0:
            top = max(handoff, key=lambda r: r.summary.samples_per_s)  # type: ignore[union-attr]
            out.extend(remaining_wait(top, ok, subject="workers"))
    out.extend(not_cleared(best, knee, ok, results, usable_cpus))
    if not any(f.kind in (FindingKind.NOT_CLEARED.value, FindingKind.REMAINING_WAIT.value) for f in out):
        low = min(r.summary.stall_fraction for r in ok)  # type: ignore[union-attr]
        if 0 < low < LOADER_BOUND_STALL:
            out.append(Finding(FindingKind.LOWEST_STALL.value, None, {"stall_fraction": low}))
    if not loader_only:
        out.extend(plateau(ok, knee, best, usable_cpus))
    if epoch_batches:
        out.extend(startup(ok, knee, epoch_batches, tolerance))
    if knee.settings.worker_threads is not None or knee.settings.main_threads is not None:
        out.append(Finding(FindingKind.THREADS.value, knee.settings.key(), {
            "worker_threads": knee.settings.worker_threads, "main_threads": knee.settings.main_threads,
        }))
    for w in knee.warnings:
        if w.kind == WarningKind.OVERSUBSCRIBED.value:
            out.append(Finding(FindingKind.OVERSUBSCRIBED.value, knee.settings.key(), {"message": w.message}))
    out.extend(other_load(ok, usable_cpus))
    return Recommendation(
        settings=knee.settings,
        findings=out,
        input_bound=band,
        dataloader_call=dataloader_call(knee.settings, dataset),
        use_prefetcher=knee.settings.prefetch,
    )


def _share(r: ConfigResult) -> float | None:
    c = None if r.summary is None else r.summary.compute_ceiling_samples_per_s
    return None if not c or r.summary is None else r.summary.samples_per_s / c


def _variant(knee: ConfigResult, ok: Sequence[ConfigResult], **change: Any) -> ConfigResult | None:
    """The measured config with the knee's settings and `change` applied (same cache state)."""
    want = replace(knee.settings, **change)
    return next((r for r in ok if r.settings == want and r.cache == knee.cache), None)


def _remedy(name: str, knee: ConfigResult, alt: ConfigResult | None, flag: str | None = None) -> dict[str, Any]:
    """A remedy as data: measured (with its figures and gain over the knee) or not (with the
    flag that would measure it)."""
    ks = knee.summary
    assert ks is not None
    if alt is None or alt.summary is None:
        return {"remedy": name, "measured": False, "flag": flag}
    return {
        "remedy": name, "measured": True, "config": alt.settings.key(),
        "samples_per_s": alt.summary.samples_per_s, "ceiling_share": _share(alt),
        "knee_ceiling_share": _share(knee),
        "gain": alt.summary.samples_per_s / ks.samples_per_s - 1.0 if ks.samples_per_s > 0 else 0.0,
    }


def remaining_wait(knee: ConfigResult, ok: Sequence[ConfigResult], subject: str = "knee") -> list[Finding]:
    """REMAINING_WAIT for a config that still waits (stall at least 5%, or a tail): the largest
    part of its wait, every part of at least 5% of the step, what the batch is made of, and the
    remedies that act on the largest part (NOTE [advice the measurements support]). `subject`
    is "knee" (the recommended config) or "workers" (a config with workers bound by the hand-off
    when the knee is another). A wait of batches not built in time with no measured remedy is
    left to NOT_CLEARED."""
    ks = knee.summary
    assert ks is not None
    if ks.verdict in (Verdict.COMPUTE_BOUND.value, Verdict.LOADER_ALONE.value):
        return []
    parts = ks.wait_parts_s
    step = mean_step_s(knee) or ks.step_p50_s
    main = max(WaitPart, key=lambda p: parts.get(p.value, 0.0))
    s = knee.settings
    trial = knee.trials[0] if knee.trials else None
    remedies: list[dict[str, Any]] = []
    if main is WaitPart.H2D:
        if s.pin_memory:
            remedies.append(_remedy("prefetch", knee, _variant(knee, ok, prefetch=True), "--prefetch off,on"))
        else:
            remedies.append(_remedy("pin_memory", knee, _variant(knee, ok, pin_memory=True), "--pin-memory off,on"))
    elif main is WaitPart.RECEIVE:
        if trial is not None and (trial.tensor_leaves or 0) >= SMALL_TENSORS:
            remedies.append({"remedy": "pack_tensors", "measured": False, "flag": None})
        if trial is not None and trial.numpy_leaves:
            remedies.append({"remedy": "numpy_to_tensors", "measured": False, "flag": None})
        bigger = [r for r in ok if r.settings.batch_size > s.batch_size
                  and replace(r.settings, batch_size=s.batch_size) == s and r.cache == knee.cache]
        if bigger:
            remedies.append(_remedy("larger_batch", knee, max(bigger, key=lambda r: r.settings.batch_size)))
        if trial is not None and trial.h2d_bytes_per_batch is not None and not s.pin_memory:
            # With CUDA: the pin-memory thread takes batches from the workers, off the step's thread.
            remedies.append(_remedy("pin_memory", knee, _variant(knee, ok, pin_memory=True), "--pin-memory off,on"))
    elif main is WaitPart.EPOCH_START:
        if s.num_workers > 0 and not s.persistent_workers:
            remedies.append(_remedy("persistent_workers", knee, _variant(knee, ok, persistent_workers=True),
                                    "--persistent-workers off,on"))
    elif main is WaitPart.LOADER:
        more = [r for r in ok if r.settings.num_workers > s.num_workers
                and replace(r.settings, num_workers=s.num_workers) == s and r.cache == knee.cache]
        if more:
            top = max(more, key=lambda r: r.summary.samples_per_s)  # type: ignore[union-attr]
            remedies.append(_remedy("more_workers", knee, top))
    elif main is WaitPart.SAMPLER:
        remedies.append({"remedy": "lazy_sampler", "measured": False, "flag": None})
    if main is WaitPart.LOADER and not remedies:
        return []
    batch_bytes = ks.batch_bytes
    return [Finding(FindingKind.REMAINING_WAIT.value, s.key(), {
        "subject": subject,
        "part": main.value,
        "workers_restart": s.num_workers > 0 and not s.persistent_workers,
        "verdict": ks.verdict,
        "stall_fraction": ks.stall_fraction,
        "wait_p50_s": ks.data_wait_p50_s,
        "part_s": parts.get(main.value, 0.0),
        "parts_share": {p: v / step for p, v in parts.items() if step > 0 and v / step >= PART_REPORTED},
        "receive_s": ks.receive_p50_s,
        "h2d_s": ks.h2d_p50_s,
        "h2d_hidden_fraction": ks.h2d_hidden_fraction,
        "tensor_leaves": None if trial is None else trial.tensor_leaves,
        "numpy_leaves": None if trial is None else trial.numpy_leaves,
        "batch_bytes": batch_bytes,
        "remedies": [r for r in remedies if not r["measured"] or r["gain"] > 0],
        "measured_no_gain": [r for r in remedies if r["measured"] and r["gain"] <= 0],
    })]


MATCHED = 0.10  # a loader ceiling within 10% of the compute ceiling leaves no margin for jitter


def build_rate_stall(result: ConfigResult) -> float | None:
    """The stall that building batches at the loader-alone rate L explains, against the compute
    ceiling C (both samples/s); None when either is unknown. With workers, building overlaps
    the step: the step waits only while L < C, for 1 - L/C of the time. With 0 workers, the
    main process builds then steps: C / (L + C) of the time is building."""
    s = result.summary
    if s is None or not s.loader_ceiling_samples_per_s or not s.compute_ceiling_samples_per_s:
        return None
    lc, cc = s.loader_ceiling_samples_per_s, s.compute_ceiling_samples_per_s
    if result.settings.num_workers == 0:
        return cc / (lc + cc)
    return max(0.0, 1.0 - lc / cc)


def not_cleared(best: ConfigResult, knee: ConfigResult, ok: Sequence[ConfigResult], results: Sequence[ConfigResult],
                usable_cpus: int | None) -> list[Finding]:
    """NOT_CLEARED when the best ranked config is loader-bound (or, if the best is bound by
    something else, the knee is), with the cause: CPU saturation (the process tree used at
    least 85% of the usable CPUs); an IterableDataset that configs with more workers replay
    (not ranked); a wait that building batches does not explain (the loader alone builds them
    more than 10% faster than the step takes them, and the stall that its rate explains,
    `build_rate_stall`, is under half the measured one: more workers are not the cure); cores
    that slowed as workers were added (`cores_slower`: configs with more workers measured no
    faster at a higher worker CPU time per sample); or the grid's edge (the config has the
    most workers measured: more may help, with the workers-needed estimate, a prediction),
    unless configs with more workers were tried and failed, hung or were skipped
    ("more_workers_failed", with their errors). CPU saturation counts what other processes and
    the hypervisor's steal took from the usable CPUs (`other_cores`) with the tree's own."""
    subject = next((r for r in (best, knee) if r.summary is not None
                    and r.summary.verdict == Verdict.LOADER_BOUND.value), None)
    if subject is None:
        return []
    bs = subject.summary
    assert bs is not None
    data: dict[str, Any] = {"stall_fraction": bs.stall_fraction, "band": input_bound_band(bs.stall_fraction),
                            "cause": None, "subject": "best" if subject is best else "knee"}
    explained = build_rate_stall(subject)
    if _saturated(bs, usable_cpus) and bs.cpu_util_pct is not None:
        data.update(cause="cpu", cpu_cores=bs.cpu_util_pct / 100.0, usable_cpus=usable_cpus,
                    other_cores=_other_cores(bs))
    elif any(r.has(WarningKind.REPLICATED) for r in results):
        data["cause"] = "replicated"
    elif (device := _device_binds(subject, ok)) is not None:
        data.update(cause="storage", **device)
    elif (explained is not None and bs.loader_ceiling_samples_per_s and bs.compute_ceiling_samples_per_s
          and bs.loader_ceiling_samples_per_s > (1.0 + MATCHED) * bs.compute_ceiling_samples_per_s
          and explained < 0.5 * bs.stall_fraction):
        data.update(cause="not_build_rate", loader_alone=bs.loader_ceiling_samples_per_s,
                    compute_ceiling=bs.compute_ceiling_samples_per_s, explained_stall=explained,
                    wait_p50_s=bs.data_wait_p50_s, wait_p95_s=bs.data_wait_p95_s)
    elif (slower := cores_slower(subject, ok, usable_cpus)) is not None:
        data.update(cause="cores_slower", usable_cpus=usable_cpus, **slower)
    elif subject.settings.num_workers == max(r.settings.num_workers for r in ok):
        beyond = [r for r in results if r.status in ("failed", "hung", "skipped")
                  and r.settings.num_workers > subject.settings.num_workers]
        if beyond:
            # More workers were tried and did not run: "try more workers" would send the user
            # back to them; the rows say why they failed.
            data.update(cause="more_workers_failed",
                        failed=[{"config": r.settings.key(), "status": r.status, "error": r.error} for r in beyond])
        else:
            data.update(cause="grid_edge", workers_needed=bs.workers_needed, per_rank=(bs.world_size or 1) > 1)
    return [Finding(FindingKind.NOT_CLEARED.value, subject.settings.key(), data)]


CORES_SLOWER = 1.25  # worker CPU per sample this many times the fewer-worker rows': the cores slowed


OTHER_LOAD_CORES = 1.0  # other processes' cores on the usable CPUs worth naming (and 10% of them)


def other_load(ok: Sequence[ConfigResult], usable_cpus: int | None) -> list[Finding]:
    """OTHER_LOAD when, during some measured window, other processes (and the hypervisor's steal)
    took at least OTHER_LOAD_CORES cores and 10% of the usable CPUs (NOTE [what else ran on the
    usable CPUs] in measure/meter.py): such rows measure a shared machine. Data: the median and
    largest cores over the measured configs, the config of the largest, its steal share."""
    seen = [(c, r) for r in ok if r.summary is not None and (c := _other_cores(r.summary)) is not None]
    if not seen:
        return []
    top, where = max(seen, key=lambda x: x[0])
    if top < max(OTHER_LOAD_CORES, 0.1 * (usable_cpus or 0)):
        return []
    ws = where.summary
    assert ws is not None
    return [Finding(FindingKind.OTHER_LOAD.value, where.settings.key(), {
        "median_cores": statistics.median(c for c, _ in seen), "max_cores": top, "configs": len(seen),
        "steal_cores": (ws.steal_cpu_util_pct or 0.0) / 100.0, "usable_cpus": usable_cpus,
    })]


def _other_cores(s: Any) -> float | None:
    """Cores that other processes and the hypervisor's steal took from the usable CPUs during
    the window (NOTE [what else ran on the usable CPUs] in measure/meter.py); None unmeasured."""
    if s.other_cpu_util_pct is None and s.steal_cpu_util_pct is None:
        return None
    return ((s.other_cpu_util_pct or 0.0) + (s.steal_cpu_util_pct or 0.0)) / 100.0


def _saturated(s: Any, usable_cpus: int | None) -> bool:
    """The tree's CPU plus other load reached CPU_SATURATED of the usable CPUs."""
    if not usable_cpus or s.cpu_util_pct is None:
        return False
    return s.cpu_util_pct / 100.0 + (_other_cores(s) or 0.0) >= CPU_SATURATED * usable_cpus


def worker_cpu_ms_per_sample(r: ConfigResult) -> float | None:
    """The workers' CPU time per sample of a measured config, in ms: (process tree's CPU - the
    main process's) / samples/s, medians over repeats. None without workers or readings, and
    for a distributed job (its main-process reading is one rank's)."""
    s = r.summary
    if (s is None or r.settings.num_workers == 0 or (s.world_size or 1) > 1 or s.cpu_util_pct is None
            or s.main_cpu_util_pct is None or s.samples_per_s <= 0):
        return None
    return (s.cpu_util_pct - s.main_cpu_util_pct) / 100.0 / s.samples_per_s * 1e3


def cores_slower(subject: ConfigResult, ok: Sequence[ConfigResult], usable_cpus: int | None) -> dict[str, Any] | None:
    """Configs with more workers than `subject` measured no faster (under 1 + MATCHED times its
    samples/s), with the CPUs not saturated (the tree and other load under CPU_SATURATED of
    `usable_cpus`: a saturated row is CPU-bound, not slower per core), while their workers
    spent at least CORES_SLOWER times the CPU per sample of the loader-bound configs with at
    most `subject`'s workers (same cache state): the CPUs delivered
    less per core as workers were added (other load, logical CPUs sharing physical cores,
    memory bandwidth), which more workers do not cure. Data: the cheapest fewer-worker row
    (`w_lo`, `lo_ms`), the dearest more-worker row (`w_hi`, `hi_ms`), the cores the tree used
    there and what other processes took (`other_cores`, None unmeasured); None otherwise."""
    ss = subject.summary
    assert ss is not None

    def bound(r: ConfigResult) -> bool:
        return r.summary is not None and r.summary.verdict == Verdict.LOADER_BOUND.value and r.cache == subject.cache

    low = [(ms, r) for r in ok if bound(r) and r.settings.num_workers <= subject.settings.num_workers
           and (ms := worker_cpu_ms_per_sample(r)) is not None]
    high = [(ms, r) for r in ok if bound(r) and r.settings.num_workers > subject.settings.num_workers
            and r.summary is not None and r.summary.samples_per_s < (1.0 + MATCHED) * ss.samples_per_s
            and not _saturated(r.summary, usable_cpus)
            and (ms := worker_cpu_ms_per_sample(r)) is not None]
    if not low or not high:
        return None
    lo_ms, lo = min(low, key=lambda x: x[0])
    hi_ms, hi = max(high, key=lambda x: x[0])
    if hi_ms < CORES_SLOWER * lo_ms:
        return None
    hs = hi.summary
    assert hs is not None
    return {"w_lo": lo.settings.num_workers, "lo_ms": lo_ms, "w_hi": hi.settings.num_workers, "hi_ms": hi_ms,
            "hi_config": hi.settings.key(), "hi_samples_per_s": hs.samples_per_s,
            "cpu_cores": None if hs.cpu_util_pct is None else hs.cpu_util_pct / 100.0,
            "other_cores": _other_cores(hs)}


DEVICE_FLAT = 0.15  # rows whose device MB/s agree within this read at the device's rate


def _device_binds(subject: ConfigResult, ok: Sequence[ConfigResult]) -> dict[str, Any] | None:
    """The storage device's rate binds `subject`: it and another measured config of the same
    cache state with a different worker count were both served from the device
    (model.ServedFrom.STORAGE) at MB/s within DEVICE_FLAT of each other: more workers read no
    faster. Data: the MB/s range and the worker counts; None otherwise."""
    def mb(r: ConfigResult) -> float | None:
        s = r.summary
        ok_ = s is not None and s.served_from == ServedFrom.STORAGE.value and s.storage_mb_per_s
        return float(s.storage_mb_per_s) if ok_ and s is not None and s.storage_mb_per_s else None

    own = mb(subject)
    if own is None:
        return None
    alike = [r for r in ok if r.cache == subject.cache and r.settings.num_workers != subject.settings.num_workers
             and (x := mb(r)) is not None and abs(x / own - 1.0) <= DEVICE_FLAT]
    if not alike:
        return None
    rates = [own, *(mb(r) or own for r in alike)]
    workers = sorted({subject.settings.num_workers, *(r.settings.num_workers for r in alike)})
    return {"device_mb_per_s": [min(rates), max(rates)], "device_workers": workers}


def transfer_mb_per_s(result: ConfigResult) -> float | None:
    """Bytes of batches moved from workers to the main process per second, in MB/s."""
    s = result.summary
    if s is None or not s.batch_bytes or result.settings.num_workers == 0:
        return None
    return s.batch_bytes * s.samples_per_s / samples_per_batch(result) / 1e6


def plateau(ok: Sequence[ConfigResult], knee: ConfigResult, best: ConfigResult, usable_cpus: int | None) -> list[Finding]:
    """Why the curve flattens past the knee, with the evidence: the step itself (STEP_BINDS, its
    share of the compute ceiling), the step slowed beside the loader (STEP_SLOWER: mean compute
    vs the step alone, CPU saturation), the worker->main transfer (TRANSFER, MB/s), and what
    configs past the knee cost in CPU for what they gain (MORE_NOT_BETTER)."""
    out: list[Finding] = []
    ks, bs = knee.summary, best.summary
    assert ks is not None and bs is not None
    ceiling = ks.compute_ceiling_samples_per_s
    fed = ks.verdict in (Verdict.COMPUTE_BOUND.value, Verdict.RECEIVE_FLOOR.value)
    if fed and ceiling:
        share = ks.samples_per_s / ceiling
        # The ceiling is the whole job's in a distributed sweep: one rank's step moves a batch.
        alone_s = samples_per_batch(knee) * (ks.world_size or 1) / ceiling
        # Mean, not median, compute time: a tail of slow steps (launches delayed by CPU
        # contention, an all-reduce waiting for a late rank) costs throughput too.
        compute_mean_s = mean_step_s(knee) * (1.0 - ks.stall_fraction)
        if share < 0.95 and compute_mean_s > 1.05 * alone_s:
            saturated = bool(usable_cpus and ks.cpu_util_pct is not None
                             and ks.cpu_util_pct >= 100.0 * CPU_SATURATED * usable_cpus)
            out.append(Finding(FindingKind.STEP_SLOWER.value, knee.settings.key(), {
                "share": share, "ceiling": ceiling, "compute_mean_s": compute_mean_s,
                "compute_p50_s": ks.compute_p50_s, "alone_s": alone_s,
                "cpu_saturated": saturated,
                "cpu_cores": None if ks.cpu_util_pct is None else ks.cpu_util_pct / 100.0,
                "usable_cpus": usable_cpus,
            }))
        elif ks.verdict == Verdict.COMPUTE_BOUND.value:
            # (A knee at the receive floor is explained by its own finding: the hand-off binds.)
            out.append(Finding(FindingKind.STEP_BINDS.value, knee.settings.key(), {"share": share, "ceiling": ceiling}))
    elif not fed and not (usable_cpus and bs.cpu_util_pct is not None
                          and bs.cpu_util_pct >= 100.0 * CPU_SATURATED * usable_cpus):
        mbps = transfer_mb_per_s(best)
        if (mbps is not None and mbps >= TRANSFER_MIN_MB_PER_S and bs.receive_p50_s
                and bs.receive_p50_s >= max(0.001, 0.25 * bs.data_wait_mean_s)):
            trial = best.trials[0] if best.trials else None
            out.append(Finding(FindingKind.TRANSFER.value, best.settings.key(), {
                "mb_per_s": mbps, "batch_bytes": bs.batch_bytes, "receive_s": bs.receive_p50_s,
                "tensor_leaves": None if trial is None else trial.tensor_leaves,
                "numpy_leaves": None if trial is None else trial.numpy_leaves,
            }))
    costly = [
        r for r in ok
        if r is not knee and r.settings.num_workers > knee.settings.num_workers
        and r.summary is not None and r.summary.cpu_util_pct is not None and ks.cpu_util_pct is not None
    ]
    if costly:
        top = max(costly, key=lambda r: r.summary.cpu_util_pct or 0.0)  # type: ignore[union-attr]
        ts = top.summary
        assert ts is not None and ks.cpu_util_pct is not None and ts.cpu_util_pct is not None
        extra = (ts.cpu_util_pct - ks.cpu_util_pct) / 100.0
        if extra > 0.5:
            out.append(Finding(FindingKind.MORE_NOT_BETTER.value, top.settings.key(), {
                "extra_cores": extra, "gain": ts.samples_per_s / ks.samples_per_s - 1.0,
            }))
    return out


def first_batch_sampler_s(result: ConfigResult) -> float:
    """Median seconds the sampler spent before a trial's first batch (0 when not measured): an
    epoch's index list drawn in the main process, paid at every epoch start whatever the
    workers do."""
    xs = sorted(t.first_batch_sampler_s for t in result.trials if t.first_batch_sampler_s is not None)
    return xs[len(xs) // 2] if xs else 0.0


def epoch_start_s(result: ConfigResult) -> float:
    """Seconds an epoch start costs `result` beyond its steady state, predicted from its first
    batch: the whole first batch when its workers start again every epoch (num_workers > 0,
    persistent_workers False); otherwise only what the sampler spent before it (nothing else
    starts again)."""
    s = result.summary
    assert s is not None
    if result.settings.num_workers > 0 and not result.settings.persistent_workers:
        return s.first_batch_s
    return min(s.first_batch_s, first_batch_sampler_s(result))


def epoch_samples_per_s(result: ConfigResult, epoch_batches: int) -> float:
    """Predicted samples/s over a whole epoch: samples per epoch / (epoch_start_s + epoch_batches
    x mean step). `epoch_batches` is per rank in a distributed sweep; the result is summed over
    ranks."""
    s = result.summary
    assert s is not None
    epoch_s = epoch_start_s(result) + epoch_batches * mean_step_s(result)
    samples = epoch_batches * samples_per_batch(result) * (s.world_size or 1)
    return samples / epoch_s if epoch_s > 0 else 0.0


def _window_spans_epochs(r: ConfigResult) -> bool:
    return any(t.epoch_start_batches for t in r.trials)


def startup(ok: Sequence[ConfigResult], knee: ConfigResult, epoch_batches: int, tolerance: float) -> list[Finding]:
    """Worker start-up against epochs of `epoch_batches` batches.

    STARTUP when the knee (workers, not persistent) would spend over 5% of an epoch starting
    its workers and its measured window did not already span epochs (then the start-up is in
    its measured throughput and in REMAINING_WAIT). Worker start-up is the first batch less
    what the sampler spent before it (an epoch's index list, drawn at every epoch start with
    persistent workers too); the share is a prediction. The persistent variant is quoted when
    measured and advised only when nothing it measured says otherwise: its throughput not below
    the knee's by more than the tolerance and, where both windows spanned epochs, its epoch-start
    gaps under half the knee's. EPOCH_FASTER when, counting each config's epoch-start cost in
    every epoch (`epoch_start_s`), another config is predicted faster per epoch than the knee by
    more than the tolerance.
    """
    out: list[Finding] = []
    ks = knee.summary
    assert ks is not None
    sampler_s = first_batch_sampler_s(knee)
    start_s = max(0.0, ks.first_batch_s - sampler_s)
    epoch_s = ks.first_batch_s + epoch_batches * mean_step_s(knee)
    share = start_s / epoch_s if epoch_s > 0 else 0.0
    advised = False
    if (knee.settings.num_workers > 0 and not knee.settings.persistent_workers and share > 0.05
            and not _window_spans_epochs(knee)):
        alt = _variant(knee, ok, persistent_workers=True)
        data: dict[str, Any] = {"first_batch_s": ks.first_batch_s, "start_s": start_s, "sampler_s": sampler_s,
                                "share": share, "epoch_batches": epoch_batches,
                                "predicted": True, "measured": alt is not None}
        gaps = [g for t in knee.trials for g in t.epoch_gap_s]
        if alt is not None and alt.summary is not None:
            alt_gaps = [g for t in alt.trials for g in t.epoch_gap_s]
            slower = alt.summary.samples_per_s < ks.samples_per_s * (1.0 - tolerance)
            data.update(config=alt.settings.key(), samples_per_s=alt.summary.samples_per_s,
                        knee_samples_per_s=ks.samples_per_s, slower=slower,
                        gap_s=_mean(gaps), persistent_gap_s=_mean(alt_gaps))
            if gaps and alt_gaps:
                advised = _mean(alt_gaps) < 0.5 * _mean(gaps)  # type: ignore[operator]
            else:
                advised = True
            advised = advised and not slower
        else:
            advised = True
        data["advised"] = advised
        out.append(Finding(FindingKind.STARTUP.value, knee.settings.key(), data))
    if _window_spans_epochs(knee):
        return out
    by_epoch = max(ok, key=lambda r: epoch_samples_per_s(r, epoch_batches))
    best_epoch = epoch_samples_per_s(by_epoch, epoch_batches)
    # With persistent workers advised, the knee pays start-up once: its epochs pay only the
    # sampler's draw.
    knee_epoch = (epoch_samples_per_s(replace_persistent(knee), epoch_batches) if advised
                  else epoch_samples_per_s(knee, epoch_batches))
    if by_epoch is not knee and knee_epoch < best_epoch * (1 - tolerance):
        out.append(Finding(FindingKind.EPOCH_FASTER.value, by_epoch.settings.key(), {
            "epoch_samples_per_s": best_epoch, "epoch_batches": epoch_batches, "predicted": True,
        }))
    return out


def replace_persistent(result: ConfigResult) -> ConfigResult:
    """`result` as if its workers were persistent (same trials and summary): for predictions."""
    return dataclasses.replace(result, settings=replace(result.settings, persistent_workers=True))


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def memory_per_worker(results: Sequence[ConfigResult]) -> list[Finding]:
    """MEMORY_PER_WORKER for a config whose PSS per worker is at least twice (and 64 MiB more
    than) that of another measured config with the same workers and batch size that differs
    from it in one setting only: that setting (a start method that starts every worker as a
    fresh interpreter, a worker-side cache) multiplies memory per worker. Per worker = (PSS - PSS of the 0-worker config, when measured) / workers."""
    ok = [r for r in results if r.status == "ok" and r.summary is not None and r.summary.memory_pss_bytes]
    base = {r.settings.batch_size: r.summary.memory_pss_bytes for r in ok if r.settings.num_workers == 0}  # type: ignore[union-attr]
    out = []

    def per_worker(r: ConfigResult) -> float:
        pss = float(r.summary.memory_pss_bytes or 0)  # type: ignore[union-attr]
        return max(0.0, pss - float(base.get(r.settings.batch_size) or 0)) / r.settings.num_workers

    for r in ok:
        if r.settings.num_workers == 0:
            continue
        # The reference differs in one setting only, so the difference is that setting's.
        peers = [p for p in ok if p is not r and p.settings.num_workers == r.settings.num_workers
                 and p.settings.batch_size == r.settings.batch_size
                 and len(_differs(r.settings, p.settings)) == 1]
        if not peers:
            continue
        low = min(peers, key=per_worker)
        mine, theirs = per_worker(r), per_worker(low)
        if mine >= 2 * theirs and mine - theirs >= 64 * 2**20:
            out.append(Finding(FindingKind.MEMORY_PER_WORKER.value, r.settings.key(), {
                "mib_per_worker": mine / 2**20, "ref_config": low.settings.key(),
                "ref_mib_per_worker": theirs / 2**20,
                "differs": _differs(r.settings, low.settings),
            }))
    return out


PARTIAL = 0.9  # batches holding under 90% of batch_size on average are named


def partial_batches(results: Sequence[ConfigResult], dataset: dict[str, Any] | None) -> list[Finding]:
    """PARTIAL_BATCHES per batch size whose measured configs' batches held under 90% of
    `batch_size` samples on average (the median config's count): the epoch (a sampler with
    fewer indices, a short IterableDataset, or its stream split across workers) ends before a
    batch fills, so throughput and the ceiling describe smaller batches than the DataLoader line
    names. Not for a batch sampler (which sets the batches) or --samples-per-batch."""
    d = dataset or {}
    if d.get("sampler_kind") == "batch_sampler" or d.get("samples_per_batch"):
        return []
    out = []
    for bs in sorted({r.settings.batch_size for r in results}):
        held = sorted(samples_per_batch(r) for r in results
                      if r.settings.batch_size == bs and r.status == "ok" and r.trials)
        if held and held[len(held) // 2] < PARTIAL * bs:
            out.append(Finding(FindingKind.PARTIAL_BATCHES.value, None, {
                "batch_size": bs, "samples_per_batch": held[len(held) // 2],
                "min": held[0], "max": held[-1],
            }))
    return out


def served_from_cache(results: Sequence[ConfigResult]) -> list[Finding]:
    """SERVED_FROM_CACHE when measured rows read from the device under a tenth of the bytes their
    samples needed (storage.read_summary, NOTE [which cache served it]): their throughput is a
    cache's, not the storage's. Data: the rows (config, cache state, bytes read from the device
    and through read(), bytes needed and how they were counted, the share of the files in the
    page cache after the window, which cache), and whether every row was so served (`all`)."""
    rows = []
    measured = [r for r in results if r.status == "ok" and r.summary is not None and r.trials]
    # Rows of one cache state served unalike (some from the device, some part or all from a
    # cache: a page cache warmed by the configs before, or repeats that filled a dataset's own
    # cache): ranking them compares the device with a cache.
    by_state: dict[str, set[str]] = {}
    for r in measured:
        if r.summary is not None and r.summary.served_from not in (None, ServedFrom.UNKNOWN.value):
            by_state.setdefault(r.cache, set()).add(str(r.summary.served_from))
    uneven = {state for state, kinds in by_state.items()
              if ServedFrom.STORAGE.value in kinds and len(kinds) > 1}
    for r in measured:
        served = r.summary.served_from if r.summary is not None else None
        if served is None or not (ServedFrom(served).is_cache or (served == ServedFrom.MIXED.value
                                                                   and r.cache in uneven)):
            continue
        t = next((t for t in r.trials if t.served_from == served), r.trials[0])
        rows.append({"config": r.settings.key(), "cache": r.cache, "served_from": served,
                     "read_bytes": t.storage_read_bytes, "read_chars": t.storage_read_chars,
                     "needed_bytes": t.needed_bytes, "needed_rule": t.needed_rule,
                     "resident_fraction": t.data_resident_fraction})
        if t.served_after_first_epoch and len(t.epoch_reads) >= 2:
            later = t.epoch_reads[1:]
            rows[-1].update(first_epoch_read_bytes=t.epoch_reads[0][0],
                            later_epoch_read_bytes=max(e[0] or 0 for e in later),
                            later_epoch_read_chars=None if any(e[1] is None for e in later)
                            else max(e[1] or 0 for e in later))
    if not rows:
        return []
    return [Finding(FindingKind.SERVED_FROM_CACHE.value, None, {
        "rows": rows, "all": len(rows) == len(measured),
        "uneven": sorted(uneven), "storage_rows": sorted(
            r.settings.key() for r in measured if r.cache in uneven and r.summary is not None
            and r.summary.served_from == ServedFrom.STORAGE.value),
    })]


def _differs(a: LoaderSettings, b: LoaderSettings) -> dict[str, list[Any]]:
    """{axis: [a's value, b's value]} for the grid axes that differ and mean something on both
    sides (an axis that needs workers is left out when either has none), then the loader
    arguments that differ."""
    no_workers = a.num_workers == 0 or b.num_workers == 0
    out = {ax.name: [getattr(a, ax.name), getattr(b, ax.name)] for ax in GRID_AXES
           if getattr(a, ax.name) != getattr(b, ax.name) and not (ax.workers_only and no_workers)}
    theirs = dict(b.loader_args)
    out.update({k: [v, theirs.get(k)] for k, v in a.loader_args if theirs.get(k) != v})
    return out


def headroom(result: ConfigResult, ceiling_samples_per_s: float | None) -> dict[str, Any] | None:
    """How much faster the loop could run from `result`'s settings (the user's current ones).

    Two bounds: removing all data-wait gives at most 1 / (1 - stall fraction); the compute
    ceiling (the step fed a batch already on the device) gives ceiling / throughput. The smaller
    one binds. Returns None for a config without a summary.
    Keys: key, samples_per_s, stall_fraction, max_speedup_from_stall, max_speedup_to_ceiling
    (None without a ceiling), binds ("stall" or "compute ceiling").
    """
    s = result.summary
    if s is None or s.samples_per_s <= 0:
        return None
    from_stall = 1.0 / max(1e-9, 1.0 - s.stall_fraction)
    to_ceiling = None if not ceiling_samples_per_s else ceiling_samples_per_s / s.samples_per_s
    binds = "stall" if to_ceiling is None or from_stall <= to_ceiling else "compute ceiling"
    return {
        "key": result.settings.key(),
        "samples_per_s": s.samples_per_s,
        "stall_fraction": s.stall_fraction,
        "max_speedup_from_stall": from_stall,
        "max_speedup_to_ceiling": to_ceiling,
        "binds": binds,
    }


def _probe_contradicts_window(r: ConfigResult) -> bool:
    """A config with workers whose window was loader-bound while its loader-alone probe says the
    loader outpaces the step by more than 10%: the probe read something the loop never saw (a
    backlog it did not drain), so it does not stand for the loader's ceiling."""
    s = r.summary
    assert s is not None
    return bool(r.settings.num_workers > 0 and s.verdict == Verdict.LOADER_BOUND.value
                and s.compute_ceiling_samples_per_s and s.loader_ceiling_samples_per_s
                and s.loader_ceiling_samples_per_s > (1.0 + MATCHED) * s.compute_ceiling_samples_per_s)


def loader_ceiling(results: Sequence[ConfigResult]) -> dict[str, Any] | None:
    """The loader ceiling (NOTE [loader ceiling] in the measuring loop) over the ranked configs,
    set against the compute ceiling; None when no ranked config was probed.

    A probe that contradicts its own window (`_probe_contradicts_window`) is left out. The
    loader alone delivers at least what the loop measured with the step, so when the best
    probe reads lower than the best measured throughput, that throughput is the ceiling's lower
    bound (`lower_bound_from`). When some configs could not be probed (their loader ended
    first) and ran faster than every probe, nothing is concluded (`binds` None, `probed` <
    `ranked`). Keys: samples_per_s, config, probed, ranked, lower_bound_from, compute_ceiling,
    binds ("loader" | "compute" | "matched": within 10% of each other | None).
    """
    ranked = rankable(results)
    probed = [r for r in ranked if r.summary.loader_ceiling_samples_per_s  # type: ignore[union-attr]
              and not _probe_contradicts_window(r)]
    if not probed:
        return None
    top = max(probed, key=lambda r: r.summary.loader_ceiling_samples_per_s or 0.0)  # type: ignore[union-attr]
    lc = top.summary.loader_ceiling_samples_per_s or 0.0  # type: ignore[union-attr]
    best = max(ranked, key=lambda r: r.summary.samples_per_s)  # type: ignore[union-attr]
    measured = best.summary.samples_per_s  # type: ignore[union-attr]
    out: dict[str, Any] = {"samples_per_s": lc, "config": top.settings.key(), "probed": len(probed),
                           "ranked": len(ranked), "lower_bound_from": None, "compute_ceiling": None, "binds": None}
    if lc < measured:
        if len(probed) < len(ranked):
            return out
        out["lower_bound_from"] = {"config": best.settings.key(), "samples_per_s": measured}
        lc = measured
    cc = top.summary.compute_ceiling_samples_per_s  # type: ignore[union-attr]
    if cc:
        if out["lower_bound_from"] is not None:
            # Only a lower bound (the loop's own throughput): the loader may be much faster.
            binds = "compute" if lc >= (1.0 - MATCHED / 2) * cc else "loader"
        else:
            binds = "matched" if abs(lc - cc) <= MATCHED * cc else ("loader" if lc < cc else "compute")
        out.update(compute_ceiling=cc, binds=binds)
    return out

