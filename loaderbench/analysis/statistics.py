"""Pure statistics of raw per-batch samples: percentiles, per-trial throughput and stall, the
summary of a config's repeats, the fetch/prep split.

No torch, no pynvml, no I/O: `show` and `compare` use this on CPU-only CI runners. Every number is
derived from the raw per-batch samples kept in `Trial` (the timing model is in measure/loop.py).
Verdicts, the knee and the recommendation are in analysis/.

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
from dataclasses import dataclass
from typing import Any

from loaderbench.analysis.ranks import add_job_statistics
from loaderbench.model import ConfigResult, ServedFrom, Summary, Trial

# Input-bound bands of the stall fraction, as commonly used in data-stall analyses
# (e.g. Mohan et al., "Analyzing and Mitigating Data Stalls in DNN Training", VLDB 2021):
# under 5% not input-bound, 5-20% moderately, over 20% highly.
NOT_INPUT_BOUND_MAX = 0.05
MODERATELY_INPUT_BOUND_MAX = 0.20
DEFAULT_TOLERANCE = 0.05
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
        main_cpu_util_pct=_median_or_none([t.main_cpu_util_pct for t in trials]),
        other_cpu_util_pct=_median_or_none([t.other_cpu_util_pct for t in trials]),
        steal_cpu_util_pct=_median_or_none([t.steal_cpu_util_pct for t in trials]),
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
        served_from=_served_from([t.served_from for t in trials]),
        samples_per_s_min=float(min(rates)),
        samples_per_s_max=float(max(rates)),
        repeats=len(trials),
    )
    _rank_statistics(summary, trials)
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
    add_job_statistics(summary, trials)  # the per-step maximum wait; several nodes: each node's figures


def relative_spread(summary: Summary) -> float:
    """(max - min) / median of throughput across repeats; 0 with one repeat."""
    if summary.repeats < 2 or not summary.samples_per_s or summary.samples_per_s_min is None:
        return 0.0
    return ((summary.samples_per_s_max or 0.0) - summary.samples_per_s_min) / summary.samples_per_s


def _served_from(values: Sequence[str | None]) -> str | None:
    """Where a config's samples came from over its trials (model.ServedFrom values): the one
    value they agree on, "mixed" when they differ (repeats that warmed a cache), None when no
    trial knows."""
    seen = {v for v in values if v is not None}
    if not seen:
        return None
    return seen.pop() if len(seen) == 1 else ServedFrom.MIXED.value


def fetch_prep(results: Sequence[ConfigResult]) -> dict[str, dict[str, object]]:
    """The differential split of data-wait (Mohan et al., VLDB 2021, "data stalls"): for every
    settings key measured both cold and warm, the warm mean data-wait per batch is the prep stall
    (decode, augment), cold minus warm the fetch stall (storage); the larger names the bound."""
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


@dataclass
class FetchPrepSplit:
    """The differential split of one config's data-wait (see NOTE [ The differential fetch/prep
    split ]), in the unit given (seconds per batch, or totals): `fetch_s` = cold - warm
    (storage), `prep_s` = warm (decode, augment, collate). `bound` names the larger."""

    cold_wait_s: float
    warm_wait_s: float
    fetch_s: float
    prep_s: float
    bound: str  # "storage (fetch)" | "CPU (prep)" | "none"
    fetch_fraction: float | None  # fetch / cold wait
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def fetch_prep_split(cold_wait_s: float, warm_wait_s: float) -> FetchPrepSplit:
    """Split a cold run's data-wait into fetch (storage) and prep (CPU) using a warm run of the
    same config: fetch = cold - warm, prep = warm; bound "storage (fetch)" when fetch > prep,
    else "CPU (prep)", "none" when neither waited. A warm run slower than the cold one (noise)
    gives fetch 0 and a note."""
    note = None
    fetch = cold_wait_s - warm_wait_s
    prep = max(0.0, warm_wait_s)
    if fetch < 0:
        note = (
            f"the warm run waited longer than the cold one by {-fetch:.3g} s: fetch is within "
            "noise (measure longer or repeat)"
        )
        fetch = 0.0
    if fetch <= 0 and prep <= 0:
        bound = "none"
    else:
        bound = "storage (fetch)" if fetch > prep else "CPU (prep)"
    frac = fetch / cold_wait_s if cold_wait_s > 0 else None
    return FetchPrepSplit(cold_wait_s, warm_wait_s, fetch, prep, bound, frac, note)
