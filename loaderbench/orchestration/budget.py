"""`--time-budget`: how much time a search step must leave before the deadline."""

from __future__ import annotations

import statistics

FINISH_RESERVE_S = 5.0
"""Seconds --time-budget keeps for what follows the measurements: the analysis, the report, the
result file and the interpreter's exit (1.4-3.3 s after the default sweep's last measurement on
the H200 host, 1.8 s on the 2-core machine), and the last measurement's overrun of its own share
(on a slow H200 host the sustained window and the profile ended 1.2-1.9 s past the 3-s reserve's
line, and two default sweeps answered 0.5 and 2.1 s past 120 s: docs/benchmarks.md)."""
FINISH_RESERVE_SHARE = 0.1  # of a short --time-budget at most


def finish_reserve_s(time_budget_s: float) -> float:
    """Seconds of `time_budget_s` (--time-budget) kept for the analysis, the report and the exit
    after the last measurement: FINISH_RESERVE_S, at most FINISH_RESERVE_SHARE of the budget."""
    return min(FINISH_RESERVE_S, FINISH_RESERVE_SHARE * max(0.0, time_budget_s))


def measuring_budget_s(time_budget_s: float) -> float:
    """The seconds of `time_budget_s` (--time-budget, counted from the command's start) that the
    measurements may take: the rest is kept for the report (`finish_reserve_s`)."""
    return time_budget_s - finish_reserve_s(time_budget_s)


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
        measured as the pick, and the footer says so. The measurements end FINISH_RESERVE_S
        before the budget (at most a tenth of it: `measuring_budget_s`): the analysis, the report
        and the exit after them took 1.4-3.3 s of the default sweep on the H200 host, and one
        run whose profile used its share to the end answered 3.9 s past a 120-s budget; with 3 s
        kept, a slow host's last measurements still ended 1.2-1.9 s past their line.
    """
    if not trial_walls:
        return 0.0
    per = max(statistics.median(trial_walls), statistics.fmean(trial_walls[-3:]))
    return per * (3.0 if drift_follows else 1.0)
