"""Renderings of a `compare.Comparison`: a rich table, markdown (a pull-request comment), JSON.

The only place that knows how a comparison looks. With two runs the table has one value column
per run plus the effect, its interval, p and the verdict; with more, every run sits side by side
against the first (storage A/B/C). Colour and width come from the Console the caller passes in
(tests pin both).
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loaderbench.analysis.compare import Change, Comparison, ConfigComparison, RunInfo

VERDICT_STYLES = {
    Change.REGRESSED: "bold red",
    Change.IMPROVED: "green",
    Change.UNCHANGED: "",
    Change.NOT_SIGNIFICANT: "yellow",
    Change.NOT_COMPARABLE: "magenta",
    Change.MISSING: "dim",
    Change.NEW: "cyan",
    Change.FAILED: "bold red",
}
# asv-style marks: the verdict at a glance in narrow columns and in markdown.
VERDICT_MARKS = {
    Change.REGRESSED: "▼",
    Change.IMPROVED: "▲",
    Change.UNCHANGED: "=",
    Change.NOT_SIGNIFICANT: "~",
    Change.NOT_COMPARABLE: "!",
    Change.MISSING: "-",
    Change.NEW: "+",
    Change.FAILED: "x",
}


# --------------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------------


def fmt_value(metric: str, value: float | None) -> str:
    if value is None:
        return "—"
    if metric == "samples_per_s":
        return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"
    return f"{value:.1%}"


def fmt_effect(c: Comparison, row: ConfigComparison) -> str:
    if row.effect is None:
        return "—"
    if c.effect_kind == "ratio":
        return f"{row.effect:.3f}"
    return f"{row.effect * 100:+.1f} pp"


def fmt_interval(c: Comparison, row: ConfigComparison) -> str:
    if row.effect_low is None or row.effect_high is None:
        return "—"
    if c.effect_kind == "ratio":
        return f"{row.effect_low:.3f}–{row.effect_high:.3f}"
    return f"{row.effect_low * 100:+.1f} to {row.effect_high * 100:+.1f} pp"


def fmt_p(row: ConfigComparison) -> str:
    if row.p_value is not None:
        return "<0.001" if row.p_value < 0.001 else f"{row.p_value:.3f}"
    if row.test == "bootstrap-ci":
        return "CI"
    return "—"


def metric_title(metric: str) -> str:
    return "samples/s" if metric == "samples_per_s" else "stall"


def threshold_text(c: Comparison) -> str:
    if c.effect_kind == "ratio":
        return f"{c.threshold:.0%} of throughput"
    return f"{c.threshold * 100:.0f} stall points"


def gate_line(c: Comparison, *, strict: bool) -> str:
    """One line: the gate's decision and why."""
    failing = [(p.current.name, r) for p in c.pairs for r in p.rows if r.fails_gate]
    if failing:
        regressed = sum(1 for _, r in failing if r.verdict is Change.REGRESSED)
        failed = len(failing) - regressed
        parts = []
        if regressed:
            parts.append(f"{regressed} regressed")
        if failed:
            parts.append(f"{failed} newly failing")
        return f"gate: FAIL ({', '.join(parts)}; exit 1)"
    if c.has_not_comparable():
        if strict:
            return "gate: FAIL (not comparable, --strict; exit 1)"
        return "gate: pass (nothing comparable was compared; --strict would fail; exit 0)"
    return "gate: pass (no regression; exit 0)"


def _run_line(role: str, info: RunInfo) -> str:
    files = f", {info.files} files pooled" if info.files > 1 else ""
    when = f", {info.created_utc}" if info.created_utc else ""
    name = "" if info.name == role else f" {info.name}"
    return (
        f"{role}{name}: label {info.label or '-'}{when}{files}, loaderbench {info.tool_version or '?'} "
        f"(schema {info.schema_version}), machine {info.machine_fingerprint or '?'}, "
        f"workload {info.workload} ({info.workload_fingerprint}), cache {info.cache_state}"
    )


