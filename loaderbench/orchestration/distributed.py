"""Distributed sweeps: every config runs on all ranks at once, as in data-parallel training.

NOTE [distributed sweep]
    `torchrun --nproc-per-node N -m loaderbench sweep ...` starts N copies of the sweep, one per
    rank (`loaderbench sweep --nproc-per-node N` starts the same through torch's elastic launcher,
    the library behind torchrun). Rank 0 is the *leader*: it alone plans, validates, writes the
    result file and prints. Every other rank is a *follower* that runs what the leader asks.
    Per trial (one config, one repeat):
      1. the leader posts the job in the job's key-value store (torchrun's own TCPStore, or one
         that rank 0 hosts at MASTER_ADDR:MASTER_PORT under other launchers);
      2. every rank measures it in a fresh process of its own (isolation.run_isolated, so the
         watchdog and crash handling are the single-process ones). Those measuring processes
         form one process group for the trial (NCCL on GPUs, gloo on CPU; a gloo group beside
         NCCL carries the loop's control decisions), each over its own shard of the samples
         (`RankShard` / torch's DistributedSampler) and its own GPU (cuda:LOCAL_RANK);
      3. a barrier before and after the loop, and a collective decision (all ranks agree) where
         the warm-up ends and where the window ends, so every rank measures the same window of
         the same batch indices. The step ends with the gradient all-reduce (DDP for a model
         step; a one-element all-reduce for sleep/spin/none, standing for it), so a rank whose
         loader is late holds every rank back, as in synchronous training;
      4. each rank posts its outcome; when one rank fails or hangs it says so in the store, and
         the others stop their measuring processes at once (within 0.2 s) instead of waiting in
         a collective until the watchdog;
      5. the leader merges the ranks' trials (`merge_trials`): throughput is the sum over ranks;
         every other statistic, and so the stall fraction and the verdict, is the slowest rank's
         (the highest stall fraction: in synchronous data-parallel training the slowest loader
         holds every GPU back). Each rank's own trial is kept in the result file.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
import time as _time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from loaderbench.machine.processes import signal_name
from loaderbench.measure.isolation import Outcome, run_isolated
from loaderbench.model import Ceiling, Note, Trial, TrialJob

STOPPED = "stopped because another rank failed"


def lost_error(after_s: float) -> str:
    """The error of a rank whose heartbeat stopped (nodes.Liveness)."""
    return f"stopped answering (no heartbeat for {after_s:g} s): its node was lost"
_STORE_PREFIX = "loaderbench/"


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the job, from the variables torchrun sets for every rank."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT
    node_rank: int = 0
    nnodes: int = 1
    host: str = field(default="", compare=False)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def hosts_store(self) -> bool:
        """Rank 0 hosts the job's store unless torchrun's agent does."""
        return self.leader and not self.agent_store

    @classmethod
    def from_environ(cls, env: Mapping[str, str] = os.environ) -> RankInfo | None:
        """The job's layout, or None outside a launcher (no RANK and WORLD_SIZE).

        The node count is GROUP_WORLD_SIZE (torchrun), else WORLD_SIZE / LOCAL_WORLD_SIZE. The
        node rank (NOTE [several nodes] in nodes.py) is LOADERBENCH_NODE_RANK (`sweep
        --node-rank`), else SLURM_NODEID (under Slurm, when SLURM_NNODES is the node count),
        else torchrun's GROUP_RANK, else RANK / LOCAL_WORLD_SIZE. Under torchrun on several
        nodes the rank is node rank x LOCAL_WORLD_SIZE + LOCAL_RANK, so rank 0 runs on node 0.
        Raises UsageError when the variables are present but incomplete or inconsistent.
        """
        from loaderbench.errors import UsageError

        if "RANK" not in env or "WORLD_SIZE" not in env:
            return None
        try:
            rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
            local_rank = int(env.get("LOCAL_RANK", env["RANK"]))
            local_world = int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]))
            if "MASTER_PORT" not in env:
                raise UsageError(
                    "RANK and WORLD_SIZE are set but MASTER_PORT is not: the launcher must set "
                    "MASTER_ADDR and MASTER_PORT (torchrun does)"
                )
            port = int(env["MASTER_PORT"])
        except ValueError:
            raise UsageError(
                "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and MASTER_PORT must be integers "
                "(start the distributed sweep with torchrun or --nproc-per-node)"
            ) from None
        if not (0 <= rank < world and 0 <= local_rank < local_world <= world):
            raise UsageError(
                f"inconsistent launcher variables: RANK={rank} WORLD_SIZE={world} "
                f"LOCAL_RANK={local_rank} LOCAL_WORLD_SIZE={local_world}"
            )
        agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        nnodes, node_rank, how = _node_of(env, rank, world, local_world)
        if not 0 <= node_rank < nnodes:
            raise UsageError(f"node rank {node_rank} ({how}) is outside 0 to {nnodes - 1} for {nnodes} nodes: "
                             "give each node its own --node-rank")
        if agent_store and nnodes > 1 and world == nnodes * local_world:
            rank = node_rank * local_world + local_rank
        return cls(
            rank=rank,
            world_size=world,
            local_rank=local_rank,
            local_world_size=local_world,
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=port,
            agent_store=agent_store,
            node_rank=node_rank,
            nnodes=nnodes,
            host=socket.gethostname(),
        )

    def name(self) -> str:
        """`rank 3` on one node, `node 1 (host) rank 3` on several."""
        return f"rank {self.rank}" if self.nnodes <= 1 else f"node {self.node_rank} ({self.host}) rank {self.rank}"


def _node_of(env: Mapping[str, str], rank: int, world: int, local_world: int) -> tuple[int, int, str]:
    """(node count, node rank, where the node rank came from) from the launcher's variables."""
    from loaderbench.errors import UsageError
    from loaderbench.orchestration.nodes import NODE_RANK_VAR

    try:
        nnodes = int(env.get("GROUP_WORLD_SIZE") or max(1, world // max(1, local_world)))
        if env.get(NODE_RANK_VAR):
            return nnodes, int(env[NODE_RANK_VAR]), "--node-rank"
        if env.get("SLURM_NODEID") and env.get("SLURM_NNODES") == str(nnodes):
            return nnodes, int(env["SLURM_NODEID"]), "SLURM_NODEID"
        if env.get("GROUP_RANK"):
            return nnodes, int(env["GROUP_RANK"]), "GROUP_RANK"
    except ValueError:
        raise UsageError(f"GROUP_WORLD_SIZE, GROUP_RANK, SLURM_NODEID and {NODE_RANK_VAR} must be integers") from None
    return nnodes, rank // max(1, local_world), "RANK / LOCAL_WORLD_SIZE"


def check_ranks(ranks_per_node: int, *, gpus: int, usable_cpus: int, device: str, flag: str) -> None:
    """Refuse a layout that cannot be measured: more ranks on this node than its GPUs when the
    step runs on CUDA (one GPU per rank, cuda:LOCAL_RANK), or than its usable CPUs (each rank's
    main process needs one). Raises UsageError naming `flag`."""
    from loaderbench.errors import UsageError

    on_gpu = gpus > 0 and device != "cpu"
    if on_gpu and ranks_per_node > gpus:
        raise UsageError(
            f"{flag} {ranks_per_node}: {gpus} CUDA GPU{'s' if gpus != 1 else ''} visible on this node and "
            f"each rank needs its own; use {flag} {gpus}, or --device cpu to run the ranks on the CPU"
        )
    if ranks_per_node > usable_cpus:
        raise UsageError(
            f"{flag} {ranks_per_node}: more ranks than the {usable_cpus} usable CPUs of this node "
            f"(each rank's main process needs one); use at most {flag} {usable_cpus}"
        )


# ---------------------------------------------------------------------------------------------
# Merging the ranks' results (pure).


def slowest(trials: list[Trial]) -> int:
    """Index of the rank that held the job back: the highest stall fraction (data-wait share of
    its step time); ties go to the lower throughput, then the lower rank."""
    from loaderbench.analysis.statistics import trial_samples_per_s, trial_stall_fraction

    return max(
        range(len(trials)),
        key=lambda i: (trial_stall_fraction(trials[i]), -trial_samples_per_s(trials[i]), -i),
    )


def _sum_or_none(values: list[float | int | None]) -> Any:
    return None if any(v is None for v in values) else sum(values)  # type: ignore[misc]


def merge_trials(trials: list[Trial], names: list[str] | None = None) -> Trial:
    """One trial for the whole job from each rank's trial of one repeat (index = rank).

    Per NOTE [distributed sweep]: a copy of the slowest rank's trial (`slowest`), so its
    per-batch data-wait, compute and step times decide the stall fraction and the verdict, with
    the node-wide sums of `cpu_time_s`, `cpu_util_pct`, `processes`, memory and the loader
    ceiling (`loader_alone_samples_per_s`, or its bound: `_merged_ceiling`) over ranks, `rank`/`world_size` set, and every rank's
    own trial in `rank_trials`. Throughput is summed by `stats.trial_samples_per_s`, which reads
    `rank_trials`. Notes are tagged with `names[rank]` (default `rank R`). Raises ValueError for
    no trials.
    """
    if not trials:
        raise ValueError("merge_trials needs at least one rank's trial")
    k = slowest(trials)
    notes: list[Note] = []
    for r, t in enumerate(trials):
        for note in t.notes:
            who = names[r] if names else f"rank {r}"
            tagged = note if len(trials) == 1 else Note(note.kind, f"{who}: {note.message}")
            if tagged not in notes:
                notes.append(tagged)
    own = [replace(t, rank=r, world_size=len(trials), rank_trials=[]).to_dict() for r, t in enumerate(trials)]
    return replace(
        trials[k],
        rank=k,
        world_size=len(trials),
        rank_trials=own,
        cpu_time_s=_sum_or_none([t.cpu_time_s for t in trials]),
        cpu_util_pct=_sum_or_none([t.cpu_util_pct for t in trials]),
        main_cpu_util_pct=trials[k].main_cpu_util_pct,
        # Each rank's reading of what else ran counts the other ranks' trees as "other" where
        # they share CPUs: no job-wide figure is derived from them.
        other_cpu_util_pct=None,
        steal_cpu_util_pct=None,
        processes=_sum_or_none([t.processes for t in trials]),
        memory_uss_bytes=_sum_or_none([t.memory_uss_bytes for t in trials]),
        memory_pss_bytes=_sum_or_none([t.memory_pss_bytes for t in trials]),
        loader_alone_samples_per_s=_sum_or_none([t.loader_alone_samples_per_s for t in trials]),
        **_merged_ceiling(trials),
        notes=notes,
    )


def _merged_ceiling(trials: list[Trial]) -> dict[str, Any]:
    """The job's loader-ceiling method (NOTE [loader ceiling]): sustained when every rank's is;
    a bound when any rank's is (at least the sum of every rank's rate or bound, the first
    rank's reason for a bound); nothing known when a rank was not probed."""
    methods = {t.loader_alone_method for t in trials}
    if methods == {"sustained"}:
        return {"loader_alone_method": "sustained"}
    if not methods <= {"sustained", "bound"}:
        return {"loader_alone_method": None, "loader_alone_bound_samples_per_s": None, "loader_alone_reason": None}
    parts = [t.loader_alone_samples_per_s if t.loader_alone_method == "sustained" else t.loader_alone_bound_samples_per_s
             for t in trials]
    return {"loader_alone_method": "bound", "loader_alone_bound_samples_per_s": _sum_or_none(parts),
            "loader_alone_reason": next(t.loader_alone_reason for t in trials if t.loader_alone_method == "bound")}


def merge_ceilings(ceilings: list[Ceiling]) -> Ceiling:
    """The job's compute ceiling from each rank's (index = rank): `Ceiling.merged`."""
    return Ceiling.merged(ceilings)


_PEER_ERRORS = (
    "connection reset by peer",
    "connection closed by peer",
    "remote worker",
    "remote process",
    "distbackenderror",
    "communicator was aborted",
    "broken pipe",
)


def peer_failure(error: str | None) -> bool:
    """Whether a rank's error is the echo of another rank's end (its process group lost a
    peer: gloo's "Connection reset by peer", NCCL's aborted communicator, ...), not a cause."""
    low = (error or "").lower()
    return low == STOPPED or any(p in low for p in _PEER_ERRORS)


def waits_for_peer(stacks: str | None) -> bool:
    """Whether a hung rank's Python stacks (faulthandler's dump, see isolation.dump_stacks) show
    it blocked in a torch.distributed call, i.e. waiting for another rank rather than hung itself."""
    return bool(stacks) and "distributed_c10d.py" in stacks  # type: ignore[operator]


def merge_outcomes(outcomes: list[Outcome], names: list[str] | None = None) -> Outcome:
    """The job's outcome from each rank's (index = rank).

    All ok: the merged trial (`merge_trials`) or ceiling (`merge_ceilings`). Otherwise the
    cause is the first rank that failed on its own (not stopped because another failed, nor
    failing because a peer of its process group went away: `peer_failure`),
    preferring a failure over a hang; among hangs, a rank whose stacks show it was not waiting
    in a collective (`waits_for_peer`), then the rank that reached the fewest batches. The
    error names that rank (`names[rank]`, default `rank R`; on several nodes its node and host).
    """
    if all(o.status == "ok" for o in outcomes):
        if all(o.ceiling is not None for o in outcomes):
            return Outcome(status="ok", ceiling=merge_ceilings([o.ceiling for o in outcomes]))  # type: ignore[misc]
        if all(o.trial is not None for o in outcomes):
            last = [o.last_batch for o in outcomes if o.last_batch is not None]
            return Outcome(
                status="ok",
                trial=merge_trials([o.trial for o in outcomes], names),  # type: ignore[misc]
                last_batch=min(last) if last else None,
            )
    if any(o.status == "interrupted" for o in outcomes):
        return next(o for o in outcomes if o.status == "interrupted")
    bad = [(r, o) for r, o in enumerate(outcomes) if o.status != "ok" and not peer_failure(o.error)]
    if not bad:
        bad = [(r, o) for r, o in enumerate(outcomes) if o.status != "ok"]
    failed = [(r, o) for r, o in bad if o.status == "failed"]
    if failed:
        r, o = failed[0]
    else:
        r, o = min(
            bad,
            key=lambda ro: (
                waits_for_peer(ro[1].detail),
                -1 if ro[1].last_batch is None else ro[1].last_batch,
                ro[0],
            ),
        )
    others = len(outcomes) - 1
    tail = f" (the other {others} rank{'s' if others != 1 else ''} stopped)" if others else ""
    return Outcome(
        status=o.status,
        error=f"{names[r] if names else f'rank {r}'}: {o.error}{tail}",
        last_batch=o.last_batch,
        detail=o.detail,
    )


# ---------------------------------------------------------------------------------------------
# The sweep-level protocol between the leader (rank 0) and the followers, over the job's store.


def open_store(info: RankInfo, *, timeout_s: float, client: bool = False) -> Any:
    """The job's key-value store, under the prefix `loaderbench/`: a client of torchrun's agent
    store, or (other launchers) a TCPStore that rank 0 hosts at MASTER_ADDR:MASTER_PORT
    (`client`: a client even there, for a second connection of rank 0's)."""
    from torch.distributed import PrefixStore, TCPStore

    host_it = info.hosts_store and not client
    if not host_it:
        wait_for_listener(info, timeout_s)
    store = TCPStore(
        info.master_addr,
        info.master_port,
        world_size=None if not host_it else info.world_size,
        is_master=host_it,
        timeout=_dt.timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )
    return PrefixStore(_STORE_PREFIX, store)


def wait_for_listener(info: RankInfo, timeout_s: float, poll_s: float = 0.5) -> None:
    """Block until something accepts TCP connections at MASTER_ADDR:MASTER_PORT (the job's store).

    Checked with a plain socket first: c10d's own client retries for minutes past its timeout
    and prints C++ stack dumps. Raises UsageError after `timeout_s`, naming the address.
    """
    import time

    from loaderbench.errors import UsageError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((info.master_addr, info.master_port), timeout=poll_s).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise UsageError(
                    f"rank {info.rank}: nothing answered at MASTER_ADDR:MASTER_PORT = "
                    f"{info.master_addr}:{info.master_port} within {timeout_s:g} s: start rank 0 "
                    "(torchrun and --nproc-per-node start every rank)"
                ) from None
            time.sleep(poll_s)


def _outcome_to_dict(o: Outcome) -> dict[str, Any]:
    return {
        "status": o.status,
        "trial": None if o.trial is None else o.trial.to_dict(),
        "ceiling": None if o.ceiling is None else o.ceiling.to_dict(),
        "error": o.error,
        "last_batch": o.last_batch,
        "detail": o.detail,
    }


def _outcome_from_dict(d: dict[str, Any]) -> Outcome:
    return Outcome(
        status=d["status"],
        trial=None if d.get("trial") is None else Trial.from_dict(d["trial"]),
        ceiling=None if d.get("ceiling") is None else Ceiling.from_dict(d["ceiling"]),
        error=d.get("error"),
        last_batch=d.get("last_batch"),
        detail=d.get("detail"),
    )


Prepare = Callable[[TrialJob], tuple[dict[str, Any] | None, Note | None]]


def _measure_rank(
    store: Any, info: RankInfo, trial_id: int, job: TrialJob, on_batch: Callable[[int], None] | None,
    *, lost: Callable[[], str | None] | None = None, prepare: Prepare | None = None, measure: Any = None,
) -> Outcome:
    """Run this rank's measuring process for one trial (`measure`: run_isolated, or this rank's
    WarmRunner); stop it early when another rank failed or (`lost()`) stopped answering.
    `prepare(job)` runs first (a follower node's page-cache control: the state reached and a
    note when it is not the one asked). The trial is stamped with this rank's node and host."""
    abort_key = f"abort/{trial_id}"

    def stop_reason() -> str | None:
        try:
            if store.check([abort_key]):
                return STOPPED
        except Exception:  # noqa: BLE001 - a store that went away: let the watchdog decide
            return None
        return None if lost is None else lost()

    cache_state, note = prepare(job) if prepare is not None else (None, None)
    rank_job = replace(job, distributed={
        "rank": info.rank,
        "world_size": info.world_size,
        "local_rank": info.local_rank,
        "store_host": info.master_addr,
        "store_port": info.master_port,
        "prefix": f"{_STORE_PREFIX}trial/{trial_id}/",
        "timeout_s": job.timeout_s,
    })
    outcome = (measure or run_isolated)(rank_job, on_batch=on_batch, stop_reason=stop_reason)
    if outcome.trial is not None:
        outcome.trial.node_rank, outcome.trial.host = info.node_rank, info.host
        if cache_state is not None:
            outcome.trial.cache_state = cache_state
        if note is not None:
            outcome.trial.notes.append(note)
    if outcome.status != "ok" and outcome.error != STOPPED:
        store.set(abort_key, f"{info.name()}: {outcome.error}")
    store.set(f"outcome/{trial_id}/{info.rank}", json.dumps(_outcome_to_dict(outcome)))
    return outcome


class DistributedRunner:
    """The leader's stand-in for `isolation.run_isolated` (same call): posts each trial to the
    followers, measures rank 0's share, gathers every rank's outcome and merges them
    (`merge_outcomes`, naming ranks by `names`). A follower that never reports within the
    config's timeout + 60 s is a failed trial naming that rank; one whose heartbeat stops
    (`liveness`, nodes.Liveness) is lost: the trial fails at once naming its node, and every
    later trial fails without running (`lost` says why)."""

    def __init__(self, store: Any, info: RankInfo, names: list[str] | None = None, liveness: Any = None,
                 measure: Any = None) -> None:
        self.store = store
        self.info = info
        self.measure = measure  # rank 0's own measuring process (a WarmRunner), else run_isolated
        self.trial_id = 0
        self.names = names
        self.liveness = liveness
        self.lost_rank: int | None = None
        self.lost_after_s = 0.0
        self.lost: str | None = None

    def _name(self, rank: int) -> str:
        return self.names[rank] if self.names else f"rank {rank}"

    def _lost_now(self) -> str | None:
        """Why the job lost a rank (its heartbeat stopped), once it has; else None."""
        if self.lost is None and self.liveness is not None:
            r = self.liveness.lost()
            if r is not None:
                self.lost_rank, self.lost_after_s = r, float(self.liveness.lost_after_s)
                self.lost = f"{self._name(r)}: {lost_error(self.lost_after_s)}"
        return self.lost

    def __call__(self, job: TrialJob, *, on_batch: Callable[[int], None] | None = None) -> Outcome:
        """Run `job` on every rank (the same call as `run_isolated`) and merge their outcomes."""
        if self.lost is not None:
            return Outcome(status="skipped", error=f"not run: {self.lost}")
        n = self.trial_id
        self.trial_id += 1
        self.store.set(f"job/{n}", json.dumps(job.to_dict()))
        try:
            mine = _measure_rank(self.store, self.info, n, job, on_batch, lost=self._lost_now, measure=self.measure)
        except KeyboardInterrupt:
            self.store.set(f"abort/{n}", "interrupted on rank 0")
            raise
        outcomes = [mine]
        wait_s = job.timeout_s + 60.0
        for r in range(1, self.info.world_size):
            key = f"outcome/{n}/{r}"
            deadline = _time.monotonic() + wait_s
            while not self.store.check([key]) and _time.monotonic() < deadline and self._lost_now() is None:
                _time.sleep(0.05)
            if self.store.check([key]):
                outcomes.append(_outcome_from_dict(json.loads(self.store.get(key))))
            elif self.lost is not None:
                self.store.set(f"abort/{n}", self.lost)
                outcomes.append(Outcome(status="failed", error=lost_error(self.liveness.lost_after_s)
                                        if r == self.lost_rank else STOPPED))
            else:
                self.store.set(f"abort/{n}", f"rank {r} did not report")
                outcomes.append(Outcome(status="failed", error=f"rank {r} reported no result within {wait_s:g} s"))
        if self.lost is not None and mine.error == self.lost:
            outcomes[0] = replace(mine, error=STOPPED)  # stopped because the other node was lost
        return merge_outcomes(outcomes, self.names)

    def finish(self, wait_s: float = 30.0) -> None:
        """Tell the followers there is nothing more to run. When this process hosts the store
        (launchers other than torchrun), wait up to `wait_s` for every follower to have read
        that, so none loses the store mid-read."""
        self.store.set(f"job/{self.trial_id}", json.dumps({"kind": "stop"}))
        if not self.info.hosts_store:
            return
        deadline = _time.monotonic() + wait_s
        while self.store.add("followers_done", 0) < self.info.world_size - 1 and _time.monotonic() < deadline:
            _time.sleep(0.05)


def follow(store: Any, info: RankInfo, *, accept: Callable[[Any], TrialJob] | None = None,
           prepare: Prepare | None = None, leader_lost: Callable[[], bool] = lambda: False,
           on_refused: Callable[[str], None] | None = None, measure: Any = None) -> int:
    """A follower's whole sweep: run each job the leader posts until it posts `stop`. Returns 0,
    or 1 when the leader stopped answering (`leader_lost()`) before it said stop.

    Each job read from the store runs as `accept(raw)` makes it (nodes.accept_job: this node's
    own settings); a job it refuses (nodes.JobRefused) is reported as a failed trial naming
    this rank, and `on_refused(why)` tells the user. Each runs in `measure` (this rank's
    WarmRunner, else a fresh process per trial). Waits for the next job for as long as the
    leader lives."""
    n = 0
    while True:
        key = f"job/{n}"
        while not store.check([key]):
            if leader_lost():
                return 1
            _time.sleep(0.05)
        raw = json.loads(store.get(key))
        if isinstance(raw, dict) and raw.get("kind") == "stop":
            store.add("followers_done", 1)
            return 0
        try:
            job = accept(raw) if accept is not None else TrialJob.from_dict(raw)
        except ValueError as exc:  # nodes.JobRefused
            why = f"refused a job from the job's store: {exc}; this node runs only what its own command line names"
            if on_refused is not None:
                on_refused(why)
            store.set(f"abort/{n}", f"{info.name()}: {why}")
            store.set(f"outcome/{n}/{info.rank}", json.dumps(_outcome_to_dict(Outcome(status="failed", error=why))))
        else:
            _measure_rank(store, info, n, job, None, prepare=prepare, measure=measure)
        n += 1


def first_failure(failures: Mapping[int, tuple[int, float]]) -> tuple[int, str] | None:
    """(exit code, message) when the job ended because a rank other than 0 failed on its own;
    None when rank 0 failed itself (it said why) or every rank was only stopped.

    `failures`: {rank: (exit code, timestamp)} as the elastic launcher reports them. A rank that
    exited 130 or died of SIGTERM/SIGINT was stopped (by the launcher, after another rank failed,
    or by the user); among the others, the earliest (then lowest) rank is the cause.

    >>> first_failure({0: (130, 2.0), 1: (-9, 2.0)})
    (1, 'rank 1 ended first, killed by SIGKILL (out of memory?), and the launcher stopped the other ranks')
    >>> first_failure({0: (130, 2.0), 1: (-15, 2.0)}) is None
    True
    """
    import signal

    stopped = {130, -int(signal.SIGTERM), -int(signal.SIGINT)}
    causes = {r: f for r, f in failures.items() if f[0] not in stopped}
    if not causes or 0 in causes:
        return None
    rank, (code, _) = min(causes.items(), key=lambda kv: (kv[1][1], kv[0]))
    if code < 0:
        how = f"killed by {signal_name(-code)}"
        if -code == signal.SIGKILL:
            how += " (out of memory?)"
    else:
        how = f"with exit code {code}"
    return 1, f"rank {rank} ended first, {how}, and the launcher stopped the other ranks"


def _quiet_elastic_logs() -> None:
    """torch's elastic launcher logs a warning per signal and failure through one logger per
    module, each with its own level; loaderbench reports those itself."""
    import logging

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed.elastic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def launch(nproc_per_node: int, argv: list[str], layout: Any = None) -> tuple[int, str | None]:
    """`loaderbench sweep --nproc-per-node N`: start `python -m loaderbench ARGV` as N ranks on
    this node with torch's elastic launcher (what `torchrun --standalone --nproc-per-node N`
    runs), as torchrun does setting OMP_NUM_THREADS=1 when unset and N > 1. With `layout`
    (nodes.NodeLayout: `--nnodes`, `--node-rank`, `--rdzv-endpoint`), this node's N ranks of a
    job on several nodes, through torch's c10d rendezvous (NOTE [several nodes] in nodes.py).

    Returns (exit code, message): rank 0's exit code and no message (rank 0 printed its own), or
    (1, why) when another rank ended first (`first_failure`), or (130, None) when the launcher
    itself was interrupted (SIGINT/SIGTERM: the ranks stop their measuring processes). Raises
    UsageError when the nodes do not meet: the rendezvous timed out (naming the endpoint and
    how many nodes joined) or could not start.
    """
    import math
    import uuid

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError, RendezvousTimeoutError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from loaderbench.errors import UsageError
    from loaderbench.orchestration import nodes

    _quiet_elastic_logs()
    if nproc_per_node > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    joined = None
    if layout is None:
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=nproc_per_node, run_id=f"loaderbench-{uuid.uuid4().hex[:8]}",
            rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
        )
    else:
        joined = nodes.join_rendezvous(layout)
        os.environ[nodes.NODE_RANK_VAR] = str(layout.node_rank)
        config = LaunchConfig(
            min_nodes=layout.nnodes, max_nodes=layout.nnodes, nproc_per_node=nproc_per_node, run_id="loaderbench",
            rdzv_backend="c10d", rdzv_endpoint=layout.endpoint,
            rdzv_configs={"is_host": layout.node_rank == 0, "join_timeout": math.ceil(layout.timeout_s)},
            max_restarts=0, monitor_interval=0.1,
            # Every node on this host (a loopback endpoint): torch must not give the others
            # this host's name as the job store's address.
            local_addr="127.0.0.1" if layout.loopback else None,
        )
    from torch.distributed.elastic.multiprocessing.api import SignalException

    try:
        elastic_launch(config, sys.executable)("-m", "loaderbench", *argv)
    except (SignalException, KeyboardInterrupt):
        # SIGTERM/SIGINT: the agent has stopped the ranks, and each rank its measuring
        # process; rank 0 has said where the finished configs are.
        return 130, None
    except RendezvousTimeoutError:
        raise UsageError(nodes.rendezvous_timeout_message(layout, nodes.joined_nodes(joined))) from None
    except RendezvousError as exc:
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        where = f" at {layout.endpoint}" if layout is not None else ""
        raise UsageError(f"rendezvous{where} failed: {line}") from None
    except ChildFailedError as exc:
        base = 0 if layout is None else layout.node_rank * nproc_per_node
        failures = {base + int(f.local_rank): (int(f.exitcode), float(f.timestamp)) for f in exc.failures.values()}
        if all(code == 2 for code, _ in failures.values()):
            return 2, None  # refused (usage, config or data): the ranks said why
        first = first_failure(failures)
        if first is not None:
            return first
        code = failures.get(0, (1, 0.0))[0]
        return (code if code > 0 else 1), None
    return 0, None


def free_port() -> int:
    """A TCP port free on this host now (for tests and other launchers)."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def strip_option(argv: list[str], name: str) -> list[str]:
    """`argv` without `name VALUE` / `name=VALUE`.

    >>> strip_option(["sweep", "--nproc-per-node", "2", "--batches", "5"], "--nproc-per-node")
    ['sweep', '--batches', '5']
    """
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(name + "="):
            out.append(arg)
    return out


def check_layout(ranks_per_node: int, device: str, flag: str) -> None:
    """One GPU (when the step runs on CUDA) and at least one CPU per rank on this node
    (`check_ranks` with this machine's GPUs and usable CPUs). Raises UsageError."""
    import torch

    from loaderbench.machine.env import usable_cpus

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    check_ranks(ranks_per_node, gpus=gpus, usable_cpus=usable_cpus(), device=device, flag=flag)


LAUNCH_FLAGS = ("--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--rdzv-timeout")


def launch_ranks(value: str | None, info: RankInfo | None, device: str, argv: list[str] | None,
                 layout: Any = None) -> tuple[int, str | None]:
    """`sweep --nproc-per-node N` (`value`; 1 when only `layout` was given: `--nnodes` ...):
    check N and the layout here (UsageError, one line, before any rank starts), then start the
    ranks with `argv` (the command line without the launch flags); rank 0 prints and writes.
    Returns (rank 0's exit code, a message to print or None)."""
    from loaderbench.errors import UsageError

    if layout is not None and "torch" not in sys.modules:
        # The agent's store client logs C++ warnings with stack dumps when another node's agent
        # ends first (the job is over then); the ranks' own warnings are left alone.
        os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
        import torch  # noqa: F401 - reads TORCH_CPP_LOG_LEVEL once, at load

        del os.environ["TORCH_CPP_LOG_LEVEL"]
    if info is not None:
        flag = "--nproc-per-node" if value is not None else "--nnodes"
        raise UsageError(
            f"{flag}: this process already runs under a launcher (RANK is set); "
            f"drop {flag} when you start loaderbench with torchrun"
        )
    try:
        n = int(value) if value is not None else 1
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--nproc-per-node: expected a whole number >= 1 (ranks on this node), got {value!r}")
    check_layout(n, device, "--nproc-per-node")
    if argv is None:
        raise UsageError("--nproc-per-node needs the loaderbench command line (run `loaderbench sweep ...`)")
    for flag in LAUNCH_FLAGS:
        argv = strip_option(argv, flag)
    return launch(n, argv, layout)


def _hello(info: RankInfo, config: Any, machine: Any, node: dict[str, Any] | None) -> dict[str, Any]:
    """This rank's hello for the handshake (NOTE [several nodes] in nodes.py)."""
    from loaderbench.orchestration import nodes

    shared = nodes.shared_config(config)
    return {
        "rank": info.rank, "world_size": info.world_size, "local_rank": info.local_rank,
        "local_world_size": info.local_world_size, "node_rank": info.node_rank, "nnodes": info.nnodes,
        "host": info.host, "pid": os.getpid(), "config": shared, "digest": nodes.config_digest(shared),
        "node": node, "numa": nodes.rank_placement(info.local_rank, machine.cuda and config.measure.device != "cpu"),
    }


def _open_heartbeat(info: RankInfo) -> Any:
    from loaderbench.orchestration import nodes

    return nodes.Heartbeat(lambda: open_store(info, timeout_s=60, client=True), info.rank).start()


def execute_as_leader(config: Any, output: Any, observer: Any, info: RankInfo) -> Any:
    """`orchestrate.execute_sweep` as the leader (rank 0) of a distributed sweep: the handshake
    with every follower (the same settings on every node, each node's own checks: NOTE
    [several nodes] in nodes.py), then every trial on all ranks (`DistributedRunner`), each
    node's preflight on the plan. A node lost during the sweep leaves the configs after it
    unrun and `SweepRecord.lost` naming it (saved; the caller renders what was measured and
    exits 1). Returns what execute_sweep returns; the followers are released whatever happens."""
    from loaderbench.errors import UsageError
    from loaderbench.orchestration import nodes
    from loaderbench.orchestration.execute import execute_sweep
    from loaderbench.orchestration.plan import detect_machine, resolve_defaults

    store = open_store(info, timeout_s=600)
    beat = _open_heartbeat(info)
    warm = _warm_runner(config)
    runner = DistributedRunner(store, info, measure=warm)
    decided = False
    try:
        check_layout(info.local_world_size, config.measure.device, "torchrun --nproc-per-node")
        machine = detect_machine(ranks_per_node=info.local_world_size, world_size=info.world_size)
        resolved = resolve_defaults(config, machine)
        mine = _hello(info, resolved, machine, nodes.node_facts(resolved, machine))
        nodes.claim_rank(store, mine)
        nodes.post_hello(store, mine)
        others = nodes.gather_hellos(store, info.world_size, timeout_s=300)
        refusal = nodes.check_hellos(mine, others)
        nodes.post_decision(store, refusal)
        decided = True
        if refusal is not None:
            raise UsageError(refusal)
    except BaseException as exc:
        if not decided:
            nodes.post_decision(store, str(exc) if isinstance(exc, UsageError) else "the leader (rank 0) stopped")
        runner.finish(wait_s=0)
        beat.stop()
        if warm is not None:
            warm.close()
        raise
    hellos = [mine, *others]
    runner.names = [nodes.rank_name(h, info.nnodes) for h in hellos]
    runner.liveness = nodes.Liveness(store, range(1, info.world_size))
    for w in nodes.node_warnings(mine, others):
        observer.warning(w)
    layout = {
        "world_size": info.world_size,
        "local_world_size": info.local_world_size,
        "launcher": "torchrun" if info.agent_store else "env",
        "nnodes": info.nnodes,
        "nodes": nodes.node_records(hellos),
    }
    try:
        rs, out = execute_sweep(
            config, output=output, observer=observer, runner=runner, distributed=layout, machine=machine,
            peers=nodes.peers_of(hellos, machine.cuda and config.measure.device != "cpu"),
        )
    finally:
        runner.finish()
        beat.stop()
        if warm is not None:
            warm.close()
    if runner.lost_rank is not None:
        from loaderbench.results import LostRank, save_results

        lost = hellos[runner.lost_rank]
        several = info.nnodes > 1
        rs.sweep.lost = LostRank(rank=runner.lost_rank, after_s=runner.lost_after_s,
                                 node_rank=int(lost["node_rank"]) if several else None,
                                 host=lost.get("host") if several else None)
        save_results(rs, out)
    return rs, out


def run_follower(config: Any, info: RankInfo, say: Callable[[str], None] = lambda _: None) -> int:
    """A follower rank's whole sweep: this node's checks (its first rank: --data, the workload,
    the environment), the handshake, then every job the leader posts, as this node's own
    command line names it (nodes.accept_job), with this node's page cache set by its first rank.
    `say` prints a refused job's line. Returns 0; raises LoaderbenchError (naming this node) when
    it refuses to start or the leader refused the job, RankLost when the leader stopped answering."""
    from loaderbench.errors import LoaderbenchError, RankLost, UsageError
    from loaderbench.orchestration import nodes
    from loaderbench.orchestration.plan import detect_machine, resolve_defaults

    store = open_store(info, timeout_s=120)
    beat = _open_heartbeat(info)
    warm = _warm_runner(config)
    try:
        try:
            check_layout(info.local_world_size, config.measure.device, "torchrun --nproc-per-node")
            machine = detect_machine(ranks_per_node=info.local_world_size, world_size=info.world_size)
            resolved = resolve_defaults(config, machine)
            checks = nodes.node_checks(resolved, machine) if info.local_rank == 0 else None
            mine = _hello(info, resolved, machine, checks)
            nodes.claim_rank(store, mine)
        except LoaderbenchError as exc:
            message = str(exc) if info.nnodes <= 1 else f"node {info.node_rank} ({info.host}): {exc}"
            nodes.refuse(store, message)
            raise type(exc)(message) from None
        nodes.post_hello(store, mine)
        leader = nodes.read_hello(store, 0, timeout_s=300)
        refusal = nodes.check_hellos(leader, [mine])
        if refusal is not None:
            nodes.refuse(store, refusal)
            raise UsageError(refusal)
        watch = nodes.Liveness(store, [0])
        error = nodes.await_decision(store, 900, alive=lambda: watch.lost() is None)
        if error is not None:
            raise UsageError(error)
        prepare = _cache_control(resolved) if info.local_rank == 0 and resolved.cache != "as-is" else None
        states = {"as-is", resolved.cache} | ({"cold", "warm"} if resolved.cache == "both" else set())
        code = follow(
            store, info, accept=lambda raw: nodes.accept_job(raw, resolved, machine, cache_states=sorted(states)),
            prepare=prepare, leader_lost=lambda: watch.lost() is not None, on_refused=say, measure=warm,
        )
        if code:
            raise RankLost(f"{info.name()}: the leader (rank 0, node 0) stopped answering (no heartbeat for "
                           f"{nodes.LOST_AFTER_S:g} s) before the sweep ended")
        return 0
    finally:
        beat.stop()
        if warm is not None:
            warm.close()


def _warm_runner(config: Any) -> Any:
    """This rank's warm measuring process (`--isolation warm`, the default), started now so its
    interpreter and torch's import overlap the handshake; None for a fresh process per trial.
    It leaves each trial's process group after the trial (measure/child.py) and keeps nothing
    of a distributed trial for the next (NOTE [warm measuring process] in measure/trial.py)."""
    if config.isolation != "warm":
        return None
    from loaderbench.measure.warm import WarmRunner

    warm = WarmRunner()
    warm.prestart()
    return warm


def _cache_control(config: Any) -> Prepare:
    """A follower node's page-cache control before each trial (its first rank's): the files
    under its own --data put in the job's state, as the leader does on its node."""
    from loaderbench.model import WarningKind
    from loaderbench.storage import data_files, set_cache_state

    files = data_files(config.dataset)

    def prepare(job: TrialJob) -> tuple[dict[str, Any] | None, Note | None]:
        if job.cache == "as-is" or not files:
            return None, None
        state = set_cache_state(files, job.cache, config.drop_caches).to_dict()
        if state["achieved"] == job.cache:
            return state, None
        why = f" ({state['reason']})" if state.get("reason") else ""
        return state, Note.of(WarningKind.CACHE_NOT_ACHIEVED, f"--cache {job.cache}: achieved {state['achieved']}{why}")

    return prepare
