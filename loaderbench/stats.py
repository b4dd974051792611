"""Pure statistics: per-trial summaries, verdicts, the knee and the recommendation.

No torch, no pynvml, no I/O: `show` and `compare` use this on CPU-only CI runners. Every number is
derived from the raw per-batch samples kept in `Trial` (the timing model is in runner.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from loaderbench.model import ConfigResult, LoaderSettings, Recommendation, ResultSet, Summary, Trial

# Input-bound bands of the stall fraction, as commonly used in data-stall analyses
# (e.g. Mohan et al., "Analyzing and Mitigating Data Stalls in DNN Training", VLDB 2021):
# under 5% not input-bound, 5-20% moderately, over 20% highly.
NOT_INPUT_BOUND_MAX = 0.05
MODERATELY_INPUT_BOUND_MAX = 0.20
DEFAULT_TOLERANCE = 0.05
# A config is called loader-bound when its stall fraction is at least this (moderately bound),
# or when its tail is: p95 data-wait at least TAIL_WAIT_OF_STEP of the median step.
LOADER_BOUND_STALL = NOT_INPUT_BOUND_MAX
TAIL_WAIT_OF_STEP = 0.5
NOISY_SPREAD = 0.10


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
    """Measured samples / measured time (sum of step times), in samples/s; 0 for no time.

    A distributed trial (with `rank_trials`, see distributed.merge_trials) is the whole job's:
    the sum over ranks of each rank's own samples/s (every rank moves its own samples).
    """
    if trial.rank_trials:
        return sum(trial_samples_per_s(Trial.from_dict(t)) for t in trial.rank_trials)
    total_s = sum(trial.step_s)
    return trial.samples / total_s if total_s > 0 else 0.0


def trial_stall_fraction(trial: Trial) -> float:
    """Total data-wait / total step time (0..1): the share of the step the consumer was starved."""
    total_s = sum(trial.step_s)
    return min(1.0, max(0.0, sum(trial.data_wait_s) / total_s)) if total_s > 0 else 0.0


def rank_ceiling_shares(
    rank_samples_per_s: Sequence[float], rank_ceiling_samples_per_s: Sequence[float] | None
) -> list[float] | None:
    """Each rank's throughput as a fraction of its own compute ceiling (index = rank), or None
    when the ceilings are unknown or do not match the ranks.

    >>> rank_ceiling_shares([90.0, 95.0], [100.0, 100.0])
    [0.9, 0.95]
    """
    if not rank_ceiling_samples_per_s or len(rank_ceiling_samples_per_s) != len(rank_samples_per_s):
        return None
    if any(c <= 0 for c in rank_ceiling_samples_per_s):
        return None
    return [x / c for x, c in zip(rank_samples_per_s, rank_ceiling_samples_per_s)]


def input_bound_band(stall_fraction: float) -> str:
    """'not input-bound' (< 5%), 'moderately input-bound' (5-20%) or 'highly input-bound'."""
    if stall_fraction < NOT_INPUT_BOUND_MAX:
        return "not input-bound"
    if stall_fraction <= MODERATELY_INPUT_BOUND_MAX:
        return "moderately input-bound"
    return "highly input-bound"


def _median_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None


def summarize(trials: Sequence[Trial]) -> Summary:
    """Median over repeats of each trial's statistics, plus the min-max spread of throughput.

    Per trial: samples_per_s = samples / sum(step_s); stall_fraction = sum(data_wait_s) /
    sum(step_s); p50/p95 over that trial's per-batch samples. Raises ValueError with no trials
    or a trial without measured batches.
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
        memory_pss_bytes=(
            None
            if all(t.memory_pss_bytes is None for t in trials)
            else int(max(t.memory_pss_bytes or 0 for t in trials))
        ),
        receive_p50_s=_median_or_none(
            [percentile(t.receive_s, 50) if t.receive_s else None for t in trials]
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
        loader_ceiling_samples_per_s=_median_or_none([t.loader_alone_samples_per_s for t in trials]),
        storage_mb_per_s=_median_or_none([t.storage_mb_per_s for t in trials]),
        storage_fraction=_median_or_none(
            [t.storage_read_bytes / t.needed_bytes if t.storage_read_bytes is not None and t.needed_bytes else None
             for t in trials]
        ),
        samples_per_s_min=float(min(rates)),
        samples_per_s_max=float(max(rates)),
        repeats=len(trials),
    )
    _rank_statistics(summary, trials)
    summary.verdict = verdict(summary)
    return summary


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


