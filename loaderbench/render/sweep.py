"""A sweep as a person reads it: the rich table, markdown, CSV and JSON renderings of a ResultSet.

Only formats what analysis/ concluded; never measures and never mutates.
"""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loaderbench import kinds
from loaderbench.analysis import statistics as stats
from loaderbench.analysis.advice import WORKER_THREADS_FN, worker_threads_def
from loaderbench.analysis.predict import Prediction
from loaderbench.model import (
    GRID_AXES,
    ConfigResult,
    Finding,
    FindingKind,
    ResultSet,
    ServedFrom,
    WarningKind,
)
from loaderbench.render.findings import finding_sentences
from loaderbench.render.nodes import node_lines, what_if_ranks_lines

NA = "n/a"


GPU_UTIL_LABEL = (
    "GPU util % = share of NVML sample windows in which any kernel ran (a cross-check, not capacity "
    "used; SM = share of SMs busy, from NVML GPM where the GPU supports it)"
)


def _cuda_used(rs: ResultSet) -> bool:
    env = rs.environment or {}
    dev = (rs.config.get("measure") or {}).get("device", "auto")
    return bool(env.get("cuda_available")) and dev != "cpu"


def _knee_key(rs: ResultSet) -> str | None:
    rec = rs.recommendation
    return None if rec is None or rec.settings is None else rec.settings.key()


def _fmt(v: float | None, spec: str, scale: float = 1.0) -> str:
    return NA if v is None else format(v * scale, spec)


def _h2d_cell(m: Any) -> str:
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
    if m.repeats > 1 and m.samples_per_s_min is not None:
        spread = f" ±{stats.relative_spread(m) / 2:.0%}"
    cells.update(
        {
            "samples_per_s": f"{m.samples_per_s:,.0f}{spread}",
            "ceiling_pct": (NA if not m.compute_ceiling_samples_per_s
                            else f"{100 * m.samples_per_s / m.compute_ceiling_samples_per_s:.0f}%"),
            "loader_ceiling": _fmt(m.loader_ceiling_samples_per_s, ",.0f"),
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
            "verdict": verdict_text(m),
        }
    )
    cells.update(rank_cells(m))
    if r.has(WarningKind.REPLICATED):
        cells["verdict"] = "duplicates samples: not ranked"
    elif stats.relative_spread(m) > stats.NOISY_SPREAD:
        cells["verdict"] += " (noisy)"
    return cells


def _served_suffix(m: Any) -> str:
    """` (part cached)` or ` (page cache)`-like: where the samples came from, when not the device."""
    served = m.served_from
    if served in (None, ServedFrom.STORAGE.value, ServedFrom.UNKNOWN.value):
        return " (part cached)" if m.storage_fraction is not None and 0.1 <= m.storage_fraction < 0.9 else ""
    return " (part cached)" if served == ServedFrom.MIXED.value else f" ({served})"


def _mb(x: float | None) -> str:
    return "?" if x is None else f"{x / 1e6:,.1f} MB"


def served_from_cache_lines(d: dict[str, Any]) -> list[str]:
    """The SERVED_FROM_CACHE finding in words: per row, what the device gave against what the
    samples needed, and which cache served the rest."""
    out = []
    why = {
        ServedFrom.MIXED.value: "part came from a cache (read() returned {chars})",
        ServedFrom.PAGE_CACHE.value: "read() returned {chars}: the OS page cache served them",
        ServedFrom.MEMORY_FS.value: "the files live on an in-memory filesystem (tmpfs): there is no device to read",
        ServedFrom.DATASET_CACHE.value: ("read() returned {chars} and {resident} of the files were in the page "
                                         "cache: a cache inside the dataset or its workers served them"),
        ServedFrom.CACHE.value: ("read() returned {chars} with {resident} of the files in the page cache: "
                                 "memory-mapped files or a cache inside the dataset served them"),
    }
    for row in d["rows"]:
        resident = "?" if row.get("resident_fraction") is None else f"{row['resident_fraction']:.0%}"
        how = "estimated: files under --data / dataset length" if row.get("needed_rule") == "estimated" else "their files"
        cache = "" if row.get("cache") in (None, "as-is") else f" ({row['cache']})"
        chars = _mb(row.get("read_chars"))
        if "first_epoch_read_bytes" in row:
            chars = _mb(row.get("later_epoch_read_chars"))
            read = (f"its first epoch read {_mb(row['first_epoch_read_bytes'])} from the device, every later epoch "
                    f"at most {_mb(row['later_epoch_read_bytes'])}; over the window {_mb(row['read_bytes'])} of "
                    f"{_mb(row['needed_bytes'])} the samples needed ({how}); after the first epoch ")
        else:
            read = (f"{_mb(row['read_bytes'])} read from the device of {_mb(row['needed_bytes'])} the samples "
                    f"needed ({how}); ")
        out.append(
            f"served from a cache [{row['config']}{cache}]: {read}"
            + why.get(row["served_from"], "a cache served them").format(chars=chars, resident=resident) + "."
        )
    for state in d.get("uneven") or []:
        label = "" if state in (None, "as-is") else f" ({state})"
        out.append(
            f"The rows{label} were not served alike: {', '.join(d.get('storage_rows') or [])} from the device, the "
            "rows above from a cache (the configs before them, or their own repeats, warmed it): ranking them "
            "compares the device with a cache; run with --cache cold, or a dataset that keeps nothing it read."
        )
    if d.get("all"):
        kinds = {row["served_from"] for row in d["rows"]}
        cold = all(row.get("cache") == "cold" for row in d["rows"])
        if kinds & {ServedFrom.DATASET_CACHE.value, ServedFrom.CACHE.value}:
            fix = "the dataset (or its workers) keeps what it read: turn that cache off to measure the device"
        elif kinds == {ServedFrom.MEMORY_FS.value}:
            fix = "put a copy of the files on the device to measure it"
        elif cold:
            fix = ("the window read the files again after the page cache held them (a dataset smaller than "
                   "the window): use more files, or fewer batches (--max-batches)")
        else:
            fix = "run with --cache cold (or a dataset larger than RAM) to measure the device"
        out.append(f"Every row was served from a cache: these throughputs are the cache's, not the storage's; {fix}.")
    return out


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.10 else f"{x:.1%}"


