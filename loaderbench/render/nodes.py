"""Several nodes in words: the per-node view of the recommended config, the node and rank that
bind, and the what-if ranks=N prediction (analysis/ranks.py decides; this module only words)."""

from __future__ import annotations

from typing import Any

from loaderbench.model import ConfigResult, NodeFigures, ResultSet


def _row(rs: ResultSet) -> ConfigResult | None:
    """The recommended config's row, else the fastest measured one (with per-node figures)."""
    rows = [r for r in rs.results if r.status == "ok" and r.summary is not None and r.summary.nodes]
    rec = rs.recommendation
    if rec is not None and rec.settings is not None:
        mine = next((r for r in rows if r.settings == rec.settings), None)
        if mine is not None:
            return mine
    return max(rows, key=lambda r: r.summary.samples_per_s, default=None)  # type: ignore[union-attr]


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _node_name(node: int, host: str | None) -> str:
    return f"node {node}" + (f" ({host})" if host else "")


def _numa(facts: dict[str, Any]) -> str:
    on = facts.get("workers_on_gpu_numa_node")
    if on is None:
        return ""
    return ", workers on the GPU's NUMA node" if on else ", workers NOT on the GPU's NUMA node (bind them: numactl)"


def _node_line(n: NodeFigures, facts: dict[str, Any], binds: bool) -> str:
    parts = [f"{n.samples_per_s:,.0f} samples/s", f"stall {n.stall_fraction:.0%}"]
    if n.cpu_util_pct is not None:
        parts.append(f"CPU {n.cpu_util_pct:,.0f}%")
    if n.storage_read_bytes is not None:
        rate = "" if n.storage_mb_per_s is None else f" ({n.storage_mb_per_s:,.1f} MB/s)"
        parts.append(f"read from storage {n.storage_read_bytes / 1e6:,.1f} MB{rate}")
    if facts.get("usable_cpus") is not None:
        parts.append(f"{facts['usable_cpus']} usable CPU{'s' if facts['usable_cpus'] != 1 else ''}")
    mark = " *" if binds else ""
    return f"  {_node_name(n.node_rank, n.host)}, {_ranks(n.ranks)}: " + ", ".join(parts) + _numa(facts) + mark


def node_lines(rs: ResultSet) -> list[str]:
    """Several nodes: the per-node figures of the recommended config (else the fastest), the
    node and rank that bind, and what the storage served summed over nodes; [] for one node."""
    row = _row(rs)
    if row is None or row.summary is None:
        return []
    s = row.summary
    env_nodes = {int(n["node_rank"]): n for n in ((rs.environment or {}).get("distributed") or {}).get("nodes") or []
                 if isinstance(n, dict) and n.get("node_rank") is not None}
    out = [f"Per node [{row.key()}] (samples/s summed over the node's ranks, the stall of its slowest rank; "
           "num_workers is per rank):"]
    for n in s.nodes:
        out.append(_node_line(n, env_nodes.get(n.node_rank, {}), n.node_rank == s.slowest_node))
    binds = next((n for n in s.nodes if n.node_rank == s.slowest_node), None)
    if binds is not None and s.slowest_rank is not None:
        stall = s.rank_stall_fraction[s.slowest_rank] if s.slowest_rank < len(s.rank_stall_fraction) else s.stall_fraction
        text = (f"Binds: {_node_name(binds.node_rank, binds.host)}, rank {s.slowest_rank} "
                f"(stall {stall:.0%}): every step waits for its data, so the job runs at its pace")
    else:
        text = "Binds: not known"
    if s.step_stall_fraction is not None:
        text += (f"; the job waited for data {s.step_stall_fraction:.0%} of its step time (at each step, the rank "
                 "whose batch came last)")
    if s.job_storage_mb_per_s is not None:
        text += f"; the storage served {s.job_storage_mb_per_s:,.1f} MB/s summed over the nodes"
    return out + [text + "."]


def what_if_ranks_lines(what: dict[str, Any]) -> list[str]:
    """The what-if ranks=N prediction (analysis.ranks.what_if_ranks, `analysis["what_if_ranks"]`)
    in words, labelled a prediction."""
    n = what["ranks"]
    if "why" in what:
        return [f"What if {n} ranks: no prediction ({what['why']})."]
    k = what["from_ranks"]
    how = ("independent draws" if what.get("correlation") is None
           else f"the ranks' measured wait correlation {what['correlation']:.2f}, counted as "
                f"{what['draws']:.1f} independent groups")
    return [
        f"What if {n} ranks (a prediction from the per-step data-waits of this run's {k} rank{'s' if k != 1 else ''} "
        f"[{what['config']}], each added rank with a loader and CPUs like the measured ones: each step waits for the "
        f"last rank's data, the per-step maximum over ranks, with {how}; not a measurement): stall ~{what['stall_fraction']:.0%}, ~{what['samples_per_s']:,.0f} samples/s summed "
        f"over ranks, step ~{what['step_s'] * 1e3:,.1f} ms (this run: stall {what['measured_stall_fraction']:.0%} "
        f"as the per-step maximum, {what['measured_samples_per_s']:,.0f} samples/s)."
    ]