def has_tail_stalls(summary: Summary) -> bool:
    """True when the p95 data-wait is at least half a median step: periodic starvation (case C04)
    even if the median wait is near zero."""
    return summary.step_p50_s > 0 and summary.data_wait_p95_s >= TAIL_WAIT_OF_STEP * summary.step_p50_s


REPLICATED = (
    "IterableDataset duplicated across workers: every worker replays the whole stream (split it "
    "with torch.utils.data.get_worker_info()); this config's samples/s counts duplicates and it is "
    "not ranked"
)
RECEIVE_FLOOR = "receive floor"
LOADER_ALONE = "loader alone"
PAGEABLE_H2D = "H2D-bound (pageable copy)"
H2D_BOUND = "H2D-bound (copy not hidden)"


def excess_stall_fraction(summary: Summary) -> float:
    """The stall left after taking out the measured receive floor from every batch's wait:
    (median wait - receive p50) / median step, at least 0; the plain stall fraction when the
    floor was not measured (0 workers)."""
    if summary.receive_p50_s is None or summary.step_p50_s <= 0:
        return summary.stall_fraction
    return max(0.0, (summary.data_wait_p50_s - summary.receive_p50_s) / summary.step_p50_s)


def verdict(summary: Summary) -> str:
    """'loader-bound' when the stall is at least 5% (unless all but 5% of it is the measured
    receive floor: RECEIVE_FLOOR), 'loader-bound (tail)' when the p95 wait reaches half a median
    step with at least 2% stall, else 'compute-bound'."""
    if summary.stall_fraction >= LOADER_BOUND_STALL:
        if excess_stall_fraction(summary) < LOADER_BOUND_STALL and not has_tail_stalls(summary):
            return RECEIVE_FLOOR
        return "loader-bound"
    if has_tail_stalls(summary) and summary.stall_fraction >= 0.02:
        return "loader-bound (tail)"
    return "compute-bound"


def classify(result: ConfigResult, *, loader_only: bool = False) -> str:
    """The verdict of one measured config, using its settings as well as its numbers.

    With the CUDA-stream prefetcher on and pin_memory off, `next()` itself performs a pageable
    host-to-device copy (synchronous for the host), so a "receive floor" there is the copy:
    PAGEABLE_H2D when it is at least 5% of the step. Without the prefetcher, a config that is
    not compute-bound and whose median copy time is at least half its mean data-wait is H2D-bound (the copy
    runs on the step's stream, so nothing hides it). `loader_only` (`--compute none`) gives
    LOADER_ALONE.
    """
    s = result.summary
    if s is None:
        return result.status
    if loader_only:
        return LOADER_ALONE
    v = verdict(s)
    if (
        v != "compute-bound"
        and not result.settings.prefetch
        and s.h2d_p50_s is not None
        and s.h2d_p50_s >= 0.5 * s.data_wait_mean_s
    ):
        # Most of the wait is the copy itself on the step's stream (nothing hides it).
        return PAGEABLE_H2D if not result.settings.pin_memory else H2D_BOUND
    if (
        v == RECEIVE_FLOOR
        and result.settings.prefetch
        and not result.settings.pin_memory
        and s.receive_p50_s is not None
        and s.receive_p50_s >= LOADER_BOUND_STALL * s.step_p50_s
    ):
        return PAGEABLE_H2D
    return v


def relative_spread(summary: Summary) -> float:
    """(max - min) / median of throughput across repeats; 0 with one repeat."""
    if summary.repeats < 2 or not summary.samples_per_s or summary.samples_per_s_min is None:
        return 0.0
    return ((summary.samples_per_s_max or 0.0) - summary.samples_per_s_min) / summary.samples_per_s


