"""The page cache as a controlled variable: residency (mincore), eviction, warming, and the verified
state a set of files was brought to (`set_cache_state`). Linux is the target: elsewhere eviction
and residency report that they are unavailable instead of guessing.

NOTE [ What "cold" means and how it is checked ]
    The OS keeps file pages in the page cache after they were read once; a second epoch (or a
    second config of a sweep) then reads RAM, not the disk, and a slow disk looks fast.
    `evict` asks the kernel to drop each file's clean pages with
    `posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`, which needs no root. It cannot drop dirty
    pages (so the file is `fdatasync`ed first), pages another process has mapped or locked, or
    anything of an in-memory filesystem (tmpfs, ramfs: the page cache *is* the storage). With
    root and `drop_caches=True`, `drop_all_caches` writes 3 to /proc/sys/vm/drop_caches instead
    (every file of the machine, so other jobs slow down too). Either way `residency` then counts
    the resident pages with mincore(2); a state is called "cold" only when under
    COLD_MAX_RESIDENT of the bytes are resident, "warm" only when at least WARM_MIN_RESIDENT are.
    Two limits no residency check can see: a network filesystem's server (and a FUSE daemon) keeps
    its own cache, and a virtual disk's host may cache the disk image; there a "cold" read is cold
    in this kernel only. The measured read rate (and `read_summary`) is the cross-check.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import mmap
import os
import random
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loaderbench.errors import UsageError
from loaderbench.storage.devices import IN_MEMORY_FS, REMOTE_FS, filesystem_of
from loaderbench.storage.files import file_sizes

Clock = Callable[[], float]
CacheRequest = Literal["cold", "warm", "as-is"]


CACHE_STATES: tuple[str, ...] = ("cold", "warm", "as-is")


#: "cold" means under this fraction of the files' bytes is resident in the page cache.
COLD_MAX_RESIDENT = 0.10


#: "warm" means at least this fraction is resident.
WARM_MIN_RESIDENT = 0.90


_CHUNK_BYTES = 1 << 20


# --------------------------------------------------------------------------------------------
# Residency: mincore(2), or util-linux fincore
# --------------------------------------------------------------------------------------------

# NOTE [ mincore through ctypes ]
#     mincore(addr, length, vec) fills one byte per page of a mapping; bit 0 set means the page is
#     resident in memory. For a MAP_SHARED read-only mapping of a file that is exactly "this page
#     of the file is in the page cache", and mapping a file reads none of it (no page fault
#     happens until a page is touched, and we touch none). libc's mmap/mincore/munmap are called
#     through ctypes because Python's `mmap` object exposes no address to pass to mincore. Files
#     are mapped in windows of _MINCORE_WINDOW bytes so a huge file needs no huge vector.

_MINCORE_WINDOW = 1 << 30


_ODD = bytes(i & 1 for i in range(256))


class _Libc:
    """libc's mmap/munmap/mincore with argument types set, or `None` where unavailable."""

    _instance: _Libc | None = None
    _failed = False

    def __init__(self) -> None:
        name = ctypes.util.find_library("c")
        lib = ctypes.CDLL(name, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                             ctypes.c_int, ctypes.c_long]
        lib.munmap.restype = ctypes.c_int
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.restype = ctypes.c_int
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        self.lib = lib

    @classmethod
    def get(cls) -> _Libc | None:
        if cls._instance is None and not cls._failed:
            try:
                cls._instance = cls()
            except (OSError, AttributeError, TypeError):
                cls._failed = True
        return cls._instance


def _mincore_file(libc: _Libc, path: Path) -> tuple[int, int]:
    """(resident bytes, size) of one file via mmap + mincore; OSError when it cannot be mapped."""
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        resident = 0
        offset = 0
        while offset < size:
            length = min(_MINCORE_WINDOW, size - offset)
            addr = libc.lib.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
            if addr is None or addr == ctypes.c_void_p(-1).value:
                err = ctypes.get_errno()
                raise OSError(err, f"mmap: {os.strerror(err)}", str(path))
            try:
                pages = (length + page - 1) // page
                vec = (ctypes.c_ubyte * pages)()
                if libc.lib.mincore(addr, length, vec) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"mincore: {os.strerror(err)}", str(path))
                flags = bytes(vec).translate(_ODD)
                resident += flags.count(1) * page
                if flags[-1] and length % page:
                    resident -= page - length % page  # the last page is only partly file
            finally:
                libc.lib.munmap(addr, length)
            offset += length
        return resident, size
    finally:
        os.close(fd)


