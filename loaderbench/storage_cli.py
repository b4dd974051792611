"""`loaderbench storage PATH`: the storage probe as a command (parse, call `probe_storage`, render).

The lead registers it in cli.py with `app.command("storage")(storage_command)`. It shares cli.py's
error handling (`_guard`: a LoaderbenchError becomes one line on stderr and its exit code), imported
inside the command so the two modules can import each other in either order.

The result is written in loaderbench's JSON result format: `schema_version`, `tool`,
`tool_version`, `created_utc`, `kind: "storage"`, an `environment` subset and `probe`
(`StorageProbe.to_dict()`).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from loaderbench.errors import DataError, UsageError

STORAGE_FORMATS = ("table", "json")


def parse_readers(text: str) -> tuple[int, ...]:
    """"1,4,16" -> (1, 4, 16); UsageError for anything but positive integers (at most 256)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            n = int(part)
        except ValueError:
            raise UsageError(f"--readers: {part!r} is not an integer; give a list such as 1,4,16") from None
        if not 1 <= n <= 256:
            raise UsageError(f"--readers: {n} is out of range; give reader counts from 1 to 256")
        out.append(n)
    return tuple(dict.fromkeys(out))


def _positive(text: str, flag: str, kind: type) -> Any:
    """A finite number above 0 (`kind` int or float), else UsageError naming the flag."""
    try:
        value = kind(text)
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{flag}: give a finite number of seconds or files, got {text}")
    if value <= 0:
        raise UsageError(f"{flag}: must be greater than 0, got {text}")
    return value


def environment_subset() -> dict[str, Any]:
    """The machine facts a storage probe depends on (no torch import: fast)."""
    import psutil

    from loaderbench.env import cpu_model, usable_cpus

    return {
        "host": platform.node(),
        "os": platform.system(),
        "kernel": platform.release(),
        "cpu_model": cpu_model(),
        "usable_cpus": usable_cpus(),
        "memory_total_bytes": int(psutil.virtual_memory().total),
        "python_version": platform.python_version(),
        "is_root": hasattr(os, "geteuid") and os.geteuid() == 0,
    }


def storage_document(probe: dict[str, Any], *, environment: dict[str, Any], now: _dt.datetime) -> dict[str, Any]:
    """The JSON written by `loaderbench storage` (kind "storage")."""
    from loaderbench import __version__
    from loaderbench.model import SCHEMA_VERSION

    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "loaderbench",
        "tool_version": __version__,
        "kind": "storage",
        "created_utc": now.isoformat(timespec="seconds"),
        "environment": environment,
        "probe": probe,
    }


def save_document(doc: dict[str, Any], path: Path) -> None:
    """Write `doc` to `path` atomically; OutputError when the folder cannot be written."""
    from loaderbench.results import write_json_atomic

    write_json_atomic(doc, path)


# --------------------------------------------------------------------------------------------
# Rendering (units and words live here; render.py may take this over)
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


def default_output_path(now: _dt.datetime) -> Path:
    return Path("results") / f"storage-{now.strftime('%Y%m%dT%H%M%SZ')}.json"


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def storage_command(
    path: Annotated[Path, typer.Argument(help="A dataset folder (or one file) to probe.")],
    readers: Annotated[str, typer.Option(help="Concurrent readers for random whole-file reads (comma list).")] = "1,4,16",
    output: Annotated[Path | None, typer.Option(help="Result JSON (default results/storage-<time>.json).")] = None,
    format: Annotated[str, typer.Option("--format", help="What goes to stdout: table | json.")] = "table",
    max_seconds: Annotated[str, typer.Option(help="Time budget of all read tests together, seconds.")] = "30",
    max_files: Annotated[str, typer.Option(help="Files sampled for the read tests.")] = "5000",
    cache: Annotated[str, typer.Option(help="cold, warm or cold,warm.")] = "cold,warm",
    drop_caches: Annotated[bool, typer.Option("--drop-caches", help="Root only: drop all caches instead of per-file eviction.")] = False,
) -> None:
    """Probe storage without a model: file sizes, filesystem, block device (HDD or not),
    sequential MB/s and random whole-file reads/s at 1, 4, 16 readers, cold and warm."""
    from loaderbench import cli as _cli
    from loaderbench.results import check_writable
    from loaderbench.storage import probe_storage

    def body() -> None:
        if format not in STORAGE_FORMATS:
            raise UsageError(f"--format: expected one of {', '.join(STORAGE_FORMATS)}, got {format!r}")
        reader_counts = parse_readers(readers)
        budget = _positive(max_seconds, "--max-seconds", float)
        n_files = _positive(max_files, "--max-files", int)
        states = tuple(s.strip() for s in cache.split(",") if s.strip())
        if not states or any(s not in ("cold", "warm") for s in states):
            raise UsageError(f"--cache: expected cold, warm or cold,warm, got {cache!r}")
        if not path.exists():
            raise DataError(f"{path} does not exist; give the dataset folder to probe")
        now = _dt.datetime.now(_dt.timezone.utc)
        out = output or default_output_path(now)
        check_writable(out)
        _cli._stderr().print(
            f"probing {path} (read tests take up to {budget:g} s)...", highlight=False, markup=False
        )
        probe = probe_storage(
            path, readers=reader_counts, cache=states, max_files=n_files, max_seconds=budget,
            drop_caches=drop_caches,
        ).to_dict()
        doc = storage_document(probe, environment=environment_subset(), now=now)
        save_document(doc, out)
        if format == "json":
            sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        else:
            render_probe(probe, _cli._stdout())
        _cli._stderr().print(f"results saved to {out}", highlight=False, markup=False)

    _cli._guard(body)