def verdict_text(m: Any) -> str:
    """A summary's verdict as the table prints it: the verdict, then `(stall every N batches)`
    for a periodic loader-bound wait, `(tail)` when only the tail of the waits says so."""
    text = m.verdict
    if m.stall_period_batches:
        text += f" (stall every {m.stall_period_batches} batches)"
    elif m.tail_only:
        text += " (tail)"
    return text


def rank_cells(m: Any) -> dict[str, str]:
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


def header_lines(rs: ResultSet) -> list[str]:
    """One-line context: dataset, step, device, CPUs; plus the no-GPU caveat for sleep steps."""
    cfg = rs.config
    ds = cfg.get("dataset") or {}
    comp = cfg.get("compute") or {}
    env = rs.environment or {}
    dataset = kinds.describe(ds)
    step = comp.get("kind", "?")
    if step in ("sleep", "spin"):
        step = f"{step}:{comp.get('ms', 0):g}"
    elif step == "model":
        step = f"model:{comp.get('model')}"
    gpu = (env.get("gpu") or {}).get("name") if _cuda_used(rs) else "no GPU"
    lines = [
        f"dataset: {dataset} | step: {step} | device: {gpu} | "
        f"CPUs usable: {env.get('usable_cpus', '?')}"
    ]
    dist = env.get("distributed") or {}
    if dist:
        world, nnodes = dist.get("world_size"), dist.get("nnodes") or 1
        where = (f"on {nnodes} nodes ({dist.get('local_world_size')} per node)" if nnodes > 1
                 else f"({dist.get('local_world_size')} on this node)")
        lines.append(
            f"distributed: {world} rank{'s' if world != 1 else ''} {where}, "
            "each with its own DataLoader over its shard and its own device; samples/s and the "
            "ceilings are summed over ranks; stall, waits and the verdict are the slowest rank's "
            "(marked *); num_workers is per rank"
        )
    same = {k: v for k, v in constant_settings(rs).items() if v != "default"}
    if same:
        lines.append("in every row: " + ", ".join(f"{k}={v}" for k, v in same.items()))
    for bs, c in sorted(((rs.analysis or {}).get("compute_ceiling") or {}).items(), key=lambda kv: int(kv[0])):
        how = {"analytic": "batch / step time", "watched": "batch / the watched step's compute time"}.get(
            c.get("method"), "the step fed one batch already on the device")
        if (c.get("world_size") or 1) > 1:
            how += f", x {c['world_size']} ranks"
        held = c.get("samples_per_batch")
        at = f"batch {bs}"
        if held is not None and abs(held - int(bs)) > 0.05:
            at += f" (batches held {held:,.1f} samples)"
        lines.append(
            f"compute ceiling at {at}: {c['samples_per_s']:,.0f} samples/s "
            f"(step {c['step_s'] * 1e3:.1f} ms; {how})"
        )
    if not _cuda_used(rs):
        if comp.get("kind") == "sleep":
            lines.append(
                f"No GPU here: the sleep:{comp.get('ms', 0):g} step stands for an accelerator step "
                "of that length."
            )
        lines.append("pin_memory, prefetch, H2D and GPU util: n/a without CUDA (not shown).")
    return lines


