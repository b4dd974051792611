"""A distributed sweep on several nodes: the node layout from the command line (or Slurm), the
count of nodes at torch's rendezvous, the handshake that makes every node run only its own
settings, the jobs a follower accepts, heartbeats, and each node's preflight.

NOTE [several nodes]
    `loaderbench sweep --nnodes N --node-rank R --rdzv-endpoint HOST:PORT` on every node starts
    what `torchrun --nnodes N --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m loaderbench sweep`
    starts there: torch's elastic agent joins torch's c10d rendezvous at HOST:PORT (hosted by
    node rank 0: `is_host`), then starts the node's ranks. loaderbench adds no launcher and no
    transport: everything between nodes goes through the job's key-value store (torch's), as
    JSON, never as pickles.
      - The node rank is the one given (`--node-rank`, else SLURM_NODEID), passed to the ranks
        as LOADERBENCH_NODE_RANK; under a bare torchrun it is torch's GROUP_RANK (or
        SLURM_NODEID under Slurm). A rank's number is node rank x ranks per node + local rank,
        so global rank 0, the leader, runs on node rank 0.
      - Before torch's rendezvous, every node counts itself in under `loaderbench/nodes_joined`
        in the rendezvous store (node 0 listens at HOST:PORT first; torch's rendezvous shares
        that listener, a multi-tenant TCPStore): when the rendezvous times out, the line says
        how many nodes joined.
      - Handshake (`hello/RANK`): every rank posts its node, host and its resolved config
        without what may differ between nodes (the data paths; the output path and the node
        rank are not in it), with the config's hash. The leader and every follower compare
        with the leader's: a difference is refused before anything is measured, naming the
        setting. A follower's node also checks its own --data and workload first (its
        preflight) and sends what the leader's preflight needs from it.
      - A follower runs a job from the store only as its own command line names it
        (`accept_job`): the dataset, compute step and measure settings are its own, the
        loader settings must be a cell its own grid can reach; anything else is refused, and
        the node says so.
      - Heartbeats (`beat/RANK`, a counter each rank bumps every second from a thread with its
        own store client): a rank whose counter stops for LOST_AFTER_S (15 s, as long as torch's
        rendezvous keep-alive allows a node) is lost; the leader fails the trial naming its
        node, runs nothing more, saves and exits 1.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loaderbench.errors import UsageError
from loaderbench.model import ConfigResult, LoaderSettings, Note, TrialJob
from loaderbench.orchestration.config import SweepConfig, option
from loaderbench.orchestration.observer import NullObserver, SweepObserver
from loaderbench.orchestration.plan import Machine, plan

NODE_RANK_VAR = "LOADERBENCH_NODE_RANK"
JOINED_KEY = "loaderbench/nodes_joined"
DEFAULT_RDZV_TIMEOUT_S = 600.0  # torch's c10d rendezvous join timeout
BEAT_S = 1.0
LOST_AFTER_S = 15.0  # torch's rendezvous keep-alive: 3 beats of 5 s
SAME_EXCEPT = "only --data, --output and --node-rank may differ"


# ---------------------------------------------------------------------------------------------
# The node layout and the rendezvous.


@dataclass(frozen=True)
class NodeLayout:
    """This node's place in a job of `nnodes` nodes meeting at `host`:`port` (torch's c10d
    rendezvous, hosted by node rank 0), waiting at most `timeout_s` for every node."""

    nnodes: int
    node_rank: int
    host: str
    port: int
    timeout_s: float = DEFAULT_RDZV_TIMEOUT_S

    @property
    def endpoint(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        """Whether every node runs on this host (a loopback endpoint: tests, one machine)."""
        return self.host in ("localhost", "::1") or self.host.startswith("127.")


def _whole(value: str | None, flag: str, what: str, lowest: int) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        n = lowest - 1
    if n < lowest:
        raise UsageError(f"{flag}: expected a whole number >= {lowest} ({what}), got {value!r}")
    return n


def parse_endpoint(text: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[IPv6]:PORT`) -> (host, port). Raises UsageError naming --rdzv-endpoint.

    >>> parse_endpoint("10.0.0.1:29400"), parse_endpoint("[::1]:29400")
    (('10.0.0.1', 29400), ('::1', 29400))
    """
    host, sep, port = text.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if sep and host and port.isdigit() and 1 <= int(port) <= 65535:
        return host, int(port)
    raise UsageError(f"--rdzv-endpoint: expected HOST:PORT (node rank 0's address and a free port on it, "
                     f"e.g. node0:29400), got {text!r}")


