"""Where data lives: the filesystem of a path, its block device, whether the kernel calls it
rotational (an HDD).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Filesystems whose files live in memory: there is nothing to evict them to.
IN_MEMORY_FS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "rootfs"})


#: Filesystems whose storage is behind a server or daemon with its own cache this kernel cannot drop.
REMOTE_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "9p", "afs", "virtiofs",
     "gpfs", "beegfs", "panfs", "fuse", "fuseblk"}
)


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
