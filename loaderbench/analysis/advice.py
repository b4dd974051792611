"""The findings pass: the recommendation (the knee, and what the measurements say about it), the
notes on configs beside it, the headroom and the loader ceiling, as typed records
(conclusions.py).

Pure: no torch, no I/O. It reads what the passes before it wrote (each config's `Summary`, the
knee pass's `Ranking`) and returns into none of them. Sentences are written from the findings in
render/.

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
import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from loaderbench.analysis import thresholds as th
from loaderbench.analysis.knee import Ranking, rank
from loaderbench.analysis.statistics import other_cores
from loaderbench.analysis.wait import cpu_saturated, slowed_past, verdict_part, workers_short_of_cpu
from loaderbench.conclusions import (
    AlsoFastest,
    Baseline,
    BatchedFetch,
    BestWithinTolerance,
    BuildRate,
    CacheFix,
    CeilingBinds,
    CoresSlower,
    CpuBound,
    DeviceBinds,
    Difference,
    DisturbedRow,
    DisturbedRows,
    EpochFaster,
    EpochIter,
    EpochIterRow,
    EqualCheaper,
    FailedConfig,
    Finding,
    Headroom,
    HeadroomBinds,
    IdleRow,
    IdleWorkers,
    InOrderTrial,
    Knee,
    LatencyBound,
    LoaderAlone,
    LoaderCeiling,
    LongTail,
    LowestStall,
    MeasuredRate,
    MemoryPerWorker,
    MoreNotBetter,
    Noisy,
    NoneMeasured,
    NotCleared,
    NotClearedCause,
    OtherLoad,
    Oversubscribed,
    PartialBatches,
    ReceiveBound,
    Recommendation,
    RemainingWait,
    Remedy,
    RemedyKind,
    ServedFromCache,
    ServedRow,
    SlowedRow,
    StageProfile,
    Startup,
    StepBinds,
    StepSlowed,
    StepSlower,
    Threads,
    Transfer,
    WorkerSlower,
)
from loaderbench.model import (
    GRID_AXES,
    CeilingBound,
    ConfigResult,
    InputBound,
    LoaderSettings,
    ServedFrom,
    StageKind,
    Summary,
    Trial,
    Verdict,
    WaitPart,
    WarningKind,
)

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
    if _sets_worker_threads(settings):
        # What --worker-threads set in each worker (1 is torch's own setting there): a function
        # defined at module level, which spawn and forkserver workers can unpickle (a lambda
        # cannot be); the recommendation carries its definition (worker_threads_def).
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


def _sets_worker_threads(settings: LoaderSettings) -> bool:
    return settings.worker_threads not in (None, 1) and settings.num_workers > 0


def worker_threads_def(threads: int) -> str:
    """The module-level `worker_init_fn` that the recommended call names (`dataloader_call`)."""
    return f"def {WORKER_THREADS_FN}(worker_id): torch.set_num_threads({threads})"


def recommend(
    results: Sequence[ConfigResult],
    *,
    tolerance: float = th.DEFAULT_TOLERANCE,
    usable_cpus: int | None = None,
    loader_only: bool = False,
    epoch_batches: int | None = None,
    dataset: dict[str, Any] | None = None,
    ranking: Ranking | None = None,
    grid: dict[str, Any] | None = None,
    stopped: bool = False,
    budget_ended: bool = False,
) -> Recommendation:
    """The knee (analysis/knee.py: `ranking`, the knee pass's record of `results`, made here
    when not given) as a recommendation, with the findings that explain it.

    Findings, in order: Knee (with the spread of its repeats); AlsoFastest or
    BestWithinTolerance; EqualCheaper (cheaper configs within the tolerance of the knee, not
    picked); ListedFirst (a tie the order of a loader argument's values decided,
    knee.listed_first_ties); LoaderAlone (with
    `loader_only`, `--compute none`); RemainingWait (the knee still waits: what the wait is made
    of and the remedies, per NOTE [advice the measurements support]); NotCleared (even the best
    config is loader-bound: CPU saturation, a replicated IterableDataset, the storage device,
    a wait building does not explain, cores that slowed, workers left idle, the grid's configs
    with more workers not reached before the sweep was `stopped`, or the grid's edge with the
    workers-needed estimate); LatencyBound (its workers wait, not compute); LowestStall;
    StepSlower / StepBinds / Transfer (why the curve
    flattens past the knee, against each config's compute ceiling); MoreNotBetter; Startup and
    EpochFaster (with `epoch_batches`, batches per epoch per rank: worker start-up against the
    epoch, predicted where the window did not span an epoch); Threads; Oversubscribed (only
    where the knee's measured CPU demand reached the usable CPUs); OtherLoad. CPU saturation is
    on `usable_cpus` (wait.cpu_saturated). `grid`: the config's [grid] table (a remedy or variant
    it lists is never asked for with a flag: `Remedy.in_grid`).
    """
    ranking = ranking or rank(results, tolerance=tolerance)
    knee, best, ok = ranking.knee, ranking.best, ranking.ranked
    if knee is None or best is None:
        return Recommendation(settings=None, findings=[NoneMeasured()])
    ks, bs = knee.summary, best.summary
    assert ks is not None and bs is not None
    band = InputBound.LOADER_ALONE if loader_only else (ks.band or InputBound.NOT)
    out: list[Finding] = [Knee(
        knee.settings, ks.samples_per_s, ks.stall_fraction, band, ks.ceiling_share,
        # The other axes the sweep varied (the headline names them at the knee's values).
        swept=[ax.name for ax in GRID_AXES if ax.name not in ("num_workers", "pin_memory", "prefetch")
               and not (ax.workers_only and knee.settings.num_workers == 0)
               and len({getattr(r.settings, ax.name) for r in ok}) > 1]
        + [k for k, _ in knee.settings.loader_args if len({dict(r.settings.loader_args).get(k) for r in ok}) > 1],
        spread=ks.spread, repeats=ks.repeats, tolerance=ranking.tolerance, window_se=ks.window_se,
        uncertainty=ks.uncertainty,
    )]
    if best is not knee:
        out.append(BestWithinTolerance(
            best.settings, bs.samples_per_s, ranking.tolerance,
            loader_still_binds=Verdict.LOADER_BOUND in (bs.verdict, ks.verdict),
            differs=_differs(best.settings, knee.settings)))
    else:
        out.append(AlsoFastest(replicated_excluded=any(r.has(WarningKind.REPLICATED) for r in results
                                                       if r.status == "ok")))
    out.extend(equal_cheaper(ranking))
    # Where the order in which the user listed a loader argument's values decided the pick.
    out.extend(ranking.listed_first)
    if loader_only:
        out.append(LoaderAlone(best.settings, bs.samples_per_s, bs.step_p50_s))
    else:
        out.extend(remaining_wait(knee, ok, grid=grid, tolerance=ranking.tolerance, usable_cpus=usable_cpus))
        # Workers that bought nothing because the hand-off binds: when the knee has no workers,
        # say why (a batch of many tiny tensors, or numpy arrays, makes every worker config
        # wait on the main process).
        handoff = [r for r in ok if r.settings.num_workers > 0 and _s(r).verdict is Verdict.RECEIVE_FLOOR]
        if handoff and knee.settings.num_workers == 0:
            top = max(handoff, key=lambda r: _s(r).samples_per_s)
            out.extend(remaining_wait(top, ok, of_knee=False, grid=grid, tolerance=ranking.tolerance,
                                      usable_cpus=usable_cpus))
    out.extend(not_cleared(best, knee, ok, results, usable_cpus, grid=grid, stopped=stopped,
                           budget_ended=budget_ended))
    out.extend(latency_bound(best, knee, ok, usable_cpus,
                             replicated=any(r.has(WarningKind.REPLICATED) for r in results if r.status == "ok"),
                             tolerance=ranking.tolerance))
    if not any(isinstance(f, (NotCleared, RemainingWait)) for f in out):
        low = min(_s(r).stall_fraction for r in ok)
        if 0 < low < th.LOADER_BOUND_STALL:
            out.append(LowestStall(low))
    if not loader_only:
        out.extend(plateau(ok, knee, best, usable_cpus))
    if epoch_batches:
        out.extend(startup(ok, knee, epoch_batches, ranking.tolerance, grid=grid))
    if knee.settings.worker_threads is not None or knee.settings.main_threads is not None:
        out.append(Threads(knee.settings, knee.settings.worker_threads, knee.settings.main_threads))
    out.extend(oversubscribed(knee, usable_cpus))
    out.extend(other_load(ok, usable_cpus))
    threads = knee.settings.worker_threads
    return Recommendation(
        settings=knee.settings,
        findings=out,
        input_bound=band,
        dataloader_call=dataloader_call(knee.settings, dataset),
        use_prefetcher=knee.settings.prefetch,
        worker_init_def=worker_threads_def(threads) if threads and _sets_worker_threads(knee.settings) else None,
        imports=call_imports(dataset),
        decoder_lines=decoder_lines(knee.settings, dataset),
        prefetcher_call=prefetcher_call(knee.settings) if knee.settings.prefetch else "",
    )


def _s(r: ConfigResult) -> Summary:
    """The summary of a ranked config (every ranked config has one)."""
    assert r.summary is not None
    return r.summary


def _variant(knee: ConfigResult, ok: Sequence[ConfigResult], **change: Any) -> ConfigResult | None:
    """The measured config with the knee's settings and `change` applied (same cache state)."""
    want = replace(knee.settings, **change)
    return next((r for r in ok if r.settings == want and r.cache == knee.cache), None)


_REMEDY_AXIS = {RemedyKind.PREFETCH: "prefetch", RemedyKind.PIN_MEMORY: "pin_memory",
                RemedyKind.PERSISTENT_WORKERS: "persistent_workers"}


def in_grid(grid: dict[str, Any] | None, axis: str) -> bool:
    """Whether the sweep's [grid] table (`grid`, the config's) lists more than one value of
    `axis`: a variant on it needs no flag, it was in the plan."""
    values = (grid or {}).get(axis)
    return isinstance(values, list) and len({repr(v) for v in values}) > 1


def _remedy(kind: RemedyKind, knee: ConfigResult, alt: ConfigResult | None, flag: str | None = None,
            grid: dict[str, Any] | None = None) -> Remedy:
    """A remedy as data: measured (with its figures, gain over the knee, and the slowdown of its
    step where that ran over STEP_SLOWED slower than alone) or not (with the flag that would
    measure it, unless the grid lists it already: `in_grid`)."""
    ks = _s(knee)
    if alt is None or alt.summary is None:
        listed = kind in _REMEDY_AXIS and in_grid(grid, _REMEDY_AXIS[kind])
        return Remedy(kind, measured=False, flag=None if listed else flag, in_grid=listed)
    a = alt.summary
    return Remedy(kind, measured=True, settings=alt.settings, samples_per_s=a.samples_per_s,
                  ceiling_share=a.ceiling_share, knee_ceiling_share=ks.ceiling_share,
                  gain=a.samples_per_s / ks.samples_per_s - 1.0 if ks.samples_per_s > 0 else 0.0,
                  step_slowdown=a.step_slowdown if a.step_slowed else None)


def remaining_wait(knee: ConfigResult, ok: Sequence[ConfigResult], of_knee: bool = True,
                   grid: dict[str, Any] | None = None, tolerance: float = 0.0,
                   usable_cpus: int | None = None) -> list[Finding]:
    """RemainingWait for a config that still waits (stall at least 5%, or a tail): the largest
    part of its wait, every part of at least PART_REPORTED of the step, what the batch is made
    of, and the remedies that act on the largest part (NOTE [advice the measurements support]).
    `of_knee`: the recommended config; else a config with workers bound by the hand-off when
    the knee is another. A wait of batches not built in time with no measured remedy is left to
    NotCleared. A remedy measured without gain on a row whose step slowed beside the loader
    (`Summary.step_slowed`) is no evidence: it goes in `slowed`; more workers are judged from the
    fastest row with more workers whose step did not slow, where there is one, and never offered
    to a row with idle workers (its wait is on the workers that work, never the receive), nor
    where they measured above it by no more than `tolerance` (the knee's: nothing measurable); any
    other remedy measured above it by no more than `tolerance`, on a row that still waited more than
    REMEDY_REMOVED_WAIT (thresholds.py) of its stall, is measured without gain, and where
    that is persistent workers on an epoch-start part, the start outlasts them
    (`start_outlasts_persistent`: the dataset's own `__iter__`, not workers starting).
    A receive part on saturated CPUs (wait.cpu_saturated on `usable_cpus`) names the same batch's
    receive at fewer workers where that was RECEIVE_CONTENDED (thresholds.py) of it or less: the main process
    waited for a core too. A receive part names the row with the most workers otherwise alike, and
    its median wait and stall: the evidence for "more workers cannot remove it"."""
    ks = _s(knee)
    if ks.verdict in (Verdict.COMPUTE_BOUND, Verdict.STEP_SLOWED, Verdict.LOADER_ALONE):
        return []
    parts = ks.wait_parts_s
    step = ks.mean_step_s or ks.step_p50_s
    # The verdict's part (wait.verdict_part): with idle workers the step waits on the workers
    # that work (IdleWorkers); a receive under half the wait is no floor.
    main = verdict_part(parts, ks.idle_workers) or WaitPart.LOADER
    s = knee.settings
    trial = knee.trials[0] if knee.trials else None
    remedies: list[Remedy] = []
    if main is WaitPart.H2D:
        if s.pin_memory:
            remedies.append(_remedy(RemedyKind.PREFETCH, knee, _variant(knee, ok, prefetch=True), "--prefetch off,on",
                                    grid))
        else:
            remedies.append(_remedy(RemedyKind.PIN_MEMORY, knee, _variant(knee, ok, pin_memory=True),
                                    "--pin-memory off,on", grid))
    elif main is WaitPart.RECEIVE:
        if trial is not None and (trial.tensor_leaves or 0) >= th.SMALL_TENSORS:
            remedies.append(Remedy(RemedyKind.PACK_TENSORS, measured=False))
        if trial is not None and trial.numpy_leaves:
            remedies.append(Remedy(RemedyKind.NUMPY_TO_TENSORS, measured=False))
        bigger = [r for r in ok if r.settings.batch_size > s.batch_size
                  and replace(r.settings, batch_size=s.batch_size) == s and r.cache == knee.cache]
        if bigger:
            remedies.append(_remedy(RemedyKind.LARGER_BATCH, knee, max(bigger, key=lambda r: r.settings.batch_size)))
        if trial is not None and trial.h2d_bytes_per_batch is not None and not s.pin_memory:
            # With CUDA: the pin-memory thread takes batches from the workers, off the step's thread.
            remedies.append(_remedy(RemedyKind.PIN_MEMORY, knee, _variant(knee, ok, pin_memory=True),
                                    "--pin-memory off,on", grid))
    elif main is WaitPart.EPOCH_START:
        if s.num_workers > 0 and not s.persistent_workers:
            remedies.append(_remedy(RemedyKind.PERSISTENT_WORKERS, knee, _variant(knee, ok, persistent_workers=True),
                                    "--persistent-workers off,on", grid))
    elif main is WaitPart.LOADER:
        more = [r for r in ok if r.settings.num_workers > s.num_workers
                and replace(r.settings, num_workers=s.num_workers) == s and r.cache == knee.cache]
        # Idle workers at the knee or in the rows with more: more workers get no work either.
        if more and not ks.idle_workers and not any(_s(r).idle_workers for r in more):
            steady = [r for r in more if not _s(r).step_slowed]
            top = max(steady or more, key=lambda r: _s(r).samples_per_s)
            remedy = _remedy(RemedyKind.MORE_WORKERS, knee, top)
            # A gain within the tolerance is nothing measurable (the knee is the fewest workers
            # within it): not offered as acting on the wait (a loss stays, as measured without gain).
            if not (remedy.measured and 0.0 < (remedy.gain or 0.0) <= tolerance):
                remedies.append(remedy)
    elif main is WaitPart.SAMPLER:
        remedies.append(Remedy(RemedyKind.LAZY_SAMPLER, measured=False))
    if main is WaitPart.LOADER and not remedies:
        return []
    assert ks.verdict is not None
    # A remedy measured on a window other processes shared (as much as the other-load note
    # names) is no evidence either: the row measured a shared machine.
    floor = other_load_floor(usable_cpus)
    by_settings = {r.settings: r for r in ok if r.cache == knee.cache}  # as `_variant` finds them
    remedies = [replace(r, other_cores=c) if r.measured and r.settings in by_settings
                and (c := _s(by_settings[r.settings]).other_cores) is not None and c >= floor else r
                for r in remedies]
    most: ConfigResult | None = None
    if main is WaitPart.RECEIVE:
        more = [r for r in ok if r.settings.num_workers > s.num_workers
                and replace(r.settings, num_workers=s.num_workers) == s and r.cache == knee.cache]
        most = max(more, key=lambda r: r.settings.num_workers, default=None)

    def acts(r: Remedy) -> bool:
        # Measured: a gain past the tolerance, or one inside it on a row that waited at most
        # REMEDY_REMOVED_WAIT of this config's stall (it removed the wait, the step binds both).
        if not r.measured:
            return True
        gain = r.gain or 0.0
        if gain > max(0.0, tolerance):
            return True
        row = by_settings.get(r.settings) if r.settings is not None else None
        return gain > 0 and row is not None and _s(row).stall_fraction <= th.REMEDY_REMOVED_WAIT * ks.stall_fraction

    quiet: ConfigResult | None = None
    if main is WaitPart.RECEIVE and ks.receive_p50_s and cpu_saturated(ks.cpu_util_pct, ks.other_cores, usable_cpus):
        fewer = [r for r in ok if 0 < r.settings.num_workers < s.num_workers
                 and r.settings.batch_size == s.batch_size and _s(r).receive_p50_s
                 and (_s(r).receive_p50_s or 0.0) <= th.RECEIVE_CONTENDED * ks.receive_p50_s]
        quiet = min(fewer, key=lambda r: _s(r).receive_p50_s or 0.0, default=None)
    return [RemainingWait(
        s, of_knee=of_knee, part=main, workers_restart=s.num_workers > 0 and not s.persistent_workers,
        verdict=ks.verdict, stall_fraction=ks.stall_fraction, wait_p50_s=ks.data_wait_p50_s,
        part_s=parts.get(main, 0.0), wait_mean_s=sum(parts.values()),
        part_most=parts.get(main, 0.0) >= th.PART_MOST * sum(parts.values()),
        parts_share={p: v / step for p, v in parts.items() if step > 0 and v / step >= th.PART_REPORTED},
        receive_s=ks.receive_p50_s, h2d_s=ks.h2d_p50_s, h2d_hidden_fraction=ks.h2d_hidden_fraction,
        tensor_leaves=None if trial is None else trial.tensor_leaves,
        numpy_leaves=None if trial is None else trial.numpy_leaves,
        batch_bytes=ks.batch_bytes,
        remedies=[r for r in remedies if acts(r)],
        measured_no_gain=[r for r in remedies if not acts(r) and r.step_slowdown is None and r.other_cores is None],
        slowed=[r for r in remedies if not acts(r) and (r.step_slowdown is not None or r.other_cores is not None)],
        tolerance=tolerance,
        start_outlasts_persistent=main is WaitPart.EPOCH_START and any(
            r.remedy is RemedyKind.PERSISTENT_WORKERS and not acts(r) and r.step_slowdown is None
            and r.other_cores is None for r in remedies),
        quiet_settings=None if quiet is None else quiet.settings,
        quiet_receive_s=None if quiet is None else _s(quiet).receive_p50_s,
        cpu_cores=None if quiet is None or ks.cpu_util_pct is None else ks.cpu_util_pct / 100.0,
        usable_cpus=usable_cpus if quiet is not None else None,
        built_fast_enough=main is WaitPart.LOADER and build_rate_unexplained(knee) is not None,
        more_settings=None if most is None else most.settings,
        more_wait_p50_s=None if most is None else _s(most).data_wait_p50_s,
        more_stall_fraction=None if most is None else _s(most).stall_fraction,
        # Still waits: a median wait of half the receive part or more, or a stall no lower than the
        # knee's (a lower median wait over a larger stall is not waiting less).
        more_still_waits=most is not None and (_s(most).data_wait_p50_s >= th.RECEIVE_REMAINS * parts.get(main, 0.0)
                                               or _s(most).stall_fraction >= ks.stall_fraction),
    )]


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


def _other_named(other: float | None) -> bool:
    return other is not None and other >= th.OTHER_CORES_NAMED


def build_rate_unexplained(row: ConfigResult) -> BuildRate | None:
    """The BuildRate of `row` where building batches does not explain its wait (None where it
    may): its loader alone builds them more than MATCHED faster than the step takes them, and the
    stall that rate explains (`build_rate_stall`) is under BUILD_RATE_EXPLAINS of the measured
    one; `in_tail` when its p95 wait is over TAIL_OVER_MEDIAN x its median."""
    s = _s(row)
    explained = build_rate_stall(row)
    alone, compute = s.loader_ceiling_samples_per_s, s.compute_ceiling_samples_per_s
    if (explained is None or not alone or not compute or alone <= (1.0 + th.MATCHED) * compute
            or explained >= th.BUILD_RATE_EXPLAINS * s.stall_fraction):
        return None
    return BuildRate(alone, compute, explained, s.data_wait_p50_s, s.data_wait_p95_s,
                     in_tail=s.data_wait_p95_s > th.TAIL_OVER_MEDIAN * s.data_wait_p50_s)


def not_cleared(best: ConfigResult, knee: ConfigResult, ok: Sequence[ConfigResult], results: Sequence[ConfigResult],
                usable_cpus: int | None, *, grid: dict[str, Any] | None = None, stopped: bool = False,
                budget_ended: bool = False) -> list[Finding]:
    """NotCleared when the best ranked config is loader-bound (or, if the best is bound by
    something else, the knee is) and no ranked config is compute-bound (one that is cleared the
    bottleneck: a cheaper pick within the tolerance of a loader-bound best), with the cause: CPU saturation (wait.cpu_saturated: the
    process tree and the other load used CPU_SATURATED of the usable CPUs; `mostly_other` when
    the other load took more of them than the tree; not where the workers' run-queue delay says
    they did not wait for a CPU, wait.workers_short_of_cpu); an IterableDataset that configs with more
    workers replay (not ranked); the storage device (`_device_binds`); a wait that building
    batches does not explain (the loader alone builds them more than MATCHED faster than the
    step takes them, and the stall its rate explains, `build_rate_stall`, is under half the
    measured one: more workers are not the cure; `in_tail` when its p95 is over
    TAIL_OVER_MEDIAN x its median); cores that slowed as workers were added (`cores_slower`);
    workers that delivered no batch or too few (IDLE_WORKERS: the dataset gives work to fewer
    workers, more change nothing); or the grid's edge (the config has the most workers
    measured: more may help, with the workers-needed estimate, a prediction), unless configs
    with more workers were tried and failed, hung or were skipped (MORE_WORKERS_FAILED, with
    their errors), or the grid (`grid`) lists more workers that a `stopped` sweep did not reach
    (NOT_REACHED: no flag is missing), or --time-budget ended the search before it measured more
    workers (`budget_ended`: NOT_REACHED `by_budget`, with the workers-needed estimate)."""
    subject = next((r for r in (best, knee) if r.summary is not None
                    and r.summary.verdict is Verdict.LOADER_BOUND), None)
    if subject is None or any(_s(r).verdict is Verdict.COMPUTE_BOUND for r in ok):
        return []  # (a measured config that is compute-bound cleared it)
    bs = _s(subject)
    f = NotCleared(subject.settings, of_best=subject is best, stall_fraction=bs.stall_fraction,
                   band=bs.band or InputBound.NOT)
    if (workers_short_of_cpu(bs.cpu_util_pct, bs.other_cores, bs.worker_queue_share, usable_cpus)
            and bs.cpu_util_pct is not None):
        cores = bs.cpu_util_pct / 100.0
        named = _other_named(bs.other_cores)
        f.cause = NotClearedCause.CPU
        f.cpu = CpuBound(cores, usable_cpus, bs.other_cores, other_named=named,
                         mostly_other=named and (bs.other_cores or 0.0) >= cores)
    elif any(r.has(WarningKind.REPLICATED) for r in results):
        f.cause = NotClearedCause.REPLICATED
    elif bs.idle_workers:
        f.cause = NotClearedCause.IDLE_WORKERS
        f.working_workers = subject.settings.num_workers - bs.idle_workers
    elif (device := _device_binds(subject, ok)) is not None:
        f.cause, f.device = NotClearedCause.STORAGE, device
    elif (unexplained := build_rate_unexplained(subject)) is not None:
        f.cause, f.build_rate = NotClearedCause.NOT_BUILD_RATE, unexplained
    elif (slower := cores_slower(subject, ok, usable_cpus)) is not None:
        f.cause, f.cores_slower = NotClearedCause.CORES_SLOWER, slower
    elif subject.settings.num_workers == max(r.settings.num_workers for r in ok):
        beyond = [r for r in results if r.status in ("failed", "hung", "skipped")
                  and r.settings.num_workers > subject.settings.num_workers]
        listed = sorted({int(w) for w in (grid or {}).get("num_workers") or []
                         if isinstance(w, int) and w > subject.settings.num_workers})
        if beyond:
            # More workers were tried and did not run: "try more workers" would send the user
            # back to them; the rows say why they failed.
            f.cause = NotClearedCause.MORE_WORKERS_FAILED
            f.failed = [FailedConfig(r.settings, r.status, r.error) for r in beyond]
        elif stopped and listed:
            # The grid lists them: the sweep was stopped before it reached them.
            f.cause, f.not_reached = NotClearedCause.NOT_REACHED, listed
        elif budget_ended:
            # --time-budget ended the search before it measured more workers: "try more workers"
            # would ask for what the search itself was about to do.
            f.cause, f.not_reached, f.by_budget = NotClearedCause.NOT_REACHED, listed, True
            f.workers_needed, f.per_rank = bs.workers_needed, (bs.world_size or 1) > 1
        else:
            f.cause = NotClearedCause.GRID_EDGE
            f.workers_needed, f.per_rank = bs.workers_needed, (bs.world_size or 1) > 1
    return [f]


def other_load_floor(usable_cpus: int | None) -> float:
    """Cores other processes (and steal) take in a window before it measures a shared machine:
    OTHER_LOAD_CORES and OTHER_LOAD_SHARE of the usable CPUs, or on fewer usable CPUs than 1 /
    OTHER_LOAD_SMALL_SHARE that share of them (1.0 core of 16, 0.5 of 2)."""
    cpus = usable_cpus or 0
    floor = max(th.OTHER_LOAD_CORES, th.OTHER_LOAD_SHARE * cpus)
    if cpus:
        floor = max(min(floor, th.OTHER_LOAD_SMALL_SHARE * cpus), th.OTHER_LOAD_SHARE * cpus)
    return floor


def disturbed_rows(results: Sequence[ConfigResult], usable_cpus: int | None) -> list[Finding]:
    """DisturbedRows for the measured rows whose own windows ran beside other load
    (`Summary.other_cores`: other processes and the hypervisor's steal, cores) of at least
    DISTURBED_SHARE of `usable_cpus` and DISTURBED_OVER_MEDIAN times the median over the rows
    that read it: a burst in those windows, which their figures read as well as the config (a
    load every row shared is OtherLoad's). None without a CPU count or with fewer than 3 rows
    (no median to stand out from)."""
    seen = [r for r in results if r.status == "ok" and r.summary is not None and r.summary.other_cores is not None]
    if not usable_cpus or len(seen) < 3:
        return []
    median = statistics.median(_s(r).other_cores or 0.0 for r in seen)
    floor = max(th.DISTURBED_SHARE * usable_cpus, th.DISTURBED_OVER_MEDIAN * median)
    rows = []
    for r in sorted(seen, key=lambda r: r.settings.num_workers):
        s = _s(r)
        if (s.other_cores or 0.0) >= floor:
            steal = (s.steal_cpu_util_pct or 0.0) / 100.0
            rows.append(DisturbedRow(r.settings, s.samples_per_s, s.other_cores or 0.0, steal_cores=steal,
                                     steal_named=steal >= th.STEAL_CORES_NAMED, repeats=s.repeats))
    return [DisturbedRows(rows=rows, median_cores=median, usable_cpus=usable_cpus, share=th.DISTURBED_SHARE,
                          over_median=th.DISTURBED_OVER_MEDIAN)] if rows else []


def other_load(ok: Sequence[ConfigResult], usable_cpus: int | None) -> list[Finding]:
    """OtherLoad when, during some measured window, other processes (and the hypervisor's steal)
    took at least OTHER_LOAD_CORES cores and OTHER_LOAD_SHARE of the usable CPUs, or on fewer
    usable CPUs than 1 / OTHER_LOAD_SMALL_SHARE that share of them (NOTE [what else ran on the
    usable CPUs] in measure/meter.py): such rows measure a shared machine. Data:
    the median and largest cores over the measured configs, the config of the largest, its steal
    share."""
    seen = [(c, r) for r in ok if r.summary is not None and (c := r.summary.other_cores) is not None]
    if not seen:
        return []
    top, where = max(seen, key=lambda x: x[0])
    if top < other_load_floor(usable_cpus):
        return []
    steal = (_s(where).steal_cpu_util_pct or 0.0) / 100.0
    return [OtherLoad(where.settings, median_cores=statistics.median(c for c, _ in seen), max_cores=top,
                      configs=len(seen), steal_cores=steal, steal_named=steal >= th.STEAL_CORES_NAMED,
                      usable_cpus=usable_cpus)]


def latency_bound(best: ConfigResult, knee: ConfigResult, ok: Sequence[ConfigResult],
                  usable_cpus: int | None, *, replicated: bool = False, tolerance: float = 0.0) -> list[Finding]:
    """LatencyBound when the best config (else the knee) is loader-bound with workers that used
    under LATENCY_WORKER_CORES of a core each on average (`Summary.worker_cores`: the tree's CPU
    less the main process's, over num_workers), with no idle workers among them and the CPUs not
    saturated with its workers waiting for a CPU (`wait.workers_short_of_cpu`: workers starved of CPU
    by other load use little of it too; ones that sleep on I/O are not runnable): a sample's CPU
    time is a small part of its wall time in the worker, so it waits on latency (storage, a
    network), and requests in flight, not cores, set the rate. Not where the main process took
    its batches for RECEIVE_BINDS_SHARE of its time per batch or more (receive floor p50 over the
    mean step, `Summary.mean_step_s`): its workers then wait for room in a queue the main process
    drains slowly (batches pickled through a pipe), which uses as little CPU. Not where building
    batches does not explain the wait (`build_rate_unexplained`: NotCleared says so, and that more
    workers are not the cure). Not where more workers cannot
    help: a row with more workers had idle ones (the dataset gives work to no more), or rows
    replay the same stream (`replicated`: a measured row has `WarningKind.REPLICATED`; such
    rows are not ranked, so not in `ok`). Where a config with more workers than the knee measured
    within `tolerance` of it, that config is named (`more_no_gain`) and more workers are not offered.
    Where neither is loader-bound and the knee has more workers than `usable_cpus`, the subject is
    the loader-bound row with the most workers below the knee's count (its other settings the
    knee's) where the knee measured faster than it by more than `tolerance`: the finding names the
    knee and both figures (`faster_past_cpus`, `faster_samples_per_s`, `below_samples_per_s`):
    why workers past the core count paid, and nothing of what binds at the knee, which its own
    findings name (a knee said to have "cleared" the latency read 21% and 86% stalls on the
    receive, and 26% to 67% on epoch starts)."""
    subject = next((r for r in (best, knee) if r.summary is not None and r.summary.verdict is Verdict.LOADER_BOUND
                    and r.settings.num_workers > 0), None)
    past: ConfigResult | None = None
    if subject is None and usable_cpus and knee.settings.num_workers > usable_cpus:
        below = [r for r in ok if 0 < r.settings.num_workers < knee.settings.num_workers
                 and replace(r.settings, num_workers=knee.settings.num_workers) == knee.settings
                 and r.summary is not None and r.summary.verdict is Verdict.LOADER_BOUND]
        top = max(below, key=lambda r: r.settings.num_workers, default=None)
        if top is not None and _s(knee).samples_per_s > (1.0 + tolerance) * _s(top).samples_per_s:
            subject, past = top, knee
    if subject is None:
        return []
    ss = _s(subject)
    if (ss.worker_cores is None or ss.worker_cores >= th.LATENCY_WORKER_CORES or ss.idle_workers
            or workers_short_of_cpu(ss.cpu_util_pct, ss.other_cores, ss.worker_queue_share, usable_cpus)):
        return []
    if ss.receive_p50_s and ss.mean_step_s and ss.receive_p50_s >= th.RECEIVE_BINDS_SHARE * ss.mean_step_s:
        return []  # the main process's receive holds the workers back, not latency
    if build_rate_unexplained(subject) is not None:
        return []  # the loader alone outpaces the step: the wait is not the build's, latency or not
    # More workers are the first remedy named: not where the dataset gives work to no more
    # workers than the subject has (a row with more had idle ones), nor where more workers
    # replay the same stream (their rows are not ranked: the stream must be split first).
    working = [r.settings.num_workers - (r.summary.idle_workers or 0) for r in ok
               if r.summary is not None and r.summary.idle_workers]
    if (working and min(working) <= subject.settings.num_workers) or replicated:
        return []
    ks = _s(knee)
    more = [r for r in ok if r.settings.num_workers > knee.settings.num_workers
            and replace(r.settings, num_workers=knee.settings.num_workers) == knee.settings
            and _s(r).samples_per_s <= (1.0 + tolerance) * ks.samples_per_s]
    return [LatencyBound(subject.settings, worker_cores=ss.worker_cores, threshold=th.LATENCY_WORKER_CORES,
                         usable_cpus=usable_cpus, most_workers=max(r.settings.num_workers for r in ok),
                         more_no_gain=max(more, key=lambda r: r.settings.num_workers).settings if more else None,
                         faster_past_cpus=None if past is None else past.settings,
                         faster_samples_per_s=None if past is None else _s(past).samples_per_s,
                         below_samples_per_s=None if past is None else ss.samples_per_s)]


def oversubscribed(knee: ConfigResult, usable_cpus: int | None) -> list[Finding]:
    """Oversubscribed for the knee when the preflight warned that it could oversubscribe (more
    workers or threads than usable CPUs) and its own measured CPU demand, the process tree's,
    reached them (wait.cpu_saturated with no other load): a config whose workers wait on I/O
    keeps only the preflight's warning, and other processes that fill the CPUs are other load
    (OtherLoad), not this config oversubscribing them (0.3 cores of the tree beside 1.7 of
    other processes on 2 CPUs read as oversubscribed before)."""
    ks = _s(knee)
    warning = next((w for w in knee.warnings if w.kind is WarningKind.OVERSUBSCRIBED), None)
    if warning is None or not cpu_saturated(ks.cpu_util_pct, 0.0, usable_cpus):
        return []
    return [Oversubscribed(knee.settings, warning.message, cpu_cores=(ks.cpu_util_pct or 0.0) / 100.0,
                           other_cores=ks.other_cores, usable_cpus=usable_cpus)]


def equal_cheaper(ranking: Ranking) -> list[Finding]:
    """EqualCheaper from the knee pass's `Ranking.peers` (knee.cheaper_peers): cheaper configs
    measured within the tolerance of the knee's throughput, not picked, named as equal."""
    knee = ranking.knee
    if knee is None or not ranking.peers:
        return []
    return [EqualCheaper(peers=list(ranking.peers), knee_samples_per_s=_s(knee).samples_per_s,
                         tolerance=ranking.tolerance)]


def leave_free_cpus(main_cores: float | None, slowdown: float | None, usable_cpus: int | None = None) -> int | None:
    """CPUs to leave free for the training process, whose step ran `slowdown` slower beside the
    loader while its main process used `main_cores`: the same work at the step's own pace,
    main_cores x (1 + slowdown), rounded up to whole CPUs, at least 1. None unmeasured, where
    that work is under LEAVE_FREE_MIN_CORES (the step waited to be scheduled, not for a core), or
    where it leaves no CPU of `usable_cpus` to the workers (on 1 CPU there is none to leave free).

    >>> leave_free_cpus(0.8, 0.23)
    1
    >>> leave_free_cpus(1.5, 0.5)
    3
    >>> leave_free_cpus(0.8, 0.23, usable_cpus=1) is None
    True
    >>> leave_free_cpus(0.06, 0.18) is None
    True
    """
    if main_cores is None:
        return None
    need = main_cores * (1.0 + max(0.0, slowdown or 0.0))
    if need < th.LEAVE_FREE_MIN_CORES:
        return None
    n = max(1, math.ceil(need - 1e-9))
    return None if usable_cpus is not None and n >= usable_cpus else n


def step_slowed_rows(results: Sequence[ConfigResult], usable_cpus: int | None,
                     named: Sequence[LoaderSettings] = (), pick: LoaderSettings | None = None) -> list[Finding]:
    """StepSlowed for the measured rows whose step ran over STEP_SLOWED slower beside the loader
    than alone (`Summary.step_slowed`), with their CPUs: the process tree's, the main process's and
    the other load's, whether that reached the usable CPUs, and the CPUs to leave free
    (`leave_free_cpus`). Rows in `named` (the knee, when its StepSlower finding names it) are
    left out; `pick` (the recommended config) is named where it is among the rows."""
    rows = []
    for r in results:
        s = r.summary
        if s is None or r.status != "ok" or not s.step_slowed or r.settings in named:
            continue
        alone = s.compute_p50_s / (1.0 + (s.step_slowdown or 0.0))
        main = None if s.main_cpu_util_pct is None else s.main_cpu_util_pct / 100.0
        rows.append(SlowedRow(
            r.settings, s.compute_p50_s, alone, s.step_slowdown or 0.0,
            cpu_cores=None if s.cpu_util_pct is None else s.cpu_util_pct / 100.0, main_cores=main,
            other_cores=s.other_cores, usable_cpus=usable_cpus,
            cpu_saturated=bool(cpu_saturated(s.cpu_util_pct, s.other_cores, usable_cpus)),
            leave_free_cpus=leave_free_cpus(main, s.step_slowdown, usable_cpus), repeats=s.repeats))
    listed = pick is not None and any(row.settings == pick for row in rows)
    return [StepSlowed(rows=rows, threshold=th.STEP_SLOWED, pick=pick if listed else None)] if rows else []


def window_step_slowed(row: ConfigResult, windows: Sequence[Trial], usable_cpus: int | None) -> SlowedRow | None:
    """The pick's longer window(s) (`windows`: results.Sustained's trials) where their step ran over
    STEP_SLOWED slower than alone while the row's own windows did not (`Summary.step_slowed`;
    StepSlowed or StepSlower names a row that did): the median compute per batch over the
    windows against the step alone (ceiling.step_alone_s; both in seconds), and their CPUs
    (medians over the windows: the process tree's, the main process's, other processes' cores)
    with the CPUs to leave free (`leave_free_cpus`). None where the step kept its pace, or no
    ceiling is known. The rule is the rows' own (`wait.slowed_past`).

    A row whose search window read the step at its own pace can still slow over the longer
    window: with the CPUs full (17 workers on 16 CPUs on the H200 case, the main process at 0.81
    cores) the step ran a median 63.5 ms against 55.0 alone over one window and at its pace in the
    search's: the training process is short of CPU some of the time."""
    s = row.summary
    if s is None or s.step_slowed or s.step_slowdown is None:
        return None
    # The step alone, as the ceilings pass set the row's slowdown against it (ceiling.step_alone_s).
    alone = s.compute_p50_s / (1.0 + s.step_slowdown)
    compute = [c for t in windows for c in t.compute_s]
    if not alone or not compute:
        return None
    p50 = statistics.median(compute)
    slowdown = p50 / alone - 1.0
    if not slowed_past(p50, slowdown):
        return None

    def median(values: list[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return statistics.median(got) if got else None

    cpu = median([t.cpu_util_pct for t in windows])
    main_pct = median([t.main_cpu_util_pct for t in windows])
    main = None if main_pct is None else main_pct / 100.0
    other = other_cores(median([t.other_cpu_util_pct for t in windows]),
                        median([t.steal_cpu_util_pct for t in windows]))
    return SlowedRow(row.settings, p50, alone, slowdown, cpu_cores=None if cpu is None else cpu / 100.0,
                     main_cores=main, other_cores=other, usable_cpus=usable_cpus,
                     cpu_saturated=bool(cpu_saturated(cpu, other, usable_cpus)),
                     leave_free_cpus=leave_free_cpus(main, slowdown, usable_cpus), repeats=len(windows))


def idle_workers(results: Sequence[ConfigResult]) -> list[Finding]:
    """IdleWorkers for the measured rows with workers that delivered no batch or under
    IDLE_WORKER_SHARE of an equal share in every trial that counted them, or none in the
    loader-alone probe after the window (`Summary.idle_workers`, `Summary.idle_probe_batches`):
    how many delivered none, how many too few, and what each delivered; for the probe's, what
    it read with the workers still working (`IdleRow.after_samples_per_s`)."""
    rows = []
    for r in results:
        s = r.summary
        if s is None or r.status != "ok" or not s.idle_workers or not s.worker_batches:
            continue
        if s.idle_probe_batches:
            probe = next((t for t in r.trials if t.loader_alone_worker_batches == s.idle_probe_batches), None)
            # What the probe read with the workers still working: its own reading where it was held
            # up to the row's rate as a bound, else its sustained rate.
            after = None if probe is None else (probe.loader_alone_probe_samples_per_s
                                                if probe.loader_alone_probe_samples_per_s is not None
                                                else probe.loader_alone_samples_per_s)
            rows.append(IdleRow(r.settings, r.settings.num_workers, no_batch=s.idle_workers, few=0,
                                worker_batches=list(s.idle_probe_batches), in_probe=True,
                                window_batches=list(s.worker_batches), after_samples_per_s=after))
            continue
        wb = s.worker_batches
        share = th.IDLE_WORKER_SHARE * sum(wb) / len(wb)
        none = sum(1 for b in wb if b == 0)
        few = sum(1 for b in wb if 0 < b < share)
        rows.append(IdleRow(r.settings, r.settings.num_workers, no_batch=none, few=few, worker_batches=list(wb)))
    return [IdleWorkers(rows=rows, share=th.IDLE_WORKER_SHARE)] if rows else []


def worker_build_s(r: ConfigResult) -> tuple[float, str] | None:
    """Seconds one worker of `r` takes to build a batch in the steady state, and how it is known:
    "sustained", num_workers x samples per batch / the sustained loader ceiling (NOTE [loader
    ceiling]); else "window", num_workers x the mean step of a loader-bound window (the workers
    deliver one batch a step: an upper bound on the build), or of an epoch-start-bound window's
    batches that started no epoch (not where the probe read under the row's rate: disturbed).
    None without workers or either."""
    s = r.summary
    w = r.settings.num_workers
    if s is None or w <= 0 or not s.samples_per_batch:
        return None
    if s.loader_ceiling_samples_per_s:
        return w * s.samples_per_batch * (s.world_size or 1) / s.loader_ceiling_samples_per_s, "sustained"
    if s.verdict is Verdict.LOADER_BOUND and s.mean_step_s and not s.idle_workers:
        return w * s.mean_step_s, "window"
    if (s.verdict is Verdict.EPOCH_START_BOUND and not s.idle_workers
            and s.loader_ceiling_bound is not CeilingBound.BELOW_STEP_RATE):
        steady = [x for t in r.trials for i, x in enumerate(t.step_s) if i not in t.epoch_start_batches]
        if steady:
            return w * statistics.fmean(steady), "window"
    return None


def epoch_iter(results: Sequence[ConfigResult]) -> list[Finding]:
    """EpochIter for the measured rows with persistent workers whose epoch starts (the waits of
    the window's epoch-start batches less the sampler's draw in them, mean over the trials)
    cost EPOCH_ITER_FACTOR or more steady builds of a batch (`worker_build_s`) and at least
    EPOCH_ITER_MIN_S: with nothing to start again, the time goes to the dataset's (or the
    sampler's) own `__iter__`."""
    rows = []
    for r in results:
        s = r.summary
        if s is None or r.status != "ok" or not (r.settings.num_workers > 0 and r.settings.persistent_workers):
            continue
        gaps = [max(0.0, t.data_wait_s[i] - (t.sampler_s[i] if i < len(t.sampler_s) else 0.0))
                for t in r.trials for i in t.epoch_start_batches if i < len(t.data_wait_s)]
        build = worker_build_s(r)
        if not gaps or build is None or build[0] <= 0:
            continue
        gap = statistics.fmean(gaps)
        if gap >= max(th.EPOCH_ITER_MIN_S, th.EPOCH_ITER_FACTOR * build[0]):
            iterable = any(t.samples_rule == "items" for t in r.trials)
            rows.append(EpochIterRow(r.settings, gap_s=gap, build_s=build[0], build_rule=build[1], epochs=len(gaps),
                                     iterable=iterable))
    return [EpochIter(rows=rows, factor=th.EPOCH_ITER_FACTOR)] if rows else []


def main_build_s(r: ConfigResult) -> float | None:
    """Seconds the main process takes to build a batch at 0 workers: samples per batch over the
    sustained loader ceiling, else the window's loader part of the wait per batch (with 0
    workers the step waits while the batch is built, nothing in flight). None otherwise."""
    s = r.summary
    if s is None or r.settings.num_workers != 0 or not s.samples_per_batch:
        return None
    if s.loader_ceiling_samples_per_s:
        return s.samples_per_batch * (s.world_size or 1) / s.loader_ceiling_samples_per_s
    part = s.wait_parts_s.get(WaitPart.LOADER)
    return part if part else None


def worker_slower(results: Sequence[ConfigResult]) -> list[Finding]:
    """WorkerSlower when the fewest-workers row of a series builds a batch per worker
    (`worker_build_s`) WORKER_BUILD_SLOWER times or more slower than the 0-worker row of the
    same settings builds it in the main process (`main_build_s`): work parallel in a process
    that never forked runs serially in a forked worker (a tokenizer's pool
    turned off after fork). The extra time per batch must also exceed WORKER_SLOWER_HANDOFF
    times the row's receive (`receive_p50_s`) and WORKER_SLOWER_MIN_S: a worker hands its batch
    over, which the main process never does, and for samples of microseconds that hand-off is
    the whole difference. The workers of that row must also have been busy on a CPU for
    WORKER_SLOWER_BUSY of their time or more (`Summary.worker_cores`; no reading: not required): work
    that runs slower keeps a worker busy, a hand-off that blocks it does not. One finding, for
    the largest factor."""
    found: list[tuple[float, WorkerSlower]] = []
    ok = [r for r in results if r.status == "ok" and r.summary is not None]
    for zero in ok:
        main = main_build_s(zero)
        if zero.settings.num_workers != 0 or not main:
            continue
        peers = [r for r in ok if r.settings.num_workers > 0 and r.cache == zero.cache
                 and without_workers(r.settings) == without_workers(zero.settings)]
        if not peers:
            continue
        fewest = min(peers, key=lambda r: (r.settings.num_workers, r.settings.structural_key()))
        build = worker_build_s(fewest)
        handoff = _s(fewest).receive_p50_s or 0.0
        busy = _s(fewest).worker_cores
        if (build is not None and build[0] >= th.WORKER_BUILD_SLOWER * main
                and build[0] - main >= max(th.WORKER_SLOWER_MIN_S, th.WORKER_SLOWER_HANDOFF * handoff)
                and (busy is None or busy >= th.WORKER_SLOWER_BUSY)):
            found.append((build[0] / main, WorkerSlower(fewest.settings, worker_build_s=build[0], build_rule=build[1],
                                                        main=zero.settings, main_build_s=main,
                                                        factor=th.WORKER_BUILD_SLOWER)))
    return [max(found, key=lambda x: x[0])[1]] if found else []


def without_workers(s: LoaderSettings) -> LoaderSettings:
    """`s` at 0 workers, every setting that needs workers at its idle value: the 0-worker config
    of its series."""
    return replace(s, num_workers=0, **{a.name: a.idle for a in GRID_AXES if a.workers_only})


def worker_cpu_ms_per_sample(r: ConfigResult) -> float | None:
    """The workers' CPU time per sample of a measured config, in ms: (process tree's CPU - the
    main process's) / samples/s, medians over repeats. None without workers or readings, and
    for a distributed job (its main-process reading is one rank's)."""
    s = r.summary
    if (s is None or r.settings.num_workers == 0 or (s.world_size or 1) > 1 or s.cpu_util_pct is None
            or s.main_cpu_util_pct is None or s.samples_per_s <= 0):
        return None
    return (s.cpu_util_pct - s.main_cpu_util_pct) / 100.0 / s.samples_per_s * 1e3


def cores_slower(subject: ConfigResult, ok: Sequence[ConfigResult], usable_cpus: int | None) -> CoresSlower | None:
    """Configs with more workers than `subject` measured no faster (under 1 + MATCHED times its
    samples/s), with the CPUs not saturated (wait.cpu_saturated: a saturated row is CPU-bound,
    not slower per core), while their workers spent at least CORES_SLOWER times the CPU per
    sample of the loader-bound configs with at most `subject`'s workers (same cache state): the
    CPUs delivered less per core as workers were added (other load, logical CPUs sharing
    physical cores, memory bandwidth), which more workers do not cure. A row whose step slowed
    beside the loader, or with idle workers, is no evidence of it. Data: the cheapest
    fewer-worker row (`w_lo`, `lo_ms`), the dearest more-worker row (`w_hi`, `hi_ms`), the cores
    the tree used there and what other processes took; None otherwise."""
    ss = _s(subject)

    def bound(r: ConfigResult) -> bool:
        return r.summary is not None and r.summary.verdict is Verdict.LOADER_BOUND and r.cache == subject.cache

    low = [(ms, r) for r in ok if bound(r) and r.settings.num_workers <= subject.settings.num_workers
           and (ms := worker_cpu_ms_per_sample(r)) is not None]
    high = [(ms, r) for r in ok if bound(r) and r.settings.num_workers > subject.settings.num_workers
            and _s(r).samples_per_s < (1.0 + th.MATCHED) * ss.samples_per_s and not _s(r).step_slowed
            and not _s(r).idle_workers  # no faster for want of work, not of cores
            and not cpu_saturated(_s(r).cpu_util_pct, _s(r).other_cores, usable_cpus)
            and (ms := worker_cpu_ms_per_sample(r)) is not None]
    if not low or not high:
        return None
    lo_ms, lo = min(low, key=lambda x: x[0])
    hi_ms, hi = max(high, key=lambda x: x[0])
    if hi_ms < th.CORES_SLOWER * lo_ms:
        return None
    hs = _s(hi)
    return CoresSlower(lo.settings.num_workers, lo_ms, hi.settings.num_workers, hi_ms, hi.settings, hs.samples_per_s,
                       cpu_cores=None if hs.cpu_util_pct is None else hs.cpu_util_pct / 100.0,
                       other_cores=hs.other_cores, other_named=_other_named(hs.other_cores), usable_cpus=usable_cpus)


def _device_binds(subject: ConfigResult, ok: Sequence[ConfigResult]) -> DeviceBinds | None:
    """The storage device's rate binds `subject`: it and another measured config of the same
    cache state with a different worker count were both served from the device
    (model.ServedFrom.STORAGE) at MB/s within DEVICE_FLAT of each other: more workers read no
    faster. Data: the MB/s range and the worker counts; None otherwise."""
    def mb(r: ConfigResult) -> float | None:
        s = r.summary
        if s is None or s.served_from is not ServedFrom.STORAGE or not s.storage_mb_per_s:
            return None
        return float(s.storage_mb_per_s)

    own = mb(subject)
    if own is None:
        return None
    alike = [r for r in ok if r.cache == subject.cache and r.settings.num_workers != subject.settings.num_workers
             and (x := mb(r)) is not None and abs(x / own - 1.0) <= th.DEVICE_FLAT]
    if not alike:
        return None
    rates = [own, *(mb(r) or own for r in alike)]
    workers = sorted({subject.settings.num_workers, *(r.settings.num_workers for r in alike)})
    return DeviceBinds((min(rates), max(rates)), workers)


def transfer_mb_per_s(result: ConfigResult) -> float | None:
    """Bytes of batches moved from workers to the main process per second, in MB/s."""
    s = result.summary
    if s is None or not s.batch_bytes or result.settings.num_workers == 0 or not s.samples_per_batch:
        return None
    return s.batch_bytes * s.samples_per_s / s.samples_per_batch / 1e6


def plateau(ok: Sequence[ConfigResult], knee: ConfigResult, best: ConfigResult, usable_cpus: int | None) -> list[Finding]:
    """Why the curve flattens past the knee, with the evidence: the step itself (StepBinds, its
    share of the compute ceiling), the step slowed beside the loader (StepSlower: mean compute
    vs the step alone, CPU saturation; only where that slowdown explains at least half of the
    knee's shortfall from the ceiling, STEP_SLOWER_EXPLAINS), the worker->main transfer (Transfer, MB/s), and what
    configs past the knee cost in CPU for what they gain (MoreNotBetter; never from a row whose
    step slowed beside the loader)."""
    out: list[Finding] = []
    ks, bs = _s(knee), _s(best)
    ceiling = ks.compute_ceiling_samples_per_s
    fed = ks.verdict in (Verdict.COMPUTE_BOUND, Verdict.STEP_SLOWED, Verdict.RECEIVE_FLOOR)
    if fed and ceiling:
        share = ks.samples_per_s / ceiling
        # The ceiling is the whole job's in a distributed sweep: one rank's step moves a batch.
        alone_s = (ks.samples_per_batch or knee.settings.batch_size) * (ks.world_size or 1) / ceiling
        # Mean, not median, compute time: a tail of slow steps (launches delayed by CPU
        # contention, an all-reduce waiting for a late rank) costs throughput too.
        compute_mean_s = (ks.mean_step_s or 0.0) * (1.0 - ks.stall_fraction)
        if (share < th.STEP_SLOWER_SHARE and compute_mean_s > th.STEP_SLOWER_COMPUTE * alone_s
                and compute_mean_s / alone_s - 1.0 >= th.STEP_SLOWER_EXPLAINS * (1.0 / share - 1.0)):
            main = None if ks.main_cpu_util_pct is None else ks.main_cpu_util_pct / 100.0
            out.append(StepSlower(
                knee.settings, share=share, ceiling=ceiling, compute_mean_s=compute_mean_s,
                compute_p50_s=ks.compute_p50_s, alone_s=alone_s,
                cpu_saturated=bool(cpu_saturated(ks.cpu_util_pct, ks.other_cores, usable_cpus)),
                cpu_cores=None if ks.cpu_util_pct is None else ks.cpu_util_pct / 100.0, usable_cpus=usable_cpus,
                main_cores=main, leave_free_cpus=leave_free_cpus(main, compute_mean_s / alone_s - 1.0, usable_cpus)))
        elif ks.verdict is Verdict.COMPUTE_BOUND:
            # (A knee at the receive floor is explained by its own finding: the hand-off binds.)
            out.append(StepBinds(knee.settings, share=share, ceiling=ceiling))
    elif not fed and not cpu_saturated(bs.cpu_util_pct, bs.other_cores, usable_cpus):
        mbps = transfer_mb_per_s(best)
        if (mbps is not None and mbps >= th.TRANSFER_MIN_MB_PER_S and bs.receive_p50_s
                and bs.receive_p50_s >= max(th.TRANSFER_MIN_RECEIVE_S, th.TRANSFER_RECEIVE_OF_WAIT * bs.data_wait_mean_s)):
            trial = best.trials[0] if best.trials else None
            tensors = None if trial is None else trial.tensor_leaves
            out.append(Transfer(best.settings, mb_per_s=mbps, receive_s=bs.receive_p50_s, batch_bytes=bs.batch_bytes,
                                tensor_leaves=tensors, numpy_leaves=None if trial is None else trial.numpy_leaves,
                                many_tensors=(tensors or 0) >= th.SMALL_TENSORS))
    # A row whose step slowed beside the loader says nothing of what more workers give.
    costly = [r for r in ok if r is not knee and r.settings.num_workers > knee.settings.num_workers
              and r.summary is not None and r.summary.cpu_util_pct is not None and ks.cpu_util_pct is not None
              and not r.summary.step_slowed]
    if costly:
        top = max(costly, key=lambda r: _s(r).cpu_util_pct or 0.0)
        ts = _s(top)
        assert ks.cpu_util_pct is not None and ts.cpu_util_pct is not None
        extra = (ts.cpu_util_pct - ks.cpu_util_pct) / 100.0
        if extra > th.MORE_NOT_BETTER_CORES:
            out.append(MoreNotBetter(top.settings, extra_cores=extra, gain=ts.samples_per_s / ks.samples_per_s - 1.0))
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
    s = _s(result)
    if result.settings.num_workers > 0 and not result.settings.persistent_workers:
        return s.first_batch_s
    return min(s.first_batch_s, first_batch_sampler_s(result))


def epoch_samples_per_s(result: ConfigResult, epoch_batches: int) -> float:
    """Predicted samples/s over a whole epoch: samples per epoch / (epoch_start_s + epoch_batches
    x mean step). `epoch_batches` is per rank in a distributed sweep; the result is summed over
    ranks."""
    s = _s(result)
    epoch_s = epoch_start_s(result) + epoch_batches * (s.mean_step_s or 0.0)
    samples = epoch_batches * (s.samples_per_batch or result.settings.batch_size) * (s.world_size or 1)
    return samples / epoch_s if epoch_s > 0 else 0.0


def _window_spans_epochs(r: ConfigResult) -> bool:
    return any(t.epoch_start_batches for t in r.trials)


def startup(ok: Sequence[ConfigResult], knee: ConfigResult, epoch_batches: int, tolerance: float,
            grid: dict[str, Any] | None = None) -> list[Finding]:
    """Worker start-up against epochs of `epoch_batches` batches.

    Startup when the knee (workers, not persistent) would spend over STARTUP_SHARE of an epoch
    starting its workers and its measured window did not already span epochs (then the start-up
    is in its measured throughput and in RemainingWait). Worker start-up is the first batch less
    what the sampler spent before it (an epoch's index list, drawn at every epoch start with
    persistent workers too); the share is a prediction. The persistent variant is quoted when
    measured and advised only when nothing it measured says otherwise: its throughput not below
    the knee's by more than the tolerance and, where both windows spanned epochs, its epoch-start
    gaps under PERSISTENT_GAP_OF_KNEE of the knee's. EpochFaster when, counting each config's
    epoch-start cost in every epoch (`epoch_start_s`), another config is predicted faster per
    epoch than the knee by more than the tolerance. An unmeasured persistent variant that the
    grid (`grid`) lists is `in_grid`: not reached, no flag to add.
    """
    out: list[Finding] = []
    ks = _s(knee)
    sampler_s = first_batch_sampler_s(knee)
    start_s = max(0.0, ks.first_batch_s - sampler_s)
    epoch_s = ks.first_batch_s + epoch_batches * (ks.mean_step_s or 0.0)
    share = start_s / epoch_s if epoch_s > 0 else 0.0
    advised = False
    if (knee.settings.num_workers > 0 and not knee.settings.persistent_workers and share > th.STARTUP_SHARE
            and not _window_spans_epochs(knee)):
        alt = _variant(knee, ok, persistent_workers=True)
        f = Startup(knee.settings, first_batch_s=ks.first_batch_s, start_s=start_s, sampler_s=sampler_s, share=share,
                    epoch_batches=epoch_batches, sampler_named=sampler_s >= th.SAMPLER_NAMED_S,
                    measured=alt is not None, in_grid=alt is None and in_grid(grid, "persistent_workers"))
        gaps = [g for t in knee.trials for g in t.epoch_gap_s]
        if alt is not None and alt.summary is not None:
            alt_gaps = [g for t in alt.trials for g in t.epoch_gap_s]
            slower = alt.summary.samples_per_s < ks.samples_per_s * (1.0 - tolerance)
            f.alt, f.samples_per_s, f.knee_samples_per_s, f.slower = (
                alt.settings, alt.summary.samples_per_s, ks.samples_per_s, slower)
            f.gap_s, f.persistent_gap_s = _mean(gaps), _mean(alt_gaps)
            if gaps and alt_gaps:
                advised = _mean(alt_gaps) < th.PERSISTENT_GAP_OF_KNEE * _mean(gaps)  # type: ignore[operator]
            else:
                advised = True
            advised = advised and not slower
        else:
            advised = True
        f.advised = advised
        out.append(f)
    if _window_spans_epochs(knee):
        return out
    by_epoch = max(ok, key=lambda r: epoch_samples_per_s(r, epoch_batches))
    best_epoch = epoch_samples_per_s(by_epoch, epoch_batches)
    # With persistent workers advised, the knee pays start-up once: its epochs pay only the
    # sampler's draw.
    knee_epoch = (epoch_samples_per_s(replace_persistent(knee), epoch_batches) if advised
                  else epoch_samples_per_s(knee, epoch_batches))
    if by_epoch is not knee and knee_epoch < best_epoch * (1 - tolerance):
        out.append(EpochFaster(by_epoch.settings, epoch_samples_per_s=best_epoch, epoch_batches=epoch_batches))
    return out


def replace_persistent(result: ConfigResult) -> ConfigResult:
    """`result` as if its workers were persistent (same trials and summary): for predictions."""
    return dataclasses.replace(result, settings=replace(result.settings, persistent_workers=True))


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def memory_per_worker(results: Sequence[ConfigResult]) -> list[Finding]:
    """MemoryPerWorker for a config whose PSS per worker is at least MEMORY_PER_WORKER_FACTOR
    times (and MEMORY_PER_WORKER_MIN_BYTES more than) that of another measured config with the
    same workers and batch size that differs from it in one setting only: that setting (a start
    method that starts every worker as a fresh interpreter, a worker-side cache) multiplies
    memory per worker. Per worker = (PSS - PSS of the 0-worker config, when measured) / workers.
    The finding must agree with the PSS column: the rows' PSS must differ by MEMORY_TOTAL_FACTOR
    too, and persistent_workers is never the setting (the same workers, sampled at another
    moment of their life: a non-persistent row's may be young or gone when PSS is read). The
    finding quotes both rows' PSS."""
    ok = [r for r in results if r.status == "ok" and r.summary is not None and r.summary.memory_pss_bytes]
    base = {r.settings.batch_size: _s(r).memory_pss_bytes for r in ok if r.settings.num_workers == 0}
    out: list[Finding] = []

    def per_worker(r: ConfigResult) -> float:
        pss = float(_s(r).memory_pss_bytes or 0)
        return max(0.0, pss - float(base.get(r.settings.batch_size) or 0)) / r.settings.num_workers

    for r in ok:
        if r.settings.num_workers == 0:
            continue
        # The reference differs in one setting only, so the difference is that setting's.
        peers = [p for p in ok if p is not r and p.settings.num_workers == r.settings.num_workers
                 and p.settings.batch_size == r.settings.batch_size
                 and len(d := _differs(r.settings, p.settings)) == 1 and d[0].axis != "persistent_workers"]
        if not peers:
            continue
        low = min(peers, key=per_worker)
        mine, theirs = per_worker(r), per_worker(low)
        pss, ref_pss = float(_s(r).memory_pss_bytes or 0), float(_s(low).memory_pss_bytes or 0)
        if (mine >= th.MEMORY_PER_WORKER_FACTOR * theirs and mine - theirs >= th.MEMORY_PER_WORKER_MIN_BYTES
                and pss >= th.MEMORY_TOTAL_FACTOR * ref_pss):
            out.append(MemoryPerWorker(r.settings, mib_per_worker=mine / 2**20, ref=low.settings,
                                       ref_mib_per_worker=theirs / 2**20, differs=_differs(r.settings, low.settings),
                                       pss_mib=pss / 2**20, ref_pss_mib=ref_pss / 2**20))
    return out


def partial_batches(results: Sequence[ConfigResult], dataset: dict[str, Any] | None) -> list[Finding]:
    """PartialBatches per batch size whose measured configs' batches held under PARTIAL of
    `batch_size` samples on average (the median config's count): the epoch (a sampler with
    fewer indices, a short IterableDataset, or its stream split across workers) ends before a
    batch fills, so throughput and the ceiling describe smaller batches than the DataLoader line
    names; or, where the loop counted an epoch of ceil(samples / batch_size) batches whose mean
    is the average (within 2%), only each epoch's last batch is short (`last_only`), as in
    training. Not for a batch sampler (which sets the batches) or --samples-per-batch."""
    d = dataset or {}
    if d.get("sampler_kind") == "batch_sampler" or d.get("samples_per_batch"):
        return []
    out: list[Finding] = []
    for bs in sorted({r.settings.batch_size for r in results}):
        rows = sorted((r for r in results if r.settings.batch_size == bs and r.status == "ok" and r.trials
                       and r.summary is not None), key=lambda r: _s(r).samples_per_batch or bs)
        held = [_s(r).samples_per_batch or bs for r in rows]
        if held and held[len(held) // 2] < th.PARTIAL * bs:
            mid = held[len(held) // 2]
            epoch = next(((t.epoch_samples, t.epoch_batches) for t in rows[len(held) // 2].trials
                          if t.epoch_samples and t.epoch_batches), (None, None))
            samples, batches = epoch
            # Every batch full but each epoch's last: the average is the epoch's own, as in training.
            last_only = bool(samples and batches and batches == -(-samples // bs)
                             and abs(samples / batches - mid) <= 0.02 * mid)
            out.append(PartialBatches(bs, samples_per_batch=mid, min=held[0], max=held[-1], epoch_samples=samples,
                                      epoch_batches=batches, last_only=last_only,
                                      last_batch=samples - (batches - 1) * bs if last_only and samples and batches
                                      else None))
    return out


def served_from_cache(results: Sequence[ConfigResult]) -> list[Finding]:
    """ServedFromCache when measured rows read from the device under a tenth of the bytes their
    samples needed (storage.read_summary, NOTE [which cache served it]): their throughput is a
    cache's, not the storage's. Data: the rows (config, cache state, bytes read from the device
    and through read(), bytes needed and how they were counted, the share of the files in the
    page cache after the window, which cache), the cache states whose rows were served unalike,
    and, when every row was so served, what would measure the device instead (`fix`)."""
    rows: list[ServedRow] = []
    measured = [r for r in results if r.status == "ok" and r.summary is not None and r.trials]
    # Rows of one cache state served unalike (some from the device, some part or all from a
    # cache: a page cache warmed by the configs before, or repeats that filled a dataset's own
    # cache): ranking them compares the device with a cache.
    by_state: dict[str, set[ServedFrom]] = {}
    for r in measured:
        served = _s(r).served_from
        if served not in (None, ServedFrom.UNKNOWN):
            by_state.setdefault(r.cache, set()).add(served)  # type: ignore[arg-type]
    uneven = {state for state, kinds in by_state.items() if ServedFrom.STORAGE in kinds and len(kinds) > 1}
    for r in measured:
        served = _s(r).served_from
        if served is None or not (served.is_cache or (served is ServedFrom.MIXED and r.cache in uneven)):
            continue
        t = next((t for t in r.trials if t.served_from == served.value), r.trials[0])
        row = ServedRow(r.settings, r.cache, served, read_bytes=t.storage_read_bytes, read_chars=t.storage_read_chars,
                        needed_bytes=t.needed_bytes, needed_rule=t.needed_rule,
                        resident_fraction=t.data_resident_fraction)
        if t.served_after_first_epoch and len(t.epoch_reads) >= 2:
            later = t.epoch_reads[1:]
            row = replace(row, later_epochs=True, first_epoch_read_bytes=t.epoch_reads[0][0],
                          later_epoch_read_bytes=max(e[0] or 0 for e in later),
                          later_epoch_read_chars=None if any(e[1] is None for e in later)
                          else max(e[1] or 0 for e in later))
        rows.append(row)
    if not rows:
        return []
    every = len(rows) == len(measured)
    fix = None
    if every:
        kinds = {row.served_from for row in rows}
        if kinds & {ServedFrom.DATASET_CACHE, ServedFrom.CACHE}:
            fix = CacheFix.DATASET_CACHE
        elif kinds == {ServedFrom.MEMORY_FS}:
            fix = CacheFix.MEMORY_FS
        elif all(row.cache == "cold" for row in rows):
            fix = CacheFix.REREAD
        else:
            fix = CacheFix.COLD
    # Rows measured cold yet served unalike: the window read again what it had just loaded (a
    # dataset shorter than the window): --cache cold was given, and a longer dataset or fewer
    # batches is what serves them alike.
    uneven_fix = (None if not uneven else CacheFix.REREAD if all(state == "cold" for state in uneven)
                  else CacheFix.COLD)
    return [ServedFromCache(
        rows=rows, all_rows=every, uneven=sorted(uneven), fix=fix, uneven_fix=uneven_fix,
        storage_rows=sorted((r.settings for r in measured if r.cache in uneven and _s(r).served_from
                             is ServedFrom.STORAGE), key=lambda s: s.key()),
    )]


def noisy(results: Sequence[ConfigResult], knee: Knee | None = None) -> list[Finding]:
    """Noisy for every config whose figure is uncertain by more than half NOISY_SPREAD (its
    repeats spread past NOISY_SPREAD of their median, or its windows vary as much:
    `Summary.uncertainty`), but the knee when its own finding (`knee`) carries an uncertainty
    past half its tolerance (said once, beside the recommendation)."""
    said = (knee.settings if knee is not None and knee.uncertainty > knee.tolerance / 2.0 and knee.tolerance > 0
            else None)
    return [Noisy(r.settings, r.cache, spread=_s(r).spread, repeats=_s(r).repeats, threshold=th.NOISY_SPREAD,
                  window_se=_s(r).window_se, uncertainty=_s(r).uncertainty)
            for r in results if r.summary is not None and r.summary.noisy and r.settings != said]


def _differs(a: LoaderSettings, b: LoaderSettings) -> list[Difference]:
    """The settings on which `a` and `b` differ: the grid axes that mean something on both sides
    (an axis that needs workers is left out when either has none), in GRID_AXES order, then the
    loader arguments (`--loader-arg`, by name) in `a`'s order."""
    no_workers = a.num_workers == 0 or b.num_workers == 0
    out = [Difference(ax.name, getattr(a, ax.name), getattr(b, ax.name)) for ax in GRID_AXES
           if getattr(a, ax.name) != getattr(b, ax.name) and not (ax.workers_only and no_workers)]
    theirs = dict(b.loader_args)
    return out + [Difference(k, v, theirs.get(k)) for k, v in a.loader_args if theirs.get(k) != v]


def headroom(result: ConfigResult, which: Baseline = Baseline.FIRST) -> Headroom | None:
    """How much faster the loop could run from `result`'s settings (the user's current ones,
    `which` says whether they were given).

    Two bounds: removing all data-wait gives at most 1 / (1 - stall fraction); the compute
    ceiling (the step fed a batch already on the device) gives ceiling / throughput. The smaller
    one binds. None for a config without a summary or throughput.
    """
    s = result.summary
    if s is None or s.samples_per_s <= 0:
        return None
    ceiling = s.compute_ceiling_samples_per_s
    from_stall = 1.0 / max(1e-9, 1.0 - s.stall_fraction)
    to_ceiling = None if not ceiling else ceiling / s.samples_per_s
    binds = HeadroomBinds.STALL if to_ceiling is None or from_stall <= to_ceiling else HeadroomBinds.COMPUTE_CEILING
    return Headroom(result.settings, which, s.samples_per_s, s.stall_fraction, from_stall, to_ceiling, binds)


def _probe_contradicts_window(r: ConfigResult) -> bool:
    """A config with workers whose window was loader-bound while its loader-alone probe says the
    loader outpaces the step by more than MATCHED: the probe read something the loop never saw
    (a backlog it did not drain), so it does not stand for the loader's ceiling."""
    s = _s(r)
    return bool(r.settings.num_workers > 0 and s.verdict is Verdict.LOADER_BOUND
                and s.compute_ceiling_samples_per_s and s.loader_ceiling_samples_per_s
                and s.loader_ceiling_samples_per_s > (1.0 + th.MATCHED) * s.compute_ceiling_samples_per_s)


def loader_ceiling(ranked: Sequence[ConfigResult]) -> LoaderCeiling | None:
    """The loader ceiling (NOTE [loader ceiling] in the measuring loop) over the `ranked`
    configs, set against the compute ceiling; None when no ranked config was probed. With bounds
    only (`bound_only`), the highest bound, and COMPUTE only when the loop itself reached the
    compute ceiling (within MATCHED / 2).

    Only sustained rates are compared: a config whose probe gave a bound (the loader alone
    delivers at least its figure: `Summary.loader_ceiling_bound_samples_per_s`) is counted in
    `bounded`, never taken for the rate. A sustained rate that contradicts its own window
    (`_probe_contradicts_window`) is left out. The loader alone delivers at least what the loop
    measured with the step, so when the best sustained rate reads lower than the best measured
    throughput, that throughput is the ceiling's lower bound (`lower_bound`).
    `binds`: LOADER, COMPUTE, or MATCHED (within MATCHED of each other: no margin), from the
    sustained rate; with a lower bound, only COMPUTE, when the bound reaches the compute ceiling
    (within MATCHED / 2), else None: a bound says nothing of how much more the loader delivers.
    """
    probed = [r for r in ranked if _s(r).loader_ceiling_samples_per_s and not _probe_contradicts_window(r)]
    bounds = [r for r in ranked if _s(r).loader_ceiling_bound_samples_per_s]
    if not probed and not bounds:
        return None
    if not probed:
        return _bounds_only(ranked, bounds)
    top = max(probed, key=lambda r: _s(r).loader_ceiling_samples_per_s or 0.0)
    lc = _s(top).loader_ceiling_samples_per_s or 0.0
    best = max(ranked, key=lambda r: _s(r).samples_per_s)
    measured = _s(best).samples_per_s
    bounded = len(bounds)
    out = LoaderCeiling(lc, top.settings, len(probed), len(ranked), matched_within=th.MATCHED, bounded=bounded)
    if lc < measured:
        out = replace(out, lower_bound=MeasuredRate(best.settings, measured))
    cc = _s(top).compute_ceiling_samples_per_s
    if cc:
        binds: CeilingBinds | None
        if out.lower_bound is not None:
            # Only a lower bound (the loop's own throughput): the loader may be much faster.
            binds = CeilingBinds.COMPUTE if measured >= (1.0 - th.MATCHED / 2) * cc else None
        elif abs(lc - cc) <= th.MATCHED * cc:
            binds = CeilingBinds.MATCHED
        else:
            binds = CeilingBinds.LOADER if lc < cc else CeilingBinds.COMPUTE
        out = replace(out, compute_ceiling=cc, binds=binds)
        if binds is CeilingBinds.COMPUTE and _s(best).verdict is Verdict.EPOCH_START_BOUND:
            out = replace(out, start_bound=MeasuredRate(best.settings, measured))
        if binds in (CeilingBinds.COMPUTE, CeilingBinds.MATCHED):
            out = replace(out, receive_bound=receive_bound(best, cc))
    return out


def receive_bound(row: ConfigResult, compute_ceiling: float) -> ReceiveBound | None:
    """`ReceiveBound` of a receive-floor row with workers (`Verdict.RECEIVE_FLOOR`, its receive
    floor `Summary.receive_p50_s` known) against `compute_ceiling` (samples/s): per sample, the
    step alone's 1 / ceiling plus the receive over the row's samples per batch (its samples/s x
    its mean step, `Summary.mean_step_s`), taken in turn by the main process, and the receive
    part of its own wait where its window's takes ran slower than that floor (RECEIVE_CONTENDED);
    None otherwise.

    On 2 CPUs, 8 samples of 3 ms of sleep returned as numpy arrays, a 10-ms step (800 samples/s)
    and a receive of 3.2 ms a batch: 1 / (1/800 + 0.0032/8) = 606 samples/s; the row read 566,
    where the two ceilings alone (1,207 and 800) said the step binds."""
    s = _s(row)
    if (s.verdict is not Verdict.RECEIVE_FLOOR or row.settings.num_workers == 0 or not s.receive_p50_s
            or not s.mean_step_s or s.samples_per_s <= 0 or compute_ceiling <= 0):
        return None
    per_batch = s.samples_per_s * s.mean_step_s
    bound = 1.0 / (1.0 / compute_ceiling + s.receive_p50_s / per_batch)
    in_window = s.wait_parts_s.get(WaitPart.RECEIVE, 0.0)
    return ReceiveBound(row.settings, s.samples_per_s, s.receive_p50_s, bound,
                        window_receive_s=in_window if in_window * th.RECEIVE_CONTENDED >= s.receive_p50_s else None)


def _bounds_only(ranked: Sequence[ConfigResult], bounds: Sequence[ConfigResult]) -> LoaderCeiling:
    """The loader ceiling where every probe gave a bound (`loader_ceiling`): the highest bound,
    which the loader alone delivers at least; which ceiling binds only when the fastest row ran
    at the compute ceiling (then the step binds whatever more the loader delivers)."""
    top = max(bounds, key=lambda r: _s(r).loader_ceiling_bound_samples_per_s or 0.0)
    bound = _s(top).loader_ceiling_bound_samples_per_s or 0.0
    best = max(ranked, key=lambda r: _s(r).samples_per_s)
    cc = _s(best).compute_ceiling_samples_per_s
    out = LoaderCeiling(bound, top.settings, 0, len(ranked), matched_within=th.MATCHED, bounded=len(bounds),
                        bound_only=True)
    if cc:
        binds = CeilingBinds.COMPUTE if _s(best).samples_per_s >= (1.0 - th.MATCHED / 2) * cc else None
        out = replace(out, compute_ceiling=cc, binds=binds)
    return out
# -- The stage profile's findings: a long per-sample tail, a large fixed cost per fetch ---------


def _same_but_in_order(a: LoaderSettings, b: LoaderSettings) -> bool:
    return replace(a, in_order=True) == replace(b, in_order=True)


def long_tail(ok: Sequence[ConfigResult], knee: ConfigResult | None, profile: StageProfile | None,
              trial: InOrderTrial | None, tolerance: float) -> list[Finding]:
    """LongTail when the stage profile of the pick found a long per-sample tail (BuildTail.long,
    NOTE [the tail of a sample's build time] in analysis/stages.py): with the fastest measured
    `in_order=False` row of the knee's other settings against the fastest in-order one, `faster`
    beyond `tolerance`, and `recommended` when the knee has it (the ranking picks it only where
    it measured faster, or as fast and cheaper: NOTE [cost order]). `trial`: what the sweep
    recorded about trying it (None: not recorded; IN_GRID is inferred from a measured row)."""
    if profile is None or profile.tail is None or not profile.tail.long or knee is None:
        return []
    same = [r for r in ok if _same_but_in_order(r.settings, knee.settings)]
    off = [r for r in same if not r.settings.in_order]
    on = [r for r in same if r.settings.in_order]
    f = LongTail(knee.settings, profile.tail, trial=trial, recommended=not knee.settings.in_order)
    if off and on:
        best_off = max(off, key=lambda r: _s(r).samples_per_s)
        best_on = max(on, key=lambda r: _s(r).samples_per_s)
        f.off, f.off_samples_per_s, f.on_samples_per_s = best_off.settings, _s(best_off).samples_per_s, _s(best_on).samples_per_s
        f.gain = f.off_samples_per_s / f.on_samples_per_s - 1.0 if f.on_samples_per_s > 0 else None
        f.faster = f.gain is not None and f.gain > tolerance
        if f.trial is None:
            f.trial = InOrderTrial.IN_GRID
    return [f]


def batched_fetch(profile: StageProfile | None, knee: ConfigResult | None) -> list[Finding]:
    """BatchedFetch when the stage profile's batched fetch of a dataset without `__getitems__`
    (model.BatchedFetchTiming: one call for several items against one call per item) shows a
    fixed cost per call of at least BATCHED_FETCH_FIXED_SHARE of the profiled build time per
    sample, and at least STAGE_SHARE_THAT_COUNTS of the sample's whole time in the table (a
    build of almost nothing beside a slow receive gains nothing that counts): paid once per batch
    of the knee's batch size, the build time per sample becomes T - f (1 - 1/B), one worker T /
    that faster (a prediction)."""
    if profile is None or profile.batched_fetch is None or knee is None:
        return []
    t = profile.batched_fetch
    build = sum(max(0.0, (r.ms_per_sample or 0.0) - (r.queued_ms_per_sample or 0.0)) for r in profile.stages
                if StageKind(r.kind).builds and r.ms_per_sample is not None)
    if (build <= 0 or t.fixed_ms / build < th.BATCHED_FETCH_FIXED_SHARE
            or t.fixed_ms < th.STAGE_SHARE_THAT_COUNTS * profile.sample_ms()):
        return []
    batch = knee.settings.batch_size
    new = max(build - t.fixed_ms * (1.0 - 1.0 / batch), 1e-9)
    return [BatchedFetch(knee.settings, t, t.fixed_ms, t.per_item_ms, t.fixed_ms / build,
                         th.BATCHED_FETCH_FIXED_SHARE, build, batch, new, build / new)]
