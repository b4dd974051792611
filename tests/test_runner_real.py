"""The runner's probes against a real DataLoader with workers (slow: starts processes)."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time

import pytest
import torch

from loaderbench.analysis.statistics import trial_samples_per_s, trial_stall_fraction
from loaderbench.measure.introspect import _tracking_loader_class, ready_batches
from loaderbench.measure.loop import probe_receive
from loaderbench.workload.datasets import TensorCostDataset


@pytest.mark.slow
@pytest.mark.parametrize("workers, factor", [(2, 2), (2, 4)])
def test_ready_queue_fills_to_workers_times_prefetch_factor(workers, factor):
    # prefetch_factor counts batches per worker, so W*P batches are built ahead.
    ds = TensorCostDataset(num_samples=512, sample_shape=(4,), cpu_ms=0.0, io_ms=0.2)
    loader = _tracking_loader_class()(ds, batch_size=4, num_workers=workers, prefetch_factor=factor)
    it = iter(loader)
    next(it)
    assert ready_batches(loader) is not None
    deadline = time.monotonic() + 10
    while ready_batches(loader) < workers * factor and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert ready_batches(loader) == workers * factor
    # Those batches are already built: next() costs only the receive floor.
    received = probe_receive(it, num_workers=workers, prefetch_factor=factor, period_s=0.0)
    assert len(received) == min(8, workers * factor)
    assert max(received) < 0.05
    del it


def test_ready_batches_is_none_without_workers():
    loader = _tracking_loader_class()(torch.zeros(8, 2), batch_size=2)
    iter(loader)
    assert ready_batches(loader) is None


class _SlowAfter(torch.utils.data.Dataset):
    """Samples 0-7 are instant; every later one takes `slow_s` (a worker is mid-batch)."""

    def __init__(self, slow_s: float) -> None:
        self.slow_s = slow_s

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> torch.Tensor:
        if i >= 8:
            time.sleep(self.slow_s)
        return torch.zeros(2)


@pytest.mark.parametrize("pin", [False, True])
def test_stop_workers_does_not_wait_for_the_batch_in_flight(pin):
    # Two workers are each 30 s into building a batch: torch's own shutdown would wait for
    # them (joining each for 5 s, then terminating it); stop_workers ends them at once, raises nothing (no SIGCHLD report of a
    # "killed" worker), and leaves no worker alive.
    from loaderbench.measure.introspect import stop_workers

    loader = _tracking_loader_class()(_SlowAfter(30.0), batch_size=4, num_workers=2, pin_memory=pin)
    it = iter(loader)
    next(it)
    next(it)
    time.sleep(0.3)  # both workers are now inside a 30-s sample
    workers = list(it._workers)
    t0 = time.monotonic()
    stop_workers(loader)
    assert time.monotonic() - t0 < 4.0  # torch joins each worker for up to 5 s first
    assert not any(w.is_alive() for w in workers)
    assert it._shutdown
    time.sleep(0.2)  # a SIGCHLD report would raise here, in the main thread
    stop_workers(loader)  # a second call does nothing


def _hold_and_die(lock) -> None:
    lock.acquire()
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)  # dies holding the lock, as a worker killed mid-read does


def test_stop_workers_never_waits_on_a_lock_a_killed_worker_held():
    # A worker takes the done event's lock for a moment on every index it reads; killed inside
    # that moment, it leaves the lock held for good. Here a process dies holding it, for sure:
    # torch's shutdown (done_event.set()) would then wait forever; stop_workers must not.
    import multiprocessing as mp
    import threading

    from loaderbench.measure.introspect import stop_workers

    loader = _tracking_loader_class()(_SlowAfter(30.0), batch_size=4, num_workers=2)
    it = iter(loader)
    next(it)
    holder = mp.get_context("fork").Process(target=_hold_and_die, args=(it._workers_done_event._cond,))
    holder.start()
    holder.join(10)
    assert holder.exitcode == -9
    assert not it._workers_done_event._cond.acquire(timeout=0.1)  # the lock is lost for good
    workers = list(it._workers)
    done = threading.Event()
    threading.Thread(target=lambda: (stop_workers(loader), done.set()), daemon=True).start()
    assert done.wait(10.0), "stop_workers waited on the dead worker's lock"
    assert not any(w.is_alive() for w in workers) and it._shutdown
    del it  # its __del__ must not wait on the lock either
    import gc

    gc.collect()


class _LeavesASegment(torch.utils.data.Dataset):
    """In a worker, each sample leaves /dev/shm/torch_<worker pid>_... behind (as a worker killed
    while creating a batch's segment does), then takes 30 s."""

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> torch.Tensor:
        if torch.utils.data.get_worker_info() is not None:
            with open(f"/dev/shm/torch_{os.getpid()}_4242_{i}", "wb") as fh:
                fh.write(b"x" * 4096)
            time.sleep(30.0)
        return torch.zeros(2)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_stop_workers_leaves_no_shared_memory_segment_behind():
    from loaderbench.measure.introspect import stop_workers

    loader = _tracking_loader_class()(_LeavesASegment(), batch_size=1, num_workers=2)
    it = iter(loader)
    deadline = time.monotonic() + 20
    pids = [w.pid for w in it._workers]
    mine = lambda: [n for n in os.listdir("/dev/shm") if n.split("_")[1:2] and n.split("_")[1] in map(str, pids)]  # noqa: E731
    while len(mine()) < 2:
        assert time.monotonic() < deadline, "the workers never started their samples"
        time.sleep(0.05)
    stop_workers(loader)
    assert mine() == []
    del it


def test_stop_workers_without_workers_does_nothing():
    from loaderbench.measure.introspect import stop_workers

    loader = _tracking_loader_class()(torch.zeros(8, 2), batch_size=2)
    it = iter(loader)
    next(it)
    stop_workers(loader)
    assert next(it).shape == (2, 2)


class _NoGpu:
    def start(self) -> None:
        pass

    def stop(self):
        return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-CPU times from /proc/stat")
def test_the_meter_tells_other_processes_on_the_usable_cpus_from_its_own_tree(tmp_path):
    from loaderbench.measure.meter import WindowMeter

    # A process outside this tree spins one CPU for the whole window (the shell that starts it
    # exits, so it is nobody's child here) while this tree sleeps: about 1 core-second of other
    # load over a 1-s window, and almost nothing of the tree's own. The machine's own other load
    # is read in a window of the same length first (`base`): on a quiet machine a few hundredths
    # of a second, on a busy 2-CPU one up to both CPUs (a fixed bound of 1.5 s failed there).
    def window(spin: bool = False):
        meter = WindowMeter(_NoGpu())
        meter.start()
        if spin:
            end = time.perf_counter() + 1.0
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(1.0)
        return meter.stop()

    base = window()
    assert base.other_cpu_s is not None
    pidfile = tmp_path / "pid"
    subprocess.run(["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $! > {pidfile}"],
                   check=True)
    pid = int(pidfile.read_text())
    try:
        time.sleep(0.3)
        busy = window()
    finally:
        os.kill(pid, signal.SIGKILL)
    assert busy.other_cpu_s is not None and busy.steal_s is not None
    assert 0.6 <= busy.other_cpu_s <= 1.5 * busy.wall_s + base.other_cpu_s
    assert busy.cpu_s < 0.3
    # Now the tree spins and nothing else of ours does: its own CPU is not counted as other load
    # (counted, it would add the ~1 s the tree used to the machine's other load), and the tree's
    # CPU is what the process itself reports using (under load, less than the wall time).
    t0 = time.process_time()
    own = window(spin=True)
    used = time.process_time() - t0
    assert own.cpu_s == pytest.approx(used, abs=0.1) and used >= 0.3
    assert own.other_cpu_s is not None and own.other_cpu_s < base.other_cpu_s + 0.4


def _spin_on_cpu0(seconds: float) -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="run-queue delay from /proc/PID/schedstat")
def test_the_meter_reads_workers_waiting_for_a_cpu_not_workers_that_sleep():
    # Three child processes spin on one CPU for the window: at any instant two of them are
    # runnable without it, about 2 s of run-queue delay in a 1-s window (more on a loaded
    # machine). Three that sleep are not runnable: next to none.
    import multiprocessing as mp

    from loaderbench.measure.meter import WindowMeter, run_queue_s

    def window(target, arg):
        ctx = mp.get_context("fork")
        kids = [ctx.Process(target=target, args=(arg,)) for _ in range(3)]
        for k in kids:
            k.start()
        time.sleep(0.2)
        meter = WindowMeter(_NoGpu())
        meter.start()
        time.sleep(1.0)
        reading = meter.stop()
        for k in kids:
            k.join()
        return reading

    spun = window(_spin_on_cpu0, 1.6)
    slept = window(time.sleep, 1.6)
    assert spun.workers_runq_s is not None and slept.workers_runq_s is not None
    assert spun.workers_runq_s >= 1.0 * spun.wall_s
    assert slept.workers_runq_s <= 0.2 * slept.wall_s
    assert run_queue_s(os.getpid()) is not None and run_queue_s(2**22 + 1) is None


