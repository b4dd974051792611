"""The stage profile's table, from its raw timings (`model.StageRecord`): milliseconds and share
per stage, CPU against wall, the per-sample build time's percentiles, the profile's own cost and
the functions of the rest of `__getitem__`.

Pure: no torch, no I/O. The measuring is in measure/stages.py (NOTE [stage profile] there), the
words in render/stages.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from loaderbench.analysis import thresholds as th
from loaderbench.analysis.statistics import percentile
from loaderbench.model import StageKind, StageRecord

# Its thresholds, with their sources, are in thresholds.py (STAGE_*); the names below are theirs.
BLOCKED_FRACTION = th.STAGE_BLOCKED_FRACTION
WAITING_MIN_MS = th.STAGE_WAITING_MIN_MS
QUEUED_THAT_COUNTS = th.STAGE_QUEUED_THAT_COUNTS
SHARE_THAT_COUNTS = th.STAGE_SHARE_THAT_COUNTS
QUEUED_SHARE_THAT_COUNTS = th.STAGE_QUEUED_SHARE_THAT_COUNTS


class StageNA(str, Enum):
    """Why a stage has no figure: the value is its key in JSON; render/stages.py words it."""

    NO_CUDA = "no-cuda"  # pin and H2D need a CUDA device
    PIN_OFF = "pin-memory-off"  # pin_memory=False: nothing is pinned
    NO_WORKERS = "no-workers"  # num_workers=0: no batch comes from a worker
    NOT_REACHED = "not-reached"  # the time budget ended before a batch was timed


@dataclass(frozen=True)
class StageRow:
    """One stage: `ms_per_sample` wall, `cpu_ms_per_sample` CPU (the calling thread's) and
    `queued_ms_per_sample` (runnable, queued for a CPU: other load; None where not measured),
    per sample (a per-batch stage's time over its batch's samples); `share` of all stages' ms
    per sample; `calls_per_sample` (read, decode, transforms: how often it was entered; 0:
    never seen); `waiting`: blocked for most of its wall time (`waiting()`); `queued`: a
    QUEUED_THAT_COUNTS share of it queued for a CPU; `na`: why there is no figure (then the
    numbers are None)."""

    name: str
    kind: str
    where: str
    ms_per_sample: float | None
    cpu_ms_per_sample: float | None
    share: float | None
    queued_ms_per_sample: float | None = None
    calls_per_sample: float | None = None
    waiting: bool = False
    queued: bool = False
    na: str | None = None

    @property
    def blocked_ms_per_sample(self) -> float | None:
        """Wall time neither on a CPU nor queued for one (I/O, a lock, a sleep), per sample."""
        if self.ms_per_sample is None or self.cpu_ms_per_sample is None:
            return None
        return max(0.0, self.ms_per_sample - self.cpu_ms_per_sample - (self.queued_ms_per_sample or 0.0))

    @property
    def blocked_fraction(self) -> float | None:
        """The blocked time over the wall time less the time queued for a CPU (what the stage
        would take on a quiet machine); None without a figure."""
        blocked = self.blocked_ms_per_sample
        if blocked is None or self.ms_per_sample is None:
            return None
        unqueued = self.ms_per_sample - (self.queued_ms_per_sample or 0.0)
        return blocked / unqueued if unqueued > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class BuildPercentiles:
    """Per-sample build time (one `__getitem__`, without the profile's interceptions), ms."""

    p50: float
    p90: float
    p99: float
    max: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ProfileCost:
    """What the profile costs, and how long it took.

    `samples` timed with the interceptions and `plain_samples` others without, in turn;
    `profiled_ms_per_sample` / `plain_ms_per_sample`: their mean `__getitem__`; `overhead`:
    profiled / plain - 1 (the two sets are different samples of one dataset: a difference of a
    few % is within the spread of their costs). `attribution_*`: the same for the profiler pass
    (cProfile on, outside the recognised stages). None where not measured.
    `wall_s` of the whole profile against `time_budget_s`; `cut_short`: the passes the budget
    ended early ("samples", "loader", "attribution")."""

    samples: int
    plain_samples: int
    plain_ms_per_sample: float | None
    profiled_ms_per_sample: float | None
    overhead: float | None
    attribution_samples: int
    attribution_plain_ms_per_sample: float | None
    attribution_ms_per_sample: float | None
    attribution_overhead: float | None
    wall_s: float
    time_budget_s: float
    cut_short: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FunctionRow:
    """One function of the rest of `__getitem__`, from the profiler pass: `self_ms_per_sample`
    (its own code, under cProfile, which slows Python-heavy code) and `share_of_rest` (of the
    rest's time in the same pass)."""

    function: str
    location: str
    self_ms_per_sample: float
    share_of_rest: float | None
    calls_per_sample: float
    called_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StageProfile:
    """The stage profile: `stages` in pipeline order (read, decode, the transforms, the rest
    of `__getitem__`, collate, receive, pin, H2D); `sample_build_ms` (None without timed
    samples); `cost`; `functions` of the rest (top by self time) and `unlisted_share` (the
    part of the rest in none of them: other functions, and code the profiler does not see, such
    as `__getitem__`'s own lines after a recognised stage); `decoders` seen (decode calls per decoder); `samples` and `batches`
    timed (`batches_collated`: the collate timed; `batches_received`: from a worker); where
    the samples were built (`sampled_in`) with how many intra-op threads; `transforms_found`:
    whether a Compose (or a lone transform) was found. `rest_counts`: the rest of
    `__getitem__` is at least SHARE_THAT_COUNTS of a sample's time (its functions are worth
    reading). `queued_share`: of the samples' `__getitem__` wall time, the part the thread was
    queued for a CPU (other load; None where not measured), and `other_load` when it is at least
    QUEUED_SHARE_THAT_COUNTS. `waiting_blocked_over` and `rest_share_min`: the thresholds a
    stage's `waiting` and `rest_counts` were judged with (BLOCKED_FRACTION, SHARE_THAT_COUNTS),
    for the sentences that name them."""

    stages: list[StageRow]
    sample_build_ms: BuildPercentiles | None
    cost: ProfileCost
    functions: list[FunctionRow]
    unlisted_share: float | None
    decoders: dict[str, int]
    samples: int
    batches_collated: int
    batches_received: int
    sampled_in: str
    torch_threads: int | None
    transforms_found: bool
    iterable: bool
    rest_counts: bool
    queued_share: float | None
    other_load: bool = False
    waiting_blocked_over: float = BLOCKED_FRACTION
    rest_share_min: float = SHARE_THAT_COUNTS

    def stage(self, name: str) -> StageRow:
        """The row of stage `name` (KeyError when there is none)."""
        for row in self.stages:
            if row.name == name:
                return row
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": [s.to_dict() for s in self.stages],
            "sample_build_ms": None if self.sample_build_ms is None else self.sample_build_ms.to_dict(),
            "cost": self.cost.to_dict(),
            "rest_functions": [f.to_dict() for f in self.functions],
            "unlisted_share": self.unlisted_share,
            "decoders": dict(self.decoders),
            "samples": self.samples,
            "batches_collated": self.batches_collated,
            "batches_received": self.batches_received,
            "sampled_in": self.sampled_in,
            "torch_threads": self.torch_threads,
            "transforms_found": self.transforms_found,
            "iterable": self.iterable,
            "rest_counts": self.rest_counts,
            "queued_share": self.queued_share,
            "other_load": self.other_load,
            "waiting_blocked_over": self.waiting_blocked_over,
            "rest_share_min": self.rest_share_min,
        }


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
    k = record.attribution_samples
    kp = record.attribution_plain_samples
    attr_plain = 1e3 * record.attribution_plain_s / kp if kp else None
    attr_ms = 1e3 * record.attribution_getitem_s / k if k else None
    cost = ProfileCost(
        samples=n if plain else 0,
        plain_samples=len(plain),
        plain_ms_per_sample=plain_ms,
        profiled_ms_per_sample=profiled_ms,
        overhead=None if not plain_ms or profiled_ms is None else profiled_ms / plain_ms - 1.0,
        attribution_samples=k,
        attribution_plain_ms_per_sample=attr_plain,
        attribution_ms_per_sample=attr_ms,
        attribution_overhead=None if not attr_plain or attr_ms is None else attr_ms / attr_plain - 1.0,
        wall_s=record.wall_s,
        time_budget_s=record.time_budget_s,
        cut_short=list(record.cut_short),
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
    )
