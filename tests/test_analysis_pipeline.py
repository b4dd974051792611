"""The analysis as a forward pipeline of passes, and its one module of thresholds.

`analyze()` runs its passes in order (statistics -> ceiling -> wait -> knee -> stages -> advice
-> predict -> ranks), each reading the typed records the passes before it wrote: a result set enters each module once
and never returns into one it left. Every threshold the analysis decides with lives in
analysis/thresholds.py and says where its value comes from.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from loaderbench.analysis import analyze
from loaderbench.analysis.knee import Ranking
from loaderbench.conclusions import NotCleared, WhatIf
from loaderbench.model import ConfigResult, Summary, Trial
from loaderbench.results import ResultSet, read_results

ROOT = Path(__file__).resolve().parents[1]
ANALYSIS = ROOT / "loaderbench" / "analysis"
KEPT = sorted([*(ROOT / "docs" / "data").glob("*.json"), *(ROOT / "tests" / "data").glob("results-*.json")])
KEPT = [p for p in KEPT if p.stem != "gpu-truth-h200"]  # a benchmark's own record, not a sweep result
RECORDS = (ResultSet, ConfigResult, Summary, Trial, Ranking)


def _carries_a_record(value: object) -> bool:
    if isinstance(value, RECORDS):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(v, RECORDS) for v in value)


def passes_entered(rs: ResultSet, **kwargs: object) -> list[str]:
    """The analysis modules a result set enters while `analyze(rs)` runs, in order, consecutive
    calls into one module counted once: a call enters a module when one of its arguments is a
    record of the result set (a config, its summary or trials, the ranking). The driver
    (analysis/__init__.py) and calls on plain numbers (percentiles, CPU saturation) do not
    count."""
    entered: list[str] = []

    folder = str(ANALYSIS) + "/"

    def trace(frame, event, arg):  # noqa: ANN001
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(folder) and not code.co_filename.endswith("__init__.py"):
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            stem = Path(code.co_filename).stem
            if (not entered or entered[-1] != stem) and any(_carries_a_record(frame.f_locals.get(n)) for n in names):
                entered.append(stem)
        # None: no line events inside the frame

    sys.settrace(trace)
    try:
        analyze(rs, **kwargs)  # type: ignore[arg-type]
    finally:
        sys.settrace(None)
    return entered


@pytest.mark.parametrize("path", KEPT, ids=lambda p: p.stem)
def test_a_result_set_goes_through_the_passes_once_each_in_order(path):
    rs = read_results(path)
    several_nodes = int(((rs.environment or {}).get("distributed") or {}).get("nnodes") or 1) > 1
    entered = passes_entered(rs)
    # Where no setting clears the loader bottleneck, the pipeline model lists the changes that would
    # (BeyondKnobs); a sweep on several nodes also gets its per-node view, last.
    assert rs.analysis is not None
    beyond = rs.analysis.beyond_knobs is not None
    assert beyond == any(isinstance(f, NotCleared) for f in rs.analysis.recommendation.findings)
    assert entered == ["statistics", "ceiling", "wait", "knee", "advice", *(["predict"] if beyond else []),
                       *(["ranks"] if several_nodes else [])]


def test_the_what_if_is_the_last_pass():
    rs = read_results(ROOT / "docs" / "data" / "search-default-h200.json")
    entered = passes_entered(rs, what_if=[WhatIf(cpus=8)])
    assert entered == ["statistics", "ceiling", "wait", "knee", "advice", "predict"]
    assert rs.analysis is not None and rs.analysis.what_if is not None and rs.analysis.what_if.knee is not None


def test_the_what_if_ranks_comes_after_the_pipeline_models():
    rs = read_results(ROOT / "docs" / "data" / "nodes-2x1-cpu.json")
    entered = passes_entered(rs, what_if=[WhatIf(cpus=8), WhatIf(ranks=4)])
    assert entered == ["statistics", "ceiling", "wait", "knee", "advice", "predict", "ranks"]
    assert rs.analysis is not None and rs.analysis.per_node is not None
    assert rs.analysis.what_if_ranks is not None and rs.analysis.what_if_ranks.from_ranks == 2


# ---- thresholds --------------------------------------------------------------------------------

SOURCES = ("# published:", "# measured:", "# choice:", "# choice, informed by a measurement:")


def test_every_threshold_says_where_its_value_comes_from():
    lines = (ANALYSIS / "thresholds.py").read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    names = [n.targets[0].id for n in tree.body if isinstance(n, ast.Assign)]  # type: ignore[attr-defined]
    assert len(names) >= 40 and all(n.isupper() for n in names)
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        i = node.lineno - 2  # the line above the constant (0-based)
        # Constants written together share the comment above the first of them.
        while i >= 0 and (lines[i].startswith("#") and not lines[i].startswith(SOURCES) or "=" in lines[i]
                          and not lines[i].startswith("#")):
            i -= 1
        assert i >= 0 and lines[i].startswith(SOURCES), f"{node.targets[0].id}: no '# published/measured/choice' above"  # type: ignore[attr-defined]


def test_no_other_analysis_module_keeps_a_threshold_of_its_own():
    # A module-level number is a threshold: it belongs in thresholds.py with its source. The one
    # exception is a floating-point guard that decides nothing (compare's _EPS).
    def numeric(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(
            node.value, bool) or isinstance(node, ast.BinOp) and numeric(node.left) and numeric(node.right)

    found = []
    for path in sorted(ANALYSIS.glob("*.py")):
        if path.name == "thresholds.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and numeric(node.value):
                name = getattr(node.targets[0], "id", "?")
                if (path.name, name) != ("compare.py", "_EPS"):
                    found.append(f"{path.name}: {name}")
    assert not found


def test_cpu_saturation_has_one_definition():
    # The tree's CPU plus other load against the usable CPUs, wherever it is asked.
    from loaderbench.analysis.wait import cpu_saturated

    assert cpu_saturated(85.0, 0.0, 1) is True and cpu_saturated(84.0, None, 1) is False
    assert cpu_saturated(100.0, 0.8, 2) is True  # 1.0 + 0.8 >= 0.85 x 2 = 1.7
    assert cpu_saturated(None, 2.0, 2) is None and cpu_saturated(100.0, 0.0, None) is None
    def uses(path: Path) -> bool:
        return any(isinstance(n, ast.Name) and n.id == "CPU_SATURATED" or isinstance(n, ast.Attribute)
                   and n.attr == "CPU_SATURATED" for n in ast.walk(ast.parse(path.read_text())))

    assert sorted(p.name for p in (ROOT / "loaderbench").rglob("*.py") if uses(p)) == ["thresholds.py", "wait.py"]