CUDA_ONLY_COLUMNS = (*(a.name for a in GRID_AXES if a.cuda_only), "gpu_util_pct", "h2d")


def constant_settings(rs: ResultSet) -> dict[str, str]:
    """Settings columns whose cell is the same in every row, the predicted rows included (shown
    once in the header)."""
    cuda = _cuda_used(rs)
    out: dict[str, str] = {}
    if not rs.results:
        return out
    predicted = [p.settings for p in predictions(rs)]
    for a in GRID_AXES:
        if a.name == "num_workers" or a.cuda_only:
            continue
        if a.optional and all(getattr(s, a.name) is None for s in [*(r.settings for r in rs.results), *predicted]):
            out[a.name] = "default"  # never asked for: hidden, and not worth a mention
            continue
        values = {row_cells(r, cuda=cuda)[a.name] for r in rs.results if r.settings.num_workers > 0 or not a.workers_only}
        values |= {a.cell(getattr(s, a.name)) for s in predicted if s.num_workers > 0 or not a.workers_only}
        if len(values) == 1:
            out[a.name] = values.pop()
    return out


def visible_columns(rs: ResultSet) -> list[tuple[str, str]]:
    """The table's columns. Without CUDA, pin_memory, prefetch, H2D and GPU util are n/a
    everywhere; settings equal in every row are named once in the header instead."""
    hidden = set(constant_settings(rs))
    if not _cuda_used(rs):
        hidden |= set(CUDA_ONLY_COLUMNS)
    if all(r.cache == "as-is" for r in rs.results):
        hidden.add("cache")
    if all(r.summary is None or r.summary.storage_fraction is None for r in rs.results):
        hidden.add("storage")
    if all(r.summary is None or len(r.summary.rank_samples_per_s) < 2 for r in rs.results):
        hidden |= {"rank_rate", "rank_stall"}
    return [(k, h) for k, h in COLUMNS if k not in hidden]


# NOTE [table width]
#     The full table needs 150-200 columns. At a normal terminal width the verdict, the stall
#     and the knee mark must stay readable, so columns are left out, least useful first
#     (DROP_ORDER), until the table fits; a line under the table names what was left out, and
#     `--wide` (or `--format csv/json`) shows everything. Settings that vary, samples/s, stall
#     and the verdict are never left out; when they alone are too wide (several settings vary),
#     their headers go one word per line. A column's width is its widest cell or header line
#     plus 3 (padding and border); the verdict column may wrap, so it counts min(widest verdict, 30).
DROP_ORDER = (
    "storage", "first_batch_s", "memory_mib", "compute_ms", "gpu_util_pct", "loader_ceiling", "cpu_cores",
    "h2d", "rank_rate", "wait_ms", "ceiling_pct", "rank_stall",
)


VERDICT_MIN = 30


PREDICTED = "predicted (not measured)"


def predicted_cells(p: Prediction, *, cuda: bool, compute_ceiling: float | None) -> dict[str, str]:
    """The cells of a config the search did not measure: its settings, and the model's
    samples/s and stall marked with ~ (analysis/predict.py); the measured-only columns empty."""
    s = p.settings
    cells = {"cache": ""}
    for a in GRID_AXES:
        idle = (a.cuda_only and not cuda) or (a.workers_only and s.num_workers == 0)
        cells[a.name] = NA if idle else a.cell(getattr(s, a.name))
    cells.update({k: "" for k in METRIC_COLUMNS})
    cells["samples_per_s"] = f"~{p.samples_per_s:,.0f}"
    if compute_ceiling:
        cells["ceiling_pct"] = f"~{100 * p.samples_per_s / compute_ceiling:.0f}%"
    if p.stall_fraction is not None:
        cells["stall"] = "~" + (f"{p.stall_fraction:.0%}" if p.stall_fraction >= 0.10 else f"{p.stall_fraction:.1%}")
    cells["verdict"] = PREDICTED
    return cells


def predictions(rs: ResultSet) -> list[Prediction]:
    """The model's predictions for the grid cells a search did not measure (none for a grid)."""
    return [Prediction.from_dict(d) for d in (rs.analysis or {}).get("predictions") or []]


