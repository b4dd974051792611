"""The ranks pass, the last of the analysis: a job beyond its ranks' own rows. On several nodes
the per-node view of the recommended config (from each node's figures, which the summaries
pass wrote: statistics.add_job_statistics), and what N ranks would see (`--what-if ranks=N`).

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
from collections.abc import Mapping, Sequence
from typing import Any

from loaderbench.analysis.statistics import per_step_max
from loaderbench.conclusions import NodeRow, PerNode, RanksAnswer, WhyNoPrediction
from loaderbench.model import ConfigResult, LoaderSettings, Trial

# ---------------------------------------------------------------------------------------------
# The per-node view of one config.


def per_node(results: Sequence[ConfigResult], base: LoaderSettings | None,
             environment: Mapping[str, Any] | None) -> PerNode | None:
    """A sweep on several nodes: the per-node view of the recommended config (`base`), else of
    the fastest measured config with per-node figures (`Summary.nodes`), with each node's
    usable CPUs and NUMA placement from the environment record (`environment["distributed"]
    ["nodes"]`: orchestration/nodes.py node_records), the node of the slowest rank marked as
    the one that binds. None for one node."""
    rows = [r for r in results if r.status == "ok" and r.summary is not None and r.summary.nodes]
    row = next((r for r in rows if base is not None and r.settings == base), None)
    if row is None:
        row = max(rows, key=lambda r: r.summary.samples_per_s, default=None)  # type: ignore[union-attr]
    if row is None or row.summary is None:
        return None
    s = row.summary
    dist = (environment or {}).get("distributed") or {}
    facts = {int(n["node_rank"]): n for n in dist.get("nodes") or []
             if isinstance(n, Mapping) and n.get("node_rank") is not None}
    known = s.slowest_node is not None and s.slowest_rank is not None
    stall = None
    if known and s.slowest_rank is not None:
        stall = (s.rank_stall_fraction[s.slowest_rank] if s.slowest_rank < len(s.rank_stall_fraction)
                 else s.stall_fraction)
    nodes = []
    for n in s.nodes:
        f = facts.get(n.node_rank, {})
        usable, on = f.get("usable_cpus"), f.get("workers_on_gpu_numa_node")
        nodes.append(NodeRow(figures=n, usable_cpus=usable if isinstance(usable, int) else None,
                             workers_on_gpu_numa_node=on if isinstance(on, bool) else None,
                             binds=known and n.node_rank == s.slowest_node))
    return PerNode(settings=row.settings, nodes=nodes, slowest_rank=s.slowest_rank if known else None,
                   slowest_rank_stall_fraction=stall, step_stall_fraction=s.step_stall_fraction,
                   job_storage_mb_per_s=s.job_storage_mb_per_s)


# ---------------------------------------------------------------------------------------------
# What N ranks would see (NOTE [what-if ranks]).


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
        ranks = trial.per_rank()
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
    ranks = trial.per_rank()
    waits, steps = per_step_max([t.data_wait_s for t in ranks], [t.step_s for t in ranks])
    per_batch = statistics.fmean(t.samples / len(t.step_s) for t in ranks if t.step_s)
    return waits, steps, per_batch


def what_if_ranks(trials: Sequence[Trial], ranks: int, settings: LoaderSettings | None = None) -> RanksAnswer | None:
    """Predicted samples/s and stall of a config (`settings`) at `ranks` ranks from its measured
    trials (NOTE [what-if ranks]); None when the trials hold no measured step. Raises ValueError
    for ranks < 1."""
    if ranks < 1:
        raise ValueError("ranks must be at least 1")
    measured = [t for t in trials if t.step_s or t.rank_trials]
    parts = [step_waits(t) for t in measured]
    waits = [w for p in parts for w in p[0]]
    steps = [s for p in parts for s in p[1]]
    if not waits:
        return None
    k = len(measured[0].per_rank())
    per_batch = statistics.fmean(p[2] for p in parts)
    rho = rank_correlation(measured) if k > 1 else None
    e = ranks / k
    draws = e / (1 + (e - 1) * max(0.0, rho or 0.0))
    wait_s = expected_max(waits, draws)
    rest_s = statistics.fmean(t - w for t, w in zip(steps, waits))
    step_s = rest_s + wait_s
    mean_step = statistics.fmean(steps)
    return RanksAnswer(
        ranks=ranks, settings=settings, from_ranks=k, steps=len(waits),
        samples_per_s=ranks * per_batch / step_s if step_s > 0 else 0.0,
        stall_fraction=min(1.0, wait_s / step_s) if step_s > 0 else 0.0,
        step_s=step_s, wait_s=wait_s, correlation=rho, draws=draws,
        measured_samples_per_s=k * per_batch / mean_step if mean_step > 0 else 0.0,
        measured_stall_fraction=min(1.0, sum(waits) / sum(steps)) if sum(steps) > 0 else 0.0,
    )


def answer_ranks(ranks: int, results: Sequence[ConfigResult], base: LoaderSettings | None) -> RanksAnswer:
    """The answer to `--what-if ranks=N` for the recommended config (`base`; None when nothing
    was measured), from its measured trials (`what_if_ranks`); `why` NOTHING_MEASURED when that
    config has no measured step."""
    row = None if base is None else next(
        (r for r in results if r.status == "ok" and r.trials and r.settings == base), None)
    found = None if row is None else what_if_ranks(row.trials, ranks, row.settings)
    return found or RanksAnswer(ranks=ranks, why=WhyNoPrediction.NOTHING_MEASURED)
