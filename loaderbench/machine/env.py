"""Capture the environment a sweep ran in, and warn about settings that will hurt the DataLoader.

Only CHOSEN facts are recorded (CPUs and affinity, memory, /dev/shm, the open-file limit, the
multiprocessing and tensor-sharing settings, versions, the GPU's identity); the process
environment is never dumped, except for the one variable that decides which GPU is used,
`CUDA_VISIBLE_DEVICES`. The result is a plain JSON-able dict stored in every result file.

`fingerprint` hashes the facts that make two runs comparable (CPU model, usable CPUs, memory in
GiB, GPU name, torch major.minor); `compare` refuses to compare runs whose fingerprints differ.

NOTE [ Why /dev/shm and the fd limit are preflight facts ]
  DataLoader workers hand each batch to the main process through shared memory: tensors are
  moved into /dev/shm segments, so a container's default 64 MiB /dev/shm kills workers with
  SIGBUS as soon as a few batches are in flight. Under torch's default
  `file_descriptor` sharing strategy every received tensor that is still referenced holds an
  open descriptor, so a low `ulimit -n` ends in "too many open files".
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from loaderbench.machine.gpu import gpu_facts, nvml_status

GIB = 1024**3
MIB = 1024**2
#: Below this total size of /dev/shm, preflight warns (bytes).
SHM_WARN_BYTES = 1 * GIB
#: Below this soft RLIMIT_NOFILE, preflight warns when the sharing strategy is file_descriptor.
FD_WARN_SOFT_LIMIT = 4096


def usable_cpus() -> int:
    """CPUs this process may run on: the affinity mask where the OS has one, else all CPUs."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return len(os.sched_getaffinity(0))
        except OSError:
            pass
    return os.cpu_count() or 1