@pytest.mark.slow
def test_a_repeat_skips_the_loader_alone_probe():
    # The same config twice in this process: the first trial probes the loader ceiling after its
    # window (at least its 0.5-s timed part), the repeat takes only the receive probe.
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import ComputeSpec, DatasetSpec, MeasureSpec, TrialJob
    from tests.helpers import settings

    measure = MeasureSpec(batches=10, warmup_batches=2, min_time_s=0.2)
    spec = DatasetSpec(kind="tensor", io_ms=0.5, sample_shape=(3, 8, 8))
    first, repeat = (measure_config(TrialJob(settings(2), spec, ComputeSpec(kind="sleep", ms=5.0), measure,
                                             loader_alone=alone)) for alone in (True, False))
    assert first.loader_alone_samples_per_s is not None and first.loader_alone_samples_per_s > 0
    assert repeat.loader_alone_samples_per_s is None and repeat.loader_alone_note is None
    assert first.probe_s - repeat.probe_s >= 0.45


def _job(nw: int, spec, step_ms: float, bs: int, batches: int = 10):
    from loaderbench.model import ComputeSpec, MeasureSpec, TrialJob
    from tests.helpers import settings

    return TrialJob(settings(nw, bs=bs), spec, ComputeSpec(kind="sleep", ms=step_ms),
                    MeasureSpec(batches=batches, warmup_batches=2, min_time_s=0.5))


