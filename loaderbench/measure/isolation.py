"""Run one config in its own fresh process, with a watchdog, and classify how it ended.

NOTE [why a fresh process per config]
    Thread settings (the pin-memory thread once changed the main process's intra-op threads,
    a pin-memory thread once did), the CUDA caching allocator, leaked or hung workers and a crashed interpreter must
    not carry from one config to the next. Each config therefore runs as
    `python -m loaderbench.measure.child JOB.json RESULT.json` in a new session (its own process group),
    so the watchdog can kill the whole tree, workers included, and a segfault or SIGKILL becomes
    a failed row instead of ending the sweep. The job and result are JSON files (no pickle). The
    child reports progress as `batch N` lines on stdout; its stderr goes to a file whose tail
    explains a crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from loaderbench.machine.processes import (
    process_tree,
    remove_shm_segments,
    signal_by_description,
    signal_name,
)
from loaderbench.model import Ceiling, LoaderSettings, Trial, TrialJob


@dataclass
class Outcome:
    """How one isolated trial ended: a Trial, or a status and a one-line error."""

    status: str  # ok | failed | hung | interrupted | skipped (not run: a distributed sweep lost a node)
    trial: Trial | None = None
    ceiling: Ceiling | None = None
    error: str | None = None
    last_batch: int | None = None
    detail: str | None = None  # traceback / stderr tail, for the result file


SHM_FIX = (
    "shared memory (/dev/shm) too small: a DataLoader worker died of SIGBUS while passing a batch "
    "through /dev/shm; give the container more (docker run --shm-size=8g) or lower num_workers, "
    "prefetch_factor or batch_size"
)


def classify_failure(message: str, returncode: int | None = None) -> str:
    """A one-line cause from an exception text or a process return code.

    Recognises: worker killed by SIGBUS (shared memory), by other signals, "Too many open
    files" (fd limit), CUDA out of memory, a pickling error (`pickling_fix`), and a negative
    return code of the measuring process.
    Otherwise the last non-empty line of `message`.
    """
    text = message or ""
    low = text.lower()
    if "bus error" in low or "sigbus" in low:
        return SHM_FIX
    if "too many open files" in low:
        return (
            "fd limit: too many open files (raise `ulimit -n`, or use "
            "torch.multiprocessing.set_sharing_strategy('file_system'))"
        )
    if "out of memory" in low and "cuda" in low:
        return "GPU out of memory: lower batch_size or prefetch depth"
    pickling = pickling_fix(text)
    if pickling:
        return pickling
    if "killed by signal" in low:
        for line in text.splitlines():
            if "killed by signal" in line.lower():
                # torch says "killed by signal: Segmentation fault."; name it as the rest of
                # loaderbench does: "killed by SIGSEGV (Segmentation fault)".
                desc = line.strip().split("killed by signal", 1)[-1].strip(" :.")
                name = signal_by_description(desc)
                return f"a DataLoader worker was killed by {name} ({desc})" if name else (
                    f"a DataLoader worker was killed by signal: {desc}"
                )
    if returncode is not None and returncode < 0:
        name = signal_name(-returncode)
        if name == "SIGBUS":
            return SHM_FIX
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"the measuring process was killed by {name}{hint}"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else (f"exit code {returncode}" if returncode else "unknown failure")


_PICKLE_START = ("the DataLoader's workers (start method spawn or forkserver, the default on Windows, macOS and, "
                 "from Python 3.14, Linux) receive the dataset, collate_fn, sampler and worker_init_fn by pickling, and ")


def pickling_fix(message: str) -> str:
    """The cause and the fix of a pickling error in `message` ('' when it has none): an object
    that pickles by name only (a lambda, a function or class defined inside another) must move
    to module level; an object that never pickles (a lock, an open file, a connection) must be
    made in each worker. Either way multiprocessing_context='fork' avoids the pickling where
    the platform has fork."""
    import re

    fork = "; or use multiprocessing_context='fork' (Linux) for this loader"
    m = re.search(r"cannot pickle '([^']+)' object", message, re.IGNORECASE)
    if m:
        return (_PICKLE_START + f"a {m.group(1)} object cannot be pickled: create it in each worker instead (in "
                "worker_init_fn, or on first use in __getitem__ / __iter__) rather than in __init__" + fork)
    m = re.search(r"can't pickle (?:local object )?(?:'([^']+)'|<(?:function|class) '?([^\s']+)|([^\s:]+))",
                  message, re.IGNORECASE)
    if not m:
        return ""
    what = next(g for g in m.groups() if g)
    return (_PICKLE_START + f"{what} cannot be pickled: a lambda or a function or class defined inside another "
            "pickles only by its name, so define it at module level (a def at the top level of an importable "
            "module; functools.partial for its arguments)" + fork)


def hang_hint(settings: LoaderSettings, *, started: bool) -> str:
    """The likely cause of a hang that the settings point at ('' when none does): worker threads
    set in forked workers before the first batch (NOTE [threads after fork] in
    worker_threads.py)."""
    if started or not settings.worker_threads or settings.worker_threads <= 1 or not settings.num_workers:
        return ""
    return (
        f"; likely cause: torch.set_num_threads({settings.worker_threads}) in forked workers deadlocking in "
        "OpenMP after the parent ran a parallel op; try --mp-context forkserver or spawn"
    )


def _read_result(path: Path) -> dict[str, Any] | None:
    """The measuring process's result JSON, if it wrote a complete one (status ok or failed)."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return payload if isinstance(payload, dict) and payload.get("status") in ("ok", "failed") else None


