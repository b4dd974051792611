"""Processes and signals, named once: the process tree of a measuring process (its DataLoader
workers, forkserver and grandchildren included) and the names of the signals that end them."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
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


SHM_ROOT = "/dev/shm"


def remove_shm_segments(pids: Iterable[int], root: str = SHM_ROOT) -> list[str]:
    """Remove the shared-memory segments torch named after the processes `pids` and left
    behind; returns the names removed ([] where `root` does not exist).

    NOTE [segments a killed worker leaves]
        A DataLoader worker puts each batch's tensors in a shared-memory segment it creates as
        /dev/shm/torch_<its pid>_<random>_<n> and, under the 'file_descriptor' sharing strategy,
        unlinks at once, keeping only the descriptor it passes on. A worker killed between the
        two (loaderbench stops a measured config's workers with SIGTERM, NOTE [stopping a
        measured config's workers]; the watchdog kills a hung tree) leaves the segment behind
        until the machine restarts: 3-10 MB per batch, found after short runs (7 of 40 stops of
        2 workers building 9.6-MB batches). Only call this for processes that are dead, and,
        while the process that received their batches lives, only under 'file_descriptor' (under
        'file_system' the names are in use until the receiver frees them).
    """
    wanted = {str(int(p)) for p in pids}
    try:
        names = os.listdir(root)
    except OSError:
        return []
    removed = []
    for name in names:
        parts = name.split("_")
        if len(parts) >= 3 and parts[0] == "torch" and parts[1] in wanted:
            try:
                os.unlink(os.path.join(root, name))
                removed.append(name)
            except OSError:
                pass
    return removed