def find_knee(
    results: Sequence[ConfigResult], *, tolerance: float = DEFAULT_TOLERANCE
) -> ConfigResult | None:
    """The cheapest measured config whose throughput is within `tolerance` (fraction) of the best,
    or within noise of it (its max reaches the best's min across repeats), whichever admits more.

    "Cheapest" is `LoaderSettings.cost_rank`: fewest workers, then pin/prefetch off before on,
    fewer prefetched batches. Returns None when no config was measured.
    """
    ok = rankable(results)
    if not ok:
        return None
    best = max(ok, key=lambda r: r.summary.samples_per_s)  # type: ignore[union-attr]
    best_s = best.summary
    assert best_s is not None
    floor = best_s.samples_per_s * (1.0 - tolerance)
    noise_floor = best_s.samples_per_s_min if best_s.repeats > 1 else None

    def qualifies(r: ConfigResult) -> bool:
        s = r.summary
        assert s is not None
        if s.samples_per_s >= floor:
            return True
        return noise_floor is not None and s.repeats > 1 and (s.samples_per_s_max or 0) >= noise_floor

    return min((r for r in ok if qualifies(r)), key=lambda r: r.settings.cost_rank())


def rankable(results: Sequence[ConfigResult]) -> list[ConfigResult]:
    """Measured configs that may be ranked: status ok, a summary, and not flagged as counting
    duplicate samples (REPLICATED)."""
    return [
        r for r in results
        if r.status == "ok" and r.summary is not None and REPLICATED not in r.warnings
    ]


def dataloader_call(settings: LoaderSettings) -> str:
    """A ready-to-paste `DataLoader(...)` call for these settings (only keywords that apply)."""
    kw = settings.dataloader_kwargs()
    parts = ["dataset"] + [f"{k}={v!r}" for k, v in kw.items()]
    return "DataLoader(" + ", ".join(parts) + ")"


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f} samples/s"