def _table_rows(rs: ResultSet) -> list[tuple[ConfigResult | None, dict[str, str], str | None]]:
    """Every row of the table: the measured configs in grid order, and the predicted ones (dim)
    placed among them by batch size and worker count."""
    cuda = _cuda_used(rs)
    knee = _knee_key(rs)
    rows: list[tuple[tuple[int, int], ConfigResult | None, dict[str, str], str | None]] = []
    for r in rs.results:
        cells = row_cells(r, cuda=cuda)
        style = None
        if r.settings.key() == knee and r.cache != "warm":
            style = "bold green"
            cells["verdict"] = cells["verdict"] + "  ◀ knee"
        elif r.status != "ok":
            style = "red"
        rows.append(((r.settings.batch_size, r.settings.num_workers), r, cells, style))
    ceilings = (rs.analysis or {}).get("compute_ceiling") or {}
    for p in predictions(rs):
        c = (ceilings.get(str(p.settings.batch_size)) or {}).get("samples_per_s")
        rows.append(((p.settings.batch_size, p.settings.num_workers), None,
                     predicted_cells(p, cuda=cuda, compute_ceiling=c), "dim"))
    rows.sort(key=lambda row: row[0])  # stable: the grid order within a worker count
    return [(r, cells, style) for _, r, cells, style in rows]


def _stacked(head: str) -> str:
    """A header on one line per word ("start method" -> "start\nmethod")."""
    return head.replace(" / ", "/").replace(" ", "\n")


def fit_columns(columns: list[tuple[str, str]], rows: list[dict[str, str]], width: int | None) -> tuple[
        list[tuple[str, str]], list[str]]:
    """The columns that fit in `width` characters (all with None) and the headers left out, per
    NOTE [table width]. When the columns that are never left out are still too wide, their
    headers are stacked one word per line (the returned headers hold the line breaks)."""
    if width is None:
        return columns, []

    def need(cols: list[tuple[str, str]]) -> int:
        total = 1
        for key, head in cols:
            widest = max([max(len(line) for line in head.split("\n"))] + [len(c[key]) for c in rows])
            total += (min(widest, VERDICT_MIN) if key == "verdict" else widest) + 3
        return total

    kept = list(columns)
    dropped: list[str] = []
    order = list(DROP_ORDER)
    if any(c.get("cache") not in (None, "", "as-is") for c in rows):
        # A storage comparison (--cache): the bytes read are what it is about; they go last.
        order.remove("storage")
        order.append("storage")
    for key in order:
        if need(kept) <= width:
            break
        for col in kept:
            if col[0] == key:
                kept.remove(col)
                dropped.append(col[1])
    if need(kept) > width:
        kept = [(key, _stacked(head)) for key, head in kept]
    return kept, dropped


def build_table(rs: ResultSet, width: int | None = None) -> tuple[Table, list[str]]:
    """The rich table, one row per config, the knee highlighted, fitted to `width` characters
    (None: every column); returns it with the headers of the columns left out."""
    rows = _table_rows(rs)
    columns, dropped = fit_columns(visible_columns(rs), [c for _, c, _ in rows], width)
    title = f"loaderbench sweep{(' — ' + rs.label) if rs.label else ''}"
    table = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for key, head in columns:
        table.add_column(head, justify="left" if key == "verdict" else "right", no_wrap=key != "verdict",
                         min_width=min(VERDICT_MIN, max(len(c[key]) for _, c, _ in rows) if rows else 7)
                         if key == "verdict" else None)
    for _, cells, style in rows:
        # Text, not markup: an error such as "[/path/pair.cc:545] Read error" must print as written.
        table.add_row(*[Text(cells[k]) for k, _ in columns], style=style)
    return table, dropped


def loader_ceiling_line(rs: ResultSet) -> str:
    """The loader ceiling against the compute ceiling (analysis["loader_ceiling"], see
    analysis.advice.loader_ceiling); '' when no ranked config was probed."""
    lc = (rs.analysis or {}).get("loader_ceiling")
    if not lc:
        return ""
    text = f"Loader ceiling (the loader alone, H2D included): {lc['samples_per_s']:,.0f} samples/s at best ({lc['config']})"
    lower = lc.get("lower_bound_from")
    if lower is None and lc["binds"] is None and lc["probed"] < lc["ranked"]:
        return text + f", probed on {lc['probed']} of {lc['ranked']} configs (the others' loaders ended first)."
    if lower is not None:
        text += f", at least {lower['samples_per_s']:,.0f} measured with the step ({lower['config']})"
    if lc.get("compute_ceiling"):
        binds = {
            "loader": "the loader binds.",
            "compute": "the compute step binds.",
            "matched": ("within 10% of each other: with 0 workers the main process loads a batch, then steps, so "
                        "the two add up." if str(lc.get("config", "")).startswith("w0-") else
                        "within 10% of each other: with no margin, the loader's jitter stalls the step."),
        }[lc["binds"]]
        text += f"; compute ceiling {lc['compute_ceiling']:,.0f} samples/s: {binds}"
        return text
    return text + "."


