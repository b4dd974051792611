"""The summaries pass: pure statistics of raw per-batch samples (percentiles, per-trial throughput
and stall), the summary of a config's repeats with its samples per batch, mean step, spread and
noise, and the fetch/prep split of configs measured cold and warm.

No torch, no pynvml, no I/O: `show` and `compare` use this on CPU-only CI runners. Every number is
derived from the raw per-batch samples kept in `Trial` (the timing model is in measure/loop.py).
The passes after it (analysis/__init__.py) read what it wrote into each `Summary`.

NOTE [ The differential fetch/prep split ]
    Run the same config twice, once with the dataset evicted (cold) and once with it resident
    (warm). The warm run's data-wait is the preparation stall (decode, augment, collate,
    transfer): storage is out of the picture. The cold run pays the same preparation plus the
    fetch from storage, so cold - warm is the fetch stall. This is the differential method of the
    data-stall literature (e.g. Mohan et al., "Analyzing and Mitigating Data Stalls in DNN
    Training", VLDB 2021). It needs a warm run that really is warm and a cold run that really is
    cold, which is why storage.cache verifies both states.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from loaderbench.analysis.thresholds import (
    BLOCK_UNIT_BATCHES,
    IDLE_MIN_BATCHES_PER_WORKER,
    IDLE_WORKER_SHARE,
    NOISY_SPREAD,
    PART_CACHED_MAX,
    PART_CACHED_MIN,
    PERIOD_STALL_OVER_REST,
    WINDOW_SE_ROUNDS,
    WINDOW_SE_Z,
)
from loaderbench.conclusions import FetchPrep, FetchPrepBound
from loaderbench.model import (
    CEILING_SLACK,
    PROBE_BUILD_SE,
    CeilingBound,
    ConfigResult,
    NodeFigures,
    ServedFrom,
    Summary,
    SustainedSettled,
    Trial,
    WarningKind,
    split_threshold,
)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation (numpy's default method).

    Raises ValueError on an empty sequence.
    """
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    frac = pos - lo
    return float(xs[lo] + (xs[hi] - xs[lo]) * frac)


def trial_samples_per_s(trial: Trial) -> float:
    """Measured samples / measured time (sum of step times), in samples/s; 0 for no time; at most
    the workers' sustained production where it was measured (`Trial.production_samples_per_s`:
    a window that drew on batches built before it reads the backlog, NOTE [production in the
    window] in measure/timing.py). A window that caught epoch starts in a loader of known epochs gives a whole epoch's rate
    instead (`epoch_weighed`, NOTE [epoch starts weighed once per epoch]).

    A distributed trial (with `rank_trials`, see distributed.merge_trials) is the whole job's:
    the sum over ranks of each rank's own samples/s (every rank moves its own samples).
    """
    if trial.rank_trials:
        return sum(trial_samples_per_s(Trial.from_dict(t)) for t in trial.rank_trials)
    epoch = epoch_weighed(trial)
    if epoch is not None:
        return epoch[0]
    blocks = whole_blocks(trial)
    total_s = sum(trial.step_s)
    window = blocks[0] if blocks is not None else trial.samples / total_s if total_s > 0 else 0.0
    made = trial.production_samples_per_s
    return min(window, made) if made is not None and made > 0 else window


def trial_stall_fraction(trial: Trial) -> float:
    """Total data-wait / total step time (0..1): the share of the step the consumer was starved
    (a whole epoch's where `epoch_weighed` gives one). Where `trial_samples_per_s` is held to the
    workers' production (below the window's own rate), at least 1 - mean compute x that rate /
    samples per batch: the wait a step at the sustained rate has."""
    epoch = epoch_weighed(trial)
    if epoch is not None:
        return epoch[1]
    total_s = sum(trial.step_s)
    if total_s <= 0:
        return 0.0
    stall = min(1.0, max(0.0, sum(trial.data_wait_s) / total_s))
    window = trial.samples / total_s
    blocks = whole_blocks(trial)
    if blocks is not None:
        window, stall = blocks
    rate = trial.production_samples_per_s
    if rate is not None and 0 < rate < window and trial.compute_s and trial.samples > 0:
        # Held to the workers' production: a step at that rate lasts batch / rate, of which
        # the step's own compute is the part not waited for.
        batch = trial.samples / len(trial.step_s)
        stall = max(stall, min(1.0, max(0.0, 1.0 - statistics.fmean(trial.compute_s) * rate / batch)))
    return stall


def whole_blocks(trial: Trial) -> tuple[float, float] | None:
    """(samples/s, stall fraction) of the window's whole cycles where its workers finish blocks of
    batches (`Trial.production_unit_batches` at least BLOCK_UNIT_BATCHES): from its first long
    wait to its last (the long waits: Otsu's upper class of the data-waits, averaging at least
    PERIOD_STALL_OVER_REST times the rest; two or more). None otherwise (the window's own figures
    stand).

    NOTE [whole blocks in the window]
        Workers that finish a block of batches at once (a shuffle buffer filled, a record file
        decoded) cannot build ahead of a block they are still handing out: what is in flight is
        bounded by prefetch_factor x num_workers batches. So the loop takes a block's batches at
        the step's pace, then waits for the next block's build, and its rate is a block's build
        plus its consumption per cycle. A window of a few cycles that begins or ends inside a run
        holds the runs and the waits in the wrong proportion: with blocks of 20 batches, 2 workers
        and a 3-ms step, 112 batches held 2.8 cycles and 2 long waits and read 1,120 samples/s
        where a plain loop drew 884 (+27%). The cycles between the first long wait and the last
        hold each in its place. Only for such workers: on the GPU case's sawtooth (batches built
        one at a time, W of them arriving together) the same rule read further from a plain loop
        in 7 of 10 kept windows (docs/benchmarks.md, section 22).

    >>> from loaderbench.model import Trial
    >>> waits = [0.0] * 3 + [0.3] + [0.0] * 19 + [0.3] + [0.0] * 10
    >>> t = Trial(0.1, 3, waits, [0.003] * 34, [w + 0.003 for w in waits], 340, 0.3, "host",
    ...           production_unit_batches=20.0)
    >>> rate, stall = whole_blocks(t)
    >>> round(rate, 1), round(stall, 3)  # 20 batches of 10 over 0.3 s + 20 x 3 ms
    (555.6, 0.833)
    """
    if (trial.production_unit_batches or 0.0) < BLOCK_UNIT_BATCHES or not trial.data_wait_s:
        return None
    waits, steps = trial.data_wait_s, trial.step_s
    split = split_threshold(waits)
    if split is None or split[2] < PERIOD_STALL_OVER_REST * max(split[1], 1e-9):
        return None
    long = [i for i, w in enumerate(waits) if w >= split[0]]
    if len(long) < 2 or len(steps) != len(waits):
        return None
    a, b = long[0], long[-1]
    cycle_s = sum(steps[a:b])
    if cycle_s <= 0:
        return None
    per_batch = trial.samples / len(steps)
    return per_batch * (b - a) / cycle_s, min(1.0, max(0.0, sum(waits[a:b]) / cycle_s))