def recommend(
    results: Sequence[ConfigResult],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    usable_cpus: int | None = None,
    loader_only: bool = False,
    epoch_batches: int | None = None,
    ceilings: dict[int, float] | None = None,
) -> Recommendation:
    """The knee as a recommendation with its reason.

    With `epoch_batches` (batches per epoch), start-up is weighed against the steady state (case
    C01): each config's epoch throughput is samples per epoch / (first-batch time + epoch_batches x
    mean step), since a non-persistent loader starts its workers again every epoch. When that
    changes the choice the reason says so; when the knee's start-up is over 5% of its epoch,
    `persistent_workers=True` is recommended (it pays start-up once).

    The reason states the knee's throughput and stall, the best config for comparison, the
    input-bound band of the knee, and when even the best config is loader-bound, that no setting
    in the grid clears the bottleneck (with CPU saturation named when the process tree used at
    least 85% of the usable CPUs). With `loader_only` (`--compute none`) there is no step to
    starve: the knee is the cheapest config within tolerance of the loader's own ceiling.
    """
    knee = find_knee(results, tolerance=tolerance)
    if knee is None:
        return Recommendation(settings=None, reason="no config was measured successfully")
    ok = rankable(results)
    best = max(ok, key=lambda r: r.summary.samples_per_s)  # type: ignore[union-attr]
    ks, bs = knee.summary, best.summary
    assert ks is not None and bs is not None
    settings = knee.settings
    startup_lines = startup_advice(ok, knee, epoch_batches, tolerance) if epoch_batches else []
    if startup_lines and startup_lines[0].startswith("PERSIST"):
        startup_lines[0] = startup_lines[0].removeprefix("PERSIST")
        settings = replace(settings, persistent_workers=True)
    band = LOADER_ALONE if loader_only else input_bound_band(ks.stall_fraction)
    min_stall = min(r.summary.stall_fraction for r in ok)  # type: ignore[union-attr]
    lines = [
        f"num_workers={knee.settings.num_workers}, pin_memory={knee.settings.pin_memory}, "
        f"prefetch={'on' if knee.settings.prefetch else 'off'}: {_fmt_rate(ks.samples_per_s)}, "
        f"stall {ks.stall_fraction:.1%} ({band})."
    ]
    if best is not knee:
        lines.append(
            f"The best config ({best.settings.key()}) reaches {_fmt_rate(bs.samples_per_s)}, "
            f"within {max(tolerance, 0):.0%} or noise of it: "
            + (
                "the workers and buffers of this grid buy nothing more, but the loader still binds."
                if bs.verdict.startswith("loader-bound")
                else "more workers or buffers buy nothing."
            )
        )
    elif len(ok) < sum(1 for r in results if r.status == "ok" and r.summary is not None):
        lines.append(
            "It is also the fastest config ranked (configs that replay the IterableDataset in every "
            "worker count duplicate samples and are not ranked)."
        )
    else:
        lines.append("It is also the fastest config measured.")
    if loader_only:
        lines.append(
            f"With --compute none this is the loader alone: its ceiling here is "
            f"{_fmt_rate(bs.samples_per_s)}. Any step slower than {bs.step_p50_s * 1e3:.1f} ms per batch "
            "of this size will not wait for this loader."
        )
    elif ks.verdict in (RECEIVE_FLOOR, PAGEABLE_H2D) and ks.receive_p50_s is not None:
        what = (
            "the prefetcher's next() copying each batch from pageable memory (pin it)"
            if ks.verdict == PAGEABLE_H2D
            else "the main process taking each finished batch from a worker"
        )
        lines.append(
            f"Its remaining stall ({ks.stall_fraction:.1%}, {ks.data_wait_p50_s * 1e3:.1f} ms median wait per "
            f"batch) is {what}: taking a batch that was already built costs "
            f"{ks.receive_p50_s * 1e3:.1f} ms (measured after the window); more workers cannot remove it."
        )
    elif bs.verdict.startswith("loader-bound"):
        cause = ""
        if usable_cpus and bs.cpu_util_pct is not None and bs.cpu_util_pct >= 85.0 * usable_cpus:
            cause = (
                f" The process tree used {bs.cpu_util_pct / 100:.1f} of {usable_cpus} usable CPUs: "
                "CPU (decode/augment) saturation binds."
            )
        elif any(REPLICATED in r.warnings for r in results):
            cause = (
                " Configs with more workers replay the IterableDataset in every worker and are not "
                "ranked: split its stream with torch.utils.data.get_worker_info(), then sweep again."
            )
        elif best.settings.num_workers == max(r.settings.num_workers for r in ok):
            cause = " The fastest config has the most workers of those measured: try more workers."
            if bs.workers_needed:
                cause += (
                    f" Estimate: about {bs.workers_needed} worker{'s' if bs.workers_needed != 1 else ''}"
                    f"{' per rank' if (bs.world_size or 1) > 1 else ''} (batch build time / step time), "
                    "if the CPUs can run them."
                )
        lines.append(
            f"Even the best config is {input_bound_band(bs.stall_fraction)} "
            f"(stall {bs.stall_fraction:.1%}): no setting in this grid clears the loader bottleneck."
            + cause
        )
    elif min_stall > 0:
        lines.append(
            f"Lowest stall measured: {min_stall:.1%} (receiving a batch always costs a little; "
            "this floor is not worth chasing)."
        )
    if not loader_only:
        lines.extend(plateau_reason(ok, knee, best, usable_cpus, ceilings or {}))
    lines.extend(startup_lines)
    if settings.worker_threads is not None or settings.main_threads is not None:
        lines.append(
            "Threads: "
            + ", ".join(
                part for part in (
                    f"torch.set_num_threads({settings.worker_threads}) in each worker (worker_init_fn)"
                    if settings.worker_threads is not None else "",
                    f"torch.set_num_threads({settings.main_threads}) in the main process"
                    if settings.main_threads is not None else "",
                ) if part
            )
            + "."
        )
    for w in knee.warnings:
        if w.startswith("oversubscribed"):
            lines.append(f"Note: {w}.")
    return Recommendation(
        settings=settings,
        reason=" ".join(lines),
        input_bound=band,
        dataloader_call=dataloader_call(settings),
        use_prefetcher=settings.prefetch,
    )


def transfer_mb_per_s(result: ConfigResult) -> float | None:
    """Bytes of batches moved from workers to the main process per second, in MB/s."""
    s = result.summary
    if s is None or not s.batch_bytes or result.settings.num_workers == 0:
        return None
    return s.batch_bytes * s.samples_per_s / result.settings.batch_size / 1e6


