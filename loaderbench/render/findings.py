"""The recommendation's findings as sentences: the only place they are worded (analysis/advice.py
draws them as data).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from loaderbench.conclusions import (
    AlsoFastest,
    BatchedFetch,
    BestWithinTolerance,
    DisturbedRows,
    EpochFaster,
    EpochIter,
    EqualCheaper,
    Finding,
    IdleWorkers,
    InOrderTrial,
    Knee,
    LatencyBound,
    ListedFirst,
    LoaderAlone,
    LongTail,
    LowestStall,
    MoreNotBetter,
    NoneMeasured,
    NotCleared,
    NotClearedCause,
    OtherLoad,
    Oversubscribed,
    RemainingWait,
    Remedy,
    RemedyKind,
    SlowedRow,
    Startup,
    StepBinds,
    StepSlowed,
    StepSlower,
    Threads,
    Transfer,
    WorkerSlower,
)
from loaderbench.model import (
    AXES_BY_NAME,
    GRID_AXES,
    LoaderSettings,
    SustainedSettled,
    WaitPart,
    loader_arg_text,
)

Name = Callable[[LoaderSettings], str]
"""How a config is named in a sentence (render/sweep.py names it as the table's columns do)."""


def describe(settings: LoaderSettings) -> str:
    """A config named by every setting that means something for it, e.g. "4 workers, pin_memory
    off, CUDA prefetcher off, prefetch_factor 2, persistent_workers off, batch_size 16", then its
    loader arguments ("snapshot_every_n_steps=1000") (where no table says which settings vary)."""
    return ", ".join([a.words(getattr(settings, a.name)) for a in GRID_AXES
                      if not (a.workers_only and settings.num_workers == 0)
                      and not (a.optional and getattr(settings, a.name) is None)]
                     + [loader_arg_words(k, v) for k, v in settings.loader_args])


def loader_arg_words(name: str, value: Any) -> str:
    """A loader argument in a sentence, as the call writes it: "snapshot_every_n_steps=1000"."""
    return f"{name}={loader_arg_text(value)}"


def _setting(v: Any) -> str:
    return {True: "on", False: "off", None: "default"}.get(v, str(v)) if isinstance(v, (bool, type(None))) else str(v)


def instead(axis: str, value: Any, other: Any) -> str:
    """One setting that differs, e.g. "CUDA prefetcher on instead of off", "4 workers instead of
    2"; a loader argument (not a grid axis) as the call writes it, "snapshot_every_n_steps=1000
    instead of 1"."""
    words = next((a.words for a in GRID_AXES if a.name == axis), None)
    if words is None:
        return f"{loader_arg_words(axis, value)} instead of {loader_arg_text(other)}"
    return f"{words(value)} instead of {_setting(other)}"


def _rate(x: float) -> str:
    return f"{x:,.0f} samples/s"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.1f} ms"


_REMEDY_WORDS = {
    RemedyKind.PREFETCH: "the CUDA-stream prefetcher hides the copy behind the step",
    RemedyKind.PIN_MEMORY: "pin_memory=True (a pinned copy is asynchronous, and the pin thread takes batches "
                           "from the workers off the step's thread)",
    RemedyKind.PERSISTENT_WORKERS: "persistent_workers=True starts the workers once, not every epoch",
    RemedyKind.MORE_WORKERS: "more workers",
    RemedyKind.LARGER_BATCH: "a larger batch pays the per-batch cost over more samples",
    RemedyKind.PACK_TENSORS: "pack the batch's many small tensors into a few (concatenate each field across "
                             "the batch, with offsets): each tensor crosses from the worker on its own",
    RemedyKind.NUMPY_TO_TENSORS: "return torch tensors from the collate (torch.from_numpy): numpy arrays cross "
                                 "from the worker through the pickler and a pipe, tensors through shared memory",
    RemedyKind.LAZY_SAMPLER: "draw indices lazily, in O(indices used) (a full permutation of a huge dataset "
                             "costs seconds every epoch)",
}


def _remedy_text(r: Remedy, name: Name) -> str:
    """One remedy of a RemainingWait finding (see NOTE [advice the measurements support])."""
    what = _REMEDY_WORDS[r.remedy]
    if not r.measured or r.settings is None:
        if r.in_grid:
            return what + " (in the grid, but not measured: the sweep stopped before it)"
        return what + (f" (not measured: add {r.flag})" if r.flag else "")
    share = ""
    if r.ceiling_share is not None and r.knee_ceiling_share is not None:
        share = f", {r.ceiling_share:.0%} of the compute ceiling vs {r.knee_ceiling_share:.0%}"
    return f"{what}: measured {name(r.settings)} {_rate(r.samples_per_s or 0.0)} ({r.gain or 0.0:+.1%}{share})"


_REMEDY_NAMES = {
    RemedyKind.PREFETCH: "CUDA prefetcher",
    RemedyKind.PIN_MEMORY: "pin_memory",
    RemedyKind.PERSISTENT_WORKERS: "persistent_workers",
    RemedyKind.MORE_WORKERS: "more workers",
    RemedyKind.LARGER_BATCH: "a larger batch",
    RemedyKind.PACK_TENSORS: "packed tensors",
    RemedyKind.NUMPY_TO_TENSORS: "tensors, not numpy arrays",
    RemedyKind.LAZY_SAMPLER: "a lazy sampler",
}


_PART_WORDS = {
    WaitPart.H2D: "the host-to-device copy on the step's path",
    WaitPart.SAMPLER: "the sampler drawing indices in the main process",
    WaitPart.EPOCH_START: "workers starting again at each epoch start",
    WaitPart.RECEIVE: "the main process taking each finished batch from a worker",
    WaitPart.GPU_DECODE: "the main process decoding each batch on the GPU (nvJPEG and the crops hold its thread)",
    WaitPart.LOADER: "batches not built in time (fetch and prep)",
}


