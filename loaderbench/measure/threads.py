"""Intra-op threads in forked DataLoader workers, applied so that they cannot deadlock.

NOTE [threads after fork]
    torch's CPU ops run their intra-op parallelism on OpenMP; the pip wheels for Linux ship GNU
    libgomp. libgomp keeps a thread pool per thread that ran a parallel region, and it is not
    fork-safe: when the parent process has run a parallel region (a dataset whose `__init__`
    normalises a preloaded tensor with torch does), a forked child inherits the pool's
    bookkeeping but not its threads, and its first parallel region with two or more threads
    waits forever at the team barrier. DataLoader workers call `torch.set_num_threads(1)`, so
    they never start a region; asking for more (`--worker-threads 2`, a `worker_init_fn` that
    calls `torch.set_num_threads(2)`) deadlocks on the first torch op of a sample. Setting the
    thread count, or OMP_NUM_THREADS, in the parent does not help.
    OpenMP 5.0's `omp_pause_resource_all(omp_pause_hard)` (libgomp implements it) frees the
    pool; the parent's next parallel region builds a new one (tens of ms). Registered with
    `os.register_at_fork(before=...)`, it runs right before every fork, so every worker starts
    with no pool to inherit. That is what `prepare_worker_threads` does for a fork start method
    with more than one worker thread; it then checks the result with `fork_threads_ok` (a forked
    child sets the threads and runs a parallel op, with a 2 s deadline: tens of ms when it works)
    and, should a runtime still deadlock, returns the cause so the config fails in seconds
    instead of waiting out the watchdog. LLVM's libomp and Intel's runtime have their own fork
    handlers; the check covers them too.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import time
from typing import Any

_HOOKED = False


def start_method(mp_context: str | None) -> str:
    """The start method a DataLoader with `multiprocessing_context=mp_context` uses (None: the
    platform default)."""
    return mp_context or multiprocessing.get_start_method(allow_none=False)


def _libgomp() -> Any | None:
    """The GNU OpenMP runtime loaded in this process (ctypes handle), or None."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "libgomp" in line and line.rstrip().endswith(".so.1")}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            lib.omp_pause_resource_all.restype = ctypes.c_int
            return lib
        except (OSError, AttributeError):
            continue
    return None


def pause_openmp_before_fork() -> bool:
    """Register (once per process) a hook that frees the GNU OpenMP thread pool right before
    every fork (NOTE [threads after fork]). Returns whether the hook is in place (False when
    libgomp is not the runtime loaded here)."""
    global _HOOKED
    if _HOOKED:
        return True
    lib = _libgomp()
    if lib is None:
        return False
    omp_pause_hard = 2
    os.register_at_fork(before=lambda: lib.omp_pause_resource_all(omp_pause_hard))
    _HOOKED = True
    return True


def fork_threads_ok(threads: int, timeout_s: float = 2.0) -> bool:
    """Whether a child forked now can set `threads` intra-op threads and run a parallel torch op
    (one larger than ATen's grain size, so it does enter a parallel region) within `timeout_s`.
    The child exits with `os._exit` and touches no CUDA; a stuck child is killed."""
    import torch

    pid = os.fork()
    if pid == 0:  # the child never returns into the caller's code
        code = 1
        try:
            torch.set_num_threads(threads)
            torch.ones(1 << 20).add_(1)
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.002)


def prepare_worker_threads(threads: int | None, mp_context: str | None, *, num_workers: int) -> str | None:
    """Make `threads` intra-op threads safe in this config's workers (NOTE [threads after
    fork]): with a fork start method and more than one thread, free the OpenMP pool before every
    fork and check a forked child. Returns None when the workers can run, else the cause and
    the workaround in one line (the config then fails at once)."""
    if not threads or threads <= 1 or num_workers <= 0 or start_method(mp_context) != "fork":
        return None
    hooked = pause_openmp_before_fork()
    if fork_threads_ok(threads):
        return None
    how = "" if hooked else " (no GNU OpenMP runtime found to reset before fork)"
    return (
        f"worker threads deadlock after fork: torch.set_num_threads({threads}) in a forked worker hangs in "
        f"the OpenMP runtime because this process ran a parallel torch op before forking{how}; use "
        "--mp-context forkserver or spawn, or set the threads before the first parallel op"
    )