def node_layout(nnodes: str | None, node_rank: str | None, endpoint: str | None, timeout: str | None,
                env: Mapping[str, str] = os.environ) -> NodeLayout | None:
    """The layout from `--nnodes`, `--node-rank`, `--rdzv-endpoint` and `--rdzv-timeout`; under
    Slurm the count and the rank come from SLURM_NNODES and SLURM_NODEID when not given. None
    for one node without an endpoint (the single-node launch). Raises UsageError, one line
    naming the flag and the fix."""
    slurm = "SLURM_NNODES" in env and "SLURM_NODEID" in env and endpoint is not None
    n = _whole(nnodes if nnodes is not None else (env["SLURM_NNODES"] if slurm else None),
               "--nnodes", "the number of nodes", 1)
    r = _whole(node_rank if node_rank is not None else (env["SLURM_NODEID"] if slurm else None),
               "--node-rank", "this node's rank, 0 on the node that hosts the rendezvous", 0)
    t = DEFAULT_RDZV_TIMEOUT_S
    if timeout is not None:
        try:
            t = float(timeout)
        except ValueError:
            t = 0.0
        if not 0 < t <= 7 * 86_400:
            raise UsageError(f"--rdzv-timeout: expected seconds > 0 (how long to wait for every node), got {timeout!r}")
    if n is None:
        if r is None and endpoint is None and timeout is None:
            return None
        raise UsageError("--nnodes N is needed with --node-rank, --rdzv-endpoint or --rdzv-timeout "
                         "(the number of nodes, the same on every node)")
    if endpoint is None:
        if n == 1 and r in (None, 0) and timeout is None:
            return None
        raise UsageError(f"--rdzv-endpoint HOST:PORT is needed with --nnodes {n}: node rank 0's address and a "
                         "free port on it, the same on every node")
    if r is None:
        if n > 1:
            raise UsageError(f"--node-rank R is needed with --nnodes {n}: 0 on the node at --rdzv-endpoint, "
                             f"1 to {n - 1} on the others (under Slurm, SLURM_NODEID gives it)")
        r = 0
    if r >= n:
        raise UsageError(f"--node-rank {r}: node ranks run from 0 to {n - 1} with --nnodes {n}")
    host, port = parse_endpoint(endpoint)
    return NodeLayout(nnodes=n, node_rank=r, host=host, port=port, timeout_s=t)