def spread_sentence(f: Knee) -> str:
    """The uncertainty of the pick's own figure, when its repeats spread past the tolerance or its
    windows' own variation leaves it as uncertain (`Knee.uncertainty` past half the tolerance; ''
    when not): said beside the recommendation, not in its one-line headline."""
    figure = f.sustained_samples_per_s or f.samples_per_s
    if f.fresh_samples_per_s is not None and figure > 0:
        change = f.fresh_samples_per_s / figure - 1.0
        drift = "" if f.drift_threshold is None else f", past the {f.drift_threshold:.0%} drift threshold"
        return (f"A fresh process measured it again at {_rate(f.fresh_samples_per_s)} ({change:+.0%}){drift}, and "
                "--time-budget left no time to settle which holds: read its figure as uncertain by "
                f"{abs(change):.0%}, and so the pick among configs within that of it (give a larger --time-budget, "
                "or --isolation process).")
    uncertainty = max(f.uncertainty, f.spread / 2 if f.repeats > 1 else 0.0)
    past = f.tolerance > 0 and uncertainty > f.tolerance / 2
    if not past:
        return ""
    if f.repeats < 2 or uncertainty > f.spread / 2:
        # Its windows' own variation, not (only) its repeats, leaves it that uncertain.
        whose = "the ranking's windows of it" if f.sustained_samples_per_s else "its figure"
        return (f"Its windows' batches vary so much that {whose} may be off by ±{uncertainty:.0%} (an approximate "
                f"95% interval from the windows' own rounds of batches, {2 * uncertainty:.0%} wide, past the "
                f"{f.tolerance:.0%} tolerance): the pick among configs within that much of it is uncertain by as much "
                "(measure longer: --min-time, or --repeats; the uncertainty falls with the square root of the time "
                "measured).")
    # Whole percents that round to the tolerance itself would read "5% ... past the 5% tolerance".
    pct = ".1%" if round(f.spread * 100) <= round(f.tolerance * 100) else ".0%"
    if f.sustained_samples_per_s:
        # The figure stated rests on the longer window(s); the ranking on the search's repeats.
        return (f"Its {f.repeats} repeats in the search spread {f.spread:{pct}} of their median (±{f.spread / 2:.0%}), "
                f"past the {f.tolerance:.0%} tolerance: the pick among configs within that much of it is uncertain "
                "by as much (measure longer: --batches, --min-time, or --repeats).")
    return (f"Its {f.repeats} repeats spread {f.spread:{pct}} of their median (±{f.spread / 2:.0%}), past the "
            f"{f.tolerance:.0%} tolerance: its figure, and the pick among configs within that much of it, are "
            "uncertain by as much (measure longer: --batches, --min-time, or --repeats).")


def sustained_sentence(f: Knee) -> str:
    """What the search's short windows read for the pick, beside its sustained figure, or that
    its figure rests on them where --time-budget left no time for the longer window ('' when
    neither: NOTE [the pick's sustained figure] in orchestration/sustained.py)."""
    if f.sustained_left_out:
        per = f.search_batches_per_worker
        held = f"windows of {per:.1f} batches per worker" if per else "the search's short windows"
        return (f"Its figure rests on {held}: --time-budget left no time to measure it over a longer window for a "
                "sustained figure (give a larger --time-budget).")
    if f.sustained_samples_per_s is None or f.sustained_samples_per_s <= 0:
        return ""
    change = f.samples_per_s / f.sustained_samples_per_s - 1.0
    two = f.sustained_windows[:2] if len(f.sustained_windows) >= 2 else []
    if two and f.sustained_settled == SustainedSettled.MIDDLE:
        against = f"the longer windows read {two[0]:,.0f} and {_rate(two[1])}"
    else:
        longer = "the longer windows" if two else "the longer window"
        against = (f"the same as {longer}" if abs(change) < 0.0005
                   else f"{abs(change):.1%} {'above' if change > 0 else 'below'} {longer}")
    per = f.search_batches_per_worker
    windows = f"windows of {per:.1f} batches per worker" if per else "short windows"
    text = (f"The search ranked it on {windows}, where it read {_rate(f.samples_per_s)} at a stall of "
            f"{f.stall_fraction:.1%} ({against}); the table and what follows compare configs on those windows, "
            "like with like.")
    tol = f"the {f.tolerance:.0%} tolerance" if f.tolerance > 0 else "the tolerance"
    slowed, cpus = _window_step_text(f.sustained_step, longer="the longer windows" if two else "the longer window")
    if not two:
        if f.sustained_uncertainty is None:
            return f"{text} {slowed[0].upper()}{slowed[1:]}.{cpus}" if slowed else text
        low, high = sorted([f.samples_per_s, f.sustained_samples_per_s])
        cause = slowed or "the rate moved between the two (a shared or disturbed host) or the short windows misread it"
        return (f"{text} That is past {tol}, and no second window settled them (none fitted in --time-budget, or it "
                f"failed): {cause}, so its figure is uncertain, between {low:,.0f} and {_rate(high)} (give a larger "
                f"--time-budget for a second window, or measure longer: --min-time).{cpus}")
    after = f" {slowed[0].upper()}{slowed[1:]}.{cpus}" if slowed else ""
    if f.sustained_settled == SustainedSettled.MIDDLE:
        apart = abs(two[0] - two[1]) / min(two)
        return (f"{text} Its two longer windows disagree by {apart:.0%}, past {tol} (the rate moved between them: a "
                "shared or disturbed host): its figure is the middle of their readings and the search's, uncertain by "
                f"±{f.sustained_uncertainty or 0.0:.0%} (half the spread of the three; measure longer: --min-time, or "
                f"--repeats).{after}")
    return (f"{text} Its first longer window read {_rate(two[0])}, past {tol} from the search's figure, and a "
            f"second read {_rate(two[1])}: the two agree, and its figure pools them.{after}")


