"""What every command shares: the consoles, one place that turns errors into one line and an exit
code, format checks, the progress display, and SIGTERM handling.

Exit codes: 0 ok, 1 regression (compare/check) or a rank of a distributed sweep that died first,
2 usage / config / data / results-format error or nothing measured, 130 interrupted (Ctrl-C or
SIGTERM; finished configs are saved).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from loaderbench.errors import LoaderbenchError, UsageError

SWEEP_FORMATS = ("table", "json", "csv", "markdown")


class _State:
    """Process-wide facts a command needs: the command line `main()` was given (a distributed
    sweep relaunches it) and whether a SIGTERM (not Ctrl-C) stopped the sweep."""

    argv: list[str] | None = None
    sigterm_seen = False


STATE = _State()


def stdout(width: int | None = None) -> Console:
    """The stdout console. Piped or redirected output takes its width from COLUMNS when set,
    else 200 (rich would otherwise assume 80 and fold whole table rows)."""
    if width is None and not sys.stdout.isatty():
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and int(columns) > 0 else 200
    return Console(width=width, soft_wrap=False, emoji=False)


def stderr() -> Console:
    """The stderr console (no emoji codes: a path like /data/a:fire:b prints as written)."""
    return Console(stderr=True, emoji=False)


def say(message: str) -> None:
    """One line on stderr, printed as written."""
    stderr().print(message, highlight=False, markup=False, soft_wrap=True)


def fail(exc: LoaderbenchError) -> None:
    """Print `exc` as one line and exit with its code (typer.Exit)."""
    say(f"loaderbench: error: {exc}")
    raise typer.Exit(exc.exit_code)


def command_started() -> float:
    """When this command started, on the time.monotonic() clock (seconds): `--time-budget`
    counts the user's wait from there, the interpreter's start and imports included.

    Not the process's creation: a shell runs the last command of `bash -c "pip install ... &&
    loaderbench sweep"` by exec in its own process, created before pip ran (58 s of a 120-s
    budget went to pip). The interpreter's start is taken as the instant loaderbench was first
    imported less the CPU seconds the process had used by then (starting the interpreter is
    CPU work; a shell waiting for its other commands uses almost none), never before the
    process's creation."""
    import time

    import psutil

    import loaderbench

    imported_at, cpu_s = loaderbench.IMPORTED_AT
    started = imported_at - cpu_s
    try:
        age = time.time() - psutil.Process().create_time()
    except (psutil.Error, OSError):
        return started
    return max(started, time.monotonic() - max(0.0, age))


