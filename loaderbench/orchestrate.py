"""`run_sweep`: the grid, each config in a fresh process, results saved after every config.

The core never prints: progress and warnings go to a `SweepObserver` the caller passes in.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from loaderbench import __version__
from loaderbench.analysis import analyze
from loaderbench.analysis.predict import Prediction, fit, predict, prediction_errors, series_of, with_workers
from loaderbench.config import SweepConfig
from loaderbench.grid import GridPoint, default_num_workers, expand_grid
from loaderbench.kinds import KINDS
from loaderbench.measure.isolation import Outcome, Runner, run_isolated
from loaderbench.measure.warm import WarmRunner
from loaderbench.model import (
    ComputeSpec,
    ConfigResult,
    LoaderSettings,
    Note,
    ResultSet,
    Trial,
    TrialJob,
    WarningKind,
)
from loaderbench.preflight import (
    REPLICATED_MESSAGE,
    WorkloadFacts,
    host_memory_need_bytes,
    host_memory_verdict,
    oversubscription,
    shm_need_bytes,
    shm_verdict,
    workload_facts,
)
from loaderbench.search import Search
from loaderbench.storage import data_files, set_cache_state

DEFAULT_SLEEP_MS = 100.0
DEFAULT_BATCH_GPU = 256
DEFAULT_BATCH_CPU = 64


class SweepObserver(Protocol):
    """Receives progress; all methods optional in spirit (NullObserver implements them all)."""

    def phase(self, text: str) -> None: ...
    def sweep_started(self, total_trials: int) -> None: ...
    def trial_started(self, index: int, settings: LoaderSettings, repeat: int) -> None: ...
    def batch(self, index: int) -> None: ...
    def trial_finished(self, result: ConfigResult, outcome: Outcome) -> None: ...
    def warning(self, message: str) -> None: ...


class NullObserver:
    def phase(self, text: str) -> None:
        pass

    def sweep_started(self, total_trials: int) -> None:
        pass

    def trial_started(self, index: int, settings: LoaderSettings, repeat: int) -> None:
        pass

    def batch(self, index: int) -> None:
        pass

    def trial_finished(self, result: ConfigResult, outcome: Outcome) -> None:
        pass

    def warning(self, message: str) -> None:
        pass


def cpus_per_rank(usable_cpus: int, ranks_per_node: int) -> int:
    """The CPUs one rank's loader may use: the node's usable CPUs shared by its ranks (at least 1).

    >>> cpus_per_rank(32, 2), cpus_per_rank(2, 2), cpus_per_rank(3, 4)
    (16, 1, 1)
    """
    return max(1, usable_cpus // max(1, ranks_per_node))



@dataclass(frozen=True)
class Machine:
    """What the defaults depend on (injectable for tests)."""

    cuda: bool
    usable_cpus: int  # on this node
    ranks_per_node: int = 1  # distributed sweeps: ranks (each with its own loader) on this node
    world_size: int = 1  # distributed sweeps: ranks in the whole job

    @property
    def cpus_per_rank(self) -> int:
        """The CPUs one rank's loader may use (all of them for a single-process sweep)."""
        return cpus_per_rank(self.usable_cpus, self.ranks_per_node)


def detect_machine(ranks_per_node: int = 1, world_size: int = 1) -> Machine:
    """CUDA availability (without creating a CUDA context) and the CPUs this process may use."""
    import torch

    from loaderbench.env import usable_cpus

    return Machine(
        cuda=bool(torch.cuda.is_available()), usable_cpus=usable_cpus(), ranks_per_node=ranks_per_node,
        world_size=world_size,
    )


def resolve_defaults(config: SweepConfig, machine: Machine) -> SweepConfig:
    """Fill the machine-dependent defaults: num_workers grid (from the CPUs per rank: the usable
    CPUs divided by the ranks on this node in a distributed sweep), batch size, compute step.

    Without CUDA, a `spin:` or `model:` step on device auto is a usage error raised later by the
    child; `sleep:` stands for the accelerator step there.
    """
    compute = config.compute
    if compute is None:
        compute = (
            ComputeSpec(kind="model", model="resnet50")
            if machine.cuda
            else ComputeSpec(kind="sleep", ms=DEFAULT_SLEEP_MS)
        )
    return replace(config, compute=compute, dense_workers=config.grid["num_workers"] is None).with_grid(
        num_workers=config.grid["num_workers"] or tuple(default_num_workers(machine.cpus_per_rank)),
        batch_size=config.grid["batch_size"] or ((DEFAULT_BATCH_GPU,) if machine.cuda else (DEFAULT_BATCH_CPU,)),
    )


def plan(config: SweepConfig, machine: Machine) -> list[GridPoint]:
    """The configs to measure, normalised (see grid.py)."""
    axes = {name: values for name, values in config.grid.items() if values}
    axes.setdefault("num_workers", (0,))
    axes.setdefault("batch_size", (DEFAULT_BATCH_CPU,))
    cuda_in_use = machine.cuda and config.measure.device != "cpu"
    return expand_grid(axes, cuda=cuda_in_use)


