"""Several ranks and nodes in words: the per-node view of a config with the node and rank that
bind (`Analysis.per_node`), the what-if ranks=N prediction (`Analysis.what_if_ranks`) and a rank
the sweep lost (`SweepRecord.lost`). analysis/ranks.py decides; this module only words."""

from __future__ import annotations

from loaderbench.conclusions import NodeRow, PerNode, RanksAnswer, WhyNoPrediction
from loaderbench.render.findings import Name, describe
from loaderbench.results import LostRank


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _node_name(node: int, host: str | None) -> str:
    return f"node {node}" + (f" ({host})" if host else "")


def _numa(on: bool | None) -> str:
    if on is None:
        return ""
    return ", workers on the GPU's NUMA node" if on else ", workers NOT on the GPU's NUMA node (bind them: numactl)"


def _node_line(row: NodeRow) -> str:
    n = row.figures
    parts = [f"{n.samples_per_s:,.0f} samples/s", f"stall {n.stall_fraction:.0%}"]
    if n.cpu_util_pct is not None:
        parts.append(f"CPU {n.cpu_util_pct:,.0f}%")
    if n.storage_read_bytes is not None:
        rate = "" if n.storage_mb_per_s is None else f" ({n.storage_mb_per_s:,.1f} MB/s)"
        parts.append(f"read from storage {n.storage_read_bytes / 1e6:,.1f} MB{rate}")
    if row.usable_cpus is not None:
        parts.append(f"{row.usable_cpus} usable CPU{'s' if row.usable_cpus != 1 else ''}")
    mark = " *" if row.binds else ""
    return (f"  {_node_name(n.node_rank, n.host)}, {_ranks(n.ranks)}: " + ", ".join(parts)
            + _numa(row.workers_on_gpu_numa_node) + mark)


def node_lines(view: PerNode | None, name: Name = describe) -> list[str]:
    """The per-node view (`Analysis.per_node`) in words: each node's figures, the node that
    binds marked *, then the node and rank that bind, what the job waited for and what the
    storage served summed over nodes; [] without one (one node)."""
    if view is None:
        return []
    out = [f"Per node ({name(view.settings)}; samples/s summed over the node's ranks, the stall of its slowest "
           "rank; num_workers is per rank):"]
    out.extend(_node_line(row) for row in view.nodes)
    binds = next((row.figures for row in view.nodes if row.binds), None)
    if binds is not None and view.slowest_rank is not None:
        stall = "" if view.slowest_rank_stall_fraction is None else f" (stall {view.slowest_rank_stall_fraction:.0%})"
        text = (f"Binds: {_node_name(binds.node_rank, binds.host)}, rank {view.slowest_rank}{stall}: every step "
                "waits for its data, so the job runs at its pace")
    else:
        text = "Binds: not known"
    if view.step_stall_fraction is not None:
        text += (f"; the job waited for data {view.step_stall_fraction:.0%} of its step time (at each step, the rank "
                 "whose batch came last)")
    if view.job_storage_mb_per_s is not None:
        text += f"; the storage served {view.job_storage_mb_per_s:,.1f} MB/s summed over the nodes"
    return out + [text + "."]


_NO_ANSWER = {
    WhyNoPrediction.NOTHING_MEASURED: "no recommended config was measured",
}


def what_if_ranks_lines(what: RanksAnswer, name: Name = describe) -> list[str]:
    """The what-if ranks=N prediction (`Analysis.what_if_ranks`, NOTE [what-if ranks] in
    analysis/ranks.py) in words, labelled a prediction."""
    n = what.ranks
    if (what.why is not None or what.settings is None or what.samples_per_s is None or what.stall_fraction is None
            or what.step_s is None):
        why = _NO_ANSWER.get(what.why, "nothing to predict from") if what.why is not None else "nothing to predict from"
        return [f"What if {n} ranks: no prediction ({why})."]
    k = what.from_ranks
    how = ("independent draws" if what.correlation is None
           else f"the ranks' measured wait correlation {what.correlation:.2f}, counted as "
                f"{what.draws or 0.0:.1f} independent groups")
    return [
        f"What if {n} ranks (a prediction from the per-step data-waits of this run's {k} rank{'s' if k != 1 else ''} "
        f"({name(what.settings)}), each added rank with a loader and CPUs like the measured ones: each step waits "
        f"for the last rank's data, the per-step maximum over ranks, with {how}; not a measurement): "
        f"stall ~{what.stall_fraction:.0%}, ~{what.samples_per_s:,.0f} samples/s summed over ranks, step "
        f"~{what.step_s * 1e3:,.1f} ms (this run: stall {what.measured_stall_fraction or 0.0:.0%} as the per-step "
        f"maximum, {what.measured_samples_per_s or 0.0:,.0f} samples/s)."
    ]


def lost_line(lost: LostRank) -> str:
    """A rank the sweep lost (`SweepRecord.lost`), named by its node on several nodes: the words
    the failed config's row says too."""
    who = (f"rank {lost.rank}" if lost.node_rank is None
           else f"node {lost.node_rank} ({lost.host or '?'}) rank {lost.rank}")
    return f"{who}: stopped answering (no heartbeat for {lost.after_s:g} s): its node was lost"
