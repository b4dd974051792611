"""`run_sweep`: the grid, each config in a fresh process, results saved after every config.

The core never prints: progress and warnings go to a `SweepObserver` the caller passes in.
"""

from __future__ import annotations

import datetime as _dt
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from loaderbench._version import __version__
from loaderbench.analysis import analyze
from loaderbench.analysis.predict import fit, predict, predict_anchored, prediction_errors, series_of
from loaderbench.kinds import KINDS
from loaderbench.measure.isolation import Outcome, Runner, run_isolated
from loaderbench.model import (
    ConfigResult,
    LoaderSettings,
    MeasureSpec,
    Note,
    Trial,
    TrialJob,
    WarningKind,
)
from loaderbench.orchestration.budget import budget_reserve_s, measuring_budget_s
from loaderbench.orchestration.ceilings import measure_ceilings, recheck_ceilings
from loaderbench.orchestration.config import SweepConfig
from loaderbench.orchestration.drift import DRIFT_MIN_CONFIGS, check_drift
from loaderbench.orchestration.grid import GridPoint
from loaderbench.orchestration.nodes import preflight_peers
from loaderbench.orchestration.observer import NullObserver, SweepObserver
from loaderbench.orchestration.plan import Machine, baseline_cell, cache_plan, config_hash, plan, row_order
from loaderbench.orchestration.preflight import (
    WorkloadFacts,
    preflight,
)
from loaderbench.orchestration.profile import sweep_profile_budget_s
from loaderbench.orchestration.search import HostLimits, Search
from loaderbench.orchestration.sustained import (
    measure_sustained,
    search_reserve_s,
    sustained_fits,
    sustained_reserve_s,
    sustained_window,
)
from loaderbench.results import PredictionCheck, ResultSet, SearchStep, Sustained, SweepProfile, Timing
from loaderbench.storage import set_cache_state


