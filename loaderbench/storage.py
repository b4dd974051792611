"""Storage: control and verify the page cache, count bytes really read, probe a path's speed.

This module answers "is the disk what starves the GPU?" without torch (it is imported by the
sweep's parent process and by `loaderbench storage`, which must start fast). Linux is the target:
on other systems eviction and residency report that they are unavailable instead of guessing.

- Cache state as a controlled variable: `set_cache_state(paths, "cold" | "warm" | "as-is")`
  evicts (`evict`) or reads (`warm`) the files and then *verifies* the state it reached with a
  residency check (`residency`). `achieved` is never "cold" unless the check says so.
- Bytes really read: `io_counters_tree` (storage reads of a process tree), `needed_bytes` (what
  the measured batches needed) and `read_summary` (effective MB/s, served from storage or cache).
- The differential fetch/prep split: `fetch_prep_split(cold_wait_s, warm_wait_s)`.
- Where the data lives: `filesystem_of`, `block_device_of`, `is_rotational`.
- `probe_storage(path)`: sequential MB/s and random whole-file reads/s at several reader counts,
  cold and warm, bounded in time (behind `loaderbench storage`).

NOTE [ What "cold" means and how it is checked ]
    The OS keeps file pages in the page cache after they were read once; a second epoch (or a
    second config of a sweep) then reads RAM, not the disk, and a slow disk looks fast (case C18).
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

NOTE [ read_bytes counts storage, not the page cache ]
    psutil's `io_counters().read_bytes` (Linux: /proc/PID/io `read_bytes`) is the number of bytes
    this process caused to be fetched from a block device (including readahead), not what
    `read()` returned: a page-cache hit adds nothing, so warm reads count ~0 and tmpfs reads count
    0 (compare `read_chars`, which counts every byte read()). Children that exited and were
    reaped are folded into their parent's counter by the kernel, so summing the live tree at two
    instants gives the tree's storage reads between them; a child that exited but is not reaped
    yet is missed until it is. Network filesystems do not count here (no block device).

NOTE [ The differential fetch/prep split ]
    Run the same config twice, once with the dataset evicted (cold) and once with it resident
    (warm). The warm run's data-wait is the preparation stall (decode, augment, collate,
    transfer): storage is out of the picture. The cold run pays the same preparation plus the
    fetch from storage, so cold - warm is the fetch stall. This is the differential method of the
    data-stall literature (e.g. Mohan et al., "Analyzing and Mitigating Data Stalls in DNN
    Training", VLDB 2021). It needs a warm run that really is warm and a cold run that really is
    cold, which is why both states are verified above.
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
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from loaderbench.errors import DataError, UsageError

__all__ = [
    "CACHE_STATES",
    "BlockDevice",
    "CacheOps",
    "CacheState",
    "EvictReport",
    "FetchPrepSplit",
    "FileStats",
    "FilesystemInfo",
    "ProbeRow",
    "ReadSummary",
    "StorageProbe",
    "block_device_of",
    "drop_all_caches",
    "evict",
    "fetch_prep_split",
    "filesystem_of",
    "io_counters_tree",
    "is_rotational",
    "list_files",
    "needed_bytes",
    "probe_storage",
    "read_summary",
    "residency",
    "set_cache_state",
    "size_stats",
    "static_evictability",
    "warm",
]

CacheRequest = Literal["cold", "warm", "as-is"]
CACHE_STATES: tuple[str, ...] = ("cold", "warm", "as-is")

#: "cold" means under this fraction of the files' bytes is resident in the page cache.
COLD_MAX_RESIDENT = 0.10
#: "warm" means at least this fraction is resident.
WARM_MIN_RESIDENT = 0.90
#: `read_summary`: a window that read less than this share of what it needed was served from cache,
#: and at least STORAGE_MIN_FRACTION of it was served from storage.
CACHE_MAX_FRACTION = 0.10
STORAGE_MIN_FRACTION = 0.90

#: Filesystems whose files live in memory: there is nothing to evict them to.
IN_MEMORY_FS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "rootfs"})
#: Filesystems whose storage is behind a server or daemon with its own cache this kernel cannot drop.
REMOTE_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "9p", "afs", "virtiofs",
     "gpfs", "beegfs", "panfs", "fuse", "fuseblk"}
)

_CHUNK_BYTES = 1 << 20
_SEQ_CHUNK_BYTES = 8 << 20

Clock = Callable[[], float]


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def list_files(root: str | os.PathLike[str], *, extensions: Sequence[str] | None = None) -> list[Path]:
    """Every regular file under `root` (or `[root]` when it is a file), sorted by path.

    `extensions` (e.g. torchvision's IMG_EXTENSIONS, matched case-insensitively) keeps only the
    files a folder dataset would load. Hidden files count like any other. Raises `DataError` when
    `root` does not exist; an empty folder gives `[]`.
    """
    base = Path(root)
    if not base.exists():
        raise DataError(f"{base} does not exist; give an existing file or folder")
    exts = tuple(e.lower() for e in extensions) if extensions else None

    def keep(name: str) -> bool:
        return exts is None or name.lower().endswith(exts)

    if base.is_file():
        return [base] if keep(base.name) else []
    out: list[Path] = []
    for dirpath, _dirnames, filenames in os.walk(base):
        for name in filenames:
            p = Path(dirpath) / name
            if keep(name) and p.is_file():
                out.append(p)
    out.sort()
    return out


@dataclass(frozen=True)
class FileStats:
    """File count and size distribution in bytes (percentiles by nearest rank)."""

    count: int
    total_bytes: int
    min_bytes: int
    p50_bytes: int
    p95_bytes: int
    max_bytes: int
    mean_bytes: float


def size_stats(sizes: Sequence[int]) -> FileStats:
    """`FileStats` of `sizes` (bytes); all zeros for no files."""
    if not sizes:
        return FileStats(0, 0, 0, 0, 0, 0, 0.0)
    xs = sorted(int(s) for s in sizes)

    def rank(q: float) -> int:
        i = max(0, min(len(xs) - 1, int(-(-q * len(xs) // 100)) - 1))  # nearest rank, ceil(q*n)
        return xs[i]

    total = sum(xs)
    return FileStats(len(xs), total, xs[0], rank(50), rank(95), xs[-1], total / len(xs))


def _sizes(paths: Iterable[Path]) -> list[int]:
    out = []
    for p in paths:
        try:
            out.append(os.stat(p).st_size)
        except OSError:
            out.append(0)
    return out


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
    total = sum(_sizes(Path(p) for p in paths))
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


# --------------------------------------------------------------------------------------------
# Filesystem and block device
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilesystemInfo:
    """The mount holding a path: mountpoint, filesystem type, and its source (e.g. /dev/vda)."""

    mountpoint: str
    fstype: str
    device: str


def filesystem_of(path: str | os.PathLike[str], *, partitions: Sequence[Any] | None = None) -> FilesystemInfo | None:
    """The mount holding `path`: the longest mountpoint that prefixes its real path, from
    `psutil.disk_partitions(all=True)` (or `partitions`, objects with `mountpoint`, `fstype`,
    `device`, in tests). None when nothing matches or psutil fails."""
    if partitions is None:
        try:
            import psutil

            partitions = psutil.disk_partitions(all=True)
        except Exception:  # noqa: BLE001 - psutil missing or failing: unknown
            return None
    real = os.path.realpath(path)
    best: Any = None
    for p in partitions:
        mount = p.mountpoint
        inside = real == mount or mount == "/" or real.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= len(best.mountpoint)):
            best = p  # later entries win a tie: the last mount over a path is the visible one
    if best is None:
        return None
    return FilesystemInfo(mountpoint=best.mountpoint, fstype=best.fstype, device=best.device)


@dataclass(frozen=True)
class BlockDevice:
    """The block device behind a path, from /sys.

    `name` is the device itself (e.g. `vda1`, `loop0`), `disk` the whole disk it is part of (the
    same for a whole disk or loop device), `rotational` the kernel's flag of that disk (True:
    HDD; virtual disks often claim True whatever the host has, so trust the measured random reads
    more). For a loop device, `backing_file` is its image and `backing_rotational` the flag of the
    disk under that image.
    """

    major_minor: str
    name: str
    disk: str
    partition: bool
    rotational: bool | None
    backing_file: str | None = None
    backing_rotational: bool | None = None


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _sys_block_dir(name: str, sysfs: str) -> str | None:
    """The real /sys directory of block device `name` ("sda", "sda1", "/dev/sda1", "8:1")."""
    if ":" in name:
        link = os.path.join(sysfs, "dev", "block", name)
    else:
        base = os.path.basename(name)
        link = os.path.join(sysfs, "class", "block", base)
        if not os.path.exists(link):
            link = os.path.join(sysfs, "block", base)
    return os.path.realpath(link) if os.path.exists(link) else None


def _disk_dir(dev_dir: str) -> str:
    """A partition's parent disk directory; the device itself otherwise."""
    return os.path.dirname(dev_dir) if os.path.exists(os.path.join(dev_dir, "partition")) else dev_dir


