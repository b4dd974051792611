"""Everything a person reads: the rich table, markdown, CSV and JSON renderings of a ResultSet.

The only module that knows units, colour and width. Rendering never measures and never mutates.
"""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loaderbench import stats
from loaderbench.analysis.knee import REPLICATED
from loaderbench.model import ConfigResult, Finding, FindingKind, ResultSet, WaitPart

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


def _onoff(v: bool) -> str:
    return "on" if v else "off"


def _fmt(v: float | None, spec: str, scale: float = 1.0) -> str:
    return NA if v is None else format(v * scale, spec)


def _h2d_cell(m: Any) -> str:
    if m.h2d_p50_s is None:
        return NA
    parts = [f"{m.h2d_p50_s * 1e3:.1f}"]
    parts.append(NA if m.h2d_gb_per_s is None else f"{m.h2d_gb_per_s:.0f}")
    parts.append(NA if m.h2d_hidden_fraction is None else f"{m.h2d_hidden_fraction:.0%}")
    return " · ".join(parts)


def ceiling_for(rs: ResultSet, batch_size: int) -> float | None:
    """The compute ceiling in samples/s for this batch size, if measured (or analytic)."""
    c = (rs.ceilings or {}).get("compute", {}).get(str(batch_size))
    return None if not c else float(c["samples_per_s"])


