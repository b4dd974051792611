"""Distributed sweeps, the pure parts: merging the ranks' trials and outcomes, per-rank
statistics, sharding, CPUs per rank, preflight, ceilings, the agreed loop window, launcher
variables and the per-rank rendering. No subprocesses, workers or process groups."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from loaderbench.analysis import analyze, summarize_config
from loaderbench.analysis import statistics as stats
from loaderbench.analysis.advice import epoch_samples_per_s, recommend
from loaderbench.errors import UsageError
from loaderbench.measure.isolation import Outcome
from loaderbench.measure.loop import timed_loop
from loaderbench.measure.ranks import RankShard
from loaderbench.measure.timing import HostMarker
from loaderbench.model import Ceiling, CeilingMethod, ComputeSpec, ConfigResult, Note, Trial
from loaderbench.orchestration import distributed as dist
from loaderbench.orchestration.ceilings import measure_ceilings
from loaderbench.orchestration.config import build_config
from loaderbench.orchestration.grid import GridPoint
from loaderbench.orchestration.observer import NullObserver
from loaderbench.orchestration.plan import Machine, cpus_per_rank, resolve_defaults
from loaderbench.orchestration.preflight import WorkloadFacts, preflight, shm_need_bytes
from loaderbench.render import columns, footer
from loaderbench.render import sweep as render
from loaderbench.results import ResultSet
from tests.helpers import FakeClock, reason, result, settings, trial, with_ceilings

MIB = 2**20


def rank_trial(wait_s: float, compute_s: float, **fields) -> Trial:
    """10 batches of 16 samples, every batch waiting `wait_s` and computing `compute_s`."""
    return replace(trial(wait_s, compute_s, n=10, bs=16), **fields)


# ---------------------------------------------------------------------------------------------
# 1. merge_trials / slowest


def two_ranks() -> tuple[Trial, Trial]:
    r0 = rank_trial(
        0.001, 0.020, cpu_time_s=1.5, cpu_util_pct=150.0, main_cpu_util_pct=90.0, processes=3,
        memory_uss_bytes=10 * MIB, memory_pss_bytes=100 * MIB, loader_alone_samples_per_s=1000.0,
        notes=[Note.from_dict("the loader ended after 40 batches"), Note.from_dict("same note")],
    )
    r1 = rank_trial(
        0.010, 0.011, cpu_time_s=2.5, cpu_util_pct=250.0, main_cpu_util_pct=70.0, processes=5,
        memory_uss_bytes=20 * MIB, memory_pss_bytes=200 * MIB, loader_alone_samples_per_s=3000.0,
        notes=[Note.from_dict("same note")],
    )
    return r0, r1


def test_merge_trials_keeps_the_slowest_rank_and_sums_the_node_totals():
    r0, r1 = two_ranks()
    merged = dist.merge_trials([r0, r1])
    # Stall: rank 0 1/21 = 4.8%, rank 1 10/21 = 48%: rank 1 held the job back.
    assert dist.slowest([r0, r1]) == 1
    assert merged.rank == 1 and merged.world_size == 2
    assert merged.data_wait_s == r1.data_wait_s
    assert merged.compute_s == r1.compute_s
    assert merged.step_s == r1.step_s
    assert merged.samples == r1.samples == 160
    assert merged.main_cpu_util_pct == 70.0  # the slowest rank's own, not a sum
    # Node-wide sums over ranks.
    assert merged.cpu_time_s == pytest.approx(4.0)
    assert merged.cpu_util_pct == pytest.approx(400.0)
    assert merged.processes == 8
    assert merged.memory_uss_bytes == 30 * MIB
    assert merged.memory_pss_bytes == 300 * MIB
    assert merged.loader_alone_samples_per_s == pytest.approx(4000.0)
    # Notes tagged by rank, each once.
    assert [n.message for n in merged.notes] == [
        "rank 0: the loader ended after 40 batches",
        "rank 0: same note",
        "rank 1: same note",
    ]
    assert [n.kind for n in merged.notes] == ["loader-ended", "other", "other"]
    # Every rank's own trial kept, with its rank and the world size, and nothing nested.
    assert len(merged.rank_trials) == 2
    own = [Trial.from_dict(d) for d in merged.rank_trials]
    assert [t.rank for t in own] == [0, 1]
    assert [t.world_size for t in own] == [2, 2]
    assert [t.rank_trials for t in own] == [[], []]
    assert own[0].data_wait_s == r0.data_wait_s and own[1].data_wait_s == r1.data_wait_s
    assert [n.message for n in own[0].notes] == ["the loader ended after 40 batches", "same note"]  # untagged
    # The inputs are left alone.
    assert r0.rank is None and r1.rank is None and r1.rank_trials == []


def test_merged_throughput_is_the_sum_over_ranks_and_the_stall_the_slowest_ranks():
    r0, r1 = two_ranks()
    merged = dist.merge_trials([r0, r1])
    # Each rank: 10 x 16 = 160 samples in 10 x 21 ms = 0.21 s -> 761.9 samples/s; job: 1,523.8.
    expected = 160 / (10 * 0.021) + 160 / (10 * 0.021)
    assert expected == pytest.approx(1523.8095, rel=1e-6)
    assert stats.trial_samples_per_s(merged) == pytest.approx(expected)
    # The copy alone would claim one rank's 761.9.
    assert stats.trial_samples_per_s(replace(merged, rank_trials=[])) == pytest.approx(160 / 0.21)
    assert stats.trial_stall_fraction(merged) == pytest.approx(0.010 / 0.021)
    assert stats.trial_stall_fraction(merged) == pytest.approx(stats.trial_stall_fraction(r1))


def test_merge_trials_sum_is_none_when_any_rank_lacks_the_value():
    r0, r1 = two_ranks()
    merged = dist.merge_trials([replace(r0, cpu_time_s=None, memory_pss_bytes=None), r1])
    assert merged.cpu_time_s is None and merged.memory_pss_bytes is None
    assert merged.cpu_util_pct == pytest.approx(400.0)  # the others still summed
    merged = dist.merge_trials([r0, replace(r1, loader_alone_samples_per_s=None, processes=None)])
    assert merged.loader_alone_samples_per_s is None and merged.processes is None


def test_the_jobs_loader_ceiling_is_sustained_only_when_every_ranks_is():
    r0, r1 = two_ranks()
    r0, r1 = replace(r0, loader_alone_method="sustained"), replace(r1, loader_alone_method="sustained")
    merged = dist.merge_trials([r0, r1])
    assert (merged.loader_alone_method, merged.loader_alone_samples_per_s) == ("sustained", pytest.approx(4000.0))
    # Rank 1's probe ran out of time: the job delivers at least 1,000 + rank 1's bound of 2,500.
    bound = replace(r1, loader_alone_method="bound", loader_alone_samples_per_s=None,
                    loader_alone_bound_samples_per_s=2500.0, loader_alone_reason="time_cap")
    merged = dist.merge_trials([r0, bound])
    assert merged.loader_alone_samples_per_s is None
    assert (merged.loader_alone_method, merged.loader_alone_bound_samples_per_s, merged.loader_alone_reason) == (
        "bound", pytest.approx(3500.0), "time_cap")
    merged = dist.merge_trials([r0, replace(r1, loader_alone_method=None, loader_alone_samples_per_s=None)])
    assert merged.loader_alone_method is None and merged.loader_alone_bound_samples_per_s is None


def test_merge_trials_of_one_rank_leaves_notes_untagged_and_needs_a_trial():
    r0, _ = two_ranks()
    merged = dist.merge_trials([r0])
    assert merged.rank == 0 and merged.world_size == 1 and len(merged.rank_trials) == 1
    assert merged.notes == r0.notes
    with pytest.raises(ValueError):
        dist.merge_trials([])


def test_slowest_breaks_ties_by_lower_throughput_then_lower_rank():
    # Dyadic numbers, so the equal stalls are exactly equal: both 25%.
    fast = trial(0.25, 0.75, n=4, bs=16)  # step 1 s: 16 samples/s
    slow = trial(0.5, 1.5, n=4, bs=16)  # step 2 s: 8 samples/s
    assert stats.trial_stall_fraction(fast) == stats.trial_stall_fraction(slow) == 0.25
    assert dist.slowest([fast, slow]) == 1
    assert dist.slowest([slow, fast]) == 0
    assert dist.slowest([fast, fast]) == 0
    assert dist.slowest([fast, fast, fast]) == 0
    assert dist.slowest([fast, slow, slow]) == 1
    # A higher stall always wins over throughput.
    stalled = trial(0.5, 0.5, n=4, bs=16)  # 50% stall, 16 samples/s
    assert dist.slowest([slow, stalled]) == 1
    merged = dist.merge_trials([fast, slow])
    assert merged.rank == 1 and merged.step_s == slow.step_s


# ---------------------------------------------------------------------------------------------
# 2. summarize over merged trials


def three_repeats() -> list[Trial]:
    # (wait, compute) per rank: rate = 16 / (wait + compute), stall = wait / (wait + compute).
    return [
        # r0: 640/s, 4%;  r1: 800/s, 50% -> slowest 1; sum 1,440
        dist.merge_trials([rank_trial(0.001, 0.024), rank_trial(0.010, 0.010)]),
        # r0: 500/s, 37.5%; r1: 1,000/s, 12.5% -> slowest 0; sum 1,500
        dist.merge_trials([rank_trial(0.012, 0.020), rank_trial(0.002, 0.014)]),
        # r0: 1,000/s, 0%; r1: 640/s, 16% -> slowest 1; sum 1,640
        dist.merge_trials([rank_trial(0.0, 0.016), rank_trial(0.004, 0.021)]),
    ]


def test_summarize_merged_trials_gives_summed_median_and_per_rank_medians():
    trials = three_repeats()
    assert [t.rank for t in trials] == [1, 0, 1]
    s = stats.summarize(trials)
    assert s.samples_per_s == pytest.approx(1500.0)  # median of 1,440, 1,500, 1,640
    assert s.samples_per_s_min == pytest.approx(1440.0)
    assert s.samples_per_s_max == pytest.approx(1640.0)
    assert s.world_size == 2
    assert s.rank_samples_per_s == pytest.approx([640.0, 800.0])  # medians of (640, 500, 1000), (800, 1000, 640)
    assert s.rank_stall_fraction == pytest.approx([0.04, 0.16])  # medians of (.04, .375, 0), (.5, .125, .16)
    assert s.slowest_rank == 1  # two repeats of three
    # The job's stall is the slowest rank's per repeat: median of 50%, 37.5%, 16%.
    assert s.stall_fraction == pytest.approx(0.375)
    assert s.repeats == 3


def test_slowest_rank_vote_ties_go_to_the_lower_rank():
    trials = three_repeats()[:2]  # one repeat each: rank 1, rank 0
    assert stats.summarize(trials).slowest_rank == 0
    assert stats.summarize(trials[::-1]).slowest_rank == 0


def test_a_single_process_summary_has_no_rank_statistics():
    s = stats.summarize([trial(0.001, 0.020), trial(0.002, 0.020)])
    assert s.world_size is None
    assert s.rank_samples_per_s == [] and s.rank_stall_fraction == []
    assert s.slowest_rank is None


# ---------------------------------------------------------------------------------------------
# 3. merge_outcomes / merge_ceilings


def test_merge_outcomes_all_ok_merges_the_trials():
    r0, r1 = two_ranks()
    out = dist.merge_outcomes([
        Outcome(status="ok", trial=r0, last_batch=50),
        Outcome(status="ok", trial=r1, last_batch=48),
    ])
    assert out.status == "ok" and out.error is None
    assert out.trial is not None and out.trial.rank == 1 and len(out.trial.rank_trials) == 2
    assert stats.trial_samples_per_s(out.trial) == pytest.approx(2 * 160 / 0.21)
    assert out.last_batch == 48


def test_merge_outcomes_names_the_rank_that_failed_on_its_own():
    out = dist.merge_outcomes([
        Outcome(status="failed", error=dist.STOPPED, last_batch=3),
        Outcome(status="failed", error="ValueError: bad", last_batch=5, detail="Traceback ..."),
    ])
    assert out.status == "failed"
    assert out.error.startswith("rank 1: ValueError: bad")
    assert "the other 1 rank stopped" in out.error
    assert out.last_batch == 5 and out.detail == "Traceback ..."
    assert out.trial is None


def test_merge_outcomes_names_the_hung_rank_with_the_fewest_batches():
    out = dist.merge_outcomes([
        Outcome(status="hung", error="no progress for 60 s", last_batch=7),
        Outcome(status="hung", error="no batch within 60 s", last_batch=None),
    ])
    assert out.status == "hung"
    assert out.error.startswith("rank 1: no batch within 60 s")
    assert out.last_batch is None
    out = dist.merge_outcomes([
        Outcome(status="hung", error="a", last_batch=4),
        Outcome(status="hung", error="b", last_batch=9),
    ])
    assert out.error.startswith("rank 0: a")


def test_merge_outcomes_prefers_a_failure_over_a_hang():
    out = dist.merge_outcomes([
        Outcome(status="hung", error="no progress for 60 s", last_batch=None),
        Outcome(status="ok", trial=two_ranks()[1]),
        Outcome(status="failed", error="RuntimeError: boom", last_batch=12),
    ])
    assert out.status == "failed"
    assert out.error == "rank 2: RuntimeError: boom (the other 2 ranks stopped)"


def test_merge_outcomes_looks_past_a_lost_peer_and_a_rank_waiting_in_a_collective():
    # Rank 0's gloo error only echoes rank 1's end.
    out = dist.merge_outcomes([
        Outcome(status="failed", error="RuntimeError: [gloo] Connection reset by peer"),
        Outcome(status="failed", error="MemoryError: out of memory"),
    ])
    assert out.error == "rank 1: MemoryError: out of memory (the other 1 rank stopped)"
    # Only peer echoes: the first of them is named.
    out = dist.merge_outcomes([
        Outcome(status="failed", error=dist.STOPPED),
        Outcome(status="failed", error="DistBackendError: NCCL communicator was aborted"),
    ])
    assert out.error.startswith("rank 0: " + dist.STOPPED)
    # Two hangs: rank 0 reached fewer batches but its stacks show it waiting in a collective.
    waiting = 'File ".../torch/distributed/distributed_c10d.py", line 2, in all_reduce'
    out = dist.merge_outcomes([
        Outcome(status="hung", error="no progress", last_batch=3, detail=waiting),
        Outcome(status="hung", error="no progress", last_batch=9, detail='File "ds.py", in __getitem__'),
    ])
    assert out.error.startswith("rank 1: ") and out.last_batch == 9
    assert dist.peer_failure("Stopped because another rank failed")
    assert not dist.peer_failure("ValueError: bad") and not dist.peer_failure(None)
    assert dist.waits_for_peer(waiting) and not dist.waits_for_peer(None)


def test_merge_outcomes_passes_an_interruption_through():
    stop = Outcome(status="interrupted", error="interrupted")
    out = dist.merge_outcomes([Outcome(status="failed", error="x"), stop])
    assert out is stop


def test_merge_ceilings_sums_rates_and_keeps_the_slowest_step():
    c0 = Ceiling(16, 1000.0, 0.016, batches=40)
    c1 = Ceiling(16, 800.0, 0.020, batches=30)
    out = dist.merge_ceilings([c0, c1])
    assert out.samples_per_s == pytest.approx(1800.0)
    assert out.step_s == 0.020 and out.batches == 30  # the slowest rank's record
    assert out.rank_samples_per_s == (1000.0, 800.0)
    assert out.world_size == 2
    assert c1 == Ceiling(16, 800.0, 0.020, batches=30)  # not changed
    merged = dist.merge_outcomes([Outcome(status="ok", ceiling=c0), Outcome(status="ok", ceiling=c1)])
    assert merged.status == "ok" and merged.ceiling == out and merged.trial is None


# ---------------------------------------------------------------------------------------------
# 4. RankShard


def test_rank_shard_cuts_the_stream_by_position():
    base = [90, 91, 92, 93, 94, 95, 96, 97, 98, 99]  # values != positions
    shards = [list(RankShard(base, r, 3)) for r in range(3)]
    assert shards == [[90, 93, 96, 99], [91, 94, 97], [92, 95, 98]]
    assert [len(RankShard(base, r, 3)) for r in range(3)] == [4, 3, 3]
    flat = [i for s in shards for i in s]
    assert len(flat) == len(set(flat)) and sorted(flat) == base
    for n in range(0, 12):
        for world in (1, 2, 3, 4):
            seq = list(range(n))
            got = [list(RankShard(seq, r, world)) for r in range(world)]
            assert [len(RankShard(seq, r, world)) for r in range(world)] == [len(g) for g in got]
            assert sorted(i for g in got for i in g) == seq


# ---------------------------------------------------------------------------------------------
# 5. CPUs per rank and the default num_workers grid


def test_cpus_per_rank():
    assert cpus_per_rank(32, 2) == 16
    assert cpus_per_rank(16, 3) == 5
    assert cpus_per_rank(2, 2) == 1
    assert cpus_per_rank(3, 4) == 1
    assert cpus_per_rank(8, 0) == 8
    assert Machine(cuda=False, usable_cpus=16).cpus_per_rank == 16
    assert Machine(cuda=False, usable_cpus=16, ranks_per_node=2).cpus_per_rank == 8
    assert Machine(cuda=True, usable_cpus=7, ranks_per_node=8, world_size=16).cpus_per_rank == 1


def sweep_config(**grid):
    return build_config(None, {
        "dataset": {"kind": "tensor"},
        "compute": {"step": ComputeSpec(kind="sleep", ms=20.0)},
        "grid": {"batch_size": (64,), **grid},
    })


def test_default_num_workers_grid_uses_the_cpus_per_rank():
    cfg = sweep_config()
    assert cfg.grid["num_workers"] is None
    two = resolve_defaults(cfg, Machine(cuda=False, usable_cpus=16, ranks_per_node=2))
    assert two.grid["num_workers"] == (0, 1, 2, 4, 8)
    one = resolve_defaults(cfg, Machine(cuda=False, usable_cpus=16, ranks_per_node=1))
    assert one.grid["num_workers"] == (0, 1, 2, 4, 8, 16)
    # An explicit grid is kept.
    given = resolve_defaults(sweep_config(num_workers=(0, 16)), Machine(cuda=False, usable_cpus=16, ranks_per_node=2))
    assert given.grid["num_workers"] == (0, 16)


# ---------------------------------------------------------------------------------------------
# 6. preflight per node and per rank


class Warnings(NullObserver):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def warning(self, message: str) -> None:
        self.messages.append(message)


def run_preflight(s, *, free_bytes: int, ranks: int, usable_cpus: int = 64, sample_bytes: int = MIB):
    res = ConfigResult(settings=s, status="ok")
    obs = Warnings()
    env = {"shm": {"free_bytes": free_bytes}, "torch_num_threads": 1}
    machine = Machine(cuda=False, usable_cpus=usable_cpus, ranks_per_node=ranks)
    preflight([res], WorkloadFacts(sample_bytes=sample_bytes, iterable=False), env, machine, obs)
    return res, obs


def test_shm_need_is_multiplied_by_the_ranks_on_the_node():
    s = settings(2, bs=16)  # 2 workers x prefetch 2 + 1 = 5 batches of 16 MiB in flight
    assert shm_need_bytes(s, MIB) == 80 * MIB
    # 100 MiB free: one rank's 80 MiB fits (above half: a warning); two ranks' 160 MiB do not.
    alone, _ = run_preflight(s, free_bytes=100 * MIB, ranks=1)
    assert alone.status == "ok" and len(alone.warnings) == 1 and "80 MiB" in alone.warnings[0].message
    both, obs = run_preflight(s, free_bytes=100 * MIB, ranks=2)
    assert both.status == "skipped"
    assert "shared memory (/dev/shm) too small" in both.error and "160 MiB" in both.error
    assert len(obs.messages) == 1 and "skipped" in obs.messages[0]
    # 200 MiB free: one rank's 80 MiB is comfortable; two ranks' 160 MiB exceed half: a warning.
    alone, _ = run_preflight(s, free_bytes=200 * MIB, ranks=1)
    assert alone.status == "ok" and alone.warnings == []
    both, _ = run_preflight(s, free_bytes=200 * MIB, ranks=2)
    assert both.status == "ok"
    assert len(both.warnings) == 1 and "160 MiB of /dev/shm" in both.warnings[0].message


def test_oversubscription_is_checked_against_the_cpus_per_rank():
    ok, _ = run_preflight(settings(8), free_bytes=10**12, ranks=2, usable_cpus=16, sample_bytes=1)
    assert ok.warnings == []
    over, _ = run_preflight(settings(9), free_bytes=10**12, ranks=2, usable_cpus=16, sample_bytes=1)
    assert len(over.warnings) == 1
    w = over.warnings[0].message
    assert over.warnings[0].kind == "oversubscribed" and "9 workers on 8 usable CPUs" in w
    assert "per rank" in w and "16 CPUs / 2 ranks" in w
    # A single-process sweep has all 16 CPUs and says nothing about ranks.
    single, _ = run_preflight(settings(9), free_bytes=10**12, ranks=1, usable_cpus=16, sample_bytes=1)
    assert single.warnings == []


# ---------------------------------------------------------------------------------------------
# 7. the analytic ceiling of a sleep step, summed over ranks


def test_sleep_ceiling_is_summed_over_the_ranks():
    cfg = sweep_config()

    def runner(*args, **kwargs):
        raise AssertionError("a sleep ceiling is analytic: no process")

    points = [GridPoint(settings(0, bs=64)), GridPoint(settings(2, bs=64))]
    out = measure_ceilings(cfg, ComputeSpec(kind="sleep", ms=20.0), points, runner, None, NullObserver(),
                           world_size=2)
    assert list(out) == [64]
    c = out[64]
    assert c.samples_per_s == 6400.0  # 2 ranks x 64 samples / 20 ms
    assert c.rank_samples_per_s == (3200.0, 3200.0)
    assert c.step_s == 0.02 and c.world_size == 2 and c.method is CeilingMethod.ANALYTIC
    single = measure_ceilings(cfg, ComputeSpec(kind="sleep", ms=20.0), points, runner, None, NullObserver())
    assert single[64].samples_per_s == 3200.0
    assert single[64].rank_samples_per_s == () and single[64].world_size == 1


# ---------------------------------------------------------------------------------------------
# 8. timed_loop: the ranks agree where the window starts and ends


def serial_loader(clock: FakeClock, load_s: float, n: int, batch_size: int = 16):
    for _ in range(n):
        clock.advance(load_s)
        yield list(range(batch_size))


class OtherRank:
    """`agree` for this rank and one other whose flags are scripted, call by call; records the
    batch index (from on_batch) and this rank's flag at every call."""

    def __init__(self, flags: list[bool]) -> None:
        self.flags = flags
        self.index = -1
        self.calls: list[tuple[int, bool]] = []

    def on_batch(self, i: int) -> None:
        self.index = i

    def __call__(self, mine: bool) -> bool:
        other = self.flags[len(self.calls)]
        self.calls.append((self.index, mine))
        return mine and other