def is_rotational(device: str, *, sysfs: str = "/sys") -> bool | None:
    """The kernel's rotational flag (True: spinning disk) of `device` ("sda", "/dev/sda1",
    "nvme0n1", "7:0"; a partition answers for its disk), or None when unknown."""
    d = _sys_block_dir(device, sysfs)
    if d is None:
        return None
    value = _read_text(os.path.join(_disk_dir(d), "queue", "rotational"))
    return None if value not in ("0", "1") else value == "1"


def block_device_for_dev(major: int, minor: int, *, sysfs: str = "/sys", _depth: int = 0) -> BlockDevice | None:
    """`BlockDevice` for device number major:minor via /sys/dev/block/MAJ:MIN, or None."""
    mm = f"{major}:{minor}"
    d = _sys_block_dir(mm, sysfs)
    if d is None:
        return None
    disk_dir = _disk_dir(d)
    disk = os.path.basename(disk_dir)
    backing = _read_text(os.path.join(disk_dir, "loop", "backing_file"))
    backing_rot: bool | None = None
    if backing and _depth < 4:
        try:
            st = os.stat(backing.removesuffix(" (deleted)"))
            inner = block_device_for_dev(os.major(st.st_dev), os.minor(st.st_dev), sysfs=sysfs, _depth=_depth + 1)
            backing_rot = None if inner is None else inner.rotational
        except OSError:
            pass
    return BlockDevice(
        major_minor=mm,
        name=os.path.basename(d),
        disk=disk,
        partition=disk_dir != d,
        rotational=is_rotational(mm, sysfs=sysfs),
        backing_file=backing or None,
        backing_rotational=backing_rot,
    )