def _window_step_text(r: SlowedRow | None, *, longer: str) -> tuple[str, str]:
    """Where the pick's step slowed over its longer window(s) alone (Knee.sustained_step): the
    clause that says so, and a sentence on the CPUs beside it (each '' where it did not)."""
    if r is None:
        return "", ""
    clause = (f"over {longer} the step itself ran {r.compute_p50_s * 1e3:.1f} ms a batch against "
              f"{r.alone_s * 1e3:.1f} ms alone ({r.slowdown:+.0%}), where the search's windows kept its pace")
    other = f" and other processes {r.other_cores:.1f}" if r.other_cores is not None and r.other_cores >= 0.05 else ""
    if r.cpu_saturated and r.cpu_cores is not None:
        main = f" (its main process {r.main_cores:.1f})" if r.main_cores is not None else ""
        cpus = (f" The process tree used {r.cpu_cores:.1f} cores{other} of the {r.usable_cpus} usable CPUs{main}: "
                "the training process was short of CPU (the workers took its cores)")
        if r.leave_free_cpus is not None:
            n = r.leave_free_cpus
            cpus += f"; leave {n} CPU{'s' if n != 1 else ''} free for it (fewer workers, or workers kept off its cores)"
        return clause, cpus + "."
    if r.cpu_cores is not None and r.usable_cpus:
        return clause, (f" {r.cpu_cores:.1f} cores{other} of the {r.usable_cpus} usable CPUs were busy, not all: the "
                        "host was disturbed, or the workers competed for memory bandwidth.")
    return clause, ""


def finding_sentences(findings: Sequence[Finding], name: Name = describe) -> list[str]:
    """The recommendation's findings as sentences (the only place they are worded), each config
    named by `name`."""
    return [t for t in (finding_sentence(f, name) for f in findings) if t]


