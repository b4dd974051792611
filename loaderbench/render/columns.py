"""The table's columns and cells: one row per config (and per predicted config of a search),
the same strings in every format; which columns a result shows.

Formats only what analysis/ concluded (the result set's `Analysis` and each config's `Summary`).
"""

from __future__ import annotations

from loaderbench.conclusions import (
    Analysis,
    Prediction,
)
from loaderbench.model import (
    GRID_AXES,
    ConfigResult,
    LoaderSettings,
    Summary,
    Verdict,
    WarningKind,
    loader_arg_text,
)
from loaderbench.results import ResultSet

NA = "n/a"


def cuda_used(rs: ResultSet) -> bool:
    env = rs.environment or {}
    dev = (rs.config.get("measure") or {}).get("device", "auto")
    return bool(env.get("cuda_available")) and dev != "cpu"


def knee_key(rs: ResultSet) -> str | None:
    rec = rs.recommendation
    return None if rec is None or rec.settings is None else rec.settings.key()


def analysis_of(rs: ResultSet) -> Analysis:
    """The analysis every rendering formats (`analysis.analyze` sets it). Raises ValueError on
    a result set that was not analysed."""
    if rs.analysis is None:
        raise ValueError("render a result set after analysis.analyze()")
    return rs.analysis


def _fmt(v: float | None, spec: str, scale: float = 1.0) -> str:
    return NA if v is None else format(v * scale, spec)


def _h2d_cell(m: Summary) -> str:
    if m.h2d_p50_s is None:
        return NA
    parts = [f"{m.h2d_p50_s * 1e3:.1f}"]
    parts.append(NA if m.h2d_gb_per_s is None else f"{m.h2d_gb_per_s:.0f}")
    parts.append(NA if m.h2d_hidden_fraction is None else f"{m.h2d_hidden_fraction:.0%}")
    return " · ".join(parts)


def row_cells(r: ConfigResult, *, cuda: bool) -> dict[str, str]:
    """The human-readable cells of one config (same strings in every format)."""
    s = r.settings
    cells = {"cache": r.cache}
    for a in GRID_AXES:
        idle = (a.cuda_only and not cuda) or (a.workers_only and s.num_workers == 0)
        cells[a.name] = NA if idle else a.cell(getattr(s, a.name))
    cells.update(loader_arg_cells(s))
    if cuda and s.pin_memory and r.has(WarningKind.PINNING_INEFFECTIVE):
        cells["pin_memory"] = "ineffective"
    m = r.summary
    if r.status != "ok" or m is None:
        cells.update({k: "" for k in METRIC_COLUMNS})
        error = r.error or ""
        if error.lower().startswith(r.status + ":"):
            error = error[len(r.status) + 1:].strip()
        cells["verdict"] = f"{r.status.upper()}: {error}".strip()
        return cells
    spread = ""
    if (m.repeats > 1 and m.samples_per_s_min is not None) or round(m.uncertainty * 100) >= 1:
        spread = f" ±{m.uncertainty:.0%}"  # half the repeats' spread, or the windows' own uncertainty
    cells.update(
        {
            "samples_per_s": f"{m.samples_per_s:,.0f}{spread}",
            "ceiling_pct": NA if m.ceiling_share is None else f"{100 * m.ceiling_share:.0f}%",
            "loader_ceiling": loader_ceiling_cell(m),
            "stall": f"{m.stall_fraction:.0%}" if m.stall_fraction >= 0.10 else f"{m.stall_fraction:.1%}",
            "wait_ms": f"{m.data_wait_p50_s * 1e3:.1f} / {m.data_wait_p95_s * 1e3:.1f}",
            "compute_ms": _fmt(m.compute_p50_s, ".1f", 1e3),
            "h2d": _h2d_cell(m),
            "storage": NA if m.storage_fraction is None else (
                f"{m.storage_mb_per_s or 0:,.1f} · {m.storage_fraction:.0%}" + _served_suffix(m)
            ),
            "gpu_util_pct": _fmt(m.gpu_util_pct, ".0f")
            + ("" if m.gpu_sm_active_pct is None else f" (SM {m.gpu_sm_active_pct:.0f})"),
            "cpu_cores": _fmt(m.cpu_util_pct, ".1f", 0.01),
            "memory_mib": _fmt(None if m.memory_pss_bytes is None else float(m.memory_pss_bytes), ".0f", 2**-20),
            "first_batch_s": _fmt(m.first_batch_s, ".2f"),
            "verdict": verdict_text(m, s.num_workers),
        }
    )
    cells.update(rank_cells(m))
    if not m.ranked:
        cells["verdict"] = "duplicates samples: not ranked"
    elif m.noisy:
        cells["verdict"] += " (noisy)"
    return cells


