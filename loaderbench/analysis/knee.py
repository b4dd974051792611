"""The knee pass: the cheapest measured config whose throughput is within tolerance (or noise) of
the best, where "cheapest" is what each config was measured to cost.

Pure: no torch, no I/O.

NOTE [cost order]
    Configs within the tolerance of the best are equal for the step; the knee is the one that
    costs least. The costs are measured, for every grid axis alike (workers, pin_memory, the
    prefetcher, prefetch_factor, persistent_workers, the start method, thread settings):
      1. memory: the process tree's PSS (a start method that copies the dataset into every
         worker shows here);
      2. start-up: the first batch plus the mean gap at an epoch start;
      3. CPU: the process tree's CPU time over the window, in cores.
    Each is a filter, in that order: configs more than 10% (plus a small absolute margin: 32
    MiB, 50 ms, 0.1 core) above the cheapest on it drop out; a cost not measured for every
    candidate is skipped. What is left is ordered by a fixed structural key (fewer workers, pin
    and prefetcher off before on, fewer prefetched batches, non-persistent, fork before
    forkserver before spawn, fewer threads, in order before out of order, smaller batch), never
    by the order in which a flag listed its values; except for the loader's own arguments
    (`--loader-arg`) and the grid axes declared without a cost order (`Axis.listed`: the
    decoder, whose cost is its measured CPU and step time, not a rule), whose order nobody
    knows: among configs left equal on everything else, the value the user listed first wins,
    and `listed_first_ties` reports where that decided the knee (the output says so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from loaderbench.analysis.thresholds import (
    COST_CPU_MARGIN_PCT,
    COST_MEMORY_MARGIN_BYTES,
    COST_RELATIVE,
    COST_STARTUP_MARGIN_S,
    DEFAULT_TOLERANCE,
    NOISE_CAP,
)
from loaderbench.conclusions import ListedFirst, Peer
from loaderbench.model import GRID_AXES, ConfigResult, LoaderSettings

_COSTS: tuple[tuple[str, float, float], ...] = (
    ("memory", COST_RELATIVE, COST_MEMORY_MARGIN_BYTES), ("startup", COST_RELATIVE, COST_STARTUP_MARGIN_S),
    ("cpu", COST_RELATIVE, COST_CPU_MARGIN_PCT),
)


def rankable(results: Sequence[ConfigResult]) -> list[ConfigResult]:
    """Measured configs that may be ranked (`ConfigResult.ranked`: status ok, a summary, and
    not counting duplicate samples)."""
    return [r for r in results if r.ranked]


@dataclass(frozen=True)
class Ranking:
    """The knee pass's record: the configs ranked (in the sweep's order), the best and the knee
    (None when nothing was ranked), at `tolerance`, the ties at the knee that the order of
    a loader argument's values decided (`listed_first`), and the cheaper configs measured
    within the tolerance of the knee but not picked (`peers`, `cheaper_peers`). The findings
    pass reads it."""

    ranked: list[ConfigResult]
    best: ConfigResult | None
    knee: ConfigResult | None
    tolerance: float
    listed_first: list[ListedFirst] = field(default_factory=list)
    peers: list[Peer] = field(default_factory=list)


def rank(results: Sequence[ConfigResult], *, tolerance: float = DEFAULT_TOLERANCE) -> Ranking:
    """The knee pass over `results` (summarised and judged)."""
    ranking = Ranking(rankable(results), best_of(results), find_knee(results, tolerance=tolerance), tolerance,
                      listed_first_ties(results, tolerance=tolerance))
    return replace(ranking, peers=cheaper_peers(ranking))


def cheaper_peers(ranking: Ranking) -> list[Peer]:
    """The ranked configs before the knee in the structural order (fewer workers, settings off),
    of its cache state, measured within the tolerance of the knee's own throughput and no dearer
    than it on any measured cost (NOTE [cost order], the two alone), but not picked: outside the
    tolerance of the best, where the knee is inside. The pick between them and the knee rests on
    less than the tolerance: a rerun may pick one of them."""
    knee, best = ranking.knee, ranking.best
    if knee is None or best is None or knee.summary is None or best.summary is None:
        return []
    k, b = knee.summary.samples_per_s, best.summary.samples_per_s
    out = []
    for r in ranking.ranked:
        s = r.summary
        if (s is None or r is knee or r.cache != knee.cache
                or r.settings.structural_key() >= knee.settings.structural_key()
                or s.samples_per_s < (1.0 - ranking.tolerance) * k or qualifies(r, best, ranking.tolerance)
                or not any(x is r for x in cheapest_pool([knee, r]))):
            continue
        out.append(Peer(r.settings, s.samples_per_s, below_best=1.0 - s.samples_per_s / b if b > 0 else 0.0,
                        repeats=s.repeats))
    return out


def best_of(results: Sequence[ConfigResult]) -> ConfigResult | None:
    """The rankable config with the highest median throughput (ties: the structural order)."""
    ok = rankable(results)
    if not ok:
        return None
    return max(ok, key=lambda r: (r.summary.samples_per_s, [-x for x in r.settings.structural_key()]))  # type: ignore[union-attr]


def qualifies(r: ConfigResult, best: ConfigResult, tolerance: float) -> bool:
    """Within `tolerance` (fraction) of the best's median throughput, or within noise of it: with
    repeats on both, its fastest repeat reaches the best's median and its median is at most
    NOISE_CAP x tolerance below (a config clearly slower never counts as equal, however
    spread out the best's repeats are)."""
    s, b = r.summary, best.summary
    assert s is not None and b is not None
    if s.samples_per_s >= b.samples_per_s * (1.0 - tolerance):
        return True
    if s.repeats > 1 and b.repeats > 1:
        return (s.samples_per_s_max or 0.0) >= b.samples_per_s and s.samples_per_s >= b.samples_per_s * (
            1.0 - NOISE_CAP * tolerance
        )
    return False


def startup_s(r: ConfigResult) -> float | None:
    """First batch plus the mean gap at an epoch start (median over repeats), in seconds."""
    s = r.summary
    if s is None:
        return None
    gaps = [g for t in r.trials for g in t.epoch_gap_s]
    return s.first_batch_s + (sum(gaps) / len(gaps) if gaps else 0.0)


def _cost(r: ConfigResult, name: str) -> float | None:
    s = r.summary
    if s is None:
        return None
    if name == "memory":
        return None if s.memory_pss_bytes is None else float(s.memory_pss_bytes)
    if name == "startup":
        return startup_s(r)
    return s.cpu_util_pct  # cpu: percent of one core (margin 10 = 0.1 core)


def cheapest_pool(candidates: Sequence[ConfigResult]) -> list[ConfigResult]:
    """The configs left after the measured cost filters (NOTE [cost order]): those the
    structural key decides between. Raises ValueError when `candidates` is empty."""
    if not candidates:
        raise ValueError("cheapest of no configs")
    pool = list(candidates)
    for name, rel, margin in _COSTS:
        values = [_cost(r, name) for r in pool]
        if any(v is None for v in values):
            continue
        low = min(v for v in values if v is not None)
        pool = [r for r, v in zip(pool, values) if v is not None and v <= low * (1.0 + rel) + margin]
    return pool


def cheapest(candidates: Sequence[ConfigResult]) -> ConfigResult:
    """The config that costs least as measured (NOTE [cost order]). Raises ValueError when
    `candidates` is empty."""
    return min(cheapest_pool(candidates), key=lambda r: r.settings.structural_key())


def find_knee(
    results: Sequence[ConfigResult], *, tolerance: float = DEFAULT_TOLERANCE,
    among: Callable[[ConfigResult], bool] | None = None,
) -> ConfigResult | None:
    """The cheapest measured config (NOTE [cost order]) that `qualifies` against the best, or
    None when no config was measured. `among` limits the candidates (not the best)."""
    best = best_of(results)
    if best is None:
        return None
    candidates = [r for r in rankable(results) if qualifies(r, best, tolerance) and (among is None or among(r))]
    return cheapest(candidates or [best])


def _listed(settings: LoaderSettings) -> dict[str, tuple[Any, int]]:
    """The settings without a known cost order, {name: (value, its position in the user's
    list)}: the grid axes so declared (`Axis.listed`: the decoder) and the loader arguments."""
    out = {a.name: (getattr(settings, a.name), settings.listed_at(a.name)) for a in GRID_AXES if a.listed}
    out.update({k: (v, i) for (k, v), i in zip(settings.loader_args, settings.loader_arg_order)})
    return out


def listed_first_ties(results: Sequence[ConfigResult], *, tolerance: float = DEFAULT_TOLERANCE) -> list[ListedFirst]:
    """Where the user's listing decided the knee (NOTE [cost order]): per loader argument (or
    grid axis without a cost order, `Axis.listed`) of the knee, when configs that differ from
    it only in that setting's value were left equal to it (within the tolerance of the best,
    and as cheap as measured), a ListedFirst with the knee's value and theirs, in the order
    listed. [] when none was."""
    knee = find_knee(results, tolerance=tolerance)
    best = best_of(results)
    if knee is None or best is None:
        return []
    candidates = [r for r in rankable(results) if qualifies(r, best, tolerance)]
    pool = cheapest_pool(candidates or [best])
    tied: dict[str, list[tuple[int, Any]]] = {}
    mine = _listed(knee.settings)
    as_knee = {a.name: getattr(knee.settings, a.name) for a in GRID_AXES if a.listed}
    for r in pool:
        theirs = _listed(r.settings)
        differ = [k for k in mine if k not in theirs or theirs[k][0] != mine[k][0]]
        if len(differ) != 1 or replace(r.settings, loader_args=knee.settings.loader_args, **as_knee) != knee.settings:
            continue
        name = differ[0]
        tied.setdefault(name, []).append((theirs[name][1], theirs[name][0]))
    return [ListedFirst(name, mine[name][0], [v for _, v in sorted(values, key=lambda x: x[0])])
            for name, values in tied.items()]
