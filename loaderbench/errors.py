"""loaderbench's errors: each carries its exit code and a one-line message that names the fix.

The CLI turns any `LoaderbenchError` into that line on stderr and that exit code; nothing else in
the package calls `sys.exit`. Exit codes: 0 ok, 1 regression, 2 usage/config/data/results-format
error, 130 interrupted.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sysconfig
from collections.abc import Sequence
from pathlib import Path


class LoaderbenchError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code = 2


class UsageError(LoaderbenchError):
    """A flag or argument has a bad value."""


class ConfigError(LoaderbenchError):
    """A TOML config file is unreadable or holds an unknown key, wrong type or bad value."""


class DataError(LoaderbenchError):
    """The dataset cannot be built: missing/empty folder, failing import, factory error."""


class StepError(UsageError):
    """The user's train step (`--compute step:MODULE:FACTORY`) cannot be made, or fails on its
    first batch."""


class ResultsFormatError(LoaderbenchError):
    """A result file is not JSON, not loaderbench's, or of an unsupported schema version."""


class OutputError(LoaderbenchError):
    """The result file cannot be written (unwritable or full location)."""


class NothingMeasured(LoaderbenchError):
    """A sweep ran but no config finished (all failed, hung or were skipped): exit 2 after the
    table, so scripts and CI notice."""


class RankLost(LoaderbenchError):
    """A distributed sweep lost a node or its leader: what was measured is saved (exit 1)."""

    exit_code = 1


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


def _library_dirs() -> list[str]:
    """Folders whose frames are not the user's: loaderbench's, torch's and Python's own library."""
    dirs = [str(Path(__file__).resolve().parent)]
    spec = importlib.util.find_spec("torch")  # found, not imported
    if spec is not None and spec.origin:
        dirs.append(str(Path(spec.origin).resolve().parent))
    paths = sysconfig.get_paths()
    dirs += [os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if paths.get(k)]
    return [d.rstrip(os.sep) + os.sep for d in dirs]


def raised_at(detail: str, library: Sequence[str] | None = None) -> tuple[str, int, str, str] | None:
    r"""Where a failed row's traceback (`ConfigResult.detail`, as Python prints it) was raised in
    the user's code: (path, line, function, the exception's own last line) of its last frame
    outside `library` (folders; default loaderbench's, torch's and Python's own library), None
    where no frame is the user's (a hang, a timeout, a failure inside torch).

    >>> tb = ('Traceback (most recent call last):\n  File "/site/loaderbench/measure/loop.py", line 9, in run\n'
    ...       '  File "/home/u/myds.py", line 70, in __getitem__\n    raise ValueError("sample 850 is broken")\n'
    ...       'ValueError: sample 850 is broken\n')
    >>> raised_at(tb, ["/site/loaderbench/"])
    ('/home/u/myds.py', 70, '__getitem__', 'ValueError: sample 850 is broken')
    """
    skip = _library_dirs() if library is None else list(library)
    user = None
    for line in detail.splitlines():
        m = _FRAME.match(line)
        if m and not any(os.path.realpath(m["path"]).startswith(d) or m["path"].startswith(d) for d in skip):
            user = (m["path"], int(m["line"]), m["func"])
    lines = [x.strip() for x in detail.splitlines() if x.strip()]
    if user is None or not lines:
        return None
    return (*user, lines[-1])


def raised_alike(details: Sequence[str]) -> tuple[str, int, str, str] | None:
    """`raised_at` of the first of `details` where every one was raised at the same place in the
    user's code (path and line), else None: every config failed on one line of the user's code
    (a dataset that raises, whatever the workers), which one line can name with its fix."""
    sites = [raised_at(d) for d in details]
    if not sites or any(s is None for s in sites):
        return None
    first = sites[0]
    assert first is not None
    return first if all(s is not None and s[:2] == first[:2] for s in sites) else None


def nothing_measured_line(details: Sequence[str], first: tuple[str, str] | None, out: object) -> str:
    """The one line of a sweep whose every config failed: where every row raised on one line of
    the user's code (`raised_alike`), that line, the exception and the fix; else the first row
    (`first`: its name and error) and where the details are (`out`, the result file)."""
    site = raised_alike(details)
    if site is not None:
        path, line, func, exc = site
        exc = exc if len(exc) <= 200 else exc[:197] + "..."
        return (f"no config was measured successfully: every row raised {exc}, in {func} at {path} line {line}: "
                f"fix it there (each row's traceback is in {out})")
    return ("no config was measured successfully: every row failed, hung or was skipped "
            + (f"(the first, {first[0]}: {first[1]}; " if first else "(")
            + f"each row says why; details in {out})")