LOADER_ARG = "loader_arg:"  # the cell key of a loader argument's column: LOADER_ARG + its name


def loader_arg_cells(s: LoaderSettings) -> dict[str, str]:
    """The cells of a config's loader arguments (`--loader-arg`), keyed LOADER_ARG + name."""
    return {LOADER_ARG + k: loader_arg_text(v) for k, v in s.loader_args}


def loader_arg_names(rs: ResultSet) -> list[str]:
    """The loader arguments the configs set, in the order declared (`Analysis.loader`)."""
    loader = analysis_of(rs).loader
    return [] if loader is None else list(loader.args)


def loader_ceiling_cell(m: Summary) -> str:
    """The loader ceiling's cell: its sustained rate, "≥X" where the probe gave only a bound
    (the loader alone delivers at least X samples/s; footer.bound_lines says why), n/a when
    it was not probed."""
    if m.loader_ceiling_samples_per_s is None and m.loader_ceiling_bound_samples_per_s is not None:
        return f"≥{m.loader_ceiling_bound_samples_per_s:,.0f}"
    return _fmt(m.loader_ceiling_samples_per_s, ",.0f")


def _served_suffix(m: Summary) -> str:
    """` (part cached)` or ` (page cache)`-like: where the samples came from, when not the device."""
    if m.served_from is not None and m.served_from.is_cache:
        return f" ({m.served_from.value})"
    return " (part cached)" if m.part_cached else ""


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.10 else f"{x:.1%}"


def verdict_text(m: Summary, num_workers: int | None = None) -> str:
    """A summary's verdict as the table prints it: the verdict, then `(stall every N batches)`
    for a periodic loader-bound wait, `(tail)` when only the tail of the waits says so; `step
    slowed +23%` with how much slower the step ran than alone (`(step +23%)` after another
    verdict whose step slowed so); `(3 of 4 workers idle)` where
    workers of the row's `num_workers` delivered no batch or too few."""
    text = "" if m.verdict is None else m.verdict.value
    if m.verdict is Verdict.STEP_SLOWED and m.step_slowdown is not None:
        text += f" {m.step_slowdown:+.0%}"
    if m.stall_period_batches:
        text += f" (stall every {m.stall_period_batches} batches)"
    elif m.tail_only:
        text += " (tail)"
    if m.verdict is not Verdict.STEP_SLOWED and m.step_slowed and m.step_slowdown is not None:
        text += f" (step {m.step_slowdown:+.0%})"
    if m.idle_workers and num_workers:
        text += f" ({m.idle_workers} of {num_workers} workers idle)"
    return text


def rank_cells(m: Summary) -> dict[str, str]:
    """Distributed sweeps: each rank's own samples/s (min-max over ranks) and stall fraction
    (every rank up to 4 ranks, else min-max and the slowest rank), the slowest rank marked *."""
    if not m.rank_samples_per_s:
        return {"rank_rate": NA, "rank_stall": NA}
    rates, stalls = m.rank_samples_per_s, m.rank_stall_fraction
    rate = f"{min(rates):,.0f}–{max(rates):,.0f}"
    if len(stalls) <= 4:
        stall = " · ".join(
            f"r{r} {_pct(x)}" + ("*" if r == m.slowest_rank else "") for r, x in enumerate(stalls)
        )
    else:
        stall = f"{_pct(min(stalls))}–{_pct(max(stalls))}, slowest r{m.slowest_rank}"
    return {"rank_rate": rate, "rank_stall": stall}


