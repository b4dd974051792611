"""`WindowMeter`: what the process tree used over a measured window: CPU, memory, storage reads,
GPU utilisation and peak GPU memory.

NOTE [every process that lived in the window]
    DataLoader workers start and end inside a window when epochs are short and
    `persistent_workers` is off: reading the process tree only at the window's two ends misses
    the CPU of every worker that was born after the start (not in the first reading) or died
    before the end (not in the second), and 2 busy decoding workers read as 0.1 cores. So a
    background thread reads the tree every `interval_s` (0.2 s: under 0.5% of a core for 16
    workers), keeping each process's latest CPU time under (pid, create time); the window's CPU
    is the sum over every process seen of (last reading - reading at the start, 0 for a process
    born in the window). A process that lived less than one interval between two readings can
    still be missed; one that ends between readings loses at most its last interval.

NOTE [what else ran on the usable CPUs]
    A row measured while something else used the same CPUs reads slow for a reason outside the
    config: on a shared host one config measured 35% apart in two runs of one call, with its
    workers spending 3.4-3.8 ms of CPU per sample in the slow run against 2.3-2.5 in the fast
    one. The meter reads the kernel's per-CPU times (`psutil.cpu_times(percpu=True)`, i.e.
    /proc/stat) of the CPUs in this process's affinity mask at both ends of the window: busy
    time there (everything but idle, iowait and steal) minus the tree's own CPU time is what
    other processes used (`other_cpu_s`), and `steal_s` is the time a hypervisor gave those
    virtual CPUs to other guests. Neither sees a neighbour on the same physical cores outside
    the mask or outside this machine's view (another container, a sibling hyperthread): the
    workers' CPU time per sample, which the analysis compares across rows, shows that one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from loaderbench.machine.processes import process_tree

Clock = Callable[[], float]


@dataclass
class WindowReading:
    """What one window used. `cpu_s`: CPU seconds of every process that lived in it; `processes`:
    the most alive at once; `memory_*_bytes`: the tree's summed USS / PSS at the end;
    `read_bytes`: storage bytes read over the window (None where unknown); `read_chars`: bytes
    the tree's read() calls returned over it (page-cache hits included); `util`: the GPU
    utilisation reading (gpu.GpuUtilReading)."""

    wall_s: float
    cpu_s: float
    main_cpu_s: float
    processes: int
    memory_uss_bytes: int | None
    memory_pss_bytes: int | None
    read_bytes: int | None
    util: Any
    read_chars: int | None = None
    other_cpu_s: float | None = None
    steal_s: float | None = None
    workers_runq_s: float | None = None  # the other processes' (workers') run-queue delay: runnable, no CPU


def cpu_load(cpus: Collection[int] | None) -> tuple[float, float] | None:
    """(busy_s, steal_s) summed over the CPU ids `cpus` (all CPUs when None) since boot, from
    `psutil.cpu_times(percpu=True)` (NOTE [what else ran on the usable CPUs]); busy is all but
    idle, iowait and steal. None where the platform does not give per-CPU times."""
    import psutil

    try:
        per_cpu = psutil.cpu_times(percpu=True)
    except Exception:  # noqa: BLE001 - not every platform has per-CPU times
        return None
    busy = steal = 0.0
    for i, t in enumerate(per_cpu):
        if cpus is not None and i not in cpus:
            continue
        d = t._asdict()
        spent = sum(v for k, v in d.items() if k not in ("idle", "iowait", "steal", "guest", "guest_nice"))
        busy += spent
        steal += d.get("steal", 0.0)
    return busy, steal


def run_queue_s(pid: int) -> float | None:
    """Seconds process `pid`'s main thread has spent runnable but waiting for a CPU since it
    started: the second field of Linux's /proc/PID/schedstat (nanoseconds; the kernel's
    scheduler statistics, Documentation/scheduler/sched-stats.rst). A worker that waits on
    storage or a network sleeps and is not runnable; one short of CPU is. None where the file
    cannot be read (not Linux, a kernel without schedstats, the process gone)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _delta(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else max(0, after - before)


def tree_memory(procs: list[Any]) -> tuple[int | None, int | None]:
    """Summed USS and PSS of `procs`, in bytes ((None, None) when none could be read). PSS is
    the honest total for forked workers that share pages; USS undercounts them."""
    uss = pss = 0
    got = False
    for p in procs:
        try:
            m = p.memory_full_info()
        except Exception:  # noqa: BLE001
            continue
        got = True
        uss += int(getattr(m, "uss", 0))
        pss += int(getattr(m, "pss", 0))
    return (uss, pss) if got else (None, None)


class WindowMeter:
    """Measures a window of the process tree rooted at this process (NOTE [every process that
    lived in the window]). `util_sampler` is a gpu.UtilSampler; `reset_gpu()` (optional) runs
    at the start (synchronise, reset the peak-memory counter)."""

    def __init__(self, util_sampler: Any, *, reset_gpu: Callable[[], None] | None = None,
                 interval_s: float = 0.2, clock: Clock = time.perf_counter) -> None:
        import psutil

        self._me = psutil.Process(os.getpid())
        self._util = util_sampler
        self._reset_gpu = reset_gpu
        self._interval_s = interval_s
        self._clock = clock
        self._base: dict[tuple[int, float], float] = {}
        self._last: dict[tuple[int, float], float] = {}
        self._runq_base: dict[tuple[int, float], float] = {}
        self._runq_last: dict[tuple[int, float], float] = {}
        self._most = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._main0 = 0.0
        self._io0: tuple[int | None, int | None] = (None, None)
        from loaderbench.machine.env import cpu_affinity

        affinity = cpu_affinity()
        self._cpus = None if affinity is None else set(affinity)
        self._load0: tuple[float, float] | None = None

    def _read(self, *, start: bool = False) -> list[Any]:
        procs = process_tree(self._me)
        alive = 0
        for p in procs:
            try:
                ct = p.cpu_times()
                key = (p.pid, p.create_time())
            except Exception:  # noqa: BLE001 - exited meanwhile
                continue
            alive += 1
            cpu = ct.user + ct.system
            queued = None if p.pid == self._me.pid else run_queue_s(p.pid)
            with self._lock:
                if start:
                    self._base[key] = cpu
                self._last[key] = cpu
                if queued is not None:
                    if start:
                        self._runq_base[key] = queued
                    self._runq_last[key] = queued
        self._most = max(self._most, alive)
        return procs

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._read()

    def start(self) -> None:
        """Begin the window: read the tree, start the sampling thread and the GPU sampler."""
        from loaderbench import storage

        self._io0 = storage.io_tree(self._me)
        if self._reset_gpu is not None:
            self._reset_gpu()
        self._read(start=True)
        self._main0 = sum(self._me.cpu_times()[:2])
        self._load0 = cpu_load(self._cpus)
        self._t0 = self._clock()
        self._thread = threading.Thread(target=self._run, name="loaderbench-meter", daemon=True)
        self._thread.start()
        self._util.start()

    def stop(self) -> WindowReading:
        """End the window (CPU, memory and GPU utilisation cover it only, not what follows)."""
        from loaderbench import storage

        wall = self._clock() - self._t0
        load1 = cpu_load(self._cpus) if self._load0 is not None else None
        util = self._util.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        procs = self._read()
        main_cpu = sum(self._me.cpu_times()[:2]) - self._main0
        uss, pss = tree_memory(procs)
        io1 = storage.io_tree(self._me)
        with self._lock:
            cpu = sum(max(0.0, last - self._base.get(key, 0.0)) for key, last in self._last.items())
            runq = (sum(max(0.0, last - self._runq_base.get(key, 0.0)) for key, last in self._runq_last.items())
                    if self._runq_last else None)
        other = steal = None
        if self._load0 is not None and load1 is not None:
            other = max(0.0, (load1[0] - self._load0[0]) - cpu)
            steal = max(0.0, load1[1] - self._load0[1])
        return WindowReading(
            wall_s=wall, cpu_s=cpu, main_cpu_s=main_cpu, processes=self._most,
            memory_uss_bytes=uss, memory_pss_bytes=pss,
            read_bytes=_delta(self._io0[0], io1[0]),
            util=util,
            read_chars=_delta(self._io0[1], io1[1]),
            other_cpu_s=other, steal_s=steal, workers_runq_s=runq,
        )