def _outcome_from(payload: dict[str, Any], last_batch: int | None) -> Outcome:
    if payload["status"] == "ok":
        if "ceiling" in payload:
            return Outcome(status="ok", ceiling=Ceiling.from_dict(payload["ceiling"]))
        return Outcome(status="ok", trial=Trial.from_dict(payload["trial"]), last_batch=last_batch)
    return Outcome(
        status="failed",
        error=payload.get("error") or "failed",
        last_batch=last_batch,
        detail=payload.get("traceback"),
    )


def dump_stacks(pid: int, wait_s: float = 1.0, log: Any = None, gap_s: float = 0.1) -> None:
    """Ask every process of the tree for its Python stacks (SIGUSR1, registered with
    faulthandler by the measuring process and inherited by forked workers), one process at a
    time, `gap_s` apart, so their dumps do not interleave in the shared stderr file; `log` (that
    file, opened in binary) gets a header line naming each process before its dump. Then waits
    `wait_s` for the last one. Best effort."""
    import time

    import psutil

    if not hasattr(signal, "SIGUSR1"):
        return
    for i, p in enumerate(process_tree(pid)):
        try:
            if log is not None:
                role = "measuring process" if i == 0 else "child (DataLoader worker or other)"
                log.write(f"\n--- Python stacks of pid {p.pid}, {role} ---\n".encode())
                log.flush()
            p.send_signal(signal.SIGUSR1)
        except (psutil.Error, OSError):
            pass
        time.sleep(gap_s)
    time.sleep(wait_s)


def kill_tree(pid: int) -> None:
    """SIGKILL a process, its process group and every descendant (even ones that left the
    group), then remove the shared-memory segments they left (NOTE [segments a killed worker
    leaves] in machine/processes.py: none of them is alive to use one)."""
    import psutil

    procs = process_tree(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)
    remove_shm_segments([p.pid for p in procs])


class Runner(Protocol):
    """What runs one trial: `run_isolated`, or distributed.DistributedRunner (every rank)."""

    def __call__(self, job: TrialJob, *, on_batch: Callable[[int], None] | None = None) -> Outcome: ...


def hang_error(job: TrialJob, last: int | None, *, before_deadline: bool) -> str:
    """The one-line error of a config killed by its watchdog: no first batch within the
    first-batch deadline (when that fired before --config-timeout), else no end within
    --config-timeout (before the first batch or after batch `last`), with the hint for its
    settings."""
    if last is None and before_deadline:
        what = (f"no first batch within {job.first_batch_timeout_s:g}s (10x the slowest first batch "
                "of the configs measured before it, at least 60 s)")
    else:
        where = "before the first batch" if last is None else f"after batch {last}"
        what = f"no end within --config-timeout {job.timeout_s:g}s ({where})"
    return (f"{what}; process tree killed (stacks in the result file's detail)"
            + hang_hint(job.settings, started=last is not None))


