"""Beyond the DataLoader's settings, in words: the sweep's stage profile of its pick (a line in the
short block when the loader binds, the table under `--verbose`), the what-ifs that change how a
sample is built (`stage=`, `decode=`), and the changes to the pipeline that the recommendation
lists where no setting clears the loader bottleneck (`Analysis.beyond_knobs`).

Formats only what analysis/ concluded (conclusions.py); every figure that is not measured is
worded as a prediction, and never ranked with the measured ones.
"""

from __future__ import annotations

from collections.abc import Callable

from loaderbench.conclusions import (
    BeyondKnobs,
    Binds,
    ChangeKind,
    DecodeMode,
    Decoder,
    NoProfile,
    PipelineChange,
    StageProfile,
    WhatIf,
    WhatIfAnswer,
    WhatIfCase,
    WhyNoPrediction,
)
from loaderbench.model import GRID_AXES, Axis, LoaderSettings, StageKind
from loaderbench.render.findings import instead

Name = Callable[[LoaderSettings], str]

BINDS_WORDS = {
    Binds.WORKERS: "the workers bind (more of them would go further)",
    Binds.CPUS: "the usable CPUs bind",
    Binds.STORAGE: "the storage device binds",
    Binds.RECEIVE: "the main process receiving each batch from a worker binds (the receive floor)",
    Binds.STEP: "the step binds",
    Binds.H2D: "the host-to-device copy on the step's path binds (pin_memory with the CUDA prefetcher hides it)",
    Binds.GPU_DECODE: "the decode on the GPU binds (the step waits for it each batch)",
    Binds.WORKING: ("the workers the dataset gives work to bind (more workers add nothing; more shards, or one "
                    "stream split across the workers, would go further)"),
    Binds.MAIN_PROCESS: ("the main process building each batch between steps binds (0 workers; with workers the "
                         "series goes no further)"),
}

_DECODE_WORDS = {
    Decoder.TORCHVISION: "decode with torchvision.io on the CPU",
    Decoder.NVJPEG: "decode on the GPU with nvJPEG",
}

_NO_PROFILE = {
    NoProfile.FLAG: "it was run with --no-profile: sweep without it, or run loaderbench profile",
    NoProfile.SEVERAL_PROCESSES: ("a sweep on several ranks or nodes takes none: run loaderbench profile with the "
                                  "pick's settings on one node"),
    NoProfile.NOT_TAKEN: ("none was taken: --time-budget ran out or the sweep was stopped before it, a watched "
                          "loop takes none, or a version that took none wrote the file; run loaderbench profile "
                          "with the pick's settings"),
}

_NO_ANSWER = {
    WhyNoPrediction.NOTHING_MEASURED: "no config was measured",
    WhyNoPrediction.NO_WORKERS_MEASURED: "no config with workers was measured",
    WhyNoPrediction.NO_PROFILE: ("the sweep took no stage profile of its pick (it was run with --no-profile, or "
                                 "by a version that took none): sweep again without --no-profile"),
    WhyNoPrediction.STAGE_NOT_BUILT: ("pin and H2D are the main process's copy, not building a sample: --pin-memory "
                                      "and --prefetch act on them"),
    WhyNoPrediction.STAGE_NOT_TIMED: ("the stage profile did not time that stage: at the pick's settings (0 "
                                      "workers) the main process builds each batch and receives none, so there is "
                                      "no receive to change; it is a question for a pick with workers"),
    WhyNoPrediction.NO_JPEG_DECODE: ("the stage profile shows no PIL or torchvision JPEG decode (another format, or "
                                     "a decoder the profile does not recognise: ask stage=NAME:F for its stage)"),
    WhyNoPrediction.SAME_DECODER: "the pipeline decodes with torchvision.io already",
    WhyNoPrediction.NO_DECODER_TIMING: ("the decoders were not timed on the dataset's JPEGs (the profile ran out of "
                                        "time first, or captured none)"),
    WhyNoPrediction.NO_CUDA: "it cannot be predicted here: decoding on the GPU is timed on a CUDA GPU, and this run had none",
    WhyNoPrediction.NO_GPU_TIMING: "nvJPEG was not timed on this GPU (torchvision without nvJPEG, or no JPEG captured)",
    WhyNoPrediction.PROFILE_TIME: ("the stage profile's time ended before it timed the decoders on the dataset's JPEGs: "
                                   "sweep with a larger --time-budget (`loaderbench profile` times the decoders too, "
                                   "as figures of their own, not as this prediction)"),
    WhyNoPrediction.BYTES_UNKNOWN: "the bytes per sample are not known (give the files the dataset reads with --data)",
    WhyNoPrediction.NO_CACHED_ROWS: "no row was served from a cache: sweep with --cache both (or warm)",
    WhyNoPrediction.NO_LOADER_RATE: "the rows served from a cache give no loader rate for this series",
}


