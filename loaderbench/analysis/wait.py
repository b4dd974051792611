"""The wait-parts and verdicts passes: what one config's data-wait is made of, and the verdict,
input-bound band, CPU saturation, stall period and workers-needed estimate that follow from it.

Pure: no torch, no I/O. Everything is derived from the raw per-batch samples of `Trial` and the
summary the summaries pass wrote.

NOTE [what the wait is made of]
    A verdict must rest on the whole wait, not on its median: a loop that waits 3 s at every
    epoch start and never in between has a median wait near zero and a large stall. So every
    measured batch's data-wait is split into parts whose cost was measured for that batch or for
    every batch, taken in this order, each at most what is left of the wait:
      1. H2D: the batch's host-to-device copy when it is on the step's path (no prefetcher, or
         the prefetcher copying from pageable memory, which blocks the host): CUDA events, per
         batch;
      2. sampler: seconds the main process spent drawing indices inside that `next()`
         (sampling.TimedBatchSampler), per batch;
      3. epoch start: what is left of the wait of a batch that started an epoch, with workers:
         workers starting again (not persistent), or, with persistent workers, the epoch's
         first batch built with nothing in flight (the pipeline refilling); with 0 workers every
         batch is built so, and the rest is the loader part;
      4. GPU decode: with `--decoder nvjpeg`, the seconds the main thread spent decoding on the
         GPU inside that `next()` (the prefetcher decodes the next batch there) and the batch's
         preparation, per batch: torchvision's batched decode holds the calling thread for about
         its GPU time, so it is paid there whatever the workers (`GPU-decode-bound`);
      5. receive: the receive floor, `next()` on batches already built (probed after the
         window, or timed in it; a GPU decode inside it left out), per batch; for a batch that
         a worker had completed before the loop asked for it (`Trial.ready_batches`), all that
         is left: nothing was being built, the main process was taking it (slow takes, such as
         pickled arrays whose unpickling stalls now and then, are not the loader's). Not where
         the workers were computing (`Trial.workers_computing`): such a worker sends a finished
         batch late, from threads that wait for its GIL, and that wait is the loader's; nor
         where the trial's CPUs were saturated (`cpu_saturated`): a main process that waits
         for a core to take a batch is held by the CPUs the workers fill (on 2 CPUs, 8 workers
         of 2 ms of CPU and 3 ms of sleep a sample read "mostly the main process taking each
         finished batch ... more workers cannot remove it" beside rows that rose with workers);
      6. loader: the rest: the batch was not built in time (fetch and prep in the workers, or
         in the main process with 0 workers).
    The parts are summed over the window; the largest one names the verdict when the stall is
    at least 5% (or the tail alone reaches half a step), the receive only where it is at least
    half the wait (a floor no num_workers removes must be most of it: `verdict_part`). Periodic
    stalls (a sawtooth, every N batches) are a property of the loader part.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from loaderbench.analysis.statistics import other_cores, percentile
from loaderbench.analysis.thresholds import (
    CPU_SATURATED,
    LOADER_BOUND_STALL,
    MODERATELY_INPUT_BOUND_MAX,
    NOT_INPUT_BOUND_MAX,
    PERIOD_BETTER_BY,
    PERIOD_MIN_AUTOCORRELATION,
    PERIOD_MIN_BATCHES,
    PERIOD_MIN_STALL_SHARE,
    PERIOD_MIN_WAIT_OF_STEP,
    PERIOD_MIN_WAIT_S,
    PERIOD_STALL_OVER_REST,
    RECEIVE_CONTENDED,
    RECEIVE_CONTRADICTED,
    RECEIVE_FLOOR_SHARE,
    STEP_SLOWED,
    STEP_SLOWED_MIN_S,
    TAIL_MIN_STALL,
    TAIL_WAIT_OF_STEP,
    WORKERS_QUEUED,
)
from loaderbench.model import (
    ConfigResult,
    InputBound,
    LoaderSettings,
    Summary,
    Trial,
    Verdict,
    WaitPart,
    split_threshold,
)


def trial_wait_parts(trial: Trial, settings: LoaderSettings, usable_cpus: int | None = None) -> dict[WaitPart, float]:
    """Seconds of the trial's measured data-wait in each part, summed over its batches (NOTE
    [what the wait is made of]). The parts add up to the total data-wait (negative waits, which
    event timing can give by a few microseconds, count as 0). `usable_cpus`: where the trial's
    CPUs were saturated on them, a ready batch's wait is not the receive's (NOTE, 5)."""
    parts = dict.fromkeys(WaitPart, 0.0)
    h2d_on_path = bool(trial.h2d_s) and not (settings.prefetch and settings.pin_memory)
    received = trial.receives_read_s(settings.num_workers, usable_cpus)
    receive = percentile(received, 50) if received and settings.num_workers > 0 else 0.0
    saturated = cpu_saturated(trial.cpu_util_pct, other_cores(trial.other_cpu_util_pct, trial.steal_cpu_util_pct),
                              usable_cpus)
    ready = (set(trial.ready_batches) if settings.num_workers > 0 and not saturated
             and not trial.workers_computing(settings.num_workers, usable_cpus) else set())
    decode = trial.gpu_decode_s
    starts = set(trial.epoch_start_batches)
    for i, wait in enumerate(trial.data_wait_s):
        rest = max(0.0, wait)

        def take(part: WaitPart, amount: float) -> None:
            nonlocal rest
            x = min(rest, max(0.0, amount))
            parts[part] += x
            rest -= x

        if h2d_on_path and i < len(trial.h2d_s):
            take(WaitPart.H2D, trial.h2d_s[i])
        if i < len(trial.sampler_s):
            take(WaitPart.SAMPLER, trial.sampler_s[i])
        if i in starts and settings.num_workers > 0:
            # With 0 workers every batch is built with nothing in flight: an epoch start costs
            # only the sampler's draw (taken above); the rest is building the batch.
            take(WaitPart.EPOCH_START, rest)
        if i < len(decode):
            # The main thread decoding on the GPU (--decoder nvjpeg), inside this batch's wait.
            take(WaitPart.GPU_DECODE, decode[i])
        take(WaitPart.RECEIVE, rest if i in ready else receive)
        parts[WaitPart.LOADER] += rest
    return parts


def production_wait_s(trial: Trial) -> float:
    """Seconds per batch the workers' production adds to the window's own step (0.0 where the
    row is not held to it, NOTE [production in the window] in measure/timing.py): at the
    sustained rate a step lasts samples per batch / that rate, the window's measured steps
    their mean; the difference is time spent waiting for batches not built in time, which the
    window did not see because it drew on batches built before it."""
    n = len(trial.step_s)
    total_s = sum(trial.step_s)
    rate = trial.production_samples_per_s
    if not n or total_s <= 0 or rate is None or rate <= 0 or trial.samples <= 0 or rate >= trial.samples / total_s:
        return 0.0
    return trial.samples / n / rate - total_s / n


def wait_parts_per_batch(result: ConfigResult, usable_cpus: int | None = None) -> dict[WaitPart, float]:
    """Mean seconds per measured batch of each wait part, median over the config's repeats; a
    trial held to its workers' production adds the wait that holding implies to the loader part
    (`production_wait_s`). `usable_cpus` as in `trial_wait_parts`."""
    per_trial = []
    for t in result.trials:
        if t.data_wait_s:
            parts = trial_wait_parts(t, result.settings, usable_cpus)
            per = {p: v / len(t.data_wait_s) for p, v in parts.items()}
            # Held to the workers' production: the wait the window did not see is batches not
            # built in time (production_wait_s).
            per[WaitPart.LOADER] = per.get(WaitPart.LOADER, 0.0) + production_wait_s(t)
            per_trial.append(per)
    if not per_trial:
        return {}
    return {p: float(statistics.median(d[p] for d in per_trial)) for p in WaitPart}


def dominant_part(parts_s: dict[WaitPart, float]) -> WaitPart | None:
    """The part with the most wait (ties: the order of WaitPart), None when nothing waited."""
    best = max(WaitPart, key=lambda p: parts_s.get(p, 0.0))
    return best if parts_s.get(best, 0.0) > 0 else None


def verdict_part(parts_s: dict[WaitPart, float], idle_workers: int | None = None) -> WaitPart | None:
    """The wait part that names a row's verdict and its remaining wait (`dominant_part`), but
    the receive only where it is at least RECEIVE_FLOOR_SHARE of the summed parts and no worker
    sat idle (`Summary.idle_workers`): a receive floor says no num_workers removes the wait,
    which holds only where the receive is most of it; otherwise the largest other part names it
    (with idle workers the step waits on the workers that work: the loader part). None when
    nothing waited.

    >>> R, L, E = WaitPart.RECEIVE, WaitPart.LOADER, WaitPart.EPOCH_START
    >>> verdict_part({R: 2.89, L: 2.70, E: 2.20}).value, verdict_part({R: 2.0, L: 1.0, E: 0.9}).value
    ('loader', 'receive')
    >>> verdict_part({R: 2.0, E: 0.5}, idle_workers=3).value
    'loader'
    """
    part = dominant_part(parts_s)
    if part is not WaitPart.RECEIVE:
        return part
    if idle_workers:
        return WaitPart.LOADER
    if parts_s[part] >= RECEIVE_FLOOR_SHARE * sum(max(0.0, v) for v in parts_s.values()):
        return part
    rest: dict[WaitPart, float] = {p: v for p, v in parts_s.items() if p is not WaitPart.RECEIVE}
    return dominant_part(rest) if rest else part


def input_bound_band(stall_fraction: float) -> InputBound:
    """NOT under 5% stall, MODERATELY from 5% to 20%, HIGHLY over (analysis/thresholds.py)."""
    if stall_fraction < NOT_INPUT_BOUND_MAX:
        return InputBound.NOT
    if stall_fraction <= MODERATELY_INPUT_BOUND_MAX:
        return InputBound.MODERATELY
    return InputBound.HIGHLY


def cpu_saturated(cpu_util_pct: float | None, other_cores: float | None, usable_cpus: int | None) -> bool | None:
    """Whether the CPUs were saturated: the process tree's CPU (percent of one core) plus what
    other processes and the hypervisor's steal took (`other_cores`) reached CPU_SATURATED of
    `usable_cpus`. None when either the reading or the CPU count is unknown. The one definition
    of CPU saturation (the findings, the verdicts and the search all ask it)."""
    if not usable_cpus or cpu_util_pct is None:
        return None
    return cpu_util_pct / 100.0 + (other_cores or 0.0) >= CPU_SATURATED * usable_cpus


def workers_short_of_cpu(cpu_util_pct: float | None, other_cores: float | None, worker_queue_share: float | None,
                         usable_cpus: int | None) -> bool:
    """Whether a row's workers may be short of CPU: the CPUs were saturated (`cpu_saturated`:
    the process tree and other load), unless the workers' run-queue delay
    (`Summary.worker_queue_share`, from /proc/PID/schedstat) was under WORKERS_QUEUED of their
    window. A worker that waits on storage or a network sleeps and is not runnable, however busy
    the CPUs are; one short of CPU is runnable without one (thresholds.WORKERS_QUEUED says what
    was measured). Unknown delay (no schedstat) counts as short where the CPUs were saturated,
    as before it was read. Plain numbers, as `cpu_saturated`: the one definition the search,
    the findings and the wait pass's `Summary.workers_short_of_cpu` ask."""
    if not cpu_saturated(cpu_util_pct, other_cores, usable_cpus):
        return False
    return worker_queue_share is None or worker_queue_share >= WORKERS_QUEUED