def baseline_cell(config: SweepConfig, points: list[GridPoint]) -> LoaderSettings | None:
    """The config `--baseline-settings` names: the first grid config that matches it; in a
    model-guided search over every worker count (no --num-workers given), also a worker count
    between the grid's, up to twice its largest (the counts the search may measure). None when
    nothing matches or no baseline was given."""
    wanted = config.baseline_settings
    if not wanted:
        return None
    for p in points:
        if all(getattr(p.settings, k) == v for k, v in wanted.items()):
            return p.settings
    w = wanted.get("num_workers")
    top = max((p.settings.num_workers for p in points), default=0)
    if config.search != "auto" or not config.dense_workers or not isinstance(w, int) or not 0 < w <= 2 * top:
        return None
    rest = {k: v for k, v in wanted.items() if k != "num_workers"}
    for p in points:
        if p.settings.num_workers > 0 and all(getattr(p.settings, k) == v for k, v in rest.items()):
            return with_workers(p.settings, w)
    return None


def check_baseline_settings(config: SweepConfig, points: list[GridPoint]) -> None:
    """UsageError when `--baseline-settings` matches no config the sweep may measure (the
    headroom would otherwise silently start from the first row)."""
    if not config.baseline_settings or baseline_cell(config, points) is not None:
        return
    wanted = config.baseline_settings
    from loaderbench.errors import UsageError

    def show(v: Any) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else str(v)

    given = ",".join(f"{k}={show(v)}" for k, v in wanted.items())
    grid = "; ".join(
        f"{k}: {','.join(sorted({show(getattr(p.settings, k)) for p in points}, key=str))}" for k in wanted
    )
    raise UsageError(
        f"--baseline-settings {given} matches no config of this sweep ({grid}); give settings the grid "
        "measures, or add them to the grid"
    )


