"""`probe_storage(path)`: sequential MB/s and random whole-file reads/s at several reader counts,
cold and warm, bounded in time (behind `loaderbench storage`).
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderbench.errors import DataError, UsageError
from loaderbench.storage.accounting import io_counters_tree
from loaderbench.storage.cache import _CHUNK_BYTES, Clock, set_cache_state, static_evictability
from loaderbench.storage.devices import BlockDevice, FilesystemInfo, block_device_of, filesystem_of
from loaderbench.storage.files import FileStats, file_sizes, list_files, size_stats

_SEQ_CHUNK_BYTES = 8 << 20




# --------------------------------------------------------------------------------------------
# The storage probe
# --------------------------------------------------------------------------------------------


@dataclass
class ProbeRow:
    """One read test: `test` "sequential" (files in path order, big buffers, one reader) or
    "random" (whole files in random order, `readers` threads, each file read by one of them).
    `cache` is the requested state, `cache_achieved` the verified one before the test
    (see `CacheState.achieved`). MB = 10^6 bytes. `storage_fraction` = storage read_bytes /
    bytes read (~1 cold, ~0 warm or on tmpfs)."""

    test: str
    readers: int
    cache: str
    cache_achieved: str
    resident_fraction_at_start: float | None
    files: int
    bytes: int
    seconds: float
    mb_per_s: float
    files_per_s: float
    storage_read_bytes: int | None
    storage_fraction: float | None


@dataclass
class StorageProbe:
    """What `probe_storage` found about a path."""

    path: str
    files: FileStats
    filesystem: FilesystemInfo | None
    block_device: BlockDevice | None
    evictable: bool
    eviction_reason: str | None
    tested_files: int
    max_seconds: float
    seconds: float
    rows: list[ProbeRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _read_whole(path: Path, view: memoryview, deadline: float, clock: Clock) -> tuple[int, bool]:
    """Read a file to its end with `view`; (bytes, finished). Stops early past `deadline`."""
    n_total = 0
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        while True:
            n = os.readv(fd, [view])
            if n <= 0:
                return n_total, True
            n_total += n
            if clock() > deadline:
                return n_total, False
    finally:
        os.close(fd)


def _run_readers(files: Sequence[Path], readers: int, budget_s: float, min_s: float,
                 chunk_bytes: int, clock: Clock) -> tuple[int, int, float, list[Path]]:
    """`readers` threads take files from a shared queue (each file read by one thread) until
    the files or `budget_s` run out; when `min_s` > 0 the list is read again until at least
    `min_s` has passed (warm passes). Returns (files finished, bytes, seconds, files touched)."""
    lock = threading.Lock()
    state = {"next": 0, "files": 0, "bytes": 0}
    touched: list[Path] = []
    start = clock()
    deadline = start + budget_s
    n_files = len(files)

    def take() -> Path | None:
        with lock:
            k = state["next"]
            now = clock()
            if n_files == 0 or now > deadline:
                return None
            if k >= n_files and (min_s <= 0 or now - start >= min_s):
                return None
            state["next"] = k + 1
            p = files[k % n_files]  # k >= n_files: another warm pass over the same files
            if k < n_files:
                touched.append(p)
            return p

    def work() -> None:
        view = memoryview(bytearray(chunk_bytes))
        while True:
            p = take()
            if p is None:
                return
            try:
                n, finished = _read_whole(p, view, deadline, clock)
            except OSError:
                continue
            with lock:
                state["bytes"] += n
                state["files"] += int(finished)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, readers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return state["files"], state["bytes"], clock() - start, touched


def _row(test: str, readers: int, cache: str, achieved: str, before: float | None,
         files: int, nbytes: int, seconds: float, storage: int | None) -> ProbeRow:
    sec = max(seconds, 1e-9)
    return ProbeRow(
        test=test, readers=readers, cache=cache, cache_achieved=achieved,
        resident_fraction_at_start=before, files=files, bytes=nbytes, seconds=seconds,
        mb_per_s=nbytes / sec / 1e6, files_per_s=files / sec,
        storage_read_bytes=storage,
        storage_fraction=None if storage is None or nbytes == 0 else storage / nbytes,
    )


def probe_storage(
    path: str | os.PathLike[str],
    *,
    readers: Sequence[int] = (1, 4, 16),
    cache: Sequence[str] = ("cold", "warm"),
    max_files: int = 5000,
    max_seconds: float = 30.0,
    min_warm_s: float = 0.2,
    drop_caches: bool = False,
    seed: int = 0,
    clock: Clock = time.perf_counter,
) -> StorageProbe:
    """Probe the storage under `path` without a model.

    Lists the files (count, size distribution), names the filesystem and block device and its
    rotational flag, then runs, on at most `max_files` files (a seeded random sample):
      - sequential: files in path order (or one big file) read front to back in 8 MiB reads;
      - random: whole files in random order by 1, 4, 16 (`readers`) threads at once, like
        DataLoader workers each fetching samples;
    each "cold" (files evicted first and verified) and then "warm" (the files that cold test
    read, read again: now from the page cache, repeated for at least `min_warm_s`). Every test
    stops at its share of `max_seconds`. Each row says the verified cache state and how many of
    its bytes came from storage (read_bytes of this process).

    Raises DataError when `path` does not exist or holds no files, UsageError for bad readers,
    cache states or limits.
    """
    if not readers or any(int(r) != r or r < 1 for r in readers):
        raise UsageError(f"--readers: give positive integers such as 1,4,16 (got {list(readers)})")
    bad = [c for c in cache if c not in ("cold", "warm")]
    if bad or not cache:
        raise UsageError(f"cache states for the probe are cold and/or warm, got {list(cache)}")
    if max_seconds <= 0 or max_files < 1:
        raise UsageError("--max-seconds must be > 0 and --max-files >= 1")
    t_begin = clock()
    root = Path(path)
    files = list_files(root)
    if not files:
        raise DataError(f"{root} holds no files; point it at the dataset folder (or make one with "
                        "`loaderbench make-data`)")
    sizes = file_sizes(files)
    stats = size_stats(sizes)
    fs = filesystem_of(root)
    dev = block_device_of(root)
    evictable, eviction_reason = static_evictability(None if fs is None else fs.fstype)
    notes: list[str] = []
    if dev is not None and dev.disk.startswith(("vd", "xvd")):
        notes.append(
            f"{dev.disk} is a virtual disk: the host may cache it, so cold reads can be faster than "
            "the physical device, and its rotational flag may not describe the real hardware"
        )
    rng = random.Random(seed)
    subset = [f for f, s in zip(files, sizes) if s > 0]
    if len(subset) > max_files:
        subset = sorted(rng.sample(subset, max_files))
    shuffled = list(subset)
    rng.shuffle(shuffled)
    if len(subset) < max(readers):
        notes.append(
            f"only {len(subset)} file(s) to read: with {max(readers)} readers some had nothing to read, "
            "so those rows do not show that concurrency"
        )
    tests: list[tuple[str, int, list[Path]]] = [("sequential", 1, subset)]
    tests += [("random", int(r), shuffled) for r in readers]
    phases = len(tests) * len(cache)
    budget = max_seconds / phases
    rows: list[ProbeRow] = []
    for test, n_readers, order in tests:
        chunk = _SEQ_CHUNK_BYTES if test == "sequential" else _CHUNK_BYTES
        read_before: list[Path] | None = None
        for c in cache:
            if c == "cold":
                cs = set_cache_state(order, "cold", drop_caches, verify_sample=500, seed=seed)
                if cs.achieved != "cold":
                    evictable = evictable and cs.evictable
                    eviction_reason = eviction_reason or cs.reason
                todo, min_s = order, 0.0
            else:
                if read_before is None:
                    # Warm only: a priming pass within the budget reads (and so caches) the files
                    # the warm test will use; warming the whole sample could take far longer.
                    read_before = _run_readers(order, n_readers, budget, 0.0, chunk, clock)[3]
                todo, min_s = read_before, min(min_warm_s, budget)
                cs = set_cache_state(todo, "as-is", verify_sample=500, seed=seed)  # verify only
            io0 = io_counters_tree()
            nf, nb, sec, touched = _run_readers(todo, n_readers, budget, min_s, chunk, clock)
            io1 = io_counters_tree()
            storage = None if io0 is None or io1 is None else max(0, io1 - io0)
            rows.append(_row(test, n_readers, c, cs.achieved, cs.resident_fraction_after,
                             nf, nb, sec, storage))
            if c == "cold":
                read_before = touched
    if not evictable and eviction_reason:
        notes.insert(0, eviction_reason)
    return StorageProbe(
        path=str(root),
        files=stats,
        filesystem=fs,
        block_device=dev,
        evictable=evictable,
        eviction_reason=eviction_reason,
        tested_files=len(subset),
        max_seconds=max_seconds,
        seconds=clock() - t_begin,
        rows=rows,
        notes=notes,
    )