def split_waits(results: Sequence[ConfigResult], usable_cpus: int | None = None) -> None:
    """The wait-parts pass: every summarised config's `wait_parts_s` (`usable_cpus`: the CPUs
    its saturation is read on)."""
    for r in results:
        if r.summary is not None:
            r.summary.wait_parts_s = wait_parts_per_batch(r, usable_cpus)


def judge(results: Sequence[ConfigResult], *, loader_only: bool = False, usable_cpus: int | None = None) -> None:
    """The verdicts pass: every summarised config's verdict (and whether it rests on the tail),
    input-bound band, CPU saturation (on `usable_cpus`) and whether its workers were short of CPU
    there (`workers_short_of_cpu`), whether its step slowed beside the
    loader and, loader-bound, its stall period and workers-needed estimate. A receive floor that
    a config with more workers measured past (`faster_with_more_workers`), or whose receive was
    the main process waiting for a core (`receive_waits_for_a_core`), is loader-bound."""
    for r in results:
        s = r.summary
        if s is None:
            continue
        s.verdict, s.tail_only = verdict_for(r, loader_only=loader_only)
        s.band = InputBound.LOADER_ALONE if loader_only else input_bound_band(s.stall_fraction)
        s.cpu_saturated = cpu_saturated(s.cpu_util_pct, s.other_cores, usable_cpus)
        s.workers_short_of_cpu = workers_short_of_cpu(s.cpu_util_pct, s.other_cores, s.worker_queue_share, usable_cpus)
        s.step_slowed = step_slowed(s)
    # Once every row has its own verdict (all judged before any changes): a receive floor that
    # more workers ran past.
    floors = [r for r in results if r.summary is not None and r.summary.verdict is Verdict.RECEIVE_FLOOR]
    for r in [r for r in floors if faster_with_more_workers(r, results) or receive_waits_for_a_core(r, results)]:
        r.summary.verdict = Verdict.LOADER_BOUND  # type: ignore[union-attr]
    for r in results:
        s = r.summary
        if s is not None and s.verdict is Verdict.LOADER_BOUND:
            s.stall_period_batches = row_stall_period(r.trials)
            s.workers_needed = workers_needed(r)


