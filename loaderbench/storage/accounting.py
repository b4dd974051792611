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

from loaderbench.machine.processes import process_tree
from loaderbench.model import ServedFrom

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
    return io_tree(proc)[0]


def io_tree(proc: Any = None) -> tuple[int | None, int | None]:
    """(read_bytes, read_chars) of `proc` and its live descendants, summed: the bytes they caused
    to be read from storage, and the bytes their read() calls returned (page-cache and tmpfs hits
    included; memory-mapped reads are in neither). (None, None) where psutil has no such
    counters or the process is gone; read_chars alone may be None (platforms without it)."""
    import psutil

    try:
        if proc is None:
            proc = psutil.Process()
        io = proc.io_counters()
        total = int(io.read_bytes)
    except (psutil.Error, AttributeError, NotImplementedError, OSError):
        return None, None
    chars: int | None = getattr(io, "read_chars", None)
    for child in process_tree(proc)[1:]:
        try:
            cio = child.io_counters()
        except (psutil.Error, AttributeError, OSError):
            continue  # exited meanwhile: its count moves to its parent when reaped
        total += int(cio.read_bytes)
        if chars is not None:
            chars += int(getattr(cio, "read_chars", 0))
    return total, chars


def maps_any(paths: Sequence[Any], proc: Any = None) -> bool | None:
    """Whether `proc` (default this process) or any live descendant has one of `paths` memory-
    mapped (psutil memory_maps), None when the maps cannot be read. Memory-mapped reads bypass
    read(), so they tell a mapped file from a cache kept inside the dataset."""
    import psutil

    wanted = {str(p) for p in paths}
    try:
        if proc is None:
            proc = psutil.Process()
        tree = process_tree(proc)
    except psutil.Error:
        return None
    known = False
    for p in tree:
        try:
            maps = p.memory_maps(grouped=True)
        except (psutil.Error, AttributeError, NotImplementedError, OSError):
            continue
        known = True
        if any(m.path in wanted for m in maps):
            return True
    return False if known else None


def needed_bytes(indices: Sequence[int], sizes: Sequence[int], *, start: int, stop: int) -> int:
    """Bytes the items `indices[start:stop]` needed: each item's file size, every time it is
    loaded (`sizes[i]` is item i's). An item read again in the window needs its bytes again:
    when no storage read serves them, a cache did, and that is what the window measured."""
    return sum(int(sizes[i]) for i in indices[start:stop])


@dataclass(frozen=True)
class ReadSummary:
    """Storage bytes of a window next to the bytes its batches needed.

    `served_from` (a model.ServedFrom value): "storage" (at least STORAGE_MIN_FRACTION of the needed
    bytes were read from storage); under CACHE_MAX_FRACTION, a cache, named where the counters
    tell which (NOTE [which cache served it]); "mixed" between; "unknown" (no counter, or
    nothing needed).
    """

    read_bytes: int | None
    needed_bytes: int | None
    seconds: float
    storage_mb_per_s: float | None
    storage_fraction: float | None
    served_from: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_summary(read_bytes: int | None, needed: int | None, seconds: float, *, read_chars: int | None = None,
                 memory_fs: bool = False, resident_fraction: float | None = None,
                 mapped: bool | None = None) -> ReadSummary:
    """`ReadSummary` of a window that read `read_bytes` from storage in `seconds` while its
    batches needed `needed` bytes (MB = 10^6 bytes).

    NOTE [which cache served it]
        When the device gave under CACHE_MAX_FRACTION of the bytes needed, the samples came from
        some layer between the device and the sample that serves repeats. Which one: files on a
        memory filesystem (`memory_fs`: tmpfs, ramfs) have no device at all; when the process
        tree's read() calls returned at least half the bytes needed (`read_chars`), the OS page
        cache served them; when read() returned almost nothing too and the files are not in the
        page cache (`resident_fraction` under one half after the window), or are but no process
        of the tree has them memory-mapped (`mapped` False), nothing read them in the window: a
        cache inside the dataset or its workers served the samples. Memory-mapped files are read
        without read() calls, so resident files that are mapped (or whose maps are unknown) are
        served by the page cache or the dataset, which these counters cannot tell apart: "cache".
    """
    rate = None if read_bytes is None or seconds <= 0 else read_bytes / seconds / 1e6
    if read_bytes is None or not needed:
        return ReadSummary(read_bytes, needed, seconds, rate, None, ServedFrom.UNKNOWN.value)
    frac = read_bytes / needed
    if frac >= STORAGE_MIN_FRACTION:
        served = ServedFrom.STORAGE.value
    elif frac >= CACHE_MAX_FRACTION:
        served = ServedFrom.MIXED.value
    elif memory_fs:
        served = ServedFrom.MEMORY_FS.value
    elif read_chars is not None and read_chars >= 0.5 * needed:
        served = ServedFrom.PAGE_CACHE.value
    elif read_chars is not None and ((resident_fraction is not None and resident_fraction < 0.5) or mapped is False):
        served = ServedFrom.DATASET_CACHE.value
    else:
        served = ServedFrom.CACHE.value
    return ReadSummary(read_bytes, needed, seconds, rate, frac, served)