def plateau_reason(
    ok: Sequence[ConfigResult],
    knee: ConfigResult,
    best: ConfigResult,
    usable_cpus: int | None,
    ceilings: dict[int, float],
) -> list[str]:
    """Why the curve flattens past the knee, with the evidence: the step itself (share of the
    compute ceiling), CPU saturation (process-tree CPU against the usable CPUs), the worker->main
    transfer (MB/s), and what configs past the knee cost in CPU for what they gain."""
    out: list[str] = []
    ks, bs = knee.summary, best.summary
    assert ks is not None and bs is not None
    ceiling = ceilings.get(knee.settings.batch_size)
    if ks.verdict.startswith("compute-bound") or ks.verdict == RECEIVE_FLOOR:
        if ceiling:
            share = ks.samples_per_s / ceiling
            # The ceiling is the whole job's in a distributed sweep: one rank's step moves a batch.
            per_step = knee.settings.batch_size * (ks.world_size or 1)
            alone_s = per_step / ceiling
            # Mean, not median, compute time: a tail of slow steps (launches delayed by CPU
            # contention, an all-reduce waiting for a late rank) costs throughput too.
            compute_mean_s = mean_step_s(knee) * (1.0 - ks.stall_fraction)
            if share < 0.95 and compute_mean_s > 1.05 * alone_s:
                text = (
                    f"The knee reaches {share:.0%} of the compute ceiling ({ceiling:,.0f} samples/s) because the "
                    f"step itself runs slower beside the loader: {compute_mean_s * 1e3:.1f} ms per batch on "
                    f"average (median {ks.compute_p50_s * 1e3:.1f} ms) vs {alone_s * 1e3:.1f} ms alone."
                )
                if usable_cpus and ks.cpu_util_pct is not None and ks.cpu_util_pct >= 85.0 * usable_cpus:
                    text += (
                        f" The process tree used {ks.cpu_util_pct / 100:.1f} of {usable_cpus} usable CPUs: the "
                        "main process (kernel launches, the pin thread) competes with the workers for CPU, so "
                        "the binding resource is the CPU; cheaper decoding (or GPU decoding) or more CPUs would "
                        "lift it."
                    )
                out.append(text)
            else:
                out.append(
                    f"Past the knee the step itself binds: the knee runs at {share:.0%} of "
                    f"the compute ceiling ({ceiling:,.0f} samples/s)."
                )
    elif usable_cpus and bs.cpu_util_pct is not None and bs.cpu_util_pct >= 85.0 * usable_cpus:
        pass  # said in the loader-bound sentence
    else:
        mbps = transfer_mb_per_s(best)
        if mbps is not None and bs.receive_p50_s and bs.receive_p50_s >= 0.25 * bs.data_wait_mean_s:
            out.append(
                f"The worker->main transfer is a large part of the wait: {mbps:,.0f} MB/s of batches "
                f"({(bs.batch_bytes or 0) / 1e6:,.1f} MB each), {bs.receive_p50_s * 1e3:.1f} ms to receive one."
            )
    costly = [
        r for r in ok
        if r is not knee and r.settings.num_workers > knee.settings.num_workers
        and r.summary is not None and r.summary.cpu_util_pct is not None and ks.cpu_util_pct is not None
    ]
    if costly:
        top = max(costly, key=lambda r: r.summary.cpu_util_pct or 0.0)  # type: ignore[union-attr]
        ts = top.summary
        assert ts is not None and ks.cpu_util_pct is not None and ts.cpu_util_pct is not None
        gain = ts.samples_per_s / ks.samples_per_s - 1.0
        extra = (ts.cpu_util_pct - ks.cpu_util_pct) / 100.0
        if extra > 0.5:
            out.append(
                f"More is not better: {top.settings.key()} uses {extra:+.1f} CPU cores over the knee "
                f"for {gain:+.1%} throughput."
            )
    return out


def mean_step_s(result: ConfigResult) -> float:
    """The mean time of one step, in s: batch_size / samples/s, times the ranks of a distributed
    sweep (they step in lockstep, each moving its own batch, and samples/s is their sum);
    0 without throughput."""
    s = result.summary
    if s is None or s.samples_per_s <= 0:
        return 0.0
    return result.settings.batch_size * (s.world_size or 1) / s.samples_per_s