def faster_with_more_workers(result: ConfigResult, results: Sequence[ConfigResult]) -> bool:
    """Whether a measured config like `result` but with more workers ran RECEIVE_CONTRADICTED
    faster without being a receive floor itself, or being one whose receive part per batch is no
    shorter than `result`'s (within RECEIVE_CONTRADICTED: the receive stayed, and more workers
    removed the rest of the wait, batches not built in time: on 2 CPUs, batches of 65 tensors
    waited 13.6 ms receiving and 10.7 ms on the loader at 1 worker, 721 samples/s, and 16.2 ms
    receiving alone at 2, 880): then `result`'s wait was no floor of receiving (which more
    workers cannot lower) but batches not built in time. (Where the faster config is a receive
    floor with a shorter receive, the floor is real and `result`'s own trial was disturbed: a
    batch of 113 tensors read 324 samples/s at 2 workers in one trial and 441 at 4, both
    floors.) A worker whose Python work holds its GIL sends a finished batch
    late (the queue's feeder thread waits for the GIL), which the receive probe reads as a slow
    receive: one worker spinning 1 ms a sample read a 7.4-ms receive of a 1-KB batch, 1.5 ms
    when timed idle, while 2 and 4 workers ran 19% and 37% faster."""
    s = result.summary
    if s is None or s.samples_per_s <= 0:
        return False

    def series(x: LoaderSettings) -> LoaderSettings:
        return replace(x, num_workers=0)

    receive = s.wait_parts_s.get(WaitPart.RECEIVE, 0.0)

    def kept_receive(o: Summary) -> bool:
        # The faster row's own receive part is no shorter (within RECEIVE_CONTRADICTED): the
        # receive stayed, and what more workers removed was the rest of this row's wait.
        return o.wait_parts_s.get(WaitPart.RECEIVE, 0.0) >= (1.0 - RECEIVE_CONTRADICTED) * receive

    return any(o.summary is not None and o.status == "ok" and o.cache == result.cache
               and o.settings.num_workers > result.settings.num_workers
               and series(o.settings) == series(result.settings)
               and o.summary.samples_per_s >= (1.0 + RECEIVE_CONTRADICTED) * s.samples_per_s
               and (o.summary.verdict is not Verdict.RECEIVE_FLOOR or kept_receive(o.summary))
               for o in results if o is not result)