def search_lines(rs: ResultSet) -> list[str]:
    """How a model-guided search chose what to measure, how well its model predicted the
    configs it then measured, and the drift check of a warm measuring process."""
    a = rs.analysis or {}
    log = a.get("search") or {}
    measured = sum(1 for r in rs.results if r.status != "skipped")
    drift = a.get("drift") or {}
    # A drift check that tripped added one warm trial to the knee: a repeat, but not the search's.
    added = drift.get("config") if len(drift.get("warm_trials_samples_per_s") or []) >= 2 and not drift.get(
        "confirmed") and len(drift.get("fresh_trials_samples_per_s") or []) == 2 else None
    repeated = [f"{r.settings.key()} x{n}" for r in rs.results
                if (n := len(r.trials) - (1 if r.settings.key() == added else 0)) > 1]
    span = log.get("workers_searched") or []
    if not any(r.status == "ok" and r.summary is not None for r in rs.results):
        return [f"Search (model-guided, --search auto): {measured} configs tried in {a.get('sweep_wall_s', 0):.0f} s; "
                "none finished, so nothing was ranked (each row says why)."]
    over = f"; worker counts searched: {span[0]}-{span[1]}" if len(span) == 2 else ""
    took = f"{a.get('sweep_wall_s', 0):.0f} s"
    budget = ((rs.config or {}).get("measure") or {}).get("time_budget_s")
    if a.get("since_start_s") is not None and budget:
        past = a["since_start_s"] > budget
        took += (f" ({a['since_start_s']:.0f} s since the command started, "
                 f"{'past' if past else 'within'} --time-budget {budget:.0f} s)")
    disputed = list(dict.fromkeys(st["config"] for st in log.get("steps") or []
                                  if str(st.get("why", "")).startswith("repeat:")))
    why = (f"; {', '.join(disputed)} repeated because its first trial read far below the model's prediction, "
           "which would make it the knee" if disputed else "")
    text = (f"Search (model-guided, --search auto): measured {measured} config{'s' if measured != 1 else ''} "
            f"(of a grid of {log.get('grid_configs')}{over}) in {took}: the predicted knee, its neighbours and the "
            "variants there; "
            + (f"repeats where they decide: {', '.join(repeated)}{why}" if repeated
               else "no config competed closely enough to need repeats")
            + f" ({log.get('stopped') or 'done'}).")
    out = [text]
    check = a.get("prediction_check") or {}
    before, loo = check.get("before_measured"), check.get("errors")
    parts = []
    if before:
        parts.append(f"before measuring them, median error {before['median_abs']:.0%} (p90 {before['p90_abs']:.0%}) "
                     f"over {before['n']} configs")
    if loo:
        parts.append(f"leaving each measured config out, median {loo['median_abs']:.0%} (p90 {loo['p90_abs']:.0%})")
    if a.get("predictions"):
        out.append("Rows marked ~ are predicted by the pipeline model (loader rate per worker, CPU per sample, "
                   "receive floor, compute ceiling), never ranked or recommended"
                   + (f"; its error: {'; '.join(parts)}." if parts else "."))
    drift = a.get("drift")
    if drift and "fresh_samples_per_s" not in drift:
        # The first form of the check: the first config measured again in the warm process.
        out.append(f"Drift: {drift['config']} moved {drift['change']:+.1%} between its first and last trial in the "
                   "warm measuring process" + (f"; measured again, each in a fresh process: "
                                               f"{', '.join(drift['remeasured'])}." if drift.get("remeasured") else "."))
    elif drift:
        moved = f"{drift['change']:+.1%}"
        fresh = drift.get("fresh_trials_samples_per_s") or []
        warm = drift.get("warm_samples_per_s") or 0.0
        limit = drift.get("threshold")
        within = (f"within the drift threshold, {limit:.0%}" if limit is not None else "within twice the tolerance")
        if drift.get("remeasured"):
            out.append(f"Drift: the knee ({drift['config']}) measured {moved} in "
                       f"{'two fresh processes' if len(fresh) == 2 else 'a fresh process'} against the warm "
                       f"measuring process; measured again, each in a fresh process: {', '.join(drift['remeasured'])}.")
        elif len(fresh) == 2 and warm > 0 and "warm_trials_samples_per_s" not in drift:
            # The form of the check with a second fresh trial only.
            first, second = (f / warm - 1.0 for f in fresh)
            out.append(f"Drift check: the knee ({drift['config']}) measured again at the end in a fresh process: "
                       f"{first:+.1%} against the warm process, past the drift threshold ({limit:.0%}); a second "
                       f"fresh trial read {second:+.1%}, so it was not confirmed (checks, not counted as repeats).")
        elif len(fresh) == 2 and warm > 0:
            warms = drift["warm_trials_samples_per_s"]
            rec = rs.recommendation
            now = None if rec is None or rec.settings is None else rec.settings.key()
            moved_to = f"; with its new warm trial the pick is now {now}" if now and now != drift["config"] else ""
            out.append(f"Drift check: the knee when the search ended ({drift['config']}) measured again in a fresh "
                       f"process past the drift threshold ({limit:.0%}); with one more trial of each kind, fresh "
                       f"{' / '.join(f'{f:,.0f}' for f in fresh)} and warm {' / '.join(f'{w:,.0f}' for w in warms)} "
                       f"samples/s overlap: not confirmed (the fresh trials are checks, the warm one a repeat{moved_to}).")
        else:
            out.append(f"Drift check: the knee ({drift['config']}) measured again at the end in a fresh process: "
                       f"{moved} against the warm process ({within}; a check, not counted as a repeat).")
    return out