def _sleeps_s(n: int, each_s: float) -> float:
    """Wall seconds of `n` sleeps of `each_s` here (the sleep-based datasets' real cost)."""
    t0 = time.perf_counter()
    for _ in range(n):
        time.sleep(each_s)
    return time.perf_counter() - t0


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 4])
def test_the_loader_ceiling_is_the_sustained_rate_of_workers_of_known_cost(workers):
    # 30 ms per sample, batch 16: a worker builds a batch in 0.48 s, so 2 and 4 workers sustain
    # about 66 and 133 samples/s (the half-second probe read 55 and 82). Expected from the build
    # time measured here, within 10%, and never below the row's own rate with the step.
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import DatasetSpec
    from tests.helpers import batch_load_s

    spec = DatasetSpec(kind="tensor", io_ms=30.0, sample_shape=(3, 8, 8), num_samples=4096)
    build_s = batch_load_s(TensorCostDataset(num_samples=4096, sample_shape=(3, 8, 8), cpu_ms=0.0, io_ms=30.0), 16,
                           batches=2)
    t = measure_config(_job(workers, spec, 100.0, 16))
    assert t.loader_alone_method == "sustained", t.loader_alone_reason
    assert t.loader_alone_samples_per_s == pytest.approx(workers * 16 / build_s, rel=0.10)
    assert t.loader_alone_samples_per_s >= trial_samples_per_s(t)
    assert sum(t.loader_alone_worker_batches) >= workers * 2
    assert len(t.worker_batches) == workers and sum(t.worker_batches) == len(t.step_s)


