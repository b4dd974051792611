"""The README stays an overview with a map of docs/, and the docs' links and paths stay alive."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RUN_COMMAND = "pip install -e . && loaderbench sweep"
TEST_COMMAND = 'pip install -e ".[test,tensorboard,lightning,hf]" && python3 -m pytest'
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"`((?:loaderbench|examples|configs|tests|docs|benchmarks)/[\w./-]+\.(?:py|toml|md|json|png|txt))`")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _map_section(text: str) -> str:
    start = text.index("\n## Documentation\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_readme_is_short_and_keeps_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; the reference belongs in docs/"
    # The two commands, exactly, each on a line of its own (CI runs the second through .ci/run).
    assert RUN_COMMAND in lines and TEST_COMMAND in lines
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text().splitlines()


def test_readme_maps_every_docs_page_and_each_exists():
    mapped = [m for m in LINK.findall(_map_section(README.read_text())) if m.startswith("docs/")]
    assert mapped, "the README's map of docs/ lists no page"
    missing = [m for m in mapped if not (ROOT / m).is_file()]
    assert missing == [], f"the README maps pages that do not exist: {missing}"
    assert len(mapped) == len(set(mapped))
    unmapped = [p for p in sorted(q.relative_to(ROOT).as_posix() for q in DOCS.glob("*.md")) if p not in mapped]
    assert unmapped == [], f"docs pages without a line in the README's map: {unmapped}"


def test_relative_links_and_repository_paths_in_the_docs_exist():
    broken = []
    for page in _pages():
        text = page.read_text()
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL or an anchor on the same page
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: ({target})")
        for path in REPO_PATH.findall(text):
            if not (ROOT / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: `{path}`")
    assert broken == []


def test_every_sweep_flag_and_toml_key_is_documented():
    import typer.main

    from loaderbench.cli import app
    from loaderbench.orchestration.config import SCHEMA

    page = (DOCS / "sweep.md").read_text()
    flags = [o for p in typer.main.get_command(app).commands["sweep"].params for o in p.opts if o.startswith("--")]
    assert "--time-budget" in flags and len(flags) > 30
    assert [f for f in flags if not re.search(rf"`{re.escape(f)}(?![\w-])", page)] == []
    keys = [k for section in SCHEMA.values() for k in section]
    assert [k for k in keys if not re.search(rf"\b{k}\b", page)] == []
