"""Shared fixtures: a console of pinned width with colour off (golden renderings), a fake clock
(timing logic with hand-computed answers), a fake trial runner (the sweep's orchestration
without processes), a folder on a disk and a throttled loop device (storage tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from loaderbench.measure.isolation import Outcome
from loaderbench.storage import filesystem_of, static_evictability
from tests.helpers import BLKIO, FakeClock, MiB, ThrottledDisk, loop_unavailable, run_cmd


@pytest.fixture
def console() -> Console:
    """A recording console, 200 columns, no colour, not a terminal."""
    return Console(width=200, color_system=None, record=True, force_terminal=False)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


class FakeRunner:
    """Stands for measure.isolation.run_isolated: `outcomes` maps num_workers to an Outcome (or a
    callable making one); every call is recorded as (num_workers, seed, kind)."""

    def __init__(self, outcomes: dict[int, Outcome | Callable[[], Outcome]]) -> None:
        self.outcomes = outcomes
        self.calls: list[tuple[int, Any, str]] = []
        self.jobs: list[Any] = []

    def __call__(self, job: Any, **kw: Any) -> Outcome:
        self.calls.append((job.settings.num_workers, job.seed, job.kind))
        self.jobs.append(job)
        out = self.outcomes[job.settings.num_workers]
        return out() if callable(out) else out


@pytest.fixture
def fake_runner() -> type[FakeRunner]:
    return FakeRunner


@pytest.fixture
def disk_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder on an evictable (disk) filesystem: tmp_path, else under /var/tmp; skip if neither."""
    for cand in (tmp_path, Path("/var/tmp")):
        fs = filesystem_of(cand)
        if fs is not None and static_evictability(fs.fstype)[0] and os.access(cand, os.W_OK):
            if cand == tmp_path:
                yield tmp_path
                return
            d = cand / f"lb-storage-test-{os.getpid()}"
            d.mkdir(exist_ok=True)
            try:
                yield d
            finally:
                shutil.rmtree(d, ignore_errors=True)
            return
    pytest.skip("no disk-backed folder (tmp_path and /var/tmp are in-memory filesystems)")


@pytest.fixture(scope="module")
def throttled_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThrottledDisk]:
    why = loop_unavailable()
    if why:
        pytest.skip(f"throttled loop device unavailable: {why}")
    base = tmp_path_factory.mktemp("loopdisk")
    image, mnt = base / "disk.img", base / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(64 * MiB)
    device = ""
    mounted = False
    cgroup = BLKIO / f"loaderbench-test-{os.getpid()}"
    try:
        try:
            device = run_cmd("losetup", "-f", "--show", "--direct-io=on", str(image))
        except subprocess.CalledProcessError:
            device = run_cmd("losetup", "-f", "--show", str(image))
        run_cmd("mkfs.ext4", "-q", "-F", device)
        run_cmd("mount", device, str(mnt))
        mounted = True
        mm = Path(f"/sys/block/{Path(device).name}/dev").read_text().strip()
        cgroup.mkdir()
        yield ThrottledDisk(mnt, device, mm, image, cgroup)
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"could not set up a throttled loop device: {exc}")
    finally:
        if cgroup.exists():
            parent = BLKIO / "cgroup.procs"
            for pid in (cgroup / "cgroup.procs").read_text().split():
                try:
                    parent.write_text(pid)
                except OSError:
                    pass
            try:
                cgroup.rmdir()
            except OSError:
                pass
        if mounted:
            if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        if device:
            subprocess.run(["losetup", "-d", device], capture_output=True)
        image.unlink(missing_ok=True)
