"""A watched training loop in sentences (`Watch.report()`, the integrations' summaries) and the
prediction line that `show` adds under a watched result."""

from __future__ import annotations

from typing import Any

from loaderbench.conclusions import IdleWorkers, MoreWorkers
from loaderbench.render.findings import finding_sentences
from loaderbench.results import ResultSet


def _workers(n: int) -> str:
    return "worker" if n == 1 else "workers"


def prediction_lines(prediction: MoreWorkers | None) -> list[str]:
    """`Analysis.more_workers` of a watched result in words, labelled a prediction; [] when
    there is none."""
    if prediction is None:
        return []
    w = prediction.num_workers
    knee = prediction.knee_workers
    if knee is not None and knee > (w or 0):
        stall = prediction.knee_stall_fraction
        # "Clear it" only when the predicted stall leaves the input-bound bands; otherwise the
        # knee is where more workers stop helping (another resource binds there).
        how = "would clear it" if prediction.clears else "would give the most that more workers can"
        return [
            f"Prediction (the pipeline model fitted on this run, not a measurement): about {knee} {_workers(knee)} "
            f"{how}: ~{prediction.knee_samples_per_s or 0.0:,.0f} samples/s"
            + ("" if stall is None else f", stall ~{stall:.0%}")
            + f" on {prediction.usable_cpus} usable CPUs"
            + ("" if prediction.clears else " (past it the CPUs or the main process bind)")
            + f"; measure it with num_workers={knee} (or `loaderbench sweep`)."
        ]
    needed = prediction.workers_needed
    if needed is not None and prediction.shares_cpus:
        return [
            f"Prediction (batch build time over the step's cycle, not a measurement): about {needed} "
            f"{_workers(needed)} would build batches fast enough (num_workers={w} now), but the step itself used "
            f"~{prediction.step_cores or 0.0:.1f} of the {prediction.usable_cpus} usable CPUs and loading needs "
            f"~{prediction.load_cores or 0.0:.1f} more: workers would take the step's CPUs and slow it, so the "
            "stall would move into the step rather than clear (fewer threads for the step, e.g. "
            f"torch.set_num_threads, leave them room); measure it with num_workers={needed}."
        ]
    if needed is not None:
        return [
            f"Prediction (batch build time over the step's cycle, not a measurement): about {needed} "
            f"{_workers(needed)} would clear it (num_workers={w} now); measure it with num_workers={needed}."
        ]
    return []


def watch_lines(rs: ResultSet) -> list[str]:
    """The watched config's figures, verdict, headroom and prediction, one sentence a line."""
    if not rs.results:
        return ["loaderbench watch: nothing was watched."]
    r = rs.results[0]
    settings = ", ".join(f"{k}={v}" for k, v in r.settings.dataloader_kwargs().items())
    if r.summary is None:
        return [f"loaderbench watch ({settings}): no measurement: {r.error or r.status}."]
    s = r.summary
    t = r.trials[0]
    lines = [
        f"loaderbench watch ({settings}): {len(t.step_s)} step{'s' if len(t.step_s) != 1 else ''} measured after "
        f"{t.warmup_batches + 1} warm-up "
        f"batches: throughput {s.samples_per_s:,.0f} samples/s, stall fraction {s.stall_fraction:.1%} "
        f"({'' if s.band is None else s.band.value}), data-wait p50 / p95 {s.data_wait_p50_s * 1e3:.1f} / "
        f"{s.data_wait_p95_s * 1e3:.1f} ms, step time p50 {s.step_p50_s * 1e3:.1f} ms, first batch "
        f"{s.first_batch_s:.2f} s; verdict: {'' if s.verdict is None else s.verdict.value}."
    ]
    lines.extend(loader_lines(rs))
    if s.rank_stall_fraction:
        per = ", ".join(f"rank {i}: {x:,.0f} samples/s, stall {f:.1%}"
                        for i, (x, f) in enumerate(zip(s.rank_samples_per_s, s.rank_stall_fraction)))
        lines.append(f"Per rank: {per}; slowest rank: {s.slowest_rank}.")
    h = None if rs.analysis is None else rs.analysis.headroom
    if h is not None:
        text = f"Headroom: removing all data-wait makes it at most {h.max_speedup_from_stall:.2f}x faster"
        if h.max_speedup_to_ceiling is not None:
            text += f"; the step alone would run {h.max_speedup_to_ceiling:.2f}x its throughput"
        lines.append(text + ".")
    lines.extend(prediction_lines(None if rs.analysis is None else rs.analysis.more_workers))
    # Workers the dataset gives no work (the batches each delivered in the window).
    idle = [f for f in (rs.analysis.notes if rs.analysis is not None else []) if isinstance(f, IdleWorkers)]
    lines.extend(finding_sentences(idle, lambda st: f"num_workers={st.num_workers}"))
    for w in r.warnings:
        lines.append(f"warning: {w.message}")
    return lines


def loader_lines(rs: ResultSet) -> list[str]:
    """The watched loader's class when it is not torch's DataLoader, its own settings set
    otherwise than their defaults, and those left at their defaults with the sweep that would
    measure them (before more workers: a setting of the loader may be what costs), all from
    `Analysis.loader`; [] for torch's DataLoader."""
    loader = None if rs.analysis is None else rs.analysis.loader
    ref = None if loader is None else loader.name
    if not ref or not rs.results:
        return []
    changed = dict(rs.results[0].settings.loader_args)
    defaults = loader.defaults if loader is not None else {}
    text = f"Loader: {ref}"
    if changed:
        text += "; its own settings: " + ", ".join(f"{k}={v!r}" for k, v in changed.items())
    if defaults:
        args = " ".join(f"--loader-arg {k}=V1,V2" for k in defaults)
        text += (("; " if not changed else "; left at their defaults: ")
                 + ", ".join(f"{k}={v!r}" for k, v in defaults.items())
                 + ("" if changed else " (its default)" if len(defaults) == 1 else " (their defaults)")
                 + f"; what they cost is not measured here: `loaderbench sweep ... --loader {ref} {args}` "
                 "measures them, before more workers")
    return [text + "."]


def training_arguments_line(fields: dict[str, Any], predicted: bool) -> str:
    """The Hugging Face `TrainingArguments` fields to set (`dataloader_num_workers`, ...), as
    code, labelled a prediction when the worker count was predicted."""
    args = ", ".join(f"{k}={v!r}" for k, v in fields.items())
    label = "predicted, not measured: measure it" if predicted else "the watched settings"
    return f"    TrainingArguments(..., {args})  # {label}"