def config_hash(config: SweepConfig) -> str:
    """Short hash of the resolved config (what was asked), for matching runs."""
    blob = json.dumps(config.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def default_output_path(config: SweepConfig, now: _dt.datetime) -> Path:
    """results/<label or 'sweep'>-<UTC time>.json (the label made safe for a file name)."""
    from loaderbench.results import timestamped_path

    return timestamped_path(config.label or "sweep", now)


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
    configs are measured again through `fresh_runner` (`check_drift`, `analysis["drift"]`).
    `--time-budget` counts from `started_at` (time.monotonic() when the command started; default
    now): the search starts no step that would end after it, keeping one trial's time for the
    step and, with `fresh_runner`, about two for the drift check (NOTE [time budget]).
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
    timing = {"trials": 0, "trial_wall_s": 0.0, "setup_s": 0.0, "first_batch_s": 0.0, "warmup_s": 0.0,
              "window_s": 0.0, "probe_s": 0.0, "stop_s": 0.0, "ceiling_s": 0.0}

    def snapshot() -> None:
        result_set.analysis["sweep_wall_s"] = (now() - started).total_seconds()
        result_set.analysis["since_start_s"] = time.monotonic() - started_at  # what --time-budget counts
        result_set.analysis["configs_planned"] = len(points)
        parts = ("setup_s", "first_batch_s", "warmup_s", "window_s", "probe_s", "stop_s")
        # The rest of the trials' wall time: the measuring process's round trip (its start for a
        # fresh process, the reset between configs, the job and result files).
        result_set.analysis["timing"] = {**timing, "other_s": max(0.0, timing["trial_wall_s"]
                                                                  - sum(timing[k] for k in parts))}
        order = {p.settings: i for i, p in enumerate(points)}
        measured = [r for r, d in zip(results, done) if d]
        result_set.results = sorted(measured, key=lambda r: _row_order(r.settings, order))
        analyze(result_set)
        save_fn(result_set, output)

    preflight(results, facts, environment, machine, obs)
    if config.measure.epoch_batches:
        result_set.analysis["epoch_batches"] = config.measure.epoch_batches
    elif facts is not None and facts.num_samples and KINDS[config.dataset.kind].own_length:
        # Only a real dataset has a meaningful epoch; synthetic and tensor lengths are arbitrary.
        # Per rank: DistributedSampler gives each of the world_size ranks its share of an epoch.
        bs = min(p.settings.batch_size for p in points)
        result_set.analysis["epoch_batches"] = max(1, facts.num_samples // (bs * machine.world_size))
    t_ceiling = time.monotonic()
    result_set.ceilings = {
        "compute": measure_ceilings(config, compute, points, runner, cache_dir, obs, world_size=machine.world_size)
    }
    timing["ceiling_s"] = time.monotonic() - t_ceiling

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
        obs.trial_started(int(timing["trials"]), point.settings, repeat)
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
            loader_alone=loader_alone or not any(t.loader_alone_samples_per_s is not None for t in res.trials),
        )
        t0 = time.monotonic()
        try:
            outcome = via(job, on_batch=obs.batch)
        except KeyboardInterrupt:
            result_set.analysis["interrupted"] = True
            snapshot()
            raise
        wall = time.monotonic() - t0
        timing["trials"] += 1
        timing["trial_wall_s"] += wall
        trial_walls.append(wall)
        if outcome.trial is not None:
            outcome.trial.cache_state = cache_state
            timing["window_s"] += outcome.trial.wall_s
            timing["first_batch_s"] += outcome.trial.first_batch_s
            for phase in ("probe_s", "setup_s", "warmup_s", "stop_s"):
                timing[phase] += getattr(outcome.trial, phase) or 0.0
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
    if searched:
        index = {p.settings: i for i, p in enumerate(points)}

        def measure(settings: LoaderSettings, repeat: int) -> ConfigResult:
            if settings not in index:  # a worker count between the grid's (dense search)
                index[settings] = len(entries)
                entries.append((GridPoint(settings), "as-is"))
                results.append(ConfigResult(settings=settings, status="ok", cache="as-is"))
                done.append(False)
                preflight([results[-1]], facts, environment, machine, NullObserver())
            return run_trial(index[settings], repeat)

        def reserve_s() -> float:
            measured_ok = sum(1 for r, d in zip(results, done) if d and r.status == "ok" and r.trials)
            drift_follows = fresh_runner is not None and measured_ok >= DRIFT_MIN_CONFIGS
            return budget_reserve_s(trial_walls, drift_follows=drift_follows)

        search = Search(
            [p.settings for p in points], measure=measure, tolerance=config.tolerance, repeats=config.repeats,
            budget_s=max(0.0, config.time_budget_s - (time.monotonic() - started_at)), reserve_s=reserve_s,
            usable_cpus=machine.cpus_per_rank, ranks=machine.world_size,
            cuda=machine.cuda and config.measure.device != "cpu",
            dense_workers=config.dense_workers,
            first=[c for c in [baseline_cell(config, points)] if c is not None],
        )
        obs.sweep_started(search.estimated_trials())
        search.run()
        result_set.analysis["search"] = search.log.to_dict()
    else:
        obs.sweep_started(len(entries) * config.repeats)
        for repeat in range(config.repeats):
            for i in range(len(entries)):
                run_trial(i, repeat)
    if fresh_runner is not None:
        check_drift(result_set, results, done, run_trial, fresh_runner, config.tolerance, obs)
        snapshot()
    if searched:
        # The rows of a distributed sweep are the whole job's (samples/s and CPU summed over
        # ranks): the model runs on the job's CPUs.
        add_predictions(result_set, [p.settings for p in points], machine.cpus_per_rank * machine.world_size)
        save_fn(result_set, output)
    return result_set


def _row_order(s: LoaderSettings, order: dict[LoaderSettings, int]) -> tuple[Any, ...]:
    """Table order: the grid's, a worker count between the grid's just before the next count."""
    if s in order:
        return (s.batch_size, order[s], 0)
    after = [i for t, i in order.items() if t.batch_size == s.batch_size and t.num_workers > s.num_workers
             and series_of(t) == series_of(s)]
    return (s.batch_size, min(after) if after else len(order), -1)


def budget_reserve_s(trial_walls: list[float], *, drift_follows: bool) -> float:
    """Seconds a search step must leave before the `--time-budget` deadline, from the wall
    seconds of the trials so far (in the order they ran); 0.0 before any trial.

    NOTE [time budget]
        `--time-budget` is the user's wait for the answer, counted from the command's start (the
        interpreter, the dataset check and the compute ceiling included). A search step starts
        only if it can end in time: one trial's time for the step itself and, when the drift
        check will follow the search whether this step runs or not (DRIFT_MIN_CONFIGS configs
        measured already), two more for it (a fresh process's start-up, CUDA context and model,
        then its trial: 16.5 s against 7.3 s per warm trial on the H200 case). Short of them,
        the step that makes the check run is taken when it fits alone: keeping time for a check
        that stopping would cancel left a 60-s search of long spawn trials at two configs, 38 s
        unused, with a 0-worker pick where 2 persistent workers measured 2.3x (the check then
        runs and can end past the budget, by its own time at most). One
        trial's time is the mean of the latest three, or the median of all when that is
        longer: the later steps measure configs near the knee, whose many workers start and
        warm up longer than the first probes' few (with the median alone, two H200 runs ended
        9-10 s past a 120-s budget; their latest trials included 13-16 s ones against a median
        of 4-6 s). The mean, not the longest: one slow trial would otherwise keep three times
        its time back and end the search early. A budget spent before the
        search starts (the interpreter and the dataset check took longer) still measures one
        config, and the footer gives the time since the command started against the budget.
        A drift check that trips takes one warm and one fresh trial more (NOTE [drift check]),
        past the budget. A budget that ends during the search leaves the knee of what was
        measured as the pick, and the footer says so.
    """
    if not trial_walls:
        return 0.0
    per = max(statistics.median(trial_walls), statistics.fmean(trial_walls[-3:]))
    return per * (3.0 if drift_follows else 1.0)


DRIFT_MIN_CONFIGS = 3
DRIFT_TOLERANCE_FACTOR = 2.0  # one trial against another: twice the knee tolerance counts as drift


def drift_threshold(results: list[ConfigResult], tolerance: float) -> float:
    """The change of the knee's fresh trial against its warm trials that counts as drift:
    twice `tolerance`, or twice the median relative spread (max - min over median) of the
    configs measured more than once in this sweep when that is larger (NOTE [drift check])."""
    from loaderbench.analysis.statistics import relative_spread

    spreads = [relative_spread(r.summary) for r in results
               if r.status == "ok" and r.summary is not None and r.summary.repeats >= 2]
    noise = statistics.median(spreads) if spreads else 0.0
    return max(DRIFT_TOLERANCE_FACTOR * tolerance, DRIFT_TOLERANCE_FACTOR * noise)


def check_drift(result_set: ResultSet, results: list[ConfigResult], done: list[bool],
                run_trial: Callable[..., ConfigResult], fresh_runner: Runner, tolerance: float,
                obs: SweepObserver) -> None:
    """The warm process's check (NOTE [why a warm process, and what it keeps] in
    measure/warm.py), recorded in `analysis["drift"]`.

    NOTE [drift check]
        The knee is measured once more, in a fresh process, at the end. One trial against a
        few is noisy, so it trips the check only past `drift_threshold`: twice the knee's
        tolerance, or twice the spread the sweep's own repeats showed when that is larger.
        Tripped, the knee gets one more warm trial (a repeat it keeps) and one more fresh one,
        and drift is confirmed only when the two fresh trials lie past the threshold on the
        same side of every warm one. Both are needed on a noisy host: the knee is the config
        that measured best, so a lucky warm trial makes any later trial read low (on the H200
        case a knee warm at 4,579 samples/s read 3,672 and 3,169 fresh, where its neighbours
        measured 2,940-3,989), and one fresh trial can be the outlier (2,947 then 4,323 against
        a warm 4,536). The first form of the check acted on one fresh trial against 10%: on
        that host it re-measured five configs fresh for 45 s and left each a single trial.
        Confirmed (drift over the sweep, or something the warm process carried), the configs
        that compete for the pick are measured again, each in a fresh process, and their warm
        trials are dropped. Otherwise the fresh trials are checks, not repeats: they are left
        out of the knee's trials, since one config measured partly fresh would be ranked
        against configs measured only warm (a fresh process measured 5-7% apart from the warm
        one on 2 CPUs, enough to move a knee across the edge).
    """
    from loaderbench.analysis.knee import find_knee
    from loaderbench.analysis.statistics import trial_samples_per_s

    measured = [i for i, (r, d) in enumerate(zip(results, done)) if d and r.status == "ok" and r.trials]
    if len(measured) < DRIFT_MIN_CONFIGS:
        return
    knee = find_knee([results[i] for i in measured], tolerance=tolerance)
    if knee is None:
        return
    i = results.index(knee)
    before = statistics.median(trial_samples_per_s(t) for t in knee.trials)
    threshold = drift_threshold([results[j] for j in measured], tolerance)
    warm_trials = list(knee.trials)
    fresh_trials: list[Trial] = []

    def one(via: Runner | None, loader_alone: bool = False) -> Trial | None:
        n = len(results[i].trials)
        res = run_trial(i, n, via=via, loader_alone=loader_alone) if via is not None else run_trial(i, n)
        return res.trials[-1] if res.status == "ok" and len(res.trials) > n else None

    t0 = time.monotonic()
    first = one(fresh_runner)
    if first is None:
        return
    fresh_trials.append(first)
    tripped = before > 0 and abs(trial_samples_per_s(first) / before - 1.0) > threshold
    if tripped:
        # One more of each kind: a knee picked on a lucky trial reads lower whatever measures it
        # again, and one fresh trial can be the outlier (NOTE [drift check]).
        again = one(None)
        if again is not None:
            warm_trials.append(again)
        # It probes the loader ceiling: confirmed, the fresh trials alone stand for the knee.
        second = one(fresh_runner, loader_alone=True)
        if second is not None:
            fresh_trials.append(second)
    warm = [trial_samples_per_s(t) for t in warm_trials]
    fresh = [trial_samples_per_s(t) for t in fresh_trials]
    confirmed = bool(tripped and len(fresh) == 2 and len(warm) >= 2 and (
        max(fresh) < (1.0 - threshold) * min(warm) or min(fresh) > (1.0 + threshold) * max(warm)))
    change = statistics.median(fresh) / statistics.median(warm) - 1.0 if warm and statistics.median(warm) > 0 else 0.0
    drift: dict[str, Any] = {"config": results[i].settings.key(), "warm_samples_per_s": statistics.median(warm),
                             "warm_trials_samples_per_s": warm, "fresh_samples_per_s": statistics.median(fresh),
                             "fresh_trials_samples_per_s": fresh, "change": change, "threshold": threshold,
                             "confirmed": confirmed, "remeasured": [],
                             # what the check cost, against the reserve NOTE [time budget] keeps for it
                             "wall_s": time.monotonic() - t0}
    if confirmed:
        obs.warning(f"drift: {results[i].settings.key()} measured {change:+.1%} in two fresh processes against "
                    "two warm trials; measuring the competing configs again, each in a fresh process")
        ok = [j for j in measured if results[j].summary is not None]
        top = max((results[j].summary.samples_per_s for j in ok), default=0.0)  # type: ignore[union-attr]
        for j in ok:
            s = results[j].summary
            if j != i and s is not None and s.samples_per_s >= (1.0 - 2 * tolerance) * top:
                results[j].trials = []
                run_trial(j, 0, via=fresh_runner)
                drift["remeasured"].append(results[j].settings.key())
        results[i].trials = fresh_trials  # the fresh trials only
        drift["remeasured"].append(results[i].settings.key())
    else:
        results[i].trials = warm_trials  # like with like: the warm trials rank it
    result_set.analysis["drift"] = drift


def add_predictions(result_set: ResultSet, cells: list[LoaderSettings], usable_cpus: int | None) -> None:
    """The model's predictions (analysis/predict.py) for the grid cells the search did not
    measure, and leave-one-out predictions for those it did (their errors), in
    `analysis["predictions"]` with the model's inputs in `analysis["model"]`."""
    measured = {r.settings for r in result_set.results if r.status == "ok" and r.summary is not None}
    tried = {r.settings for r in result_set.results}  # a failed, hung or skipped config is not predicted either
    unmeasured = [c for c in dict.fromkeys(cells) if c not in tried]
    preds = predict(result_set.results, unmeasured, usable_cpus)
    loo = predict(result_set.results, sorted(measured, key=lambda s: s.structural_key()), usable_cpus,
                  exclude_measured=True)
    result_set.analysis["predictions"] = [p.to_dict() for p in preds]
    result_set.analysis["prediction_check"] = {
        "leave_one_out": [p.to_dict() for p in loo],
        "errors": prediction_errors(loo),
        "before_measured": prediction_errors([Prediction.from_dict(d) for d in
                                              (result_set.analysis.get("search") or {}).get(
                                                  "predicted_before_measured", [])]),
    }
    bases = list(dict.fromkeys(series_of(c) for c in cells))
    result_set.analysis["model"] = {s.key(): fit(result_set.results, s, usable_cpus).inputs for s in bases}


def cache_plan(config: SweepConfig, obs: SweepObserver,
               files: list[Path] | None = None) -> tuple[list[Path], tuple[str, ...]]:
    """The dataset files whose page-cache state `--cache` controls (the files under --data, for
    any dataset kind that reads files: storage.data_files), and the states to run each config in
    (`both` = cold then warm; `files`: those already listed, else they are listed here). A
    dataset that names no files has no cache state: n/a, and every config runs as-is (with a
    warning saying how to name them)."""
    if config.cache == "as-is":
        return [], ("as-is",)
    if not config.dataset.data_roots:
        kind = config.dataset.factory or config.dataset.kind
        how = (" give the files it reads with --data PATH (once per folder)" if KINDS[config.dataset.kind].in_files
               else " it is built in memory")
        obs.warning(f"--cache {config.cache}: '{kind}' names no files, so the cache state is n/a;{how}")
        return [], ("as-is",)
    files = data_files(config.dataset) if files is None else files
    return files, (("cold", "warm") if config.cache == "both" else (config.cache,))


def preflight(
    results: list[ConfigResult],
    facts: WorkloadFacts | None,
    environment: dict[str, Any],
    machine: Machine,
    obs: SweepObserver,
) -> None:
    """Mark configs before they run: skip those that cannot fit in /dev/shm, warn about ones
    close to it and about oversubscription, flag an IterableDataset replayed by every worker.
    In a distributed sweep every rank on the node has its own workers: /dev/shm must hold all
    of theirs, and each rank's workers share the CPUs per rank."""
    free = (environment.get("shm") or {}).get("free_bytes")
    main_threads = environment.get("torch_num_threads")
    for res in results:
        s = res.settings
        if facts is not None:
            need = shm_need_bytes(s, facts.sample_bytes)
            need = None if need is None else need * machine.ranks_per_node
            host_need = host_memory_need_bytes(s, facts.sample_bytes)
            host_need = None if host_need is None else host_need * machine.ranks_per_node
            verdict = shm_verdict(need, free) or host_memory_verdict(
                host_need, environment.get("memory_available_bytes")
            )
            if verdict is not None:
                kind, message = verdict
                if kind == "skip":
                    res.status = "skipped"
                    res.error = message
                    obs.warning(f"{s.key()}: skipped: {message}")
                else:
                    res.warn(Note.of(WarningKind.SHARED_MEMORY, message))
            if facts.replicated_across_workers and s.num_workers >= 2:
                res.warn(Note.of(WarningKind.REPLICATED, REPLICATED_MESSAGE))
        if facts is not None and facts.iterable and machine.world_size > 1:
            res.warn(Note.of(
                WarningKind.RANKS_SHARE_STREAM,
                f"IterableDataset on {machine.world_size} ranks: each rank iterates its own copy; unless "
                "the dataset splits its stream by torch.distributed.get_rank(), the ranks load the same "
                f"samples and samples/s counts each of them {machine.world_size} times",
            ))
        if res.status == "skipped":
            continue  # a config that never runs is not oversubscribed either
        over = oversubscription(s, machine.cpus_per_rank, s.main_threads or main_threads)
        if over and machine.ranks_per_node > 1:
            over += f" (per rank: {machine.usable_cpus} CPUs / {machine.ranks_per_node} ranks on this node)"
        if over:
            res.warn(Note.of(WarningKind.OVERSUBSCRIBED, over))


def measure_ceilings(
    config: SweepConfig,
    compute: ComputeSpec,
    points: list[GridPoint],
    runner: Runner,
    cache_dir: str | None,
    obs: SweepObserver,
    *,
    world_size: int = 1,
) -> dict[str, dict[str, Any]]:
    """The compute ceiling per batch size: {"256": {"samples_per_s": ..., "step_s": ...}}.

    In a distributed sweep the ceiling is the whole job's (summed over its `world_size` ranks,
    each rank's own in `rank_samples_per_s`), like the throughput it is compared with.

    A `sleep:MS` step's ceiling is analytic (batch / MS); `none` has none; a GPU or model step
    is measured in a fresh process fed one batch already on the device
    (`runner.measure_compute_ceiling`). A failure is a warning, never the end of the sweep.
    """
    out: dict[str, dict[str, Any]] = {}
    if compute.kind == "none":
        return out
    for bs in sorted({p.settings.batch_size for p in points}):
        if compute.kind != "sleep":
            obs.phase(f"measuring the compute ceiling (batch {bs}: the step alone, no loader)")
        if compute.kind == "sleep":
            step_s = compute.ms / 1000.0
            if step_s > 0:
                out[str(bs)] = {"samples_per_s": world_size * bs / step_s, "step_s": step_s, "method": "analytic"}
                if world_size > 1:
                    out[str(bs)]["rank_samples_per_s"] = [bs / step_s] * world_size
                    out[str(bs)]["world_size"] = world_size
            continue
        outcome = runner(TrialJob(
            LoaderSettings(0, False, False, None, False, bs), config.dataset, compute, config.measure,
            kind="ceiling", seed=config.seed, cache_dir=cache_dir, timeout_s=config.config_timeout_s,
        ))
        if outcome.status == "ok" and outcome.ceiling is not None:
            out[str(bs)] = {**outcome.ceiling, "method": "measured"}
        else:
            obs.warning(f"compute ceiling (batch {bs}) not measured: {outcome.error}")
    return out


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
    `analysis.analyze`), or mark the config failed/hung."""
    if outcome.status == "ok" and outcome.trial is not None:
        res.trials.append(outcome.trial)
        for note in outcome.trial.notes:
            res.warn(note)
        return
    res.status = outcome.status  # type: ignore[assignment]
    res.error = outcome.error
    res.detail = outcome.detail
    res.summary = None  # a failed config never shows a throughput
    res.trials = []


def _build_with_deadline(config: SweepConfig, cache_dir: str | None) -> Any:
    """Build the dataset in this process, under a deadline of `--config-timeout` seconds (a user
    factory that never returns must not hang the sweep)."""
    from loaderbench import datasets

    def build() -> Any:
        return datasets.build_dataset(config.dataset, cache_dir=None if cache_dir is None else Path(cache_dir))

    name = config.dataset.factory or config.dataset.kind
    return _with_deadline(config, build, f"building the dataset ({name})", "check the factory")


T = TypeVar("T")


def _with_deadline(config: SweepConfig, fn: Callable[[], T], what: str, fix: str) -> T:
    """`fn()` under a deadline of `--config-timeout` seconds: the user's code that runs in this
    process (the factory, the first samples and their collate, the sampler) must not hang the
    sweep. DataError "<what> took over N s (--config-timeout): <fix>, or raise --config-timeout"
    when it expires. The deadline is a SIGALRM, so it applies only in the main thread of the
    main interpreter; elsewhere `fn` runs plain."""
    import signal
    import threading

    from loaderbench.errors import DataError

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        return fn()

    def expired(signum: int, frame: Any) -> None:
        raise _DeadlineExpired

    seconds = max(1, int(config.config_timeout_s))
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        return fn()
    except _DeadlineExpired:
        raise DataError(f"{what} took over {seconds} s (--config-timeout): {fix}, or raise --config-timeout") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class _DeadlineExpired(BaseException):
    """BaseException, so a factory's own `except Exception` cannot swallow the deadline."""