def epoch_samples_per_s(result: ConfigResult, epoch_batches: int) -> float:
    """Samples per epoch / (first-batch time + epoch_batches x mean step time): the throughput of
    a whole epoch when the workers start again every epoch (persistent_workers=False).
    `epoch_batches` is per rank in a distributed sweep; the result is summed over ranks."""
    s = result.summary
    assert s is not None
    epoch_s = s.first_batch_s + epoch_batches * mean_step_s(result)
    samples = epoch_batches * result.settings.batch_size * (s.world_size or 1)
    return samples / epoch_s if epoch_s > 0 else 0.0


def startup_advice(
    ok: Sequence[ConfigResult], knee: ConfigResult, epoch_batches: int, tolerance: float
) -> list[str]:
    """Sentences on start-up vs steady state for epochs of `epoch_batches` batches. A first
    sentence starting with "PERSIST" means: recommend persistent_workers=True."""
    out: list[str] = []
    ks = knee.summary
    assert ks is not None
    epoch_s = ks.first_batch_s + epoch_batches * mean_step_s(knee)
    share = ks.first_batch_s / epoch_s if epoch_s > 0 else 0.0
    if knee.settings.num_workers > 0 and not knee.settings.persistent_workers and share > 0.05:
        out.append(
            f"PERSISTStart-up (first batch {ks.first_batch_s:.2f} s) is {share:.0%} of an epoch of "
            f"{epoch_batches} batches: use persistent_workers=True to pay it once, not every epoch."
        )
    by_epoch = max(ok, key=lambda r: epoch_samples_per_s(r, epoch_batches))
    best_epoch = epoch_samples_per_s(by_epoch, epoch_batches)
    # With persistent_workers recommended, the knee pays start-up once: its epochs run at the
    # steady-state rate.
    knee_epoch = ks.samples_per_s if out else epoch_samples_per_s(knee, epoch_batches)
    if by_epoch is not knee and knee_epoch < best_epoch * (1 - tolerance):
        out.append(
            f"Counting start-up in every epoch of {epoch_batches} batches, {by_epoch.settings.key()} is "
            f"faster per epoch ({best_epoch:,.0f} samples/s) than the steady-state knee."
        )
    return out


def headroom(result: ConfigResult, ceiling_samples_per_s: float | None) -> dict[str, object] | None:
    """How much faster the loop could run from `result`'s settings (the user's current ones).

    Two bounds: removing all data-wait gives at most 1 / (1 - stall fraction); the compute
    ceiling (the step fed a batch already on the device) gives ceiling / throughput. The smaller
    one binds. Returns None for a config without a summary.
    Keys: key, samples_per_s, stall_fraction, max_speedup_from_stall, max_speedup_to_ceiling
    (None without a ceiling), binds ("stall" or "compute ceiling").
    """
    s = result.summary
    if s is None or s.samples_per_s <= 0:
        return None
    from_stall = 1.0 / max(1e-9, 1.0 - s.stall_fraction)
    to_ceiling = None if not ceiling_samples_per_s else ceiling_samples_per_s / s.samples_per_s
    binds = "stall" if to_ceiling is None or from_stall <= to_ceiling else "compute ceiling"
    return {
        "key": result.settings.key(),
        "samples_per_s": s.samples_per_s,
        "stall_fraction": s.stall_fraction,
        "max_speedup_from_stall": from_stall,
        "max_speedup_to_ceiling": to_ceiling,
        "binds": binds,
    }