def _parse_fincore(text: str) -> list[tuple[int, int]]:
    """Rows of `fincore --bytes --noheadings --raw --output RES,SIZE`: [(resident, size), ...]."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            rows.append((int(parts[0]), int(parts[1])))
    return rows


def _fincore(paths: Sequence[Path]) -> list[tuple[int, int]] | None:
    """Residency through util-linux `fincore` (None when it is missing or fails)."""
    exe = shutil.which("fincore")
    if exe is None:
        return None
    out: list[tuple[int, int]] = []
    for i in range(0, len(paths), 256):
        chunk = [str(p) for p in paths[i : i + 256]]
        try:
            proc = subprocess.run(
                [exe, "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE", "--", *chunk],
                capture_output=True, text=True, timeout=60, check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        rows = _parse_fincore(proc.stdout) if proc.returncode == 0 else []
        if len(rows) != len(chunk):
            return None
        out.extend(rows)
    return out


def residency(paths: Sequence[str | os.PathLike[str]]) -> tuple[int, int] | None:
    """(resident_bytes, total_bytes) of `paths` in the page cache, or None when unknown.

    Per file: mmap it read-only and ask mincore(2) which pages are resident (see NOTE [ mincore
    through ctypes ]); files that cannot be mapped that way are asked of util-linux `fincore`;
    if that fails too the answer is None (unknown), never a guess. Empty files count 0 of 0.
    Reading residency does not change it.
    """
    libc = _Libc.get()
    resident = total = 0
    fallback: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if libc is None:
            fallback.append(p)
            continue
        try:
            r, s = _mincore_file(libc, p)
        except OSError:
            try:
                if os.stat(p).st_size == 0:
                    continue
            except OSError:
                return None
            fallback.append(p)
            continue
        resident += r
        total += s
    if fallback:
        rows = _fincore(fallback)
        if rows is None:
            return None
        for r, s in rows:
            resident += min(r, s)
            total += s
    return resident, total


def _fraction(res: tuple[int, int] | None) -> float | None:
    if res is None:
        return None
    resident, total = res
    return 1.0 if total == 0 else resident / total


# --------------------------------------------------------------------------------------------
# Evict and warm
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvictReport:
    """What `evict` did: files and bytes asked to leave the page cache, failures, and how."""

    files: int
    bytes: int
    failed: int
    errors: tuple[str, ...]  # the first few "path: reason"
    method: str  # "fadvise" | "drop_caches" | "none"
    seconds: float
    note: str | None = None


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def drop_all_caches(*, proc_file: str = "/proc/sys/vm/drop_caches") -> None:
    """`sync`, then drop the whole machine's clean page cache, dentries and inodes (writes 3 to
    /proc/sys/vm/drop_caches). Needs root (raises PermissionError otherwise); slows every other
    job on the machine until their files are read again."""
    if not is_root():
        raise PermissionError("dropping all caches needs root")
    os.sync()
    with open(proc_file, "w") as f:
        f.write("3\n")


#: `evict` fdatasyncs files modified this recently (seconds): only they can still hold dirty
#: pages (the kernel writes dirty pages back after ~30 s, vm.dirty_expire_centisecs). Syncing
#: every file costs ~0.1 ms each even when clean, seconds for a large dataset.
RECENT_WRITE_S = 120.0


def evict(
    paths: Sequence[str | os.PathLike[str]],
    *,
    drop_caches: bool = False,
    clock: Clock = time.perf_counter,
    now: Callable[[], float] = time.time,
) -> EvictReport:
    """Ask the kernel to drop `paths` from the page cache (see NOTE [ What "cold" means ]).

    Per file: open read-only, `fdatasync` if it was modified in the last RECENT_WRITE_S seconds
    (dirty pages cannot be dropped), then `posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`; no
    root needed. With `drop_caches=True` and root, `drop_all_caches()` is used instead; asked
    without root, it falls back to per-file fadvise and says so in `note`. Nothing is verified
    here: `residency` does that.
    """
    t0 = clock()
    total = sum(file_sizes(Path(p) for p in paths))
    if drop_caches:
        try:
            drop_all_caches()
            return EvictReport(len(paths), total, 0, (), "drop_caches", clock() - t0)
        except OSError as exc:
            note = f"--drop-caches needs root ({exc.strerror or exc}); evicted per file with fadvise instead"
    else:
        note = None
    if not hasattr(os, "posix_fadvise"):
        return EvictReport(len(paths), total, len(paths), ("posix_fadvise is not available on this OS",),
                           "none", clock() - t0, note)
    failed = 0
    errors: list[str] = []
    recent = now() - RECENT_WRITE_S
    for raw in paths:
        try:
            fd = os.open(raw, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                if os.fstat(fd).st_mtime >= recent:
                    try:
                        os.fdatasync(fd)
                    except OSError:
                        pass  # some filesystems refuse fsync on read-only descriptors
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        except OSError as exc:
            failed += 1
            if len(errors) < 3:
                errors.append(f"{raw}: {exc.strerror or exc}")
    return EvictReport(len(paths), total, failed, tuple(errors), "fadvise", clock() - t0, note)


def warm(paths: Sequence[str | os.PathLike[str]], *, chunk_bytes: int = _CHUNK_BYTES) -> int:
    """Read every file once, so its pages enter the page cache. Returns the bytes read
    (unreadable files are skipped)."""
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    done = 0
    for raw in paths:
        try:
            with open(raw, "rb", buffering=0) as f:
                while True:
                    n = f.readinto(view)
                    if not n:
                        break
                    done += n
        except OSError:
            continue
    return done


def static_evictability(fstype: str | None) -> tuple[bool, str | None]:
    """(evictable, reason) from the filesystem type alone: in-memory and network/FUSE
    filesystems are not; anything else is, until residency says otherwise."""
    if fstype is None:
        return True, None
    base = fstype.split(".")[0]
    if fstype in IN_MEMORY_FS or base in IN_MEMORY_FS:
        return False, (
            f"{fstype} is an in-memory filesystem: its files live in the page cache and cannot "
            "be evicted, so a cold run is impossible there (put a copy on a disk to test storage)"
        )
    if fstype in REMOTE_FS or base in REMOTE_FS:
        return False, (
            f"{fstype} is a network/FUSE filesystem: this machine can drop its own copy, but the "
            "server or daemon keeps its own cache, so a cold read is not guaranteed to reach storage"
        )
    return True, None


# --------------------------------------------------------------------------------------------
# Cache state as a controlled variable
# --------------------------------------------------------------------------------------------


def fstype_of(path: Path) -> str | None:
    """The type of the filesystem holding `path` (e.g. "ext4", "tmpfs"), None when unknown."""
    fs = filesystem_of(path)
    return None if fs is None else fs.fstype


def is_memory_fs(fstype: str | None) -> bool:
    """Whether `fstype` is an in-memory filesystem (tmpfs, ramfs, ...): no device behind it."""
    return fstype is not None and (fstype in IN_MEMORY_FS or fstype.split(".")[0] in IN_MEMORY_FS)


@dataclass(frozen=True)
class CacheOps:
    """The operations `set_cache_state` uses; tests pass fakes (named scenarios)."""

    evict: Callable[..., EvictReport] = evict
    warm: Callable[[Sequence[Path]], int] = warm
    residency: Callable[[Sequence[Path]], tuple[int, int] | None] = residency
    fstype: Callable[[Path], str | None] = fstype_of


@dataclass
class CacheState:
    """What `set_cache_state` asked for, did and verified (stored with every measured config).

    `achieved`: "cold" (under COLD_MAX_RESIDENT of the bytes resident afterwards), "warm" (at
    least WARM_MIN_RESIDENT), "mixed" (in between), "unverified" (residency unknown: never called
    cold) or "as-is" (nothing was done and residency is unknown). Fractions are of bytes, over
    `verified_files` files (all, or a random sample of large datasets). `evictable` is False for
    in-memory and network filesystems and whenever an eviction left the files resident;
    `reason` says why, or why the achieved state differs from the requested one.
    """

    requested: str
    achieved: str
    resident_fraction_before: float | None
    resident_fraction_after: float | None
    evictable: bool
    reason: str | None
    files: int = 0
    bytes: int = 0
    verified_files: int = 0
    method: str = "none"  # fadvise | drop_caches | read | none
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _classify_fraction(fraction: float | None) -> str:
    if fraction is None:
        return "unverified"
    if fraction < COLD_MAX_RESIDENT:
        return "cold"
    if fraction >= WARM_MIN_RESIDENT:
        return "warm"
    return "mixed"


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{100 * x:.0f}%"


def set_cache_state(
    paths: Sequence[str | os.PathLike[str]],
    state: str,
    drop_caches: bool = False,
    *,
    verify_sample: int | None = 5000,
    seed: int = 0,
    ops: CacheOps | None = None,
    clock: Clock = time.perf_counter,
) -> CacheState:
    """Put `paths` in page-cache `state` ("cold", "warm" or "as-is") and verify what was reached.

    cold: `evict` (per-file fadvise; `drop_all_caches` when `drop_caches` and root), then check
    residency; warm: read every file once (`warm`), then check; as-is: only measure residency.
    Residency is checked on all files, or on a seeded random sample of `verify_sample` files for
    larger datasets. In-memory (tmpfs, ramfs) and network/FUSE filesystems are reported
    `evictable=False` with the reason, and `achieved` is then whatever residency says (tmpfs:
    "warm"): it is never "cold" unless under COLD_MAX_RESIDENT of the bytes are resident.
    Raises UsageError for an unknown state.
    """
    if state not in CACHE_STATES:
        raise UsageError(f"--cache: expected one of {', '.join(CACHE_STATES)} (or both), got {state!r}")
    ops = ops or CacheOps()
    t0 = clock()
    files = [Path(p) for p in paths]
    total_bytes = 0
    by_device: dict[int, Path] = {}  # one file per filesystem, to ask its type once
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        total_bytes += st.st_size
        by_device.setdefault(st.st_dev, f)
    sample = files
    if verify_sample is not None and len(files) > verify_sample:
        sample = random.Random(seed).sample(files, verify_sample)
    fstypes = {ops.fstype(f) for f in by_device.values()}
    evictable, reason = True, None
    for t in sorted(x for x in fstypes if x is not None):
        ok, why = static_evictability(t)
        if not ok:
            evictable, reason = False, why
            break

    before = _fraction(ops.residency(sample))
    method = "none"
    if state == "cold":
        rep = ops.evict(files, drop_caches=drop_caches)
        method = rep.method
        notes = [n for n in (rep.note,) if n]
        if rep.failed:
            notes.append(f"{rep.failed} of {rep.files} files could not be evicted ({'; '.join(rep.errors)})")
        after = _fraction(ops.residency(sample))
        achieved = _classify_fraction(after)
        if achieved != "cold":
            if evictable and after is not None:
                evictable = False
                notes.insert(0, (
                    f"{_pct(after)} of the bytes stayed resident after {method} eviction (files "
                    "mapped or locked by another process, or a filesystem that ignores eviction); "
                    "this run is not cold"
                ))
            elif after is None:
                notes.insert(0, "page-cache residency could not be checked (no mincore, no fincore): "
                                "the run is not labelled cold")
        if reason:  # e.g. a network filesystem evicted here: its server's cache is out of reach
            notes.insert(0, reason)
        reason = "; ".join(notes) or None
    elif state == "warm":
        ops.warm(files)
        method = "read"
        after = _fraction(ops.residency(sample))
        achieved = _classify_fraction(after)
        if after is None:
            achieved = "warm"  # every file was just read; residency is unknown, not contradicted
            reason = "; ".join(x for x in (reason, "residency could not be checked") if x)
        elif achieved != "warm":
            reason = "; ".join(x for x in (reason, (
                f"only {_pct(after)} of the bytes stayed resident after reading every file "
                "(dataset larger than free memory?)"
            )) if x)
    else:
        after = before
        achieved = "as-is" if after is None else _classify_fraction(after)
    return CacheState(
        requested=state,
        achieved=achieved,
        resident_fraction_before=before,
        resident_fraction_after=after,
        evictable=evictable,
        reason=reason,
        files=len(files),
        bytes=total_bytes,
        verified_files=len(sample),
        method=method,
        seconds=clock() - t0,
    )
