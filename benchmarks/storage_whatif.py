"""`--what-if disk=MBPS` against a device throttled to that rate (docs/benchmarks.md, section 9).

Usage (root, Linux with loop devices and the cgroup v1 blkio controller):
    python3 benchmarks/storage_whatif.py [--rates 4,8] [--cpu-ms 5] [--out results/storage-whatif]

1. Makes a 256 MiB ext4 filesystem on a loop device and writes 400 files of 256 KiB on it.
2. Sweeps a MODULE:FACTORY dataset reading them (one file per sample, --cpu-ms of CPU per sample
   standing for decoding) with `--cache warm`: the rows served from the page cache, which the
   storage what-if is fitted on.
3. For each rate R (MB/s, 10^6 bytes): `show --what-if disk=R` of that warm run (the prediction),
   then the same sweep with `--cache cold` while this process and its children are in a cgroup
   whose reads from the loop device are capped at R MB/s (the measurement).
4. Prints, per rate and config, the predicted and measured samples/s and the error; writes the
   result files and a summary JSON under --out. Cleans up the cgroup, the mount and the device.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BLKIO = Path("/sys/fs/cgroup/blkio")
FILES, FILE_BYTES = 400, 256 * 1024
COMMON = ["--num-workers", "0,1,2,4", "--batch-size", "4", "--compute", "sleep:2", "--batches", "6",
          "--min-time", "1", "--repeats", "1", "--search", "grid", "--no-progress"]


class FilesWithWork:
    """One sample per file under `root`: the file read whole with read(), then `cpu_ms` of busy
    CPU (standing for decode and augmentation)."""

    def __init__(self, root: str, cpu_ms: float = 5.0) -> None:
        self.paths = sorted(str(p) for p in Path(root).rglob("*") if p.is_file())
        self.cpu_s = cpu_ms / 1e3

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Any:
        import torch

        with open(self.paths[i], "rb") as f:
            data = f.read()
        end = time.perf_counter() + self.cpu_s
        while time.perf_counter() < end:
            pass
        return torch.tensor(len(data))


def make_files(root: str, cpu_ms: float = 5.0) -> FilesWithWork:
    """The dataset factory the sweeps name (`benchmarks.storage_whatif:make_files`)."""
    return FilesWithWork(root, cpu_ms)


def run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def sweep(out: Path, data: Path, cache: str, cpu_ms: float) -> None:
    config = out.with_suffix(".toml")
    config.write_text(f'[dataset]\nkind = "benchmarks.storage_whatif:make_files"\ndata = "{data}"\n'
                      f"[dataset.kwargs]\ncpu_ms = {cpu_ms}\n")
    subprocess.run([sys.executable, "-m", "loaderbench", "sweep", str(config), "--cache", cache, *COMMON,
                    "--output", str(out)], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="4,8", help="device rates to check, MB/s (10^6 bytes)")
    ap.add_argument("--cpu-ms", type=float, default=5.0, help="CPU per sample (decode), ms")
    ap.add_argument("--out", default="results/storage-whatif")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from loaderbench.analysis.predict import what_if_disk
    from loaderbench.results import read_results

    base = Path(tempfile.mkdtemp(prefix="lb-whatif-"))
    image, mnt = base / "disk.img", base / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(256 << 20)
    cgroup = BLKIO / f"loaderbench-whatif-{os.getpid()}"
    device, mounted = "", False
    try:
        device = run("losetup", "-f", "--show", "--direct-io=on", str(image))
        run("mkfs.ext4", "-q", "-F", device)
        run("mount", device, str(mnt))
        mounted = True
        data = mnt / "files"
        data.mkdir()
        for i in range(FILES):
            (data / f"f{i:04d}.bin").write_bytes(os.urandom(FILE_BYTES))
        major_minor = Path(f"/sys/block/{Path(device).name}/dev").read_text().strip()
        cgroup.mkdir()
        sweep(out / "warm.json", data, "warm", args.cpu_ms)
        warm = read_results(out / "warm.json")
        summary: dict[str, Any] = {"files": FILES, "file_bytes": FILE_BYTES, "cpu_ms": args.cpu_ms, "rates": {}}
        for rate in rates:
            (cgroup / "blkio.throttle.read_bps_device").write_text(f"{major_minor} {int(rate * 1e6)}\n")
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))
            try:
                sweep(out / f"cold-{rate:g}.json", data, "cold", args.cpu_ms)
            finally:
                (BLKIO / "cgroup.procs").write_text(str(os.getpid()))
            cold = read_results(out / f"cold-{rate:g}.json")
            rows, errors = [], []
            for r in cold.results:
                if r.summary is None:
                    continue
                what = what_if_disk(warm.results, r.settings, rate, None, 0.05,
                                    warm.environment.get("usable_cpus"), max_workers=8)
                predicted = dict((int(w), x) for w, x in what.curve)[r.settings.num_workers]
                measured = r.summary.samples_per_s
                errors.append(abs(predicted / measured - 1))
                rows.append({"config": r.settings.key(), "measured": measured, "predicted": predicted,
                             "error": predicted / measured - 1, "served_from": r.summary.served_from})
                print(f"{rate:g} MB/s {r.settings.key():28s} measured {measured:7.1f} predicted {predicted:7.1f} "
                      f"error {predicted / measured - 1:+.1%} ({r.summary.served_from})")
            summary["rates"][f"{rate:g}"] = {"rows": rows, "median_abs_error": statistics.median(errors),
                                             "max_abs_error": max(errors)}
            print(f"{rate:g} MB/s: median |error| {statistics.median(errors):.1%}, largest {max(errors):.1%}")
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    finally:
        if cgroup.exists():
            for pid in (cgroup / "cgroup.procs").read_text().split():
                try:
                    (BLKIO / "cgroup.procs").write_text(pid)
                except OSError:
                    pass
            cgroup.rmdir()
        if mounted:
            subprocess.run(["umount", str(mnt)], capture_output=True)
        if device:
            subprocess.run(["losetup", "-d", device], capture_output=True)
        image.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
