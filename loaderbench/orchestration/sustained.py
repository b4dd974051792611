"""The pick measured once more over a window of several batches per worker, after the search.

NOTE [the pick's sustained figure]
    The search ranks configs on short windows (`--batches` 10 and `--min-time` 1 s by default):
    like with like, that ranks them fairly, and it is what lets a default sweep answer inside its
    budget. But near the knee, where each worker builds a batch in about as long as the window
    lasts, a window holds about one batch per worker (12-17 batches at 12 workers on the H200
    case), and its figure is the figure of one round of the workers' batches: which instant the
    window starts at within a round, and a host that moves 5-10% from one second to the next,
    decide it. There the pick's figure read 4,186 samples/s (one trial) where a plain loop of 150
    batches at its settings sustained 3,360 (the median of three, +24.6%), and another pick read
    12% above the plain loop as the median of three trials in turns.
    So after the search (and the drift check), where the pick's own windows held fewer than
    SUSTAINED_BATCHES_PER_WORKER batches per worker, the pick is measured once more in the
    measuring process the search used, with a window of at least that many batches per worker
    (`--min-time` and `--batches` still hold as lower bounds), and no loader-ceiling probe after
    it. Its figure is the pick's sustained figure (`Sustained`, `Knee.sustained_samples_per_s`):
    the recommendation states it, beside what the search's windows read. The rows keep their
    short-window figures and the ranking stands on them (like with like: every row's window reads
    the same way, and a pick measured longer than its rivals would be ranked on a different
    footing). The trial is taken only when it fits in what `--time-budget` leaves
    (`sustained_reserve_s`, which the search keeps back for it, and which the drift check's
    confirming trials leave free: a tripped check that confirmed its drift, or did not, took
    33-37 s of a default sweep on the H200 host and left the pick's figure on the short
    windows, +5.5% and +10.8% against a plain loop; a check confirmed before it can still spend
    it measuring the competing configs again); where it does not, the sweep records that
    (`sustained_left_out`) and the recommendation says its figure rests on the short windows.
    The search keeps that time back only once its fastest row waits for at most half its time
    (a stall of SUSTAINED_RESERVE_STALL or less, `search_reserve_s`): while every measured row
    still waits on the loader for most of its time, the configs not yet measured (more workers)
    decide the answer, and a longer window of a row far from the knee would not. On 8 usable
    CPUs of the H200 host, with `--time-budget 40`, keeping it back from the first trial on
    (13.5 s, so 20 s kept) ended the search after its one probe row (2 workers, stall 89%), with
    more workers unmeasured. Kept back only at a stall of 20% or less, it was never kept on a
    slower day of the same host, where every row near the knee waited 22-29% of its time: the
    search ran to its budget, the drift check followed, and the pick's figure stood on windows
    of one batch per worker, 10.8% above plain loops at its settings (docs/benchmarks.md).

    One window of 3-4 s is itself a sample of a host that moves: on the H200 host one read 3,089
    samples/s where the search's windows had read 3,842 and plain loops at its settings 3,880 and
    4,241 on either side of the next sweep (-20%: a disturbance of a few seconds). Two readings that
    disagree do not say which of them holds. So where the window reads more than the knee's
    tolerance from the search's figure and a second window still fits before the deadline
    (`sustained_fits`, with the profile's share kept after it), the pick is measured over the same
    window once more (`settle_windows`): two windows within the tolerance of each other are pooled
    (their samples over their seconds: the search's figure was off, as near the knee it reads); two
    that are not leave the middle of the three readings (the search's and the two windows'), and the
    recommendation says how far the windows disagree, with half the spread of the three readings as
    its uncertainty. A window within the tolerance of the search's figure stands alone: the two
    agree.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from loaderbench.analysis.statistics import settle_windows, window_batches_per_worker
from loaderbench.model import ConfigResult, MeasureSpec, Trial
from loaderbench.results import Sustained

SUSTAINED_BATCHES_PER_WORKER = 4  # a window of at least this many batches per worker is sustained
SUSTAINED_RESERVE_TRIALS = 1.5  # the search keeps back this many of its trials' time for it
SUSTAINED_RESERVE_STALL = 0.5  # once its fastest row's stall is at most this (NOTE above)


def sustained_window(measure: MeasureSpec, row: ConfigResult) -> MeasureSpec | None:
    """The measure settings of the pick's sustained trial (NOTE [the pick's sustained figure]):
    at least SUSTAINED_BATCHES_PER_WORKER batches per worker, `measure`'s own batches and
    `min_time_s` still lower bounds; None when the row's own windows already held that many
    batches per worker, or it has no workers (nothing built ahead of the window)."""
    per = window_batches_per_worker(row)
    if per is None or per >= SUSTAINED_BATCHES_PER_WORKER:
        return None
    batches = max(measure.batches, SUSTAINED_BATCHES_PER_WORKER * row.settings.num_workers)
    return replace(measure, batches=batches, max_batches=max(measure.max_batches, batches))


def sustained_fits(deadline: float | None, trial_walls: list[float], clock: Callable[[], float] = time.monotonic) -> bool:
    """Whether the sustained trial fits before `deadline` (on `clock`; None: no budget) at the
    pace of the trials so far (`sustained_reserve_s`)."""
    return deadline is None or clock() + sustained_reserve_s(trial_walls) <= deadline


def sustained_reserve_s(trial_walls: list[float]) -> float:
    """Seconds the search keeps back for the sustained trial: SUSTAINED_RESERVE_TRIALS times the
    median wall seconds of its trials so far (the longer window, 2-4 times the search's at the
    knee, and the warm-up before it); 0.0 before any trial."""
    return SUSTAINED_RESERVE_TRIALS * statistics.median(trial_walls) if trial_walls else 0.0


def search_reserve_s(top: ConfigResult | None, measure: MeasureSpec, trial_walls: list[float]) -> float:
    """Seconds the search keeps back for the sustained trial (NOTE [the pick's sustained
    figure]) while `top` is its fastest measured row (None: none yet): `sustained_reserve_s`
    where `top` would need one (`sustained_window`) and its stall fraction is at most
    SUSTAINED_RESERVE_STALL; 0.0 otherwise (the configs not yet measured come first)."""
    if top is None or top.summary is None or top.summary.stall_fraction > SUSTAINED_RESERVE_STALL:
        return 0.0
    return sustained_reserve_s(trial_walls) if sustained_window(measure, top) is not None else 0.0


def measure_sustained(row: ConfigResult, measure: MeasureSpec, run: Callable[[MeasureSpec], Trial | None], *,
                      search_samples_per_s: float, deadline: float | None, trial_walls: list[float],
                      tolerance: float = 0.0, keep_after_s: float = 0.0,
                      clock: Callable[[], float] = time.monotonic) -> Sustained | None:
    """The pick's sustained figure (NOTE [the pick's sustained figure]): `run(measure)` measures
    `row`'s settings with the longer window and returns its trial (None when it failed).
    `search_samples_per_s`: the row's figure from the search's windows; `deadline`: the
    `--time-budget`'s end on `clock` (None: no budget); `tolerance`: the knee's (a fraction; 0
    takes no second window); `keep_after_s`: seconds a second window must leave before the
    deadline (the profile's share). Returns the record, or None when no sustained trial is
    needed (`sustained_window`), it does not fit before the deadline, or it failed."""
    from loaderbench.analysis.statistics import trial_samples_per_s, trial_stall_fraction

    window = sustained_window(measure, row)
    if window is None:
        return None
    if not sustained_fits(deadline, trial_walls, clock):
        return None
    t0 = clock()
    trial = run(window)
    if trial is None:
        return None
    trials = [trial]
    first = trial_samples_per_s(trial)
    if (tolerance > 0 and search_samples_per_s > 0 and abs(first / search_samples_per_s - 1.0) > tolerance
            and sustained_fits(None if deadline is None else deadline - keep_after_s, trial_walls, clock)):
        again = run(window)
        if again is not None:
            trials.append(again)
    readings = [(trial_samples_per_s(t), trial_stall_fraction(t), float(t.samples)) for t in trials]
    search_stall = row.summary.stall_fraction if row.summary is not None else 0.0
    rate, stall, settled = settle_windows(search_samples_per_s, search_stall, readings, tolerance)
    w = row.settings.num_workers
    return Sustained(config=row.settings.key(), samples_per_s=rate, stall_fraction=stall,
                     batches=len(trial.step_s), batches_per_worker=len(trial.step_s) / w, window_s=trial.wall_s,
                     search_samples_per_s=search_samples_per_s,
                     search_batches_per_worker=window_batches_per_worker(row) or 0.0,
                     wall_s=clock() - t0, trial=trial, windows_samples_per_s=[r for r, _, _ in readings],
                     settled=settled, second=trials[1] if len(trials) > 1 else None)