def run_isolated(
    job: TrialJob,
    *,
    on_batch: Callable[[int], None] | None = None,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    stop_reason: Callable[[], str | None] | None = None,
    poll_s: float = 0.2,
) -> Outcome:
    """Measure one trial (`job`) in a fresh process; never raises for the config's faults.

    The watchdog kills the whole process tree after `job.timeout_s` seconds, or after
    `job.first_batch_timeout_s` when no batch has arrived by then (status `hung`, with the last
    batch index reached). KeyboardInterrupt kills the tree and is re-raised. A "ceiling" job's
    result is in `Outcome.ceiling`. `stop_reason()` is polled every `poll_s` seconds while the
    process runs; when it returns a reason the tree is killed and the trial fails with that
    reason (a distributed trial stops when another rank failed). `python` and `env` are the
    interpreter and environment of the measuring process (a fake child in tests).
    """
    import time

    timeout_s = job.timeout_s
    with tempfile.TemporaryDirectory(prefix="loaderbench-") as tmp:
        job_path = Path(tmp, "job.json")
        result_path = Path(tmp, "result.json")
        err_path = Path(tmp, "stderr.txt")
        job_path.write_text(json.dumps(job.to_dict()))
        last: dict[str, int | None] = {"batch": None}

        with open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [python, "-m", "loaderbench.measure.child", str(job_path), str(result_path)],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )

            def read_progress() -> None:
                assert proc.stdout is not None
                for raw in proc.stdout:
                    line = raw.decode(errors="replace").strip()
                    if line.startswith("batch "):
                        try:
                            index = int(line.split()[1])
                        except ValueError:
                            continue
                        last["batch"] = index
                        if on_batch is not None:
                            on_batch(index)

            reader = threading.Thread(target=read_progress, daemon=True)
            reader.start()
            try:
                started = time.monotonic()
                deadline = started + timeout_s
                first_deadline = started + min(timeout_s, job.first_batch_timeout_s or timeout_s)
                polling = stop_reason is not None or first_deadline < deadline
                while True:
                    try:
                        rc = proc.wait(timeout=poll_s if polling else timeout_s)
                        break
                    except subprocess.TimeoutExpired:
                        now = time.monotonic()
                        if now >= deadline or (last["batch"] is None and now >= first_deadline):
                            raise
                        reason = stop_reason() if stop_reason is not None else None
                        if reason is not None:
                            kill_tree(proc.pid)
                            proc.wait()
                            reader.join(timeout=2)
                            return Outcome(status="failed", error=reason, last_batch=last["batch"])
            except subprocess.TimeoutExpired:
                finished = _read_result(result_path)
                if finished is not None:
                    # The config ended and wrote its result; only the process's exit hung.
                    kill_tree(proc.pid)
                    proc.wait()
                    reader.join(timeout=2)
                    return _outcome_from(finished, last["batch"])
                dump_stacks(proc.pid, log=err)
                kill_tree(proc.pid)
                proc.wait()
                reader.join(timeout=2)
                return Outcome(
                    status="hung",
                    error=hang_error(job, last["batch"], before_deadline=time.monotonic() < deadline),
                    last_batch=last["batch"],
                    detail=err_path.read_text(errors="replace")[-64000:] or None,
                )
            except KeyboardInterrupt:
                kill_tree(proc.pid)
                proc.wait()
                raise
            finally:
                # Workers that outlive their parent (they should not) are reaped too.
                kill_tree(proc.pid)
            reader.join(timeout=2)

        stderr_tail = err_path.read_text(errors="replace")[-4000:]
        finished = _read_result(result_path)
        if finished is not None:
            return _outcome_from(finished, last["batch"])
        return Outcome(
            status="failed",
            error=classify_failure(stderr_tail, rc),
            last_batch=last["batch"],
            detail=stderr_tail or None,
        )