def receive_waits_for_a_core(result: ConfigResult, results: Sequence[ConfigResult]) -> bool:
    """Whether `result`'s receive was the main process waiting for a CPU the workers held: its
    process tree used the usable CPUs (`Summary.cpu_saturated`) and a config with fewer workers
    (at least one) received the same batches in RECEIVE_CONTENDED of its time or less. Taking a
    built batch costs what its bytes and tensors cost, whatever the workers; where it grows as
    workers fill the CPUs, the CPUs bind, not the receive (on 2 CPUs a loader of 4 ms of CPU per
    sample read a 9.5-ms receive of a 0.2-MB batch at 2 workers, 1.9 cores used, where 1 worker
    received it in about 1 ms; the same dataset on 1 CPU was named CPU-saturated)."""
    s = result.summary
    if s is None or not s.cpu_saturated or not s.receive_p50_s:
        return False
    return any(o.summary is not None and o.status == "ok" and o.cache == result.cache
               and 0 < o.settings.num_workers < result.settings.num_workers
               and o.settings.batch_size == result.settings.batch_size
               and o.summary.receive_p50_s
               and o.summary.receive_p50_s <= RECEIVE_CONTENDED * s.receive_p50_s
               for o in results if o is not result)


def step_slowed(summary: Summary) -> bool:
    """Whether the step ran over STEP_SLOWED slower beside the loader than alone (and by at least
    STEP_SLOWED_MIN_S: `Summary.step_slowdown`, the ceilings pass's): the training process was
    short of CPU (the workers took its cores) or the host was disturbed, so the row does not
    show what the step alone binds."""
    return slowed_past(summary.compute_p50_s, summary.step_slowdown)


