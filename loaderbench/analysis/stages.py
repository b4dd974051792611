"""The stage profile's table, from its raw timings (`model.StageRecord`): milliseconds and share
per stage, CPU against wall, the per-sample build time's percentiles, the profile's own cost and
the functions of the rest of `__getitem__`.

Pure: no torch, no I/O. The measuring is in measure/stages.py (NOTE [stage profile] there), the
words in render/stages.py.
"""

from __future__ import annotations

import dataclasses
import math

from loaderbench.analysis import thresholds as th
from loaderbench.analysis.statistics import percentile
from loaderbench.conclusions import (
    BuildPercentiles,
    BuildTail,
    FunctionRow,
    ProfileCost,
    StageNA,
    StageProfile,
    StageRow,
)
from loaderbench.model import SampleTiming, StageKind, StageRecord

__all__ = ["BuildPercentiles", "BuildTail", "FunctionRow", "ProfileCost", "StageNA", "StageProfile", "StageRow",
           "build_tail", "summarize_profile", "waiting"]

# Its thresholds, with their sources, are in thresholds.py (STAGE_*); the names below are theirs.
BLOCKED_FRACTION = th.STAGE_BLOCKED_FRACTION
WAITING_MIN_MS = th.STAGE_WAITING_MIN_MS
QUEUED_THAT_COUNTS = th.STAGE_QUEUED_THAT_COUNTS
SHARE_THAT_COUNTS = th.STAGE_SHARE_THAT_COUNTS
QUEUED_SHARE_THAT_COUNTS = th.STAGE_QUEUED_SHARE_THAT_COUNTS


def _names(record: StageRecord, kind: StageKind) -> set[str]:
    return {s.name for s in record.stages if s.kind == kind.value}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _na(kind: StageKind, record: StageRecord) -> StageNA | None:
    """Why a per-batch stage has no figure in `record`, or None when it has (or should have) one."""
    cuda = record.device.startswith("cuda")
    if kind in (StageKind.PIN, StageKind.H2D) and not cuda:
        return StageNA.NO_CUDA
    if kind is StageKind.PIN and not record.settings.pin_memory:
        return StageNA.PIN_OFF
    if kind is StageKind.RECEIVE and record.settings.num_workers == 0:
        return StageNA.NO_WORKERS
    return None


def waiting(ms: float, cpu_ms: float, queued_ms: float | None = None) -> bool:
    """Whether a stage of `ms` wall, `cpu_ms` CPU and `queued_ms` queued for a CPU per sample
    is mostly blocked (I/O, a lock, a sleep): of its wall less the queued time, more than
    BLOCKED_FRACTION neither on a CPU nor queued, and at least WAITING_MIN_MS.

    >>> waiting(2.0, 0.1), waiting(2.0, 1.9), waiting(0.04, 0.0), waiting(2.0, 0.5, 1.4), waiting(8.4, 0.04, 4.3)
    (True, False, False, False, True)
    """
    unqueued = ms - (queued_ms or 0.0)
    blocked = unqueued - cpu_ms
    return blocked > BLOCKED_FRACTION * unqueued and blocked >= WAITING_MIN_MS


