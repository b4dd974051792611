"""A distributed job beyond its ranks' own rows: each node's figures, and what N ranks would see.

Pure (no torch, no I/O), over the raw per-batch samples that every rank's trial keeps.

NOTE [what-if ranks]
    In synchronous data-parallel training a step ends when every rank has its batch and the
    gradient all-reduce is done, so the step waits for the rank whose data came last: the
    per-step maximum over ranks of the data-wait. From one run of k ranks (k = 1 for a
    single-process sweep), per measured step i:
        M_i = max over the k ranks of data_wait_s[i]          (the wait the step saw)
        T_i = the step time (mean over the ranks of step_s[i]; they move in lockstep)
        R_i = T_i - M_i                                        (compute, the all-reduce, the rest)
    N ranks are N / k groups like the measured one. With the groups independent, the wait a
    step sees is the maximum of e = N / k draws from the measured M_i; its expectation over the
    empirical distribution (sorted M_(1) <= ... <= M_(m)) is
        E_e = sum_j M_(j) * ((j / m)^e - ((j - 1) / m)^e)
    (the distribution of a maximum of e draws is F^e; exact for integer e, the same formula
    for a fractional one). When the run had 2 ranks or more, the ranks' waits may be
    correlated (a shared storage slow for everyone at once): with rho the mean pairwise
    Pearson correlation of the ranks' per-step waits, the draws count as
        e_eff = e / (1 + (e - 1) * rho)
    independent ones (Kish's design effect for the mean of e equally correlated draws, n_eff =
    n / (1 + (n - 1) rho), used here for the maximum: a heuristic, exact at rho = 0 and rho = 1).
    A negative rho counts as 0. Then
        step_s = mean(R) + E_e_eff,  stall = E_e_eff / step_s,  samples/s = N * B / step_s
    for B samples per rank per batch. With N = k it gives back the run's own samples/s and its
    per-step-maximum stall. The all-reduce's own cost at N ranks is kept at the measured one.
    It is a prediction, labelled as one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from loaderbench.model import NodeFigures, Summary, Trial


def rank_trials_of(trial: Trial) -> list[Trial]:
    """The ranks' own trials of one repeat (index = rank): `rank_trials`, or the trial itself for
    a single process."""
    return [Trial.from_dict(d) for d in trial.rank_trials] if trial.rank_trials else [trial]


def _samples_per_s(t: Trial) -> float:
    total_s = sum(t.step_s)
    return t.samples / total_s if total_s > 0 else 0.0


def _stall(t: Trial) -> float:
    total_s = sum(t.step_s)
    return min(1.0, max(0.0, sum(t.data_wait_s) / total_s)) if total_s > 0 else 0.0


def _sum_or_none(values: Sequence[float | int | None]) -> float | None:
    return None if not values or any(v is None for v in values) else float(sum(v for v in values if v is not None))


def _median_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None


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
        ranks = rank_trials_of(trial)
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
        out.append(NodeFigures(
            node_rank=node,
            host=rows[0][0][1].host,
            ranks=[r for r, _ in rows[0]],
            samples_per_s=float(statistics.median(sum(_samples_per_s(t) for _, t in row) for row in rows)),
            stall_fraction=float(statistics.median(max(_stall(t) for _, t in row) for row in rows)),
            cpu_util_pct=_median_or_none([_sum_or_none([t.cpu_util_pct for _, t in row]) for row in rows]),
            storage_read_bytes=(lambda v: None if v is None else int(v))(
                _median_or_none([_sum_or_none([t.storage_read_bytes for _, t in row]) for row in rows])),
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
    summary.job_storage_mb_per_s = None if any(r is None for r in rates) else float(sum(rates))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# What N ranks would see (NOTE [what-if ranks]).


@dataclass(frozen=True)
class RanksWhatIf:
    """The prediction of NOTE [what-if ranks] for one config at `ranks` ranks, from a run of
    `from_ranks`. Seconds per step, samples/s summed over the ranks; `correlation` is the
    measured rho (None with one rank measured: independent draws); `draws` is e_eff.
    `measured_*`: the run's own samples/s and per-step-maximum stall, for reference."""

    config: str
    ranks: int
    from_ranks: int
    steps: int
    samples_per_s: float
    stall_fraction: float
    step_s: float
    wait_s: float
    correlation: float | None
    draws: float
    measured_samples_per_s: float
    measured_stall_fraction: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def expected_max(values: Sequence[float], draws: float) -> float:
    """The expected maximum of `draws` independent draws from the empirical distribution of
    `values` (NOTE [what-if ranks]); `draws` may be fractional. Raises ValueError for no values
    or draws <= 0.

    >>> expected_max([0.0, 1.0], 1), expected_max([0.0, 1.0], 2)
    (0.5, 0.75)
    """
    if not values or draws <= 0:
        raise ValueError("expected_max needs values and draws > 0")
    xs = sorted(values)
    m = len(xs)
    return float(sum(x * ((j / m) ** draws - ((j - 1) / m) ** draws) for j, x in enumerate(xs, start=1)))