def slowed_past(compute_p50_s: float, slowdown: float | None) -> bool:
    """Whether a median step of `compute_p50_s` seconds, `slowdown` (a fraction) slower than the
    step alone, counts as slowed: over STEP_SLOWED and by at least STEP_SLOWED_MIN_S.

    >>> slowed_past(0.0684, 0.244), slowed_past(0.0584, 0.062), slowed_past(0.0055, 0.15)
    (True, False, False)
    """
    if slowdown is None or slowdown <= STEP_SLOWED:
        return False
    return compute_p50_s - compute_p50_s / (1.0 + slowdown) >= STEP_SLOWED_MIN_S


def has_tail_stalls(summary: Summary) -> bool:
    """True when the p95 data-wait is at least half a median step: periodic starvation even if
    the median wait is near zero."""
    return summary.step_p50_s > 0 and summary.data_wait_p95_s >= TAIL_WAIT_OF_STEP * summary.step_p50_s


_PART_VERDICT = {
    WaitPart.LOADER: Verdict.LOADER_BOUND,
    WaitPart.RECEIVE: Verdict.RECEIVE_FLOOR,
    WaitPart.SAMPLER: Verdict.SAMPLER_BOUND,
    WaitPart.EPOCH_START: Verdict.EPOCH_START_BOUND,
    WaitPart.GPU_DECODE: Verdict.GPU_DECODE_BOUND,
}


def verdict_for(result: ConfigResult, *, loader_only: bool = False) -> tuple[Verdict, bool]:
    """(verdict, tail_only) of a measured config from its summary and wait parts.

    Compute-bound under 5% stall unless the tail alone (p95 wait at least half a step, with at
    least 2% stall) says the step starves now and then, or the step itself ran over 10% slower
    than alone (`step_slowed`: STEP_SLOWED, the step did not bind as it does alone). Otherwise
    the wait part of `verdict_part` names it (the largest; a row with idle workers,
    `Summary.idle_workers`, whose largest part is the receive is loader-bound, the step waiting
    on the workers that work; a receive under RECEIVE_FLOOR_SHARE of the wait names no floor);
    an H2D part is `H2D_PAGEABLE` without pin_memory, else `H2D_NOT_HIDDEN`. `loader_only`
    (`--compute none`) gives LOADER_ALONE. Raises ValueError without a summary.
    """
    s = result.summary
    if s is None:
        raise ValueError("verdict_for needs a summarised config")
    if loader_only:
        return Verdict.LOADER_ALONE, False
    tail_only = False
    if s.stall_fraction < LOADER_BOUND_STALL:
        if not (has_tail_stalls(s) and s.stall_fraction >= TAIL_MIN_STALL):
            return (Verdict.STEP_SLOWED if step_slowed(s) else Verdict.COMPUTE_BOUND), False
        tail_only = True
    # Idle workers leave the step waiting on the few that work: the loader binds through them,
    # whatever the hand-off of a built batch costs; a receive under half the wait is no floor.
    part = verdict_part(s.wait_parts_s, s.idle_workers) or WaitPart.LOADER
    if part is WaitPart.H2D:
        return (Verdict.H2D_NOT_HIDDEN if result.settings.pin_memory else Verdict.H2D_PAGEABLE), tail_only
    return _PART_VERDICT[part], tail_only


def autocorrelation(values: Sequence[float], lag: int) -> float:
    """The lag-`lag` autocorrelation of a series (Pearson's r of x[i] and x[i + lag]); 0 when
    either part is constant or the series is too short."""
    a, b = values[:-lag], values[lag:]
    if len(a) < 2:
        return 0.0
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    if va <= 0 or vb <= 0:
        return 0.0
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / math.sqrt(va * vb)