def summarize_profile(record: StageRecord, *, top: int = 10) -> StageProfile:
    """The stage table of `record`.

    Sample stages (read, decode, transforms): the mean over the timed samples of each stage's
    self time (0 in a sample that never entered it). The rest of `__getitem__`: the mean of
    `__getitem__` minus its recognised stages. Per-batch stages (collate, receive, pin, H2D):
    their total time over the total samples of the batches that timed them. `share`: a stage's
    ms per sample over the sum of every stage's (worker and main process together: all the
    work one sample costs). The build-time percentiles are of `__getitem__` without the
    interceptions where it was timed so (else with them). Functions: the `top` of the profiler
    pass by self time, per attributed sample.
    """
    samples = record.samples
    n = len(samples)
    queue_known = [s for s in samples if s.getitem_queued_s is not None]
    rows: list[StageRow] = []
    for stage in record.stages:
        kind = StageKind(stage.kind)
        na = _na(kind, record)
        if na is not None:
            rows.append(StageRow(stage.name, stage.kind, stage.where, None, None, None, na=na.value))
            continue
        calls: float | None = None
        queued: float | None = None
        if kind.per_batch:
            timed = [b for b in record.batches if stage.name in b.wall_s]
            count = sum(b.samples for b in timed)
            if not count:
                rows.append(StageRow(stage.name, stage.kind, stage.where, None, None, None,
                                     na=StageNA.NOT_REACHED.value))
                continue
            ms = 1e3 * sum(b.wall_s[stage.name] for b in timed) / count
            cpu = 1e3 * sum(b.cpu_s.get(stage.name, 0.0) for b in timed) / count
            with_queue = [b for b in timed if stage.name in b.queued_s]
            if with_queue:
                queued = 1e3 * sum(b.queued_s[stage.name] for b in with_queue) / sum(b.samples for b in with_queue)
        elif not n:
            rows.append(StageRow(stage.name, stage.kind, stage.where, None, None, None, na=StageNA.NOT_REACHED.value))
            continue
        elif kind is StageKind.REST:
            ms = 1e3 * sum(max(0.0, s.getitem_wall_s - sum(s.wall_s.values())) for s in samples) / n
            cpu = 1e3 * sum(max(0.0, s.getitem_cpu_s - sum(s.cpu_s.values())) for s in samples) / n
            if queue_known:
                queued = 1e3 * sum(max(0.0, (s.getitem_queued_s or 0.0) - sum(s.queued_s.values()))
                                   for s in queue_known) / len(queue_known)
        else:
            ms = 1e3 * sum(s.wall_s.get(stage.name, 0.0) for s in samples) / n
            cpu = 1e3 * sum(s.cpu_s.get(stage.name, 0.0) for s in samples) / n
            calls = sum(s.calls.get(stage.name, 0) for s in samples) / n
            if queue_known:
                queued = 1e3 * sum(s.queued_s.get(stage.name, 0.0) for s in queue_known) / len(queue_known)
        rows.append(StageRow(stage.name, stage.kind, stage.where, ms, cpu, None, queued_ms_per_sample=queued,
                             calls_per_sample=calls, waiting=waiting(ms, cpu, queued),
                             queued=queued is not None and ms > 0 and queued >= QUEUED_THAT_COUNTS * ms))
    total = sum(r.ms_per_sample for r in rows if r.ms_per_sample is not None)
    rows = [dataclasses.replace(r, share=r.ms_per_sample / total) if r.ms_per_sample is not None and total > 0 else r
            for r in rows]

    plain = list(record.plain_s)
    build = plain or [s.getitem_wall_s for s in samples]
    percentiles = None if not build else BuildPercentiles(
        p50=1e3 * percentile(build, 50), p90=1e3 * percentile(build, 90), p99=1e3 * percentile(build, 99),
        max=1e3 * max(build))
    plain_ms = _mean([1e3 * x for x in plain])
    profiled_ms = _mean([1e3 * s.getitem_wall_s for s in samples]) if plain else None
    # A stream that finishes its items in blocks: the two runs differ by where the blocks fall.
    runs = [[s.getitem_wall_s for s in samples], plain] if record.iterable else []
    blocky = [max(r) for r in runs if len(r) >= 2 and sum(r) > 0 and max(r) >= th.STAGE_BLOCK_ITEM_SHARE * sum(r)]
    block_ms = 1e3 * max(blocky) if blocky else None
    k = record.attribution_samples
    kp = record.attribution_plain_samples
    attr_plain = 1e3 * record.attribution_plain_s / kp if kp else None
    attr_ms = 1e3 * record.attribution_getitem_s / k if k else None
    cost = ProfileCost(
        samples=n if plain else 0,
        plain_samples=len(plain),
        plain_ms_per_sample=plain_ms,
        profiled_ms_per_sample=profiled_ms,
        # An IterableDataset's runs are consecutive items: a plain run cut short (the budget, the
        # stream's end) holds other items than the timed one's share, and is no reference.
        overhead=(None if not plain_ms or profiled_ms is None or block_ms or (record.iterable and len(plain) < n)
                  else profiled_ms / plain_ms - 1.0),
        attribution_samples=k,
        attribution_plain_ms_per_sample=attr_plain,
        attribution_ms_per_sample=attr_ms,
        attribution_overhead=(None if not attr_plain or attr_ms is None or block_ms or (record.iterable and kp < k)
                              else attr_ms / attr_plain - 1.0),
        wall_s=record.wall_s,
        time_budget_s=record.time_budget_s,
        cut_short=list(record.cut_short),
        block_item_ms=block_ms,
    )
    rest_s = record.attribution_getitem_s - record.attribution_stages_s
    functions = [
        FunctionRow(
            function=f.function, location=f.location, self_ms_per_sample=1e3 * f.self_s / k,
            share_of_rest=f.self_s / rest_s if rest_s > 0 else None, calls_per_sample=f.calls / k,
            called_from=f.called_from,
        )
        for f in sorted(record.functions, key=lambda f: -f.self_s)[:top]
    ] if k else []
    queue_wall = sum(s.getitem_wall_s for s in queue_known)
    queued_share = sum(s.getitem_queued_s or 0.0 for s in queue_known) / queue_wall if queue_wall > 0 else None
    rest = next((r for r in rows if r.kind == StageKind.REST.value), None)
    seen = sum(f.self_s for f in record.functions)
    unlisted = max(0.0, 1.0 - seen / rest_s) if k and rest_s > 0 else None
    return StageProfile(
        stages=rows,
        sample_build_ms=percentiles,
        cost=cost,
        functions=functions,
        unlisted_share=unlisted,
        decoders=dict(sorted(record.decoders.items(), key=lambda kv: -kv[1])),
        samples=n,
        batches_collated=sum(1 for b in record.batches if _names(record, StageKind.COLLATE) & set(b.wall_s)),
        batches_received=sum(1 for b in record.batches if _names(record, StageKind.RECEIVE) & set(b.wall_s)),
        sampled_in=record.sampled_in,
        torch_threads=record.torch_threads,
        transforms_found=any(s.kind == StageKind.TRANSFORM.value for s in record.stages),
        iterable=record.iterable,
        rest_counts=rest is not None and (rest.share or 0.0) >= SHARE_THAT_COUNTS,
        queued_share=queued_share,
        other_load=queued_share is not None and queued_share >= QUEUED_SHARE_THAT_COUNTS,
        waiting_blocked_over=BLOCKED_FRACTION,
        rest_share_min=SHARE_THAT_COUNTS,
        tail=build_tail(samples, list(record.plain_s), list(record.plain_queued_s)),
        decoder_timing=record.decoder_timing,
        gpu_decode=record.gpu_decode,
        batched_fetch=record.batched_fetch,
    )