def _ms(v: float) -> str:
    return f"{v:.3f}" if v < 0.1 else f"{v:.2f}"


def _factor(f: float | None) -> str:
    return "none" if f is None else "inf" if f == float("inf") else f"{f:g}"


def question_words(q: WhatIf) -> str:
    """The changes of a what-if, in words: "24 usable CPUs, decode with torchvision.io on the CPU,
    RandomResizedCrop 2x faster"."""
    parts = []
    if q.cpus is not None:
        parts.append(f"{q.cpus} usable CPU{'s' if q.cpus != 1 else ''}")
    if q.disk_mb_per_s is not None:
        parts.append(f"the files on a device of {q.disk_mb_per_s:g} MB/s"
                     + ("" if not q.disk_iops else f", {q.disk_iops:g} reads/s"))
    if q.decode is not None:
        parts.append(_DECODE_WORDS[q.decode])
    for st in q.stages:
        parts.append(f"{st.name} removed" if st.speedup is None else f"{st.name} {st.speedup:g}x faster")
    return ", ".join(parts)


def _curve(case: WhatIfCase | WhatIfAnswer) -> str:
    shown = set(case.shown_workers)
    return ", ".join(f"{w}: ~{x:,.0f}" for w, x in case.curve if w in shown)


def _knee(case: WhatIfCase | WhatIfAnswer, name: Name) -> str:
    assert case.knee is not None
    stall = case.knee_stall_fraction
    w = case.knee.num_workers
    return (f"knee ~{w} worker{'' if w == 1 else 's'}, ~{case.knee_samples_per_s or 0.0:,.0f} samples/s"
            + ("" if stall is None else f", stall ~{stall:.0%}") + f" ({name(case.knee)})")


_NEAR_WORDS = {
    Binds.WORKERS: "the workers",
    Binds.CPUS: "the usable CPUs",
    Binds.STORAGE: "the storage device",
    Binds.WORKING: "the workers the dataset gives work to",
}


def binds_words(b: Binds, near: Binds | None = None) -> str:
    """"the step binds", and where the loader runs close behind it (`near`, analysis/predict.binds_near)
    ", with the usable CPUs close behind (they still hold it back: a measured run there would read
    loader-bound)"."""
    if near is None or near not in _NEAR_WORDS:
        return BINDS_WORDS[b]
    return (f"{BINDS_WORDS[b]}, with {_NEAR_WORDS[near]} close behind (they still hold it back: a measured run "
            "there would read loader-bound)")


def _binds(b: Binds | None, near: Binds | None = None) -> str:
    return "" if b is None else f": {binds_words(b, near)}"


def binds_clause(b: Binds | None, near: Binds | None = None) -> str:
    """", where the curve flattens the step binds" or ''."""
    return "" if b is None else f"; where the curve flattens {binds_words(b, near)}"


def _shifts(what: WhatIfAnswer) -> str:
    """How the question changes building a sample, from the stage profile."""
    q = what.question
    parts = []
    if q.decode is Decoder.TORCHVISION and what.decoder_factor is not None:
        t = what.decoder_timing
        on = f" on {t.images} of the dataset's JPEGs" if t is not None else ""
        parts.append(f"torchvision.io's decode measured {what.decoder_factor:.2f}x {what.decode_from or 'PIL'}'s CPU "
                     f"time{on}" + ("" if what.transforms_factor is None else
                                    f", the transforms after it {what.transforms_factor:.2f}x on its tensor"))
    if q.decode is Decoder.NVJPEG and what.gpu is not None:
        g = what.gpu
        parts.append(f"the decode and the transforms after it leave the workers for the GPU, where nvJPEG with the "
                     f"crops took {g.decode_crop_ms_per_batch:.1f} ms per batch of {g.batch_size} (decode alone "
                     f"{g.decode_ms_per_batch:.1f} ms; measured on {g.device})")
    moved = "; ".join(f"{s.name} {_ms(s.ms_per_sample)} -> {_ms(s.new_ms_per_sample)} ms per sample"
                      + (" (the receive floor)" if s.share is None else "") for s in what.shifts)
    if moved:
        parts.append(moved)
    if what.loader_speedup is not None and abs(what.loader_speedup - 1.0) > 5e-3:
        parts.append(f"one worker builds a sample {what.loader_speedup:.2f}x faster"
                     + ("" if what.loader_gain is None else f", the loader delivers up to {what.loader_gain:.2f}x"))
    return "; ".join(parts)