def finding_sentence(f: Finding, name: Name = describe) -> str:
    """One finding as a sentence ('' for a kind that is not worded here)."""
    if isinstance(f, NoneMeasured):
        return "none (no config was measured successfully)."
    if isinstance(f, Knee):
        if f.sustained_samples_per_s is not None and f.sustained_stall_fraction is not None:
            over = (f"{f.sustained_batches} batches, {f.sustained_batches_per_worker:.0f} per worker"
                    if f.sustained_batches_per_worker else f"{f.sustained_batches} batches")
            if len(f.sustained_windows) >= 2:
                over = (f"the middle of 3 readings: 2 windows of {over}, and the search's"
                        if f.sustained_settled == SustainedSettled.MIDDLE else f"2 windows of {over}")
            elif f.sustained_uncertainty is not None:
                over = f"one window of {over}; the search's read {_rate(f.samples_per_s)}: uncertain between the two"
            return (f"{name(f.settings)}: {_rate(f.sustained_samples_per_s)} sustained ({over}), "
                    f"stall {f.sustained_stall_fraction:.1%} ({f.band.value}){_ran_dry_text(f)}.")
        return (f"{name(f.settings)}: {_rate(f.samples_per_s)}, stall {f.stall_fraction:.1%} "
                f"({f.band.value}){_ran_dry_text(f)}.")
    if isinstance(f, EqualCheaper):
        return _equal_cheaper_text(f, name)
    if isinstance(f, StepSlowed):
        return _step_slowed_text(f, name)
    if isinstance(f, DisturbedRows):
        return _disturbed_text(f, name)
    if isinstance(f, IdleWorkers):
        return _idle_text(f, name)
    if isinstance(f, EpochIter):
        return _epoch_iter_text(f, name)
    if isinstance(f, WorkerSlower):
        return _worker_slower_text(f, name)
    if isinstance(f, LatencyBound):
        return _latency_text(f, name)
    if isinstance(f, BestWithinTolerance):
        what = ", ".join(instead(d.axis, d.value, d.other) for d in f.differs)
        text = (f"The best config ({name(f.settings)}) reaches {_rate(f.samples_per_s)}, within "
                f"{max(f.tolerance, 0):.0%} or noise of it: "
                + (f"{what} buy{'s' if len(f.differs) == 1 else ''} nothing measurable" if what
                   else "no setting buys anything measurable"))
        return text + ("; the loader still binds." if f.loader_still_binds else ".")
    if isinstance(f, ListedFirst):
        axis = AXES_BY_NAME.get(f.name)
        if axis is None:
            others = ", ".join(loader_arg_text(v) for v in f.tied)
            return (f"Tie on {f.name}: {f.name}={others} measured as fast (within the tolerance) and as cheap as "
                    f"{loader_arg_words(f.name, f.value)}; a loader argument has no known cost order, so the value "
                    "listed first was picked.")
        others = ", ".join(axis.words(v) for v in f.tied)
        return (f"Tie on {f.name}: {others} measured as fast (within the tolerance) and as cheap as "
                f"{axis.words(f.value)}; {f.name} has no known cost order, so the value listed first was picked.")
    if isinstance(f, AlsoFastest):
        return ("It is also the fastest config ranked (configs that replay the IterableDataset in every "
                "worker count duplicate samples and are not ranked)." if f.replicated_excluded
                else "It is also the fastest config measured.")
    if isinstance(f, LoaderAlone):
        return (f"With --compute none this is the loader alone: its ceiling here is {_rate(f.samples_per_s)}. "
                f"Any step slower than {f.step_s * 1e3:.1f} ms per batch of this size will not wait for this loader.")
    if isinstance(f, RemainingWait):
        return _remaining_wait_text(f, name)
    if isinstance(f, NotCleared):
        return _not_cleared_text(f, name)
    if isinstance(f, LowestStall):
        return (f"Lowest stall measured: {f.stall_fraction:.1%} (receiving a batch always costs a "
                "little; this floor is not worth chasing).")
    if isinstance(f, StepSlower):
        text = (f"The knee reaches {f.share:.0%} of the compute ceiling ({f.ceiling:,.0f} samples/s) "
                f"because the step itself runs slower beside the loader: {f.compute_mean_s * 1e3:.1f} ms per "
                f"batch on average (median {f.compute_p50_s * 1e3:.1f} ms) vs {f.alone_s * 1e3:.1f} ms alone.")
        if f.cpu_saturated:
            text += (f" The process tree used {f.cpu_cores or 0.0:.1f} of {f.usable_cpus} usable CPUs: the "
                     "main process (kernel launches, the pin thread) competes with the workers for CPU, so "
                     "the binding resource is the CPU; cheaper decoding (or GPU decoding) or more CPUs would "
                     "lift it")
            n = f.leave_free_cpus
            if n is not None and f.main_cores is not None:
                text += (f"; or leave {n} CPU{'s' if n != 1 else ''} free for the training process (its main "
                         f"process used {f.main_cores:.1f} cores at the slowed pace)")
            text += "."
        return text
    if isinstance(f, StepBinds):
        return (f"Past the knee the step itself binds: the knee runs at {f.share:.0%} of the compute "
                f"ceiling ({f.ceiling:,.0f} samples/s).")
    if isinstance(f, Transfer):
        text = (f"The worker->main transfer is a large part of the wait: {f.mb_per_s:,.0f} MB/s of "
                f"batches ({(f.batch_bytes or 0) / 1e6:,.1f} MB each), {f.receive_s * 1e3:.1f} ms to "
                "receive one.")
        if f.numpy_leaves:
            text += (f" {f.numpy_leaves} numpy array{'s' if f.numpy_leaves != 1 else ''} per batch "
                     "cross from the worker through the pickler and a pipe, not shared memory: "
                     + _REMEDY_WORDS[RemedyKind.NUMPY_TO_TENSORS].split(": ")[0] + ".")
        elif f.many_tensors:
            text += f" The batch crosses as {f.tensor_leaves} tensors, each on its own: pack them into a few."
        return text
    if isinstance(f, MoreNotBetter):
        return (f"More is not better: {name(f.settings)} uses {f.extra_cores:+.1f} CPU cores over the knee "
                f"for {f.gain:+.1%} throughput.")
    if isinstance(f, Startup):
        return _startup_text(f, name)
    if isinstance(f, EpochFaster):
        return (f"Counting start-up in every epoch of {f.epoch_batches} batches, {name(f.settings)} is predicted "
                f"faster per epoch ({f.epoch_samples_per_s:,.0f} samples/s) than the steady-state knee.")
    if isinstance(f, Threads):
        parts = [
            ("1 intra-op thread in each worker (torch's own setting there: no worker_init_fn needed)"
             if f.worker_threads == 1 else
             f"torch.set_num_threads({f.worker_threads}) in each worker (worker_init_fn)")
            if f.worker_threads is not None else "",
            f"torch.set_num_threads({f.main_threads}) in the main process" if f.main_threads is not None else "",
        ]
        return "Threads: " + ", ".join(p for p in parts if p) + "."
    if isinstance(f, Oversubscribed):
        other = (f" and other processes {f.other_cores:.1f}" if f.other_cores is not None
                 and f.other_cores >= 0.05 else "")
        what = f.message.split(": ", 1)[-1]
        return (f"Oversubscribed, as measured: {what}, and the process tree used {f.cpu_cores or 0.0:.1f} "
                f"cores{other} of the {f.usable_cpus} usable CPUs.")
    if isinstance(f, LongTail):
        return _long_tail_text(f, name)
    if isinstance(f, BatchedFetch):
        return _batched_fetch_text(f)
    if isinstance(f, OtherLoad):
        of = f" of the {f.usable_cpus} usable CPUs" if f.usable_cpus else ""
        steal = f", {f.steal_cores:.1f} of them the hypervisor's steal" if f.steal_named else ""
        return (f"Other processes used the CPUs this sweep ran on: up to {f.max_cores:.1f} cores{of} "
                f"during a measured window ({name(f.settings)}{steal}), median {f.median_cores:.1f} over "
                f"{f.configs} config{'s' if f.configs != 1 else ''}. These rows measure a shared "
                "machine: compare them only with runs under the same load.")
    return ""