def run_sweep(
    config: SweepConfig,
    *,
    output: Path,
    environment: dict[str, Any],
    machine: Machine,
    observer: SweepObserver | None = None,
    cache_dir: str | None = None,
    runner: Runner = run_isolated,
    save: Callable[[ResultSet, Path], None] | None = None,
    now: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.timezone.utc),
    facts: WorkloadFacts | None = None,
    fresh_runner: Runner | None = None,
    files: list[Path] | None = None,
    started_at: float | None = None,
    peers: Sequence[Any] = (),
    profiler: Profiler | None = None,
) -> ResultSet:
    """Measure the configs of `config` (already resolved): with `config.search` "grid" every
    config, `config.repeats` times, interleaved across configs (repeat 1 of every config, then
    repeat 2, ...); with "auto" the model-guided search (search.py) chooses which configs to
    measure and which to repeat. Each trial runs through `runner`.

    The result file at `output` is rewritten atomically after every trial, so an interrupted
    sweep keeps what it measured. A failing or hanging config becomes a row with its status and
    error and the sweep goes on. With `facts` (from `validate_workload`), configs that cannot fit
    in /dev/shm are skipped with the reason, oversubscribed ones get a warning, and configs of an
    IterableDataset that every worker replays are flagged and never ranked (preflight.py).
    With `fresh_runner` (a process per config, when `runner` keeps one warm process), the knee is
    measured again at the end in a fresh process, and if a drift is confirmed the competing
    configs are measured again through `fresh_runner` (`check_drift`, `sweep.drift`).
    `--time-budget` counts from `started_at` (time.monotonic() when the command started; default
    now): the search starts no step that would end after it, keeping one trial's time for the
    step and, with `fresh_runner`, about two for the drift check (NOTE [time budget]).
    `peers`: the other nodes of a distributed sweep, whose preflight runs too (nodes.Peer).
    With `profiler` and `config.profile`, the pick is then profiled (`profiler(config, settings,
    budget_s)`, orchestration/profile.py NOTE [the sweep's stage profile]; the search keeps its
    budget), and where the profile finds a long per-sample tail the pick with `in_order=False`
    is measured too, interleaved with the pick's own repeats (`try_in_order`).
    KeyboardInterrupt is re-raised after the save.
    Returns the final ResultSet and where it was saved with summaries, verdicts and the recommendation.
    """
    from loaderbench.results import save_results

    obs = observer or NullObserver()
    save_fn = save or save_results
    compute = config.compute
    if compute is None:
        raise ValueError("run_sweep needs a resolved config (see resolve_defaults)")
    points = plan(config, machine)
    files, states = cache_plan(config, obs, files)
    entries = [(p, state) for p in points for state in states]
    results = [
        ConfigResult(settings=p.settings, status="ok", normalized_from=p.normalized_from, cache=state)
        for p, state in entries
    ]
    done = [False] * len(entries)
    result_set = ResultSet(
        config=config.to_dict(),
        environment=environment,
        results=[],
        label=config.label,
        created_utc=now().isoformat(timespec="seconds"),
        tool_version=__version__,
        config_hash=config_hash(config),
    )

    started = now()
    started_at = time.monotonic() if started_at is None else started_at
    trial_walls: list[float] = []
    # Where a sweep's time goes: trials, and in them the DataLoader's set-up, the worker start-up
    # to the first batch, the warm-up, the measured windows, the probes after the windows and
    # stopping the workers; and the compute ceiling (docs/benchmarks.md).
    timing = Timing()
    sweep = result_set.sweep

    def snapshot() -> None:
        sweep.sweep_wall_s = (now() - started).total_seconds()
        sweep.since_start_s = time.monotonic() - started_at  # what --time-budget counts
        sweep.configs_planned = len(points)
        # The rest of the trials' wall time: the measuring process's round trip (its start for a
        # fresh process, the reset between configs, the job and result files).
        timing.other_s = max(0.0, timing.trial_wall_s - sum(getattr(timing, k) for k in Timing.PARTS))
        sweep.timing = timing
        order = {p.settings: i for i, p in enumerate(points)}
        measured = [r for r, d in zip(results, done) if d]
        result_set.results = sorted(measured, key=lambda r: row_order(r.settings, order))
        analyze(result_set)
        save_fn(result_set, output)

    preflight(results, facts, environment, machine, obs)
    preflight_peers(results, facts, peers, obs)
    if config.measure.epoch_batches:
        sweep.epoch_batches = config.measure.epoch_batches
    elif facts is not None and facts.num_samples and KINDS[config.dataset.kind].own_length:
        # Only a real dataset has a meaningful epoch; synthetic and tensor lengths are arbitrary.
        # Per rank: DistributedSampler gives each of the world_size ranks its share of an epoch.
        bs = min(p.settings.batch_size for p in points)
        sweep.epoch_batches = max(1, facts.num_samples // (bs * machine.world_size))
    t_ceiling = time.monotonic()
    result_set.ceilings = measure_ceilings(config, compute, points, runner, cache_dir, obs,
                                           world_size=machine.world_size)
    timing.ceiling_s = time.monotonic() - t_ceiling

    def timed(job: TrialJob, via: Runner) -> Outcome:
        """`job` run through `via`, its wall time and phases added to the sweep's timing."""
        t0 = time.monotonic()
        try:
            outcome = via(job, on_batch=obs.batch)
        except KeyboardInterrupt:
            sweep.interrupted = True
            snapshot()
            raise
        wall = time.monotonic() - t0
        timing.trials += 1
        timing.trial_wall_s += wall
        trial_walls.append(wall)
        if outcome.trial is not None:
            timing.window_s += outcome.trial.wall_s
            timing.first_batch_s += outcome.trial.first_batch_s
            for phase in ("probe_s", "setup_s", "warmup_s", "stop_s"):
                setattr(timing, phase, getattr(timing, phase) + (getattr(outcome.trial, phase) or 0.0))
        return outcome

    def run_trial(i: int, repeat: int, via: Runner = runner, loader_alone: bool = False) -> ConfigResult:
        """One trial of entry `i` (its repeat index `repeat`), folded into its result; the loader
        ceiling is probed in a config's first trial, or when `loader_alone`."""
        point, state = entries[i]
        res = results[i]
        if res.status in ("failed", "hung", "skipped"):
            if res.status == "skipped" and not done[i]:
                done[i] = True
                snapshot()
            return res  # a config that failed once is not retried in later repeats
        obs.trial_started(timing.trials, point.settings, repeat)
        cache_state = None
        if state != "as-is":
            cache_state = set_cache_state(files, state, config.drop_caches).to_dict()
            if cache_state["achieved"] != state:
                note = (
                    f"--cache {state}: achieved {cache_state['achieved']}"
                    + (f" ({cache_state['reason']})" if cache_state.get("reason") else "")
                )
                if res.warn(Note.of(WarningKind.CACHE_NOT_ACHIEVED, note)):
                    obs.warning(f"{res.key()}: {note}")
                res.cache = f"not {state}"  # never labelled with a state it was not in
        job = TrialJob(
            point.settings, config.dataset, compute, config.measure, seed=config.seed + repeat,
            cache_dir=cache_dir, timeout_s=config.config_timeout_s,
            first_batch_timeout_s=first_batch_deadline(point.settings, results, config.config_timeout_s),
            # The loader ceiling once per config (NOTE [loader ceiling] in measure/loop.py).
            loader_alone=loader_alone or not any(t.loader_alone_method is not None or t.loader_alone_samples_per_s
                                                 is not None for t in res.trials),
            cache=state,
        )
        outcome = timed(job, via)
        if outcome.trial is not None:
            outcome.trial.cache_state = cache_state
        _apply(res, outcome)
        done[i] = True
        obs.trial_finished(res, outcome)
        snapshot()
        return res

    replicated = facts is not None and facts.replicated_across_workers is True
    if config.search == "auto" and replicated:
        obs.warning("the dataset's workers replay the same stream: every config is measured (as --search "
                    "grid), since only a measured row shows the duplicates")
    searched = config.search == "auto" and states == ("as-is",) and len(points) > 2 and not replicated
    # An auto sweep of two configs or fewer is measured as a grid; its pick still gets its
    # sustained figure (NOTE [the pick's sustained figure] in sustained.py).
    sustains = config.search == "auto" and states == ("as-is",) and not replicated
    index = {p.settings: i for i, (p, state) in enumerate(entries) if state == states[0]}

    def measure(settings: LoaderSettings, repeat: int) -> ConfigResult:
        if settings not in index:  # a worker count between the grid's (dense search), or in_order off
            index[settings] = len(entries)
            entries.append((GridPoint(settings), states[0]))
            results.append(ConfigResult(settings=settings, status="ok", cache=states[0]))
            done.append(False)
            preflight([results[-1]], facts, environment, machine, NullObserver())
            preflight_peers([results[-1]], facts, peers, NullObserver())
        return run_trial(index[settings], repeat)

    profiling = profiler is not None and config.profile
    profile_reserve_s = sweep_profile_budget_s(config.time_budget_s) if profiling else 0.0
    # What --time-budget leaves the measurements: the report after them is the user's wait too.
    measuring_s = measuring_budget_s(config.time_budget_s)
    if searched:

        def reserve_s() -> float:
            measured_ok = sum(1 for r, d in zip(results, done) if d and r.status == "ok" and r.trials)
            drift_follows = fresh_runner is not None and measured_ok >= DRIFT_MIN_CONFIGS
            # The pick's sustained trial follows where the fastest row so far would need one.
            ok = [r for r, d in zip(results, done) if d and r.status == "ok" and r.summary is not None]
            top = max(ok, key=lambda r: r.summary.samples_per_s, default=None)  # type: ignore[union-attr]
            return (budget_reserve_s(trial_walls, drift_follows=drift_follows) + profile_reserve_s
                    + search_reserve_s(top, config.measure, trial_walls))

        search = Search(
            [p.settings for p in points], measure=measure, tolerance=config.tolerance, repeats=config.repeats,
            budget_s=max(0.0, measuring_s - (time.monotonic() - started_at)), reserve_s=reserve_s,
            usable_cpus=machine.cpus_per_rank, ranks=machine.world_size,
            cuda=machine.cuda and config.measure.device != "cpu",
            dense_workers=config.dense_workers,
            first=[c for c in [baseline_cell(config, points)] if c is not None],
            limits=HostLimits.from_environment(environment),
        )
        obs.sweep_started(search.estimated_trials())
        search.run()
        sweep.search = search.log
    else:
        obs.sweep_started(len(entries) * config.repeats)
        for repeat in range(config.repeats):
            for i in range(len(entries)):
                run_trial(i, repeat)

    def sustained_trial(pick: LoaderSettings) -> Sustained | None:
        i = next((j for j, r in enumerate(results) if r.settings == pick and r.status == "ok" and r.trials), None)
        row = None if i is None else results[i]
        if i is None or row is None or row.summary is None:
            return None
        figure = row.summary.samples_per_s

        def run(window: MeasureSpec) -> Trial | None:
            obs.phase("measuring the pick over a longer window")
            job = TrialJob(pick, config.dataset, compute, window, seed=config.seed + len(row.trials),
                           cache_dir=cache_dir, timeout_s=config.config_timeout_s, loader_alone=False,
                           cache=entries[i][1])
            outcome = timed(job, runner)
            return outcome.trial if outcome.status == "ok" else None

        deadline = started_at + measuring_s
        if sustained_window(config.measure, row) is not None and not sustained_fits(deadline, trial_walls):
            sweep.sustained_left_out = pick.key()
            return None
        # A second window leaves the profile its share (NOTE [the pick's sustained figure]).
        keep_s = (sweep_profile_budget_s(config.time_budget_s, elapsed_s=time.monotonic() - started_at)
                  if profiling else 0.0)
        return measure_sustained(row, config.measure, run, search_samples_per_s=figure,
                                 deadline=deadline, trial_walls=trial_walls, tolerance=config.tolerance,
                                 keep_after_s=keep_s)

    recheck_ceilings(result_set.ceilings, results, config, compute, runner, cache_dir, obs)
    if fresh_runner is not None:
        check_drift(result_set, results, done, run_trial, fresh_runner, config.tolerance, obs,
                    deadline=started_at + measuring_s if searched else None,
                    warm_trial_s=statistics.median(trial_walls) if trial_walls else None,
                    # the pick's sustained trial follows (NOTE [the pick's sustained figure])
                    keep_s=lambda knee: (sustained_reserve_s(trial_walls)
                                         if sustained_window(config.measure, knee) is not None else 0.0))
        snapshot()
    pick = result_set.recommendation.settings if result_set.recommendation is not None else None
    if sustains and pick is not None:
        # The pick's sustained figure (NOTE [the pick's sustained figure] in sustained.py).
        sweep.sustained = sustained_trial(pick)
        if sweep.sustained is not None:
            timing.sustained_s = sweep.sustained.wall_s
            snapshot()
    if profiling and pick is not None:
        assert profiler is not None
        left = measuring_s - (time.monotonic() - started_at) if searched else None
        obs.phase("profiling the pick: where each sample's time goes")
        t_profile = time.monotonic()
        sweep.profile = profiler(config, pick, sweep_profile_budget_s(config.time_budget_s, left,
                                                                      elapsed_s=time.monotonic() - started_at))
        timing.profile_s = time.monotonic() - t_profile
        snapshot()
        try_in_order(result_set, config, pick, measure, trial_walls, started_at if searched else None, obs)
        if not searched:
            snapshot()  # analysed with what try_in_order recorded (why in_order=False was not tried, too)
    if searched:
        # The rows of a distributed sweep are the whole job's (samples/s and CPU summed over
        # ranks): the model runs on the job's CPUs.
        add_predictions(result_set, [p.settings for p in points], machine.cpus_per_rank * machine.world_size)
        # Analysed again with the search's log and predictions in place (the last snapshot may have
        # been taken inside the search: a sweep with no drift check nor profile after it).
        snapshot()
    return result_set


Profiler = Callable[[SweepConfig, LoaderSettings, float], SweepProfile]
"""The sweep's profile of its pick: (resolved config, the pick's settings, budget seconds) ->
the record (orchestration/profile.py `profile_pick`)."""


def try_in_order(result_set: ResultSet, config: SweepConfig, pick: LoaderSettings,
                 measure: Callable[[LoaderSettings, int], ConfigResult], trial_walls: list[float],
                 started_at: float | None, obs: SweepObserver, torch_version: str | None = None) -> None:
    """Where the profile of the pick found a long per-sample tail (analysis/stages.py BuildTail:
    a batch waits for its slowest sample, and in order a ready batch waits for an earlier one),
    measure the pick with `in_order=False`, and interleaved with it the pick again, until each
    has `config.repeats` trials, while --time-budget lasts (`started_at`: the command's start
    for a search; None: no budget, as for --search grid). The ranking then recommends it only
    where it measured faster (or as fast and cheaper: NOTE [cost order]). Records in the
    profile's `in_order` what was done, or why not (InOrderTrial)."""
    from loaderbench.analysis.stages import summarize_profile
    from loaderbench.conclusions import InOrderTrial
    from loaderbench.orchestration.profile import in_order_blocked

    taken = result_set.sweep.profile
    if taken is None or taken.record is None:
        return
    tail = summarize_profile(taken.record).tail
    if tail is None or not tail.long:
        return
    if torch_version is None:
        import torch

        torch_version = str(torch.__version__)
    blocked = in_order_blocked(config, pick, torch_version)
    if blocked is not None:
        taken.in_order = blocked
        return

    def time_left() -> bool:
        if started_at is None:
            return True
        trial = statistics.fmean(trial_walls[-3:]) if trial_walls else 0.0
        return time.monotonic() + trial <= started_at + measuring_budget_s(config.time_budget_s)

    if not time_left():
        taken.in_order = InOrderTrial.BUDGET
        return
    off = replace(pick, in_order=False)
    obs.phase(f"the per-sample build time has a long tail ({tail.ratio:.0f}x the median): in_order=False")
    first = measure(off, 0)
    taken.in_order = InOrderTrial.TRIED if first.status == "ok" else InOrderTrial.FAILED
    log = result_set.sweep.search
    if log is not None:
        log.steps.append(SearchStep(off.key(), f"the per-sample build time's tail ({tail.ratio:.0f}x the median): "
                                    "in_order=False at the pick", first.status))
    rows = {r.settings: r for r in result_set.results}
    for repeat in range(1, config.repeats):
        for s in (pick, off):
            row = rows.get(s) or next((r for r in result_set.results if r.settings == s), None)
            if row is None or row.status != "ok" or len(row.trials) > repeat or not time_left():
                continue
            measure(s, len(row.trials))


def add_predictions(result_set: ResultSet, cells: list[LoaderSettings], usable_cpus: int | None) -> None:
    """The model's predictions (analysis/predict.py, anchored to each series' measured rows:
    `predict_anchored`) for the grid cells the search did not measure, and leave-one-out
    predictions for those it did (their errors), in
    `sweep.predictions` and `sweep.prediction_check`, with the model's inputs in `sweep.model`."""
    measured = {r.settings for r in result_set.results if r.status == "ok" and r.summary is not None}
    tried = {r.settings for r in result_set.results}  # a failed, hung or skipped config is not predicted either
    unmeasured = [c for c in dict.fromkeys(cells) if c not in tried]
    preds = predict_anchored(result_set.results, unmeasured, usable_cpus)
    loo = predict(result_set.results, sorted(measured, key=lambda s: s.structural_key()), usable_cpus,
                  exclude_measured=True)
    sweep = result_set.sweep
    sweep.predictions = preds
    sweep.prediction_check = PredictionCheck(
        leave_one_out=loo, errors=prediction_errors(loo),
        before_measured=prediction_errors(sweep.search.predicted_before_measured if sweep.search else []),
    )
    bases = list(dict.fromkeys(series_of(c) for c in cells))
    sweep.model = {s.key(): fit(result_set.results, s, usable_cpus).inputs for s in bases}


FIRST_BATCH_FLOOR_S = 60.0
FIRST_BATCH_FACTOR = 10.0


def first_batch_deadline(settings: LoaderSettings, results: list[ConfigResult], timeout_s: float) -> float | None:
    """How long a trial of `settings` may go without its first batch before the watchdog calls
    it hung: 10 x the slowest first batch measured so far, scaled by the workers (start-up grows
    with them: under spawn each worker imports and unpickles on its own), at least 60 s and at
    most `timeout_s`; None (the whole `timeout_s`) before any config was measured. A config that
    will surely hang (a deadlock before its first batch) then costs a minute, not the timeout."""
    seen = [(t.first_batch_s, r.settings.num_workers) for r in results for t in r.trials if t.first_batch_s > 0]
    if not seen:
        return None
    scaled = max(fb * max(1.0, settings.num_workers / max(1, w)) for fb, w in seen)
    return min(timeout_s, max(FIRST_BATCH_FLOOR_S, FIRST_BATCH_FACTOR * scaled))


def _apply(res: ConfigResult, outcome: Outcome) -> None:
    """Fold one trial's outcome into its config: add the trial (summaries are derived by
    `analysis.analyze`), or mark the config failed/hung, or skipped when the trial was not run
    (a config with measured repeats keeps them, with a warning)."""
    if outcome.status == "ok" and outcome.trial is not None:
        res.trials.append(outcome.trial)
        for note in outcome.trial.notes:
            res.warn(note)
        return
    if outcome.status == "skipped" and res.trials:
        # Not run (a distributed sweep that lost a node): the repeats measured before stay.
        res.warn(Note.of(WarningKind.OTHER, f"a repeat was {outcome.error}"))
        return
    res.status = outcome.status  # type: ignore[assignment]
    res.error = outcome.error
    res.detail = outcome.detail
    res.summary = None  # a failed config never shows a throughput
    res.trials = []


