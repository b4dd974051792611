"""Entry point of the measuring process.

`python -m loaderbench.measure.child JOB RESULT` measures one config: reads the job (JSON),
measures one trial with `trial.measure_config` (or the compute ceiling), writes the result (JSON)
atomically and exits. `python -m loaderbench.measure.child --serve` is a warm measuring process
(NOTE [warm measuring process] in measure/trial.py): it reads `JOB RESULT` lines on stdin and
answers each with `done` on stdout once RESULT is written, until stdin closes. Progress goes to
stdout as `batch N` lines. Any exception becomes `{"status": "failed", "error": <one line>,
"traceback": ...}`; see measure/isolation.py and measure/warm.py for the parent's side.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def _write(path: Path, payload: dict) -> None:
    from loaderbench.results import write_json_atomic

    write_json_atomic(payload, path)


def _one_line(exc: BaseException) -> str:
    from loaderbench.measure.isolation import classify_failure

    text = f"{type(exc).__name__}: {exc}"
    cause = classify_failure(text)
    # DataLoader re-raises a worker's exception with "Caught X in DataLoader worker process N."
    # followed by the original traceback: keep the original exception line, which names the
    # file or index when the dataset does.
    if "Original Traceback" in text:
        last = [ln.strip() for ln in text.splitlines() if ln.strip()][-1]
        head = text.splitlines()[0].strip()
        return f"{head} {last}"
    return cause if cause != text.splitlines()[-1].strip() else " ".join(text.split())[:2000]


def main(argv: list[str]) -> int:
    import faulthandler
    import signal

    # The watchdog sends SIGUSR1 to the whole tree before killing a hung config: every process
    # (this one and its forked DataLoader workers, which inherit the handler) dumps its Python
    # stacks to stderr, which the parent keeps as the row's detail.
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    from loaderbench.measure.introspect import quiet_worker_count_warning

    quiet_worker_count_warning()
    if argv[:1] == ["--serve"]:
        return serve()
    return run_job(Path(argv[0]), Path(argv[1]))


def serve() -> int:
    """The warm measuring process's loop: one `JOB RESULT` line per config."""
    from loaderbench.measure.trial import keep_between_configs, reset_between_configs

    keep_between_configs()
    for line in sys.stdin:
        parts = line.split()
        if len(parts) != 2:
            continue
        reset_between_configs()
        code = run_job(Path(parts[0]), Path(parts[1]))
        if _left_group():
            # A rank of a distributed trial: its compute step (DDP) was bound to the trial's
            # process group, which is gone; the next trial builds everything afresh.
            reset_between_configs()
            keep_between_configs()
        sys.stdout.write("done\n")
        sys.stdout.flush()
        if code != 0:
            # A failed config may leave dead workers whose loader cannot be torn down safely
            # (see _exit_now): the parent starts a fresh process for the next config.
            _exit_now(code)
    return 0


def run_job(job_path: Path, result_path: Path) -> int:
    """Measure the job at `job_path` and write its result to `result_path`; 0 ok, 1 failed."""
    from loaderbench.measure.trial import measure_compute_ceiling, measure_config
    from loaderbench.model import TrialJob

    job = TrialJob.from_dict(json.loads(job_path.read_text()))

    def on_batch(i: int) -> None:
        sys.stdout.write(f"batch {i}\n")
        sys.stdout.flush()

    try:
        if job.kind == "ceiling":
            _write(result_path, {"status": "ok", "ceiling": measure_compute_ceiling(job).to_dict()})
            return 0
        trial = measure_config(job, on_batch=on_batch)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row, never a crash
        _write(
            result_path,
            {"status": "failed", "error": _one_line(exc), "traceback": traceback.format_exc()[-8000:]},
        )
        return 1
    _write(result_path, {"status": "ok", "trial": trial.to_dict()})
    return 0


def _left_group() -> bool:
    """Leave the process group a distributed trial joined (measure.ranks.RankGroup), so a warm
    process can join the next trial's; True when there was one."""
    if "torch.distributed" not in sys.modules:
        return False
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    dist.destroy_process_group()
    return True


def _exit_now(code: int) -> None:
    """Leave without interpreter teardown. NOTE: once the result is written, nothing else
    matters, and tearing down a DataLoader whose workers died can deadlock (its `__del__` puts
    to a worker's index queue whose lock the dead worker's feeder may hold, seen with five
    SIGSEGV'd workers on 2 cores); the parent kills the whole process tree anyway."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main(sys.argv[1:]))