def _not_cleared_text(f: NotCleared, name: Name) -> str:
    cause = ""
    if f.cause is NotClearedCause.CPU and f.cpu is not None:
        c = f.cpu
        busy = f" and other processes {c.other_cores:.1f} more" if c.other_named and c.other_cores is not None else ""
        used = f" The process tree used {c.cpu_cores:.1f} of {c.usable_cpus} usable CPUs{busy}: "
        if c.mostly_other:  # the other load took more of them than the sweep
            cause = (used + "the CPUs are saturated, mostly by other load on the machine; these rows "
                     "understate what this loader does on CPUs of its own (measure again on a quiet "
                     "machine).")
        else:
            cause = used + "CPU saturation binds (building the samples: fetch, decode, transforms, collate)."
    elif f.cause is NotClearedCause.CORES_SLOWER and f.cores_slower is not None:
        c2 = f.cores_slower
        used = ("" if c2.cpu_cores is None or not c2.usable_cpus else
                f", using {c2.cpu_cores:.1f} of {c2.usable_cpus} usable CPUs")
        seen = (f"; other processes took {c2.other_cores:.1f} cores of them during its window"
                if c2.other_named and c2.other_cores is not None else "")
        cause = (f" More workers bought nothing: {name(c2.settings)} measured {_rate(c2.hi_samples_per_s)}"
                 f"{used}, its workers spending {c2.hi_ms:.1f} ms of CPU per sample against "
                 f"{c2.lo_ms:.1f} ms at {c2.w_lo} worker{'s' if c2.w_lo != 1 else ''}{seen}. The "
                 "CPUs delivered less per core as workers were added (other load on the machine, "
                 "logical CPUs that share physical cores, or memory bandwidth): more workers are not the "
                 "cure here; cheaper samples (decode/augment) or a machine with more cores to itself are.")
    elif f.cause is NotClearedCause.REPLICATED:
        cause = (" Configs with more workers replay the IterableDataset in every worker and are not "
                 "ranked: split its stream with torch.utils.data.get_worker_info(), then sweep again.")
    elif f.cause is NotClearedCause.NOT_BUILD_RATE and f.build_rate is not None:
        b = f.build_rate
        cause = (f" Building batches does not explain it: the loader alone delivers "
                 f"{_rate(b.loader_alone)}, {b.loader_alone / b.compute_ceiling:.1f}x the compute "
                 f"ceiling, which accounts for a stall of {b.explained_stall:.1%} at most; more workers "
                 "are not the cure. "
                 + ("The wait sits in its tail" if b.in_tail else "The wait is steady, a fixed cost per batch")
                 + f" ({b.wait_p50_s * 1e3:.1f} ms median, {b.wait_p95_s * 1e3:.1f} ms p95): "
                 "contention for the CPUs or the main process's own work between steps.")
    elif f.cause is NotClearedCause.STORAGE and f.device is not None:
        lo, hi = f.device.mb_per_s
        rate = f"{lo:,.1f}" if hi - lo < 0.05 else f"{lo:,.1f}-{hi:,.1f}"
        counts = ", ".join(str(w) for w in f.device.workers)
        cause = (f" The storage device binds: the configs with {counts} workers read {rate} MB/s from it "
                 "alike, so more workers read no faster; faster storage or a cache would help "
                 "(`--what-if disk=MBPS` predicts another device).")
    elif f.cause is NotClearedCause.IDLE_WORKERS:
        working, w = f.working_workers or 0, f.settings.num_workers
        cause = (f" Only {working} of its {w} workers {'gets' if working == 1 else 'get'} work (the note on idle "
                 "workers gives what each delivered): "
                 "the loader binds through " + ("the one that works" if working == 1 else f"the {working} that work")
                 + ", and more workers do not help (that note says what does).")
    elif f.cause is NotClearedCause.NOT_REACHED and f.by_budget:
        counts = f" ({', '.join(str(w) for w in f.not_reached)} workers)" if f.not_reached else ""
        cause = (f" The configs with more workers{counts} were not reached: --time-budget ended the search before "
                 "them; give a larger --time-budget to measure them.")
        n = f.workers_needed
        if n:
            cause += (f" Estimate (a prediction): about {n} worker{'s' if n != 1 else ''}"
                      f"{' per rank' if f.per_rank else ''} (batch build time / step time), if the CPUs can run them.")
    elif f.cause is NotClearedCause.NOT_REACHED:
        counts = ", ".join(str(w) for w in f.not_reached)
        cause = (f" The grid's configs with more workers ({counts}) were not reached: the sweep was stopped "
                 "before them; run it again to measure them (the grid already lists them).")
    elif f.cause is NotClearedCause.MORE_WORKERS_FAILED:
        tried = "; ".join(f"{name(x.settings)} {x.status}" + (f" ({x.error})" if x.error else "")
                          for x in f.failed[:3])
        cause = (" The configs with more workers did not run: " + tried
                 + ". Fix what stopped them (their rows say why); more workers may then help.")
    elif f.cause is NotClearedCause.GRID_EDGE:
        cause = (f" {'The fastest config' if f.of_best else 'The recommended config'} "
                 "has the most workers of those measured: try more workers.")
        n = f.workers_needed
        if n:
            cause += (f" Estimate (a prediction): about {n} worker{'s' if n != 1 else ''}"
                      f"{' per rank' if f.per_rank else ''} (batch build time / step time), "
                      "if the CPUs can run them.")
    who = "Even the best config" if f.of_best else "The recommended config"
    return (f"{who} is {f.band.value} (stall {f.stall_fraction:.1%}) and loader-bound: no measured "
            "setting clears the loader bottleneck." + cause)


def _startup_text(f: Startup, name: Name) -> str:
    text = (f"Worker start-up ({f.start_s:.2f} s of the {f.first_batch_s:.2f} s first batch"
            + (f"; the sampler drew for {f.sampler_s:.2f} s of it, which every epoch pays" if f.sampler_named else "")
            + f") is {f.share:.0%} of an epoch of {f.epoch_batches} batches (predicted from the "
            "first batch; the measured window did not span an epoch)")
    if f.measured and f.alt is not None:
        gaps = ""
        if f.gap_s is not None and f.persistent_gap_s is not None:
            gaps = (f"; epoch-start gaps measured {f.gap_s:.2f} s without and "
                    f"{f.persistent_gap_s:.2f} s with persistent workers")
        if f.advised:
            text += (f": use persistent_workers=True to pay it once (measured {name(f.alt)}: "
                     f"{_rate(f.samples_per_s or 0.0)}, the same steady state within the tolerance{gaps}).")
        elif f.slower:
            text += (f"; persistent_workers=True measured slower here ({name(f.alt)}: "
                     f"{_rate(f.samples_per_s or 0.0)} vs {_rate(f.knee_samples_per_s or 0.0)}{gaps}): not advised.")
        else:
            text += (f"; persistent_workers=True does not remove it here ({name(f.alt)}{gaps}): "
                     "the gap is not worker start-up.")
    elif f.in_grid:
        text += ": persistent_workers=True would pay it once (in the grid, but not reached: the sweep stopped first)."
    else:
        text += ": persistent_workers=True would pay it once (not measured: add --persistent-workers off,on)."
    return text


