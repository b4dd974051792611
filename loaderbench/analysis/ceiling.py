"""The ceilings pass: the compute ceiling of each config, what the step alone can take in the
samples its batches really held, each config's share of it (and each rank's of its own), and
the ceilings as the outputs show them.

A sweep records one ceiling per batch size (`ResultSet.ceilings`, model.Ceiling): the step time of
one batch already on the device (measured) or the `sleep:MS` time (analytic). The step of
`sleep` and `spin` costs the same per batch whatever the batch holds, so its ceiling in
samples/s is the samples a config's batches held (counted: NOTE [samples per batch] in
analysis/statistics.py) over the step time; a model's step costs per sample, so its ceiling is
the measured samples/s of the batch it was fed. A batch size that is not what batches hold (a
batch sampler that buckets, a dataset whose items are several samples, a sampler with fewer
indices than a batch) would otherwise put rows above 100% of their ceiling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loaderbench.conclusions import CeilingShown
from loaderbench.model import Ceiling, ConfigResult, Summary

PER_BATCH_STEPS = ("sleep", "spin")
"""Compute kinds whose step takes the same time for any batch."""


def compute_ceiling(result: ConfigResult, ceilings: Mapping[int, Ceiling], compute_kind: str | None) -> float | None:
    """The compute ceiling of `result` (summarised), in samples/s (summed over ranks in a
    distributed sweep); None when its batch size has no ceiling. A per-batch step's rate is
    scaled by the samples the config's batches held over those the step was fed."""
    c = ceilings.get(result.settings.batch_size)
    s = result.summary
    if c is None or s is None:
        return None
    if compute_kind in PER_BATCH_STEPS and result.trials and s.samples_per_batch:
        fed = float(c.samples_per_batch or result.settings.batch_size)
        return c.samples_per_s * s.samples_per_batch / fed
    return c.samples_per_s


def step_alone_s(summary: Summary) -> float | None:
    """Seconds the step alone takes for one of the config's batches (its samples per batch over
    the compute ceiling; the whole job's in a distributed sweep, where one rank's step moves a
    batch), None without a ceiling."""
    s = summary
    c = s.compute_ceiling_samples_per_s
    if not c or not s.samples_per_batch:
        return None
    return s.samples_per_batch * (s.world_size or 1) / c


def step_slowdown(summary: Summary) -> float | None:
    """How much slower the step ran beside the loader than alone: the median compute per batch
    (the table's "compute ms") over `step_alone_s`, less 1 (0.23: 23% slower); None without a
    ceiling. The median, not the mean: one late step (a page fault, a collection) is not a step
    that runs slower, and the row's compute column shows the median."""
    alone = step_alone_s(summary)
    if not alone or summary.compute_p50_s <= 0:
        return None
    return summary.compute_p50_s / alone - 1.0


def rank_ceiling_shares(rank_samples_per_s: Sequence[float], rank_ceiling_samples_per_s: Sequence[float]) -> list[float]:
    """Each rank's throughput as a fraction of its own compute ceiling (index = rank); [] when
    the ceilings are unknown or do not match the ranks.

    >>> rank_ceiling_shares([90.0, 95.0], [100.0, 100.0])
    [0.9, 0.95]
    """
    if not rank_ceiling_samples_per_s or len(rank_ceiling_samples_per_s) != len(rank_samples_per_s):
        return []
    if any(c <= 0 for c in rank_ceiling_samples_per_s):
        return []
    return [x / c for x, c in zip(rank_samples_per_s, rank_ceiling_samples_per_s)]


def set_ceilings(results: Sequence[ConfigResult], ceilings: Mapping[int, Ceiling], compute_kind: str | None) -> None:
    """The ceilings pass over every summarised config: its compute ceiling, its share of it,
    and each rank's share of its own (distributed sweeps)."""
    for r in results:
        s = r.summary
        if s is None:
            continue
        s.compute_ceiling_samples_per_s = compute_ceiling(r, ceilings, compute_kind)
        c = s.compute_ceiling_samples_per_s
        s.ceiling_share = s.samples_per_s / c if c else None
        s.step_slowdown = step_slowdown(s)
        own = ceilings.get(r.settings.batch_size)
        s.rank_ceiling_shares = [] if own is None else rank_ceiling_shares(s.rank_samples_per_s, own.rank_samples_per_s)


def ceilings_shown(results: Sequence[ConfigResult], ceilings: Mapping[int, Ceiling],
                   compute_kind: str | None) -> list[CeilingShown]:
    """Per batch size, in order, the ceiling as the table's header and the plot show it: the
    median counted samples per batch of the measured configs of that batch size (None if
    none) and, for a per-batch step, the samples/s at that many samples."""
    out: list[CeilingShown] = []
    for bs, c in sorted(ceilings.items()):
        rows = sorted((r for r in results if r.settings.batch_size == bs and r.summary is not None
                       and r.summary.compute_ceiling_samples_per_s), key=lambda r: r.summary.samples_per_batch or 0.0)  # type: ignore[union-attr]
        mid = rows[len(rows) // 2].summary if rows else None
        rate = c.samples_per_s
        if mid is not None and compute_kind in PER_BATCH_STEPS and mid.compute_ceiling_samples_per_s:
            rate = mid.compute_ceiling_samples_per_s
        out.append(CeilingShown(c, rate, None if mid is None else mid.samples_per_batch))
    return out
