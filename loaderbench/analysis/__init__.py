"""The analysis: from raw per-batch samples to every conclusion the outputs show.

Pure: no torch, no I/O, so `show`, `compare` and `check` run it on a CPU-only runner without
importing torch. `analyze(result_set)` is the one entry point, a forward pipeline of passes, each
writing a typed record the next one reads and none returning into a module already left:

    trials --statistics--> Summary (samples per batch, mean step, spread, noise, ranking;
           several ranks: the per-step maximum wait, each node's figures), fetch/prep splits
           --ceiling-->    each config's compute ceiling and shares of it; the ceilings as shown
           --wait-->       wait parts, then verdicts, bands, CPU saturation, stall periods
           --knee-->       Ranking (ranked, best, knee, ties a loader argument's listing decided)
           --stages-->     the sweep's stage profile of its pick (StageProfile), when it took one
           --advice-->     Recommendation (findings, the call and its imports; the profile's
                           long tail and fixed cost per fetch), notes on configs, headroom,
                           loader ceiling (sustained rates; bounds counted apart)
           --predict-->    what-if answer (every change asked, combined), a watched loop's
                           prediction, and where no setting clears the loader bottleneck the
                           changes to the pipeline that would (BeyondKnobs)
           --ranks-->      several nodes: the per-node view of the recommended config; the
                           what-if ranks=N from the per-step waits

(tests/test_analysis_pipeline.py follows a result set through it.) Renderers only format the
`Analysis` it returns (conclusions.py); every threshold it decides with is in thresholds.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from loaderbench.analysis import advice, ceiling, knee, predict, ranks, stages, statistics, wait
from loaderbench.analysis.thresholds import DEFAULT_TOLERANCE
from loaderbench.conclusions import (
    Analysis,
    Baseline,
    Finding,
    IdleWorkers,
    Knee,
    LoaderClass,
    NoProfile,
    NotCleared,
    NotClearedCause,
    Partial,
    StageProfile,
    StepSlower,
    WhatIf,
)
from loaderbench.model import ConfigResult, InputBound, LoaderSettings, Verdict
from loaderbench.results import ResultSet

__all__ = ["analyze", "baseline_row", "summarize_config"]


def summarize_config(result: ConfigResult, *, loader_only: bool = False, usable_cpus: int | None = None) -> None:
    """The per-config passes on one config alone: its summary (statistics), wait parts and
    verdict (wait); no compute ceiling. Mutates `result`; a config without trials keeps no
    summary. (`analyze` runs the passes over a whole result set.)"""
    statistics.summarize_result(result, usable_cpus)
    wait.split_waits([result], usable_cpus)
    wait.judge([result], loader_only=loader_only, usable_cpus=usable_cpus)


def baseline_row(rs: ResultSet) -> tuple[ConfigResult | None, Baseline]:
    """The row the headroom starts from: the first measured config matching
    `--baseline-settings` (the user's current settings: CURRENT), else the first measured row
    (FIRST)."""
    wanted = (rs.config or {}).get("baseline_settings") or {}
    measured = [r for r in rs.results if r.summary is not None]
    if wanted:
        for r in measured:
            if all(_setting(r, k) == v for k, v in wanted.items()):
                return r, Baseline.CURRENT
    return (measured[0] if measured else None), Baseline.FIRST


def _setting(r: ConfigResult, name: str) -> object:
    """A config's setting by name (a grid axis or a loader argument), None when it has none."""
    try:
        return r.settings.value(name)
    except KeyError:
        return None


def analyze(result_set: ResultSet, *, what_if: Sequence[WhatIf] | None = None) -> Analysis:
    """(Re)derive every summary and verdict of `result_set` from its raw trials, and everything
    the outputs say, with this version's analysis (so `show` of an older file uses current
    rules); `what_if` also answers the what-if questions asked (`--what-if`, one change each:
    every change for the pipeline model combined into one question, and a ranks= question;
    ValueError for a change given twice) for the recommended config; None: the changes the
    sweep's config asked (TOML `what_if`), if any. Sets each `results[*].summary` and `result_set.analysis`, and returns the
    `Analysis`."""
    rs = result_set
    cfg = rs.config or {}
    if what_if is None:
        what_if = [predict.parse_what_if(q) for q in cfg.get("what_if") or ()]
    model_question, ranks_question = predict.split_what_if(what_if)
    measure = cfg.get("measure") or {}
    tolerance = float(measure.get("tolerance", DEFAULT_TOLERANCE))
    compute_kind = (cfg.get("compute") or {}).get("kind")
    loader_only = compute_kind == "none"
    usable = (rs.environment or {}).get("usable_cpus")
    usable = usable if isinstance(usable, int) else None
    epoch_batches = measure.get("epoch_batches") or rs.sweep.epoch_batches
    results = rs.results

    # 1. summaries
    for r in results:
        statistics.summarize_result(r, usable)
    fetch_prep = statistics.fetch_prep(results)
    # 2. ceilings
    ceiling.set_ceilings(results, rs.ceilings, compute_kind)
    shown = ceiling.ceilings_shown(results, rs.ceilings, compute_kind)
    # 3. wait parts and verdicts
    wait.split_waits(results, usable)
    wait.judge(results, loader_only=loader_only, usable_cpus=usable)
    # 4. the knee: with --cache both, rank the cold runs (what a first epoch, or a dataset larger
    # than the page cache, sees; the warm runs give the prep stall in the fetch/prep split).
    candidates = [r for r in results if r.cache != "warm"] or results
    ranking = knee.rank(candidates, tolerance=tolerance)
    # 5. findings and the recommendation; the stage profile of the pick (its tail, a fixed cost
    # per fetch)
    partial = _partial(rs)
    recommendation = advice.recommend(
        candidates, ranking=ranking, usable_cpus=usable, loader_only=loader_only,
        epoch_batches=int(epoch_batches) if epoch_batches else None, dataset=cfg.get("dataset"),
        grid=cfg.get("grid"), stopped=partial is not None,
        budget_ended=rs.sweep.search is not None and rs.sweep.search.budget_ended,
    )
    _sustained(rs, recommendation.findings, tolerance, usable)
    _unsettled_drift(rs, recommendation.findings)
    profile = stage_profile(rs, ranking.knee, any(isinstance(f, NotCleared) for f in recommendation.findings))
    taken = rs.sweep.profile
    recommendation.findings.extend([
        *advice.long_tail(ranking.ranked, ranking.knee, profile, None if taken is None else taken.in_order, tolerance),
        *advice.batched_fetch(profile, ranking.knee),
    ])
    row, which = baseline_row(rs)
    # The knee's slowed step is named by the recommendation (StepSlower), not again as a note.
    named = [f.settings for f in recommendation.findings if isinstance(f, StepSlower)]
    idle = advice.idle_workers(results)
    _ran_dry(recommendation.findings, idle)
    notes = [*advice.memory_per_worker(results), *advice.partial_batches(results, cfg.get("dataset")),
             *advice.served_from_cache(results),
             *advice.noisy(results, next((f for f in recommendation.findings if isinstance(f, Knee)), None)),
             *advice.step_slowed_rows(results, usable, named, recommendation.settings), *idle,
             *advice.epoch_iter(results), *advice.worker_slower(results), *advice.disturbed_rows(results, usable)]
    analysis = Analysis(
        recommendation=recommendation,
        compute_ceilings=shown,
        headroom=None if row is None else advice.headroom(row, which),
        loader_ceiling=advice.loader_ceiling([r for r in results if r.ranked]),
        fetch_prep=fetch_prep,
        notes=notes,
        partial=partial,
        cold_ranked=any(r.cache == "cold" for r in results) and any(r.cache == "warm" for r in results),
        unprobed=sorted({t.loader_alone_note for r in results if r.summary is not None
                         and r.summary.loader_ceiling_samples_per_s is None
                         and r.summary.loader_ceiling_bound_samples_per_s is None
                         for t in r.trials if t.loader_alone_note}),
        loader=loader_class(rs),
        off_grid=off_grid(rs),
    )
    # 6. predictions: the table's predicted rows against their ceiling, the what-if, a watched
    # loop's prediction.
    by_batch = {c.ceiling.batch_size: c.samples_per_s for c in shown}
    analysis.predictions = [replace(p, ceiling_share=p.samples_per_s / by_batch[p.settings.batch_size]
                                    if by_batch.get(p.settings.batch_size) else None) for p in rs.sweep.predictions]
    analysis.profile = profile
    if model_question is not None:
        analysis.what_if = predict.answer_what_if(model_question, results, recommendation.settings, tolerance,
                                                  usable, profile)
    # Where the settings were not all reached (stopped, or the budget ended the search before more
    # workers), "no setting clears the loader bottleneck" is not known: no changes beyond them.
    if recommendation.settings is not None and any(isinstance(f, NotCleared) and f.cause is not NotClearedCause.NOT_REACHED
                                                   for f in recommendation.findings):
        analysis.beyond_knobs = predict.beyond_knobs(candidates, recommendation.settings, tolerance, usable, profile)
        if analysis.beyond_knobs is not None and profile is None:
            analysis.beyond_knobs = replace(analysis.beyond_knobs, no_profile=(
                NoProfile.FLAG if (cfg.get("measure") or {}).get("profile") is False
                else NoProfile.SEVERAL_PROCESSES if rs.environment.get("distributed") else NoProfile.NOT_TAKEN))
        knee_found = next((f for f in recommendation.findings if isinstance(f, Knee)), None)
        if (analysis.beyond_knobs is not None and knee_found is not None
                and knee_found.settings == analysis.beyond_knobs.settings and knee_found.sustained_samples_per_s):
            analysis.beyond_knobs = replace(analysis.beyond_knobs,
                                            sustained_samples_per_s=knee_found.sustained_samples_per_s)
    if cfg.get("watch") and results:
        analysis.more_workers = predict.predict_more_workers(results[0], usable, tolerance)
    # 7. several ranks and nodes: the per-node view, the what-if ranks=N.
    if any(r.summary is not None and r.summary.nodes for r in candidates):
        analysis.per_node = ranks.per_node(candidates, recommendation.settings, rs.environment)
    if ranks_question is not None and ranks_question.ranks is not None:
        analysis.what_if_ranks = ranks.answer_ranks(ranks_question.ranks, candidates, recommendation.settings)
    rs.analysis = analysis
    return analysis


def _sustained(rs: ResultSet, findings: list[Finding], tolerance: float, usable_cpus: int | None) -> None:
    """The Knee of `findings` gets the pick's sustained figure (results.Sustained, NOTE [the
    pick's sustained figure] in orchestration/sustained.py) when that trial measured the knee,
    or is marked as resting on the search's short windows where --time-budget left no time for
    it (SweepRecord.sustained_left_out). `tolerance`: the sweep's (a fraction), for the figure's
    uncertainty where its readings disagree (statistics.sustained_uncertainty); a step that
    slowed over the longer window(s) alone is named with its CPUs (advice.window_step_slowed)."""
    taken = rs.sweep.sustained
    if taken is None:
        left_out = rs.sweep.sustained_left_out
        for i, f in enumerate(findings):
            if isinstance(f, Knee) and left_out is not None and f.settings.key() == left_out:
                row = next((r for r in rs.results if r.settings == f.settings and r.status == "ok"), None)
                findings[i] = replace(f, sustained_left_out=True, search_batches_per_worker=(
                    None if row is None else statistics.window_batches_per_worker(row)))
        return
    knee = next((f for f in findings if isinstance(f, Knee) and f.settings.key() == taken.config), None)
    if knee is None:
        return
    windows = list(taken.windows_samples_per_s) or [taken.samples_per_s]
    row = next((r for r in rs.results if r.settings == knee.settings and r.status == "ok"), None)
    trials = [t for t in (taken.trial, taken.second) if t is not None]
    slowed = None if row is None else advice.window_step_slowed(row, trials, usable_cpus)
    for i, f in enumerate(findings):
        if f is knee:
            # The band follows the stall the headline states (not the loader-alone band).
            band = f.band if f.band is InputBound.LOADER_ALONE else wait.input_bound_band(taken.stall_fraction)
            findings[i] = replace(f, band=band, sustained_samples_per_s=taken.samples_per_s,
                                  sustained_stall_fraction=taken.stall_fraction, sustained_batches=taken.batches,
                                  sustained_batches_per_worker=taken.batches_per_worker,
                                  search_batches_per_worker=taken.search_batches_per_worker,
                                  sustained_windows=windows, sustained_settled=taken.settled,
                                  sustained_uncertainty=statistics.sustained_uncertainty(
                                      taken.samples_per_s, taken.search_samples_per_s, windows, taken.settled,
                                      tolerance),
                                  sustained_step=slowed)


def _ran_dry(findings: list[Finding], idle: list[Finding]) -> None:
    """The Knee of `findings` gets the workers whose share ran out inside its window and what the
    loader alone read after that (IdleRow.in_probe, `after_samples_per_s`), where that is under
    its figure (the sustained one where measured): its figure is then what the loader reached
    while every worker had work, at most what a whole epoch reaches."""
    rows = [row for f in idle if isinstance(f, IdleWorkers) for row in f.rows
            if row.in_probe and row.after_samples_per_s is not None]
    for i, f in enumerate(findings):
        if not isinstance(f, Knee):
            continue
        row = next((r for r in rows if r.settings == f.settings), None)
        figure = f.sustained_samples_per_s or f.samples_per_s
        if row is not None and row.after_samples_per_s is not None and row.after_samples_per_s < figure:
            findings[i] = replace(f, ran_dry_workers=row.no_batch, ran_dry_samples_per_s=row.after_samples_per_s)


def _unsettled_drift(rs: ResultSet, findings: list[Finding]) -> None:
    """The Knee of `findings` gets the drift check's fresh trial of it when the budget left no time
    to confirm the check (Drift.unconfirmed_for_budget) and that trial reads past the drift
    threshold against the knee's figure (its sustained figure where one was measured, else its
    warm trials, one of them perhaps the check's): a fresh process contradicted the pick's
    figure, and nothing settled it."""
    drift = rs.sweep.drift
    if drift is None or not drift.unconfirmed_for_budget or drift.fresh_samples_per_s is None:
        return
    limit = drift.threshold or 0.0
    for i, f in enumerate(findings):
        # Against the knee's figure now: a warm trial the check added may have settled it.
        figure = f.sustained_samples_per_s or f.samples_per_s if isinstance(f, Knee) else 0.0
        if (isinstance(f, Knee) and f.settings.key() == drift.config and figure > 0
                and abs(drift.fresh_samples_per_s / figure - 1.0) > limit):
            findings[i] = replace(f, fresh_samples_per_s=drift.fresh_samples_per_s,
                                  drift_threshold=drift.threshold)


def stage_profile(rs: ResultSet, knee_row: ConfigResult | None, not_cleared: bool = False) -> StageProfile | None:
    """The stages pass: the sweep's stage profile of its pick (`SweepRecord.profile`) as its
    table (analysis/stages.py), with the settings and device profiled, its wall time over the
    sweep's, and whether the loader binds at the knee (its verdict loader-bound, or
    `not_cleared`: no setting clears the loader bottleneck; the short block then sums the
    profile up); None when the sweep took none."""
    taken = rs.sweep.profile
    if taken is None or taken.record is None:
        return None
    table = stages.summarize_profile(taken.record)
    wall = rs.sweep.sweep_wall_s
    s = None if knee_row is None else knee_row.summary
    return replace(table, settings=taken.settings, device=taken.record.device,
                   loader_binds=not_cleared or (s is not None and s.verdict is Verdict.LOADER_BOUND),
                   sweep_share=taken.wall_s / wall if wall else None)


def loader_class(rs: ResultSet) -> LoaderClass | None:
    """The loader measured (`Analysis.loader`): its class (`--loader`, or a watched loader's),
    the loader arguments the configs and predicted configs set, in the order declared, and a
    watched loader's settings left at their defaults; None for torch's DataLoader with none."""
    name = ((rs.config or {}).get("dataset") or {}).get("loader")
    args: dict[str, None] = {}
    for s in [*(r.settings for r in rs.results), *(p.settings for p in rs.sweep.predictions)]:
        args.update(dict.fromkeys(k for k, _ in s.loader_args))
    defaults = dict(rs.sweep.loader_defaults)
    if not (name or args or defaults):
        return None
    return LoaderClass(name=name or None, args=list(args), defaults=defaults)


def off_grid(rs: ResultSet) -> list[LoaderSettings]:
    """The configs a search measured whose worker count the config's grid does not list (a
    dense search measures every count between the grid's; a widening goes past them); [] for a
    grid sweep or a file without its grid."""
    listed = ((rs.config or {}).get("grid") or {}).get("num_workers")
    if rs.sweep.search is None or not isinstance(listed, list):
        return []
    return [r.settings for r in rs.results if r.status != "skipped" and r.settings.num_workers not in listed]


def _partial(rs: ResultSet) -> Partial | None:
    """Whether the sweep stopped before its plan (interrupted, or fewer configs than planned
    for a grid), with how far it got."""
    sweep = rs.sweep
    searched = sweep.search is not None
    planned = sweep.configs_planned
    if not (sweep.interrupted or (not searched and planned and len(rs.results) < planned)):
        return None
    repeats = int(((rs.config or {}).get("measure") or {}).get("repeats") or 1)
    if searched:  # a search plans no fixed set of configs or repeats
        return Partial(searched=True, finished=sum(1 for r in rs.results if r.trials))
    short = sum(1 for r in rs.results if r.status == "ok" and 0 < len(r.trials) < repeats)
    return Partial(searched=False, finished=len(rs.results), planned=planned, short=short, repeats=repeats)