def analyze(result_set: ResultSet) -> None:
    """(Re)derive every summary, verdict and the recommendation of `result_set` from its raw
    trials, with this version's analysis (so `show` of an older file uses current rules).
    Mutates `result_set`."""
    cfg = result_set.config or {}
    measure = cfg.get("measure") or {}
    tolerance = float(measure.get("tolerance", DEFAULT_TOLERANCE))
    loader_only = (cfg.get("compute") or {}).get("kind") == "none"
    usable = (result_set.environment or {}).get("usable_cpus")
    epoch_batches = measure.get("epoch_batches") or (result_set.analysis or {}).get("epoch_batches")
    for r in result_set.results:
        if r.status == "ok" and r.trials:
            r.summary = summarize(r.trials)
            r.summary.verdict = classify(r, loader_only=loader_only)
            r.summary.stall_period_batches = stall_period(r.trials[0].data_wait_s, r.trials[0].step_s)
            if r.summary.stall_period_batches and r.summary.verdict.startswith("loader-bound"):
                r.summary.verdict = f"loader-bound (stall every {r.summary.stall_period_batches} batches)"
            if not loader_only:
                r.summary.workers_needed = workers_needed(r)
    ceilings = {
        int(bs): float(c["samples_per_s"])
        for bs, c in ((result_set.ceilings or {}).get("compute") or {}).items()
    }
    result_set.analysis["fetch_prep"] = fetch_prep(result_set.results)
    result_set.recommendation = recommend(
        # With --cache both, rank the cold runs: what a first epoch, or a dataset larger than the
        # page cache, sees (the warm runs give the prep stall in `fetch_prep`).
        [r for r in result_set.results if r.cache != "warm"] or result_set.results,
        tolerance=tolerance, usable_cpus=usable, loader_only=loader_only,
        epoch_batches=int(epoch_batches) if epoch_batches else None, ceilings=ceilings,
    )


def stall_period(data_wait_s: Sequence[float], step_s: Sequence[float]) -> int | None:
    """The period, in batches, of recurring stalls (case C04's sawtooth), or None.

    A stall is a batch whose data-wait is at least half the median step and three times the
    lower-quartile wait (so the receive floor every batch pays is not a stall). The period is the
    smallest lag L >= 2 at which at least 60% of stalls recur L batches later (an
    autocorrelation of the stall indicator, robust to a second, smaller stall inside a round).
    Needs at least three stalls, and stalls in at most 60% of the batches.
    """
    n = len(data_wait_s)
    if not n or not step_s:
        return None
    threshold = max(0.0005, 0.5 * percentile(step_s, 50), 3 * percentile(data_wait_s, 25))
    stalls = {i for i, w in enumerate(data_wait_s) if w >= threshold}
    if len(stalls) < 3 or len(stalls) > 0.6 * n:
        return None
    for lag in range(2, n // 3 + 1):
        candidates = [i for i in stalls if i + lag < n]
        if len(candidates) >= 2 and sum(1 for i in candidates if i + lag in stalls) >= 0.6 * len(candidates):
            return lag
    return None


def workers_needed(result: ConfigResult) -> int | None:
    """Estimated workers to keep the step fed: batch build time / step time.

    In a loader-bound steady state W workers deliver one batch per mean step, so one worker
    builds a batch in about W x mean step (with 0 workers, the mean data-wait is the build time).
    Returns ceil(build / median compute), or None for a config that is not loader-bound.
    """
    s = result.summary
    if s is None or not s.verdict.startswith("loader-bound") or s.compute_p50_s <= 0 or s.samples_per_s <= 0:
        return None
    mean_step = mean_step_s(result)
    w = result.settings.num_workers
    build = s.data_wait_mean_s if w == 0 else w * mean_step
    return max(1, math.ceil(build / s.compute_p50_s - 1e-9))


def fetch_prep(results: Sequence[ConfigResult]) -> dict[str, dict[str, object]]:
    """The differential split of data-wait (Mohan et al., VLDB 2021, "data stalls"): for every
    settings key measured both cold and warm, the warm mean data-wait per batch is the prep stall
    (decode, augment), cold minus warm the fetch stall (storage); the larger names the bound."""
    from loaderbench.storage import fetch_prep_split

    by_key: dict[str, dict[str, ConfigResult]] = {}
    for r in results:
        if r.status == "ok" and r.summary is not None and r.cache in ("cold", "warm"):
            by_key.setdefault(r.settings.key(), {})[r.cache] = r
    out: dict[str, dict[str, object]] = {}
    for key, pair in by_key.items():
        if "cold" in pair and "warm" in pair:
            cold, warm = pair["cold"].summary, pair["warm"].summary
            assert cold is not None and warm is not None
            out[key] = fetch_prep_split(cold.data_wait_mean_s, warm.data_wait_mean_s).to_dict()
    return out