def epoch_weighed(trial: Trial) -> tuple[float, float] | None:
    """(samples/s, stall fraction) of one whole epoch as the window measured it: the epoch's
    samples (`Trial.epoch_samples`) over one epoch-start batch's step (the mean over the starts
    the window caught) plus `Trial.epoch_batches` - 1 of its other batches' steps (their mean);
    the stall likewise. None without an epoch start in the window, an epoch of one batch, or an
    unknown epoch (then the window's own samples over its own time stand).

    NOTE [epoch starts weighed once per epoch]
        An epoch start (workers starting again unless persistent, the pipeline refilling, the
        sampler's first index lists) recurs once per epoch of E batches, and each epoch ends on
        a short batch when E x batch_size overshoots it. A window of n batches that is not a
        whole number of epochs holds the start 0, 1 or 2 times wherever it happened to begin,
        so a short epoch was weighed by chance: an ImageFolder of 500 images at batch 64 (7.8
        batches an epoch, one start in a 10-batch window) read 4-15% above a plain loop over
        real epochs, and one of 100 images at batch 16 that caught two starts in 10 batches
        read 12% below. Windows over files stay in as few epochs as they can (a later epoch
        reads what the first left in the page cache) and cannot always end on an epoch's edge
        (NOTE [whole epochs in the window] in measure/loop.py), so the weighing is done here:
        an epoch costs one start, measured at the window's own epoch boundary, and E - 1
        ordinary batches, and holds the epoch's own samples. Where the window holds no start,
        nothing was measured to weigh (the start-up finding predicts its share instead).

    >>> from loaderbench.model import Trial
    >>> waits = [0.0, 0.0, 0.4] + [0.0] * 7
    >>> t = Trial(0.1, 3, waits, [0.05] * 10, [w + 0.05 for w in waits], 152, 0.9, "host",
    ...           epoch_start_batches=[2], epoch_batches=8, epoch_samples=120)
    >>> [round(x, 4) for x in epoch_weighed(t)]  # 120 / (0.45 + 7 x 0.05); 0.4 / 0.8
    [150.0, 0.5]
    """
    e, samples = trial.epoch_batches, trial.epoch_samples
    n = len(trial.step_s)
    starts = sorted({i for i in trial.epoch_start_batches if 0 <= i < min(n, len(trial.data_wait_s))})
    if not e or e < 2 or not samples or not starts or len(starts) >= n:
        return None
    chosen = set(starts)
    rest = [i for i in range(n) if i not in chosen]
    waits = trial.data_wait_s
    epoch_s = (statistics.fmean(trial.step_s[i] for i in starts)
               + (e - 1) * statistics.fmean(trial.step_s[i] for i in rest))
    wait_s = (statistics.fmean(waits[i] for i in starts if i < len(waits))
              + (e - 1) * statistics.fmean(waits[i] for i in rest if i < len(waits)))
    if epoch_s <= 0:
        return None
    return samples / epoch_s, min(1.0, max(0.0, wait_s / epoch_s))