def block_device_of(path: str | os.PathLike[str], *, sysfs: str = "/sys") -> BlockDevice | None:
    """The block device holding `path` (st_dev -> /sys/dev/block/MAJ:MIN, partitions followed to
    their disk, loop devices to their backing file), or None for filesystems without one (tmpfs,
    NFS, ...). Filesystems with anonymous device numbers (btrfs, overlayfs) are resolved through
    their mount's source device when it is a /dev node."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    if major == 0:
        fs = filesystem_of(path)
        if fs is None or not fs.device.startswith("/dev/"):
            return None
        try:
            rdev = os.stat(fs.device).st_rdev
        except OSError:
            return None
        major, minor = os.major(rdev), os.minor(rdev)
        if major == 0:
            return None
    return block_device_for_dev(major, minor, sysfs=sysfs)


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


def _fstype_of(path: Path) -> str | None:
    fs = filesystem_of(path)
    return None if fs is None else fs.fstype


@dataclass(frozen=True)
class CacheOps:
    """The operations `set_cache_state` uses; tests pass fakes (named scenarios)."""

    evict: Callable[..., EvictReport] = evict
    warm: Callable[[Sequence[Path]], int] = warm
    residency: Callable[[Sequence[Path]], tuple[int, int] | None] = residency
    fstype: Callable[[Path], str | None] = _fstype_of


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
    try:
        children = proc.children(recursive=True)
    except psutil.Error:
        children = []
    for child in children:
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


# --------------------------------------------------------------------------------------------
# Fetch vs prep
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchPrepSplit:
    """The differential split of one config's data-wait (see NOTE [ The differential fetch/prep
    split ]), in the unit given (seconds per batch, or totals): `fetch_s` = cold - warm
    (storage), `prep_s` = warm (decode, augment, collate). `bound` names the larger."""

    cold_wait_s: float
    warm_wait_s: float
    fetch_s: float
    prep_s: float
    bound: str  # "storage (fetch)" | "CPU (prep)" | "none"
    fetch_fraction: float | None  # fetch / cold wait
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def fetch_prep_split(cold_wait_s: float, warm_wait_s: float) -> FetchPrepSplit:
    """Split a cold run's data-wait into fetch (storage) and prep (CPU) using a warm run of the
    same config: fetch = cold - warm, prep = warm; bound "storage (fetch)" when fetch > prep,
    else "CPU (prep)", "none" when neither waited. A warm run slower than the cold one (noise)
    gives fetch 0 and a note."""
    note = None
    fetch = cold_wait_s - warm_wait_s
    prep = max(0.0, warm_wait_s)
    if fetch < 0:
        note = (
            f"the warm run waited longer than the cold one by {-fetch:.3g} s: fetch is within "
            "noise (measure longer or repeat)"
        )
        fetch = 0.0
    if fetch <= 0 and prep <= 0:
        bound = "none"
    else:
        bound = "storage (fetch)" if fetch > prep else "CPU (prep)"
    frac = fetch / cold_wait_s if cold_wait_s > 0 else None
    return FetchPrepSplit(cold_wait_s, warm_wait_s, fetch, prep, bound, frac, note)


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
    sizes = _sizes(files)
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
