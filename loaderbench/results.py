"""Result files: versioned JSON, written atomically after every config, loaded with checks.

No torch or pynvml here, so `show` starts fast on CPU-only runners.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from loaderbench.errors import OutputError, ResultsFormatError
from loaderbench.model import ResultSet
from loaderbench.schema import migrate


def save_results(result_set: ResultSet, path: Path) -> None:
    """Write `result_set` to `path` atomically (see `write_json_atomic`), so a crash or a full
    disk never leaves a half-written or corrupted previous file. Raises OutputError."""
    write_json_atomic(result_set.to_dict(), path)


def write_json_atomic(data: dict[str, Any], path: Path) -> None:
    """Write `data` as JSON to `path` through a temp file in the same folder, fsync, rename.

    Raises OutputError when the folder cannot be written; the previous file is untouched then.
    """
    path = Path(path)
    text = json.dumps(data, indent=1, allow_nan=False, default=_json_default)
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise OutputError(f"--output {path}: {blocker} is a file, not a folder; choose another --output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a result file is for sharing
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise OutputError(
            f"cannot write results to {path}: {exc.strerror or exc}; choose another --output"
        ) from None


def check_writable(path: Path) -> None:
    """Fail before the sweep starts if `path`'s folder cannot take a file (OutputError)."""
    path = Path(path)
    if path.exists() and path.is_dir():
        raise OutputError(f"--output {path} is a directory: give a file name such as {path}/run.json")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise OutputError(f"--output {path}: {blocker} is a file, not a folder; choose another --output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise OutputError(
            f"cannot write results to {path}: {exc.strerror or exc}; choose another --output"
        ) from None


def timestamped_path(name: str, now: Any, *, folder: str = "results") -> Path:
    """`results/<name>-<UTC time>.json`, the name made safe for a file name (`sweep` when empty):
    where a command writes its result unless told (`--output`)."""
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name or "sweep").strip("._") or "sweep"
    return Path(folder) / f"{safe}-{now.strftime('%Y%m%dT%H%M%SZ')}.json"


def check_result_path(path: Path) -> None:
    """A sweep's `--output`: a *.json file name (the result file is JSON whatever `--format`
    prints: UsageError otherwise) in a folder that can take it (OutputError)."""
    from loaderbench.errors import UsageError

    path = Path(path)
    if path.suffix.lower() != ".json" and not path.is_dir():
        raise UsageError(
            f"--output {path}: the result file is JSON, whatever --format prints; name it *.json "
            f"(for CSV on stdout: --format csv > {path.with_suffix('.csv').name})"
        )
    check_writable(path)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def read_results(path: Path | str) -> ResultSet:
    """Read a result file written by any supported loaderbench version.

    Raises ResultsFormatError (one line, exit code 2) when the file is missing, not JSON, not a
    loaderbench result, or of a schema version this loaderbench cannot read.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ResultsFormatError(f"{path}: no such result file") from None
    except UnicodeDecodeError:
        raise ResultsFormatError(f"{path}: not a text file; pass a result JSON written by `loaderbench sweep`") from None
    except OSError as exc:
        raise ResultsFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsFormatError(
            f"{path}: not JSON (line {exc.lineno}: {exc.msg}); pass a file written by "
            "`loaderbench sweep --output`"
        ) from None
    if isinstance(data, dict) and data.get("kind") == "storage":
        raise ResultsFormatError(
            f"{path}: a `loaderbench storage` probe, not a sweep result; pass a file written by "
            "`loaderbench sweep`"
        )
    data = migrate(data, path)
    try:
        return ResultSet.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsFormatError(f"{path}: malformed result file ({type(exc).__name__}: {exc})") from None