def what_if_build_lines(what: WhatIfAnswer, name: Name) -> list[str]:
    """A what-if that changes how a sample is built (`stage=`, `decode=`, with `cpus=` or `disk=`
    beside it) in words, labelled a prediction with what binds; nvJPEG's two cases each."""
    q = what.question
    head = f"What if {question_words(q)}"
    if what.why is not None:
        why = _NO_ANSWER.get(what.why, what.why.value)
        if what.why is WhyNoPrediction.STAGE_UNKNOWN:
            why = ("the stage profile has no stage of that name; its stages: "
                   + ", ".join(what.stage_names))
        return [f"{head}: no prediction ({why})."]
    shifts = _shifts(what)
    text = (f"{head} (a prediction from the pipeline model fitted on this run's measured configs and the stage "
            f"profile of its pick, not a measurement)" + (f": {shifts}" if shifts else ": nothing changes"))
    if what.cases:
        parts = []
        for case in what.cases:
            if case.knee is None:
                continue
            how = ("serialised with the step (before it, on its stream)" if case.mode is DecodeMode.SERIALISED
                   else "overlapped on a side stream (the CUDA prefetcher; at best, the two share the GPU)")
            if case.host_waits:
                gpu = what.gpu
                held = ("" if gpu is None else f" ({gpu.cpu_ms_per_batch:.1f} ms of CPU per batch of {gpu.batch_size} "
                        f"for {gpu.decode_crop_ms_per_batch:.1f} ms on the GPU, the decode alone "
                        f"{gpu.decode_ms_per_batch:.1f} ms)")
                how = (f"on a side stream (the CUDA prefetcher), no better: the decode and its crops hold the main "
                       f"thread for their GPU time{held}, so the next step cannot start while they run")
            step = "" if case.step_ms_per_batch is None else f", {case.step_ms_per_batch:.1f} ms per batch"
            parts.append(f"{how}{step}: {_knee(case, name)}{_binds(case.binds, case.binds_near)}; by num_workers: {_curve(case)}")
        return [f"{text}. " + ". ".join(_upper(p) for p in parts)
                + ". These add the decode and its crops, as timed alone, to the step; in a loop the decode also "
                "waits for the step queued before it and the step's launches overlap its GPU time, so a measured "
                "run can read a few percent either side. A measured run tells which case holds (--decoder nvjpeg "
                "--prefetch off,on)."]
    series = series_sentence(what, name)
    alone = ("" if what.unchanged_samples_per_s is None else
             f" Without the change, the same model gives ~{what.unchanged_samples_per_s:,.0f} samples/s at best with up "
             f"to {what.compared_up_to_workers} workers (what the settings alone would do)"
             + ("" if what.changed_samples_per_s is None else
                f"; with it, ~{what.changed_samples_per_s:,.0f} over the same") + ".")
    return [f"{text}. {_upper(_knee(what, name))}{_binds(what.binds, what.binds_near)}. Predicted samples/s by num_workers: "
            f"{_curve(what)}.{series}{alone}"]


def series_sentence(what: WhatIfAnswer, name: Name) -> str:
    """' That knee, and the curve, have pin_memory on instead of off; with the pick's ... the model
    reaches only ~X samples/s: ... binds.' where a what-if is answered for another series than
    the pick's (`WhatIfAnswer.series_samples_per_s`), else ''."""
    if what.series_samples_per_s is None or what.base is None or what.knee is None:
        return ""
    return (f" That knee, and the curve, have {_series_change(what.knee, what.base)}; with the pick's "
            f"{_series_values(what.knee, what.base)} ({name(what.base)}) the model reaches only "
            f"~{what.series_samples_per_s:,.0f} samples/s{_binds(what.series_binds)}.")