@pytest.mark.slow
def test_a_short_window_reads_what_the_workers_sustain_not_their_backlog():
    # 8 workers of 25 ms a sample, batch 8: each builds a batch in 0.2 s, so they sustain
    # 8 x 8 / 0.2 = 320 samples/s against a 20-ms step's 400. A 10-batch window starts with
    # rounds of batches built before it and takes them at the step's pace; the row holds to
    # what the workers produced (their completion instants, the warm-up's included), within
    # 10% of the build time measured here, and never above it by more than 5%; its stall is
    # the step's share left at that rate (1 - 20 ms x 320 / 8 = 20%).
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import DatasetSpec
    from tests.helpers import batch_load_s

    spec = DatasetSpec(kind="tensor", io_ms=25.0, sample_shape=(3, 8, 8), num_samples=4096)
    build_s = batch_load_s(TensorCostDataset(num_samples=4096, sample_shape=(3, 8, 8), cpu_ms=0.0, io_ms=25.0), 8,
                           batches=2)
    sustained = 8 * 8 / build_s
    t = measure_config(_job(8, spec, 20.0, 8))
    assert t.production_samples_per_s == pytest.approx(sustained, rel=0.10)
    assert trial_samples_per_s(t) <= 1.05 * sustained
    assert trial_stall_fraction(t) == pytest.approx(1.0 - 0.020 * trial_samples_per_s(t) / 8, abs=0.06)


@pytest.mark.slow
def test_the_loader_ceiling_of_workers_that_hold_finished_items_is_not_their_drain():
    # Each of 2 workers keeps a queue of 64 items (8 batches of 8) filled by a thread at 10 ms an
    # item; the 200-ms step lets them fill. The loader sustains 2 x 8 / (8 x 10 ms) = 200
    # samples/s; handing out the queued items alone runs at thousands.
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import DatasetSpec

    spec = DatasetSpec(kind="import", factory="tests.fixture_datasets:make_held_buffer",
                       kwargs={"held": 64, "sleep_ms": 10.0})
    build_s = _sleeps_s(8, 0.010)
    t = measure_config(_job(2, spec, 200.0, 8))
    assert t.loader_alone_method == "sustained", t.loader_alone_reason
    assert t.loader_alone_samples_per_s == pytest.approx(2 * 8 / build_s, rel=0.15)


@pytest.mark.slow
def test_the_loader_ceiling_of_a_stream_that_finishes_blocks_is_its_block_rate():
    # Each of 2 workers sleeps 80 x 2 ms, then yields the block's 80 items (5 batches of 16) at
    # once: they sustain 2 x 80 / 0.16 = 1,000 samples/s in bursts. Timing from a worker's first
    # completion to its last had read a burst's batches over part of a block (38% above a plain
    # draw at 4 workers on this kind of input).
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import DatasetSpec
    from tests.fixture_datasets import make_bursts

    spec = DatasetSpec(kind="import", factory="tests.fixture_datasets:make_bursts", kwargs={"block": 80, "sleep_ms": 2.0})
    t = measure_config(_job(2, spec, 10.0, 16))
    # The reference, timed here: a plain DataLoader of the same stream drawn for 6 whole blocks
    # per worker after 2 (on a quiet machine 2 x 80 / 0.16 s = 1,000 samples/s).
    it = iter(torch.utils.data.DataLoader(make_bursts(80, 2.0), batch_size=16, num_workers=2))
    for _ in range(2 * 5 * 2):
        next(it)
    t0 = time.perf_counter()
    for _ in range(2 * 5 * 6):
        next(it)
    drawn = 2 * 5 * 6 * 16 / (time.perf_counter() - t0)
    del it
    assert t.loader_alone_method == "sustained", t.loader_alone_reason
    assert t.loader_alone_samples_per_s == pytest.approx(drawn, rel=0.10)
    assert t.loader_alone_samples_per_s == pytest.approx(2 * 80 / _sleeps_s(1, 0.160), rel=0.15)
    assert t.loader_alone_intervals >= 1