def _remaining_wait_text(f: RemainingWait, name: Name) -> str:
    part = f.part
    who = "Its remaining stall" if f.of_knee else f"With workers ({name(f.settings)}) the stall"
    words = _PART_WORDS[part]
    if part is WaitPart.EPOCH_START and not f.workers_restart:
        # Persistent workers, or none: nothing starts again; the epoch's first batch is built
        # while nothing else is in flight.
        words = "each epoch's first batch, built with nothing in flight (no worker starts: the pipeline refills)"
    if part is WaitPart.EPOCH_START and f.start_outlasts_persistent:
        words = ("each epoch's start, which persistent workers, measured, did not shorten (not the workers "
                 "starting again: the pipeline refilling, or the dataset's own __iter__)")
    if part is WaitPart.LOADER and f.built_fast_enough:
        # The loader alone builds them faster than the step takes them: late, not unbuilt.
        words = ("batches that reached the step late, though the loader alone builds them faster than the step "
                 "takes them")
    text = f"{who} ({f.stall_fraction:.1%}, {f.wait_p50_s * 1e3:.1f} ms median wait per batch) "
    if f.part_most or f.wait_mean_s is None:
        text += f"is mostly {words}: {f.part_s * 1e3:.1f} ms per batch"
    else:
        text += (f"comes most from {words}: {f.part_s * 1e3:.1f} of its {f.wait_mean_s * 1e3:.1f} ms mean wait "
                 "per batch")
    if part is WaitPart.RECEIVE and f.receive_s is not None:
        what = []
        if f.tensor_leaves:
            n = f.tensor_leaves
            what.append(f"{n} tensor{'s' if n != 1 else ''}")
        if f.numpy_leaves:
            n = f.numpy_leaves
            what.append(f"{n} numpy array{'s' if n != 1 else ''}")
        if f.batch_bytes:
            b = f.batch_bytes
            what.append(f"{b / 1e6:,.1f} MB" if b >= 50_000 else f"{b / 1e3:,.1f} kB" if b >= 1_000 else f"{b} bytes")
        text += (f" (taking a batch that was already built costs {f.receive_s * 1e3:.1f} ms, measured after "
                 f"the window{'; the batch is ' + ', '.join(what) if what else ''}); ")
        if f.more_settings is None or f.more_wait_p50_s is None or f.more_stall_fraction is None:
            # Nothing measured with more workers: a prediction, labelled as one.
            text += ("taking a batch is the main process's work, so more workers should not shorten it (a "
                     "prediction: no config with more workers was measured)")
        elif f.more_still_waits:
            text += (f"more workers cannot remove it: {name(f.more_settings)} still waited "
                     f"{f.more_wait_p50_s * 1e3:.1f} ms per batch (median; stall {f.more_stall_fraction:.1%})")
        else:
            text += (f"more workers do not remove the receive, though {name(f.more_settings)} waited less: "
                     f"{f.more_wait_p50_s * 1e3:.1f} ms per batch (median; stall {f.more_stall_fraction:.1%})")
        if f.quiet_settings is not None and f.quiet_receive_s is not None and f.cpu_cores is not None:
            text += (f"; at {name(f.quiet_settings)} the same batch took {f.quiet_receive_s * 1e3:.1f} ms to receive: "
                     f"with the process tree on {f.cpu_cores:.1f} of the {f.usable_cpus} usable CPUs the main process "
                     "waits for a core too (fewer workers, or a core left to the main process, shorten it)")
    elif part is WaitPart.EPOCH_START and not f.workers_restart:
        text += " (paid once per epoch: longer epochs spread it; no DataLoader setting removes it)"
    elif part is WaitPart.GPU_DECODE:
        text += (" (paid on the main thread whatever the workers: more workers cannot remove it; decoding in the "
                 "workers, --decoder pil or torchvision, moves it off that thread)")
    elif part is WaitPart.H2D:
        hidden = f.h2d_hidden_fraction
        text += f" (copy {_ms(f.h2d_s)}{'' if hidden is None else f', {hidden:.0%} hidden'})"
    others = {p: v for p, v in f.parts_share.items() if p is not part}
    if others:
        text += "; also " + ", ".join(f"{p.value} {v:.0%} of the step" for p, v in others.items())
    text += "."
    if f.remedies:
        text += " What acts on it: " + "; ".join(_remedy_text(r, name) for r in f.remedies) + "."
    for r in f.measured_no_gain:
        within = f", within the {f.tolerance:.0%} tolerance" if (r.gain or 0.0) > 0 else ""
        text += (f" Measured without gain ({_REMEDY_NAMES[r.remedy]}): {name(r.settings) if r.settings else ''}, "
                 f"{_rate(r.samples_per_s or 0.0)} ({r.gain or 0.0:+.1%}{within}).")
    for r in f.slowed:
        text += (f" Measured, but no evidence ({_REMEDY_NAMES[r.remedy]}): {name(r.settings) if r.settings else ''}, "
                 f"{_rate(r.samples_per_s or 0.0)} ({r.gain or 0.0:+.1%}), ")
        if r.step_slowdown is not None:
            text += (f"its step {r.step_slowdown:+.0%} slower beside the loader than alone (the training process "
                     "short of CPU, or the host disturbed).")
        else:
            text += (f"other processes took {r.other_cores or 0.0:.1f} cores of the usable CPUs during its window "
                     "(a shared machine).")
    return text


