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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from loaderbench.machine.processes import signal_name
from loaderbench.measure.isolation import Outcome, run_isolated
from loaderbench.model import Ceiling, Note, Trial, TrialJob

STOPPED = "stopped because another rank failed"
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
        return cls(
            rank=rank,
            world_size=world,
            local_rank=local_rank,
            local_world_size=local_world,
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=port,
            agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
        )


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


def merge_trials(trials: list[Trial]) -> Trial:
    """One trial for the whole job from each rank's trial of one repeat (index = rank).

    Per NOTE [distributed sweep]: a copy of the slowest rank's trial (`slowest`), so its
    per-batch data-wait, compute and step times decide the stall fraction and the verdict, with
    the node-wide sums of `cpu_time_s`, `cpu_util_pct`, `processes`, memory and the loader
    ceiling (`loader_alone_samples_per_s`, or its bound: `_merged_ceiling`) over ranks, `rank`/`world_size` set, and every rank's
    own trial in `rank_trials`. Throughput is summed by `stats.trial_samples_per_s`, which reads
    `rank_trials`. Raises ValueError for no trials.
    """
    if not trials:
        raise ValueError("merge_trials needs at least one rank's trial")
    k = slowest(trials)
    notes: list[Note] = []
    for r, t in enumerate(trials):
        for note in t.notes:
            tagged = note if len(trials) == 1 else Note(note.kind, f"rank {r}: {note.message}")
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


def merge_outcomes(outcomes: list[Outcome]) -> Outcome:
    """The job's outcome from each rank's (index = rank).

    All ok: the merged trial (`merge_trials`) or ceiling (`merge_ceilings`). Otherwise the
    cause is the first rank that failed on its own (not stopped because another failed, nor
    failing because a peer of its process group went away: `peer_failure`),
    preferring a failure over a hang; among hangs, a rank whose stacks show it was not waiting
    in a collective (`waits_for_peer`), then the rank that reached the fewest batches. The
    error names that rank.
    """
    if all(o.status == "ok" for o in outcomes):
        if all(o.ceiling is not None for o in outcomes):
            return Outcome(status="ok", ceiling=merge_ceilings([o.ceiling for o in outcomes]))  # type: ignore[misc]
        if all(o.trial is not None for o in outcomes):
            last = [o.last_batch for o in outcomes if o.last_batch is not None]
            return Outcome(
                status="ok",
                trial=merge_trials([o.trial for o in outcomes]),  # type: ignore[misc]
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
        error=f"rank {r}: {o.error}{tail}",
        last_batch=o.last_batch,
        detail=o.detail,
    )


# ---------------------------------------------------------------------------------------------
# The sweep-level protocol between the leader (rank 0) and the followers, over the job's store.


def open_store(info: RankInfo, *, timeout_s: float) -> Any:
    """The job's key-value store, under the prefix `loaderbench/`: a client of torchrun's agent
    store, or (other launchers) a TCPStore that rank 0 hosts at MASTER_ADDR:MASTER_PORT."""
    from torch.distributed import PrefixStore, TCPStore

    host_it = info.hosts_store
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


def _wait_key(store: Any, key: str, timeout_s: float | None, poll_s: float = 0.05) -> bool:
    """Poll the store for `key` every `poll_s` seconds up to `timeout_s` (None: for ever); True
    once it exists. (Polling `check` rather than a timed `wait`: a timed-out wait makes c10d
    print socket warnings.)"""
    import time

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not store.check([key]):
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def _measure_rank(
    store: Any, info: RankInfo, trial_id: int, job: TrialJob, on_batch: Callable[[int], None] | None
) -> Outcome:
    """Run this rank's measuring process for one trial; stop it early when another rank failed."""
    abort_key = f"abort/{trial_id}"

    def stop_reason() -> str | None:
        try:
            return STOPPED if store.check([abort_key]) else None
        except Exception:  # noqa: BLE001 - a store that went away: let the watchdog decide
            return None

    rank_job = replace(job, distributed={
        "rank": info.rank,
        "world_size": info.world_size,
        "local_rank": info.local_rank,
        "store_host": info.master_addr,
        "store_port": info.master_port,
        "prefix": f"{_STORE_PREFIX}trial/{trial_id}/",
        "timeout_s": job.timeout_s,
    })
    outcome = run_isolated(rank_job, on_batch=on_batch, stop_reason=stop_reason)
    if outcome.status != "ok" and outcome.error != STOPPED:
        store.set(abort_key, f"rank {info.rank}: {outcome.error}")
    store.set(f"outcome/{trial_id}/{info.rank}", json.dumps(_outcome_to_dict(outcome)))
    return outcome