def profile_summary_line(profile: StageProfile, name: Name) -> str:
    """The stage profile of the pick in one line (the short block, when the loader binds): the
    stages of at least the profile's share that counts, the rest together, the build time's
    p50 and p99, and what it cost."""
    rows = [r for r in profile.stages if r.share is not None and r.ms_per_sample is not None]
    big = [r for r in rows if (r.share or 0.0) >= profile.rest_share_min]
    other = sum(r.share or 0.0 for r in rows if r not in big)
    parts = [f"{r.name} {r.share:.0%}" for r in big] + ([f"other stages {other:.0%}"] if other >= 0.005 else [])
    who = "" if profile.settings is None else f" ({name(profile.settings)})"
    cost = f"{profile.cost.wall_s:.1f} s" + ("" if profile.sweep_share is None else
                                             f", {profile.sweep_share:.0%} of the sweep")
    if not parts:
        return (f"Stage profile of the pick{who}: no sample was timed within its share of the budget (it took "
                f"{cost}; loaderbench profile times it on its own).")
    text = f"Stage profile of the pick{who}, where each sample's time goes: {', '.join(parts)}"
    # The same figures as --verbose's tail line (its basis: wall less the time queued for a CPU
    # where that was read), else the profile's own percentiles.
    t, b = profile.tail, profile.sample_build_ms
    if t is not None:
        text += f"; per-sample build time p50 {_ms(t.p50_ms)} ms, p99 {_ms(t.p99_ms)} ms ({t.basis})"
    elif b is not None:
        text += f"; per-sample build time p50 {_ms(b.p50)} ms, p99 {_ms(b.p99)} ms"
    return text + f" (it took {cost}; --verbose: the table)."


def profile_lines(profile: StageProfile, name: Name) -> list[str]:
    """The stage profile of the pick under `--verbose`: one line per stage, then the tail, the
    decoders timed on the dataset's JPEGs, nvJPEG on the GPU, a batched fetch, and what the
    profile cost."""
    who = "" if profile.settings is None else f" ({name(profile.settings)}, {profile.device or 'cpu'})"
    out = [f"Stage profile of the pick{who}: {profile.samples} samples timed, built in {profile.sampled_in} "
           "(ms per sample wall, CPU, share; loaderbench profile shows the same table):"]
    for r in profile.stages:
        if r.ms_per_sample is None:
            continue
        notes = []
        if r.kind == StageKind.DECODE.value and profile.decoders:
            notes.append(", ".join(profile.decoders))
        if r.waiting:
            notes.append(f"waits: blocked {r.blocked_fraction or 0.0:.0%}")
        if r.queued and r.ms_per_sample:
            notes.append(f"queued for a CPU {(r.queued_ms_per_sample or 0.0) / r.ms_per_sample:.0%} of wall")
        out.append(f"  {r.name} ({r.where}): {_ms(r.ms_per_sample)} ms, CPU {_ms(r.cpu_ms_per_sample or 0.0)} ms, "
                   f"{r.share or 0.0:.0%}" + (f"; {'; '.join(notes)}" if notes else ""))
    t = profile.tail
    if t is not None:
        out.append(f"  Per-sample build time ({t.basis}): p50 {_ms(t.p50_ms)} ms, p99 {_ms(t.p99_ms)} ms, the slowest "
                   f"1% {_ms(t.slowest_ms)} ms on average: {t.ratio:.1f}x the median"
                   + (f" (a long tail: {t.threshold:g}x or more)." if t.long else "."))
    d = profile.decoder_timing
    if d is not None:
        text = (f"  JPEG decoders on {d.images} of the dataset's JPEGs ({d.threads} intra-op thread"
                f"{'s' if d.threads != 1 else ''}, CPU ms per image): PIL "
                f"{_ms(d.pil_cpu_ms)}, torchvision.io {_ms(d.torchvision_cpu_ms)}")
        if d.transforms_pil_cpu_ms is not None and d.transforms_tensor_cpu_ms is not None:
            text += (f"; the transforms after the decode ({', '.join(d.transforms)}) {_ms(d.transforms_pil_cpu_ms)} "
                     f"on PIL's image, {_ms(d.transforms_tensor_cpu_ms)} on the tensor")
            if d.dropped:
                text += f" ({', '.join(d.dropped)} not needed on a tensor)"
        if d.stopped_at:
            text += f"; {d.stopped_at} refused the tensor (it and those after it kept at their PIL cost)"
        out.append(text + ".")
    g = profile.gpu_decode
    if g is not None:
        out.append(f"  nvJPEG on {g.device}, a batch of {g.batch_size} of the dataset's JPEGs: {g.decode_ms_per_batch:.1f} "
                   f"ms of GPU time, {g.decode_crop_ms_per_batch:.1f} ms with the crops, {g.cpu_ms_per_batch:.1f} ms of "
                   "the calling thread's CPU.")
    bf = profile.batched_fetch
    if bf is not None:
        out.append(f"  A batched fetch (dataset[list of {bf.items} indices], the dataset has no __getitems__): "
                   f"{_ms(bf.batch_ms)} ms against {_ms(bf.one_ms)} ms for one: about {_ms(bf.fixed_ms)} ms fixed per "
                   f"call and {_ms(bf.per_item_ms)} ms per item.")
    c = profile.cost
    took = f"  The profile took {c.wall_s:.1f} s of its {c.time_budget_s:.1f} s budget"
    if profile.sweep_share is not None:
        took += f" ({profile.sweep_share:.0%} of the sweep's wall time)"
    if c.overhead is not None:
        # Timed and plain samples are different ones: a difference of a few % is their spread.
        took += (f"; its stage timing cost {c.overhead:+.1%} per sample" if c.overhead > 0.005 else
                 f"; its stage timing cost nothing measurable per sample ({c.overhead:+.1%}, within the samples' "
                 "spread)")
    if c.cut_short:
        took += f"; the budget ended {', '.join(c.cut_short)} early"
    out.append(took + ".")
    return out