def validate_workload(config: SweepConfig, machine: Machine, *, cache_dir: str | None) -> WorkloadFacts:
    """Fail before any config runs: build the dataset once in this process (DataError for a
    missing folder, a failing import, ...; it also fills the synthetic-JPEG cache the per-config
    processes read) and reject GPU steps without CUDA (UsageError). Returns what the preflight
    checks need to know about the dataset."""
    from loaderbench import datasets
    from loaderbench.errors import DataError, UsageError

    assert config.compute is not None
    cuda_in_use = machine.cuda and config.measure.device != "cpu"
    if config.compute.kind in ("spin",) and not cuda_in_use:
        raise UsageError(
            f"--compute {config.compute.label()} needs a CUDA GPU; without one use "
            f"--compute sleep:{config.compute.ms:g} (a host sleep that stands for the step)"
        )
    if config.measure.device.startswith("cuda") and not machine.cuda:
        raise UsageError("--device cuda: CUDA is not available here; use --device cpu or auto")
    if config.compute.kind == "model":
        from loaderbench.compute import check_model_name

        check_model_name(config.compute.label(), config.compute.model or "")
    if config.dataset.kind == "tensor":
        _check_sample_fits(config)
    dataset = _build_with_deadline(config, cache_dir)
    datasets.build_collate_fn(config.dataset)
    try:
        size = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        size = None  # an IterableDataset without a length
    if size == 0:
        raise DataError(f"the dataset ({config.dataset.factory or config.dataset.kind}) has 0 samples: nothing to load")
    own_epochs = KINDS[config.dataset.kind].own_length and not config.measure.epoch_batches
    too_big = sorted(b for b in (config.grid["batch_size"] or ()) if size is not None and own_epochs and b > size)
    if too_big:
        raise UsageError(
            f"--batch-size {too_big[-1]} is larger than the dataset ({size} samples): every batch would hold "
            f"{size}, so throughput, ceilings and the recommended DataLoader would describe a batch that never "
            f"exists; give --batch-size {size} or less"
        )
    many_workers = any(n >= 2 for n in (config.grid["num_workers"] or ()))
    name = config.dataset.factory or config.dataset.kind
    facts = _with_deadline(config, lambda: workload_facts(dataset, check_replication=many_workers),
                           f"reading the first samples of the dataset ({name}) in this process",
                           "a sample that never returns hangs every config; check __getitem__ / __iter__")
    _with_deadline(config, lambda: warm_up(dataset, config),
                   f"loading one batch of the dataset ({name}) in this process before the first config",
                   "a sample or the collate never returned; check __getitem__ and --collate-fn")
    if config.dataset.sampler:
        kind, indices = _with_deadline(config, lambda: _sampler_kind(config, dataset, facts),
                                       f"drawing from --sampler {config.dataset.sampler}",
                                       "check the sampler factory")
        facts = replace(facts, sampler_kind=kind)
        too_big = sorted(b for b in (config.grid["batch_size"] or ()) if indices is not None and own_epochs and b > indices)
        if kind == "sampler" and too_big:
            raise UsageError(
                f"--batch-size {too_big[-1]} is larger than the epoch of --sampler {config.dataset.sampler} "
                f"({indices} indices): every batch would hold {indices}; give --batch-size {indices} or less"
            )
    return facts