class DistributedRunner:
    """The leader's stand-in for `isolation.run_isolated` (same call): posts each trial to the
    followers, measures rank 0's share, gathers every rank's outcome and merges them
    (`merge_outcomes`). A follower that never reports within the config's timeout + 60 s is
    a failed trial naming that rank."""

    def __init__(self, store: Any, info: RankInfo) -> None:
        self.store = store
        self.info = info
        self.trial_id = 0

    def wait_for_followers(self, timeout_s: float = 120.0, poll_s: float = 0.1) -> None:
        """Block until every follower has joined (each adds itself to `followers_ready` when it
        starts following). Raises UsageError after `timeout_s` naming how many joined."""
        import time

        from loaderbench.errors import UsageError

        want = self.info.world_size - 1
        deadline = time.monotonic() + timeout_s
        while (got := self.store.add("followers_ready", 0)) < want:
            if time.monotonic() > deadline:
                raise UsageError(
                    f"only {got + 1} of WORLD_SIZE={self.info.world_size} ranks joined within "
                    f"{timeout_s:g} s: start every rank (torchrun and --nproc-per-node do)"
                )
            time.sleep(poll_s)

    def __call__(self, job: TrialJob, *, on_batch: Callable[[int], None] | None = None) -> Outcome:
        """Run `job` on every rank (the same call as `run_isolated`) and merge their outcomes."""
        n = self.trial_id
        self.trial_id += 1
        self.store.set(f"job/{n}", json.dumps(job.to_dict()))
        try:
            mine = _measure_rank(self.store, self.info, n, job, on_batch)
        except KeyboardInterrupt:
            self.store.set(f"abort/{n}", "interrupted on rank 0")
            raise
        outcomes = [mine]
        wait_s = job.timeout_s + 60.0
        for r in range(1, self.info.world_size):
            key = f"outcome/{n}/{r}"
            if _wait_key(self.store, key, wait_s):
                outcomes.append(_outcome_from_dict(json.loads(self.store.get(key))))
            else:
                self.store.set(f"abort/{n}", f"rank {r} did not report")
                outcomes.append(Outcome(status="failed", error=f"rank {r} reported no result within {wait_s:g} s"))
        return merge_outcomes(outcomes)

    def finish(self, wait_s: float = 30.0) -> None:
        """Tell the followers there is nothing more to run. When this process hosts the store
        (launchers other than torchrun), wait up to `wait_s` for every follower to have read
        that, so none loses the store mid-read."""
        import time

        self.store.set(f"job/{self.trial_id}", json.dumps({"kind": "stop"}))
        if not self.info.hosts_store:
            return
        deadline = time.monotonic() + wait_s
        while self.store.add("followers_done", 0) < self.info.world_size - 1 and time.monotonic() < deadline:
            time.sleep(0.05)


def follow(store: Any, info: RankInfo) -> int:
    """A follower's whole sweep: run each job the leader posts until it posts `stop`. Returns 0.
    Waits for the next job for as long as it takes (the leader's launcher ends the job if the
    leader dies)."""
    store.add("followers_ready", 1)
    n = 0
    while True:
        key = f"job/{n}"
        _wait_key(store, key, None)
        raw = json.loads(store.get(key))
        if raw.get("kind") == "stop":
            store.add("followers_done", 1)
            return 0
        _measure_rank(store, info, n, TrialJob.from_dict(raw), None)
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


def launch(nproc_per_node: int, argv: list[str]) -> tuple[int, str | None]:
    """`loaderbench sweep --nproc-per-node N`: start `python -m loaderbench ARGV` as N ranks on
    this node with torch's elastic launcher (what `torchrun --standalone --nproc-per-node N`
    runs), as torchrun does setting OMP_NUM_THREADS=1 when unset and N > 1.

    Returns (exit code, message): rank 0's exit code and no message (rank 0 printed its own), or
    (1, why) when another rank ended first (`first_failure`), or (130, None) when the launcher
    itself was interrupted (SIGINT/SIGTERM: the ranks stop their measuring processes).
    """
    import uuid

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _quiet_elastic_logs()
    if nproc_per_node > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc_per_node,
        run_id=f"loaderbench-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
    )
    from torch.distributed.elastic.multiprocessing.api import SignalException

    try:
        elastic_launch(config, sys.executable)("-m", "loaderbench", *argv)
    except (SignalException, KeyboardInterrupt):
        # SIGTERM/SIGINT: the agent has stopped the ranks, and each rank its measuring
        # process; rank 0 has said where the finished configs are.
        return 130, None
    except ChildFailedError as exc:
        failures = {rank: (int(f.exitcode), float(f.timestamp)) for rank, f in exc.failures.items()}
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


def launch_ranks(value: str, info: RankInfo | None, device: str, argv: list[str] | None) -> tuple[int, str | None]:
    """`sweep --nproc-per-node N` (`value`): check N and the layout here (UsageError, one line,
    before any rank starts), then start the ranks with `argv` (the command line without the
    flag); rank 0 prints and writes. Returns (rank 0's exit code, a message to print or None)."""
    from loaderbench.errors import UsageError

    if info is not None:
        raise UsageError(
            "--nproc-per-node: this process already runs under a launcher (RANK is set); "
            "drop --nproc-per-node when you start loaderbench with torchrun"
        )
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--nproc-per-node: expected a whole number >= 1 (ranks on this node), got {value!r}")
    check_layout(n, device, "--nproc-per-node")
    if argv is None:
        raise UsageError("--nproc-per-node needs the loaderbench command line (run `loaderbench sweep ...`)")
    return launch(n, strip_option(argv, "--nproc-per-node"))


def execute_as_leader(config: Any, output: Any, observer: Any, info: RankInfo) -> Any:
    """`orchestrate.execute_sweep` as the leader (rank 0) of a distributed sweep: wait for the
    followers, then run every trial on all ranks (`DistributedRunner`). Returns what
    execute_sweep returns; the followers are released whatever happens."""
    from loaderbench.orchestration.execute import execute_sweep
    from loaderbench.orchestration.plan import detect_machine

    runner = DistributedRunner(open_store(info, timeout_s=600), info)
    try:
        check_layout(info.local_world_size, config.measure.device, "torchrun --nproc-per-node")
        runner.wait_for_followers()
    except BaseException:
        runner.finish(wait_s=0)
        raise
    layout = {
        "world_size": info.world_size,
        "local_world_size": info.local_world_size,
        "launcher": "torchrun" if info.agent_store else "env",
    }
    try:
        return execute_sweep(
            config, output=output, observer=observer, runner=runner, distributed=layout,
            machine=detect_machine(ranks_per_node=info.local_world_size, world_size=info.world_size),
        )
    finally:
        runner.finish()