_CHANGE_WORDS = {
    ChangeKind.BATCHED_FETCH: ("__getitems__ on the dataset (fetch a batch's samples in one call: the fixed cost per "
                               "call paid once per batch)"),
}


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def _differing(knee: LoaderSettings, base: LoaderSettings) -> list[Axis]:
    """The axes besides num_workers where a what-if's knee differs from the pick."""
    return [a for a in GRID_AXES if a.name != "num_workers" and getattr(knee, a.name) != getattr(base, a.name)]


def _series_values(knee: LoaderSettings, base: LoaderSettings) -> str:
    """The pick's own values where a what-if's knee differs from it: "pin_memory off"."""
    return ", ".join(a.words(getattr(base, a.name)) for a in _differing(knee, base))


def _series_change(knee: LoaderSettings, base: LoaderSettings) -> str:
    """How a what-if's knee differs from the pick: "pin_memory on instead of off"."""
    return ", ".join(instead(a.name, getattr(knee, a.name), getattr(base, a.name)) for a in _differing(knee, base))


def _change_head(c: PipelineChange) -> str:
    q = c.question
    if c.kind is ChangeKind.DECODER and q is not None and q.decode is not None:
        return _upper(_DECODE_WORDS[q.decode])
    if c.kind is ChangeKind.MORE_CPUS and q is not None:
        return f"{q.cpus} usable CPUs"
    if c.kind is ChangeKind.CHEAPER_STAGE and q is not None and q.stages:
        st = q.stages[0]
        return f"{st.name} {_factor(st.speedup)}x cheaper"
    return _upper(_CHANGE_WORDS.get(c.kind) or c.kind.value)


def _prediction_words(c: PipelineChange, pick_samples_per_s: float, name: Name) -> str:
    a = c.answer
    assert a is not None
    if a.cases:
        loader = "" if a.loader_gain is None else f" ~{a.loader_gain:.1f}x the loader rate,"
        parts = []
        for case in a.cases:
            if case.knee is None or not case.knee_samples_per_s:
                continue
            how = ("serialised with the step" if case.mode is DecodeMode.SERIALISED
                   else "on a side stream no better (the decode holds the main thread)" if case.host_waits
                   else "overlapped on a side stream")
            parts.append(f"{how} ~{case.knee_samples_per_s:,.0f} samples/s "
                         f"({case.knee_samples_per_s / pick_samples_per_s:.2f}x){_binds(case.binds, case.binds_near)}")
        return f"predicted{loader} " + "; ".join(parts)
    # What runs close behind the step is a sentence of its own (`_near_sentence`).
    then = "" if a.binds is None else f", then {BINDS_WORDS[a.binds]}"
    series = ("" if a.series_samples_per_s is None or a.knee is None or a.base is None else
              f" with {_series_change(a.knee, a.base)} (~{a.series_samples_per_s:,.0f} with the pick's "
              f"{_series_values(a.knee, a.base)})")
    loader = "" if a.loader_gain is None else f"; the loader's rate ~{a.loader_gain:.1f}x"
    # 0 workers is a setting, not an estimate of a count: no "~" before it.
    workers = "0 workers" if a.knee_workers == 0 else f"~{a.knee_workers} worker{'' if a.knee_workers == 1 else 's'}"
    return (f"predicted ~{a.knee_samples_per_s or 0.0:,.0f} samples/s ({c.gain or 0.0:.2f}x the pick{loader}) at "
            f"{workers}{series}{then}")


