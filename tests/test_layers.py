"""The package's shape: no import circle, no import from a lower layer to a higher one, and the
commands that read saved results (show, compare, check) never import torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "loaderbench"

# Layer of every module (the first matching prefix wins); a module may import its own layer and
# the ones listed as allowed below it. The package root (`loaderbench`, the public facade) is a
# module like any other: only the CLI may import it.
LAYERS = {
    "model": ("loaderbench._version", "loaderbench.model", "loaderbench.errors", "loaderbench.schema",
              "loaderbench.results", "loaderbench.kinds", "loaderbench.parsers", "loaderbench.conclusions"),
    "machine": ("loaderbench.machine",),
    "workload": ("loaderbench.workload",),
    "storage": ("loaderbench.storage",),
    "analysis": ("loaderbench.analysis",),
    "measure": ("loaderbench.measure",),
    "orchestration": ("loaderbench.orchestration",),
    "render": ("loaderbench.render",),
    # In your own training loop: the watch and its integrations (they word their summaries
    # through render/, so they sit above it).
    "in-loop": ("loaderbench.inloop", "loaderbench.integrations"),
    "cli": ("loaderbench.cli", "loaderbench.__main__"),
    "api": ("loaderbench",),
}
ALLOWED = {
    "model": {"model"},
    "machine": {"model", "machine"},
    "workload": {"model", "workload"},
    "storage": {"model", "machine", "storage"},
    "analysis": {"model", "analysis"},
    "measure": {"model", "machine", "workload", "storage", "measure"},
    "orchestration": {"model", "machine", "workload", "storage", "analysis", "measure", "orchestration"},
    "render": {"model", "analysis", "render"},
    "in-loop": {"model", "machine", "workload", "storage", "analysis", "measure", "orchestration", "render",
                "in-loop"},
    "cli": set(LAYERS),
    "api": set(LAYERS),
}

# At most this many modules at the package root besides `__init__`, `__main__` and `_version`: the
# root holds the model layer only (typed records, registries, result files); everything else lives
# in the folder of its layer.
ROOT_MODULES_MAX = 8


def layer_of(module: str) -> str:
    for layer, prefixes in LAYERS.items():
        if layer != "api" and any(module == p or module.startswith(p + ".") for p in prefixes):
            return layer
    assert module == "loaderbench", f"{module} is in no layer: add it to LAYERS"
    return "api"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every loaderbench module `path` imports, lazy imports inside functions included."""
    name = module_name(path)
    modules = {module_name(p) for p in PKG.rglob("*.py")}
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("loaderbench"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base.startswith("loaderbench"):
                subs = {f"{base}.{a.name}" for a in node.names} & modules
                # `from pkg import submodule` depends on the submodule; anything else on `base`.
                out.update(subs if subs else {base})
    resolved = set()
    for target in out:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PKG.rglob("*.py")}


def test_no_import_goes_up_a_layer():
    wrong = [
        f"{a} ({layer_of(a)}) imports {b} ({layer_of(b)})"
        for a, targets in graph().items() for b in sorted(targets)
        if layer_of(b) not in ALLOWED[layer_of(a)]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_root_imports_are_seen():
    """The facade counts like any module: a model-layer module that imported `loaderbench` (for
    its version, say) would be an upward import, and the graph must show it."""
    g = graph()
    assert {"loaderbench._version", "loaderbench.orchestration.api", "loaderbench.inloop.watcher"} <= g["loaderbench"]
    assert not [a for a, targets in g.items() if "loaderbench" in targets and layer_of(a) != "cli"]
    fake = {"loaderbench.model": {"loaderbench"}}
    assert [b for a, targets in fake.items() for b in targets if layer_of(b) not in ALLOWED[layer_of(a)]] == [
        "loaderbench"]


def test_few_modules_at_the_root():
    root = sorted(p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__", "_version"))
    assert len(root) <= ROOT_MODULES_MAX, root
    assert all(layer_of(f"loaderbench.{m}") == "model" for m in root), root


def test_no_import_circle():
    g = graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                return path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(g):
        if start not in state:
            cycle = visit(start, [])
            assert cycle is None, " -> ".join(cycle)


def test_reading_results_never_imports_torch():
    code = (
        "import sys\n"
        "import loaderbench.cli\n"
        "from loaderbench.analysis import analyze\n"
        "from loaderbench.analysis.compare import compare_results\n"
        "from loaderbench.results import read_results\n"
        "from loaderbench.render import compare, findings, sweep\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PKG.parent)


def test_render_imports_only_types_from_the_analysis():
    """render/ decides nothing: what it takes from analysis/ is types (records and enums), never a
    function or a constant to decide with; its conclusions come from the typed records of
    conclusions.py, which the result file holds."""
    import importlib

    wrong = []
    for path in sorted((PKG / "render").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                wrong += [f"{path.name}: import {a.name}" for a in node.names if a.name.startswith("loaderbench.analysis")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loaderbench.analysis"):
                module = importlib.import_module(node.module or "")
                wrong += [f"{path.name}: from {node.module} import {a.name}" for a in node.names
                          if not isinstance(getattr(module, a.name), type)]
    assert not wrong, "\n".join(wrong)
    # It would see one: a function imported from the analysis is not a type.
    assert not isinstance(importlib.import_module("loaderbench.analysis.predict").what_if_cpus, type)