def warm_up(dataset: Any, config: SweepConfig) -> None:
    """Load and collate one batch here before any trial, so the first measured trial does not pay
    for a cold start (the dataset's files in the page cache, the decoder's and the collate's
    first calls; the libraries a measuring process loads are warm once this process imported
    them). Errors are ignored: the trials report their own. A map-style dataset only (an
    IterableDataset may be a one-pass stream)."""
    from torch.utils.data import IterableDataset, default_collate

    from loaderbench import datasets

    if isinstance(dataset, IterableDataset):
        return
    try:
        n = min(len(dataset), min(config.grid["batch_size"] or (1,)))
        collate = datasets.build_collate_fn(config.dataset) or default_collate
        collate([dataset[i] for i in range(n)])
    except Exception:  # noqa: BLE001 - a warm-up; the trials report any failure of the user's code
        pass


def _check_sample_fits(config: SweepConfig) -> None:
    """UsageError before building a tensor dataset whose one sample cannot fit in memory (the
    dataset allocates it, and the main process would be killed without a message)."""
    from loaderbench.env import memory_available_bytes
    from loaderbench.errors import UsageError

    sample_bytes = 4 * math.prod(config.dataset.sample_shape)
    available = memory_available_bytes()
    if sample_bytes * 4 > available:
        raise UsageError(
            f"--sample-shape {','.join(map(str, config.dataset.sample_shape))}: one float32 sample is "
            f"{sample_bytes / 2**30:,.1f} GiB and {available / 2**30:,.1f} GiB of memory is available; "
            "give a smaller shape"
        )