def window_se(trial: Trial, num_workers: int) -> float | None:
    """The relative standard error of a trial's samples/s from its own window (a fraction of it):
    non-overlapping batch means over the window's step times, one batch of means per round of
    `num_workers` steps (one step without workers; a round of blocks where workers finish
    blocks of batches: `Trial.production_unit_batches`), from the second step on; None with
    fewer than WINDOW_SE_ROUNDS whole rounds there, or for a distributed trial.

    NOTE [a window's own uncertainty]
        A window of about 1 s holds 10-100 batches. Where every batch takes about as long, that
        is plenty; where the builds vary (a sample of 5 ms or of 120 ms, a read that sometimes
        stalls), a loader that hands batches out in order waits on each batch's own worker, and
        the window's rate is the mean of few, widely spread rounds. On such inputs 1-s windows
        read with a standard deviation of 18-20% of the long-run rate in a simulation of the
        in-order hand-out (benchmarks/window_uncertainty_sim.py: 300 windows each, 2-16
        workers), and 123-137 samples/s against plain loops of 106-112 on the 2-core machine
        (docs/benchmarks.md section 32). The trial's step times carry that spread: the window's
        mean step time is estimated by the method of batch means (Law and Kelton, "Simulation
        Modeling and Analysis", ch. 9: the means of consecutive non-overlapping groups of an
        autocorrelated series are close to independent), with one round of `num_workers` steps
        per group, since an in-order loader's waits come once a round (a sawtooth) and within a
        round they are not independent. The window's first step is left out: it carries the
        window's start (it read 34-46 ms against 6-ms steps after it on the H200 case at batch
        16, in every trial), the same in every window, a bias of the window and not a variation
        between windows. Its relative standard error is that of the rate (the delta method:
        samples/s is samples per batch over the mean step). Twice it covered the long-run rate
        in 93-96% of the simulated windows with 4 rounds or more; steps of one length (a
        compute-bound row) give nearly 0.
        The row's uncertainty (its ±) is the larger of two standard errors of its trials' mean
        and half its repeats' spread (`row_uncertainty`). A row past ±5% is noisy, and its own
        figure is then the less certain one beside the loader-alone probe after its window: a
        probe that read within 10% under it stands as read, as does one within the row's ± whose
        builds' mean is known to PROBE_BUILD_SE (`probe_against_row`); a bound on such a row is
        the low end of its ± (`row_floor`), not its figure. The row keeps its own figure: held to
        the probe where the probe read under it, a row of 3 repeats at 409 samples/s (plain loops
        with the step: 414) read 382 (docs/benchmarks.md section 32e).

    >>> from loaderbench.model import Trial
    >>> steps = [0.9] + [0.1, 0.3] * 4  # a slow first step (the window's start), then rounds of 0.4 s
    >>> window_se(Trial(0.1, 3, [0.0] * 9, steps, steps, 72, 0.3, "host"), 2)
    0.0
    >>> steps = [0.2, 0.1, 0.1, 0.1, 0.3, 0.1, 0.1, 0.1, 0.3]  # then round means 0.1, 0.2, 0.1, 0.2
    >>> round(window_se(Trial(0.1, 3, [0.0] * 9, steps, steps, 72, 0.3, "host"), 2), 4)  # 0.0577 / 2 / 0.15
    0.1925
    >>> window_se(Trial(0.1, 3, [0.0] * 7, steps[:7], steps[:7], 56, 0.3, "host"), 2) is None  # 3 rounds after it
    True
    """
    if trial.rank_trials:
        return None
    size = max(1, num_workers) * max(1, round(trial.production_unit_batches or 1.0))
    steps = trial.step_s[1:]  # the first step left out: every window starts alike
    rounds = len(steps) // size
    if rounds < WINDOW_SE_ROUNDS:
        return None
    means = [math.fsum(steps[i * size:(i + 1) * size]) / size for i in range(rounds)]
    mean = statistics.fmean(means)
    return statistics.stdev(means) / math.sqrt(rounds) / mean if mean > 0 else None


def trials_window_se(trials: Sequence[Trial], num_workers: int) -> float | None:
    """The relative standard error of the mean of the trials' samples/s from their windows: one
    window's (`window_se`, the root mean square over the trials where it is known: the same
    config's windows vary alike) over the square root of the trials; None where it is known for
    none.

    >>> from loaderbench.model import Trial
    >>> steps = [0.2, 0.1, 0.1, 0.1, 0.3, 0.1, 0.1, 0.1, 0.3]
    >>> t = Trial(0.1, 3, [0.0] * 9, steps, steps, 72, 0.3, "host")  # one window known to 19.25%
    >>> short = Trial(0.1, 3, [0.0] * 4, steps[:4], steps[:4], 32, 0.3, "host")  # too few rounds
    >>> round(trials_window_se([t, short], 2), 4)  # 0.1925 / sqrt(2)
    0.1361
    """
    known = [se for t in trials if (se := window_se(t, num_workers)) is not None]
    if not known:
        return None
    return math.sqrt(math.fsum(se * se for se in known) / len(known)) / math.sqrt(len(trials))


def row_uncertainty(spread: float, se: float | None) -> float:
    """How far a row's samples/s may be off, as a fraction of it (the ± shown): the larger of half
    its repeats' spread ((max - min) / median) and WINDOW_SE_Z standard errors of its windows
    (`trials_window_se`; NOTE [a window's own uncertainty])."""
    return max(spread / 2.0, WINDOW_SE_Z * (se or 0.0))


def _median_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None


