"""The drift check of a warm measuring process: the knee measured again in a fresh process at the end."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

from loaderbench.analysis.thresholds import WINDOW_SE_Z
from loaderbench.measure.isolation import Runner
from loaderbench.model import (
    ConfigResult,
    Trial,
)
from loaderbench.orchestration.config import SweepConfig
from loaderbench.orchestration.observer import SweepObserver
from loaderbench.orchestration.plan import Machine, plan
from loaderbench.results import Drift, ResultSet

DRIFT_MIN_CONFIGS = 3


DRIFT_TOLERANCE_FACTOR = 2.0  # one trial against another: twice the knee tolerance counts as drift


def drift_threshold(results: list[ConfigResult], tolerance: float, knee: ConfigResult | None = None) -> float:
    """The change of the knee's fresh trial against its warm trials that counts as drift:
    twice `tolerance`, or twice the median relative spread (max - min over median) of the
    configs measured more than once in this sweep, or what two of the `knee`'s windows differ by
    from their own batches alone (WINDOW_SE_Z x sqrt(2) x the median relative standard error of
    one of its windows, `statistics.window_se`: NOTE [a window's own uncertainty]), whichever is
    largest (NOTE [drift check])."""
    from loaderbench.analysis.statistics import window_se

    spreads = [r.summary.spread for r in results
               if r.status == "ok" and r.summary is not None and r.summary.repeats >= 2]
    noise = statistics.median(spreads) if spreads else 0.0
    ses = [] if knee is None else [se for t in knee.trials if (se := window_se(t, knee.settings.num_workers)) is not None]
    windows = WINDOW_SE_Z * math.sqrt(2.0) * statistics.median(ses) if ses else 0.0
    return max(DRIFT_TOLERANCE_FACTOR * tolerance, DRIFT_TOLERANCE_FACTOR * noise, windows)


def check_drift(result_set: ResultSet, results: list[ConfigResult], done: list[bool],
                run_trial: Callable[..., ConfigResult], fresh_runner: Runner, tolerance: float,
                obs: SweepObserver, *, deadline: float | None = None, warm_trial_s: float | None = None,
                keep_s: Callable[[ConfigResult], float] | None = None) -> None:
    """The warm process's check (NOTE [why a warm process, and what it keeps] in
    measure/warm.py), recorded in `sweep.drift`. `deadline`: the `--time-budget`'s end on the
    time.monotonic() clock (None: no budget), which the competing configs' fresh trials keep to;
    `warm_trial_s`, the median wall seconds of the sweep's warm trials (the pace of the one more
    warm trial a tripped check with no time to confirm may still take); `keep_s(knee)`, the
    seconds to leave before the deadline for what follows the check on the knee (the pick's
    sustained trial), which the trials that confirm a tripped check, and the one more warm trial,
    leave free.

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
        trials are dropped, when they fit in what is left of `--time-budget` at the fresh
        trial's pace (on the H200 case one such trial took 12.5 s of a default sweep that ended
        17 s past its 120 s); when they do not, every row keeps its warm trials, the knee too
        (like with like), and the check names the configs left warm (`Drift.not_remeasured`).
        Where even the two trials that confirm a tripped check do not fit (at twice the first
        fresh trial's time, leaving the knee's sustained trial its time: NOTE [the pick's
        sustained figure] in orchestration/sustained.py), the check stays that one fresh
        trial, unconfirmed and said so (`Drift.unconfirmed_for_budget`), and the knee gets one
        more warm trial (a repeat it keeps) when that fits at the warm trials' pace (that time
        too left free): a knee picked on a lucky trial is the commoner cause of a trip (on the H200 case a knee measured once at 4,186 samples/s read
        3,518 fresh, where a plain loop of 150 batches sustained 3,360, the median of three),
        and its second warm trial settles the figure without the fresh process (the pick's
        spread then says how far apart they read). Where the fresh trial still reads past the threshold against the
        knee's figure, the recommendation says so with both figures (Knee.fresh_samples_per_s).
        Otherwise the fresh trials are checks, not repeats: they are left out of the knee's
        trials, since one config measured partly fresh would be ranked
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
    threshold = drift_threshold([results[j] for j in measured], tolerance, knee)
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
    fresh_s = time.monotonic() - t0  # one fresh trial, its process's start included
    fresh_trials.append(first)
    tripped = before > 0 and abs(trial_samples_per_s(first) / before - 1.0) > threshold
    # Confirming takes one more warm trial and one more fresh one; past what --time-budget
    # leaves (at the first fresh trial's pace, twice), the check stays one trial, unconfirmed.
    keep = 0.0 if keep_s is None else keep_s(knee)
    unconfirmed = tripped and deadline is not None and time.monotonic() + 2 * fresh_s + keep > deadline
    if tripped and not unconfirmed:
        # One more of each kind: a knee picked on a lucky trial reads lower whatever measures it
        # again, and one fresh trial can be the outlier (NOTE [drift check]).
        again = one(None)
        if again is not None:
            warm_trials.append(again)
        # It probes the loader ceiling: confirmed, the fresh trials alone stand for the knee.
        second = one(fresh_runner, loader_alone=True)
        if second is not None:
            fresh_trials.append(second)
    elif (unconfirmed and deadline is not None and warm_trial_s is not None
          and time.monotonic() + warm_trial_s + keep <= deadline):
        again = one(None)  # no time to confirm; time for one more warm trial, a repeat it keeps
        if again is not None:
            warm_trials.append(again)
    warm = [trial_samples_per_s(t) for t in warm_trials]
    fresh = [trial_samples_per_s(t) for t in fresh_trials]
    confirmed = bool(tripped and len(fresh) == 2 and len(warm) >= 2 and (
        max(fresh) < (1.0 - threshold) * min(warm) or min(fresh) > (1.0 + threshold) * max(warm)))
    change = statistics.median(fresh) / statistics.median(warm) - 1.0 if warm and statistics.median(warm) > 0 else 0.0
    drift = Drift(results[i].settings.key(), change=change, warm_samples_per_s=statistics.median(warm),
                  warm_trials_samples_per_s=warm, fresh_samples_per_s=statistics.median(fresh),
                  fresh_trials_samples_per_s=fresh, threshold=threshold, confirmed=confirmed,
                  unconfirmed_for_budget=unconfirmed,
                  # what the check cost, against the reserve NOTE [time budget] keeps for it
                  wall_s=time.monotonic() - t0)
    ok = [j for j in measured if results[j].summary is not None]
    top = max((results[j].summary.samples_per_s for j in ok), default=0.0)  # type: ignore[union-attr]
    competing = [j for j in ok if j != i and results[j].summary.samples_per_s >= (1.0 - 2 * tolerance) * top]  # type: ignore[union-attr]
    if confirmed and deadline is not None and time.monotonic() + fresh_s * len(competing) > deadline:
        drift.not_remeasured = [results[j].settings.key() for j in competing]
        obs.warning(f"drift: {results[i].settings.key()} measured {change:+.1%} in two fresh processes against "
                    "two warm trials; --time-budget leaves no time to measure the competing configs again: "
                    "every row keeps its warm trials")
        results[i].trials = warm_trials
    elif confirmed:
        obs.warning(f"drift: {results[i].settings.key()} measured {change:+.1%} in two fresh processes against "
                    "two warm trials; measuring the competing configs again, each in a fresh process")
        for j in competing:
            results[j].trials = []
            run_trial(j, 0, via=fresh_runner)
            drift.remeasured.append(results[j].settings.key())
        results[i].trials = fresh_trials  # the fresh trials only
        drift.remeasured.append(results[i].settings.key())
    else:
        results[i].trials = warm_trials  # like with like: the warm trials rank it
    result_set.sweep.drift = drift


SPARE_MIN_CPUS = 4  # start the drift check's fresh process ahead only with this many usable CPUs


def drift_may_follow(config: SweepConfig) -> bool:
    """Whether the drift check's fresh process is worth starting ahead: at least SPARE_MIN_CPUS
    usable CPUs (NOTE [a fresh process, started ahead]) and a sweep that may measure
    DRIFT_MIN_CONFIGS configs or more: the default worker grid has three counts or more;
    otherwise the grid's configs counted as with CUDA (pin_memory and prefetch then add
    configs), the most there can be."""
    from loaderbench.machine.env import usable_cpus

    if usable_cpus() < SPARE_MIN_CPUS:
        return False
    if not config.grid.get("num_workers"):
        return True
    return len(plan(config, Machine(cuda=True, usable_cpus=1))) >= DRIFT_MIN_CONFIGS