def row_cells(r: ConfigResult, *, cuda: bool, ceiling: float | None = None) -> dict[str, str]:
    """The human-readable cells of one config (same strings in every format)."""
    s = r.settings
    pin = _onoff(s.pin_memory) if cuda else NA
    if cuda and s.pin_memory and any("pinning ineffective" in w for w in r.warnings):
        pin = "ineffective"
    cells = {
        "cache": r.cache,
        "num_workers": str(s.num_workers),
        "pin_memory": pin,
        "prefetch": _onoff(s.prefetch) if cuda else NA,
        "prefetch_factor": NA if s.num_workers == 0 else str(s.prefetch_factor),
        "persistent_workers": NA if s.num_workers == 0 else _onoff(s.persistent_workers),
        "batch_size": str(s.batch_size),
        "mp_context": NA if s.num_workers == 0 else (s.mp_context or "default"),
        "worker_threads": NA if s.num_workers == 0 else str(s.worker_threads or 1),
        "main_threads": "default" if s.main_threads is None else str(s.main_threads),
    }
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
            "ceiling_pct": NA if not ceiling else f"{100 * m.samples_per_s / ceiling:.0f}%",
            "loader_ceiling": _fmt(m.loader_ceiling_samples_per_s, ",.0f"),
            "stall": f"{m.stall_fraction:.0%}" if m.stall_fraction >= 0.10 else f"{m.stall_fraction:.1%}",
            "wait_ms": f"{m.data_wait_p50_s * 1e3:.1f} / {m.data_wait_p95_s * 1e3:.1f}",
            "compute_ms": _fmt(m.compute_p50_s, ".1f", 1e3),
            "h2d": _h2d_cell(m),
            "storage": NA if m.storage_fraction is None else (
                f"{m.storage_mb_per_s or 0:,.1f} · {m.storage_fraction:.0%}"
                + (" (part cached)" if 0.1 <= m.storage_fraction < 0.9 else "")
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
    if REPLICATED in r.warnings:
        cells["verdict"] = "duplicates samples: not ranked"
    elif stats.relative_spread(m) > stats.NOISY_SPREAD:
        cells["verdict"] += " (noisy)"
    return cells


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
    ("num_workers", "workers"),
    ("pin_memory", "pin"),
    ("prefetch", "prefetch"),
    ("prefetch_factor", "pf"),
    ("persistent_workers", "persist"),
    ("batch_size", "batch"),
    ("mp_context", "start method"),
    ("worker_threads", "worker threads"),
    ("main_threads", "main threads"),
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
METRIC_COLUMNS = [k for k, _ in COLUMNS[10:]]


def header_lines(rs: ResultSet) -> list[str]:
    """One-line context: dataset, step, device, CPUs; plus the no-GPU caveat for sleep steps."""
    cfg = rs.config
    ds = cfg.get("dataset") or {}
    comp = cfg.get("compute") or {}
    env = rs.environment or {}
    kind = ds.get("kind", "?")
    dataset = ds.get("factory") if kind == "import" else kind
    if kind == "folder":
        dataset = f"folder {ds.get('data_path')}"
    elif kind == "tensor":
        dataset = (
            f"tensor {'x'.join(map(str, ds.get('sample_shape', [])))} "
            f"cpu {ds.get('cpu_ms', 0):g} ms + io {ds.get('io_ms', 0):g} ms per sample"
        )
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
        world = dist.get("world_size")
        lines.append(
            f"distributed: {world} rank{'s' if world != 1 else ''} ({dist.get('local_world_size')} on this node), "
            "each with its own DataLoader over its shard and its own device; samples/s and the "
            "ceilings are summed over ranks; stall, waits and the verdict are the slowest rank's "
            "(marked *); num_workers is per rank"
        )
    same = {k: v for k, v in constant_settings(rs).items() if v != "default"}
    if same:
        lines.append("in every row: " + ", ".join(f"{k}={v}" for k, v in same.items()))
    for bs, c in sorted(((rs.ceilings or {}).get("compute") or {}).items(), key=lambda kv: int(kv[0])):
        how = "batch / step time" if c.get("method") == "analytic" else "the step fed one batch already on the device"
        if (c.get("world_size") or 1) > 1:
            how += f", x {c['world_size']} ranks"
        lines.append(
            f"compute ceiling at batch {bs}: {c['samples_per_s']:,.0f} samples/s "
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


CUDA_ONLY_COLUMNS = ("pin_memory", "prefetch", "gpu_util_pct", "h2d")


SETTING_COLUMNS = (
    "prefetch_factor", "persistent_workers", "batch_size", "mp_context", "worker_threads", "main_threads",
)


def constant_settings(rs: ResultSet) -> dict[str, str]:
    """Settings columns whose cell is the same in every row (shown once in the header)."""
    cuda = _cuda_used(rs)
    out: dict[str, str] = {}
    if not rs.results:
        return out
    for key in SETTING_COLUMNS:
        if key in ("worker_threads", "main_threads", "mp_context") and all(
            getattr(r.settings, key) is None for r in rs.results
        ):
            out[key] = "default"  # never asked for: hidden, and not worth a mention
            continue
        values = {row_cells(r, cuda=cuda)[key] for r in rs.results if r.settings.num_workers > 0 or key == "batch_size"}
        if len(values) == 1:
            out[key] = values.pop()
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
#     and the verdict are never left out. A column's width is its widest cell plus 3 (padding
#     and border); the verdict column may wrap, so it counts min(widest verdict, 30).
DROP_ORDER = (
    "storage", "first_batch_s", "memory_mib", "compute_ms", "gpu_util_pct", "loader_ceiling", "cpu_cores",
    "h2d", "rank_rate", "wait_ms", "ceiling_pct", "rank_stall",
)
VERDICT_MIN = 30


def _table_rows(rs: ResultSet) -> list[tuple[ConfigResult, dict[str, str], str | None]]:
    cuda = _cuda_used(rs)
    knee = _knee_key(rs)
    rows = []
    for r in rs.results:
        cells = row_cells(r, cuda=cuda, ceiling=ceiling_for(rs, r.settings.batch_size))
        style = None
        if r.settings.key() == knee and r.cache != "warm":
            style = "bold green"
            cells["verdict"] = cells["verdict"] + "  ◀ knee"
        elif r.status != "ok":
            style = "red"
        rows.append((r, cells, style))
    return rows


def fit_columns(columns: list[tuple[str, str]], rows: list[dict[str, str]], width: int | None) -> tuple[
        list[tuple[str, str]], list[str]]:
    """The columns that fit in `width` characters (all with None) and the headers left out, per
    NOTE [table width]."""
    if width is None:
        return columns, []

    def need(cols: list[tuple[str, str]]) -> int:
        total = 1
        for key, head in cols:
            widest = max([len(head)] + [len(c[key]) for c in rows])
            total += (min(widest, VERDICT_MIN) if key == "verdict" else widest) + 3
        return total

    kept = list(columns)
    dropped: list[str] = []
    for key in DROP_ORDER:
        if need(kept) <= width:
            break
        for col in kept:
            if col[0] == key:
                kept.remove(col)
                dropped.append(col[1])
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
        text += (
            f"; compute ceiling {lc['compute_ceiling']:,.0f} samples/s: "
            f"{'the loader' if lc['binds'] == 'loader' else 'the compute step'} binds."
        )
        return text
    return text + "."


def _rate(x: float) -> str:
    return f"{x:,.0f} samples/s"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.1f} ms"


_REMEDY_WORDS = {
    "prefetch": "the CUDA-stream prefetcher hides the copy behind the step",
    "pin_memory": "pin_memory=True (a pinned copy is asynchronous, and the pin thread takes batches "
                  "from the workers off the step's thread)",
    "persistent_workers": "persistent_workers=True starts the workers once, not every epoch",
    "more_workers": "more workers",
    "larger_batch": "a larger batch pays the per-batch cost over more samples",
    "pack_tensors": "pack the batch's many small tensors into a few (concatenate each field across "
                    "the batch, with offsets): each tensor crosses from the worker on its own",
    "numpy_to_tensors": "return torch tensors from the collate (torch.from_numpy): numpy arrays cross "
                        "from the worker through the pickler and a pipe, tensors through shared memory",
    "lazy_sampler": "draw indices lazily, in O(indices used) (a full permutation of a huge dataset "
                    "costs seconds every epoch)",
}


def _remedy_text(r: dict[str, Any]) -> str:
    """One remedy of a REMAINING_WAIT finding (see NOTE [advice the measurements support])."""
    what = _REMEDY_WORDS[r["remedy"]]
    if not r.get("measured"):
        return what + (f" (not measured: add {r['flag']})" if r.get("flag") else "")
    share = ""
    if r.get("ceiling_share") is not None and r.get("knee_ceiling_share") is not None:
        share = f", {r['ceiling_share']:.0%} of the compute ceiling vs {r['knee_ceiling_share']:.0%}"
    return f"{what}: measured {r['config']} {_rate(r['samples_per_s'])} ({r['gain']:+.1%}{share})"


_PART_WORDS = {
    WaitPart.H2D.value: "the host-to-device copy on the step's path",
    WaitPart.SAMPLER.value: "the sampler drawing indices in the main process",
    WaitPart.STARTUP.value: "worker start-up at each epoch start",
    WaitPart.RECEIVE.value: "the main process taking each finished batch from a worker",
    WaitPart.LOADER.value: "batches not built in time (fetch and prep)",
}


def finding_sentences(findings: list[Finding], rs: ResultSet | None = None) -> list[str]:
    """The recommendation's findings as sentences (the only place they are worded)."""
    out: list[str] = []
    for f in findings:
        d = f.data
        k = f.kind
        if k == FindingKind.NONE_MEASURED.value:
            out.append("none (no config was measured successfully).")
        elif k == FindingKind.KNEE.value:
            out.append(
                f"num_workers={d['num_workers']}, pin_memory={d['pin_memory']}, "
                f"prefetch={'on' if d['prefetch'] else 'off'}: {_rate(d['samples_per_s'])}, "
                f"stall {d['stall_fraction']:.1%} ({d['band']})."
            )
        elif k == FindingKind.BEST_WITHIN_TOLERANCE.value:
            out.append(
                f"The best config ({f.config}) reaches {_rate(d['samples_per_s'])}, within "
                f"{max(d['tolerance'], 0):.0%} or noise of it: "
                + ("the workers and buffers of this grid buy nothing more, but the loader still binds."
                   if d["loader_still_binds"] else "more workers or buffers buy nothing.")
            )
        elif k == FindingKind.ALSO_FASTEST.value:
            out.append(
                "It is also the fastest config ranked (configs that replay the IterableDataset in every "
                "worker count duplicate samples and are not ranked)." if d.get("replicated_excluded")
                else "It is also the fastest config measured."
            )
        elif k == FindingKind.LOADER_ALONE.value:
            out.append(
                f"With --compute none this is the loader alone: its ceiling here is {_rate(d['samples_per_s'])}. "
                f"Any step slower than {d['step_s'] * 1e3:.1f} ms per batch of this size will not wait for this loader."
            )
        elif k == FindingKind.REMAINING_WAIT.value:
            out.append(_remaining_wait_text(d, f.config))
        elif k == FindingKind.NOT_CLEARED.value:
            cause = ""
            if d["cause"] == "cpu":
                cause = (f" The process tree used {d['cpu_cores']:.1f} of {d['usable_cpus']} usable CPUs: "
                         "CPU (decode/augment) saturation binds.")
            elif d["cause"] == "replicated":
                cause = (" Configs with more workers replay the IterableDataset in every worker and are not "
                         "ranked: split its stream with torch.utils.data.get_worker_info(), then sweep again.")
            elif d["cause"] == "grid_edge":
                cause = " The fastest config has the most workers of those measured: try more workers."
                n = d.get("workers_needed")
                if n:
                    cause += (f" Estimate (a prediction): about {n} worker{'s' if n != 1 else ''}"
                              f"{' per rank' if d.get('per_rank') else ''} (batch build time / step time), "
                              "if the CPUs can run them.")
            out.append(f"Even the best config is {d['band']} (stall {d['stall_fraction']:.1%}): no setting in "
                       "this grid clears the loader bottleneck." + cause)
        elif k == FindingKind.LOWEST_STALL.value:
            out.append(f"Lowest stall measured: {d['stall_fraction']:.1%} (receiving a batch always costs a "
                       "little; this floor is not worth chasing).")
        elif k == FindingKind.STEP_SLOWER.value:
            text = (f"The knee reaches {d['share']:.0%} of the compute ceiling ({d['ceiling']:,.0f} samples/s) "
                    f"because the step itself runs slower beside the loader: {d['compute_mean_s'] * 1e3:.1f} ms per "
                    f"batch on average (median {d['compute_p50_s'] * 1e3:.1f} ms) vs {d['alone_s'] * 1e3:.1f} ms alone.")
            if d.get("cpu_saturated"):
                text += (f" The process tree used {d['cpu_cores']:.1f} of {d['usable_cpus']} usable CPUs: the "
                         "main process (kernel launches, the pin thread) competes with the workers for CPU, so "
                         "the binding resource is the CPU; cheaper decoding (or GPU decoding) or more CPUs would "
                         "lift it.")
            out.append(text)
        elif k == FindingKind.STEP_BINDS.value:
            out.append(f"Past the knee the step itself binds: the knee runs at {d['share']:.0%} of the compute "
                       f"ceiling ({d['ceiling']:,.0f} samples/s).")
        elif k == FindingKind.TRANSFER.value:
            text = (f"The worker->main transfer is a large part of the wait: {d['mb_per_s']:,.0f} MB/s of "
                    f"batches ({(d['batch_bytes'] or 0) / 1e6:,.1f} MB each), {d['receive_s'] * 1e3:.1f} ms to "
                    "receive one.")
            if d.get("numpy_leaves"):
                text += (f" {d['numpy_leaves']} numpy array{'s' if d['numpy_leaves'] != 1 else ''} per batch "
                         "cross from the worker through the pickler and a pipe, not shared memory: "
                         + _REMEDY_WORDS["numpy_to_tensors"].split(": ")[0] + ".")
            elif (d.get("tensor_leaves") or 0) >= 16:
                text += f" The batch crosses as {d['tensor_leaves']} tensors, each on its own: pack them into a few."
            out.append(text)
        elif k == FindingKind.MORE_NOT_BETTER.value:
            out.append(f"More is not better: {f.config} uses {d['extra_cores']:+.1f} CPU cores over the knee "
                       f"for {d['gain']:+.1%} throughput.")
        elif k == FindingKind.STARTUP.value:
            text = (f"Start-up (first batch {d['first_batch_s']:.2f} s) is {d['share']:.0%} of an epoch of "
                    f"{d['epoch_batches']} batches (predicted from the first batch; the measured window did not "
                    "span an epoch)")
            if d.get("measured"):
                gaps = ""
                if d.get("gap_s") is not None and d.get("persistent_gap_s") is not None:
                    gaps = (f"; epoch-start gaps measured {d['gap_s']:.2f} s without and "
                            f"{d['persistent_gap_s']:.2f} s with persistent workers")
                if d.get("advised"):
                    text += (f": use persistent_workers=True to pay it once (measured {d['config']}: "
                             f"{_rate(d['samples_per_s'])}{gaps}).")
                else:
                    text += (f"; persistent_workers=True does not remove it here ({d['config']}{gaps}): "
                             "the gap is not worker start-up.")
            else:
                text += ": persistent_workers=True would pay it once (not measured: add --persistent-workers off,on)."
            out.append(text)
        elif k == FindingKind.EPOCH_FASTER.value:
            out.append(f"Counting start-up in every epoch of {d['epoch_batches']} batches, {f.config} is predicted "
                       f"faster per epoch ({d['epoch_samples_per_s']:,.0f} samples/s) than the steady-state knee.")
        elif k == FindingKind.THREADS.value:
            parts = [
                f"torch.set_num_threads({d['worker_threads']}) in each worker (worker_init_fn)"
                if d.get("worker_threads") is not None else "",
                f"torch.set_num_threads({d['main_threads']}) in the main process"
                if d.get("main_threads") is not None else "",
            ]
            out.append("Threads: " + ", ".join(p for p in parts if p) + ".")
        elif k == FindingKind.OVERSUBSCRIBED.value:
            out.append(f"Note: {d['message']}.")
    return out


def _remaining_wait_text(d: dict[str, Any], config: str | None) -> str:
    part = d["part"]
    who = "Its remaining stall" if d.get("subject", "knee") == "knee" else f"With workers ({config}) the stall"
    text = (f"{who} ({d['stall_fraction']:.1%}, {d['wait_p50_s'] * 1e3:.1f} ms median wait per batch) "
            f"is mostly {_PART_WORDS[part]}: {d['part_s'] * 1e3:.1f} ms per batch")
    if part == WaitPart.RECEIVE.value and d.get("receive_s") is not None:
        what = []
        if d.get("tensor_leaves"):
            what.append(f"{d['tensor_leaves']} tensors")
        if d.get("numpy_leaves"):
            what.append(f"{d['numpy_leaves']} numpy arrays")
        if d.get("batch_bytes"):
            what.append(f"{d['batch_bytes'] / 1e6:,.1f} MB")
        text += (f" (taking a batch that was already built costs {d['receive_s'] * 1e3:.1f} ms, measured after "
                 f"the window{'; the batch is ' + ', '.join(what) if what else ''}); more workers cannot remove it")
    elif part == WaitPart.H2D.value:
        hidden = d.get("h2d_hidden_fraction")
        text += f" (copy {_ms(d.get('h2d_s'))}{'' if hidden is None else f', {hidden:.0%} hidden'})"
    others = {p: v for p, v in (d.get("parts_share") or {}).items() if p != part}
    if others:
        text += "; also " + ", ".join(f"{p} {v:.0%} of the step" for p, v in others.items())
    text += "."
    remedies = d.get("remedies") or []
    if remedies:
        text += " What acts on it: " + "; ".join(_remedy_text(r) for r in remedies) + "."
    for r in d.get("measured_no_gain") or []:
        text += (f" Measured without gain: {r['config']} ({r['remedy'].replace('_', ' ')}) "
                 f"{_rate(r['samples_per_s'])} ({r['gain']:+.1%}).")
    return text


def footer_lines(rs: ResultSet) -> list[str]:
    """The recommendation, the ready-to-paste call and the caveats."""
    out: list[str] = []
    planned = (rs.analysis or {}).get("configs_planned")
    if (rs.analysis or {}).get("interrupted") or (planned and len(rs.results) < planned):
        repeats = int(((rs.config or {}).get("measure") or {}).get("repeats") or 1)
        short = sum(1 for r in rs.results if r.status == "ok" and 0 < len(r.trials) < repeats)
        fewer = f", {short} of them with fewer than {repeats} repeats" if short else ""
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
    for fd in (rs.analysis or {}).get("config_findings") or []:
        f = Finding.from_dict(fd)
        if f.kind == FindingKind.MEMORY_PER_WORKER.value:
            d = f.data
            differs = ", ".join(f"{k} {'default' if a is None else a} vs {'default' if b is None else b}"
                                for k, (a, b) in d.get("differs", {}).items())
            out.append(
                f"memory [{f.config}]: {d['mib_per_worker']:,.0f} MiB per worker (PSS) vs "
                f"{d['ref_mib_per_worker']:,.0f} MiB with {d['ref_config']} ({differs}): this setting "
                "multiplies memory per worker (a start method that copies the dataset into every worker does)."
            )
    for r in rs.results:
        for w in r.warnings:
            out.append(f"warning [{r.settings.key()}]: {w}")
        if r.summary is not None and stats.relative_spread(r.summary) > stats.NOISY_SPREAD:
            out.append(
                f"noisy [{r.settings.key()}]: throughput spread {stats.relative_spread(r.summary):.0%} of the "
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
    cuda = _cuda_used(rs)
    knee = _knee_key(rs)
    lines = [f"**{line}**" if i == 0 else f"_{line}_" for i, line in enumerate(header_lines(rs))]
    lines.append("")
    columns = visible_columns(rs)
    lines.append("| " + " | ".join(h for _, h in columns) + " |")
    lines.append("|" + "|".join("---:" if k != "verdict" else "---" for k, _ in columns) + "|")
    for r in rs.results:
        cells = row_cells(r, cuda=cuda, ceiling=ceiling_for(rs, r.settings.batch_size))
        vals = [cells[k].replace("|", "\\|") for k, _ in columns]
        if r.settings.key() == knee:
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
    """CSV of `summary_rows` through pandas."""
    import pandas as pd

    buf = io.StringIO()
    pd.DataFrame(summary_rows(rs)).to_csv(buf, index=False)
    return buf.getvalue()


def to_json(rs: ResultSet) -> str:
    """The full result, as in the saved file."""
    return json.dumps(rs.to_dict(), indent=1)


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list) and len(value) > 16:
        out.append((prefix, f"{len(value)} items: {value[:8]}..."))
    else:
        out.append((prefix, "n/a" if value is None else str(value)))


def render_env(facts: dict[str, Any], warnings: list[str], console: Console) -> None:
    """`loaderbench env`: the machine facts as a two-column table, then warnings."""
    table = Table(title="loaderbench env", title_justify="left", show_header=False, pad_edge=False)
    table.add_column("fact", style="bold", no_wrap=True)
    table.add_column("value")
    rows: list[tuple[str, str]] = []
    _flatten("", facts, rows)
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    for w in warnings:
        console.print(Text(f"warning: {w}"))
