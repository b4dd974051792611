"""`loaderbench storage PATH`: the storage probe as a command (parse, call `probe_storage`, render).

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

from loaderbench.cli import common
from loaderbench.errors import DataError, UsageError
from loaderbench.render.storage import render_probe

STORAGE_FORMATS = ("table", "json")
STORAGE_SCHEMA_VERSION = 1  # the storage probe's document; it changes only when that format does


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

    from loaderbench.machine.env import cpu_model, usable_cpus

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
    from loaderbench._version import __version__
    return {
        "schema_version": STORAGE_SCHEMA_VERSION,
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


def default_output_path(now: _dt.datetime) -> Path:
    """results/storage-<UTC time>.json."""
    from loaderbench.results import timestamped_path

    return timestamped_path("storage", now)


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
    from loaderbench.results import check_writable
    from loaderbench.storage import probe_storage

    def body() -> None:
        common.check_format(format, STORAGE_FORMATS)
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
        common.stderr().print(
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
            render_probe(probe, common.stdout())
        common.stderr().print(f"results saved to {out}", highlight=False, markup=False)

    common.guard(body)