def stall_period(data_wait_s: Sequence[float], step_s: Sequence[float]) -> int | None:
    """The period, in batches, of recurring stalls (a sawtooth: W workers' batches arrive
    together, then the loop waits for the next round), or None.

    The period is the lag L >= 2 (up to a third of the window) at which the autocorrelation of
    the waits first reaches 0.5, unless a later lag that is not a multiple of it (a multiple of
    the period correlates as well) beats it by 0.1 (the waits themselves, not a
    thresholded stall indicator: a stall that splits over two batches, or a phase that slips by
    one batch now and then, still correlates). It must be a stall that stands out and lasts: the
    longest wait is at least a quarter of the median step, the stalls average at least twice the
    other waits, the other waits average under the median step (a loader whose every batch waits
    a step or more has no sawtooth, however its waits alternate), and the stalls (the upper class of the waits split by
    `split_threshold`) number at least half of the n / L a period of L over the whole window
    makes and span at least two periods (a pattern that stops, as when one of two unevenly loaded
    workers runs dry, is not a period). Needs 12 batches or more.
    """
    n = len(data_wait_s)
    floor = max(PERIOD_MIN_WAIT_S, PERIOD_MIN_WAIT_OF_STEP * percentile(step_s, 50)) if step_s else 0.0
    if n < PERIOD_MIN_BATCHES or not step_s or max(data_wait_s) < floor:
        return None
    best: tuple[int, float] | None = None
    for lag in range(2, n // 3 + 1):
        r = autocorrelation(data_wait_s, lag)
        if r >= PERIOD_MIN_AUTOCORRELATION and (best is None or (r > best[1] + PERIOD_BETTER_BY
                                                                 and lag % best[0] != 0)):
            best = (lag, r)
    if best is None:
        return None
    lag = best[0]
    split = split_threshold(data_wait_s)
    if split is None or split[2] < PERIOD_STALL_OVER_REST * split[1]:
        return None  # no stall stands out: waits of 37-44 ms that wobble in a cycle are not stalls
    if split[1] >= percentile(step_s, 50):
        return None  # the batches between the stalls wait a whole step too (every batch waits): no sawtooth
    stalls = [i for i, w in enumerate(data_wait_s) if w >= split[0]]
    lasting = len(stalls) >= PERIOD_MIN_STALL_SHARE * n / lag and stalls[-1] - stalls[0] >= 2 * lag
    return lag if lasting else None


def row_stall_period(trials: Sequence[Trial]) -> int | None:
    """A row's stall period in batches: its first trial's (`stall_period`), when at least half
    of its trials find the same one, else None. One window's waits can correlate by chance: a
    2-worker row of sleep-only latency read "every 6 batches" in its first trial of 18 batches
    (r = 0.57 over 12 pairs), none in its second and every 2 in its third.

    >>> saw = [0.3, 0.0, 0.0, 0.0] * 6
    >>> flat = [0.01, 0.012, 0.011, 0.013, 0.01, 0.012] * 4
    >>> def t(w):
    ...     return Trial(0.0, 0, w, [0.05] * 24, [a + 0.05 for a in w], 24 * 8, 2.0, "host")
    >>> row_stall_period([t(saw), t(flat), t(saw)]), row_stall_period([t(saw), t(flat), t(flat)])
    (4, None)
    """
    periods = [stall_period(t.data_wait_s, t.step_s) for t in trials]
    first = periods[0] if periods else None
    return first if first is not None and 2 * periods.count(first) >= len(periods) else None


def workers_needed(result: ConfigResult) -> int | None:
    """Estimated workers to keep the step fed, for a loader-bound config: batch build time /
    (compute + the per-batch wait parts that more workers cannot remove).

    In a loader-bound steady state W workers deliver one batch per mean step, so one worker
    builds a batch in about W x mean step; with 0 workers the main process builds it in the
    loader part of the wait. The cycle a worker must beat is the median compute plus the
    receive, H2D and sampler parts per batch (paid on the main thread whatever W is). Returns
    None for a config that is not loader-bound, or whose idle workers show that more workers get
    no work (`Summary.idle_workers`).
    """
    s = result.summary
    if (s is None or s.verdict is not Verdict.LOADER_BOUND or s.compute_p50_s <= 0 or s.samples_per_s <= 0
            or s.idle_workers):
        return None
    parts = s.wait_parts_s
    w = result.settings.num_workers
    build = parts.get(WaitPart.LOADER, s.data_wait_mean_s) if w == 0 else w * (s.mean_step_s or 0.0)
    fixed = sum(parts.get(p, 0.0) for p in (WaitPart.RECEIVE, WaitPart.H2D, WaitPart.SAMPLER, WaitPart.GPU_DECODE))
    return max(1, math.ceil(build / (s.compute_p50_s + fixed) - 1e-9))
