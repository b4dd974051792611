"""Processes and signals, named once: the process tree of a measuring process (its DataLoader
workers, forkserver and grandchildren included) and the names of the signals that end them."""

from __future__ import annotations

import signal
from typing import Any


def process_tree(proc: Any) -> list[Any]:
    """`proc` (a psutil.Process, or a pid) and all its descendants; just `proc` when they cannot be
    listed (it may be gone). Raises nothing."""
    import psutil

    try:
        if not isinstance(proc, psutil.Process):
            proc = psutil.Process(int(proc))
        return [proc] + proc.children(recursive=True)
    except (psutil.Error, ValueError, OSError):
        return [] if not isinstance(proc, psutil.Process) else [proc]


def signal_name(number: int) -> str:
    """`SIGKILL` for 9; `signal 99` for a number no signal has."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def signal_by_description(text: str) -> str | None:
    """The signal whose strsignal(3) description is `text` (`Segmentation fault` -> `SIGSEGV`),
    or None."""
    for s in signal.Signals:
        if signal.strsignal(s) == text:
            return s.name
    return None