def _near_sentence(c: PipelineChange) -> str:
    """' The usable CPUs run close behind: a measured run there would still read loader-bound.'
    where the step binds the change's prediction with the loader close behind it
    (analysis/predict.binds_near), else ''."""
    a = c.answer
    if a is None or a.cases or a.binds is None or a.binds_near not in _NEAR_WORDS:
        return ""
    verb = "runs" if a.binds_near is Binds.STORAGE else "run"
    return f" {_upper(_NEAR_WORDS[a.binds_near])} {verb} close behind: a measured run there would still read loader-bound."


def _more_workers_alone(c: PipelineChange, pick_samples_per_s: float, tolerance: float) -> str:
    """' Without the change, more workers alone: ~X.' where the model puts that past the pick; where
    the change's best over the same worker counts is not its knee's figure, both bests, so the
    two figures compared are like with like."""
    a = c.answer
    alone = None if a is None else a.unchanged_samples_per_s
    if a is None or alone is None or alone <= (1.0 + tolerance) * pick_samples_per_s:
        return ""
    best, up_to = a.changed_samples_per_s, a.compared_up_to_workers
    if best is None or up_to is None or abs(best - (a.knee_samples_per_s or 0.0)) <= 0.01 * best:
        return f" Without the change, more workers alone: ~{alone:,.0f}."
    return (f" At best with up to {up_to} workers: ~{best:,.0f} with the change, ~{alone:,.0f} with more workers "
            "alone.")


def _plateau_binds(b: BeyondKnobs) -> str:
    """What binds at the plateau, in words; where that is the step but the plateau sits below the
    step's own rate (the compute ceiling) by more than the tolerance, what holds it there too: the
    main thread takes each batch (and copies it) between steps, and the loader runs close behind
    (the model's soft corner, NOTE [pipeline model] in analysis/predict.py)."""
    assert b.binds is not None and b.plateau_samples_per_s is not None
    c = b.compute_samples_per_s
    if b.binds is Binds.STEP and c and b.plateau_samples_per_s < (1.0 - b.tolerance) * c:
        return (f"the step binds, held to {b.plateau_samples_per_s / c:.0%} of its ~{c:,.0f} samples/s alone (the "
                "compute ceiling) by the main thread taking each batch between steps and by a loader close behind")
    return BINDS_WORDS[b.binds]


def beyond_knobs_lines(b: BeyondKnobs, name: Name) -> list[str]:
    """Where the settings stop: the changes to the pipeline that would act on the bottleneck,
    those measured first, each predicted one labelled, with its gain and what then binds."""
    if not b.changes:
        if not b.profiled:
            why = _NO_PROFILE[b.no_profile or NoProfile.NOT_TAKEN]
            return [f"Beyond the settings: this run has no stage profile of its pick, so no change to the pipeline "
                    f"is predicted ({why})."]
        plateau = ("" if b.binds is None or b.plateau_samples_per_s is None else
                   f"the pipeline model puts this series' plateau at ~{b.plateau_samples_per_s:,.0f} samples/s, "
                   f"where {_plateau_binds(b)} (a prediction): ")
        return [f"Beyond the settings: {plateau}no change to the pipeline that the stage profile prices is "
                f"predicted to gain more than {b.tolerance:.0%}."]
    by, held = ("", "") if not b.sustained_samples_per_s else (
        f" by the search's windows ({b.sustained_samples_per_s:,.0f} over the longer window)",
        "; each change is weighed against the search's figure, like with like")
    out = [f"Beyond the settings (no setting clears the loader bottleneck at {b.samples_per_s:,.0f} samples/s{by}, "
           f"stall {b.stall_fraction:.0%}{held}): changes to the pipeline, measured ones first, predictions labelled:"]
    for c in b.changes:
        parts = []
        if c.measured is not None and c.measured_samples_per_s is not None:
            flag = f" with --decoder {c.measured.decoder}" if c.kind is ChangeKind.DECODER else ""
            parts.append(f"measured{flag}: {c.measured_samples_per_s:,.0f} samples/s "
                         f"({c.measured_samples_per_s / b.samples_per_s:.2f}x the pick; {name(c.measured)})")
        if c.answer is not None:
            parts.append(_prediction_words(c, b.samples_per_s, name) + ("" if not c.clears else ", clearing the stall"))
        out.append(f"  {_change_head(c)}: " + "; ".join(parts) + "." + _near_sentence(c)
                   + _more_workers_alone(c, b.samples_per_s, b.tolerance))
    return out