def _pearson(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 2:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    if va <= 0 or vb <= 0:
        return None
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / math.sqrt(va * vb)


def rank_correlation(trials: Sequence[Trial]) -> float | None:
    """Mean pairwise Pearson correlation of the ranks' per-step data-waits, over the pairs of
    ranks of every repeat (weighted by their steps); None with one rank or no variance."""
    total = weight = 0.0
    for trial in trials:
        ranks = rank_trials_of(trial)
        n = min((len(t.data_wait_s) for t in ranks), default=0)
        for i in range(len(ranks)):
            for j in range(i + 1, len(ranks)):
                rho = _pearson(ranks[i].data_wait_s[:n], ranks[j].data_wait_s[:n])
                if rho is not None:
                    total += rho * n
                    weight += n
    return total / weight if weight else None


def step_waits(trial: Trial) -> tuple[list[float], list[float], float]:
    """Per measured step of one repeat: the maximum data-wait over the ranks (M_i), the step time
    (mean over the ranks, T_i), and the samples per rank per batch (B)."""
    ranks = rank_trials_of(trial)
    n = min(len(t.step_s) for t in ranks)
    waits = [max(t.data_wait_s[i] for t in ranks) for i in range(n)]
    steps = [statistics.fmean(t.step_s[i] for t in ranks) for i in range(n)]
    per_batch = statistics.fmean(t.samples / len(t.step_s) for t in ranks if t.step_s)
    return waits, steps, per_batch


def step_max_stall(trials: Sequence[Trial]) -> float | None:
    """The share of the step time a job waited for the last rank's data (sum of per-step
    maximum waits over the sum of step times), over the repeats; None without steps."""
    waits = steps = 0.0
    for trial in trials:
        w, t, _ = step_waits(trial)
        waits, steps = waits + sum(w), steps + sum(t)
    return min(1.0, waits / steps) if steps > 0 else None


def what_if_ranks(trials: Sequence[Trial], ranks: int, config: str = "") -> RanksWhatIf | None:
    """Predicted samples/s and stall of a config at `ranks` ranks from its measured trials
    (NOTE [what-if ranks]); None when the trials hold no measured step. Raises ValueError for
    ranks < 1."""
    if ranks < 1:
        raise ValueError("ranks must be at least 1")
    measured = [t for t in trials if t.step_s or t.rank_trials]
    parts = [step_waits(t) for t in measured]
    waits = [w for p in parts for w in p[0]]
    steps = [s for p in parts for s in p[1]]
    if not waits:
        return None
    k = len(rank_trials_of(measured[0]))
    per_batch = statistics.fmean(p[2] for p in parts)
    rho = rank_correlation(measured) if k > 1 else None
    e = ranks / k
    draws = e / (1 + (e - 1) * max(0.0, rho or 0.0))
    wait_s = expected_max(waits, draws)
    rest_s = statistics.fmean(t - w for t, w in zip(steps, waits))
    step_s = rest_s + wait_s
    mean_step = statistics.fmean(steps)
    return RanksWhatIf(
        config=config, ranks=ranks, from_ranks=k, steps=len(waits),
        samples_per_s=ranks * per_batch / step_s if step_s > 0 else 0.0,
        stall_fraction=min(1.0, wait_s / step_s) if step_s > 0 else 0.0,
        step_s=step_s, wait_s=wait_s, correlation=rho, draws=draws,
        measured_samples_per_s=k * per_batch / mean_step if mean_step > 0 else 0.0,
        measured_stall_fraction=step_max_stall(measured) or 0.0,
    )