def cpu_affinity() -> list[int] | None:
    """The CPU ids of this process's affinity mask, sorted; None where the OS has no such call."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return sorted(os.sched_getaffinity(0))
        except OSError:
            return None
    return None


def cpu_quota() -> dict[str, Any]:
    """The cgroup CPU quota in CPUs (e.g. Docker `--cpus=4` -> 4.0), which the affinity mask
    does not show: `{"cpus": float | None, "source": path | None}`; cpus None means no quota."""
    v2 = "/sys/fs/cgroup/cpu.max"
    v1_quota = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
    v1_period = "/sys/fs/cgroup/cpu/cpu.cfs_period_us"
    try:
        with open(v2) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            return {"cpus": int(quota) / int(period), "source": v2}
        return {"cpus": None, "source": v2}
    except (OSError, ValueError):
        pass
    try:
        with open(v1_quota) as f:
            quota_us = int(f.read().strip())
        with open(v1_period) as f:
            period_us = int(f.read().strip())
        if quota_us > 0 and period_us > 0:
            return {"cpus": quota_us / period_us, "source": v1_quota}
        return {"cpus": None, "source": v1_quota}
    except (OSError, ValueError):
        return {"cpus": None, "source": None}


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo ("model name"), else `platform.processor()`,
    else the machine type."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _fs_type(path: str) -> str | None:
    """The filesystem type of the mount holding `path` (longest matching mountpoint)."""
    try:
        import psutil

        parts = psutil.disk_partitions(all=True)
    except Exception:  # noqa: BLE001 (psutil missing or failing: the type is just unknown)
        return None
    real = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for p in parts:
        mount = p.mountpoint
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) > best[0]):
            best = (len(mount), p.fstype)
    return None if best is None else best[1]


def shm_info(path: str = "/dev/shm") -> dict[str, Any]:
    """Size of the shared-memory filesystem DataLoader workers pass batches through.

    Returns `{"path", "total_bytes", "free_bytes", "fs_type", "reason"}`; the sizes and type
    are None and `reason` says why when the path is absent or unreadable (`reason` is None
    otherwise).
    """
    info: dict[str, Any] = {
        "path": path,
        "total_bytes": None,
        "free_bytes": None,
        "fs_type": None,
        "reason": None,
    }
    if not os.path.isdir(path):
        info["reason"] = f"{path} does not exist"
        return info
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        info["reason"] = f"cannot stat {path}: {exc}"
        return info
    info["total_bytes"] = int(usage.total)
    info["free_bytes"] = int(usage.free)
    info["fs_type"] = _fs_type(path)
    return info


def fd_limit() -> dict[str, int | None]:
    """The open-file limit `RLIMIT_NOFILE` as `{"soft": n, "hard": n}`; None means unlimited
    (or, where the OS has no rlimits, unknown)."""

    try:
        import resource
    except ImportError:  # not on Windows
        return {"soft": None, "hard": None}

    def value(v: int) -> int | None:
        return None if v == resource.RLIM_INFINITY else int(v)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {"soft": value(soft), "hard": value(hard)}


def default_mp_start_method() -> tuple[str | None, bool]:
    """`(start method, explicitly set)`: the one set by `set_start_method`, else the platform
    default. Reading it never fixes the start method (unlike `get_start_method()`)."""
    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen is not None:
        return chosen, True
    # The concrete default context behind multiprocessing's DefaultContext; reading its name
    # does not set the start method (private, hence the platform rule below as a fallback).
    ctx = getattr(
        getattr(multiprocessing.context, "_default_context", None), "_default_context", None
    )
    name = getattr(ctx, "_name", None)
    if isinstance(name, str):
        return name, False
    if sys.platform == "win32" or sys.platform == "darwin":
        return "spawn", False
    return ("forkserver" if sys.version_info >= (3, 14) else "fork"), False


def _torch_facts() -> dict[str, Any]:
    """Versions and settings of torch (and torchvision, when installed)."""
    import torch
    import torch.multiprocessing

    facts: dict[str, Any] = {
        "torch_version": torch.__version__,
        "torch_sharing_strategy": torch.multiprocessing.get_sharing_strategy(),
        "torch_num_threads": torch.get_num_threads(),
        "cuda_available": bool(torch.cuda.is_available()),
        "cuda_version": torch.version.cuda,
    }
    try:
        facts["cudnn_version"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 (a broken cuDNN install is just "unknown")
        facts["cudnn_version"] = None
    try:  # the installed version, without importing torchvision (seconds on a small machine)
        from importlib.metadata import version

        facts["torchvision_version"] = version("torchvision")
    except Exception:  # noqa: BLE001 (absent or broken torchvision is just "unknown")
        facts["torchvision_version"] = None
    return facts


def _major_minor(version: str | None) -> str | None:
    if not version:
        return None
    parts = version.split("+")[0].split(".")
    return ".".join(parts[:2])


def environment_fingerprint(env: dict[str, Any]) -> str:
    """A short hash of the machine identity: CPU model, usable CPUs, memory rounded to GiB, GPU
    name, torch major.minor. Two runs are comparable only when their fingerprints match."""
    memory = env.get("memory_total_bytes")
    gpu = env.get("gpu") or {}
    identity = [
        env.get("cpu_model"),
        env.get("usable_cpus"),
        None if memory is None else round(memory / GIB),
        gpu.get("name") if gpu.get("available") else None,
        _major_minor(env.get("torch_version")),
    ]
    blob = json.dumps(identity, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def capture_environment(*, device_index: int | None = None, nvml: Any = None) -> dict[str, Any]:
    """The environment record of a run (a JSON-able dict of chosen fields; see the module doc).

    `device_index` is the torch CUDA ordinal in use (None: none). Describing it calls
    `torch.cuda.get_device_properties`, which initialises CUDA in this process. `nvml` is an
    injectable NVML module for tests.
    """
    import psutil

    start_method, start_method_set = default_mp_start_method()
    env: dict[str, Any] = {
        "host": platform.node(),
        "os": platform.system(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "cpu_affinity": cpu_affinity(),
        "cpu_quota": cpu_quota(),
        "memory_total_bytes": int(psutil.virtual_memory().total),
        "memory_available_bytes": memory_available_bytes(),
        "shm": shm_info(),
        "fd_limit": fd_limit(),
        "default_mp_start_method": start_method,
        "mp_start_method_set": start_method_set,
        "python_version": platform.python_version(),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    env.update(_torch_facts())
    env["nvml"] = nvml_status(nvml).to_dict()
    if device_index is None:
        env["gpu"] = {"available": False, "reason": "no CUDA device in use"}
    elif not env["cuda_available"]:
        env["gpu"] = {"available": False, "reason": "torch reports no CUDA device"}
    else:
        env["gpu"] = {"available": True, **gpu_facts(device_index, nvml)}
    env["fingerprint"] = environment_fingerprint(env)
    return env


def memory_available_bytes(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """Host memory this process tree can still take, in bytes: the kernel's available memory
    (psutil), or less where a cgroup limit (v2 `memory.max` - `memory.current`, or v1
    `memory.limit_in_bytes` - `memory.usage_in_bytes`) leaves less."""
    import psutil

    avail = int(psutil.virtual_memory().available)
    for limit_name, usage_name in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            limit = Path(cgroup_root, limit_name).read_text().strip()
            usage = Path(cgroup_root, usage_name).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit() and int(limit) < (1 << 60):
            avail = min(avail, max(0, int(limit) - int(usage)))
    return avail


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / MIB:.0f} MiB"


def preflight_warnings(env: dict[str, Any]) -> list[str]:
    """Human warnings about an environment record (keys may be missing; they are then skipped).

    Checks: /dev/shm missing, under 1 GiB or nearly full; the fd soft limit under 4096 with the
    `file_descriptor` sharing strategy; a CPU affinity or cgroup quota below the machine's CPUs;
    no CUDA; NVML unavailable (only when CUDA is available, since otherwise it changes nothing).
    """
    warnings: list[str] = []
    shm = env.get("shm") or {}
    total, free = shm.get("total_bytes"), shm.get("free_bytes")
    path = shm.get("path", "/dev/shm")
    if shm and total is None:
        warnings.append(
            f"shared memory ({path}) is unavailable ({shm.get('reason') or 'unknown'}): "
            "DataLoader workers pass batches through it; expect worker crashes with num_workers > 0"
        )
    elif total is not None and total < SHM_WARN_BYTES:
        warnings.append(
            f"shared memory ({path}) is {_mib(total)}: DataLoader workers pass batches through "
            "it and die with a bus error when it fills; in Docker use --shm-size=2g or more "
            "(about batch bytes x num_workers x prefetch_factor, plus headroom)"
        )
    elif total is not None and free is not None and free < SHM_WARN_BYTES:
        warnings.append(
            f"shared memory ({path}) has only {_mib(free)} free of {_mib(total)}: "
            "DataLoader workers pass batches through it; free it or enlarge it"
        )

    fds = env.get("fd_limit") or {}
    soft = fds.get("soft")
    strategy = env.get("torch_sharing_strategy")
    if soft is not None and soft < FD_WARN_SOFT_LIMIT and strategy == "file_descriptor":
        hard = fds.get("hard")
        # Raising the soft limit is possible up to the hard one; past it needs root.
        target = 65536 if hard is None or hard < 0 or hard >= 65536 else hard
        fix = (f"raise it (ulimit -n {target}; hard limit {hard if hard and hard > 0 else 'unlimited'}) or use "
               if target > soft else f"the hard limit is {hard} too (raising it needs root) so use ")
        warnings.append(
            f"open-file limit (ulimit -n) is {soft} with torch sharing strategy "
            "'file_descriptor': every batch tensor still referenced holds a descriptor; "
            + fix + "torch.multiprocessing.set_sharing_strategy('file_system')"
        )

    usable, count = env.get("usable_cpus"), env.get("cpu_count")
    if usable is not None and count is not None and usable < count:
        warnings.append(
            f"this process may run on {usable} of {count} CPUs (affinity): num_workers above "
            f"{usable} share cores"
        )
    quota = (env.get("cpu_quota") or {}).get("cpus")
    if quota is not None and usable is not None and quota < usable:
        warnings.append(
            f"a cgroup CPU quota allows {quota:g} CPUs although {usable} are visible: workers "
            f"beyond {max(1, int(quota))} are throttled, not parallel"
        )

    if env.get("cuda_available") is False:
        warnings.append(
            "no CUDA device: the step runs on the CPU, so pin_memory and the CUDA prefetcher "
            "change nothing and no GPU utilization is measured"
        )
    else:
        nvml = env.get("nvml") or {}
        if nvml and not nvml.get("available", False):
            warnings.append(
                f"GPU utilization unavailable: {nvml.get('reason') or 'NVML unavailable'}; "
                "verdicts rest on the measured data-wait"
            )
    return warnings
