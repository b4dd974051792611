from __future__ import annotations

import signal

from loaderbench.isolation import SHM_FIX, classify_failure


def test_worker_deaths_and_limits_are_classified():
    assert classify_failure("RuntimeError: DataLoader worker (pid 12) is killed by signal: Bus error.") == SHM_FIX
    assert "fd limit" in classify_failure("OSError: [Errno 24] Too many open files")
    assert "GPU out of memory" in classify_failure("torch.OutOfMemoryError: CUDA out of memory. Tried")
    assert classify_failure(
        "RuntimeError: DataLoader worker (pid 77) is killed by signal: Segmentation fault."
    ) == "a DataLoader worker was killed by SIGSEGV (Segmentation fault)"
    assert classify_failure("worker (pid 5) is killed by signal: Killed.") == "a DataLoader worker was killed by SIGKILL (Killed)"
    assert classify_failure("worker (pid 5) is killed by signal: Unknown signal 99.") == (
        "a DataLoader worker was killed by signal: Unknown signal 99"
    )
    assert classify_failure("", -signal.SIGKILL) == "the measuring process was killed by SIGKILL (out of memory?)"
    assert classify_failure("", -signal.SIGBUS) == SHM_FIX
    assert classify_failure("Traceback...\nValueError: bad sample 5\n") == "ValueError: bad sample 5"
    assert classify_failure("", 3) == "exit code 3"