@pytest.mark.slow
def test_the_window_holds_a_stream_of_blocks_to_what_its_workers_build():
    # The same stream (2 workers, blocks of 80 items built in 0.16 s, batch 16), under a 4-ms
    # step it could outrun: each worker's batches come in runs of 5 at the step's pace, then
    # one after a block's build. Its production counts the blocks' builds, timed from when each
    # task was sent: 2 x 80 / 0.16 = 1,000 samples/s (the sleeps timed here). Dropping every
    # interval 4x its worker's median as a wait for room, as before, dropped the builds and
    # read the runs: 5,764 samples/s on the 2-core machine, capping nothing.
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import DatasetSpec

    spec = DatasetSpec(kind="import", factory="tests.fixture_datasets:make_bursts", kwargs={"block": 80, "sleep_ms": 2.0})
    t = measure_config(_job(2, spec, 4.0, 16, batches=40))
    built = 2 * 80 / _sleeps_s(1, 0.160)
    assert t.production_samples_per_s == pytest.approx(built, rel=0.10)
    assert t.production_unit_batches == 5.0


@pytest.mark.slow
def test_a_stream_of_blocks_is_read_over_whole_cycles_of_its_window():
    # 2 workers, blocks of 100 items built in 0.15 s, batch 10, a 3-ms step: a worker cannot build
    # ahead of the block it is handing out, so a cycle is a block's build and its 20 batches'
    # steps (2 x 100 / (0.15 + 20 x 3 ms) = 952 samples/s on a quiet machine). A window of 50
    # batches holds 2.5 cycles; read whole, it said 1,078-1,086 against a plain loop's 945-947
    # (+14%); over its whole cycles, within 0.3%. Checked against a plain loop with the same step,
    # timed here (6 cycles after 2).
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import DatasetSpec
    from tests.fixture_datasets import make_bursts

    spec = DatasetSpec(kind="import", factory="tests.fixture_datasets:make_bursts",
                       kwargs={"block": 100, "sleep_ms": 1.5})
    t = measure_config(_job(2, spec, 3.0, 10, batches=50))
    assert t.production_unit_batches == 10.0
    it = iter(torch.utils.data.DataLoader(make_bursts(100, 1.5), batch_size=10, num_workers=2))
    for _ in range(40):
        next(it)
        time.sleep(0.003)
    t0 = time.perf_counter()
    for _ in range(120):
        next(it)
        time.sleep(0.003)
    plain = 120 * 10 / (time.perf_counter() - t0)
    del it
    assert trial_samples_per_s(t) == pytest.approx(plain, rel=0.07)


