"""Golden renderings: every result file kept in docs/data and tests/data renders exactly as in
tests/data/expected/ (the table at 200 and at 100 columns, and markdown), with the conclusions
this version of the analysis draws from its raw samples. Regenerate a golden file on purpose,
after checking the difference: `COLUMNS=200 loaderbench show FILE > tests/data/expected/NAME.table.txt`."""

from __future__ import annotations

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


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("suffix, args, columns", [
    ("table.txt", [], "200"), ("table100.txt", [], "100"), ("md", ["--format", "markdown"], "200"),
])
def test_show_renders_the_golden_file(path, suffix, args, columns):
    res = CliRunner().invoke(app, ["show", str(path), *args], env={"COLUMNS": columns})
    assert res.exit_code == 0, res.output
    assert res.stdout == (EXPECTED / f"{path.stem}.{suffix}").read_text()
