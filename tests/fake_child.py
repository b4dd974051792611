"""A stand-in for the measuring process (`python -m loaderbench.measure.child JOB RESULT`), for
fast tests of the isolation boundary: no torch, behaviour chosen by $FAKE_CHILD."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

TRIAL = {"first_batch_s": 0.1, "warmup_batches": 0, "data_wait_s": [0.01], "compute_s": [0.01],
         "step_s": [0.02], "samples": 4, "wall_s": 0.02, "timing": "host"}


def serve() -> int:
    """The warm process's protocol: `JOB RESULT` lines in, `done` out. The job's seed picks the
    behaviour ($FAKE_SEED_<seed>: ok | fail | crash | hang); an ok trial's `samples` is this
    process's pid, so a test can tell a kept process from a fresh one. $FAKE_START_S: seconds
    of start-up (torch's import) before it reads its first job."""
    time.sleep(float(os.environ.get("FAKE_START_S", "0")))
    for line in sys.stdin:
        job, result = (Path(p) for p in line.split())
        mode = os.environ.get(f"FAKE_SEED_{json.loads(job.read_text())['seed']}", "ok")
        sys.stdout.write("batch 0\n")
        sys.stdout.flush()
        if mode == "hang":
            time.sleep(3600)
        if mode == "crash":
            sys.stderr.write("Fatal Python error: Segmentation fault\n")
            sys.stderr.flush()
            os._exit(-11 % 256)
        if mode == "fail":
            result.write_text(json.dumps({"status": "failed", "error": "ValueError: bad sample"}))
            sys.stdout.write("done\n")
            sys.stdout.flush()
            os._exit(1)
        result.write_text(json.dumps({"status": "ok", "trial": {**TRIAL, "samples": os.getpid()}}))
        sys.stdout.write("done\n")
        sys.stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv[-1:] == ["--serve"]:
        return serve()
    job, result = Path(argv[-2]), Path(argv[-1])
    json.loads(job.read_text())  # the job is readable JSON
    mode = os.environ.get("FAKE_CHILD", "ok")
    sys.stdout.write("batch 0\nbatch 1\n")
    sys.stdout.flush()
    if mode == "ok":
        result.write_text(json.dumps({"status": "ok", "trial": TRIAL}))
        return 0
    if mode == "hang":  # never ends, never writes
        time.sleep(3600)
    if mode == "hang-before-first":
        sys.stdout.write("")
        time.sleep(3600)
    if mode == "result-then-hang":  # wrote its result, then its exit hangs (a stuck teardown)
        result.write_text(json.dumps({"status": "ok", "trial": TRIAL}))
        time.sleep(3600)
    if mode == "crash":
        sys.stderr.write("Traceback (most recent call last):\nValueError: corrupt sample 17\n")
        return 3
    if mode == "children":  # leaves a grandchild behind that must be killed with the tree
        pid = os.fork()
        if pid == 0:
            time.sleep(3600)
            os._exit(0)
        Path(os.environ["FAKE_CHILD_PIDFILE"]).write_text(str(pid))
        time.sleep(3600)
    return 9


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