def wait_for_endpoint(host: str, port: int, timeout_s: float, poll_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections at host:port within `timeout_s` (a plain
    socket: c10d's own client retries past its timeout and prints C++ stack dumps)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=poll_s).close()
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_s)


def join_rendezvous(layout: NodeLayout) -> Any:
    """Count this node in at the rendezvous endpoint (NOTE [several nodes]) and return the store
    client that reads the count. Node rank 0 listens there; the others wait up to the
    rendezvous timeout for it. Raises UsageError naming the endpoint."""
    from torch.distributed import TCPStore

    timeout = _dt.timedelta(seconds=layout.timeout_s)
    if layout.node_rank == 0:
        try:
            store = TCPStore(layout.host, layout.port, is_master=True, multi_tenant=True, wait_for_workers=False,
                             timeout=timeout)
        except (RuntimeError, ValueError, OSError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise UsageError(
                f"--rdzv-endpoint {layout.endpoint}: node rank 0 hosts the rendezvous there and cannot listen "
                f"({first}): give this node's own address and a free port"
            ) from None
    else:
        if not wait_for_endpoint(layout.host, layout.port, layout.timeout_s):
            raise UsageError(
                f"rendezvous at {layout.endpoint}: nothing answered within {layout.timeout_s:g} s, so 1 of "
                f"{layout.nnodes} nodes (this one) joined: start node rank 0 with --rdzv-endpoint "
                f"{layout.endpoint}, and open port {layout.port} between the nodes"
            )
        store = TCPStore(layout.host, layout.port, is_master=False, timeout=timeout)
    store.add(JOINED_KEY, 1)
    return store


def joined_nodes(store: Any) -> int | None:
    """How many nodes counted themselves in (`join_rendezvous`); None when the store is gone."""
    try:
        return int(store.add(JOINED_KEY, 0))
    except Exception:  # noqa: BLE001 - the host of the rendezvous went away
        return None


def rendezvous_timeout_message(layout: NodeLayout, joined: int | None) -> str:
    """The one line for a rendezvous that timed out."""
    count = "an unknown number" if joined is None else str(joined)
    return (f"rendezvous at {layout.endpoint}: {count} of {layout.nnodes} nodes joined within {layout.timeout_s:g} s: "
            f"start `loaderbench sweep ... --nnodes {layout.nnodes} --node-rank R --rdzv-endpoint {layout.endpoint}` "
            f"on every node (R from 0 to {layout.nnodes - 1}), with port {layout.port} open between them")


# ---------------------------------------------------------------------------------------------
# The config every node must share (NOTE [several nodes]).


def shared_config(config: SweepConfig) -> dict[str, Any]:
    """The resolved config without what may differ between nodes: the data paths (each node
    reads its own), where it came from (`source`) and what the workload check derived from the
    data (`sampler_kind`). The output path and node rank are not part of the config."""
    d = config.to_dict()
    d.pop("source", None)
    d["dataset"] = {k: v for k, v in d["dataset"].items() if k not in ("data_path", "sampler_kind")}
    return d


def config_digest(shared: Mapping[str, Any]) -> str:
    """SHA-256 of the shared config as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(shared, sort_keys=True, default=str).encode()).hexdigest()


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first key path (sorted, depth first) where two JSON-like values differ, with both
    values; None when equal.

    >>> first_difference({"measure": {"batches": 5, "repeats": 1}}, {"measure": {"batches": 9, "repeats": 1}})
    ('measure.batches', 5, 9)
    """
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
            if found is not None:
                return found
        return None
    return None if a == b else (path, a, b)


def setting_name(path: str) -> str:
    """A config key path as the user gives it: `--batches (measure.batches)`; the path itself
    when no flag sets it."""
    section, _, key = path.partition(".")
    if not key:
        section, key = "", section
    key = key.split(".")[0]
    if section == "compute":
        return f"--compute ({path})"
    if section == "dataset" and key == "factory":
        key = "kind"
    try:
        opt = option(section, key)
    except KeyError:
        return path
    return f"{opt.flag_name} ({path})" if opt.cli else path


def settings_differ(mine: Mapping[str, Any], theirs: Mapping[str, Any], me: str, them: str) -> str | None:
    """The refusal when two nodes' shared configs differ (None when they match), naming the
    first setting that differs and its value on each node."""
    found = first_difference(dict(mine), dict(theirs))
    if found is None:
        return None
    path, a, b = found
    return (f"nodes started with different settings: {setting_name(path)} is {json.dumps(a)} on {me} and "
            f"{json.dumps(b)} on {them}; start every node with the same settings ({SAME_EXCEPT})")


# ---------------------------------------------------------------------------------------------
# What a follower accepts from the store.


class JobRefused(ValueError):
    """A job read from the store names something this node's command line did not."""


def _without_data(spec: Any) -> dict[str, Any]:
    return {k: v for k, v in spec.to_dict().items() if k not in ("data_path", "sampler_kind")}


def _reachable(s: LoaderSettings, config: SweepConfig, machine: Machine) -> bool:
    """Whether the sweep of `config` on `machine` may measure `s`: a grid cell, or (a search
    over every worker count) a cell's series at another worker count, up to 8 x the grid's
    largest (search.Search.workers_of)."""
    from loaderbench.analysis.predict import with_workers

    cells = [p.settings for p in plan(config, machine)]
    if s in cells:
        return True
    counts = {c.num_workers for c in cells}
    if not config.dense_workers or not 0 <= s.num_workers <= 8 * max(max(counts), 1):
        return False
    return any(with_workers(c, s.num_workers) == s for c in cells)


def accept_job(raw: Any, config: SweepConfig, machine: Machine, *, cache_states: Sequence[str]) -> TrialJob:
    """The job this node runs for a job read from the store (`raw`, the leader's
    `TrialJob.to_dict()`): this node's own dataset (its own data paths), compute step, measure
    settings and watchdog limit, with the loader settings, seed and page-cache state the leader
    chose. Raises JobRefused, naming what is outside this node's command line: another dataset,
    module, factory, compute step or measure setting, loader settings its grid cannot reach, a
    page-cache state it was not asked for, or a malformed job."""
    try:
        job = TrialJob.from_dict(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise JobRefused(f"a malformed job ({type(exc).__name__}: {exc})") from None
    if job.kind not in ("config", "ceiling"):
        raise JobRefused(f"job kind {job.kind!r} is not one this node runs")
    found = first_difference(_without_data(job.dataset), _without_data(config.dataset), "dataset")
    if found is None and config.compute is not None:
        found = first_difference(job.compute.to_dict(), config.compute.to_dict(), "compute")
    if found is None:
        found = first_difference(job.measure.to_dict(), config.measure.to_dict(), "measure")
    if found is not None:
        path, theirs, mine = found
        raise JobRefused(f"{path} is {json.dumps(theirs)} in the job and {json.dumps(mine)} on this node's command line")
    kind_of = job.dataset.sampler_kind
    if kind_of not in ((None, "sampler", "batch_sampler") if config.dataset.sampler else (None,)):
        raise JobRefused(f"dataset.sampler_kind {kind_of!r} is not one this node's --sampler can make")
    s = job.settings
    if job.kind == "ceiling":
        sizes = {p.settings.batch_size for p in plan(config, machine)}
        if s.batch_size not in sizes or s.num_workers != 0:
            raise JobRefused(f"a compute ceiling at batch {s.batch_size}, which this node's grid does not have")
    elif not _reachable(s, config, machine):
        raise JobRefused(f"loader settings {s.key()} are outside this node's grid")
    if job.cache not in cache_states:
        raise JobRefused(f"page-cache state {job.cache!r}: this node's --cache asks for {', '.join(cache_states)}")
    if job.timeout_s != config.config_timeout_s:
        raise JobRefused(f"a watchdog of {job.timeout_s:g} s, and this node's --config-timeout is "
                         f"{config.config_timeout_s:g} s")
    first = job.first_batch_timeout_s
    return TrialJob(
        s, replace(config.dataset, sampler_kind=kind_of), config.compute or job.compute, config.measure,
        kind=job.kind, seed=int(job.seed), cache_dir=None, timeout_s=config.config_timeout_s,
        first_batch_timeout_s=None if first is None else min(float(first), config.config_timeout_s),
        loader_alone=bool(job.loader_alone), cache=job.cache,
    )


# ---------------------------------------------------------------------------------------------
# Heartbeats.


class Heartbeat:
    """This rank's sign of life: a thread that bumps `beat/RANK` in the job's store every
    `interval_s` seconds through its own client (`open_client()`; a store client is not shared
    between threads). A failed call opens a new client at the next beat (a loaded host may time
    one out): the beats stop only with the process, or when told."""

    def __init__(self, open_client: Callable[[], Any], rank: int, interval_s: float = BEAT_S) -> None:
        self.open_client, self.rank, self.interval_s = open_client, rank, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loaderbench-heartbeat", daemon=True)

    def _run(self) -> None:
        store = None
        while not self._stop.is_set():
            try:
                store = store or self.open_client()
                store.add(f"beat/{self.rank}", 1)
            except Exception:  # noqa: BLE001 - try again with a new client; a store gone for good ends the job anyway
                store = None
            self._stop.wait(self.interval_s)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()


class Liveness:
    """Watches other ranks' heartbeats: `lost()` is the first of `ranks` whose counter has not
    moved for `lost_after_s` (on this process's clock), read at most every `every_s` seconds."""

    def __init__(self, store: Any, ranks: Sequence[int], *, lost_after_s: float = LOST_AFTER_S,
                 every_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.ranks, self.lost_after_s, self.every_s, self.clock = store, list(ranks), lost_after_s, every_s, clock
        now = clock()
        self.seen: dict[int, tuple[int, float]] = {r: (-1, now) for r in self.ranks}
        self.checked = -float("inf")
        self.found: int | None = None

    def lost(self) -> int | None:
        """The rank found lost (kept once found), else None."""
        now = self.clock()
        if self.found is not None or now - self.checked < self.every_s:
            return self.found
        self.checked = now
        for r in self.ranks:
            try:
                count = int(self.store.add(f"beat/{r}", 0))
            except Exception:  # noqa: BLE001 - the store itself went away: not one rank's fault
                return None
            last, since = self.seen[r]
            if count != last:
                self.seen[r] = (count, now)
            elif now - since > self.lost_after_s:
                self.found = r
                return r
        return None


# ---------------------------------------------------------------------------------------------
# The handshake (NOTE [several nodes]).


def rank_name(hello: Mapping[str, Any], nnodes: int) -> str:
    """`rank 3` on one node, `node 1 (host-b) rank 3` on several."""
    if nnodes <= 1:
        return f"rank {hello['rank']}"
    return f"node {hello['node_rank']} ({hello.get('host') or '?'}) rank {hello['rank']}"


def node_name(hello: Mapping[str, Any]) -> str:
    return f"node {hello['node_rank']} ({hello.get('host') or '?'})"


def refuse(store: Any, message: str) -> None:
    """Tell every rank why this one will not go on (`refused/N`, counted in `refused_count`)."""
    try:
        n = int(store.add("refused_count", 1))
        store.set(f"refused/{n}", message)
    except Exception:  # noqa: BLE001 - nobody left to tell
        pass


def refusals(store: Any) -> list[str]:
    """The refusals posted so far, in order (a count posted before its message is skipped)."""
    n = int(store.add("refused_count", 0))
    return [store.get(f"refused/{i}").decode() for i in range(1, n + 1) if store.check([f"refused/{i}"])]


def claim_rank(store: Any, hello: Mapping[str, Any]) -> None:
    """Raise UsageError (after telling the others) when another process already runs as this
    rank: two nodes were given the same node rank."""
    if int(store.add(f"claim/{hello['rank']}", 1)) > 1:
        message = (f"node rank {hello['node_rank']} was given to two nodes ({hello.get('host')} is the second): give "
                   f"each node its own --node-rank, from 0 to {hello['nnodes'] - 1}")
        refuse(store, message)
        raise UsageError(message)


def post_hello(store: Any, hello: Mapping[str, Any]) -> None:
    store.set(f"hello/{hello['rank']}", json.dumps(dict(hello)))
    store.add("hello_count", 1)


def read_hello(store: Any, rank: int, timeout_s: float, poll_s: float = 0.1) -> dict[str, Any]:
    """Rank `rank`'s hello; UsageError after `timeout_s` or when a rank refused meanwhile."""
    deadline = time.monotonic() + timeout_s
    key = f"hello/{rank}"
    while not store.check([key]):
        refused = refusals(store)
        if refused:
            raise UsageError(refused[0])
        if time.monotonic() > deadline:
            raise UsageError(f"rank {rank} did not answer within {timeout_s:g} s: start every node")
        time.sleep(poll_s)
    return dict(json.loads(store.get(key)))


def gather_hellos(store: Any, world_size: int, timeout_s: float, poll_s: float = 0.1) -> list[dict[str, Any]]:
    """The leader: every follower's hello (index = rank - 1), once all have posted one. Raises
    UsageError with the first refusal, or after `timeout_s` naming how many ranks joined."""
    deadline = time.monotonic() + timeout_s
    while (got := int(store.add("hello_count", 0))) < world_size - 1:
        refused = refusals(store)
        if refused:
            raise UsageError(refused[0])
        if time.monotonic() > deadline:
            raise UsageError(f"only {got + 1} of WORLD_SIZE={world_size} ranks joined within {timeout_s:g} s: "
                             "start every rank (torchrun and --nproc-per-node do), on every node")
        time.sleep(poll_s)
    return [read_hello(store, r, 5.0, poll_s) for r in range(1, world_size)]


def check_hellos(mine: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> str | None:
    """The refusal for a job whose ranks cannot run together (None when they can): a different
    shared config, or a different number of ranks per node."""
    nnodes = int(mine["nnodes"])
    for h in others:
        if h["local_world_size"] != mine["local_world_size"]:
            return (f"{node_name(h)} runs {h['local_world_size']} ranks and {node_name(mine)} runs "
                    f"{mine['local_world_size']}: give every node the same --nproc-per-node")
        if h["digest"] != mine["digest"]:
            found = settings_differ(mine["config"], h["config"], node_name(mine), node_name(h))
            if found is not None:
                return found
        if int(h["nnodes"]) != nnodes:
            return f"{node_name(h)} was started with --nnodes {h['nnodes']} and {node_name(mine)} with {nnodes}"
    return None


def post_decision(store: Any, error: str | None) -> None:
    store.set("go", json.dumps({"error": error}))


def await_decision(store: Any, timeout_s: float, alive: Callable[[], bool] = lambda: True,
                   poll_s: float = 0.1) -> str | None:
    """A follower: the leader's decision after the handshake (None: go; else the refusal)."""
    deadline = time.monotonic() + timeout_s
    while not store.check(["go"]):
        if time.monotonic() > deadline or not alive():
            raise UsageError(f"the leader (rank 0) did not start the sweep within {timeout_s:g} s")
        time.sleep(poll_s)
    return json.loads(store.get("go")).get("error")


def rank_placement(local_rank: int, cuda: bool) -> dict[str, Any]:
    """NUMA placement of this rank's CPUs against its GPU (cuda:LOCAL_RANK) where sysfs shows it."""
    from loaderbench.machine.env import cpu_affinity
    from loaderbench.machine.numa import numa_placement

    bus = None
    if cuda:
        try:
            import torch

            p = torch.cuda.get_device_properties(local_rank)
            ids = [getattr(p, n) for n in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
            bus = "{:04x}:{:02x}:{:02x}.0".format(*ids)
        except Exception:  # noqa: BLE001 - no GPU description: placement unknown
            bus = None
    return numa_placement(cpu_affinity() or [], bus)


def node_checks(config: SweepConfig, machine: Machine) -> dict[str, Any]:
    """A node's own preflight, run by its first rank: its --data files, its workload (the
    dataset built and probed here, as the leader does on its node), and `node_facts`. Raises
    what the checks raise (one line each)."""
    from loaderbench.orchestration.validate import validate_workload
    from loaderbench.storage import data_files

    data_files(config.dataset)
    validate_workload(config, machine, cache_dir=None)
    return node_facts(config, machine)


def node_facts(config: SweepConfig, machine: Machine) -> dict[str, Any]:
    """What the leader's preflight and per-node view need from a node: its usable CPUs, the
    /dev/shm, memory and thread readings, its environment warnings and the filesystem of its data."""
    from loaderbench.machine.env import capture_environment, preflight_warnings

    env = capture_environment(device_index=None)
    return {
        "usable_cpus": machine.usable_cpus,
        "environment": {k: env.get(k) for k in ("shm", "memory_available_bytes", "torch_num_threads")},
        "warnings": preflight_warnings(env),
        "fs": _data_fs(config),
    }


def node_warnings(leader: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> list[str]:
    """The other nodes' environment warnings that the leader's node does not have itself
    (it says its own), each named after its node."""
    own = set((leader.get("node") or {}).get("warnings") or [])
    return [f"{node_name(h)}: {w}" for h in others for w in (h.get("node") or {}).get("warnings") or [] if w not in own]


def _data_fs(config: SweepConfig) -> str | None:
    """The filesystem type of the first --data path (nfs, lustre, ext4...), None without one."""
    from pathlib import Path

    from loaderbench.storage import fstype_of

    roots = config.dataset.data_roots
    return fstype_of(Path(roots[0])) if roots else None


def node_records(hellos: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The job's nodes for the environment record, from every rank's hello (leader's included):
    node rank, host, ranks, usable CPUs, the filesystem of its data, and the NUMA placement
    (whether every rank's workers run on its GPU's NUMA node; None where not visible)."""
    nodes: dict[int, dict[str, Any]] = {}
    for h in sorted(hellos, key=lambda h: h["rank"]):
        n = nodes.setdefault(int(h["node_rank"]), {"node_rank": int(h["node_rank"]), "host": h.get("host"),
                                                   "ranks": [], "usable_cpus": None, "data_fs": None,
                                                   "cpu_numa_nodes": None, "gpu_numa_nodes": []})
        n["ranks"].append(int(h["rank"]))
        facts = h.get("node") or {}
        if facts:
            n["usable_cpus"] = facts.get("usable_cpus")
            n["data_fs"] = facts.get("fs")
        numa = h.get("numa") or {}
        if n["cpu_numa_nodes"] is None:
            n["cpu_numa_nodes"] = numa.get("cpu_numa_nodes")
        n["gpu_numa_nodes"].append(numa.get("gpu_numa_node"))
        n.setdefault("_on", []).append(numa.get("workers_on_gpu_numa_node"))
    for n in nodes.values():
        on = n.pop("_on")
        n["workers_on_gpu_numa_node"] = None if any(v is None for v in on) else all(on)
    return [nodes[k] for k in sorted(nodes)]


# ---------------------------------------------------------------------------------------------
# Each node's preflight on the leader's plan.


@dataclass(frozen=True)
class Peer:
    """Another node as the leader's preflight sees it: its name, the environment readings that
    preflight uses, and its machine."""

    name: str
    environment: dict[str, Any]
    machine: Machine


def peers_of(hellos: Sequence[Mapping[str, Any]], cuda: bool) -> list[Peer]:
    """The other nodes (their first rank's hello carries the node's checks)."""
    out = []
    for h in hellos:
        facts = h.get("node")
        if facts and int(h["node_rank"]) != 0:
            machine = Machine(cuda=cuda, usable_cpus=int(facts.get("usable_cpus") or 1),
                              ranks_per_node=int(h["local_world_size"]), world_size=int(h["world_size"]))
            out.append(Peer(node_name(h), dict(facts.get("environment") or {}), machine))
    return out


def preflight_peers(results: list[ConfigResult], facts: Any, peers: Sequence[Peer], obs: SweepObserver) -> None:
    """The preflight of every other node on the same configs (orchestration.preflight with its
    /dev/shm, memory and CPUs): a config that one node must skip is skipped, named after that
    node; its warnings are added, tagged with the node, unless this node has the same one."""
    from loaderbench.orchestration.preflight import preflight

    for peer in peers:
        shadow = [ConfigResult(settings=r.settings, status="ok") for r in results]
        preflight(shadow, facts, peer.environment, peer.machine, NullObserver())
        for res, seen in zip(results, shadow):
            if seen.status == "skipped" and res.status != "skipped":
                res.status, res.error = "skipped", f"{peer.name}: {seen.error}"
                obs.warning(f"{res.settings.key()}: skipped: {res.error}")
            for note in seen.warnings:
                if all(w.message != note.message for w in res.warnings):
                    res.warn(Note(note.kind, f"{peer.name}: {note.message}"))