def _equal_cheaper_text(f: EqualCheaper, name: Name) -> str:
    peers = "; ".join(
        f"{name(p.settings)} {_rate(p.samples_per_s)} ({p.below_best:.1%} below the best; "
        + (f"{p.repeats} repeats)" if p.repeats > 1 else "one trial)")
        for p in f.peers)
    one = len(f.peers) == 1
    return (f"Cheaper, and within the {f.tolerance:.0%} tolerance of the pick's {_rate(f.knee_samples_per_s)}: "
            f"{peers}. Not picked: {'it reads' if one else 'they read'} past the tolerance below the best, where the "
            f"pick is inside; {'it is' if one else 'they are'} as good as the pick within this run's measurement, and "
            f"a rerun may pick {'it' if one else 'one of them'}.")


def _latency_text(f: LatencyBound, name: Name) -> str:
    if f.faster_past_cpus is not None:
        cpus = f"the {f.usable_cpus} usable CPUs" if f.usable_cpus else "the usable CPUs"
        return (f"Latency-bound below the knee ({name(f.settings)}): its workers used {f.worker_cores:.2f} of a core "
                f"each on average (under {f.threshold:.0%}): a sample waits on storage or the network far longer than "
                f"it computes, so requests in flight set the rate, not the CPUs, which is why "
                f"{name(f.faster_past_cpus)}, past {cpus}, ran faster ({f.faster_samples_per_s or 0.0:,.0f} against "
                f"{f.below_samples_per_s or 0.0:,.0f} samples/s). Beyond more workers: threads inside a worker (a pool fetching a batch's "
                "samples at once); batched fetching (a `__getitems__` that reads a batch in one request); fewer, "
                "larger reads (samples packed into shards).")
    past = (f" (past the {f.usable_cpus} usable CPUs: they wait rather than compute)" if f.usable_cpus else "")
    more = "" if f.more_no_gain is not None else f"more workers{past}; "
    measured = ("" if f.more_no_gain is None else
                f" More workers measured no faster here ({name(f.more_no_gain)}, within the tolerance).")
    return (f"Latency-bound ({name(f.settings)}): its workers used {f.worker_cores:.2f} of a core each on average "
            f"(under {f.threshold:.0%}): a sample waits on storage or the network far longer than it computes, so "
            f"requests in flight set the rate, not the CPUs. What helps: {more}threads inside a "
            "worker (a pool fetching a batch's samples at once); batched fetching (a `__getitems__` that reads a "
            "batch in one request); fewer, larger reads (samples packed into shards)." + measured)


def _disturbed_text(f: DisturbedRows, name: Name) -> str:
    rows = []
    for r in f.rows:
        steal = f", {r.steal_cores:.1f} of them steal" if r.steal_named else ""
        trials = f"; {r.repeats} trials" if r.repeats > 1 else ""
        rows.append(f"{name(r.settings)} {_rate(r.samples_per_s)} ({r.other_cores:.1f} cores{steal}{trials})")
    of = f" of the {f.usable_cpus} usable CPUs" if f.usable_cpus else ""
    return (f"Disturbed windows: while these rows were measured, other processes and the hypervisor's steal took "
            f"{f.share:.0%} or more{of}, over {f.over_median:g}x the rows' median ({f.median_cores:.2f} cores): "
            + "; ".join(rows) + ". Their figures read that burst as well as the config: compare them with care, or "
            "measure them again (--repeats).")


def _step_slowed_text(f: StepSlowed, name: Name) -> str:
    rows = []
    for r in f.rows:
        text = (f"{name(r.settings)} {r.slowdown:+.0%} ({r.compute_p50_s * 1e3:.1f} ms a step against "
                f"{r.alone_s * 1e3:.1f} ms alone")
        other = (f" and other processes {r.other_cores:.1f}" if r.other_cores is not None and r.other_cores >= 0.05
                 else "")
        if r.cpu_saturated and r.cpu_cores is not None:
            text += f"; the process tree used {r.cpu_cores:.1f} cores{other} of the {r.usable_cpus} usable CPUs"
            if r.leave_free_cpus is not None:
                n = r.leave_free_cpus
                text += (f": leave {n} CPU{'s' if n != 1 else ''} free for the training process (fewer workers, "
                         "or workers kept off its cores)")
        elif r.cpu_cores is not None and r.usable_cpus:
            text += (f"; {r.cpu_cores:.1f} cores{other} of the {r.usable_cpus} usable CPUs busy, not all: the host "
                     "was disturbed, or the workers competed for memory bandwidth")
        rows.append(text + (f"; {r.repeats} trials" if r.repeats > 1 else "; one trial") + ")")
    text = (f"Step slowed beside the loader (over {f.threshold:.0%} slower than alone): " + "; ".join(rows)
            + ". The training process was short of CPU (the workers took its cores) or the host was disturbed: "
            "these rows do not show what the step alone binds")
    if f.pick is not None:
        return (text + f". The pick ({name(f.pick)}) is one of them: its figure is what training at its settings "
                "sees, the step slowed as measured; fewer workers or more CPUs give the step its pace back.")
    return text + ", and no advice rests on them."


def _ran_dry_text(f: Knee) -> str:
    """The knee's caveat where the share of some of its workers ran out inside its window ('' else)."""
    if f.ran_dry_samples_per_s is None or not f.ran_dry_workers:
        return ""
    w = f.settings.num_workers
    left = w - f.ran_dry_workers
    return (f", while all {w} workers had work: {f.ran_dry_workers} of them ran out of work inside the window, "
            f"after which the loader alone delivered {_rate(f.ran_dry_samples_per_s)} with the other {left}; a whole "
            "epoch reaches at most this figure, less as shards run out")