def agreed_loop(other: OtherRank, *, warmup_batches: int, min_batches: int):
    clock = FakeClock()
    # 10 ms to build a batch (every next() blocks), 10 ms step.
    return timed_loop(
        serial_loader(clock, 0.010, 1000),
        lambda b: clock.advance(0.010),
        count=len,
        marker=HostMarker(clock=clock),
        clock=clock,
        warmup_batches=warmup_batches,
        min_batches=min_batches,
        min_time_s=0.0,
        max_batches=1000,
        on_batch=other.on_batch,
        agree=other,
    )


def test_window_starts_and_ends_only_when_every_rank_agrees():
    # The other rank is not ready to start at batches 2 and 3 (k = 2 calls), and is done with its
    # window only at its 7th measured batch (this rank at its 5th).
    k = 2
    other = OtherRank([False] * k + [True] + [False] * 6 + [True])
    t = agreed_loop(other, warmup_batches=2, min_batches=5)
    assert t.warmup_batches == 2 + k == 4
    assert len(t.step_s) == 7 and t.samples == 7 * 16
    assert t.step_s == pytest.approx([0.020] * 7)
    assert t.data_wait_s == pytest.approx([0.010] * 7)
    # Calls: batches 2, 3, 4 (start: this rank ready each time), then measured batches 5..11
    # (done: this rank from its 5th measured batch, index 9).
    assert [i for i, _ in other.calls] == list(range(2, 12))
    assert [f for _, f in other.calls] == [True, True, True] + [False] * 4 + [True] * 3
    assert len(other.calls) == len(other.flags)