def build_tail(samples: list[SampleTiming], plain_s: list[float], plain_queued_s: list[float] | None = None
               ) -> BuildTail | None:
    """The per-sample build time's tail (`BuildTail`) over every sample the profile fetched: the
    timed ones (`__getitem__` with the interceptions) and the plain ones, each less the time its
    thread was queued for a CPU (other load on the machine stretches wall times, not the
    samples' own cost; `plain_queued_s`, parallel to `plain_s`, where measured: else the plain
    ones are left out unless there is nothing else); None without a sample.

    NOTE [the tail of a sample's build time]
        A batch waits for its slowest sample, and in order (`in_order=True`) a ready batch
        waits for an earlier one still held by a slow sample. The tail is read as the larger of
        the p99 and the mean of the slowest 1% over the median: a tail of 1% of the samples
        sits exactly at the p99, which then catches it in about half of the draws (400 samples
        hold four such on average, and the p99 of 400 falls between the 396th and the 397th),
        while the slowest 1% hold at least one of them in 98% of them. It is long when that
        ratio is at least TAIL_SAMPLE_OVER_MEDIAN and at least TAIL_MIN_SAMPLES samples are
        that slow: one sample held up once (a page fault, a collection, a hiccup of a shared
        machine) is no tail, and 400 samples hold two of a 1% tail in 91% of draws; and when the
        slowest take TAIL_MIN_MS or more: samples of a few microseconds read 12x on scheduler
        noise alone, and hold no batch back. Not where the slow samples hold three quarters of
        the whole build or more: that is a block built at once and handed out item by item (a
        stream that fills a buffer of 160 items in `__iter__`: the median item 0.00 ms, one
        243,772 times it), whose cost is the stream's, not a tail `in_order=False` steps around.

    >>> t = build_tail([], [0.002] * 98 + [0.040] * 2)
    >>> round(t.p50_ms, 1), round(t.slowest_ms, 1), round(t.ratio, 1), t.slow, t.long
    (2.0, 40.0, 20.0, 2, True)
    >>> build_tail([], [0.002] * 99 + [0.040]).long
    False
    >>> build_tail([], [0.000004] * 98 + [0.00005] * 2).long  # 12x, but 0.05 ms
    False
    >>> build_tail([], [0.00001] * 318 + [0.4] * 2).long  # blocks of 160 built at once
    False
    """
    queued = list(plain_queued_s or [])
    timed = [max(0.0, s.getitem_wall_s - (s.getitem_queued_s or 0.0)) for s in samples]
    known = all(s.getitem_queued_s is not None for s in samples)
    plain = [max(0.0, w - q) for w, q in zip(plain_s, queued)] if len(queued) == len(plain_s) else []
    times = timed + plain
    basis = "wall less queued" if known and (plain or not plain_s) else "wall"
    if not times:
        times, basis = list(plain_s), "wall"
    if not times:
        return None
    ordered = sorted(times)
    n_slow = max(1, math.ceil(0.01 * len(ordered)))
    p50, p99 = percentile(ordered, 50), percentile(ordered, 99)
    slowest = sum(ordered[-n_slow:]) / n_slow
    ratio = max(p99, slowest) / p50 if p50 > 0 else 0.0
    slow = sum(1 for x in ordered if p50 > 0 and x >= th.TAIL_SAMPLE_OVER_MEDIAN * p50)
    # Samples that hold most of the build between them are a block's build landing on one item
    # (a stream that fills a buffer of 160 items, then yields them at no cost), not a tail.
    blocks = sum(ordered[-max(slow, 1):]) >= (1.0 - th.STAGE_BLOCK_ITEM_SHARE) * sum(ordered) > 0
    return BuildTail(p50_ms=1e3 * p50, p99_ms=1e3 * p99, slowest_ms=1e3 * slowest, samples=len(ordered),
                     ratio=ratio, threshold=th.TAIL_SAMPLE_OVER_MEDIAN, slow=slow,
                     long=(ratio >= th.TAIL_SAMPLE_OVER_MEDIAN and slow >= th.TAIL_MIN_SAMPLES
                           and 1e3 * max(p99, slowest) >= th.TAIL_MIN_MS and not blocks), basis=basis)