def _sampler_kind(config: SweepConfig, dataset: Any, facts: WorkloadFacts) -> tuple[str, int | None]:
    """('sampler' or 'batch_sampler', its length or None): what the user's `--sampler` factory
    makes for this dataset (DataError when it cannot be made or yields nothing; UsageError for
    an IterableDataset, which takes no sampler)."""
    from loaderbench import datasets
    from loaderbench.errors import DataError, UsageError
    from loaderbench.measure.sampling import call_factory, yields_batches

    ref = config.dataset.sampler or ""
    if facts.iterable:
        raise UsageError(f"--sampler {ref}: the dataset is an IterableDataset, which takes no sampler; drop --sampler")
    factory = datasets.load_callable(ref, "make_sampler", "--sampler")
    bs = min(config.grid["batch_size"] or (1,))
    try:
        made = call_factory(factory, dataset, batch_size=bs, seed=config.seed, rank=0, world_size=1)
        kind = "batch_sampler" if yields_batches(made) else "sampler"
        try:
            length = len(made)
        except (TypeError, NotImplementedError):
            length = None
        return kind, length
    except Exception as exc:  # noqa: BLE001 - the user's code: one line naming it
        raise DataError(
            f"--sampler {ref}: making or drawing from the sampler failed with {type(exc).__name__}: "
            f"{' '.join(str(exc).split())}; check the factory (it is called with the dataset)"
        ) from None


