"""Bytes really read: a process tree's storage reads over a window, the bytes the measured batches
needed, and what the two say together (effective MB/s, served from storage or from a cache).

NOTE [ read_bytes counts storage, not the page cache ]
    psutil's `io_counters().read_bytes` (Linux: /proc/PID/io `read_bytes`) is the number of bytes
    this process caused to be fetched from a block device (including readahead), not what
    `read()` returned: a page-cache hit adds nothing, so warm reads count ~0 and tmpfs reads count
    0 (compare `read_chars`, which counts every byte read()). Children that exited and were
    reaped are folded into their parent's counter by the kernel, so summing the live tree at two
    instants gives the tree's storage reads between them; a child that exited but is not reaped
    yet is missed until it is. Network filesystems do not count here (no block device).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loaderbench.processes import process_tree

#: `read_summary`: a window that read less than this share of what it needed was served from cache,
#: and at least STORAGE_MIN_FRACTION of it was served from storage.
CACHE_MAX_FRACTION = 0.10


STORAGE_MIN_FRACTION = 0.90


# --------------------------------------------------------------------------------------------
# Bytes really read
# --------------------------------------------------------------------------------------------


def io_counters_tree(proc: Any = None) -> int | None:
    """Bytes the process `proc` (a psutil.Process; default this one) and all its live descendants
    have caused to be read from storage, summed (see NOTE [ read_bytes counts storage, not the
    page cache ]). Take it at the start and the end of a window and subtract. None where psutil
    has no read_bytes (e.g. macOS) or the process is gone."""
    import psutil

    try:
        if proc is None:
            proc = psutil.Process()
        total = int(proc.io_counters().read_bytes)
    except (psutil.Error, AttributeError, NotImplementedError, OSError):
        return None
    for child in process_tree(proc)[1:]:
        try:
            total += int(child.io_counters().read_bytes)
        except (psutil.Error, AttributeError, OSError):
            pass  # exited meanwhile: its count moves to its parent when reaped
    return total


def needed_bytes(indices: Sequence[int], sizes: Sequence[int], *, start: int, stop: int) -> int:
    """Bytes the items `indices[start:stop]` needed from storage in a cold run: the sizes of the
    distinct items in that window that were not already read earlier (`indices[:start]`), since
    a second read of a file in one run is a page-cache hit. `sizes[i]` is item i's file size."""
    seen = set(indices[:start])
    total = 0
    for i in indices[start:stop]:
        if i not in seen:
            seen.add(i)
            total += int(sizes[i])
    return total


@dataclass(frozen=True)
class ReadSummary:
    """Storage bytes of a window next to the bytes its batches needed.

    `served_from`: "storage" (at least STORAGE_MIN_FRACTION of the needed bytes were read from
    storage), "cache" (under CACHE_MAX_FRACTION: the window was served from the page cache),
    "mixed", or "unknown" (no counter, or nothing needed).
    """

    read_bytes: int | None
    needed_bytes: int | None
    seconds: float
    storage_mb_per_s: float | None
    storage_fraction: float | None
    served_from: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_summary(read_bytes: int | None, needed: int | None, seconds: float) -> ReadSummary:
    """`ReadSummary` of a window that read `read_bytes` from storage in `seconds` while its
    batches needed `needed` bytes (MB = 10^6 bytes)."""
    rate = None if read_bytes is None or seconds <= 0 else read_bytes / seconds / 1e6
    if read_bytes is None or not needed:
        return ReadSummary(read_bytes, needed, seconds, rate, None, "unknown")
    frac = read_bytes / needed
    served = "storage" if frac >= STORAGE_MIN_FRACTION else "cache" if frac < CACHE_MAX_FRACTION else "mixed"
    return ReadSummary(read_bytes, needed, seconds, rate, frac, served)