def guard(fn: Callable[[], Any]) -> Any:
    """Run a command body, turning LoaderbenchError into its one-line message and exit code. The
    SIGTERM handler is as it was before the body once it returns or raises: a command run in a
    process that goes on (the CLI called from Python, the test suite) leaves SIGTERM its own
    (`sigterm_as_interrupt` sets it for the command's time only)."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        return fn()
    except LoaderbenchError as exc:
        fail(exc)
    finally:
        if main and before is not None:
            signal.signal(signal.SIGTERM, before)


def check_format(value: str, allowed: Sequence[str], flag: str = "--format") -> str:
    """`value` when it is one of `allowed`, else UsageError naming the flag and the choices."""
    if value not in allowed:
        raise UsageError(f"{flag}: expected one of {', '.join(allowed)}, got {value!r}")
    return value


WHAT_IF_HELP = ("One change to predict; give the flag again for more, and they combine (e.g. --what-if cpus=8 "
                "--what-if decode=torchvision). cpus=K: K usable CPUs; disk=MBPS[,IOPS]: the dataset's files on a "
                "device of MBPS MB/s (and IOPS reads/s; needs rows served from a cache, --cache both); "
                "stage=NAME:F: that stage of the sweep's stage profile F times faster (inf removes it); "
                "decode=torchvision|nvjpeg: the JPEG decode with torchvision.io on the CPU, or on the GPU. From the "
                "pipeline model fitted on the measured configs (labelled a prediction). ranks=N: the recommended "
                "config's stall and samples/s at N data-parallel ranks, from its measured per-rank waits.")
WHAT_IF_METAVAR = "cpus=K|disk=MBPS[,IOPS]|stage=NAME:F|decode=DECODER|ranks=N"


def parse_what_if(specs: Sequence[str] | str | None) -> list[Any]:
    """`--what-if` values (the flag may be given more than once, one change each) ->
    conclusions.WhatIf questions ([] when none was given). UsageError naming the flag for a bad
    value, or for a change given twice (analysis.predict.split_what_if combines the others)."""
    if specs is None:
        return []
    from loaderbench.analysis.predict import parse_what_if as parse
    from loaderbench.analysis.predict import split_what_if

    out = []
    for spec in [specs] if isinstance(specs, str) else specs:
        try:
            out.append(parse(spec))
        except ValueError as exc:
            raise UsageError(f"--what-if: {exc}") from None
    try:
        split_what_if(out)
    except ValueError as exc:
        raise UsageError(f"--what-if: {exc}") from None
    return out


def apply_what_if(rs: Any, questions: Sequence[Any]) -> None:
    """Answer the what-if questions (conclusions.WhatIf, from `parse_what_if`; none asked: [])
    for the recommended config: the analysis is run again with them, so `Analysis.what_if` /
    `Analysis.what_if_ranks` and every output format carry the answers."""
    if not questions:
        return
    from loaderbench.analysis import analyze

    analyze(rs, what_if=questions)


def check_stage_names(rs: Any, what_if: Sequence[str] | None, result: Path) -> None:
    """Raise UsageError (exit 2, one line) where a `--what-if stage=NAME:F` of `what_if` (as
    typed) names no stage of the stage profile of `rs` (analysed with the questions), or names
    pin or H2D (the main process's copy); `result` names the result file in the message."""
    from loaderbench.conclusions import WhyNoPrediction

    answer = rs.analysis.what_if if rs.analysis is not None else None
    if answer is None or answer.why not in (WhyNoPrediction.STAGE_UNKNOWN, WhyNoPrediction.STAGE_NOT_BUILT):
        return
    asked = {c.name for c in answer.question.stages} - set(answer.stage_names)
    typed = ", ".join(q for q in what_if or [] if q.startswith("stage=") and
                      q[len("stage="):].rsplit(":", 1)[0] in asked)
    # Asked by the config's own what_if (none on the command line): named as that key.
    typed = f"--what-if {typed or 'stage=...'}" if what_if else "what_if (the config's) stage=" + ", ".join(sorted(asked))
    if answer.why is WhyNoPrediction.STAGE_NOT_BUILT:
        raise UsageError(f"{typed}: pin and H2D are the main process's copy, not building a sample: "
                         "--pin-memory and --prefetch act on them; name a stage that builds a sample "
                         f"({', '.join(answer.stage_names)})")
    raise UsageError(f"{typed}: the stage profile of {result} has no stage of that name; "
                     f"name one of its stages ({', '.join(answer.stage_names)})")


VERBOSE_HELP = ("Under the table, also the search and its drift check, the headroom, the loader ceiling and "
                "every note in full (--format json has all of it).")


def render_result(rs: Any, fmt: str, console: Console, *, wide: bool = False, verbose: bool = False) -> None:
    """A sweep's result to stdout in `fmt` (table, json, csv, markdown); `verbose`: everything
    under the table, not the short block."""
    from loaderbench.render import sweep as render

    if fmt == "table":
        render.render_table(rs, console, wide=wide, verbose=verbose)
    elif fmt == "json":
        sys.stdout.write(render.to_json(rs) + "\n")
    elif fmt == "csv":
        sys.stdout.write(render.to_csv(rs))
    else:
        sys.stdout.write(render.to_markdown(rs, verbose=verbose))


def sigterm_as_interrupt() -> None:
    """SIGTERM stops a sweep like Ctrl-C: workers reaped, finished configs saved (exit 130). For
    the command's time: `guard` puts the handler before it back."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        import os

        owner = os.getpid()

        def handler(signum: int, frame: Any) -> None:
            if os.getpid() != owner:
                # A forked child (a worker, a measuring process) inherited the handler: SIGTERM
                # ends it as it would without loaderbench, with no traceback.
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            STATE.sigterm_seen = True
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, handler)


class ProgressObserver:
    """Rich progress bar and warnings on stderr (the core never prints): trials done, time
    elapsed and rich's estimate of the time left."""

    def __init__(self, enabled: bool) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.err = stderr()
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=self.err,
            transient=True,
            disable=not enabled,
        )
        self.task: Any = None
        self.label = ""

    def __enter__(self) -> ProgressObserver:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def phase(self, text: str) -> None:
        """Work before the first trial (building the dataset, the compute ceiling): a line with
        a spinner, so a long wait is never silent."""
        if self.task is None:
            self.task = self.progress.add_task(text, total=None)
        else:
            self.progress.update(self.task, description=text)

    def sweep_started(self, total_trials: int) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task("sweep", total=total_trials)

    def trial_started(self, index: int, settings: Any, repeat: int) -> None:
        self.label = settings.key() + (f" (repeat {repeat + 1})" if repeat else "")
        self.progress.update(self.task, description=self.label)

    def batch(self, index: int) -> None:
        if self.enabled:
            self.progress.update(self.task, description=f"{self.label} batch {index}")

    def trial_finished(self, result: Any, outcome: Any) -> None:
        self.progress.advance(self.task)
        if outcome.status != "ok":
            self.warning(f"{result.settings.key()}: {outcome.status}: {outcome.error}")

    def warning(self, message: str) -> None:
        self.err.print(f"loaderbench: warning: {message}", highlight=False, markup=False, soft_wrap=True)
