"""`loaderbench sweep`: parse flags (over a TOML config), run the sweep (or, under a launcher, a
rank of a distributed one), render the result.

The command's flags are derived from config.OPTIONS (one declaration per knob): each option's
flag, metavar and help, and the value parsed by its parser. The flags that are not sweep
settings (the output file, the format, progress, plot, the distributed launcher) are declared
here."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from loaderbench.cli import common
from loaderbench.orchestration.config import OPTIONS, Option

_FIXED: list[tuple[str, Any, Any]] = [
    ("config", Annotated[Path | None, typer.Argument(help="TOML config (see configs/); flags override it.")], None),
    ("output", Annotated[Path | None, typer.Option(help="Result JSON (default results/<label>-<time>.json).")], None),
    ("format", Annotated[str, typer.Option("--format", help="What goes to stdout: table | json | csv | markdown.")],
     "table"),
    ("no_progress", Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")], False),
    ("wide", Annotated[bool, typer.Option("--wide", help="Every table column, whatever the terminal width.")], False),
    ("verbose", Annotated[bool, typer.Option("--verbose", help=common.VERBOSE_HELP)], False),
    ("plot", Annotated[bool, typer.Option("--plot", help="Also write a PNG plot beside the result file.")], False),
    ("what_if", Annotated[list[str] | None, typer.Option("--what-if", metavar=common.WHAT_IF_METAVAR, help=common.WHAT_IF_HELP)], None),
    ("nproc_per_node", Annotated[str | None, typer.Option(
        "--nproc-per-node", metavar="N",
        help="Distributed sweep: run every config on N ranks of this node at once, one GPU and one DataLoader "
             "each (launches what `torchrun --nproc-per-node N -m loaderbench sweep ...` runs).")], None),
    ("nnodes", Annotated[str | None, typer.Option(
        "--nnodes", metavar="N",
        help="Distributed sweep on N nodes: run the same command on every node, with its own --node-rank and the "
             "same --rdzv-endpoint (torch's c10d rendezvous; under Slurm SLURM_NNODES gives N).")], None),
    ("node_rank", Annotated[str | None, typer.Option(
        "--node-rank", metavar="R",
        help="This node's rank, 0 to N-1; node 0 hosts the rendezvous and writes the result (under Slurm "
             "SLURM_NODEID gives R).")], None),
    ("rdzv_endpoint", Annotated[str | None, typer.Option(
        "--rdzv-endpoint", metavar="HOST:PORT", help="Node 0's address and a free port on it, the same on every node.")],
     None),
    ("rdzv_timeout", Annotated[str | None, typer.Option(
        "--rdzv-timeout", metavar="S", help="Seconds to wait for every node to join (default 600).")], None),
]


def _param_name(opt: Option) -> str:
    return opt.flag_name[2:].replace("-", "_")


def _option_param(opt: Option) -> tuple[str, Any, Any]:
    if opt.toggle:
        return _param_name(opt), Annotated[bool, typer.Option(opt.flag_name, help=opt.help)], False
    list_help = " A comma list makes the grid." if opt.section == "grid" else ""
    if opt.many:
        return (
            _param_name(opt),
            Annotated[list[str] | None, typer.Option(opt.flag_name, metavar=opt.metavar, help=opt.help)],
            None,
        )
    return (
        _param_name(opt),
        Annotated[str | None, typer.Option(opt.flag_name, metavar=opt.metavar, help=opt.help + list_help)],
        None,
    )


_SWEEP_OPTIONS = [o for o in OPTIONS if o.cli]
_PARAMS = _FIXED[:1] + [_option_param(o) for o in _SWEEP_OPTIONS] + _FIXED[1:]


def sweep_command(**kwargs: Any) -> None:
    """Sweep num_workers x pin_memory x prefetch x prefetch_factor x persistent_workers and say
    where the loader stops being the bottleneck."""
    from loaderbench.measure.introspect import quiet_worker_count_warning
    from loaderbench.orchestration import config as cfgmod
    from loaderbench.orchestration.execute import SweepInterruptedAt, execute_sweep
    from loaderbench.results import check_result_path

    quiet_worker_count_warning()  # the stage profile of the pick builds its loader in this process

    config: Path | None = kwargs["config"]
    output: Path | None = kwargs["output"]
    format: str = kwargs["format"]
    no_progress: bool = kwargs["no_progress"]
    wide: bool = kwargs["wide"]
    verbose: bool = kwargs["verbose"]
    plot: bool = kwargs["plot"]
    nproc_per_node: str | None = kwargs["nproc_per_node"]
    node_flags = (kwargs["nnodes"], kwargs["node_rank"], kwargs["rdzv_endpoint"], kwargs["rdzv_timeout"])
    what_if: list[str] | None = kwargs["what_if"]
    flags = []
    for opt in _SWEEP_OPTIONS:
        value = kwargs[_param_name(opt)]
        if opt.toggle:
            value = (not opt.negates) if value else None
        flags.append((opt.section, opt.key, value, opt.flag_name))

    def body() -> None:
        from loaderbench.orchestration import distributed as dist
        from loaderbench.orchestration.nodes import node_layout

        info = dist.RankInfo.from_environ()
        fmt = common.check_format(format, common.SWEEP_FORMATS)
        question = common.parse_what_if(what_if)
        overrides: dict[str, dict[str, Any]] = {}
        for section, key, value, flag in flags:
            if value is not None:
                overrides.setdefault(section, {})[key] = cfgmod.parse_flag(section, key, value, flag)
        cfg = cfgmod.build_config(config, overrides)
        if info is not None and (nproc_per_node is not None or any(f is not None for f in node_flags)):
            dist.launch_ranks(nproc_per_node, info, cfg.measure.device, None)  # refused: under a launcher
        if info is not None and not info.leader:
            follow_as_rank(cfg, info)
            return
        layout = node_layout(*node_flags) if info is None else None
        if nproc_per_node is not None or layout is not None:
            if output is not None:
                check_result_path(output)
            code, message = dist.launch_ranks(nproc_per_node, info, cfg.measure.device, common.STATE.argv, layout)
            if message:
                common.say(f"loaderbench: error: {message}")
            raise typer.Exit(code)
        common.sigterm_as_interrupt()
        show_progress = not no_progress and sys.stderr.isatty()
        with common.ProgressObserver(show_progress) as obs:
            try:
                if info is None:
                    rs, out = execute_sweep(cfg, output=output, observer=obs, started_at=common.command_started())
                else:
                    rs, out = dist.execute_as_leader(cfg, output, obs, info)
            except SweepInterruptedAt as exc:
                obs.progress.stop()
                how = "interrupted"
                if common.STATE.sigterm_seen:
                    how = "stopped by the launcher (SIGTERM)" if info is not None else "stopped (SIGTERM)"
                report_interrupted(exc.output, fmt, how)
                raise typer.Exit(130) from None
        common.apply_what_if(rs, question)  # none given: the config's own (TOML what_if) are answered
        common.render_result(rs, fmt, common.stdout(), wide=wide, verbose=verbose)
        common.stderr().print(f"results saved to {out}", highlight=False, markup=False)
        if not any(r.status == "ok" for r in rs.results):
            from loaderbench.errors import NothingMeasured, nothing_measured_line
            from loaderbench.render.footer import namer

            name = namer(rs)  # as the table names it, not its key
            first = next(((name(r.settings), r.error) for r in rs.results if r.error), None)
            raise NothingMeasured(nothing_measured_line([r.detail or "" for r in rs.results], first, out))
        if plot:
            from loaderbench.render.plot import plot_results

            png = plot_results(rs, out.with_suffix(".png"))
            common.stderr().print(f"plot saved to {png}", highlight=False, markup=False)
        # A stage the profile does not have is known only once it was taken: the results are
        # saved and shown, then the question is refused as bad input.
        common.check_stage_names(rs, what_if, out)
        if rs.sweep.lost is not None:
            from loaderbench.errors import RankLost
            from loaderbench.render.nodes import lost_line

            raise RankLost(f"{lost_line(rs.sweep.lost)}; the configs after it were not run (what was measured is "
                           f"in {out})")

    common.guard(body)


def follow_as_rank(cfg: Any, info: Any) -> None:
    """A follower rank of a distributed sweep: runs what rank 0 posts, as its own command line
    names it, and prints nothing but a refusal (its node's first rank alone, so one node says
    it once). SIGTERM (the launcher ending the job) must end its measuring process too, which
    runs in its own session: run_isolated kills that tree on KeyboardInterrupt."""
    from loaderbench.errors import LoaderbenchError
    from loaderbench.orchestration import distributed as dist

    common.sigterm_as_interrupt()
    speak = info.local_rank == 0
    try:
        dist.run_follower(cfg, info, say=(lambda why: common.say(f"loaderbench: {info.name()}: {why}")) if speak
                          else (lambda _: None))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except LoaderbenchError as exc:
        if speak:
            common.fail(exc)
        raise typer.Exit(exc.exit_code) from None
    except RuntimeError as exc:  # c10d's store errors (DistStoreError, ...) are RuntimeErrors
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        common.say(f"loaderbench: error: {info.name()} lost the job's store at "
                   f"{info.master_addr}:{info.master_port} (did rank 0 end?): {first}")
        raise typer.Exit(1) from None



sweep_command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
     for name, annotation, default in _PARAMS]
)
sweep_command.__annotations__ = {name: annotation for name, annotation, _ in _PARAMS} | {"return": None}


def report_interrupted(output: Path, fmt: str, how: str = "interrupted") -> None:
    """After Ctrl-C / SIGTERM: render what finished (marked partial) and say where it is; `how`
    starts the message ("interrupted", "stopped (SIGTERM)", ...)."""
    from loaderbench.analysis import analyze
    from loaderbench.errors import ResultsFormatError
    from loaderbench.results import read_results

    try:
        rs = read_results(output)
    except ResultsFormatError:
        rs = None
    if rs is None or not rs.results:
        common.stderr().print(f"loaderbench: {how} before any config finished; nothing was measured",
                        highlight=False, markup=False, soft_wrap=True)
        return
    analyze(rs)
    common.render_result(rs, fmt, common.stdout())
    common.stderr().print(
        f"loaderbench: {how}: finished configs are saved in {output} "
        f"({len(rs.results)} config{'s' if len(rs.results) != 1 else ''})",
        highlight=False, markup=False, soft_wrap=True,
    )