def execute_sweep(
    config: SweepConfig,
    *,
    output: Path | None,
    observer: SweepObserver | None = None,
    cache_dir: str | None = None,
    machine: Machine | None = None,
    runner: Runner = run_isolated,
    distributed: dict[str, Any] | None = None,
    started_at: float | None = None,
) -> tuple[ResultSet, Path]:
    """The whole `loaderbench sweep`: resolve defaults for this machine, check the output
    location and the workload, capture the environment, run the sweep.

    Raises LoaderbenchError subclasses for bad input before anything is measured, and
    KeyboardInterrupt (after saving what was measured) on Ctrl-C. A distributed sweep's leader
    passes `runner` (distributed.DistributedRunner), the machine with its ranks per node and
    `distributed` (the job's layout, kept in the environment record). `started_at`
    (time.monotonic() seconds) is when the command started, which `--time-budget` counts from
    (default: now).
    """
    started_at = time.monotonic() if started_at is None else started_at
    # The warm measuring process starts first: its interpreter and torch's import (seconds on a
    # small machine) then overlap this process's own (detect_machine imports torch) and the checks.
    # So does the fresh one the drift check will use (NOTE [a fresh process, started ahead]).
    warm = WarmRunner() if config.isolation == "warm" and runner is run_isolated else None
    fresh = WarmRunner(one_config=True) if warm is not None and drift_may_follow(config) else None
    try:
        for proc in (warm, fresh):
            if proc is not None:
                proc.prestart()
        return _execute_sweep(config, output=output, observer=observer, cache_dir=cache_dir, machine=machine,
                              runner=runner, distributed=distributed, started_at=started_at, warm=warm,
                              fresh=fresh)
    finally:
        for proc in (warm, fresh):
            if proc is not None:
                proc.close()


