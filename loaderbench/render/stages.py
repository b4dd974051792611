"""The stage profile as a person reads it (a rich table and sentences) and as JSON.

Formats only what analysis/stages.py computed; the measuring is in measure/stages.py.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from loaderbench import kinds
from loaderbench.analysis.stages import StageNA, StageProfile, StageRow
from loaderbench.model import DatasetSpec, LoaderSettings, StageKind

NA = "n/a"

_NA_TEXT = {
    StageNA.NO_CUDA.value: "no CUDA device",
    StageNA.PIN_OFF.value: "pin_memory off",
    StageNA.NO_WORKERS.value: "num_workers=0: no batch comes from a worker",
    StageNA.NOT_REACHED.value: "the time budget ended before it was timed",
}


def _ms(v: float | None) -> str:
    if v is None:
        return NA
    return f"{v:.3f}" if v < 0.1 else f"{v:.2f}"


def _fetch(profile: StageProfile) -> str:
    """What builds one sample: `__getitem__`, or an IterableDataset's `__iter__` (its next item)."""
    return "__iter__" if profile.iterable else "__getitem__"


def _note(row: StageRow, profile: StageProfile) -> str:
    if row.na is not None:
        return _NA_TEXT.get(row.na, row.na)
    parts: list[str] = []
    kind = StageKind(row.kind)
    if kind is StageKind.READ and not row.calls_per_sample:
        parts.append(f"no file read seen in {_fetch(profile)}")
    elif kind is StageKind.DECODE and not row.calls_per_sample:
        parts.append("no PIL or torchvision decode seen")
    elif kind is StageKind.DECODE and profile.decoders:
        parts.append(", ".join(profile.decoders))
    elif kind is StageKind.REST and not profile.transforms_found:
        parts.append("no torchvision Compose found on the dataset")
    if row.waiting and row.ms_per_sample:
        parts.append(f"waits: blocked {row.blocked_fraction or 0.0:.0%}")
    if row.queued and row.ms_per_sample:
        parts.append(f"queued for a CPU {(row.queued_ms_per_sample or 0.0) / row.ms_per_sample:.0%} of wall")
    return "; ".join(parts)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _settings_text(settings: LoaderSettings) -> str:
    text = ", ".join(f"{k}={v}" for k, v in settings.dataloader_kwargs().items())
    return text if settings.decoder == "pil" else f"{text}, decoder={settings.decoder}"


def header_lines(dataset: DatasetSpec, settings: LoaderSettings, device: str, profile: StageProfile) -> list[str]:
    """What was profiled and how: the dataset, the settings, the device, where the samples
    were built."""
    where = profile.sampled_in
    threads = profile.torch_threads
    threads_text = "" if threads is None else f", {threads} intra-op thread{'s' if threads != 1 else ''}"
    as_in = " (as in a worker)" if settings.num_workers and where == "this process" else ""
    items = "items (IterableDataset)" if profile.iterable else "samples"
    batches = f"{_count(profile.batches_collated, 'batch', 'batches')} collated"
    if profile.batches_received:
        batches += (f", {_count(profile.batches_received, 'batch', 'batches')} received from "
                    f"{_count(settings.num_workers, 'worker', 'workers')} (built before they were taken)")
    return [
        f"stage profile: {kinds.describe(dataset.to_dict())} | {_settings_text(settings)} | device: {device}",
        f"{profile.samples} {items} built in {where}{as_in}{threads_text}; {batches}",
    ]