def summarize(trials: Sequence[Trial], num_workers: int = 0, usable_cpus: int | None = None) -> Summary:
    """Median over repeats of each trial's statistics, plus the min-max spread of throughput.

    Per trial: samples_per_s = samples / sum(step_s); stall_fraction = sum(data_wait_s) /
    sum(step_s); p50/p95 over that trial's per-batch samples; the receive as
    `Trial.receives_read_s(num_workers, usable_cpus)` reads it. Raises ValueError with no trials or a trial
    without measured batches.
    """
    if not trials:
        raise ValueError("summarize needs at least one trial")
    for t in trials:
        if not t.step_s:
            raise ValueError("a trial has no measured batches")
    rates = [trial_samples_per_s(t) for t in trials]
    stalls = [trial_stall_fraction(t) for t in trials]
    summary = Summary(
        samples_per_s=float(statistics.median(rates)),
        stall_fraction=float(statistics.median(stalls)),
        data_wait_p50_s=float(statistics.median(percentile(t.data_wait_s, 50) for t in trials)),
        data_wait_p95_s=float(statistics.median(percentile(t.data_wait_s, 95) for t in trials)),
        data_wait_mean_s=float(statistics.median(statistics.fmean(t.data_wait_s) for t in trials)),
        data_wait_p90_s=float(statistics.median(percentile(t.data_wait_s, 90) for t in trials)),
        data_wait_p99_s=float(statistics.median(percentile(t.data_wait_s, 99) for t in trials)),
        data_wait_max_s=float(statistics.median(max(t.data_wait_s) for t in trials)),
        compute_p50_s=float(statistics.median(percentile(t.compute_s, 50) for t in trials)),
        step_p50_s=float(statistics.median(percentile(t.step_s, 50) for t in trials)),
        first_batch_s=float(statistics.median(t.first_batch_s for t in trials)),
        gpu_util_pct=_median_or_none([t.gpu_util_pct for t in trials]),
        gpu_sm_active_pct=_median_or_none([t.gpu_sm_active_pct for t in trials]),
        cpu_util_pct=_median_or_none([t.cpu_util_pct for t in trials]),
        main_cpu_util_pct=_median_or_none([t.main_cpu_util_pct for t in trials]),
        other_cpu_util_pct=_median_or_none([t.other_cpu_util_pct for t in trials]),
        steal_cpu_util_pct=_median_or_none([t.steal_cpu_util_pct for t in trials]),
        workers_runq_pct=_median_or_none([t.workers_runq_pct for t in trials]),
        memory_pss_bytes=(
            None
            if all(t.memory_pss_bytes is None for t in trials)
            else int(max(t.memory_pss_bytes or 0 for t in trials))
        ),
        receive_p50_s=_median_or_none(
            [percentile(r, 50) if (r := t.receives_read_s(num_workers, usable_cpus)) else None for t in trials]
        ),
        h2d_p50_s=_median_or_none([percentile(t.h2d_s, 50) if t.h2d_s else None for t in trials]),
        h2d_gb_per_s=_median_or_none(
            [
                t.h2d_bytes_per_batch / percentile(t.h2d_s, 50) / 1e9
                if t.h2d_s and t.h2d_bytes_per_batch and percentile(t.h2d_s, 50) > 0
                else None
                for t in trials
            ]
        ),
        h2d_hidden_fraction=_median_or_none([t.h2d_hidden_fraction for t in trials]),
        batch_bytes=trials[0].batch_bytes,
        loader_ceiling_samples_per_s=_median_or_none([t.loader_alone_samples_per_s for t in trials
                                                      if t.loader_alone_method in (None, "sustained")]),
        storage_mb_per_s=_median_or_none([t.storage_mb_per_s for t in trials]),
        storage_fraction=_median_or_none(
            [t.storage_read_bytes / t.needed_bytes if t.storage_read_bytes is not None and t.needed_bytes else None
             for t in trials]
        ),
        served_from=_served_from([t.served_from for t in trials]),
        samples_per_s_min=float(min(rates)),
        samples_per_s_max=float(max(rates)),
        repeats=len(trials),
    )
    _rank_statistics(summary, trials)
    summary.spread = relative_spread(summary)
    summary.window_se = trials_window_se(trials, num_workers)
    summary.uncertainty = row_uncertainty(summary.spread, summary.window_se)
    summary.noisy = summary.uncertainty > NOISY_SPREAD / 2.0
    row = summary.samples_per_s
    settled = probe_settled(trials)
    alone = summary.loader_ceiling_samples_per_s
    probed = [t.loader_alone_probe_samples_per_s for t in trials
              if t.loader_alone_reason == "below_step_rate" and t.loader_alone_probe_samples_per_s]
    if alone is None and probed:
        # The probe read under its own trial's window (a bound there, loop.settle_ceiling); the
        # median of the row's windows (its repeats) may have come down to it, or the row's figure
        # be that uncertain: that trial's window read high, and the probe stands.
        alone = float(statistics.median(probed))
    if alone is not None:
        # Each trial's probe is held against its own window; the row's figure is the median over
        # its repeats, which the loader alone reaches too.
        summary.loader_ceiling_samples_per_s = probe_against_row(alone, row, summary.uncertainty, settled,
                                                                 summary.noisy)
        if summary.loader_ceiling_samples_per_s is None and not probed:
            summary.loader_ceiling_bound_samples_per_s = row_floor(summary)
            summary.loader_ceiling_bound = CeilingBound.BELOW_STEP_RATE
    if summary.loader_ceiling_samples_per_s is None and summary.loader_ceiling_bound is None:
        bound, summary.loader_ceiling_bound = ceiling_bound(trials)
        if summary.noisy and summary.loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE:
            # That trial's window, which the probe read under, is no firmer than the row itself.
            bound = row_floor(summary)
        else:
            # A trial's bound was held against its own window; the row's median is reached too.
            bound = None if bound is None else max(bound, summary.samples_per_s)
        summary.loader_ceiling_bound_samples_per_s = bound
    summary.worker_batches, summary.idle_workers, summary.idle_probe_batches = worker_shares(trials)
    summary.other_cores = other_cores(summary.other_cpu_util_pct, summary.steal_cpu_util_pct)
    summary.part_cached = summary.served_from is ServedFrom.MIXED or (
        summary.served_from in (None, ServedFrom.STORAGE, ServedFrom.UNKNOWN)
        and summary.storage_fraction is not None and PART_CACHED_MIN <= summary.storage_fraction < PART_CACHED_MAX)
    return summary


def probe_against_row(probe_samples_per_s: float, row_samples_per_s: float, uncertainty: float,
                      settled: bool = True, noisy: bool = False) -> float | None:
    """The loader ceiling where the probe (samples/s) read below the row's own samples/s with the
    step, which the loader alone reaches too (NOTE [loader ceiling] in measure/loop.py): within
    CEILING_SLACK under the row, the row's rate (the noise of either), or the probe's reading where the row is
    `noisy` (its own figure is the less certain one); further under it but within the row's own
    `uncertainty` (a fraction, `row_uncertainty`) where the probe itself is `settled` (its
    replay's mean build known to PROBE_BUILD_SE, or no replay), the probe's reading (the row's
    repeats read high by as much as they may); else None (the ceiling is then only a bound:
    `row_floor`).

    >>> probe_against_row(95.0, 100.0, 0.0), probe_against_row(85.0, 100.0, 0.2), probe_against_row(85.0, 100.0, 0.1)
    (100.0, 85.0, None)
    >>> probe_against_row(85.0, 100.0, 0.2, settled=False) is None  # its builds too few for their spread
    True
    >>> probe_against_row(95.0, 100.0, 0.2, settled=False, noisy=True)
    95.0
    """
    if probe_samples_per_s >= row_samples_per_s:
        return probe_samples_per_s
    if probe_samples_per_s >= (1.0 - CEILING_SLACK) * row_samples_per_s:
        return probe_samples_per_s if noisy else row_samples_per_s
    if settled and probe_samples_per_s >= (1.0 - uncertainty) * row_samples_per_s:
        return probe_samples_per_s
    return None


