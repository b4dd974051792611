"""Golden renderings: every result file kept in docs/data and tests/data renders exactly as in
tests/data/expected/ (the table at 200 and at 100 columns, and markdown), with the conclusions
this version of the analysis draws from its raw samples, and their analysis is the golden JSON
beside them (NAME.analysis.json). Regenerate a golden file on purpose, after checking the
difference: `python3 -m tests.test_golden` writes them all (the renderings and the analyses)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loaderbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = ROOT / "tests" / "data" / "expected"
FILES = sorted(p for p in [*(ROOT / "docs" / "data").glob("*.json"), *(ROOT / "tests" / "data").glob("results-*.json")]
               if (EXPECTED / f"{p.stem}.table.txt").exists())


def test_every_result_file_has_golden_renderings():
    kept = {p.stem for p in [*(ROOT / "docs" / "data").glob("*.json"), *(ROOT / "tests" / "data").glob("results-*.json")]}
    # gpu-truth-h200.json is a benchmark's own record, not a sweep result.
    assert kept - {p.stem for p in FILES} == {"gpu-truth-h200"}


RENDERINGS = [("table.txt", [], "200"), ("table100.txt", [], "100"), ("md", ["--format", "markdown"], "200")]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("suffix, args, columns", RENDERINGS)
def test_show_renders_the_golden_file(path, suffix, args, columns):
    res = CliRunner().invoke(app, ["show", str(path), *args], env={"COLUMNS": columns})
    assert res.exit_code == 0, res.output
    assert res.stdout == (EXPECTED / f"{path.stem}.{suffix}").read_text()


def _rounded(value):
    """`value` with every float at 9 significant digits: the golden JSON stands for the analysis,
    not for the last bit of a platform's libm."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


@functools.cache
def analysed(path: Path, cpus: int | None = None, ranks: int | None = None):
    """The kept result file at `path`, analysed (with a what-if of `cpus` CPUs, and of `ranks`
    ranks), once per test session: nothing that reads it changes it."""
    from loaderbench.analysis import analyze
    from loaderbench.conclusions import WhatIf
    from loaderbench.results import read_results

    rs = read_results(path)
    analyze(rs, what_if=[*([] if cpus is None else [WhatIf(cpus=cpus)]),
                         *([] if ranks is None else [WhatIf(ranks=ranks)])])
    return rs


def analysis_document(path: Path) -> dict:
    """What the analysis derives from a kept result file: each config's summary (statistics and
    judgements) and the `Analysis`, as JSON values."""
    rs = analysed(path)
    return _rounded({
        "results": [{"key": r.key(), "status": r.status, "summary": None if r.summary is None else r.summary.to_dict()}
                    for r in rs.results],
        "analysis": rs.analysis.to_dict(),
    })


def test_every_result_file_has_a_golden_analysis():
    assert {p.stem for p in FILES} == {p.name.removesuffix(".analysis.json") for p in EXPECTED.glob("*.analysis.json")}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_analysis_is_the_golden_json(path):
    want = json.loads((EXPECTED / f"{path.stem}.analysis.json").read_text())
    assert analysis_document(path) == want


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_rendering_a_result_read_back_from_its_json_equals_rendering_it_from_memory(path):
    """render/ can only format what the result file holds: the table (at two widths), markdown
    and CSV of a result analysed in memory equal those of the same result read back from its
    JSON, with no analysis run on it (the what-if asked of a search's result too, and the
    what-if ranks=N of a sweep on several nodes; the table's width changes only which columns
    fit, tested against the golden tables above)."""
    from io import StringIO

    from rich.console import Console

    from loaderbench.render import sweep as render
    from loaderbench.results import ResultSet

    def rendered(rs: ResultSet) -> list[str]:
        console = Console(width=100, file=StringIO(), record=True, color_system=None, force_terminal=False)
        render.render_table(rs, console)
        return [console.export_text(), render.to_markdown(rs), render.to_csv(rs)]

    rs = analysed(path, 8 if "search" in path.stem or "whatif" in path.stem else None,
                  16 if path.stem.startswith("nodes") else None)
    back = ResultSet.from_dict(json.loads(json.dumps(rs.to_dict())))
    assert back.analysis is not None
    assert rendered(back) == rendered(rs)


def _uses_cuda(path: Path) -> bool:
    env = json.loads(path.read_text()).get("environment") or {}
    return bool(env.get("cuda_available"))


# The default sweep on a CPU machine, and every kept GPU result.
SHAPED = [ROOT / "tests" / "data" / "results-v3-default-cpu.json", *(p for p in FILES if _uses_cuda(p))]


@pytest.mark.parametrize("path", SHAPED, ids=lambda p: p.stem)
@pytest.mark.parametrize("columns", [80, 120])
def test_the_recommendation_and_its_one_line_call_sit_right_under_the_table(path, columns):
    """The output a person reads: within 12 lines below the table, the recommendation and its
    ready-to-paste `DataLoader(...)` call, the call on one line (never folded at the width);
    the table itself fits the width."""
    from io import StringIO

    from rich.console import Console

    from loaderbench.render.sweep import render_table

    rs = analysed(path)
    # The console `loaderbench show` prints to, at this width (cli/common.stdout).
    console = Console(width=columns, file=StringIO(), record=True, soft_wrap=False, emoji=False, color_system=None)
    render_table(rs, console)
    lines = console.export_text().splitlines()
    end = max(i for i, line in enumerate(lines) if line.startswith("└"))
    assert all(len(line) <= columns for line in lines[:end + 1] if line[:1] in "┏┃┡│└")
    below = lines[end + 1:end + 13]
    call = f"    loader = {rs.recommendation.dataloader_call}"
    headline = next(i for i, line in enumerate(below) if line.startswith("Recommendation: "))
    assert call in below and below.index(call) > headline


if __name__ == "__main__":
    # Regenerate the golden analyses and renderings (after an intended change; read the diff
    # before committing): python3 -m tests.test_golden
    for p in FILES:
        (EXPECTED / f"{p.stem}.analysis.json").write_text(json.dumps(analysis_document(p), indent=1) + "\n")
        for suffix, args, columns in RENDERINGS:
            res = CliRunner().invoke(app, ["show", str(p), *args], env={"COLUMNS": columns})
            assert res.exit_code == 0, res.output
            (EXPECTED / f"{p.stem}.{suffix}").write_text(res.stdout)