@pytest.mark.slow
def test_workers_with_nothing_to_read_deliver_nothing_and_their_wait_is_no_receive():
    # An IterableDataset split by shard, 1 shard, 4 workers: worker 0 builds every batch (8 x 5
    # ms), the other three deliver nothing. Waiting for worker 0 to build is not a receive: the
    # receives timed are far below a batch's build time (on a loaded machine one of the four
    # probes read 25 ms against a 41-ms build: its median, and all but one, are the check).
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import DatasetSpec

    spec = DatasetSpec(kind="import", factory="tests.fixture_datasets:make_shards", kwargs={"shards": 1})
    build_s = _sleeps_s(8, 0.005)
    t = measure_config(_job(4, spec, 10.0, 8))
    assert t.worker_batches[1:] == [0, 0, 0] and t.worker_batches[0] == len(t.step_s)
    assert t.loader_alone_worker_batches[1:] == [0, 0, 0] and t.loader_alone_worker_batches[0] >= 2
    assert t.receive_s and statistics.median(t.receive_s) < build_s / 4
    assert sum(r >= build_s / 2 for r in t.receive_s) <= 1
    assert t.loader_alone_method == "sustained"
    assert t.loader_alone_samples_per_s == pytest.approx(8 / build_s, rel=0.15)


@pytest.mark.slow
def test_a_batch_sent_late_by_a_worker_holding_its_gil_is_no_receive_cost():
    # Each sample costs 3 ms of pure-Python CPU in the worker (holding its GIL): the worker's
    # queue sends a finished batch from threads that wait for that GIL, 20-42 ms late on the
    # 2-core machine, where taking a 16 x 12-KB batch costs the main process about 1.5 ms of CPU.
    # The worker computes (about a core): its receives read as the main process's CPU seconds,
    # far below a batch's 48-ms build, and below the wall seconds timed.
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import DatasetSpec

    spec = DatasetSpec(kind="import", factory="tests.fixture_datasets:make_python_cpu", kwargs={"cpu_ms": 3.0})
    t = measure_config(_job(1, spec, 10.0, 16))
    assert t.receive_s and len(t.receive_cpu_s) == len(t.receive_s)
    read = t.receives_read_s(1)
    assert statistics.median(read) < 16 * 0.003 / 8
    assert statistics.median(read) <= statistics.median(t.receive_s)


@pytest.mark.slow
@pytest.mark.parametrize("workers, batches", [(2, 24), (1, 10)])
def test_a_streams_epoch_start_is_weighed_once_per_epoch_as_a_loop_over_whole_epochs_sees_it(workers, batches):
    # 320 items over 2 persistent workers at batch 16: 20 batches an epoch, each epoch's
    # __iter__ first spends 0.3 s building an index. A 24-batch window holds one such start: as
    # timed it weighs it once in 24 batches, where training meets it once in 20. The stream has
    # no length; the epoch the loop saw end tells it (20 batches, 320 samples), and the row's
    # figure is a whole epoch's, within 8% of a plain loop over three whole epochs timed here.
    # 1 worker asked for 10 batches: the window would end inside the first epoch, with no start
    # in it; it waits for the epoch's end, then ends on whole epochs.
    from torch.utils.data import DataLoader

    from loaderbench.analysis.statistics import trial_samples_per_s
    from loaderbench.measure.trial import measure_config
    from loaderbench.model import ComputeSpec, DatasetSpec, MeasureSpec, TrialJob
    from tests.fixture_datasets import make_epoch_index_stream
    from tests.helpers import settings

    spec = DatasetSpec(kind="import", factory="tests.fixture_datasets:make_epoch_index_stream")
    job = TrialJob(settings(workers, bs=16, persistent=True), spec, ComputeSpec(kind="sleep", ms=10.0),
                   MeasureSpec(batches=batches, warmup_batches=2, min_time_s=0.5))
    t = measure_config(job)
    assert (t.epoch_batches, t.epoch_samples) == (20, 320) and len(t.epoch_start_batches) >= 1
    loader = DataLoader(make_epoch_index_stream(), batch_size=16, num_workers=workers, persistent_workers=True)
    for _ in loader:  # the workers started: training's later epochs
        pass
    t0, n = time.perf_counter(), 0
    for _ in range(3):
        for _, labels in loader:
            n += len(labels)
            time.sleep(0.010)
    plain = n / (time.perf_counter() - t0)
    assert trial_samples_per_s(t) == pytest.approx(plain, rel=0.08)
