"""The analysis: from raw per-batch samples to every conclusion the outputs show.

Pure: no torch, no I/O, so `show`, `compare` and `check` run it on a CPU-only runner without
importing torch. `analyze(result_set)` is the one entry point: summaries and verdicts per config
(`wait`), the knee (`knee`), the recommendation's findings, the headroom and the binding
ceiling (`advice`). Renderers only format what it computed.
"""

from __future__ import annotations

from loaderbench.analysis.advice import (
    headroom,
    loader_ceiling,
    memory_per_worker,
    partial_batches,
    recommend,
    served_from_cache,
)
from loaderbench.analysis.ceiling import ceilings_by_batch, compute_ceiling
from loaderbench.analysis.knee import listed_first_ties
from loaderbench.analysis.statistics import DEFAULT_TOLERANCE, fetch_prep, summarize
from loaderbench.analysis.wait import stall_period, verdict_for, wait_parts_per_batch, workers_needed
from loaderbench.model import ConfigResult, ResultSet, Verdict

__all__ = ["analyze", "baseline_row", "summarize_config"]


def summarize_config(result: ConfigResult, *, loader_only: bool = False) -> None:
    """Derive `result.summary` from its trials: statistics (stats.summarize), the wait parts,
    the verdict, the stall period of a loader-bound config and its workers-needed estimate.
    Mutates `result`; a config without trials keeps no summary."""
    if result.status != "ok" or not result.trials:
        result.summary = None
        return
    s = summarize(result.trials)
    result.summary = s
    s.wait_parts_s = wait_parts_per_batch(result)
    verdict, tail_only = verdict_for(result, loader_only=loader_only)
    s.verdict, s.tail_only = verdict.value, tail_only
    if verdict is Verdict.LOADER_BOUND:
        s.stall_period_batches = stall_period(result.trials[0].data_wait_s, result.trials[0].step_s)
        s.workers_needed = workers_needed(result)


def baseline_row(rs: ResultSet) -> tuple[ConfigResult | None, str]:
    """The row the headroom starts from: the first measured config matching
    `--baseline-settings` (the user's current settings: "current"), else the first measured
    row ("first")."""
    wanted = (rs.config or {}).get("baseline_settings") or {}
    measured = [r for r in rs.results if r.summary is not None]
    if wanted:
        for r in measured:
            if all(_setting(r, k) == v for k, v in wanted.items()):
                return r, "current"
    return (measured[0] if measured else None), "first"


def _setting(r: ConfigResult, name: str) -> object:
    """A config's setting by name (a grid axis or a loader argument), None when it has none."""
    try:
        return r.settings.value(name)
    except KeyError:
        return None


def analyze(result_set: ResultSet) -> None:
    """(Re)derive every summary, verdict, the recommendation and its findings, the headroom and
    the binding ceiling of `result_set` from its raw trials, with this version's analysis (so
    `show` of an older file uses current rules). Mutates `result_set`: `results[*].summary`,
    `recommendation`, and in `analysis`: `fetch_prep`, `headroom`, `loader_ceiling`,
    `compute_ceiling` (per batch size, at the samples its batches held), `config_findings`, and
    `listed_first` when the user's listing of a loader argument decided the knee
    (knee.listed_first_ties)."""
    cfg = result_set.config or {}
    measure = cfg.get("measure") or {}
    tolerance = float(measure.get("tolerance", DEFAULT_TOLERANCE))
    loader_only = (cfg.get("compute") or {}).get("kind") == "none"
    usable = (result_set.environment or {}).get("usable_cpus")
    epoch_batches = measure.get("epoch_batches") or (result_set.analysis or {}).get("epoch_batches")
    compute_kind = (cfg.get("compute") or {}).get("kind")
    raw_ceilings = (result_set.ceilings or {}).get("compute") or {}
    for r in result_set.results:
        summarize_config(r, loader_only=loader_only)
        if r.summary is not None:
            r.summary.compute_ceiling_samples_per_s = compute_ceiling(r, raw_ceilings, compute_kind)
    analysis = result_set.analysis
    analysis["fetch_prep"] = fetch_prep(result_set.results)
    # With --cache both, rank the cold runs: what a first epoch, or a dataset larger than the
    # page cache, sees (the warm runs give the prep stall in `fetch_prep`).
    ranked = [r for r in result_set.results if r.cache != "warm"] or result_set.results
    result_set.recommendation = recommend(
        ranked, tolerance=tolerance, usable_cpus=usable, loader_only=loader_only,
        epoch_batches=int(epoch_batches) if epoch_batches else None, dataset=cfg.get("dataset"),
    )
    # Loader arguments have no known cost order: where the value listed first decided the knee.
    ties = listed_first_ties(ranked, tolerance=tolerance)
    if ties:
        analysis["listed_first"] = ties
    else:
        analysis.pop("listed_first", None)
    row, which = baseline_row(result_set)
    room = None if row is None or row.summary is None else headroom(row, row.summary.compute_ceiling_samples_per_s)
    analysis["headroom"] = None if room is None else {**room, "which": which}
    analysis["loader_ceiling"] = loader_ceiling(result_set.results)
    analysis["compute_ceiling"] = ceilings_by_batch(result_set.results, raw_ceilings, compute_kind)
    analysis["config_findings"] = [f.to_dict() for f in [
        *memory_per_worker(result_set.results), *partial_batches(result_set.results, cfg.get("dataset")),
        *served_from_cache(result_set.results),
    ]]
