"""`loaderbench storage`: the probe's header, table and notes.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

# --------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * min(x, 9.99):.0f}%"


def header_lines(probe: dict[str, Any]) -> list[str]:
    f = probe["files"]
    lines = [
        f"path: {probe['path']} ({f['count']:,} files, {_size(f['total_bytes'])}; file size min "
        f"{_size(f['min_bytes'])} / p50 {_size(f['p50_bytes'])} / p95 {_size(f['p95_bytes'])} / max "
        f"{_size(f['max_bytes'])})"
    ]
    fs = probe.get("filesystem")
    dev = probe.get("block_device")
    where = "filesystem: unknown" if not fs else f"filesystem: {fs['fstype']} on {fs['device']} (mounted at {fs['mountpoint']})"
    if dev:
        rot = {True: "rotational (HDD) per the kernel", False: "non-rotational (SSD/NVMe/RAM) per the kernel",
               None: "rotational flag unknown"}[dev.get("rotational")]
        what = f"block device: {dev['name']} ({dev['major_minor']}), {rot}"
        if dev.get("backing_file"):
            what += f"; loop device over {dev['backing_file']}"
    else:
        what = "block device: none (in-memory or network filesystem)"
    lines.append(f"{where} | {what}")
    ev = "yes" if probe["evictable"] else "NO: cold rows are not cold (see note)"
    lines.append(
        f"read tests: {probe['tested_files']:,} files sampled, budget {probe['max_seconds']:g} s, took "
        f"{probe['seconds']:.1f} s | page cache evictable: {ev}"
    )
    return lines


def build_table(probe: dict[str, Any]) -> Table:
    table = Table(title="loaderbench storage", title_justify="left")
    for name in ("test", "readers", "cache", "verified", "files/s", "MB/s", "files", "MB read", "s",
                 "from storage"):
        table.add_column(name, justify="left" if name in ("test", "cache", "verified") else "right", no_wrap=True)
    for r in probe["rows"]:
        table.add_row(
            r["test"], str(r["readers"]), r["cache"], r["cache_achieved"], _rate(r["files_per_s"]),
            _rate(r["mb_per_s"]), f"{r['files']:,}", f"{r['bytes'] / 1e6:,.1f}", f"{r['seconds']:.2f}",
            _pct(r["storage_fraction"]),
        )
    return table


def footer_lines(probe: dict[str, Any]) -> list[str]:
    lines = []
    by = {(r["test"], r["readers"], r["cache"]): r for r in probe["rows"]}
    cold1 = by.get(("random", 1, "cold"))
    small_files = probe["files"]["p50_bytes"] <= 4_000_000  # the read-rate scale is for sample files
    if cold1 and cold1["cache_achieved"] == "cold" and small_files:
        lines.append(
            f"cold random whole-file reads by one reader: {_rate(cold1['files_per_s'])} files/s "
            f"({_rate(cold1['mb_per_s'])} MB/s). For scale: a hard disk manages ~100-200 random reads/s, a "
            "SATA SSD thousands, NVMe tens of thousands; compare with the samples/s your step needs."
        )
    colds = [r for r in probe["rows"] if r["test"] == "random" and r["cache"] == "cold" and r["cache_achieved"] == "cold"]
    if len(colds) > 1:
        lo, hi = colds[0], max(colds, key=lambda r: r["files_per_s"])
        if lo["files_per_s"] > 0 and hi is not lo:
            lines.append(
                f"concurrency: {hi['readers']} readers read {hi['files_per_s'] / lo['files_per_s']:.1f}x the files/s of "
                f"{lo['readers']} (num_workers fetch in parallel like these readers)."
            )
    for note in probe.get("notes", []):
        lines.append(f"note: {note}")
    return lines


def render_probe(probe: dict[str, Any], console: Console) -> None:
    """The probe as header lines, a table and footer lines on `console`."""
    for line in header_lines(probe):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(build_table(probe))
    for line in footer_lines(probe):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
