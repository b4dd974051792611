"""A distributed sweep on several nodes, the parts that need no process: the node layout from
flags and Slurm, the node rank and rank under torchrun, the config every node must share, the
jobs a follower accepts, heartbeats, the handshake, each node's preflight, the per-node figures,
the what-if ranks=N prediction, NUMA placement and their sentences."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from loaderbench.analysis import analyze
from loaderbench.analysis import ranks as ranks_mod
from loaderbench.analysis import statistics as stats
from loaderbench.conclusions import NodeRow, PerNode, RanksAnswer, WhatIf, WhyNoPrediction
from loaderbench.errors import UsageError
from loaderbench.measure.isolation import Outcome
from loaderbench.model import (
    ComputeSpec,
    ConfigResult,
    NodeFigures,
    Note,
    Summary,
    Trial,
    TrialJob,
)
from loaderbench.orchestration import distributed as dist
from loaderbench.orchestration import nodes
from loaderbench.orchestration.config import build_config
from loaderbench.orchestration.plan import Machine, plan, resolve_defaults
from loaderbench.orchestration.preflight import WorkloadFacts
from loaderbench.results import ResultSet
from tests.helpers import FakeClock, settings, trial

MIB = 2**20


class FakeStore:
    """The job's key-value store as c10d's (bytes values, atomic add), in a dict."""

    def __init__(self) -> None:
        self.data: dict[str, bytes | int] = {}

    def set(self, key: str, value: str | bytes) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        return self.data[key]  # type: ignore[return-value]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def add(self, key: str, n: int) -> int:
        self.data[key] = int(self.data.get(key, 0)) + n  # type: ignore[arg-type]
        return int(self.data[key])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# 1. The node layout


def test_no_node_flag_is_the_single_node_launch_and_slurm_needs_an_endpoint():
    assert nodes.node_layout(None, None, None, None, env={}) is None
    assert nodes.node_layout("1", None, None, None, env={}) is None
    # Under Slurm without --rdzv-endpoint: a plain sweep (a job step may run one on every node).
    assert nodes.node_layout(None, None, None, None, env={"SLURM_NNODES": "4", "SLURM_NODEID": "2"}) is None


def test_the_layout_from_flags_and_from_slurm():
    layout = nodes.node_layout("2", "1", "10.0.0.1:29400", "30", env={})
    assert layout == nodes.NodeLayout(nnodes=2, node_rank=1, host="10.0.0.1", port=29400, timeout_s=30.0)
    assert layout.endpoint == "10.0.0.1:29400" and not layout.loopback
    slurm = {"SLURM_NNODES": "4", "SLURM_NODEID": "3"}
    layout = nodes.node_layout(None, None, "[::1]:29400", None, env=slurm)
    assert (layout.nnodes, layout.node_rank, layout.host, layout.timeout_s) == (4, 3, "::1", 600.0)
    assert layout.endpoint == "[::1]:29400" and layout.loopback
    # A flag wins over Slurm's variable.
    assert nodes.node_layout(None, "0", "127.0.0.1:1", None, env=slurm).node_rank == 0


@pytest.mark.parametrize(("args", "message"), [
    (("2", None, "h:1", None), r"--node-rank R is needed with --nnodes 2: 0 on the node at --rdzv-endpoint"),
    (("2", "2", "h:1", None), r"--node-rank 2: node ranks run from 0 to 1 with --nnodes 2"),
    (("2", "0", None, None), r"--rdzv-endpoint HOST:PORT is needed with --nnodes 2"),
    (("2", "0", "h", None), r"--rdzv-endpoint: expected HOST:PORT .* got 'h'"),
    (("2", "0", "h:99999", None), r"--rdzv-endpoint: expected HOST:PORT"),
    (("0", "0", "h:1", None), r"--nnodes: expected a whole number >= 1"),
    (("2", "-1", "h:1", None), r"--node-rank: expected a whole number >= 0"),
    (("2", "0", "h:1", "soon"), r"--rdzv-timeout: expected seconds > 0"),
    ((None, "1", "h:1", None), r"--nnodes N is needed with --node-rank"),
])
def test_bad_node_flags_are_one_line_naming_the_flag(args, message):
    with pytest.raises(UsageError, match=message):
        nodes.node_layout(*args, env={})


def test_the_rendezvous_timeout_line_names_the_endpoint_and_the_nodes_that_joined():
    layout = nodes.NodeLayout(nnodes=3, node_rank=0, host="node0", port=29400, timeout_s=30)
    line = nodes.rendezvous_timeout_message(layout, 2)
    assert line.startswith("rendezvous at node0:29400: 2 of 3 nodes joined within 30 s: start `loaderbench sweep ...")
    assert "--nnodes 3 --node-rank R --rdzv-endpoint node0:29400" in line and "port 29400 open" in line
    assert "an unknown number of 3 nodes" in nodes.rendezvous_timeout_message(layout, None)


# ---------------------------------------------------------------------------------------------
# 2. The node rank and the rank under a launcher


def env(**kw: str) -> dict[str, str]:
    base = {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_PORT": "1",
            "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    return {**base, **kw}


def test_under_torchrun_the_given_node_rank_decides_the_rank():
    # torch's rendezvous made this node its group 0 (RANK 1), but it was given --node-rank 1:
    # its local rank 1 is rank 1 x 2 + 1 = 3, so rank 0, the leader, is on node 0.
    info = dist.RankInfo.from_environ(env(RANK="1", GROUP_RANK="0", LOADERBENCH_NODE_RANK="1"))
    assert (info.rank, info.node_rank, info.nnodes, info.leader) == (3, 1, 2, False)
    assert info.name() == f"node 1 ({info.host}) rank 3"
    # Under Slurm, SLURM_NODEID when it counts the same nodes; else torch's GROUP_RANK.
    info = dist.RankInfo.from_environ(env(RANK="3", GROUP_RANK="1", SLURM_NODEID="0", SLURM_NNODES="2"))
    assert (info.rank, info.node_rank) == (1, 0)
    info = dist.RankInfo.from_environ(env(RANK="3", GROUP_RANK="1", SLURM_NODEID="0", SLURM_NNODES="5"))
    assert (info.rank, info.node_rank) == (3, 1)
    # One node: the rank is torch's, the name has no node.
    one = dist.RankInfo.from_environ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "1"})
    assert (one.rank, one.node_rank, one.nnodes, one.name()) == (1, 0, 1, "rank 1")


def test_a_node_rank_outside_the_job_is_refused():
    with pytest.raises(UsageError, match=r"node rank 2 \(--node-rank\) is outside 0 to 1 for 2 nodes"):
        dist.RankInfo.from_environ(env(LOADERBENCH_NODE_RANK="2"))


# ---------------------------------------------------------------------------------------------
# 3. The settings every node shares


def cfg(flags: dict | None = None):
    overrides = {"dataset": {"kind": "tests.fixture_datasets:make_folder_latency", "data": "/data/node0"},
                 "compute": {"step": ComputeSpec(kind="sleep", ms=5.0)},
                 "grid": {"num_workers": (0, 1), "batch_size": (4,)},
                 "measure": {"batches": 5, "repeats": 1}}
    for where, value in (flags or {}).items():
        section, key = where.split(".")
        overrides.setdefault(section, {})[key] = value
    return resolve_defaults(build_config(None, overrides), MACHINE)


MACHINE = Machine(cuda=False, usable_cpus=2, ranks_per_node=1, world_size=2)


def test_only_the_data_paths_may_differ_between_nodes():
    a = nodes.shared_config(cfg())
    b = nodes.shared_config(cfg({"dataset.data": "/elsewhere/node1"}))
    assert a == b and nodes.config_digest(a) == nodes.config_digest(b)
    assert "data_path" not in a["dataset"] and "source" not in a
    c = nodes.shared_config(cfg({"measure.batches": 6}))
    assert nodes.config_digest(c) != nodes.config_digest(a)
    assert nodes.settings_differ(a, c, "node 0 (a)", "node 1 (b)") == (
        "nodes started with different settings: --batches (measure.batches) is 5 on node 0 (a) and 6 on "
        "node 1 (b); start every node with the same settings (only --data, --output and --node-rank may differ)")
    assert nodes.settings_differ(a, b, "x", "y") is None


@pytest.mark.parametrize(("path", "name"), [
    ("grid.num_workers", "--num-workers (grid.num_workers)"),
    ("dataset.factory", "--dataset (dataset.factory)"),
    ("compute.ms", "--compute (compute.ms)"),
    ("measure.min_time_s", "--min-time (measure.min_time_s)"),
    ("label", "--label (label)"),
    ("dataset.kwargs.size", "dataset.kwargs.size"),
])
def test_a_differing_setting_is_named_by_its_flag(path, name):
    assert nodes.setting_name(path) == name


def hello(rank: int, node_rank: int, config=None, local_world: int = 1, **extra) -> dict:
    shared = nodes.shared_config(config or cfg())
    return {"rank": rank, "world_size": 2, "local_rank": 0, "local_world_size": local_world, "node_rank": node_rank,
            "nnodes": 2, "host": f"h{node_rank}", "config": shared, "digest": nodes.config_digest(shared),
            "node": None, "numa": {}, **extra}


def test_the_handshake_names_the_node_and_setting_that_differ():
    mine = hello(0, 0)
    assert nodes.check_hellos(mine, [hello(1, 1, cfg({"dataset.data": "/x"}))]) is None
    assert nodes.check_hellos(mine, [hello(1, 1, cfg({"grid.num_workers": (0, 2)}))]) == (
        "nodes started with different settings: --num-workers (grid.num_workers) is [0, 1] on node 0 (h0) and "
        "[0, 2] on node 1 (h1); start every node with the same settings (only --data, --output and --node-rank "
        "may differ)")
    assert nodes.check_hellos(mine, [hello(1, 1, local_world=2)]) == (
        "node 1 (h1) runs 2 ranks and node 0 (h0) runs 1: give every node the same --nproc-per-node")


def test_the_leader_gathers_every_hello_and_says_how_many_ranks_joined():
    store = FakeStore()
    for r in (1, 2):
        nodes.post_hello(store, hello(r, r))
    got = nodes.gather_hellos(store, 3, timeout_s=1.0)
    assert [h["rank"] for h in got] == [1, 2]
    with pytest.raises(UsageError, match=r"only 2 of WORLD_SIZE=3 ranks joined within 0.2 s"):
        lonely = FakeStore()
        nodes.post_hello(lonely, hello(1, 1))
        nodes.gather_hellos(lonely, 3, timeout_s=0.2, poll_s=0.05)


def test_a_refusal_reaches_the_leader_and_a_node_rank_given_twice_is_refused():
    store = FakeStore()
    nodes.claim_rank(store, hello(1, 1))
    with pytest.raises(UsageError, match=r"node rank 1 was given to two nodes \(h1 is the second\): give each node "
                                         r"its own --node-rank, from 0 to 1"):
        nodes.claim_rank(store, hello(1, 1))
    with pytest.raises(UsageError, match="node rank 1 was given to two nodes"):
        nodes.gather_hellos(store, 2, timeout_s=5.0)  # the leader stops at once with the same line


# ---------------------------------------------------------------------------------------------
# 4. The jobs a follower accepts


def posted(config, **changes) -> dict:
    s = plan(config, MACHINE)[1].settings
    job = TrialJob(s, config.dataset, config.compute, config.measure, seed=3, timeout_s=config.config_timeout_s,
                   first_batch_timeout_s=60.0, loader_alone=False)
    return replace(job, **changes).to_dict()


def test_a_follower_runs_the_job_with_its_own_data_and_settings():
    leaders = cfg()
    mine = cfg({"dataset.data": "/data/node1"})
    job = nodes.accept_job(posted(leaders), mine, MACHINE, cache_states=["as-is"])
    assert job.dataset.data_path == "/data/node1"  # its own folder, not the leader's
    assert job.settings == plan(mine, MACHINE)[1].settings and job.seed == 3 and job.loader_alone is False
    assert job.first_batch_timeout_s == 60.0 and job.timeout_s == mine.config_timeout_s and job.cache_dir is None


@pytest.mark.parametrize(("change", "why"), [
    ({"dataset": "os:system"}, r"dataset.factory is \"os:system\" in the job and \"tests.fixture_datasets:make_folder_latency\""),
    ({"compute": ComputeSpec(kind="model", model="evil")}, r"compute.kind is \"model\" in the job and \"sleep\""),
    ({"measure": "batches"}, r"measure.batches is 500 in the job and 5 on this node's command line"),
    ({"settings": 3}, r"loader settings w3-.* are outside this node's grid"),
    ({"kind": "shell"}, r"job kind 'shell' is not one this node runs"),
    ({"cache": "cold"}, r"page-cache state 'cold': this node's --cache asks for as-is"),
    ({"timeout_s": 1e6}, r"a watchdog of 1e\+06 s, and this node's --config-timeout is 600 s"),
])
def test_a_job_outside_the_nodes_command_line_is_refused(change, why):
    config = cfg()
    raw = posted(config)
    key, value = next(iter(change.items()))
    if key == "dataset":
        raw["dataset"]["factory"] = value
    elif key == "compute":
        raw["compute"] = value.to_dict()
    elif key == "measure":
        raw["measure"]["batches"] = 500
    elif key == "settings":
        raw["settings"]["num_workers"] = value
    else:
        raw[key] = value
    with pytest.raises(nodes.JobRefused, match=why):
        nodes.accept_job(raw, config, MACHINE, cache_states=["as-is"])


def test_a_malformed_job_and_a_foreign_ceiling_are_refused():
    config = cfg()
    with pytest.raises(nodes.JobRefused, match=r"a malformed job \(KeyError"):
        nodes.accept_job({"kind": "config"}, config, MACHINE, cache_states=["as-is"])
    ceiling = posted(config, kind="ceiling")
    ceiling["settings"] = {**ceiling["settings"], "num_workers": 0, "batch_size": 4096}
    with pytest.raises(nodes.JobRefused, match="a compute ceiling at batch 4096"):
        nodes.accept_job(ceiling, config, MACHINE, cache_states=["as-is"])


def test_a_search_over_every_worker_count_may_go_up_to_eight_times_the_grid():
    # No --num-workers: the grid is 0..2 on 2 CPUs, and the search may widen to 8 x 2 = 16.
    config = resolve_defaults(build_config(None, {"dataset": {"kind": "tensor"}}), MACHINE)
    base = plan(config, MACHINE)[-1].settings
    for w, ok in ((16, True), (17, False)):
        raw = posted(config)
        raw["settings"] = replace(base, num_workers=w).to_dict()
        if ok:
            assert nodes.accept_job(raw, config, MACHINE, cache_states=["as-is"]).settings.num_workers == 16
        else:
            with pytest.raises(nodes.JobRefused, match="outside this node's grid"):
                nodes.accept_job(raw, config, MACHINE, cache_states=["as-is"])


# ---------------------------------------------------------------------------------------------
# 5. Heartbeats, the runner that loses a node, the follower that refuses a job


def test_a_rank_whose_heartbeat_stops_for_ten_seconds_is_lost(fake_clock: FakeClock):
    store = FakeStore()
    watch = nodes.Liveness(store, [1, 2], lost_after_s=10.0, every_s=1.0, clock=fake_clock)
    for _ in range(12):
        store.add("beat/1", 1)  # rank 1 beats every second; rank 2 never does
        fake_clock.advance(1.0)
        found = watch.lost()
        if fake_clock.t <= 10.0:
            assert found is None
    assert found == 2 and watch.lost() == 2  # kept once found
    # A store that went away is nobody's fault.

    class Gone(FakeStore):
        def add(self, key: str, n: int) -> int:
            raise RuntimeError("Connection reset by peer")

    gone = nodes.Liveness(Gone(), [1], lost_after_s=0.0, every_s=0.0, clock=fake_clock)
    fake_clock.advance(5)
    assert gone.lost() is None


def test_a_heartbeat_opens_a_new_client_after_a_failed_call():
    import time

    opened: list[FakeStore] = []

    class Flaky(FakeStore):
        def add(self, key: str, n: int) -> int:
            if len(opened) == 1:
                raise RuntimeError("timed out")  # the first client fails its first call
            return super().add(key, n)

    def open_client() -> FakeStore:
        opened.append(Flaky())
        return opened[-1]

    beat = nodes.Heartbeat(open_client, rank=3, interval_s=0.01).start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (len(opened) < 2 or opened[1].data.get("beat/3", 0) < 3):
        time.sleep(0.01)
    beat.stop()
    assert len(opened) == 2 and opened[1].data["beat/3"] >= 3


class Lost:
    """A Liveness that finds rank 1 lost at once."""

    lost_after_s = 10.0

    def lost(self) -> int | None:
        return 1


def test_the_leader_fails_the_trial_naming_the_lost_node_and_runs_nothing_after(monkeypatch):
    # Rank 0 measured (its process ended on the lost peer); rank 1 never reports: its node is
    # lost, the trial fails naming it, and later trials are not run.
    monkeypatch.setattr(dist, "run_isolated", lambda job, **kw: Outcome(status="failed", error=kw["stop_reason"]()))
    info = dist.RankInfo(0, 2, 0, 1, "127.0.0.1", 1, agent_store=True, node_rank=0, nnodes=2, host="a")
    store = FakeStore()
    runner = dist.DistributedRunner(store, info, names=["node 0 (a) rank 0", "node 1 (b) rank 1"], liveness=Lost())
    config = cfg()
    job = TrialJob.from_dict(posted(config))
    out = runner(job)
    assert out.status == "failed"
    assert out.error == ("node 1 (b) rank 1: stopped answering (no heartbeat for 10 s): its node was lost "
                         "(the other 1 rank stopped)")
    assert store.get("abort/0").decode() == "node 1 (b) rank 1: stopped answering (no heartbeat for 10 s): its node was lost"
    later = runner(job)
    assert later.status == "skipped" and later.error.startswith("not run: node 1 (b) rank 1: stopped answering")
    assert not store.check(["job/1"])  # nothing posted


def test_a_config_with_measured_repeats_keeps_them_when_a_later_one_is_not_run():
    from loaderbench.orchestration.run import _apply

    r = ConfigResult(settings=settings(0), status="ok", trials=[trial(0.001, 0.01)])
    _apply(r, Outcome(status="skipped", error="not run: node 1 lost"))
    assert r.status == "ok" and len(r.trials) == 1
    assert [w.message for w in r.warnings] == ["a repeat was not run: node 1 lost"]
    fresh = ConfigResult(settings=settings(1), status="ok")
    _apply(fresh, Outcome(status="skipped", error="not run: node 1 lost"))
    assert (fresh.status, fresh.error) == ("skipped", "not run: node 1 lost")


def test_a_follower_refuses_a_foreign_job_reports_it_and_goes_on(monkeypatch):
    ran: list[TrialJob] = []
    monkeypatch.setattr(dist, "run_isolated", lambda job, **kw: ran.append(job) or Outcome(status="ok", trial=trial(0.001, 0.01)))
    info = dist.RankInfo(1, 2, 0, 1, "127.0.0.1", 1, agent_store=True, node_rank=1, nnodes=2, host="b")
    config = cfg({"dataset.data": "/data/node1"})
    store = FakeStore()
    evil = posted(config)
    evil["dataset"]["factory"] = "os:system"
    store.set("job/0", json.dumps(evil))
    store.set("job/1", json.dumps(posted(config)))
    store.set("job/2", json.dumps({"kind": "stop"}))
    said: list[str] = []
    code = dist.follow(store, info, accept=lambda raw: nodes.accept_job(raw, config, MACHINE, cache_states=["as-is"]),
                       on_refused=said.append)
    assert code == 0 and len(ran) == 1 and ran[0].dataset.data_path == "/data/node1"
    refused = json.loads(store.get("outcome/0/1"))
    assert refused["status"] == "failed" and refused["error"].startswith(
        'refused a job from the job\'s store: dataset.factory is "os:system" in the job')
    assert store.get("abort/0").decode().startswith("node 1 (b) rank 1: refused a job")
    assert said == [refused["error"]]
    done = json.loads(store.get("outcome/1/1"))
    assert done["status"] == "ok" and (done["trial"]["node_rank"], done["trial"]["host"]) == (1, "b")


def test_a_follower_whose_leader_stopped_answering_ends():
    info = dist.RankInfo(1, 2, 0, 1, "127.0.0.1", 1, agent_store=True, node_rank=1, nnodes=2, host="b")
    assert dist.follow(FakeStore(), info, leader_lost=lambda: True) == 1


def test_merged_errors_and_notes_name_the_node():
    names = ["node 0 (a) rank 0", "node 1 (b) rank 1"]
    out = dist.merge_outcomes([Outcome(status="failed", error=dist.STOPPED),
                               Outcome(status="failed", error="ValueError: corrupt sample 3")], names)
    assert out.error == "node 1 (b) rank 1: ValueError: corrupt sample 3 (the other 1 rank stopped)"
    t = replace(trial(0.001, 0.01), notes=[Note.from_dict("the loader ended after 4 batches")])
    merged = dist.merge_trials([trial(0.001, 0.01), t], names)
    assert [n.message for n in merged.notes] == ["node 1 (b) rank 1: the loader ended after 4 batches"]


# ---------------------------------------------------------------------------------------------
# 6. Each node's preflight and its record


def test_a_node_with_less_shared_memory_skips_the_config_named_after_it():
    res = [ConfigResult(settings=settings(0), status="ok"), ConfigResult(settings=settings(4, bs=64), status="ok")]
    # 64 samples of 1 MiB x (4 workers x 2 + 1) = 576 MiB in flight: node 1 has 100 MiB free.
    facts = WorkloadFacts(sample_bytes=MIB, iterable=False)
    peer = nodes.Peer("node 1 (b)", {"shm": {"free_bytes": 100 * MIB}, "memory_available_bytes": 10**12},
                      Machine(cuda=False, usable_cpus=2, ranks_per_node=1, world_size=2))
    seen: list[str] = []

    class Obs:
        def warning(self, message: str) -> None:
            seen.append(message)

    nodes.preflight_peers(res, facts, [peer], Obs())  # type: ignore[arg-type]
    assert res[0].status == "ok"
    assert res[1].status == "skipped" and res[1].error.startswith(
        "node 1 (b): shared memory (/dev/shm) too small: this config needs about 576 MiB in flight, 100 MiB free")
    assert seen == [f"{res[1].settings.key()}: skipped: {res[1].error}"]


def test_the_nodes_record_groups_ranks_and_says_whether_workers_sit_on_the_gpus_numa_node():
    hs = [hello(0, 0, numa={"cpu_numa_nodes": [0], "gpu_numa_node": 0, "workers_on_gpu_numa_node": True},
                node={"usable_cpus": 16, "fs": "nfs4"}),
          hello(1, 0, numa={"cpu_numa_nodes": [0], "gpu_numa_node": 0, "workers_on_gpu_numa_node": True}),
          hello(2, 1, numa={"cpu_numa_nodes": [0, 1], "gpu_numa_node": 1, "workers_on_gpu_numa_node": False},
                node={"usable_cpus": 32, "fs": "ext4"}),
          hello(3, 1, numa={})]
    recs = nodes.node_records(hs)
    assert [(n["node_rank"], n["host"], n["ranks"], n["usable_cpus"], n["data_fs"]) for n in recs] == [
        (0, "h0", [0, 1], 16, "nfs4"), (1, "h1", [2, 3], 32, "ext4")]
    assert recs[0]["workers_on_gpu_numa_node"] is True and recs[0]["gpu_numa_nodes"] == [0, 0]
    assert recs[1]["workers_on_gpu_numa_node"] is None  # rank 3's placement is not visible
    warn = nodes.node_warnings({"node": {"warnings": ["same"]}},
                               [hello(2, 1, node={"warnings": ["same", "only here"]})])
    assert warn == ["node 1 (h1): only here"]


# ---------------------------------------------------------------------------------------------
# 7. Per-node figures


def rank(waits: list[float], compute_s: float, node: int, host: str, bs: int = 16, **kw) -> Trial:
    t = trial(0.0, compute_s, waits=waits, bs=bs)
    return replace(t, node_rank=node, host=host, **kw)


def job_trial(*ranks: Trial) -> Trial:
    merged = dist.merge_trials(list(ranks))
    return merged


def test_each_nodes_figures_sum_its_ranks_and_take_its_slowest_ranks_stall():
    # Node 0: ranks of 10 ms wait + 10 ms compute (800 samples/s each, stall 50%); node 1: one
    # rank like them and one of 30 ms wait (400 samples/s, stall 75%). CPU and bytes are summed.
    a = rank([0.010] * 10, 0.010, 0, "a", cpu_util_pct=50.0, storage_read_bytes=1_000_000, storage_mb_per_s=5.0)
    b = rank([0.010] * 10, 0.010, 0, "a", cpu_util_pct=70.0, storage_read_bytes=3_000_000, storage_mb_per_s=15.0)
    c = rank([0.010] * 10, 0.010, 1, "b", cpu_util_pct=40.0, storage_read_bytes=2_000_000, storage_mb_per_s=10.0)
    d = rank([0.030] * 10, 0.010, 1, "b", cpu_util_pct=20.0, storage_read_bytes=2_000_000, storage_mb_per_s=10.0)
    n0, n1 = stats.node_figures([job_trial(a, b, c, d)])
    assert (n0.node_rank, n0.host, n0.ranks) == (0, "a", [0, 1])
    assert n0.samples_per_s == pytest.approx(1600.0) and n0.stall_fraction == pytest.approx(0.5)
    assert n0.cpu_util_pct == pytest.approx(120.0) and n0.storage_read_bytes == 4_000_000
    assert n0.storage_mb_per_s == pytest.approx(20.0)
    assert (n1.ranks, n1.samples_per_s, n1.stall_fraction) == ([2, 3], pytest.approx(1200.0), pytest.approx(0.75))
    s = Summary(0, 0, 0, 0, 0, 0, 0, slowest_rank=3)
    stats.add_job_statistics(s, [job_trial(a, b, c, d)])
    assert s.slowest_node == 1 and s.job_storage_mb_per_s == pytest.approx(40.0)
    assert Summary.from_dict(s.to_dict()).nodes == [n0, n1]
    # One node (or trials that do not say theirs): no per-node view.
    assert stats.node_figures([job_trial(a, b)]) == []
    assert stats.node_figures([trial(0.01, 0.01)]) == []


def test_the_node_figures_are_medians_over_repeats():
    reps = [job_trial(rank([w] * 10, 0.010, 0, "a"), rank([0.0] * 10, 0.010, 1, "b")) for w in (0.010, 0.030, 0.015)]
    n0, _ = stats.node_figures(reps)
    # Node 0 stalls 10/20, 30/40, 15/25 -> median 0.6; samples/s 800, 400, 640 -> 640.
    assert n0.stall_fraction == pytest.approx(0.6) and n0.samples_per_s == pytest.approx(640.0)


# ---------------------------------------------------------------------------------------------
# 8. What N ranks would see


def test_what_if_ranks_from_one_rank_takes_the_per_step_maximum_of_independent_draws():
    # One rank, waits 0, 10, 20, 30 ms and 10 ms of compute per step, 16 samples per batch.
    one = trial(0.0, 0.010, waits=[0.0, 0.010, 0.020, 0.030], bs=16)
    same = ranks_mod.what_if_ranks([one], 1)
    assert same.wait_s == pytest.approx(0.015) and same.step_s == pytest.approx(0.025)
    assert same.stall_fraction == pytest.approx(0.6) and same.samples_per_s == pytest.approx(640.0)
    assert same.measured_samples_per_s == pytest.approx(640.0) and same.measured_stall_fraction == pytest.approx(0.6)
    # Two ranks: E[max of 2] = 0 x 1/16 + 10 x 3/16 + 20 x 5/16 + 30 x 7/16 = 21.25 ms.
    two = ranks_mod.what_if_ranks([one], 2)
    assert two.correlation is None and two.draws == 2.0 and two.from_ranks == 1
    assert two.wait_s == pytest.approx(0.02125) and two.step_s == pytest.approx(0.03125)
    assert two.stall_fraction == pytest.approx(0.68) and two.samples_per_s == pytest.approx(2 * 16 / 0.03125)
    # Many ranks: the step waits for the slowest wait seen, 30 ms.
    many = ranks_mod.what_if_ranks([one], 4096)
    assert many.wait_s == pytest.approx(0.030, abs=1e-6)


def test_what_if_ranks_from_two_ranks_counts_their_correlation():
    waits = [0.0, 0.010, 0.020, 0.030]
    # Two ranks with the same waits at the same steps (correlation 1): more ranks wait no more.
    t = dist.merge_trials([trial(0.0, 0.010, waits=waits), trial(0.0, 0.010, waits=waits)])
    assert ranks_mod.rank_correlation([t]) == pytest.approx(1.0)
    w = ranks_mod.what_if_ranks([t], 8)
    assert w.from_ranks == 2 and w.draws == pytest.approx(1.0) and w.stall_fraction == pytest.approx(0.6)
    assert w.samples_per_s == pytest.approx(8 * 16 / 0.025)
    # Opposite waits (correlation -1 counts as 0), in lockstep: the per-step maximum over the two
    # ranks is 30, 20, 20, 30 ms and every step takes it + 10 ms (the rank that waited less waits
    # the rest in the all-reduce, counted as its compute). 4 ranks are 2 independent pairs:
    # E[max of 2 draws of {20, 20, 30, 30}] = 20 x 1/4 + 30 x 3/4 = 27.5 ms.
    t = dist.merge_trials([lockstep(waits, waits[::-1], 0), lockstep(waits, waits[::-1], 1)])
    assert ranks_mod.rank_correlation([t]) == pytest.approx(-1.0)
    w = ranks_mod.what_if_ranks([t], 4)
    assert w.draws == 2.0 and w.wait_s == pytest.approx(0.0275) and w.step_s == pytest.approx(0.0375)
    assert w.stall_fraction == pytest.approx(0.0275 / 0.0375)
    # The run's own per-step maximum: 100 ms of the 140 ms the four steps took.
    assert w.measured_stall_fraction == pytest.approx(0.100 / 0.140)
    assert stats.step_max_stall([t]) == pytest.approx(0.100 / 0.140)
    # The job waited 100 of 140 ms; each rank's own stall is 60 / 140: the table's stall (the
    # slowest rank's) undercounts the waiting when the ranks wait at different steps.
    s = Summary(0, 0, 0, 0, 0, 0, 0)
    stats.add_job_statistics(s, [t])
    assert s.step_stall_fraction == pytest.approx(0.100 / 0.140) and s.nodes == []
    assert ranks_mod.what_if_ranks([t], 2).stall_fraction == pytest.approx(0.100 / 0.140)


def lockstep(a: list[float], b: list[float], which: int, compute_s: float = 0.010, bs: int = 16) -> Trial:
    """Rank `which` of two ranks in lockstep whose waits are `a` and `b`: each step ends
    compute_s after the later of the two batches came."""
    mine = (a, b)[which]
    steps = [max(x, y) + compute_s for x, y in zip(a, b)]
    return Trial(first_batch_s=0.5, warmup_batches=3, data_wait_s=list(mine),
                 compute_s=[s - w for s, w in zip(steps, mine)], step_s=steps, samples=bs * len(a),
                 wall_s=sum(steps), timing="host")


# ---------------------------------------------------------------------------------------------
# 9. The analysis: the per-node view, the what-if ranks=N, typed records


NODES_ENV = {"usable_cpus": 16, "distributed": {"world_size": 2, "local_world_size": 1, "nnodes": 2, "nodes": [
    {"node_rank": 0, "host": "a", "ranks": [0], "usable_cpus": 16, "workers_on_gpu_numa_node": True},
    {"node_rank": 1, "host": "b", "ranks": [1], "usable_cpus": 8, "workers_on_gpu_numa_node": None}]}}


def two_node_result(*configs: tuple[int, float]) -> ResultSet:
    """One config per (num_workers, node 1's wait in s) on two nodes of one rank each, in lockstep:
    node 0 waits 10 ms and node 1 the given wait per batch, every step takes node 1's wait + 10 ms
    (node 0 waits the rest in the all-reduce, counted as its compute); 16 samples per batch."""
    results = []
    for workers, slow_s in configs:
        step_s = slow_s + 0.010
        a = rank([0.010] * 10, step_s - 0.010, 0, "a", cpu_util_pct=50.0)
        b = rank([slow_s] * 10, 0.010, 1, "b", cpu_util_pct=20.0)
        results.append(ConfigResult(settings=settings(workers), status="ok", trials=[job_trial(a, b)]))
    return ResultSet(config={}, environment=NODES_ENV, results=results)


def test_the_per_node_view_is_the_recommended_configs_with_each_nodes_facts():
    # One config: node 0 waits 10 of 40 ms a step (400 samples/s, stall 25%), node 1 30 of 40
    # (400 samples/s, stall 75%): node 1's rank 1 binds, and the job waited 30 of 40 ms.
    rs = two_node_result((0, 0.030))
    a = analyze(rs)
    assert a.recommendation.settings == settings(0)
    assert a.per_node == PerNode(
        settings=settings(0),
        nodes=[NodeRow(NodeFigures(0, "a", [0], pytest.approx(400.0), pytest.approx(0.25), 50.0, None, None),
                       usable_cpus=16, workers_on_gpu_numa_node=True, binds=False),
               NodeRow(NodeFigures(1, "b", [1], pytest.approx(400.0), pytest.approx(0.75), 20.0, None, None),
                       usable_cpus=8, workers_on_gpu_numa_node=None, binds=True)],
        slowest_rank=1, slowest_rank_stall_fraction=pytest.approx(0.75), step_stall_fraction=pytest.approx(0.75),
        job_storage_mb_per_s=None)
    # One node: no view.
    assert analyze(ResultSet(config={}, environment={}, results=[
        ConfigResult(settings=settings(0), status="ok", trials=[trial(0.010, 0.010)])])).per_node is None


def test_without_a_recommended_row_of_its_own_the_view_is_the_fastest_configs():
    rs = two_node_result((0, 0.030), (1, 0.010))
    analyze(rs)
    # The 1-worker config steps every 20 ms (1,600 samples/s summed over the two ranks).
    view = ranks_mod.per_node(rs.results, None, rs.environment)
    assert view is not None and view.settings == settings(1)
    assert [row.figures.samples_per_s for row in view.nodes] == [pytest.approx(800.0), pytest.approx(800.0)]
    # A settings the results do not hold: the fastest too.
    assert ranks_mod.per_node(rs.results, settings(8), rs.environment).settings == settings(1)


def test_the_what_if_ranks_is_answered_by_analyze_beside_a_cpus_question():
    rs = two_node_result((0, 0.030))
    a = analyze(rs, what_if=[WhatIf(ranks=8)])
    w = a.what_if_ranks
    # Two ranks whose waits never change: no variance, so no correlation (independent draws);
    # 8 ranks are 4 groups like the measured pair, every step waits 30 ms: stall 75%, and
    # 8 x 16 samples / 40 ms = 3,200 samples/s.
    assert w is not None and w.settings == settings(0) and (w.ranks, w.from_ranks, w.steps) == (8, 2, 10)
    assert w.correlation is None and w.draws == pytest.approx(4.0)
    assert w.stall_fraction == pytest.approx(0.75) and w.samples_per_s == pytest.approx(3200.0)
    assert a.what_if is None
    # Asked beside cpus=: the pipeline model answers that one (nothing to fit here: no workers).
    a = analyze(rs, what_if=[WhatIf(cpus=4), WhatIf(ranks=2)])
    assert a.what_if is not None and a.what_if.question == WhatIf(cpus=4)
    assert a.what_if_ranks is not None and a.what_if_ranks.ranks == 2
    with pytest.raises(ValueError, match="ranks= is given twice"):
        analyze(rs, what_if=[WhatIf(ranks=2), WhatIf(ranks=4)])
    # Nothing measured: no prediction, said why.
    empty = ResultSet(config={}, environment={}, results=[ConfigResult(settings=settings(0), status="failed")])
    assert analyze(empty, what_if=[WhatIf(ranks=8)]).what_if_ranks == RanksAnswer(
        ranks=8, why=WhyNoPrediction.NOTHING_MEASURED)


def test_the_typed_records_cross_the_json_boundary():
    from loaderbench.conclusions import Analysis
    from loaderbench.results import LostRank, SweepRecord

    rs = two_node_result((0, 0.030))
    a = analyze(rs, what_if=[WhatIf(ranks=4)])
    back = Analysis.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back.per_node == a.per_node and back.what_if_ranks == a.what_if_ranks
    assert isinstance(back.per_node.nodes[1].figures, NodeFigures)  # type: ignore[union-attr]
    summary = rs.results[0].summary
    assert summary is not None and Summary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary
    record = SweepRecord(lost=LostRank(rank=1, after_s=15.0, node_rank=1, host="b"))
    assert SweepRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    assert SweepRecord.from_dict({}).lost is None  # a file written before


def test_the_what_if_question_parses_and_combines():
    from loaderbench.cli.common import parse_what_if

    cpus, rk = parse_what_if(["cpus=8", "ranks=16"])
    assert cpus == WhatIf(cpus=8) and rk == WhatIf(ranks=16)
    assert parse_what_if("ranks=4") == [WhatIf(ranks=4)] and parse_what_if(None) == []
    with pytest.raises(UsageError, match="--what-if: cpus= is given twice"):
        parse_what_if(["cpus=8", "disk=100", "cpus=4"])
    with pytest.raises(UsageError, match=r"--what-if: expected ranks=N \(data-parallel ranks, an integer of 1 or more"):
        parse_what_if(["ranks=0"])


def test_show_answers_ranks_beside_cpus_in_every_format():
    from typer.testing import CliRunner

    from loaderbench.cli import app

    kept = Path(__file__).resolve().parents[1] / "docs" / "data" / "nodes-2x1-cpu.json"
    args = ["show", str(kept), "--what-if", "ranks=16", "--what-if", "cpus=4"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "What if 4 usable CPUs (a prediction" in res.stdout
    assert "What if 16 ranks (a prediction from the per-step data-waits of this run's 2 ranks (2 workers)" in res.stdout
    data = json.loads(CliRunner().invoke(app, [*args, "--format", "json"]).stdout)
    w = data["analysis"]["what_if_ranks"]
    assert (w["ranks"], w["from_ranks"], w["settings"]["num_workers"], w["why"]) == (16, 2, 2, None)
    assert data["analysis"]["what_if"]["question"]["cpus"] == 4
    assert data["analysis"]["per_node"]["slowest_rank"] == 1
    bad = CliRunner().invoke(app, ["show", str(kept), "--what-if", "ranks=2", "--what-if", "ranks=4"])
    assert bad.exit_code == 2 and "--what-if: ranks= is given twice" in bad.output


# ---------------------------------------------------------------------------------------------
# 10. The sentences


def per_node_view() -> PerNode:
    return PerNode(
        settings=settings(2),
        nodes=[NodeRow(NodeFigures(0, "a", [0, 1], 1600.0, 0.5, 120.0, 4_000_000, 20.0), usable_cpus=16,
                       workers_on_gpu_numa_node=True),
               NodeRow(NodeFigures(1, "b", [2, 3], 800.0, 0.75, None, None, None), usable_cpus=8,
                       workers_on_gpu_numa_node=False, binds=True)],
        slowest_rank=3, slowest_rank_stall_fraction=0.75, step_stall_fraction=0.8, job_storage_mb_per_s=40.0)


def test_the_per_node_lines_name_the_node_and_rank_that_bind():
    from loaderbench.render.nodes import node_lines

    assert node_lines(per_node_view(), lambda s: f"{s.num_workers} workers") == [
        "Per node (2 workers; samples/s summed over the node's ranks, the stall of its slowest rank; num_workers "
        "is per rank):",
        "  node 0 (a), ranks 0-1: 1,600 samples/s, stall 50%, CPU 120%, read from storage 4.0 MB (20.0 MB/s), "
        "16 usable CPUs, workers on the GPU's NUMA node",
        "  node 1 (b), ranks 2-3: 800 samples/s, stall 75%, 8 usable CPUs, workers NOT on the GPU's NUMA node "
        "(bind them: numactl) *",
        "Binds: node 1 (b), rank 3 (stall 75%): every step waits for its data, so the job runs at its pace; the "
        "job waited for data 80% of its step time (at each step, the rank whose batch came last); the storage "
        "served 40.0 MB/s summed over the nodes.",
    ]
    assert node_lines(None) == []
    unknown = replace(per_node_view(), slowest_rank=None, slowest_rank_stall_fraction=None, step_stall_fraction=None,
                      job_storage_mb_per_s=None,
                      nodes=[replace(row, binds=False) for row in per_node_view().nodes])
    assert node_lines(unknown)[-1] == "Binds: not known."


def test_the_what_if_ranks_line_is_labelled_a_prediction():
    from loaderbench.render.nodes import what_if_ranks_lines

    one = trial(0.0, 0.010, waits=[0.0, 0.010, 0.020, 0.030], bs=16)
    answer = ranks_mod.what_if_ranks([one], 2, settings(0))
    assert answer is not None
    (line,) = what_if_ranks_lines(answer, lambda s: f"{s.num_workers} workers")
    assert line == (
        "What if 2 ranks (a prediction from the per-step data-waits of this run's 1 rank (0 workers), each added "
        "rank with a loader and CPUs like the measured ones: each step waits for the last rank's data, the per-step "
        "maximum over ranks, with independent draws; not a measurement): "
        "stall ~68%, ~1,024 samples/s summed over ranks, step ~31.2 ms (this run: stall 60% as the per-step "
        "maximum, 640 samples/s).")
    assert what_if_ranks_lines(RanksAnswer(ranks=8, why=WhyNoPrediction.NOTHING_MEASURED)) == [
        "What if 8 ranks: no prediction (no recommended config was measured)."]


def test_a_lost_rank_is_named_by_its_node_on_several_nodes():
    from loaderbench.render.nodes import lost_line
    from loaderbench.results import LostRank

    assert lost_line(LostRank(rank=1, after_s=15.0, node_rank=1, host="b")) == (
        "node 1 (b) rank 1: stopped answering (no heartbeat for 15 s): its node was lost")
    # The words the failed row says too (orchestration/distributed.py).
    assert lost_line(LostRank(rank=1, after_s=15.0, node_rank=1, host="b")) == (
        f"{nodes.rank_name({'rank': 1, 'node_rank': 1, 'host': 'b'}, 2)}: {dist.lost_error(15.0)}")
    assert lost_line(LostRank(rank=3, after_s=10.0)) == (
        "rank 3: stopped answering (no heartbeat for 10 s): its node was lost")


# ---------------------------------------------------------------------------------------------
# 11. NUMA placement from sysfs


def test_numa_placement_from_a_sysfs_tree(tmp_path: Path):
    from loaderbench.machine.numa import numa_placement, parse_cpulist, pci_numa_node

    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    for n, cpus in ((0, "0-3"), (1, "4-7")):
        (tmp_path / "node" / f"node{n}").mkdir(parents=True)
        (tmp_path / "node" / f"node{n}" / "cpulist").write_text(cpus + "\n")
    for bus, node in (("0000:3b:00.0", "1"), ("0000:5e:00.0", "-1")):
        (tmp_path / "pci" / bus).mkdir(parents=True)
        (tmp_path / "pci" / bus / "numa_node").write_text(node + "\n")
    roots = {"node_root": str(tmp_path / "node"), "pci_root": str(tmp_path / "pci")}
    assert numa_placement([4, 5], "0000:3B:00.0", **roots) == {
        "cpu_numa_nodes": [1], "gpu_numa_node": 1, "workers_on_gpu_numa_node": True}
    assert numa_placement([0, 4], "0000:3b:00.0", **roots)["workers_on_gpu_numa_node"] is False
    assert numa_placement([0], "0000:5e:00.0", **roots)["workers_on_gpu_numa_node"] is None  # -1: not said
    assert numa_placement([0], None, **roots)["gpu_numa_node"] is None
    assert pci_numa_node("0000:00:00.0", str(tmp_path / "pci")) is None
    assert numa_placement([0], None, node_root=str(tmp_path / "none"))["cpu_numa_nodes"] is None
