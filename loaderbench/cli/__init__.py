"""The typer app: every command parses its flags, calls one core function and renders the result;
errors become one line and an exit code (cli/common.py). One module per command group:
`sweep`, `profile`, `results` (show, plot), `compare` (compare, check), `storage`, `data` (make-data), `env`.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from loaderbench.cli import common
from loaderbench.cli.compare import check_command, compare_command
from loaderbench.cli.data import make_data_command
from loaderbench.cli.env import env_command
from loaderbench.cli.profile import profile_command
from loaderbench.cli.results import plot_command, show_command
from loaderbench.cli.storage import storage_command
from loaderbench.cli.sweep import sweep_command

app = typer.Typer(
    name="loaderbench",
    help="Measure why the GPU waits for data, and which DataLoader settings remove the wait.",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.command("sweep")(sweep_command)
app.command("profile")(profile_command)
app.command("show")(show_command)
app.command("plot")(plot_command)
app.command("compare")(compare_command)
app.command("check")(check_command)
app.command("storage")(storage_command)
app.command("make-data")(make_data_command)
app.command("env")(env_command)


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    """Measure why the GPU waits for data, and which DataLoader settings remove the wait."""
    if version:
        from loaderbench._version import __version__

        sys.stdout.write(f"loaderbench {__version__}\n")
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        sys.stdout.write(ctx.get_help() + "\n")
        raise typer.Exit(0)


def main() -> None:
    """Console-script entry point: click's own usage errors (an unknown option or command, a
    missing argument) become one line and exit code 2, like loaderbench's."""
    common.STATE.argv = list(sys.argv[1:])
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - typer vendors click: match its classes by name
        names = {c.__name__ for c in type(exc).__mro__}
        if "UsageError" in names:
            ctx = getattr(exc, "ctx", None)
            cmd = ctx.command_path if ctx is not None else "loaderbench"
            message = exc.format_message()  # type: ignore[attr-defined]
            if message.startswith("No such option: --config") and not message.startswith("No such option: --config-"):
                message += "; the config file is the first argument: `loaderbench sweep CONFIG.toml`"
            common.stderr().print(
                f"loaderbench: error: {message} (see `{cmd} --help`)",
                highlight=False, markup=False, soft_wrap=True,
            )
            sys.exit(2)
        if "Abort" in names:
            sys.exit(130)
        raise
    sys.exit(code if isinstance(code, int) else 0)