def footer_lines(rs: ResultSet) -> list[str]:
    """The recommendation, the ready-to-paste call and the caveats."""
    out: list[str] = []
    planned = (rs.analysis or {}).get("configs_planned")
    searched = (rs.analysis or {}).get("search")
    if searched:
        out.extend(search_lines(rs))
    if (rs.analysis or {}).get("interrupted") or (not searched and planned and len(rs.results) < planned):
        repeats = int(((rs.config or {}).get("measure") or {}).get("repeats") or 1)
        short = sum(1 for r in rs.results if r.status == "ok" and 0 < len(r.trials) < repeats)
        fewer = f", {short} of them with fewer than {repeats} repeats" if short else ""
        if searched:  # a search plans no fixed set of configs or repeats
            done = sum(1 for r in rs.results if r.trials)
            out.append(f"PARTIAL: the search was stopped after {done} config{'s' if done != 1 else ''}; "
                       "the recommendation covers only these, and what more configs would give is not known.")
        else:
            out.append(
                f"PARTIAL: {len(rs.results)} of {planned} planned configs finished (the sweep was stopped){fewer}; "
                "the recommendation covers only these."
            )
    h = (rs.analysis or {}).get("headroom")
    if h:
        which = "your current settings" if h.get("which") == "current" else "the first config"
        text = (
            f"Headroom from {which} ({h['key']}): stall {h['stall_fraction']:.0%}, "
            f"so removing all data-wait makes it at most {h['max_speedup_from_stall']:.2f}x faster"
        )
        if h["max_speedup_to_ceiling"] is not None:
            text += f"; the compute ceiling is {h['max_speedup_to_ceiling']:.2f}x its throughput"
        text += f" ({h['binds']} binds)."
        out.append(text)
    line = loader_ceiling_line(rs)
    if line:
        out.append(line)
    rec = rs.recommendation
    if rec is None or rec.settings is None:
        out.append("Recommendation: none (no config was measured successfully).")
    else:
        out.append("Recommendation: " + " ".join(finding_sentences(rec.findings, rs)))
        per_gpu = per_rank_line(rs)
        if per_gpu:
            out.append(per_gpu)
        out.extend(node_lines(rs))
        if f"worker_init_fn={WORKER_THREADS_FN}" in rec.dataloader_call and rec.settings.worker_threads:
            out.append(f"    {worker_threads_def(rec.settings.worker_threads)}  # at module level: spawn pickles it")
        out.append(f"    loader = {rec.dataloader_call}")
        if rec.use_prefetcher:
            out.append("    loader = loaderbench.CUDAPrefetcher(loader)  # copy batch N+1 on a side stream")
    for key, fp in sorted(((rs.analysis or {}).get("fetch_prep") or {}).items()):
        text = (
            f"fetch/prep [{key}]: mean wait per batch cold {fp['cold_wait_s'] * 1e3:.1f} ms, warm "
            f"{fp['warm_wait_s'] * 1e3:.1f} ms: fetch (storage, cold - warm) {fp['fetch_s'] * 1e3:.1f} ms, "
            f"prep (decode, augment; warm) {fp['prep_s'] * 1e3:.1f} ms: bound by {fp['bound']}."
        )
        if fp.get("note"):
            text += f" ({fp['note']})"
        out.append(text)
    if any(r.cache == "cold" for r in rs.results) and any(r.cache == "warm" for r in rs.results):
        out.append("The recommendation ranks the cold runs (a first epoch, or a dataset larger than RAM).")
    if _cuda_used(rs):
        out.append(GPU_UTIL_LABEL + ".")
    unprobed = sorted({t.loader_alone_note for r in rs.results if r.summary is not None
                       and r.summary.loader_ceiling_samples_per_s is None for t in r.trials if t.loader_alone_note})
    for note in unprobed:
        out.append(f"loader alone /s n/a: {note}.")
    if (rs.analysis or {}).get("prediction"):
        from loaderbench.render.watch import prediction_lines

        out.extend(prediction_lines(rs.analysis["prediction"]))
    if (rs.analysis or {}).get("what_if"):
        out.extend(what_if_lines(rs.analysis["what_if"]))
    if (rs.analysis or {}).get("what_if_ranks"):
        out.extend(what_if_ranks_lines(rs.analysis["what_if_ranks"]))
    for fd in (rs.analysis or {}).get("config_findings") or []:
        f = Finding.from_dict(fd)
        if f.kind == FindingKind.MEMORY_PER_WORKER.value:
            d = f.data
            differs = ", ".join(f"{k} {'default' if a is None else a} vs {'default' if b is None else b}"
                                for k, (a, b) in d.get("differs", {}).items())
            setting = next(iter(d.get("differs", {})), "")
            why = {
                "mp_context": "spawn and forkserver start every worker as a fresh interpreter that imports torch "
                              "and unpickles the dataset, where fork shares the parent's pages",
                "pin_memory": "pinned (page-locked) copies of the batches in flight, held by the main process",
                "prefetch": "the prefetcher holds one more batch, on the device and pinned on the host",
            }.get(setting, "this setting multiplies memory per worker")
            out.append(
                f"memory [{f.config}]: {d['mib_per_worker']:,.0f} MiB per worker (PSS) vs "
                f"{d['ref_mib_per_worker']:,.0f} MiB with {d['ref_config']} ({differs}): {why}."
            )
        elif f.kind == FindingKind.SERVED_FROM_CACHE.value:
            out.extend(served_from_cache_lines(f.data))
        elif f.kind == FindingKind.PARTIAL_BATCHES.value:
            d = f.data
            spread = "" if d["min"] == d["max"] else f" ({d['min']:,.1f}-{d['max']:,.1f} across configs)"
            out.append(
                f"partial batches [batch_size {d['batch_size']}]: batches held {d['samples_per_batch']:,.1f} "
                f"samples on average{spread}: the epoch ends before a batch fills (a sampler with fewer indices, "
                "or a short stream split across workers), so samples/s and the ceiling are of these batches, "
                f"and batch_size={d['batch_size']} in the DataLoader line names fuller batches than were measured."
            )
    for r in rs.results:
        for w in r.warnings:
            out.append(f"warning [{r.settings.key()}]: {w.message}")
        if r.summary is not None and stats.relative_spread(r.summary) > stats.NOISY_SPREAD:
            out.append(
                f"noisy [{r.settings.key()}]: throughput spread {stats.relative_spread(r.summary):.1%} of the "
                f"median over {r.summary.repeats} repeats (over 10%): measure longer (--batches, --min-time) "
                "or more often (--repeats) before trusting small differences."
            )
    return out