SPARE_MIN_CPUS = 4  # start the drift check's fresh process ahead only with this many usable CPUs


def drift_may_follow(config: SweepConfig) -> bool:
    """Whether the drift check's fresh process is worth starting ahead: at least SPARE_MIN_CPUS
    usable CPUs (NOTE [a fresh process, started ahead]) and a sweep that may measure
    DRIFT_MIN_CONFIGS configs or more: the default worker grid has three counts or more;
    otherwise the grid's configs counted as with CUDA (pin_memory and prefetch then add
    configs), the most there can be."""
    from loaderbench.env import usable_cpus

    if usable_cpus() < SPARE_MIN_CPUS:
        return False
    if not config.grid.get("num_workers"):
        return True
    return len(plan(config, Machine(cuda=True, usable_cpus=1))) >= DRIFT_MIN_CONFIGS


def _execute_sweep(config: SweepConfig, *, output: Path | None, observer: SweepObserver | None, cache_dir: str | None,
                   machine: Machine | None, runner: Runner, distributed: dict[str, Any] | None, started_at: float,
                   warm: WarmRunner | None, fresh: WarmRunner | None) -> tuple[ResultSet, Path]:
    from loaderbench.env import capture_environment, preflight_warnings
    from loaderbench.results import check_result_path

    machine = machine or detect_machine()
    config = resolve_defaults(config, machine)
    now = _dt.datetime.now(_dt.timezone.utc)
    out = output or (Path(config.output) if config.output else default_output_path(config, now))
    check_result_path(out)
    check_baseline_settings(config, plan(config, machine))
    files = data_files(config.dataset)  # a --data path that is missing, unreadable or empty: one line, now
    obs = observer or NullObserver()
    ds = config.dataset
    if ds.kind == "import" and ds.data_roots and "root" not in ds.kwargs and ds.factory:
        from loaderbench.datasets import takes_root

        if not takes_root(ds.factory):
            obs.warning(
                f"--data: {ds.factory} has no `root` parameter, so the path is not passed to it; --cache and "
                "the bytes read are set against the files under --data: name exactly the files it reads"
            )
    try:
        obs.phase(f"building the dataset ({config.dataset.factory or config.dataset.kind}) to check it")
        facts = validate_workload(config, machine, cache_dir=cache_dir)
        if facts.sampler_kind:
            config = replace(config, dataset=replace(config.dataset, sampler_kind=facts.sampler_kind))
        cuda_in_use = machine.cuda and config.measure.device != "cpu"
        environment = capture_environment(device_index=0 if cuda_in_use else None)
        if distributed is not None:
            environment["distributed"] = distributed
        for w in preflight_warnings(environment):
            obs.warning(w)
        if warm is not None:
            rs = run_sweep(
                config, output=out, environment=environment, machine=machine, observer=obs,
                cache_dir=cache_dir, facts=facts, runner=warm, fresh_runner=fresh or run_isolated, files=files,
                started_at=started_at,
            )
            rs.analysis["measuring_processes"] = warm.starts
        else:
            rs = run_sweep(
                config, output=out, environment=environment, machine=machine, observer=obs,
                cache_dir=cache_dir, facts=facts, runner=runner, files=files, started_at=started_at,
            )
    except KeyboardInterrupt as exc:
        raise SweepInterruptedAt(out) from exc
    return rs, out


class SweepInterruptedAt(KeyboardInterrupt):
    """Ctrl-C during a sweep; `.output` holds the file with every finished config."""

    def __init__(self, output: Path) -> None:
        super().__init__(str(output))
        self.output = output
