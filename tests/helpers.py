"""Hand-made trials and results for tests that need no hardware; a throttled block device for
the storage tests that do (root only)."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from loaderbench.analysis import summarize_config
from loaderbench.model import ConfigResult, LoaderSettings, Trial


def batch_load_s(dataset, batch_size: int, collate=None, batches: int = 5) -> float:
    """Median wall time, in seconds, of building one batch of `dataset` in this process: the
    items `dataset[i]` for `batch_size` consecutive indices, then `collate` on them if given.
    Sleep-based datasets state their cost only up to the machine's sleep overshoot (0.1-0.4 ms
    per sleep on the CI VMs, more when busy); this is their cost here, for hand-computed
    expectations."""
    times = []
    for b in range(batches):
        t0 = time.perf_counter()
        items = [dataset[i] for i in range(b * batch_size, (b + 1) * batch_size)]
        if collate is not None:
            collate(items)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def settings(nw: int, pin: bool = False, pf: bool = False, bs: int = 16, factor: int | None = None,
             persistent: bool = False) -> LoaderSettings:
    return LoaderSettings(nw, pin, pf, (factor or 2) if nw else None, persistent if nw else False, bs)


def trial(wait_s: float, compute_s: float, n: int = 20, bs: int = 16, first_s: float = 0.5,
          waits: list[float] | None = None) -> Trial:
    waits = waits if waits is not None else [wait_s] * n
    return Trial(
        first_batch_s=first_s,
        warmup_batches=3,
        data_wait_s=list(waits),
        compute_s=[compute_s] * len(waits),
        step_s=[w + compute_s for w in waits],
        samples=bs * len(waits),
        wall_s=sum(w + compute_s for w in waits),
        timing="host",
    )


def result(s: LoaderSettings, *trials: Trial, status: str = "ok", error: str | None = None) -> ConfigResult:
    r = ConfigResult(settings=s, status=status, error=error)  # type: ignore[arg-type]
    if status == "ok":
        r.trials = list(trials)
        summarize_config(r)
    return r


class FakeClock:
    """A clock that moves only when told (seconds): timing logic with hand-computed answers."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt

    def until(self, t: float) -> None:
        self.t = max(self.t, t)


def reason(rec) -> str:
    """The recommendation's findings as the table words them, each config named by its key
    (a result's table names it by the settings its columns show)."""
    from loaderbench.render.findings import finding_sentences

    return " ".join(finding_sentences(rec.findings, lambda s: s.key()))


def with_ceilings(results: list[ConfigResult], by_batch: dict[int, float]) -> list[ConfigResult]:
    """`results` with each summary's compute ceiling set from `by_batch` (samples/s per batch
    size), as `analyze` sets it from a sweep's ceilings."""
    for r in results:
        if r.summary is not None:
            c = r.summary.compute_ceiling_samples_per_s = by_batch.get(r.settings.batch_size)
            r.summary.ceiling_share = r.summary.samples_per_s / c if c else None
    return results


# ---------------------------------------------------------------------------------------------
# A throttled block device: loop device + ext4 + cgroup v1 blkio read throttle (root only)
# ---------------------------------------------------------------------------------------------

MiB = 1 << 20

BLKIO = Path("/sys/fs/cgroup/blkio")


def loop_unavailable() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (losetup, mount, cgroup blkio)"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not (BLKIO / "blkio.throttle.read_bps_device").exists():
        return "no cgroup v1 blkio controller with throttling at /sys/fs/cgroup/blkio"
    if not Path("/dev/loop-control").exists():
        return "no loop device support (/dev/loop-control missing)"
    return None


def run_cmd(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


@dataclass
class ThrottledDisk:
    mount: Path
    device: str  # /dev/loopN
    major_minor: str
    image: Path
    cgroup: Path

    def throttle(self, bytes_per_s: int) -> None:
        (self.cgroup / "blkio.throttle.read_bps_device").write_text(f"{self.major_minor} {bytes_per_s}\n")


def own_blkio_cgroup() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "blkio" in controllers.split(","):
            return BLKIO / path.lstrip("/")
    return BLKIO


@contextmanager
def in_cgroup(cgroup: Path) -> Iterator[None]:
    """Move this (test) process into `cgroup` and back."""
    home = own_blkio_cgroup()
    (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield
    finally:
        (home / "cgroup.procs").write_text(str(os.getpid()))


_T = TypeVar("_T")


def measured_again_if_missed(measure: Callable[[], _T], ok: Callable[[_T], bool]) -> list[_T]:
    """A load-sensitive check's rounds: `measure()` once, and once more (both sides again) where
    `ok` rejects the first. Other load on a shared 2-CPU machine moves a single round by 6-12%;
    a figure that is wrong misses both. The check asserts `ok` on the last round."""
    first = measure()
    return [first] if ok(first) else [first, measure()]
