"""loaderbench.storage and `loaderbench storage`: fakes first, then real storage on this machine.

The real tests (marked slow) use: /dev/shm (tmpfs: must be reported not evictable), a disk path
(ext4 on / here: eviction verified by mincore, psutil read_bytes of a process tree), and, as
root, a throttled block device: a loop device with ext4, its reads capped by a cgroup v1 blkio
throttle (an HDD-like path). The fetch/prep split is checked against a case with known read cost
and known decode cost.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from loaderbench import storage
from loaderbench.analysis.statistics import FetchPrepSplit, fetch_prep_split
from loaderbench.cli.storage import parse_readers, render_probe, storage_command
from loaderbench.errors import DataError, UsageError
from loaderbench.storage import (
    CacheOps,
    EvictReport,
    filesystem_of,
    needed_bytes,
    read_summary,
    residency,
    set_cache_state,
    size_stats,
    static_evictability,
)
from tests.helpers import ThrottledDisk, in_cgroup

MiB = 1 << 20


# ---------------------------------------------------------------------------------------------
# Pure helpers


def test_size_stats_nearest_rank() -> None:
    s = size_stats(list(range(1, 101)))
    assert (s.count, s.total_bytes, s.min_bytes, s.p50_bytes, s.p95_bytes, s.max_bytes) == (100, 5050, 1, 50, 95, 100)
    assert size_stats([]).count == 0
    assert size_stats([7]).p95_bytes == 7


def test_fetch_prep_split_names_the_bound() -> None:
    s = fetch_prep_split(cold_wait_s=0.050, warm_wait_s=0.010)
    assert s.fetch_s == pytest.approx(0.040) and s.prep_s == pytest.approx(0.010)
    assert s.bound == "storage (fetch)" and s.fetch_fraction == pytest.approx(0.8)
    s = fetch_prep_split(0.030, 0.020)
    assert s.bound == "CPU (prep)" and s.fetch_s == pytest.approx(0.010)
    s = fetch_prep_split(0.019, 0.020)  # warm slower than cold: noise, never a negative fetch
    assert s.fetch_s == 0.0 and s.bound == "CPU (prep)" and s.warm_slower_s == pytest.approx(0.001)
    assert fetch_prep_split(0.0, 0.0).bound == "none"


def test_read_summary_flags_cache_and_storage() -> None:
    cold = read_summary(read_bytes=95 * MiB, needed=100 * MiB, seconds=2.0)
    assert cold.served_from == "storage" and cold.storage_mb_per_s == pytest.approx(95 * MiB / 2 / 1e6)
    assert read_summary(3 * MiB, 100 * MiB, 2.0).served_from == "cache"
    assert read_summary(50 * MiB, 100 * MiB, 2.0).served_from == "mixed"
    assert read_summary(None, 100 * MiB, 2.0).served_from == "unknown"
    assert read_summary(10, 0, 2.0).served_from == "unknown"


def test_needed_bytes_counts_every_item_the_window_loads() -> None:
    sizes = [10, 20, 30, 40]
    # warm-up loaded items 0 and 1; the window loads 1, 2, 3 and 2 again: each needs its bytes
    # (a repeat that no storage read serves was served by a cache)
    assert needed_bytes([0, 1, 1, 2, 3, 2], sizes, start=2, stop=6) == 20 + 30 + 40 + 30


def test_parse_fincore_rows() -> None:
    assert storage.cache._parse_fincore("4096 8192\n0 100\n") == [(4096, 8192), (0, 100)]


Part = namedtuple("Part", "device mountpoint fstype opts")


def test_filesystem_of_takes_the_longest_mountpoint(tmp_path: Path) -> None:
    parts = [
        Part("/dev/vda", "/", "ext4", ""),
        Part("tmpfs", str(tmp_path), "tmpfs", ""),
        Part("server:/x", str(tmp_path / "nfs"), "nfs4", ""),
    ]
    assert filesystem_of(tmp_path / "a" / "b", partitions=parts).fstype == "tmpfs"  # type: ignore[union-attr]
    assert filesystem_of(tmp_path / "nfs" / "f", partitions=parts).fstype == "nfs4"  # type: ignore[union-attr]
    assert filesystem_of(tmp_path / "nfsx", partitions=parts).fstype == "tmpfs"  # type: ignore[union-attr]
    assert filesystem_of("/etc", partitions=parts).device == "/dev/vda"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "fstype, evictable",
    [("ext4", True), ("xfs", True), ("tmpfs", False), ("ramfs", False), ("nfs4", False),
     ("fuse.sshfs", False), ("virtiofs", False), (None, True)],
)
def test_static_evictability(fstype: str | None, evictable: bool) -> None:
    ok, reason = static_evictability(fstype)
    assert ok is evictable
    assert (reason is None) is evictable


def _fake_sysfs(root: Path) -> Path:
    """A /sys with disk sda (rotational) holding partition sda1, nvme0n1 (not rotational) and
    loop0 backed by an image."""
    sysfs = root / "sys"
    devices = sysfs / "devices"
    (devices / "pci" / "block" / "sda" / "sda1").mkdir(parents=True)
    (devices / "pci" / "block" / "sda" / "sda1" / "partition").write_text("1\n")
    (devices / "pci" / "block" / "sda" / "queue").mkdir()
    (devices / "pci" / "block" / "sda" / "queue" / "rotational").write_text("1\n")
    (devices / "pci" / "block" / "nvme0n1" / "queue").mkdir(parents=True)
    (devices / "pci" / "block" / "nvme0n1" / "queue" / "rotational").write_text("0\n")
    loop = devices / "virtual" / "block" / "loop0"
    (loop / "queue").mkdir(parents=True)
    (loop / "queue" / "rotational").write_text("0\n")
    (loop / "loop").mkdir()
    (loop / "loop" / "backing_file").write_text("/no/such/disk.img\n")
    (sysfs / "dev" / "block").mkdir(parents=True)
    (sysfs / "class" / "block").mkdir(parents=True)
    links = {"8:0": "pci/block/sda", "8:1": "pci/block/sda/sda1", "259:0": "pci/block/nvme0n1",
             "7:0": "virtual/block/loop0"}
    for mm, target in links.items():
        (sysfs / "dev" / "block" / mm).symlink_to(devices / target)
        (sysfs / "class" / "block" / Path(target).name).symlink_to(devices / target)
    return sysfs


def test_block_device_follows_partitions_and_loops(tmp_path: Path) -> None:
    sysfs = str(_fake_sysfs(tmp_path))
    part = storage.devices.block_device_for_dev(8, 1, sysfs=sysfs)
    assert part is not None and (part.name, part.disk, part.partition, part.rotational) == ("sda1", "sda", True, True)
    nvme = storage.devices.block_device_for_dev(259, 0, sysfs=sysfs)
    assert nvme is not None and nvme.rotational is False and not nvme.partition
    loop = storage.devices.block_device_for_dev(7, 0, sysfs=sysfs)
    assert loop is not None and loop.backing_file == "/no/such/disk.img" and loop.backing_rotational is None
    assert storage.devices.block_device_for_dev(9, 9, sysfs=sysfs) is None
    assert storage.is_rotational("/dev/sda1", sysfs=sysfs) is True
    assert storage.is_rotational("nvme0n1", sysfs=sysfs) is False
    assert storage.is_rotational("sdz", sysfs=sysfs) is None


# ---------------------------------------------------------------------------------------------
# set_cache_state with fake operations (named scenarios)


@dataclass
class FakeCache:
    """Residency of a whole fake dataset: `after_evict` is what eviction leaves resident."""

    fstype: str = "ext4"
    resident: float | None = 0.7
    after_evict: float | None = 0.0
    after_warm: float | None = 1.0
    evicted: int = 0
    warmed: int = 0
    drop_caches_seen: bool | None = None

    def ops(self) -> CacheOps:
        def evict(paths: Any, *, drop_caches: bool = False) -> EvictReport:
            self.evicted += 1
            self.drop_caches_seen = drop_caches
            self.resident = self.after_evict
            return EvictReport(len(paths), 0, 0, (), "drop_caches" if drop_caches else "fadvise", 0.0)

        def warm(paths: Any) -> int:
            self.warmed += 1
            self.resident = self.after_warm
            return 0

        def res(paths: Any) -> tuple[int, int] | None:
            return None if self.resident is None else (int(self.resident * 1000), 1000)

        return CacheOps(evict=evict, warm=warm, residency=res, fstype=lambda p: self.fstype)


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    out = []
    for i in range(3):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x" * 100)
        out.append(p)
    return out


def test_cold_on_a_disk_is_verified(files: list[Path]) -> None:
    fake = FakeCache()
    cs = set_cache_state(files, "cold", ops=fake.ops())
    assert (cs.requested, cs.achieved, cs.evictable, cs.reason) == ("cold", "cold", True, None)
    assert cs.resident_fraction_before == pytest.approx(0.7) and cs.resident_fraction_after == 0.0
    assert cs.files == 3 and cs.bytes == 300 and cs.method == "fadvise"
    assert set(cs.to_dict()) >= {"requested", "achieved", "resident_fraction_before",
                                 "resident_fraction_after", "evictable", "reason"}


def test_tmpfs_is_not_evictable_and_never_called_cold(files: list[Path]) -> None:
    fake = FakeCache(fstype="tmpfs", resident=1.0, after_evict=1.0)
    cs = set_cache_state(files, "cold", ops=fake.ops())
    assert cs.achieved == "warm" and cs.evictable is False and "tmpfs" in (cs.reason or "")


def test_a_filesystem_that_ignores_eviction_is_reported(files: list[Path]) -> None:
    fake = FakeCache(after_evict=0.5)
    cs = set_cache_state(files, "cold", ops=fake.ops())
    assert cs.achieved == "mixed" and cs.evictable is False and "50%" in (cs.reason or "")


def test_unknown_residency_is_never_cold(files: list[Path]) -> None:
    fake = FakeCache(resident=None, after_evict=None)
    cs = set_cache_state(files, "cold", ops=fake.ops())
    assert cs.achieved == "unverified" and "not labelled cold" in (cs.reason or "")


def test_network_fs_evicted_locally_keeps_the_caveat(files: list[Path]) -> None:
    cs = set_cache_state(files, "cold", ops=FakeCache(fstype="nfs4").ops())
    assert cs.achieved == "cold" and cs.evictable is False and "server" in (cs.reason or "")


def test_warm_and_as_is(files: list[Path]) -> None:
    fake = FakeCache()
    cs = set_cache_state(files, "warm", ops=fake.ops())
    assert (cs.achieved, cs.method, fake.warmed) == ("warm", "read", 1)
    short = FakeCache(after_warm=0.4)
    cs = set_cache_state(files, "warm", ops=short.ops())
    assert cs.achieved == "mixed" and "40%" in (cs.reason or "")
    idle = FakeCache(resident=0.05)
    cs = set_cache_state(files, "as-is", ops=idle.ops())
    assert (cs.achieved, idle.evicted, idle.warmed) == ("cold", 0, 0)


def test_drop_caches_is_passed_on_and_bad_state_refused(files: list[Path]) -> None:
    fake = FakeCache()
    cs = set_cache_state(files, "cold", drop_caches=True, ops=fake.ops())
    assert fake.drop_caches_seen is True and cs.method == "drop_caches"
    with pytest.raises(UsageError, match="--cache"):
        set_cache_state(files, "lukewarm", ops=fake.ops())


def test_drop_caches_needs_root_and_falls_back_to_fadvise(files: list[Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage.cache, "is_root", lambda: False)
    with pytest.raises(PermissionError):
        storage.drop_all_caches(proc_file=str(tmp_path / "drop_caches"))
    rep = storage.evict(files, drop_caches=True)
    assert rep.method == "fadvise" and "needs root" in (rep.note or "") and rep.failed == 0
    monkeypatch.setattr(storage.cache, "is_root", lambda: True)
    monkeypatch.setattr(os, "sync", lambda: None)
    storage.drop_all_caches(proc_file=str(tmp_path / "drop_caches"))
    assert (tmp_path / "drop_caches").read_text() == "3\n"


def test_residency_of_a_file_just_written_and_read(tmp_path: Path) -> None:
    p = tmp_path / "f.bin"
    p.write_bytes(os.urandom(MiB + 123))
    p.read_bytes()
    res = residency([p])
    assert res is not None and res[1] == MiB + 123 and res[0] == res[1]
    assert residency([tmp_path / "nothing"]) is None


def test_list_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.JPG").write_bytes(b"1")
    (tmp_path / "a" / "y.txt").write_bytes(b"2")
    assert [p.name for p in storage.list_files(tmp_path)] == ["x.JPG", "y.txt"]
    assert [p.name for p in storage.list_files(tmp_path, extensions=(".jpg",))] == ["x.JPG"]
    with pytest.raises(DataError, match="does not exist"):
        storage.list_files(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------
# The command


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    app.command("storage")(storage_command)

    @app.callback()
    def _root() -> None:  # keeps `storage` a subcommand, as in cli.py
        pass

    return app


runner = CliRunner()


@pytest.mark.parametrize(
    "args, message",
    [
        (["{missing}"], "does not exist"),
        (["{empty}"], "holds no files"),
        (["{empty}", "--readers", "1,x"], "--readers: 'x' is not an integer"),
        (["{empty}", "--readers", "0"], "--readers: 0 is out of range"),
        (["{empty}", "--format", "csv"], "--format: expected one of table, json"),
        (["{empty}", "--max-seconds", "-1"], "--max-seconds: must be greater than 0"),
        (["{empty}", "--cache", "hot"], "--cache: expected cold, warm or cold,warm"),
    ],
)
def test_storage_command_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    subs = {"missing": str(tmp_path / "missing"), "empty": str(tmp_path / "empty")}
    argv = ["storage", *[a.format(**subs) for a in args], "--output", str(tmp_path / "o.json")]
    res = runner.invoke(_app(), argv)
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("loaderbench: error:")]
    assert len(errors) == 1 and message in errors[0]
    assert "Traceback" not in res.output


def test_parse_readers() -> None:
    assert parse_readers("1, 4,16,4") == (1, 4, 16)


def test_storage_command_writes_the_result_format(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(12):
        (data / f"{i}.bin").write_bytes(os.urandom(20_000))
    out = tmp_path / "s.json"
    res = runner.invoke(_app(), ["storage", str(data), "--max-seconds", "0.4", "--readers", "1,4",
                                 "--output", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert (doc["tool"], doc["kind"], doc["schema_version"]) == ("loaderbench", "storage", 1)
    assert {"host", "cpu_model", "memory_total_bytes"} <= set(doc["environment"])
    probe = doc["probe"]
    assert probe["files"]["count"] == 12 and probe["files"]["total_bytes"] == 240_000
    got = {(r["test"], r["readers"], r["cache"]) for r in probe["rows"]}
    assert got == {(t, n, c) for t, n in (("sequential", 1), ("random", 1), ("random", 4)) for c in ("cold", "warm")}
    assert all(r["files"] > 0 and r["mb_per_s"] > 0 for r in probe["rows"])
    assert json.loads(res.stdout[res.stdout.index("{"):])["kind"] == "storage"


def _fake_probe() -> dict[str, Any]:
    def row(test: str, readers: int, cache: str, files_per_s: float, mb_per_s: float, frac: float) -> dict[str, Any]:
        return {"test": test, "readers": readers, "cache": cache, "cache_achieved": cache,
                "resident_fraction_at_start": 0.0 if cache == "cold" else 1.0, "files": 100,
                "bytes": 12_800_000, "seconds": 100 / files_per_s, "mb_per_s": mb_per_s,
                "files_per_s": files_per_s, "storage_read_bytes": int(frac * 12_800_000),
                "storage_fraction": frac}

    return {
        "path": "/data/train",
        "files": {"count": 20000, "total_bytes": 3_000_000_000, "min_bytes": 90_000, "p50_bytes": 150_000,
                  "p95_bytes": 160_000, "max_bytes": 200_000, "mean_bytes": 150_000.0},
        "filesystem": {"mountpoint": "/data", "fstype": "ext4", "device": "/dev/sdb1"},
        "block_device": {"major_minor": "8:17", "name": "sdb1", "disk": "sdb", "partition": True,
                         "rotational": True, "backing_file": None, "backing_rotational": None},
        "evictable": True, "eviction_reason": None, "tested_files": 5000, "max_seconds": 30.0,
        "seconds": 29.4,
        "rows": [row("sequential", 1, "cold", 1100, 160.0, 1.0), row("sequential", 1, "warm", 30000, 4500.0, 0.0),
                 row("random", 1, "cold", 120, 18.0, 1.01), row("random", 1, "warm", 29000, 4300.0, 0.0),
                 row("random", 16, "cold", 310, 46.5, 1.0), row("random", 16, "warm", 41000, 6100.0, 0.0)],
        "notes": [],
    }


GOLDEN_TABLE = """\
path: /data/train (20,000 files, 3.0 GB; file size min 90.0 KB / p50 150.0 KB / p95 160.0 KB / max 200.0 KB)
filesystem: ext4 on /dev/sdb1 (mounted at /data) | block device: sdb1 (8:17), rotational (HDD) per the kernel
read tests: 5,000 files sampled, budget 30 s, took 29.4 s | page cache evictable: yes
loaderbench storage
┏━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━━━┳━━━━━━┳━━━━━━━━━━━━━━┓
┃ test       ┃ readers ┃ cache ┃ verified ┃ files/s ┃  MB/s ┃ files ┃ MB read ┃    s ┃ from storage ┃
┡━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━━━╇━━━━━━╇━━━━━━━━━━━━━━┩
│ sequential │       1 │ cold  │ cold     │   1,100 │   160 │   100 │    12.8 │ 0.09 │         100% │
│ sequential │       1 │ warm  │ warm     │  30,000 │ 4,500 │   100 │    12.8 │ 0.00 │           0% │
│ random     │       1 │ cold  │ cold     │     120 │  18.0 │   100 │    12.8 │ 0.83 │         101% │
│ random     │       1 │ warm  │ warm     │  29,000 │ 4,300 │   100 │    12.8 │ 0.00 │           0% │
│ random     │      16 │ cold  │ cold     │     310 │  46.5 │   100 │    12.8 │ 0.32 │         100% │
│ random     │      16 │ warm  │ warm     │  41,000 │ 6,100 │   100 │    12.8 │ 0.00 │           0% │
└────────────┴─────────┴───────┴──────────┴─────────┴───────┴───────┴─────────┴──────┴──────────────┘
cold random whole-file reads by one reader: 120 files/s (18.0 MB/s). For scale: a hard disk manages ~100-200 random reads/s, a SATA SSD thousands, NVMe tens of thousands; compare with the samples/s your step needs.
concurrency: 16 readers read 2.6x the files/s of 1 (num_workers fetch in parallel like these readers).
"""


def test_storage_table_golden() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=120, color_system=None, force_terminal=False)
    render_probe(_fake_probe(), console)
    assert "\n".join(ln.rstrip() for ln in buf.getvalue().splitlines()) + "\n" == GOLDEN_TABLE


# ---------------------------------------------------------------------------------------------
# Real storage on this machine (slow)


@pytest.mark.slow
def test_tmpfs_is_reported_not_evictable() -> None:
    shm = Path("/dev/shm")
    fs = filesystem_of(shm)
    if fs is None or fs.fstype != "tmpfs":
        pytest.skip("/dev/shm is not a tmpfs here")
    d = shm / f"lb-storage-test-{os.getpid()}"
    d.mkdir()
    try:
        p = d / "f.bin"
        p.write_bytes(os.urandom(4 * MiB))
        cs = set_cache_state([p], "cold")
        assert cs.evictable is False and cs.achieved == "warm" and "tmpfs" in (cs.reason or "")
        assert cs.resident_fraction_after == pytest.approx(1.0)
        probe = storage.probe_storage(d, readers=(1,), max_seconds=0.2, min_warm_s=0.01)
        assert probe.evictable is False and "tmpfs" in (probe.eviction_reason or "")
        assert all(r.cache_achieved == "warm" for r in probe.rows)
        assert all((r.storage_fraction or 0.0) < 0.1 for r in probe.rows)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_disk_file_evicted_and_warmed_verified(disk_dir: Path) -> None:
    d = disk_dir
    p = d / "cold.bin"
    p.write_bytes(os.urandom(16 * MiB))
    cs = set_cache_state([p], "cold")
    assert cs.achieved == "cold" and cs.evictable is True, cs
    assert cs.resident_fraction_after is not None and cs.resident_fraction_after < 0.10
    cs = set_cache_state([p], "warm")
    assert cs.achieved == "warm" and cs.resident_fraction_after is not None and cs.resident_fraction_after >= 0.9


# A child that forks a "worker" which reads the file; both stay alive until stdin closes, so the
# parent can read the whole tree's counters (as the runner does for DataLoader workers).
_TREE_READER = r"""
import os, sys
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    with open(sys.argv[1], "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    os.write(w, b"x")
    sys.stdin.read()
    os._exit(0)
os.read(r, 1)
print("ready", flush=True)
sys.stdin.read()
os.waitpid(pid, 0)
"""


def _tree_read_bytes(path: Path) -> int:
    import psutil

    child = subprocess.Popen([sys.executable, "-c", _TREE_READER, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        n = storage.io_counters_tree(psutil.Process(child.pid))
        assert n is not None
        return n
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


@pytest.mark.slow
def test_read_bytes_of_a_process_tree_cold_and_warm(disk_dir: Path) -> None:
    if storage.io_counters_tree() is None:
        pytest.skip("psutil has no read_bytes on this platform")
    d = disk_dir
    p = d / "tree.bin"
    size = 32 * MiB
    p.write_bytes(os.urandom(size))
    assert set_cache_state([p], "cold").achieved == "cold"
    cold = _tree_read_bytes(p)
    assert cold >= 0.9 * size, f"cold read counted {cold} of {size} bytes"
    assert set_cache_state([p], "as-is").achieved == "warm"
    warm_bytes = _tree_read_bytes(p)
    assert warm_bytes < 0.1 * size, f"warm read counted {warm_bytes} of {size} bytes"
    s = read_summary(cold, size, 1.0)
    assert s.served_from == "storage" and read_summary(warm_bytes, size, 1.0).served_from == "cache"


# ---------------------------------------------------------------------------------------------
# A throttled block device: loop device + ext4 + cgroup v1 blkio read throttle (root only)

def _write_files(folder: Path, n: int, size: int) -> list[Path]:
    folder.mkdir(exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"s{i:03d}.bin"
        p.write_bytes(os.urandom(size))
        out.append(p)
    return out


# The child moves itself into the throttled cgroup, then reads the files cold and again warm.
_THROTTLED_READER = r"""
import json, os, sys, time, psutil
open(sys.argv[1], "w").write(str(os.getpid()))
paths = sys.argv[2:]
me = psutil.Process()
def read_all():
    r0, t0 = me.io_counters().read_bytes, time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
    return time.perf_counter() - t0, me.io_counters().read_bytes - r0
cold_s, cold_b = read_all()
warm_s, warm_b = read_all()
print(json.dumps({"cold_s": cold_s, "cold_bytes": cold_b, "warm_s": warm_s, "warm_bytes": warm_b}))
"""


@pytest.mark.slow
def test_throttled_loop_device_reads_at_the_cap(throttled_disk: ThrottledDisk) -> None:
    files = _write_files(throttled_disk.mount / "rate", 6, 4 * MiB)
    needed = 24 * MiB
    cap = 20 * MiB
    throttled_disk.throttle(cap)
    dev = storage.block_device_of(throttled_disk.mount)
    assert dev is not None and dev.name == Path(throttled_disk.device).name
    assert dev.backing_file is not None and dev.backing_file.startswith(str(throttled_disk.image))
    fs = filesystem_of(throttled_disk.mount)
    assert fs is not None and fs.fstype == "ext4"
    cs = set_cache_state(files, "cold")
    assert cs.achieved == "cold" and cs.resident_fraction_after is not None and cs.resident_fraction_after < 0.1
    out = subprocess.run(
        [sys.executable, "-c", _THROTTLED_READER, str(throttled_disk.cgroup / "cgroup.procs"), *map(str, files)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    r = json.loads(out.stdout)
    rate = r["cold_bytes"] / r["cold_s"]
    assert r["cold_bytes"] >= 0.9 * needed, r
    assert 0.8 * cap <= rate <= 1.2 * cap, f"cold read {rate / MiB:.1f} MiB/s at a {cap / MiB:.0f} MiB/s cap"
    assert r["warm_bytes"] < 0.1 * needed, r
    assert needed / r["warm_s"] > 5 * cap, "warm reads should come from the page cache, far above the cap"


class FilesWithDecode:
    """A map-style dataset over files: item i reads file i whole (real I/O) and then burns
    `decode_s` of CPU (busy loop), standing for JPEG decode + augmentation. `before_read` lets a
    test add a known latency per read."""

    def __init__(self, paths: list[Path], decode_s: float, before_read: Any = None) -> None:
        self.paths, self.decode_s, self.before_read = paths, decode_s, before_read
        self.buf = bytearray(max(p.stat().st_size for p in paths))  # no allocation per read

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> int:
        if self.before_read is not None:
            self.before_read(self.paths[i])
        with open(self.paths[i], "rb", buffering=0) as f:
            n = f.readinto(self.buf) or 0
        end = time.perf_counter() + self.decode_s
        while time.perf_counter() < end:
            pass
        return n


def _data_wait_s(dataset: FilesWithDecode, batch_size: int = 4) -> float:
    """Total time `next()` blocks over one epoch of a 0-worker DataLoader (the data-wait)."""
    from torch.utils.data import DataLoader

    loader: DataLoader[int] = DataLoader(dataset, batch_size=batch_size, num_workers=0, shuffle=False)  # type: ignore[arg-type]
    it = iter(loader)
    total = 0.0
    while True:
        t0 = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            return total
        total += time.perf_counter() - t0


def _split(files: list[Path], dataset: FilesWithDecode, primer: Any = None) -> FetchPrepSplit:
    cold = set_cache_state(files, "cold")
    assert cold.achieved == "cold", cold
    if primer is not None:
        primer()
    cold_wait = _data_wait_s(dataset)
    warm = set_cache_state(files, "warm")
    assert warm.achieved == "warm", warm
    warm_wait = _data_wait_s(dataset)
    return fetch_prep_split(cold_wait, warm_wait)


@pytest.mark.slow
def test_fetch_prep_split_on_a_throttled_device(throttled_disk: ThrottledDisk) -> None:
    """Known read cost: 4 MiB files on a device capped at 8 MiB/s (500 ms per file); known
    decode cost: 30 ms per sample.

    blk-throttle is a rate limit, not a per-request latency: it works in slices (100 ms on this
    kernel) and grants at a slice's start, and during any idle time within it, the bytes the rate
    allows for that time. So (1) a primer file read just before the cold epoch uses up the
    start-of-slice burst, and (2) each 30 ms decode earns 30 ms worth of reading; with 500 ms
    reads that hides ~6% of the fetch (the split measures the *exposed* fetch stall, which is
    what a training loop waits for). With short reads and long decodes a rate-capped device hides
    most of its fetch behind prep; a real HDD's seek latency does not.
    """
    pytest.importorskip("torch")
    n, size, cap, decode_s = 4, 4 * MiB, 8 * MiB, 0.030
    files = _write_files(throttled_disk.mount / "split", n, size)
    primer = _write_files(throttled_disk.mount / "primer", 1, MiB)
    throttled_disk.throttle(cap)
    dataset = FilesWithDecode(files, decode_s)
    with in_cgroup(throttled_disk.cgroup):
        assert set_cache_state(primer, "cold").achieved == "cold"
        split = _split(files, dataset, primer=lambda: storage.warm(primer))
    expected_fetch, expected_prep = n * size / cap, n * decode_s  # 2.0 s and 0.12 s
    assert split.fetch_s == pytest.approx(expected_fetch, rel=0.15), split
    assert split.prep_s == pytest.approx(expected_prep, rel=0.15), split
    assert split.bound == "storage (fetch)"


@pytest.mark.slow
def test_fetch_prep_split_with_known_latency_per_cold_read(disk_dir: Path) -> None:
    """No root needed: a wrapper adds a known latency to every read of a file that is not in the
    page cache (checked with mincore), on a disk path evicted and verified as cold."""
    pytest.importorskip("torch")
    d = disk_dir
    n, size, latency_s, decode_s = 16, 64 * 1024, 0.030, 0.040
    files = _write_files(d / "lat", n, size)

    def slow_when_cold(p: Path) -> None:
        res = residency([p])
        if res is not None and res[0] < 0.1 * res[1]:
            time.sleep(latency_s)

    split = _split(files, FilesWithDecode(files, decode_s, before_read=slow_when_cold))
    assert split.fetch_s == pytest.approx(n * latency_s, rel=0.15), split
    assert split.prep_s == pytest.approx(n * decode_s, rel=0.15), split
    assert split.bound == "CPU (prep)"