def stage_table(profile: StageProfile) -> Table:
    """The stage table: ms and CPU ms per sample, share, and a note per stage."""
    table = Table(title="where each sample's time goes", title_justify="left")
    for name, justify in (("stage", "left"), ("where", "left"), ("ms/sample", "right"),
                          ("CPU ms/sample", "right"), ("share", "right"), ("note", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in profile.stages:
        share = NA if row.share is None else f"{row.share:.0%}"
        table.add_row(row.name, row.where, _ms(row.ms_per_sample), _ms(row.cpu_ms_per_sample), share,
                      _note(row, profile))
    rows = [r for r in profile.stages if r.ms_per_sample is not None]
    total = sum(r.ms_per_sample or 0.0 for r in rows)
    cpu = sum(r.cpu_ms_per_sample or 0.0 for r in rows)
    table.add_row("total", "", _ms(total), _ms(cpu), "100%" if rows else NA, "", end_section=False)
    return table


def function_table(profile: StageProfile) -> Table:
    """The rest of `__getitem__` by function (the profiler pass)."""
    table = Table(title=f"the rest of {_fetch(profile)} by function (cProfile, self time, outside the stages above)",
                  title_justify="left")
    for name, justify in (("function", "left"), ("where", "left"), ("ms/sample", "right"),
                          ("share of the rest", "right"), ("calls/sample", "right"), ("called from", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for f in profile.functions:
        table.add_row(f.function, f.location, _ms(f.self_ms_per_sample),
                      NA if f.share_of_rest is None else f"{f.share_of_rest:.0%}", f"{f.calls_per_sample:g}",
                      f.called_from or "")
    return table


def summary_lines(profile: StageProfile) -> list[str]:
    """The sentences under the table: build-time percentiles, the profile's cost and time."""
    lines: list[str] = []
    b = profile.sample_build_ms
    if b is not None:
        how = "with the stage timing" if not profile.cost.plain_samples else "without the profile"
        lines.append(
            f"Per-sample build time ({_fetch(profile)}, {how}): p50 {_ms(b.p50)} ms, p90 {_ms(b.p90)} ms, "
            f"p99 {_ms(b.p99)} ms, max {_ms(b.max)} ms."
        )
    c = profile.cost
    if c.block_item_ms is not None:
        lines.append(f"The profile's cost: not measured. The stream finishes its items in blocks (its slowest item "
                     f"took {_ms(c.block_item_ms)} ms, a quarter or more of its run's time), so two runs of "
                     f"{c.samples} items differ by where the blocks fall; the per-item figures are each run's "
                     "mean (more --samples for more blocks in a run).")
    elif c.overhead is not None and c.plain_ms_per_sample is not None and c.profiled_ms_per_sample is not None:
        turn = "in the run after them" if profile.iterable else "in turn with them"
        text = (f"The profile's cost: {_fetch(profile)} took {_ms(c.profiled_ms_per_sample)} ms per sample with the "
                f"stage timing ({c.samples} samples) and {_ms(c.plain_ms_per_sample)} ms without ({c.plain_samples} "
                f"other samples, {turn}): {c.overhead:+.1%}")
        if c.attribution_overhead is not None:
            text += f"; under cProfile (the function table) {c.attribution_overhead:+.0%}"
        lines.append(text + ".")
    budget = f"The profile took {c.wall_s:.1f} s of its {c.time_budget_s:g} s budget"
    if c.cut_short:
        budget += f"; the budget ended {', '.join(c.cut_short)} early (more --time-budget, or fewer --samples)"
    lines.append(budget + ".")
    waiting = [r.name for r in profile.stages if r.waiting]
    if waiting:
        lines.append(
            f"Waiting (blocked: over {profile.waiting_blocked_over:.0%} of the stage's time, less any time queued for a CPU, "
            f"neither on a CPU nor queued for one): {', '.join(waiting)}: the time goes to I/O, a lock or a sleep, "
            "so more CPUs do not shorten it."
        )
    if profile.other_load and profile.queued_share is not None:
        lines.append(
            f"Other load: the profiling thread was queued for a CPU during {profile.queued_share:.0%} of the samples' "
            "time (runnable, not running), so wall times are longer than on a quiet machine; CPU times are not."
        )
    if profile.functions and not profile.rest_counts:
        lines.append(
            f"The rest of {_fetch(profile)} is under {profile.rest_share_min:.0%} of a sample's time: its functions are in "
            "--format json (rest_functions)."
        )
    return lines


def render_profile(outcome: Any, console: Console) -> None:
    """A profile (orchestration.profile.ProfileOutcome) as tables and sentences on `console`."""
    profile: StageProfile = outcome.profile
    for line in header_lines(outcome.dataset, outcome.settings, outcome.device, profile):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(stage_table(profile))
    for line in summary_lines(profile):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if profile.functions and profile.rest_counts:
        console.print(function_table(profile))
        if profile.unlisted_share is not None:
            console.print(
                f"Not in these functions: {profile.unlisted_share:.0%} of the rest (other functions, and lines of "
                f"{_fetch(profile)} itself after a recognised stage, which the profiler does not see).",
                highlight=False, markup=False, soft_wrap=True)


def profile_json(outcome: Any) -> str:
    """A profile as one JSON document: `stages` ({name, kind, where, ms_per_sample,
    cpu_ms_per_sample, share, ...}), `sample_build_ms` ({p50, p90, p99, max}), `cost`,
    `rest_functions`, `decoders`, the dataset and settings, and the raw timings (`raw`)."""
    from loaderbench._version import __version__

    return json.dumps({"tool": "loaderbench", "tool_version": __version__, "kind": "stage-profile",
                       **outcome.to_dict()}, indent=1)