def row_floor(summary: Summary) -> float:
    """What the loader alone delivers at least, from the row's own samples/s with the step: that
    rate, or where the row is `noisy` the low end of its ± (`Summary.uncertainty`): a window that
    read high by as much as it may does not show that the loader alone reaches its figure.

    >>> from loaderbench.model import Summary
    >>> row_floor(Summary(125.0, 0.9, 0.0, 0.0, 0.005, 0.0, 0.1, uncertainty=0.25, noisy=True))
    93.75
    """
    if summary.noisy:
        return summary.samples_per_s * (1.0 - min(summary.uncertainty, 1.0))
    return summary.samples_per_s


def probe_settled(trials: Sequence[Trial]) -> bool:
    """Whether every probing trial's in-order replay, where one was used, ended with its mean build
    known to PROBE_BUILD_SE (`Trial.loader_alone_build_se`; NOTE [loader ceiling] in
    measure/loop.py): a heavy tail of builds (a stall on 1 sample in 50) sampled too thinly in
    the probe's time cap read 19-20% under plain draws (docs/benchmarks.md section 30d)."""
    return all(t.loader_alone_build_se is None or t.loader_alone_build_se <= PROBE_BUILD_SE for t in trials)


def ceiling_bound(trials: Sequence[Trial]) -> tuple[float | None, CeilingBound | None]:
    """The loader ceiling of trials whose probe gave a bound, not a sustained rate (NOTE [loader
    ceiling] in measure/loop.py: `loader_alone_method` "bound"): the highest bound (the loader
    alone delivers at least that many samples/s) and why it is one (that trial's reason);
    (None, None) when no trial has a bound.

    A probe of a file written before sustained rates were measured (`loader_alone_method`
    "legacy", set on reading it: schema.migrate) timed half a second of draws: below the row's
    own rate where the workers' backlog was drained, far above it where they held finished
    items. It is no rate and no bound; what the loader alone delivers at least is the rate the
    row reached with the step (`LEGACY_PROBE`)."""
    bounds = [(t.loader_alone_bound_samples_per_s, t.loader_alone_reason) for t in trials
              if t.loader_alone_method == "bound" and t.loader_alone_bound_samples_per_s]
    bounds += [(trial_samples_per_s(t), CeilingBound.LEGACY_PROBE.value) for t in trials
               if t.loader_alone_method == "legacy" and t.step_s]
    if not bounds:
        return None, None
    top, reason = max(bounds, key=lambda b: b[0] or 0.0)
    try:
        why = CeilingBound(reason)
    except ValueError:
        why = CeilingBound.OTHER
    return top, why


def worker_shares(trials: Sequence[Trial]) -> tuple[list[int], int | None, list[int]]:
    """The batches each DataLoader worker delivered in the window (`Trial.worker_batches`, of the
    first trial that counted them), how many workers took no real part, and the probe's counts
    where they decided it ([] else). In the window: a worker that delivered no batch, or under
    IDLE_WORKER_SHARE of an equal share (the window's batches / num_workers), in every trial that
    counted them over at least IDLE_MIN_BATCHES_PER_WORKER batches per worker (the fewest over
    those trials: a worker idle by chance in one short window is not named). In the loader-alone
    probe after the window (`Trial.loader_alone_worker_batches`, counted as much): a worker that
    delivered no batch there while the others delivered that many, which the DataLoader's in-order
    round robin gives only a worker whose share of the stream ran out (shards of 200,000 and 40
    items: 26, 3, 3, 3 batches in the window, 17, 0, 0, 0 in the probe); where the probe names more
    idle workers than the windows, its count and its batches. ([], None, []) when nothing counted
    them so.

    >>> t = Trial(0.1, 0, [0.0] * 8, [0.01] * 8, [0.01] * 8, 8, 0.1, "host", worker_batches=[8, 0, 0, 0])
    >>> worker_shares([t])
    ([8, 0, 0, 0], 3, [])
    >>> t = Trial(0.1, 0, [0.0] * 35, [0.01] * 35, [0.01] * 35, 35, 0.4, "host", worker_batches=[26, 3, 3, 3],
    ...           loader_alone_worker_batches=[17, 0, 0, 0])
    >>> worker_shares([t])
    ([26, 3, 3, 3], 3, [17, 0, 0, 0])
    """
    def enough(wb: list[int]) -> bool:
        return bool(wb) and sum(wb) >= IDLE_MIN_BATCHES_PER_WORKER * len(wb)

    counted = [t.worker_batches for t in trials if enough(t.worker_batches)]
    probed = [t.loader_alone_worker_batches for t in trials if enough(t.loader_alone_worker_batches)]
    if not counted and not probed:
        return [], None, []
    idle = min((sum(1 for b in wb if b < IDLE_WORKER_SHARE * sum(wb) / len(wb)) for wb in counted), default=0)
    stopped = max((sum(1 for b in wb if b == 0) for wb in probed), default=0)
    if stopped > idle:
        probe = next(wb for wb in probed if sum(1 for b in wb if b == 0) == stopped)
        return list(counted[0]) if counted else list(probe), stopped, list(probe)
    return (list(counted[0]), idle, []) if counted else ([], None, [])


