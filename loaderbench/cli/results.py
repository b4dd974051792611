"""`loaderbench show` and `loaderbench plot`: a saved result rendered again (every statistic and
conclusion re-derived from its raw per-batch samples)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from loaderbench.cli import common
from loaderbench.errors import UsageError


def show_command(
    result: Annotated[Path, typer.Argument(help="A result JSON written by `loaderbench sweep`.")],
    format: Annotated[str, typer.Option("--format", help="table | json | csv | markdown.")] = "table",
    wide: Annotated[bool, typer.Option("--wide", help="Every table column, whatever the terminal width.")] = False,
    what_if: Annotated[list[str] | None, typer.Option("--what-if", metavar=common.WHAT_IF_METAVAR, help=common.WHAT_IF_HELP)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", help=common.VERBOSE_HELP)] = False,
) -> None:
    """Render a saved result again."""
    from loaderbench.analysis import analyze
    from loaderbench.results import read_results

    def body() -> None:
        fmt = common.check_format(format, common.SWEEP_FORMATS)
        question = common.parse_what_if(what_if)
        rs = read_results(result)
        analyze(rs, what_if=question)  # statistics are re-derived from the raw per-batch samples
        common.check_stage_names(rs, what_if, result)
        common.render_result(rs, fmt, common.stdout(), wide=wide, verbose=verbose)

    common.guard(body)


def plot_command(
    result: Annotated[Path, typer.Argument(help="A result JSON written by `loaderbench sweep`.")],
    output: Annotated[Path | None, typer.Option(help="PNG to write (default: RESULT with .png).")] = None,
) -> None:
    """Plot throughput and stall fraction against num_workers, ceilings and the knee marked."""
    from loaderbench.analysis import analyze
    from loaderbench.results import read_results

    def body() -> None:
        from loaderbench.errors import OutputError
        from loaderbench.render.plot import plot_results

        rs = read_results(result)
        analyze(rs)
        target = output or result.with_suffix(".png")
        if target.suffix.lower() != ".png":
            raise UsageError(f"--output {target}: the plot is a PNG; give a file name ending in .png")
        try:
            png = plot_results(rs, target)
        except OSError as exc:
            raise OutputError(f"cannot write the plot to {target}: {exc.strerror or exc}") from None
        common.stderr().print(f"plot saved to {png}", highlight=False, markup=False)

    common.guard(body)