def rule_text(c: Comparison) -> str:
    return (
        f"metric {c.metric}, threshold {threshold_text(c)}, alpha {c.alpha:g}: regressed = worse by at least "
        f"the threshold AND significant (Mann-Whitney U over repeats, or over batches with fewer than 3; "
        f"the {1 - c.alpha:.0%} bootstrap interval decides when too few samples for the test)"
    )


def header_lines(c: Comparison) -> list[str]:
    lines = [rule_text(c), _run_line("baseline", c.baseline)]
    for p in c.pairs:
        lines.append(_run_line("current ", p.current))
        for reason in p.reasons:
            lines.append(f"NOT COMPARABLE {p.current.name} vs {c.baseline.name}: {reason}")
    return lines


def footer_lines(c: Comparison, *, strict: bool) -> list[str]:
    lines = []
    for p in c.pairs:
        counts = ", ".join(f"{n} {v}" for v, n in p.counts().items())
        lines.append(f"{p.current.name}: {counts or 'no configs'}")
        for w in p.warnings:
            lines.append(f"warning ({p.current.name}): {w}")
    for p in c.pairs:
        for r in p.rows:
            if r.note and r.verdict is Change.FAILED:
                lines.append(f"{p.current.name} {r.key}: {r.note}")
    lines.append(gate_line(c, strict=strict))
    return lines


def _rows_by_key(c: Comparison) -> list[tuple[str, list[ConfigComparison | None]]]:
    return [(key, [p.row(key) for p in c.pairs]) for key in c.keys]


def _baseline_value(rows: list[ConfigComparison | None]) -> float | None:
    return next((r.baseline for r in rows if r is not None and r.baseline is not None), None)


# --------------------------------------------------------------------------------------------
# Rich table
# --------------------------------------------------------------------------------------------


def _verdict_text(verdict: Change) -> Text:
    return Text(f"{VERDICT_MARKS[verdict]} {verdict.value}", style=VERDICT_STYLES[verdict])


def build_table(c: Comparison) -> Table:
    """The comparison as a rich Table (two runs: detailed; more: side by side)."""
    unit = metric_title(c.metric)
    effect_name = "ratio" if c.effect_kind == "ratio" else "Δ stall"
    table = Table(title=f"loaderbench compare — {c.metric}", title_justify="left")
    # Narrow terminals: the config key folds, the numbers never shrink out of sight.
    table.add_column("config", overflow="fold")
    table.add_column(f"{c.baseline.name} {unit}", justify="right", no_wrap=True)
    single = len(c.pairs) == 1
    for p in c.pairs:
        name = p.current.name
        table.add_column(f"{name} {unit}", justify="right", no_wrap=True)
        if single:
            table.add_column(effect_name, justify="right", no_wrap=True)
            table.add_column(f"{1 - c.alpha:.0%} interval", justify="right", no_wrap=True)
            table.add_column("p", justify="right", no_wrap=True)
        else:
            table.add_column(f"{name} {effect_name} (interval)", justify="right", no_wrap=True)
        table.add_column("verdict" if single else f"{name} verdict", no_wrap=True)
    for key, rows in _rows_by_key(c):
        cells: list[Any] = [key, fmt_value(c.metric, _baseline_value(rows))]
        for r in rows:
            if r is None:  # this run has no such config and the baseline neither (new elsewhere)
                cells += ["—"] * (5 if single else 3)
                continue
            cells.append(fmt_value(c.metric, r.current))
            if single:
                cells += [fmt_effect(c, r), fmt_interval(c, r), fmt_p(r)]
            else:
                cells.append(_effect_cell(c, r))
            cells.append(_verdict_text(r.verdict))
        table.add_row(*cells)
    return table


def _effect_cell(c: Comparison, r: ConfigComparison) -> str:
    eff, interval = fmt_effect(c, r), fmt_interval(c, r)
    return eff if interval == "—" else f"{eff} ({interval})"