def summarize_result(result: ConfigResult, usable_cpus: int | None = None) -> None:
    """The summaries pass for one config: `result.summary` from its trials (`summarize`), with
    its samples per batch as counted (NOTE [samples per batch]: the batch size when no trial
    says), its mean step and whether it may be ranked (not when it counts duplicate samples: a
    REPLICATED warning). A config that is not ok, or has no trials, keeps no summary."""
    if result.status != "ok" or not result.trials:
        result.summary = None
        return
    s = summarize(result.trials, result.settings.num_workers, usable_cpus)
    s.samples_per_batch = samples_per_batch(result.trials, result.settings.batch_size)
    s.mean_step_s = s.samples_per_batch * (s.world_size or 1) / s.samples_per_s if s.samples_per_s > 0 else 0.0
    s.ranked = not result.has(WarningKind.REPLICATED)
    s.worker_cores = worker_cores(s, result.settings.num_workers)
    s.worker_queue_share = worker_queue_share(s, result.settings.num_workers)
    result.summary = s


def worker_cores(summary: Summary, num_workers: int) -> float | None:
    """Cores each worker used on average over the window: (the process tree's CPU - the main
    process's) / num_workers (medians over repeats). None without workers or readings, and for a
    distributed job (its main-process reading is one rank's)."""
    s = summary
    if num_workers <= 0 or s.cpu_util_pct is None or s.main_cpu_util_pct is None or (s.world_size or 1) > 1:
        return None
    return max(0.0, s.cpu_util_pct - s.main_cpu_util_pct) / 100.0 / num_workers


def worker_queue_share(summary: Summary, num_workers: int) -> float | None:
    """Share of each worker's window it spent runnable but waiting for a CPU, on average: the
    workers' run-queue delay (`workers_runq_pct`, cores x 100, median over repeats) / 100 /
    num_workers. None without workers or the reading, and for a distributed job."""
    s = summary
    if num_workers <= 0 or s.workers_runq_pct is None or (s.world_size or 1) > 1:
        return None
    return s.workers_runq_pct / 100.0 / num_workers


def samples_per_batch(trials: Sequence[Trial], batch_size: int) -> float:
    """Mean samples per measured batch (the counted samples over the batches; `batch_size` when
    no trial says); for a trial weighed as whole epochs (`epoch_weighed`) the epoch's samples
    over its batches, as its throughput counts them. In a distributed sweep a trial holds one
    rank's batches.

    NOTE [samples per batch]
        A batch size is not always what batches hold: a batch sampler that buckets, a dataset
        whose items are several samples, a sampler with fewer indices than a batch. Throughput,
        the mean step and the compute ceiling all use the samples counted per batch: a window
        over 1.4 epochs of 7 batches holds its short batches in another proportion (30.2
        samples a batch) than an epoch does (30.0), which its throughput weighs.

    >>> from loaderbench.model import Trial
    >>> t = Trial(0.1, 3, [0.0] * 10, [0.05] * 10, [0.05] * 10, 302, 0.5, "host",
    ...           epoch_start_batches=[2], epoch_batches=7, epoch_samples=210)
    >>> samples_per_batch([t], 32)
    30.0
    """
    counted = [(t.epoch_samples, t.epoch_batches) if epoch_weighed(t) is not None and t.epoch_samples
               and t.epoch_batches else (t.samples, len(t.step_s)) for t in trials if t.step_s]
    if counted and sum(n for _, n in counted):
        return sum(x for x, _ in counted) / sum(n for _, n in counted)
    return float(batch_size)


def other_cores(other_cpu_util_pct: float | None, steal_cpu_util_pct: float | None) -> float | None:
    """Cores that other processes and the hypervisor's steal took from the usable CPUs during
    a window (NOTE [what else ran on the usable CPUs] in measure/meter.py); None unmeasured."""
    if other_cpu_util_pct is None and steal_cpu_util_pct is None:
        return None
    return ((other_cpu_util_pct or 0.0) + (steal_cpu_util_pct or 0.0)) / 100.0


def _rank_statistics(summary: Summary, trials: Sequence[Trial]) -> None:
    """Per-rank medians over repeats (distributed trials only): each rank's own samples/s and
    stall fraction, and the rank that was slowest (highest stall) in most repeats (ties: the
    lower rank)."""
    per_rank = [[Trial.from_dict(d) for d in t.rank_trials] for t in trials if t.rank_trials]
    if not per_rank:
        return
    world = min(len(ranks) for ranks in per_rank)
    summary.world_size = world
    summary.rank_samples_per_s = [
        float(statistics.median(trial_samples_per_s(ranks[r]) for ranks in per_rank)) for r in range(world)
    ]
    summary.rank_stall_fraction = [
        float(statistics.median(trial_stall_fraction(ranks[r]) for ranks in per_rank)) for r in range(world)
    ]
    votes = [t.rank for t in trials if t.rank is not None]
    summary.slowest_rank = max(sorted(set(votes)), key=votes.count) if votes else None
    add_job_statistics(summary, trials)  # the per-step maximum wait; several nodes: each node's figures


# ---------------------------------------------------------------------------------------------
# Several ranks and nodes: what the job waited for, and each node's figures.