def render_table(rs: ResultSet, console: Console, *, wide: bool = False) -> None:
    """Print header, table and recommendation to `console` (stdout in the CLI), the table fitted
    to the console's width unless `wide` (NOTE [table width])."""
    for line in header_lines(rs):
        console.print(Text(line))
    table, dropped = build_table(rs, None if wide else console.width)
    console.print(table)
    if dropped:
        console.print(Text(
            f"Left out at {console.width} columns: {', '.join(dropped)} (--wide shows every column; "
            "--format csv or json has every figure)."
        ))
    for line in footer_lines(rs):
        console.print(Text(line))


def to_markdown(rs: ResultSet) -> str:
    """A GitHub-flavoured markdown table plus the recommendation (for pull-request comments)."""
    knee = _knee_key(rs)
    lines = [f"**{line}**" if i == 0 else f"_{line}_" for i, line in enumerate(header_lines(rs))]
    lines.append("")
    columns = visible_columns(rs)
    lines.append("| " + " | ".join(h for _, h in columns) + " |")
    lines.append("|" + "|".join("---:" if k != "verdict" else "---" for k, _ in columns) + "|")
    for r, cells, _ in _table_rows(rs):
        vals = [cells[k].replace("|", "\\|") for k, _ in columns]
        if r is not None and r.settings.key() == knee and r.cache != "warm":
            vals[-1] = vals[-1].replace("  ◀ knee", "")
            vals = [f"**{v}**" if v else v for v in vals]
            vals[-1] += " ◀ knee"
        lines.append("| " + " | ".join(vals) + " |")
    lines.append("")
    lines.extend(footer_lines(rs))
    return "\n".join(lines) + "\n"