COLUMNS: list[tuple[str, str]] = [
    ("cache", "cache"),
    *((a.name, a.header) for a in GRID_AXES),
    ("samples_per_s", "samples/s"),
    ("ceiling_pct", "% of ceiling"),
    ("loader_ceiling", "loader alone /s"),
    ("stall", "stall"),
    ("rank_rate", "per rank /s"),
    ("rank_stall", "stall by rank"),
    ("wait_ms", "wait ms p50 / p95"),
    ("compute_ms", "compute ms"),
    ("h2d", "H2D ms · GB/s · hidden"),
    ("storage", "disk MB/s · share read"),
    ("gpu_util_pct", "GPU util %"),
    ("cpu_cores", "CPU cores"),
    ("memory_mib", "PSS MiB"),
    ("first_batch_s", "1st batch s"),
    ("verdict", "verdict"),
]


METRIC_COLUMNS = [k for k, _ in COLUMNS[1 + len(GRID_AXES):]]


CUDA_ONLY_COLUMNS = (*(a.name for a in GRID_AXES if a.cuda_only), "gpu_util_pct", "h2d")


def constant_settings(rs: ResultSet) -> dict[str, str]:
    """Settings columns whose cell is the same in every row, the predicted rows included (shown
    once in the header)."""
    cuda = cuda_used(rs)
    out: dict[str, str] = {}
    if not rs.results:
        return out
    predicted = [p.settings for p in predictions(rs)]
    for a in GRID_AXES:
        if a.name == "num_workers" or a.cuda_only:
            continue
        if a.optional and all(getattr(s, a.name) == a.unset for s in [*(r.settings for r in rs.results), *predicted]):
            out[a.name] = "default"  # never asked for: hidden, and not worth a mention
            continue
        values = {row_cells(r, cuda=cuda)[a.name] for r in rs.results if r.settings.num_workers > 0 or not a.workers_only}
        values |= {a.cell(getattr(s, a.name)) for s in predicted if s.num_workers > 0 or not a.workers_only}
        if len(values) == 1:
            out[a.name] = values.pop()
    for name in loader_arg_names(rs):
        cells = {loader_arg_cells(s).get(LOADER_ARG + name, "") for s in [*(r.settings for r in rs.results), *predicted]}
        if len(cells) == 1:
            out[LOADER_ARG + name] = cells.pop()
    return out


def visible_columns(rs: ResultSet) -> list[tuple[str, str]]:
    """The table's columns. Without CUDA, pin_memory, prefetch, H2D and GPU util are n/a
    everywhere; settings equal in every row are named once in the header instead."""
    hidden = set(constant_settings(rs))
    columns = list(COLUMNS)
    at = 1 + len(GRID_AXES)  # the loader arguments' columns follow the grid axes'
    columns[at:at] = [(LOADER_ARG + name, name) for name in loader_arg_names(rs)]
    if not cuda_used(rs):
        hidden |= set(CUDA_ONLY_COLUMNS)
    if all(r.cache == "as-is" for r in rs.results):
        hidden.add("cache")
    if all(r.summary is None or r.summary.storage_fraction is None for r in rs.results):
        hidden.add("storage")
    if all(r.summary is None or len(r.summary.rank_samples_per_s) < 2 for r in rs.results):
        hidden |= {"rank_rate", "rank_stall"}
    return [(k, h) for k, h in columns if k not in hidden]


PREDICTED = "predicted (not measured)"


def predicted_cells(p: Prediction, *, cuda: bool) -> dict[str, str]:
    """The cells of a config the search did not measure: its settings, and the model's
    samples/s and stall marked with ~ (analysis/predict.py); the measured-only columns empty."""
    s = p.settings
    cells = {"cache": ""}
    for a in GRID_AXES:
        idle = (a.cuda_only and not cuda) or (a.workers_only and s.num_workers == 0)
        cells[a.name] = NA if idle else a.cell(getattr(s, a.name))
    cells.update(loader_arg_cells(s))
    cells.update({k: "" for k in METRIC_COLUMNS})
    cells["samples_per_s"] = f"~{p.samples_per_s:,.0f}"
    if p.ceiling_share is not None:
        cells["ceiling_pct"] = f"~{100 * p.ceiling_share:.0f}%"
    if p.stall_fraction is not None:
        cells["stall"] = "~" + (f"{p.stall_fraction:.0%}" if p.stall_fraction >= 0.10 else f"{p.stall_fraction:.1%}")
    cells["verdict"] = PREDICTED
    return cells


def predictions(rs: ResultSet) -> list[Prediction]:
    """The model's predictions for the grid cells a search did not measure (none for a grid),
    with their share of the compute ceiling."""
    return analysis_of(rs).predictions