def render_comparison(c: Comparison, console: Console, *, strict: bool = False) -> None:
    """Header, table and gate line to `console` (the CLI passes stdout)."""
    for line in header_lines(c):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(build_table(c))
    for line in footer_lines(c, strict=strict):
        style = "bold red" if line.startswith("gate: FAIL") else None
        console.print(line, highlight=False, markup=False, soft_wrap=True, style=style)


# --------------------------------------------------------------------------------------------
# Markdown (a pull-request comment) and JSON
# --------------------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(c: Comparison, *, strict: bool = False) -> str:
    """A GitHub-flavoured markdown comment: a headline with the gate's decision, one table, the
    not-comparable reasons and warnings, and the decision rule in a collapsed section."""
    gate = gate_line(c, strict=strict)
    icon = "❌" if gate.startswith("gate: FAIL") else "✅"
    unit = metric_title(c.metric)
    effect_name = "ratio" if c.effect_kind == "ratio" else "Δ stall"
    out = [f"### {icon} loaderbench: {gate[len('gate: '):]}", ""]
    names = ", ".join(f"**{p.current.name}**" for p in c.pairs)
    out.append(
        f"{names} vs baseline **{c.baseline.name}** · `{c.metric}` · threshold {threshold_text(c)} · "
        f"α {c.alpha:g} · workload `{_md_escape(c.baseline.workload)}`"
    )
    out.append("")
    for p in c.pairs:
        for reason in p.reasons:
            out.append(f"> **not comparable** ({p.current.name}): {_md_escape(reason)}")
    if any(p.reasons for p in c.pairs):
        out.append("")
    single = len(c.pairs) == 1
    header = ["config", f"{c.baseline.name} {unit}"]
    align = ["---", "---:"]
    for p in c.pairs:
        n = p.current.name
        if single:
            header += [f"{n} {unit}", f"{effect_name} ({1 - c.alpha:.0%} interval)", "p", "verdict"]
            align += ["---:", "---:", "---:", "---"]
        else:
            header += [f"{n} {unit}", f"{n} {effect_name} (interval)", f"{n} verdict"]
            align += ["---:", "---:", "---"]
    out.append("| " + " | ".join(_md_escape(h) for h in header) + " |")
    out.append("|" + "|".join(align) + "|")
    for key, rows in _rows_by_key(c):
        cells = [f"`{key}`", fmt_value(c.metric, _baseline_value(rows))]
        for r in rows:
            if r is None:  # this run has no such config and the baseline neither
                cells += ["—"] * (4 if single else 3)
                continue
            eff_cell = _effect_cell(c, r)
            verdict = f"{VERDICT_MARKS[r.verdict]} {r.verdict.value}"
            if r.fails_gate:
                verdict = f"**{verdict}**"
            cells += [fmt_value(c.metric, r.current), eff_cell]
            if single:
                cells.append(fmt_p(r))
            cells.append(verdict)
        out.append("| " + " | ".join(_md_escape(x) for x in cells) + " |")
    out.append("")
    for p in c.pairs:
        counts = ", ".join(f"{n} {v}" for v, n in p.counts().items())
        out.append(f"- **{p.current.name}**: {counts or 'no configs'}")
        for w in p.warnings:
            out.append(f"  - ⚠️ {_md_escape(w)}")
        for r in p.rows:
            if r.verdict is Change.FAILED and r.note:
                out.append(f"  - `{r.key}`: {_md_escape(r.note)}")
    out.append("")
    out.append("<details><summary>How loaderbench decides</summary>")
    out.append("")
    out.append(_md_escape(rule_text(c)) + ".")
    out.append("")
    out.append(_md_escape(_run_line("baseline", c.baseline)))
    for p in c.pairs:
        out.append("")
        out.append(_md_escape(_run_line("current", p.current)))
    out.append("")
    out.append("</details>")
    return "\n".join(out) + "\n"


def to_json(c: Comparison, *, strict: bool = False) -> str:
    """The whole comparison as JSON (machine-readable; `gate.exit_code` is what the CLI exits with)."""
    return json.dumps(c.to_dict(strict=strict), indent=1, allow_nan=False)