def per_rank_line(rs: ResultSet) -> str:
    """Distributed sweeps: how close each rank of the recommended config comes to its own
    compute ceiling ('' when not distributed or unknown)."""
    rec = rs.recommendation
    if rec is None or rec.settings is None:
        return ""
    row = next((r for r in rs.results if r.settings.key() == rec.settings.key() and r.summary), None)
    if row is None or not row.summary or not row.summary.rank_samples_per_s:
        return ""
    ceiling = ((rs.ceilings or {}).get("compute") or {}).get(str(row.settings.batch_size)) or {}
    shares = stats.rank_ceiling_shares(row.summary.rank_samples_per_s, ceiling.get("rank_samples_per_s"))
    rates = ", ".join(f"r{r} {x:,.0f}" for r, x in enumerate(row.summary.rank_samples_per_s))
    text = f"Per rank (samples/s): {rates}"
    if shares:
        worst = min(range(len(shares)), key=shares.__getitem__)
        text += (
            f"; every rank at least {shares[worst]:.1%} of its own compute ceiling "
            f"(lowest: rank {worst})"
        )
    return text + "."


def summary_rows(rs: ResultSet) -> list[dict[str, Any]]:
    """One flat dict per config with settings and raw summary numbers (for CSV)."""
    rows = []
    knee = _knee_key(rs)
    for r in rs.results:
        row: dict[str, Any] = {"key": r.key(), **r.settings.to_dict(), "cache": r.cache, "status": r.status}
        row["error"] = r.error or ""
        if r.summary is not None:
            row.update(r.summary.to_dict())
        row["knee"] = r.settings.key() == knee
        rows.append(row)
    return rows


def to_csv(rs: ResultSet) -> str:
    """CSV of `summary_rows` through pandas; a nested value (a dict or list, e.g. the wait's
    parts) is one cell of JSON."""
    import pandas as pd

    rows = [{k: json.dumps(v) if isinstance(v, (dict, list, tuple)) else v for k, v in row.items()}
            for row in summary_rows(rs)]
    buf = io.StringIO()
    pd.DataFrame(rows).to_csv(buf, index=False)
    return buf.getvalue()


def to_json(rs: ResultSet) -> str:
    """The full result, as in the saved file."""
    return json.dumps(rs.to_dict(), indent=1)


def what_if_lines(what: dict[str, Any]) -> list[str]:
    """The what-if prediction (analysis.predict.what_if_cpus, `analysis["what_if"]`) in words,
    labelled a prediction."""
    if "disk_mb_per_s" in what:
        return _what_if_disk_lines(what)
    cpus = what["cpus"]
    if what.get("knee_workers") is None:
        return [f"What if {cpus} usable CPU{'s' if cpus != 1 else ''}: no prediction (no config with workers was measured)."]
    return [
        f"What if {cpus} usable CPU{'s' if cpus != 1 else ''} (a prediction from the pipeline model fitted on this run's measured configs, "
        f"not a measurement): {_knee_and_curve(what)}"
    ]


def _knee_and_curve(what: dict[str, Any]) -> str:
    """A what-if's predicted knee (workers, samples/s, stall, config) and its curve, in words."""
    stall = what["knee_stall_fraction"]
    curve = ", ".join(f"{w}: ~{x:,.0f}" for w, x in what["curve"] if w in _curve_points(what))
    return (f"knee ~{what['knee_workers']} workers, ~{what['knee_samples_per_s']:,.0f} samples/s"
            + ("" if stall is None else f", stall ~{stall:.0%}")
            + f" ({what['config']}). Predicted samples/s by num_workers: {curve}.")


def _what_if_disk_lines(what: dict[str, Any]) -> list[str]:
    """The storage what-if (analysis.predict.what_if_disk) in words, labelled a prediction."""
    device = f"{what['disk_mb_per_s']:g} MB/s" + ("" if not what.get("disk_iops") else f", {what['disk_iops']:g} reads/s")
    if what.get("knee_workers") is None:
        return [f"What if the files were on a device of {device}: no prediction ({what.get('why', 'nothing to fit')})."]
    return [
        f"What if the files were on a device of {device} (a prediction from the pipeline model fitted on the rows "
        f"served from a cache, {', '.join(what['from_rows'])}, plus {what['bytes_per_sample'] / 1e3:,.1f} kB and "
        f"{what['files_per_sample']:.2g} file read{'' if what['files_per_sample'] == 1 else 's'} per sample from "
        f"the device; not a measurement): the device feeds at most ~{what['device_samples_per_s']:,.0f} "
        f"samples/s; {_knee_and_curve(what)}"
    ]


def _curve_points(what: dict[str, Any]) -> set[int]:
    """The worker counts shown: 0, powers of two, the CPU count and the knee's neighbours."""
    k = what["knee_workers"]
    top = max(w for w, _ in what["curve"])
    pts = {0, k - 1, k, k + 1, top} | ({what["cpus"]} if what.get("cpus") else set())
    p = 1
    while p <= top:
        pts.add(p)
        p *= 2
    return {w for w in pts if 0 <= w <= top}
