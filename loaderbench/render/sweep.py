"""A sweep as a person reads it: the rich table and the markdown, CSV and JSON renderings of a
ResultSet (the cells are render/columns.py's, what follows the table render/footer.py's).

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
from loaderbench.model import (
    GRID_AXES,
    CeilingMethod,
    ComputeSpec,
    ConfigResult,
    LoaderSettings,
)
from loaderbench.render.columns import (
    LOADER_ARG,
    analysis_of,
    constant_settings,
    cuda_used,
    knee_key,
    predicted_cells,
    predictions,
    row_cells,
    visible_columns,
)
from loaderbench.render.footer import footer_lines
from loaderbench.results import ResultSet


def header_lines(rs: ResultSet) -> list[str]:
    """One-line context: dataset, step, device, CPUs; plus the no-GPU caveat for sleep steps."""
    cfg = rs.config
    ds = cfg.get("dataset") or {}
    comp = cfg.get("compute") or {}
    env = rs.environment or {}
    dataset = kinds.describe(ds)
    step = ComputeSpec.from_dict(comp).label() if comp.get("kind") else "?"
    gpu = (env.get("gpu") or {}).get("name") if cuda_used(rs) else "no GPU"
    lines = [
        f"dataset: {dataset} | step: {step} | device: {gpu} | "
        f"CPUs usable: {env.get('usable_cpus', '?')}"
    ]
    loader = analysis_of(rs).loader
    if loader is not None and loader.name:
        own = f" (its own settings: {', '.join(loader.args)})" if loader.args else ""
        lines.append(f"loader: {loader.name}{own}")
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
    same = {k.removeprefix(LOADER_ARG): v for k, v in constant_settings(rs).items() if v != "default"}
    if same:
        lines.append("in every row: " + ", ".join(f"{k}={v}" for k, v in same.items()))
    for shown in analysis_of(rs).compute_ceilings:
        c = shown.ceiling
        how = {CeilingMethod.ANALYTIC: "batch / step time",
               CeilingMethod.WATCHED: "batch / the watched step's compute time"}.get(
            c.method, "the step fed one batch already on the device")
        if c.world_size > 1:
            how += f", x {c.world_size} ranks"
        if c.first_step_s is not None:
            how += (f"; measured again after the rows' steps ran faster than its first reading, "
                    f"{c.first_step_s * 1e3:.1f} ms")
        held = shown.samples_per_batch
        at = f"batch {c.batch_size}"
        if held is not None and abs(held - c.batch_size) > 0.05:
            at += f" (batches held {held:,.1f} samples)"
        lines.append(
            f"compute ceiling at {at}: {shown.samples_per_s:,.0f} samples/s "
            f"(step {c.step_s * 1e3:.1f} ms; {how})"
        )
    if not cuda_used(rs):
        if comp.get("kind") == "sleep":
            lines.append(
                f"No GPU here: the sleep:{comp.get('ms', 0):g} step stands for an accelerator step "
                "of that length."
            )
        lines.append("pin_memory, the CUDA prefetcher, H2D and GPU util: n/a without CUDA (not shown).")
    return lines


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


def _table_rows(rs: ResultSet) -> list[tuple[ConfigResult | None, dict[str, str], str | None]]:
    """Every row of the table: the measured configs in grid order, and the predicted ones (dim)
    placed among them by batch size and worker count."""
    cuda = cuda_used(rs)
    knee = knee_key(rs)
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
    for p in predictions(rs):
        rows.append(((p.settings.batch_size, p.settings.num_workers), None, predicted_cells(p, cuda=cuda), "dim"))
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
            widest = max([max(len(line) for line in head.split("\n"))] + [len(c.get(key, "")) for c in rows])
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
                         min_width=min(VERDICT_MIN, max(len(c.get(key, "")) for _, c, _ in rows) if rows else 7)
                         if key == "verdict" else None)
    for _, cells, style in rows:
        # Text, not markup: an error such as "[/path/pair.cc:545] Read error" must print as written.
        table.add_row(*[Text(cells.get(k, "")) for k, _ in columns], style=style)
    return table, dropped


def render_table(rs: ResultSet, console: Console, *, wide: bool = False, verbose: bool = False) -> None:
    """Print header, table and what follows it (`footer_lines`) to `console` (stdout in the
    CLI), the table fitted to the console's width unless `wide` (NOTE [table width]). Code (a
    line that starts with four spaces, such as the `DataLoader(...)` call) is printed on one
    line whatever the width, so it pastes as it is."""
    for line in header_lines(rs):
        console.print(Text(line))
    table, dropped = build_table(rs, None if wide else console.width)
    console.print(table)
    if dropped:
        console.print(Text(
            f"Left out at {console.width} columns: {', '.join(dropped)} (--wide shows every column; "
            "--format csv or json has every figure)."
        ))
    for line in footer_lines(rs, verbose=verbose):
        if line.startswith("    "):
            console.print(Text(line), soft_wrap=True)
        else:
            console.print(Text(line))


def to_markdown(rs: ResultSet, *, verbose: bool = False) -> str:
    """A GitHub-flavoured markdown table plus the recommendation (for pull-request comments)."""
    knee = knee_key(rs)
    lines = [f"**{line}**" if i == 0 else f"_{line}_" for i, line in enumerate(header_lines(rs))]
    lines.append("")
    columns = visible_columns(rs)
    lines.append("| " + " | ".join(h for _, h in columns) + " |")
    lines.append("|" + "|".join("---:" if k != "verdict" else "---" for k, _ in columns) + "|")
    for r, cells, _ in _table_rows(rs):
        vals = [cells.get(k, "").replace("|", "\\|") for k, _ in columns]
        if r is not None and r.settings.key() == knee and r.cache != "warm":
            vals[-1] = vals[-1].replace("  ◀ knee", "")
            vals = [f"**{v}**" if v else v for v in vals]
            vals[-1] += " ◀ knee"
        lines.append("| " + " | ".join(vals) + " |")
    code = False
    for line in footer_lines(rs, verbose=verbose):
        # Code in a fenced block, so it renders on one line and pastes as it is; each sentence
        # line its own paragraph.
        if line.startswith("    ") != code:
            lines.extend(["", "```python"] if not code else ["```"])
            code = not code
        lines.extend([line[4:]] if code else ["", line])
    if code:
        lines.append("```")
    return "\n".join(lines) + "\n"


def summary_rows(rs: ResultSet) -> list[dict[str, Any]]:
    """One flat dict per config with settings and raw summary numbers (for CSV)."""
    rows = []
    knee = knee_key(rs)
    for r in rs.results:
        row: dict[str, Any] = {"key": r.key(), **settings_columns(r.settings), "cache": r.cache, "status": r.status}
        row["error"] = r.error or ""
        if r.summary is not None:
            row.update(r.summary.to_dict())
        row["knee"] = r.settings.key() == knee
        rows.append(row)
    return rows


def settings_columns(s: LoaderSettings) -> dict[str, Any]:
    """A config's settings as flat columns: every grid axis, then each loader argument by its
    name."""
    return {**{a.name: getattr(s, a.name) for a in GRID_AXES}, **dict(s.loader_args)}


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

