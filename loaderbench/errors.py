"""loaderbench's errors: each carries its exit code and a one-line message that names the fix.

The CLI turns any `LoaderbenchError` into that line on stderr and that exit code; nothing else in
the package calls `sys.exit`. Exit codes: 0 ok, 1 regression, 2 usage/config/data/results-format
error, 130 interrupted.
"""

from __future__ import annotations


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