def _idle_text(f: IdleWorkers, name: Name) -> str:
    rows = []
    for r in f.rows:
        if r.in_probe:
            rows.append(f"{name(r.settings)}: {r.no_batch} of {r.num_workers} workers delivered no batch in the "
                        f"loader-alone probe after the window ({', '.join(str(b) for b in r.worker_batches)} "
                        f"batches; in the window {', '.join(str(b) for b in r.window_batches)}: their share ran "
                        f"out early in the epoch, and the window's samples/s still counts it): past that the dataset "
                        f"gives work to {r.working}"
                        + ("" if r.after_samples_per_s is None else
                           f", and the loader alone delivered {_rate(r.after_samples_per_s)} with them"))
            continue
        parts = []
        if r.no_batch:
            parts.append(f"{r.no_batch} of {r.num_workers} workers delivered no batch")
        if r.few:
            parts.append(f"{r.few} of {r.num_workers} under a quarter of an equal share")
        rows.append(f"{name(r.settings)}: " + " and ".join(parts)
                    + f" ({', '.join(str(b) for b in r.worker_batches)} batches): the dataset gives work to "
                    + str(r.working))
    return ("Idle workers: " + "; ".join(rows) + ". Split it into at least num_workers shards of about equal size (an IterableDataset "
            "split by shard or file gives nothing to the workers beyond the number of shards, e.g. with "
            "torch.utils.data.get_worker_info()): until then more workers change nothing, and these rows are bound "
            "by the workers that work, not by the receive.")


def _epoch_iter_text(f: EpochIter, name: Name) -> str:
    rows = "; ".join(
        f"{name(r.settings)}: each epoch's first batch waited {r.gap_s:.2f} s, {r.gap_s / r.build_s:.0f}x a steady "
        f"batch's build ({r.build_s * 1e3:.1f} ms{' at most' if r.build_rule == 'window' else ''}), over "
        f"{r.epochs} epoch start{'s' if r.epochs != 1 else ''}" for r in f.rows)
    iterable = any(r.iterable for r in f.rows)
    where = ("the dataset's own __iter__ (a shuffle buffer filled, an index or file list rebuilt at every epoch)"
             if iterable else "the sampler's or the dataset's own __iter__ (an index rebuilt at every epoch)")
    return (f"Epoch starts with persistent workers: {rows}. Nothing starts again with persistent workers (a "
            f"first batch costs one build), so the time goes to {where}: do that work once, or spread it over the "
            "epoch.")


def _worker_slower_text(f: WorkerSlower, name: Name) -> str:
    ratio = f.worker_build_s / f.main_build_s if f.main_build_s > 0 else 0.0
    return (f"One worker builds a batch {ratio:.1f}x slower than the main process: {name(f.settings)} takes "
            f"{f.worker_build_s * 1e3:.1f} ms per batch in each worker{' at most' if f.build_rule == 'window' else ''}"
            f", the main process {f.main_build_s * 1e3:.1f} ms at 0 workers ({name(f.main)}). The sign of a library "
            "that runs threads in a process that never forked and turns them off in forked workers (a tokenizer's "
            "pool, OpenMP): more workers pay it back only in numbers; batch that work in the main process, or set "
            "the library's own threads in worker_init_fn.")
_IN_ORDER_NOT_TRIED = {
    InOrderTrial.NO_WORKERS: "in_order means nothing with fewer than 2 workers (no batch can overtake another)",
    InOrderTrial.OLD_TORCH: "in_order=False needs torch 2.6 or later (this torch's DataLoader has no in_order)",
    InOrderTrial.LOADER_CLASS: "the loader class takes no in_order",
    InOrderTrial.BUDGET: "--time-budget left no time to measure in_order=False: add --in-order on,off",
    InOrderTrial.FAILED: "in_order=False was tried and did not run (its row says why)",
}


def _long_tail_text(f: LongTail, name: Name) -> str:
    """LongTail: the tail, then in_order=False as measured (or why it was not)."""
    t = f.tail
    text = (f"The per-sample build time has a long tail (stage profile of the pick): the slowest 1% of samples take "
            f"{t.slowest_ms:.1f} ms on average, {t.ratio:.0f}x the median {t.p50_ms:.2f} ms (p99 {t.p99_ms:.1f} ms; "
            f"{t.slow} of {t.samples} samples at {t.threshold:g}x or more): a batch waits for its slowest sample, "
            "and in order a ready batch waits for an earlier one.")
    if f.off is not None and f.off_samples_per_s is not None and f.on_samples_per_s is not None:
        measured = (f"in_order=False measured {_rate(f.off_samples_per_s)} against {f.on_samples_per_s:,.0f} in "
                    f"order ({f.gain or 0.0:+.1%}; {name(f.off)})")
        if f.recommended:
            return f"{text} {measured}: recommended."
        if f.faster:
            return f"{text} {measured}, yet the pick keeps the order (another config ranked ahead)."
        return f"{text} {measured}: not faster beyond the tolerance, so the batches keep their order."
    why = _IN_ORDER_NOT_TRIED.get(f.trial) if f.trial is not None else None
    return f"{text} " + (f"{why[0].upper()}{why[1:]}." if why else
                         "in_order=False was not measured: add --in-order on,off.")


def _batched_fetch_text(f: BatchedFetch) -> str:
    """BatchedFetch: the measured fixed cost per call, its share, and what __getitems__ would buy."""
    t = f.timing
    return (f"Batched fetching: the dataset has no __getitems__, so the DataLoader fetches each sample with its own "
            f"call; asked for {t.items} samples in one call (dataset[list of indices]) it took {t.batch_ms:.2f} ms "
            f"against {t.one_ms:.2f} ms for one: about {f.fixed_ms:.2f} ms of every call is fixed "
            f"({f.share:.0%} of a sample's build time, {f.build_ms:.2f} ms), and {f.per_item_ms:.3f} ms per sample. "
            f"A __getitems__(indices) that fetches a batch in one call pays the fixed cost once per batch of "
            f"{f.batch_size}: predicted ~{f.new_build_ms:.2f} ms per sample, one worker ~{f.loader_gain:.1f}x as "
            "fast (a prediction).")