def test_agree_is_not_asked_before_the_warmup_is_done():
    other = OtherRank([True] * 100)
    t = agreed_loop(other, warmup_batches=6, min_batches=3)
    assert other.calls[0] == (6, True)
    assert min(i for i, _ in other.calls) == 6
    # Agreement at once: the same window as without `agree`.
    assert t.warmup_batches == 6 and len(t.step_s) == 3
    assert len(other.calls) == 1 + 3


# ---------------------------------------------------------------------------------------------
# 9. RankInfo.from_environ


def test_rank_info_outside_a_launcher_is_none():
    assert dist.RankInfo.from_environ({}) is None
    assert dist.RankInfo.from_environ({"RANK": "0"}) is None
    assert dist.RankInfo.from_environ({"WORLD_SIZE": "2", "MASTER_PORT": "29500"}) is None


def test_rank_info_reads_the_launcher_variables():
    info = dist.RankInfo.from_environ({
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True",
    })
    assert info == dist.RankInfo(
        rank=3, world_size=4, local_rank=1, local_world_size=2, master_addr="10.0.0.5",
        master_port=29500, agent_store=True, node_rank=1, nnodes=2,
    )
    assert not info.leader
    # Without LOCAL_* the whole job is on this node; no agent store; the default address.
    info = dist.RankInfo.from_environ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1234"})
    assert info == dist.RankInfo(
        rank=0, world_size=2, local_rank=0, local_world_size=2, master_addr="127.0.0.1",
        master_port=1234, agent_store=False, node_rank=0, nnodes=1,
    )
    assert info.leader
    info = dist.RankInfo.from_environ({
        "RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "1", "TORCHELASTIC_USE_AGENT_STORE": "False",
    })
    assert info is not None and info.agent_store is False


