"""Run trials in one warm measuring process, with the same watchdog as a fresh process per config.

NOTE [why a warm process, and what it keeps]
    Starting a measuring process per config costs a new interpreter, torch's import, the CUDA
    context, the model on the device and cuDNN's kernel choice, and the dataset object: seconds
    per config on a GPU machine, most of a short sweep. `WarmRunner` keeps one process
    (`python -m loaderbench.measure.child --serve`) for the whole sweep and sends it one config
    at a time; what it keeps and what every config still gets fresh is in NOTE [warm measuring
    process] in measure/trial.py. What isolation buys is kept where it matters: a config that
    fails ends that process (the next config starts a fresh one), a hang is killed with its
    whole process tree by the same deadlines as `run_isolated`, and the sweep re-measures its
    first config at the end to check that nothing carried over (the drift check in orchestrate.py).

NOTE [a fresh process, started ahead]
    The drift check measures the knee again in a process that has measured nothing before. A
    fresh process started then pays its interpreter and torch's import at the end of the sweep
    (3 s of a 20-s search on 2 CPUs). `WarmRunner(one_config=True)` is that fresh process started
    ahead, with the warm one, while the command itself starts (before anything is measured,
    never during a trial); it waits on its stdin until the check needs it, and ends after that
    one config. Nothing in it has run a config, a DataLoader or a step, which is what "fresh"
    must mean for the check. Three interpreters importing torch at once queue on a small
    machine: on 2 CPUs the first trial then started 2.2 s later and the check ran 2.5 s
    sooner, no gain, so the sweep starts it ahead only with 4 or more usable CPUs
    (`orchestrate.drift_may_follow`).
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from loaderbench.measure.isolation import (
    Outcome,
    _outcome_from,
    _read_result,
    classify_failure,
    dump_stacks,
    hang_error,
    kill_tree,
)
from loaderbench.model import TrialJob


class WarmRunner:
    """A `Runner` that measures every trial in one warm measuring process, restarted after a
    config that failed, crashed or hung. Use as a context manager (or call `close()`).

    With `one_config=True` every trial gets a measuring process that has measured nothing
    before (the process ends after its trial), as with `run_isolated`; the only difference is
    that `prestart()` can start the first one ahead (NOTE [a fresh process, started ahead]).

    `starts` counts the measuring processes started; `python` and `env` are the interpreter and
    environment of the measuring process (a fake child in tests). Never raises for a config's
    faults; KeyboardInterrupt kills the process tree and is re-raised.
    """

    def __init__(self, *, python: str = sys.executable, env: dict[str, str] | None = None,
                 poll_s: float = 0.2, one_config: bool = False) -> None:
        self.python, self.env, self.poll_s, self.one_config = python, env, poll_s, one_config
        self._tmp = tempfile.TemporaryDirectory(prefix="loaderbench-warm-")
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._err: IO[bytes] | None = None
        self._err_path: Path | None = None
        self._jobs = 0
        self.starts = 0

    def __enter__(self) -> WarmRunner:
        return self

    def prestart(self) -> None:
        """Start the measuring process now (its interpreter and torch's import then overlap
        whatever the caller does before the first trial); a no-op when one is running."""
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        self._err_path = Path(self._tmp.name, f"stderr-{self.starts}.txt")
        self._err = open(self._err_path, "wb")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(
            [self.python, "-m", "loaderbench.measure.child", "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
            start_new_session=True, env=self.env,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                lines.put(raw.decode(errors="replace").strip())
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        self._proc, self._lines = proc, lines
        return proc

    def _stop(self) -> None:
        """Kill the measuring process's tree; the next trial starts a fresh one."""
        if self._proc is not None:
            kill_tree(self._proc.pid)
            self._proc.wait()
            self._proc = None
        if self._err is not None:
            self._err.close()
            self._err = None

    def _stderr_since(self, offset: int, limit: int) -> str:
        if self._err_path is None:
            return ""
        with open(self._err_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")[-limit:]

    def __call__(self, job: TrialJob, *, on_batch: Callable[[int], None] | None = None,
                 stop_reason: Callable[[], str | None] | None = None) -> Outcome:
        """Measure `job` in the warm process (started first when there is none). As with
        `run_isolated`, `stop_reason()` is polled while it runs: a reason kills the process tree
        (the next trial starts a fresh one) and fails the trial with that reason."""
        proc = self._proc if self._proc is not None and self._proc.poll() is None else None
        if proc is None:
            self._stop()
            proc = self._start()
        self._jobs += 1
        job_path = Path(self._tmp.name, f"job-{self._jobs}.json")
        result_path = Path(self._tmp.name, f"result-{self._jobs}.json")
        job_path.write_text(json.dumps(job.to_dict()))
        assert self._err_path is not None and proc.stdin is not None
        offset = self._err_path.stat().st_size
        last: int | None = None
        try:
            proc.stdin.write(f"{job_path} {result_path}\n".encode())
            proc.stdin.flush()
            started = time.monotonic()
            deadline = started + job.timeout_s
            first_deadline = started + min(job.timeout_s, job.first_batch_timeout_s or job.timeout_s)
            while True:
                try:
                    line = self._lines.get(timeout=self.poll_s)
                except queue.Empty:
                    now = time.monotonic()
                    if now >= deadline or (last is None and now >= first_deadline):
                        return self._hung(job, result_path, offset, last, now < deadline)
                    reason = stop_reason() if stop_reason is not None else None
                    if reason is not None:
                        self._stop()
                        return Outcome(status="failed", error=reason, last_batch=last)
                    continue
                if line is None or line == "done":
                    break
                if line.startswith("batch "):
                    try:
                        last = int(line.split()[1])
                    except ValueError:
                        continue
                    if on_batch is not None:
                        on_batch(last)
        except BrokenPipeError:
            line = None
        except KeyboardInterrupt:
            self._stop()
            raise
        finished = _read_result(result_path)
        if line is None or (finished is not None and finished.get("status") != "ok"):
            rc = proc.wait(timeout=10) if line is None else None
            self._stop()
            if finished is None:
                tail = self._stderr_since(offset, 4000)
                return Outcome(status="failed", error=classify_failure(tail, rc), last_batch=last,
                               detail=tail or None)
        assert finished is not None
        if self.one_config:
            self._stop()  # this process has measured a config: the next call gets another
        return _outcome_from(finished, last)

    def _hung(self, job: TrialJob, result_path: Path, offset: int, last: int | None,
              before_deadline: bool) -> Outcome:
        """Kill a config that passed its deadline (stacks first) and describe it, as
        `run_isolated` does; a config that wrote its result is kept."""
        assert self._proc is not None
        finished = _read_result(result_path)
        if finished is not None:
            self._stop()
            return _outcome_from(finished, last)
        dump_stacks(self._proc.pid, log=self._err)
        self._stop()
        return Outcome(status="hung", error=hang_error(job, last, before_deadline=before_deadline), last_batch=last,
                       detail=self._stderr_since(offset, 64000) or None)

    def close(self) -> None:
        """End the measuring process (stdin closed, then its tree killed; killed at once when it
        never got a job, as when the sweep stops on bad input) and remove the files."""
        if self._proc is not None and self._proc.stdin is not None and self._jobs > 0:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._stop()
        self._tmp.cleanup()