def per_step_max(waits_by_rank: Sequence[Sequence[float]],
                 steps_by_rank: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    """Per measured step of one repeat of a job whose ranks move in lockstep (one list of
    seconds per rank, index = rank): the data-wait the step saw, the maximum over the ranks
    (NOTE [what-if ranks] in analysis/ranks.py: M_i), and the step time, the mean over the
    ranks (T_i); as many steps as the shortest rank measured. Raises ValueError for no ranks.

    >>> per_step_max([[0.01, 0.03], [0.02, 0.0]], [[0.04, 0.05], [0.04, 0.05]])
    ([0.02, 0.03], [0.04, 0.05])
    """
    if not waits_by_rank:
        raise ValueError("per_step_max needs at least one rank")
    n = min(min(len(w) for w in waits_by_rank), min(len(s) for s in steps_by_rank))
    return ([max(w[i] for w in waits_by_rank) for i in range(n)],
            [statistics.fmean(s[i] for s in steps_by_rank) for i in range(n)])


def step_max_stall(trials: Sequence[Trial]) -> float | None:
    """The share of the step time a job waited for its last rank's data: the sum over steps of
    the per-step maximum wait (`per_step_max`) over the sum of step times, over the repeats
    `trials` (each with its ranks' own trials, or a single process's); None without steps."""
    waits = steps = 0.0
    for trial in trials:
        ranks = trial.per_rank()
        w, t = per_step_max([r.data_wait_s for r in ranks], [r.step_s for r in ranks])
        waits, steps = waits + sum(w), steps + sum(t)
    return min(1.0, waits / steps) if steps > 0 else None


def _sum_or_none(values: Sequence[float | int | None]) -> float | None:
    return None if not values or any(v is None for v in values) else float(sum(v for v in values if v is not None))


def node_figures(trials: Sequence[Trial]) -> list[NodeFigures]:
    """Each node's figures for one config from its repeats' trials (each with `rank_trials`
    carrying `node_rank` and `host`): per repeat, samples/s summed over the node's ranks, the
    stall fraction of its slowest rank, the CPU use (cores x 100), bytes read from storage and
    MB/s summed over its ranks; then the median over repeats. [] when the trials come from one
    node (or say nothing of their node).

    >>> a = Trial(0, 0, [0.01] * 4, [0.01] * 4, [0.02] * 4, 64, 0.08, "host", node_rank=0, host="a")
    >>> b = Trial(0, 0, [0.03] * 4, [0.01] * 4, [0.04] * 4, 64, 0.16, "host", node_rank=1, host="b")
    >>> job = Trial(0, 0, [], [], [], 0, 0.0, "host", rank_trials=[a.to_dict(), b.to_dict()])
    >>> [(n.node_rank, n.samples_per_s, n.stall_fraction) for n in node_figures([job])]
    [(0, 800.0, 0.5), (1, 400.0, 0.75)]
    """
    per_repeat: list[dict[int, list[tuple[int, Trial]]]] = []
    for trial in trials:
        ranks = trial.per_rank()
        if any(t.node_rank is None for t in ranks):
            return []
        nodes: dict[int, list[tuple[int, Trial]]] = {}
        for r, t in enumerate(ranks):
            nodes.setdefault(int(t.node_rank), []).append((r, t))  # type: ignore[arg-type]
        per_repeat.append(nodes)
    if not per_repeat or max(len(n) for n in per_repeat) < 2:
        return []
    out = []
    for node in sorted(set().union(*per_repeat)):
        rows = [nodes[node] for nodes in per_repeat if node in nodes]
        read = _median_or_none([_sum_or_none([t.storage_read_bytes for _, t in row]) for row in rows])
        out.append(NodeFigures(
            node_rank=node,
            host=rows[0][0][1].host,
            ranks=[r for r, _ in rows[0]],
            samples_per_s=float(statistics.median(sum(trial_samples_per_s(t) for _, t in row) for row in rows)),
            stall_fraction=float(statistics.median(max(trial_stall_fraction(t) for _, t in row) for row in rows)),
            cpu_util_pct=_median_or_none([_sum_or_none([t.cpu_util_pct for _, t in row]) for row in rows]),
            storage_read_bytes=None if read is None else int(read),
            storage_mb_per_s=_median_or_none([_sum_or_none([t.storage_mb_per_s for _, t in row]) for row in rows]),
        ))
    return out


def add_job_statistics(summary: Summary, trials: Sequence[Trial]) -> None:
    """For a config measured on several ranks: `summary.step_stall_fraction` (the per-step
    maximum wait's share of the step, `step_max_stall`, median over repeats); on several nodes
    also `nodes`, `slowest_node` (the node of `summary.slowest_rank`) and
    `job_storage_mb_per_s` (summed over nodes: what a storage shared by every node served).
    Leaves them empty otherwise."""
    stalls = [step_max_stall([t]) for t in trials if t.rank_trials]
    present = [x for x in stalls if x is not None]
    if present:
        summary.step_stall_fraction = float(statistics.median(present))
    nodes = node_figures(trials)
    if not nodes:
        return
    summary.nodes = nodes
    if summary.slowest_rank is not None:
        summary.slowest_node = next((n.node_rank for n in nodes if summary.slowest_rank in n.ranks), None)
    rates = [n.storage_mb_per_s for n in nodes]
    summary.job_storage_mb_per_s = _sum_or_none(rates)


def relative_spread(summary: Summary) -> float:
    """(max - min) / median of throughput across repeats; 0 with one repeat."""
    if summary.repeats < 2 or not summary.samples_per_s or summary.samples_per_s_min is None:
        return 0.0
    return ((summary.samples_per_s_max or 0.0) - summary.samples_per_s_min) / summary.samples_per_s


def _served_from(values: Sequence[str | None]) -> ServedFrom | None:
    """Where a config's samples came from over its trials (their model.ServedFrom values): the
    one they agree on, MIXED when they differ (repeats that warmed a cache), None when no trial
    knows."""
    seen = {v for v in values if v is not None}
    if not seen:
        return None
    return ServedFrom(seen.pop()) if len(seen) == 1 else ServedFrom.MIXED


def fetch_prep(results: Sequence[ConfigResult]) -> list[FetchPrep]:
    """The differential split of data-wait (Mohan et al., VLDB 2021, "data stalls"): for every
    settings key measured both cold and warm, the warm mean data-wait per batch is the prep stall
    (decode, augment), cold minus warm the fetch stall (storage); the larger names the bound.
    In the order of the keys."""
    by_key: dict[str, dict[str, ConfigResult]] = {}
    for r in results:
        if r.status == "ok" and r.summary is not None and r.cache in ("cold", "warm"):
            by_key.setdefault(r.settings.key(), {})[r.cache] = r
    out: list[FetchPrep] = []
    for key, pair in sorted(by_key.items()):
        if "cold" in pair and "warm" in pair:
            cold, warm = pair["cold"].summary, pair["warm"].summary
            assert cold is not None and warm is not None
            out.append(dataclasses.replace(fetch_prep_split(cold.data_wait_mean_s, warm.data_wait_mean_s), key=key))
    return out


FetchPrepSplit = FetchPrep


def fetch_prep_split(cold_wait_s: float, warm_wait_s: float) -> FetchPrep:
    """Split a cold run's data-wait into fetch (storage) and prep (CPU) using a warm run of the
    same config (NOTE [ The differential fetch/prep split ]): fetch = cold - warm, prep = warm;
    bound STORAGE when fetch > prep, else CPU, NONE when neither waited. A warm run slower than
    the cold one (noise) gives fetch 0 and `warm_slower_s`."""
    fetch = cold_wait_s - warm_wait_s
    prep = max(0.0, warm_wait_s)
    slower = None
    if fetch < 0:
        slower = -fetch
        fetch = 0.0
    if fetch <= 0 and prep <= 0:
        bound = FetchPrepBound.NONE
    else:
        bound = FetchPrepBound.STORAGE if fetch > prep else FetchPrepBound.CPU
    frac = fetch / cold_wait_s if cold_wait_s > 0 else None
    return FetchPrep(cold_wait_s, warm_wait_s, fetch, prep, bound, frac, slower)


def window_batches_per_worker(row: ConfigResult) -> float | None:
    """The median batches per worker of the windows `row` was measured with (None without
    workers or trials): about one means each window held one round of the workers' batches
    (NOTE [the pick's sustained figure] in orchestration/sustained.py)."""
    w = row.settings.num_workers
    if w <= 0 or not row.trials:
        return None
    return statistics.median(len(t.step_s) / w for t in row.trials)


def settle_windows(search_samples_per_s: float, search_stall_fraction: float,
                   windows: list[tuple[float, float, float]], tolerance: float) -> tuple[float, float, SustainedSettled]:
    """The pick's sustained samples/s and stall fraction (0..1) from its windows, and how they
    were settled (NOTE [the pick's sustained figure] in orchestration/sustained.py). `windows`:
    each sustained window's (samples/s, stall fraction, samples), in the order measured, one or
    two; the search's figure and stall beside them; `tolerance`: the knee's (a fraction). Raises
    ValueError for no window.

    One window: its own figures. Two within `tolerance` of each other (relative to the lower):
    pooled, their samples over their seconds (seconds = samples / samples/s), the stall weighted
    by those seconds. Two apart: the middle of the three readings (the search's and the two
    windows'), with that reading's stall.

    >>> settle_windows(3842.0, 0.18, [(3089.0, 0.34, 11264)], 0.05)
    (3089.0, 0.34, <SustainedSettled.ONE: 'one window'>)
    >>> settle_windows(3842.0, 0.18, [(3089.0, 0.34, 11264), (3860.0, 0.17, 11264)], 0.05)
    (3842.0, 0.18, <SustainedSettled.MIDDLE: 'middle of three'>)
    >>> rate, stall, how = settle_windows(4000.0, 0.1, [(3000.0, 0.3, 6000), (3100.0, 0.2, 6200)], 0.05)
    >>> round(rate, 6), round(stall, 6), how  # 12,200 samples over 2 + 2 s
    (3050.0, 0.25, <SustainedSettled.POOLED: 'two windows pooled'>)
    """
    if not windows:
        raise ValueError("settle_windows: no window")
    if len(windows) == 1:
        rate, stall, _ = windows[0]
        return rate, stall, SustainedSettled.ONE
    (r1, st1, n1), (r2, st2, n2) = windows[:2]
    if r1 > 0 and r2 > 0 and abs(r1 - r2) <= tolerance * min(r1, r2):
        s1, s2 = n1 / r1, n2 / r2
        return (n1 + n2) / (s1 + s2), (st1 * s1 + st2 * s2) / (s1 + s2), SustainedSettled.POOLED
    readings = sorted([(search_samples_per_s, search_stall_fraction), (r1, st1), (r2, st2)])
    rate, stall = readings[1]
    return rate, stall, SustainedSettled.MIDDLE


def sustained_uncertainty(figure_samples_per_s: float, search_samples_per_s: float, windows: Sequence[float],
                          settled: SustainedSettled | None, tolerance: float) -> float | None:
    """How uncertain the pick's sustained figure is, as a fraction of it (±), where its readings
    disagree (NOTE [the pick's sustained figure] in orchestration/sustained.py); None where they
    agree. `figure_samples_per_s`: the settled figure (`settle_windows`); `windows`: each longer
    window's samples/s; `tolerance`: the sweep's (a fraction).

    Two windows apart (MIDDLE): half the spread of the three readings (the search's and the two
    windows'). One window further than `tolerance` from the search's figure (ONE; no second
    window settled them): half the gap between the two. A figure whose readings disagree by more
    than the tolerance cannot rank configs or gate a run to within it.

    >>> round(sustained_uncertainty(320.0, 320.0, [256.0, 326.5], SustainedSettled.MIDDLE, 0.05), 4)
    0.1102
    >>> round(sustained_uncertainty(2998.0, 3695.0, [2998.0], SustainedSettled.ONE, 0.05), 4)
    0.1162
    >>> sustained_uncertainty(4096.0, 4221.0, [4096.0], SustainedSettled.ONE, 0.05) is None  # 3% apart
    True
    """
    if figure_samples_per_s <= 0 or not windows:
        return None
    if settled is SustainedSettled.MIDDLE and len(windows) >= 2:
        three = [search_samples_per_s, *windows[:2]]
        return (max(three) - min(three)) / figure_samples_per_s / 2
    if (settled is SustainedSettled.ONE and tolerance > 0 and search_samples_per_s > 0
            and abs(windows[0] / search_samples_per_s - 1.0) > tolerance):
        return abs(search_samples_per_s - windows[0]) / figure_samples_per_s / 2
    return None
