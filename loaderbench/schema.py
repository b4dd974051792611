"""Result-file schema versions: recognise, migrate old ones step by step, refuse what cannot be read.

`migrate(data, path)` takes the parsed JSON of a result file of any version and returns it in the
current format (`model.SCHEMA_VERSION`), ready for `ResultSet.from_dict`; `results.read_results`
calls it on every load. No torch, no I/O.

The versions (example files of each live in tests/data/ for good):

- **0** (loaderbench before the format was versioned as it is today): top-level
  `"schema_version": 0` and `"loaderbench_version"` instead of `"tool": "loaderbench"` +
  `"tool_version"`; per trial and in the summary, memory was the process tree's summed USS,
  `memory_uss_bytes`, and there was no `memory_pss_bytes`. Migrated: `tool` and `tool_version`
  are filled in; the trials keep `memory_uss_bytes` (the Trial field of the same meaning);
  `memory_pss_bytes` stays empty, because USS undercounts forked workers that share pages and
  must not be shown as PSS; `schema_written` (0) records the origin, so `compare` does not
  compare it with runs measured today. Refused: a version-0 file without raw
  per-batch timings (`trials[*].step_s`), which every statistic is derived from.
- **1**: warnings and trial notes are plain strings; the recommendation carries its reasoning
  as one English `reason`. Migrated: each warning and note becomes `{"kind", "message"}`, its
  kind read from the text (`model.WarningKind.of_text`); `reason` is dropped (the findings are
  derived again from the raw trials on every load, like every summary).
- **2**: typed warnings and notes, the recommendation's `findings` as data (a `data` dict per
  finding), and in `analysis` both what the sweep recorded as it ran (search, drift, timing,
  predictions, ...) and what the analysis derived (headroom, loader ceiling, config findings).
  Migrated: what the sweep recorded moves to `sweep` (a search step that was a disputed repeat,
  its `why` starting "repeat:", gets `repeat: true`); what the analysis derived, and the
  recommendation, are dropped (derived again from the raw trials on every load).
- **3**: the current format (see docs/results.md): `sweep` (conclusions-free records of
  the run), `analysis` (`conclusions.Analysis`: the recommendation's findings as one typed
  payload per kind, the ceilings as shown, headroom, loader ceiling, notes, predictions,
  what-if) and each summary's judgements (noise, ranking, ceiling shares, CPU saturation).

Every migration records the version a file was written with in `schema_written`.

Read rule for every version (`mark_legacy_probes`, after `migrate`, which keeps a current file as
it is): a trial with a loader ceiling but no `loader_alone_method` key was probed before
sustained rates were measured (half a second of draws, NOTE [loader ceiling] in
measure/loop.py); its method is set to "legacy", which the analysis shows as a bound, never a
rate (this version writes the key on every trial, with or without a probe).
A newer version is refused with the version it needs; anything else that is not a loaderbench
result is refused naming what is missing. Each refusal is a `ResultsFormatError` (exit code 2).

To add version N+1: bump `model.SCHEMA_VERSION`, write `_vN_to_vN1(data, path)` and register it
in `_MIGRATIONS`, and add `tests/data/results-vN1-*.json`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaderbench.errors import ResultsFormatError
from loaderbench.model import SCHEMA_VERSION

OLDEST_READABLE = 0


def measured_alike(a: int, b: int) -> bool:
    """Whether files written with schema versions `a` and `b` hold numbers measured the same way
    (version 0 measured memory as USS and is not; versions 1 to 3 differ in how conclusions are
    stored, which every load derives again from the raw trials)."""
    return (a >= 1) == (b >= 1)


def detect_version(data: Any, path: Path | str) -> int:
    """The schema version of a parsed result file. Raises ResultsFormatError when it is not a
    loaderbench result file or its version is not an integer."""
    if not isinstance(data, dict):
        raise ResultsFormatError(
            f"{path}: not a loaderbench result file (the JSON is a {type(data).__name__}, not an object)"
        )
    is_ours = data.get("tool") == "loaderbench" or "loaderbench_version" in data
    if not is_ours or "schema_version" not in data:
        raise ResultsFormatError(
            f"{path}: not a loaderbench result file (no 'tool': 'loaderbench' / 'schema_version'); "
            "pass a file written by `loaderbench sweep --output`"
        )
    version = data["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ResultsFormatError(f"{path}: schema_version must be an integer, got {version!r}")
    return version


def _v0_to_v1(data: dict[str, Any], path: Path | str) -> dict[str, Any]:
    results = data.get("results")
    if not isinstance(results, list):
        raise ResultsFormatError(f"{path}: schema_version 0 file without a 'results' list; re-run the sweep")
    for i, r in enumerate(results):
        if not isinstance(r, dict):
            raise ResultsFormatError(f"{path}: results[{i}] is not an object; re-run the sweep")
        for j, t in enumerate(r.get("trials") or []):
            if not isinstance(t, dict) or not isinstance(t.get("step_s"), list):
                raise ResultsFormatError(
                    f"{path}: schema_version 0 file without raw per-batch timings "
                    f"(results[{i}].trials[{j}].step_s) cannot be migrated; every statistic is derived "
                    "from them: re-run the sweep with this loaderbench"
                )
            t.setdefault("memory_pss_bytes", None)
        summary = r.get("summary")
        if isinstance(summary, dict):
            summary.pop("memory_uss_bytes", None)
            summary.setdefault("memory_pss_bytes", None)
    out = dict(data)
    out["tool"] = "loaderbench"
    out["tool_version"] = str(out.pop("loaderbench_version", "") or "")
    out["schema_version"] = 1
    return out


# The keys of a schema-2 `analysis` that the sweep recorded as it ran (the rest was derived).
_SWEEP_KEYS = ("sweep_wall_s", "since_start_s", "configs_planned", "interrupted", "epoch_batches",
               "measuring_processes", "timing", "search", "drift", "predictions", "prediction_check", "model",
               "loader_defaults")


def _v2_to_v3(data: dict[str, Any], path: Path | str) -> dict[str, Any]:
    from loaderbench.model import Verdict

    out = dict(data)
    analysis = out.pop("analysis", None) or {}
    if not isinstance(analysis, dict):
        raise ResultsFormatError(f"{path}: 'analysis' is not an object; re-run the sweep")
    sweep = {k: analysis[k] for k in _SWEEP_KEYS if analysis.get(k) is not None}
    search = sweep.get("search")
    if isinstance(search, dict):
        search = dict(search)
        search["steps"] = [{**st, "repeat": str(st.get("why", "")).startswith("repeat:")}
                           for st in search.get("steps") or [] if isinstance(st, dict)]
        sweep["search"] = search
    out["sweep"] = sweep
    out.pop("recommendation", None)
    verdicts = {v.value for v in Verdict}
    for r in out.get("results") or []:
        if isinstance(r, dict) and isinstance(r.get("summary"), dict):
            # The summary's judgements are derived again on every load; a verdict written with its
            # period ("loader-bound (stall every 8 batches)") or a wait part since renamed is dropped.
            summary = {k: v for k, v in r["summary"].items() if k != "wait_parts_s"}
            if summary.get("verdict") not in verdicts:
                summary["verdict"] = None
            r["summary"] = summary
    out["schema_version"] = 3
    return out


def _v1_to_v2(data: dict[str, Any], path: Path | str) -> dict[str, Any]:
    from loaderbench.model import Note

    out = dict(data)
    results = []
    for r in data.get("results") or []:
        if not isinstance(r, dict):
            raise ResultsFormatError(f"{path}: a result is not an object; re-run the sweep")
        r = dict(r)
        r["warnings"] = [Note.from_dict(w).to_dict() for w in r.get("warnings") or []]
        trials = []
        for t in r.get("trials") or []:
            t = dict(t)
            t["notes"] = [Note.from_dict(n).to_dict() for n in t.get("notes") or []]
            trials.append(t)
        r["trials"] = trials
        results.append(r)
    out["results"] = results
    rec = out.get("recommendation")
    if isinstance(rec, dict):
        out["recommendation"] = {k: v for k, v in rec.items() if k != "reason"}
    out["schema_version"] = 2
    return out


# version -> the function that turns a file of that version into the next version.
_MIGRATIONS: dict[int, Callable[[dict[str, Any], Path | str], dict[str, Any]]] = {
    0: _v0_to_v1,
    1: _v1_to_v2,
    2: _v2_to_v3,
}


def migrate(data: Any, path: Path | str) -> dict[str, Any]:
    """`data` (a parsed result file of any version) in the current format.

    Older versions are migrated one step at a time (the input is not modified); a newer version
    or an unknown older one is refused with ResultsFormatError naming the file, its version and
    what to do.
    """
    version = detect_version(data, path)
    if version > SCHEMA_VERSION:
        raise ResultsFormatError(
            f"{path}: schema_version {version} is newer than this loaderbench reads "
            f"(up to {SCHEMA_VERSION}); it needs a loaderbench that reads schema {version}: "
            "upgrade loaderbench (pip install -U loaderbench)"
        )
    if version < OLDEST_READABLE:
        raise ResultsFormatError(
            f"{path}: schema_version {version} is not supported (this loaderbench reads "
            f"{OLDEST_READABLE} to {SCHEMA_VERSION}); re-run the sweep"
        )
    out = copy.deepcopy(data)
    if version < SCHEMA_VERSION:
        out.setdefault("schema_written", version)
    while version < SCHEMA_VERSION:
        step = _MIGRATIONS.get(version)
        if step is None:  # pragma: no cover - a gap in _MIGRATIONS is a programming error
            raise ResultsFormatError(f"{path}: no migration from schema_version {version}; re-run the sweep")
        out = step(out, path)
        version = detect_version(out, path)
    if out.get("tool") != "loaderbench":
        raise ResultsFormatError(
            f"{path}: not a loaderbench result file (no 'tool': 'loaderbench'); "
            "pass a file written by `loaderbench sweep --output`"
        )
    return out


def mark_legacy_probes(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a result file in the current format, as `migrate` returns it) with
    `loader_alone_method` "legacy" on every trial (and rank's trial) that has a loader ceiling
    and no method key: a probe of a version before sustained rates (the read rule above;
    results.read_results applies it). In place; returns `data`."""
    def mark(t: Any) -> None:
        if not isinstance(t, dict):
            return
        if t.get("loader_alone_samples_per_s") is not None and "loader_alone_method" not in t:
            t["loader_alone_method"] = "legacy"
        for rank_trial in t.get("rank_trials") or []:
            mark(rank_trial)

    for r in data.get("results") or []:
        if isinstance(r, dict):
            for t in r.get("trials") or []:
                mark(t)
    return data