@pytest.mark.parametrize("env", [
    {"RANK": "2", "WORLD_SIZE": "2", "MASTER_PORT": "29500"},
    {"RANK": "-1", "WORLD_SIZE": "2", "MASTER_PORT": "29500"},
    {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3", "MASTER_PORT": "29500"},
    {"RANK": "one", "WORLD_SIZE": "2", "MASTER_PORT": "29500"},
    {"RANK": "0", "WORLD_SIZE": "2.0", "MASTER_PORT": "29500"},
    {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "port"},
    {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x", "MASTER_PORT": "29500"},
])
def test_rank_info_rejects_bad_variables(env):
    with pytest.raises(UsageError):
        dist.RankInfo.from_environ(env)


# ---------------------------------------------------------------------------------------------
# 10. distributed.strip_option


def test_strip_option_drops_both_forms():
    from loaderbench.orchestration.distributed import strip_option

    name = "--nproc-per-node"
    assert strip_option(["sweep", "--nproc-per-node", "2", "--batches", "5"], name) == ["sweep", "--batches", "5"]
    assert strip_option(["sweep", "--nproc-per-node=2", "--batches", "5"], name) == ["sweep", "--batches", "5"]
    assert strip_option(["sweep", "--batches", "5", "--nproc-per-node", "4"], name) == ["sweep", "--batches", "5"]
    assert strip_option(["sweep", "--batches", "5"], name) == ["sweep", "--batches", "5"]
    # Another option that merely starts with the same letters stays.
    assert strip_option(["sweep", "--nproc-per-node-x", "1"], name) == ["sweep", "--nproc-per-node-x", "1"]


# ---------------------------------------------------------------------------------------------
# 11. rendering


def distributed_result_set() -> ResultSet:
    # r0: 16 / 20 ms = 800/s, stall 1/20 = 5.0%; r1: 16 / 21 ms = 761.9/s, stall 10/21 = 48%.
    merged = dist.merge_trials([rank_trial(0.001, 0.019), rank_trial(0.010, 0.011)])
    rs = ResultSet(
        config={"dataset": {"kind": "tensor", "sample_shape": [3, 8, 8]},
                "compute": {"kind": "sleep", "ms": 16}, "measure": {}},
        environment={"cuda_available": False, "usable_cpus": 4,
                     "distributed": {"world_size": 2, "local_world_size": 2, "launcher": "torchrun"}},
        results=[result(settings(2), merged)],
        # Each rank's own ceiling: r0 1,000/s, r1 800/s (sum 1,800; slowest step 20 ms).
        ceilings={16: Ceiling(16, 1800.0, 0.020, world_size=2, rank_samples_per_s=(1000.0, 800.0))},
    )
    analyze(rs)
    return rs


def test_rank_cells_show_each_ranks_stall_and_mark_the_slowest():
    rs = distributed_result_set()
    m = rs.results[0].summary
    assert m.world_size == 2 and m.slowest_rank == 1
    assert m.samples_per_s == pytest.approx(800.0 + 16 / 0.021)
    cells = columns.rank_cells(m)
    assert cells == {"rank_rate": "762–800", "rank_stall": "r0 5.0% · r1 48%*"}
    row = columns.row_cells(rs.results[0], cuda=False)
    assert row["rank_stall"] == "r0 5.0% · r1 48%*"
    assert row["ceiling_pct"] == "87%"  # 1,561.9 of 1,800
    # More than four ranks: the range and the slowest rank.
    many = SimpleNamespace(rank_samples_per_s=[100.0, 1200.5, 300.0, 400.0, 500.0],
                           rank_stall_fraction=[0.01, 0.5, 0.02, 0.03, 0.04], slowest_rank=1)
    assert columns.rank_cells(many) == {"rank_rate": "100–1,200", "rank_stall": "1.0%–50%, slowest r1"}
    assert columns.rank_cells(SimpleNamespace(rank_samples_per_s=[])) == {"rank_rate": "n/a", "rank_stall": "n/a"}


def test_per_rank_line_names_the_rank_furthest_from_its_ceiling():
    rs = distributed_result_set()
    assert rs.recommendation is not None and rs.recommendation.settings == settings(2)
    # r0: 800 / 1,000 = 80.0%; r1: 761.9 / 800 = 95.2%: rank 0 is lowest though rank 1 stalls most.
    line = footer.per_rank_line(rs)
    assert line == (
        "Per rank (samples/s): r0 800, r1 762; every rank at least 80.0% of its own compute "
        "ceiling (lowest: rank 0)."
    )
    assert line in footer.footer_lines(rs)
    # Without per-rank ceilings: the rates only.
    rs.ceilings = {16: Ceiling(16, 1800.0, 0.020)}
    analyze(rs)
    assert rs.results[0].summary.rank_ceiling_shares == []
    assert footer.per_rank_line(rs) == "Per rank (samples/s): r0 800, r1 762."
    # Ceilings for another number of ranks are not compared.
    rs.ceilings = {16: Ceiling(16, 1.0, 0.020, rank_samples_per_s=(1.0,))}
    analyze(rs)
    assert footer.per_rank_line(rs) == "Per rank (samples/s): r0 800, r1 762."


def test_rank_shares_are_hand_computed():
    from loaderbench.analysis.ceiling import rank_ceiling_shares

    assert rank_ceiling_shares([800.0, 600.0], [1000.0, 800.0]) == pytest.approx([0.8, 0.75])
    assert rank_ceiling_shares([800.0, 600.0], []) == []
    assert rank_ceiling_shares([800.0, 600.0], [1000.0]) == []
    assert rank_ceiling_shares([800.0, 600.0], [1000.0, 0.0]) == []


def test_rank_columns_and_header_only_for_a_distributed_result_set():
    rs = distributed_result_set()
    keys = [k for k, _ in columns.visible_columns(rs)]
    assert "rank_rate" in keys and "rank_stall" in keys
    header = render.header_lines(rs)
    assert any(ln.startswith("distributed: 2 ranks (2 on this node)") for ln in header)

    single = ResultSet(
        config=rs.config, environment={"cuda_available": False, "usable_cpus": 4},
        results=[result(settings(2), trial(0.001, 0.019)), result(settings(4), trial(0.0, 0.019))],
        ceilings={16: Ceiling(16, 1000.0, 0.016)},
    )
    analyze(single)
    keys = [k for k, _ in columns.visible_columns(single)]
    assert "rank_rate" not in keys and "rank_stall" not in keys
    assert not any(ln.startswith("distributed:") for ln in render.header_lines(single))
    assert footer.per_rank_line(single) == ""


# ---------------------------------------------------------------------------------------------
# Beyond the new modules: `loaderbench compare` reads the trials of a distributed result file.


def test_compare_per_trial_values_of_a_distributed_config_are_the_jobs():
    from loaderbench.analysis import compare

    r = result(settings(2), *three_repeats())
    assert compare.side_value(r, "samples_per_s") == pytest.approx(1500.0)
    assert sorted(compare.trial_samples(r, "samples_per_s")) == pytest.approx([1440.0, 1500.0, 1640.0])
    # Per batch and bootstrap: the slowest rank's batches scaled to the job (lockstep ranks).
    import numpy as np

    batches = compare.batch_samples(r, "samples_per_s")
    assert float(np.median(batches)) == pytest.approx(1500.0, rel=0.15)
    reps = compare._bootstrap_side(r, "samples_per_s", "batches", compare._rng(0, "k"), 200)
    assert float(np.median(reps)) == pytest.approx(1500.0, rel=0.15)


def test_a_distributed_knee_short_of_its_ceiling_names_the_cpu_per_rank_step():
    # Measured on 2 H200s with 32 CPUs (docs/benchmarks.md section 6): each rank's step alone
    # takes 56.5 ms (ceiling 2 x 256 / 0.0565 samples/s); beside 2 x 16 workers the steps
    # average 63.3 ms (a tail: median 58.0 ms) and the ranks' process trees use 30.9 CPUs.
    waits = [0.0019] * 10
    computes = [0.058] * 9 + [0.1107]  # mean 63.27 ms, median 58.0 ms
    ranks = []
    for _ in range(2):
        ranks.append(Trial(
            first_batch_s=1.0, warmup_batches=3, data_wait_s=list(waits), compute_s=list(computes),
            step_s=[w + c for w, c in zip(waits, computes)], samples=2560, wall_s=0.65, timing="events",
            cpu_util_pct=1545.0,
        ))
    r = ConfigResult(settings=settings(16, pin=True, pf=True, bs=256), status="ok")
    r.trials = [dist.merge_trials(ranks)]
    summarize_config(r)
    ceiling = 2 * 256 / 0.0565
    rec = recommend(with_ceilings([r], {256: ceiling}), usable_cpus=32)
    # per rank: 256 / 0.06517 = 3,928 samples/s; job 7,856 = 87% of 9,062
    assert "The knee reaches 87% of the compute ceiling" in reason(rec)
    assert "65.2 ms" not in reason(rec)  # the step, not step + wait
    assert "63.3 ms per batch on average (median 58.0 ms) vs 56.5 ms alone" in reason(rec)
    assert "30.9 of 32 usable CPUs" in reason(rec) and "binding resource is the CPU" in reason(rec)


def test_check_ranks_needs_a_gpu_and_a_cpu_per_rank():
    dist.check_ranks(2, gpus=2, usable_cpus=32, device="auto", flag="--nproc-per-node")
    dist.check_ranks(4, gpus=2, usable_cpus=32, device="cpu", flag="--nproc-per-node")  # CPU ranks
    dist.check_ranks(2, gpus=0, usable_cpus=2, device="auto", flag="--nproc-per-node")
    with pytest.raises(UsageError, match=r"--nproc-per-node 4: 2 CUDA GPUs visible .* use --nproc-per-node 2"):
        dist.check_ranks(4, gpus=2, usable_cpus=32, device="auto", flag="--nproc-per-node")
    with pytest.raises(UsageError, match=r"more ranks than the 2 usable CPUs .* at most --nproc-per-node 2"):
        dist.check_ranks(3, gpus=0, usable_cpus=2, device="auto", flag="--nproc-per-node")


def test_compare_calls_a_different_number_of_ranks_not_comparable():
    from loaderbench.analysis import compare

    def rs(world: int | None) -> ResultSet:
        env = {"fingerprint": "m"}
        if world:
            env["distributed"] = {"world_size": world, "local_world_size": world, "launcher": "torchrun"}
        r = result(settings(0), trial(0.001, 0.010), trial(0.001, 0.010), trial(0.001, 0.010))
        return ResultSet(config={"dataset": {"kind": "tensor"}, "compute": {"kind": "sleep", "ms": 10}},
                         environment=env, results=[r])

    assert compare.run_info(rs(None)).ranks == 1 and compare.run_info(rs(2)).ranks == 2
    reasons = compare.comparability(compare.run_info(rs(2)), compare.run_info(rs(None)))
    assert reasons == ["different number of ranks (2 vs 1: samples/s is summed over a distributed sweep's ranks)"]
    assert compare.comparability(compare.run_info(rs(2)), compare.run_info(rs(2))) == []
    cmp = compare.compare_results(rs(2), [rs(None)])
    assert cmp.has_not_comparable() and cmp.exit_code(strict=False) == 0


def test_an_iterable_dataset_on_several_ranks_is_flagged():
    def warnings_for(world: int) -> list[str]:  # the messages
        res = ConfigResult(settings=settings(0), status="ok")
        machine = Machine(cuda=False, usable_cpus=64, ranks_per_node=world, world_size=world)
        facts = WorkloadFacts(sample_bytes=1, iterable=True)
        preflight([res], facts, {"shm": {"free_bytes": 10**12}}, machine, Warnings())
        return [w.message for w in res.warnings]

    assert warnings_for(1) == []
    (w,) = warnings_for(2)
    assert w.startswith("IterableDataset on 2 ranks") and "counts each of them 2 times" in w


def loader_bound_on_two_ranks(nw: int, wait_s: float, compute_s: float, first_s: float = 0.5) -> ConfigResult:
    """Two ranks with the same loader: each steps every wait + compute seconds, batch 16."""
    ranks = [
        Trial(
            first_batch_s=first_s, warmup_batches=3, data_wait_s=[wait_s] * 20, compute_s=[compute_s] * 20,
            step_s=[wait_s + compute_s] * 20, samples=320, wall_s=20 * (wait_s + compute_s), timing="host",
        )
        for _ in range(2)
    ]
    r = ConfigResult(settings=settings(nw, bs=16), status="ok")
    r.trials = [dist.merge_trials(ranks)]
    summarize_config(r)
    return r


def test_workers_needed_and_epoch_throughput_use_each_ranks_own_step():
    # 1 worker per rank, 30 ms wait + 10 ms compute: each rank steps every 40 ms (400 samples/s,
    # the job 800). One worker builds a batch in 1 x 40 ms, so 40 / 10 = 4 workers per rank keep
    # the step fed (the job's 800 samples/s must not halve the step to 20 ms: that gave 2).
    r = loader_bound_on_two_ranks(1, 0.030, 0.010)
    assert r.summary.samples_per_s == pytest.approx(800.0)
    assert r.summary.mean_step_s == pytest.approx(0.040)
    rs = ResultSet(config={}, environment={}, results=[r])
    analyze(rs)
    assert r.summary.workers_needed == 4
    assert "about 4 workers per rank" in reason(rs.recommendation)
    # An epoch of 20 batches per rank: 0.5 s start-up + 20 x 40 ms = 1.3 s for 2 x 320 samples.
    assert epoch_samples_per_s(r, 20) == pytest.approx(640 / 1.3)


def test_a_single_worker_estimate_is_singular():
    # 0 workers, 5 ms wait + 10 ms compute: building a batch takes the 5 ms mean wait -> 1 worker.
    r = loader_bound_on_two_ranks(0, 0.005, 0.010)
    rs = ResultSet(config={}, environment={}, results=[r])
    analyze(rs)
    assert r.summary.workers_needed == 1
    assert "about 1 worker per rank (" in reason(rs.recommendation)


def test_a_real_datasets_epoch_is_counted_per_rank(tmp_path):
    # 1,000 samples at batch 16: 62 batches per epoch on one process, 1,000 / (16 x 2) = 31 on
    # each of 2 ranks (DistributedSampler gives each rank half of every epoch).
    from loaderbench.orchestration.run import run_sweep

    def epoch_batches(machine: Machine) -> int:
        cfg = build_config(None, {
            "dataset": {"kind": "tests.fixture_datasets:make_nested"},
            "compute": {"step": ComputeSpec(kind="sleep", ms=12.0)},
            "grid": {"num_workers": (0,), "batch_size": (16,)},
        })
        rs = run_sweep(
            resolve_defaults(cfg, machine), output=tmp_path / "r.json", environment={}, machine=machine,
            runner=lambda *a, **kw: Outcome(status="ok", trial=trial(0.001, 0.012)),
            save=lambda r, p: None, facts=WorkloadFacts(sample_bytes=16, iterable=False, num_samples=1000),
        )
        return rs.sweep.epoch_batches

    assert epoch_batches(Machine(cuda=False, usable_cpus=2)) == 62
    assert epoch_batches(Machine(cuda=False, usable_cpus=2, ranks_per_node=2, world_size=2)) == 31


def test_a_rank_waits_for_the_store_and_names_the_address_when_nothing_answers():
    import socket
    import time

    port = dist.free_port()
    info = dist.RankInfo(1, 2, 1, 2, "127.0.0.1", port, agent_store=False)
    t0 = time.monotonic()
    with pytest.raises(UsageError, match=rf"rank 1: nothing answered at .* = 127\.0\.0\.1:{port} within 0\.3 s: start rank 0"):
        dist.wait_for_listener(info, 0.3, poll_s=0.05)
    assert time.monotonic() - t0 < 2.0  # not c10d's minutes of retries
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        dist.wait_for_listener(replace(info, master_port=listener.getsockname()[1]), 0.3)  # returns at once
