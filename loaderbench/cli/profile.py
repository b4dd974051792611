"""`loaderbench profile`: where each sample's time goes, stage by stage (read, decode, each
transform, the rest of `__getitem__`, collate, receive, pin, H2D).

It takes the sweep's dataset options, its `--device`, its seed and the grid axes a profile uses
(one value each), all from config.OPTIONS (one declaration per knob), over the same TOML config;
the flags of its own (sample count, time budget, functions shown, --in-worker, format) are
declared here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from loaderbench.cli import common
from loaderbench.orchestration.config import OPTIONS, Option
from loaderbench.orchestration.profile import (
    DEFAULT_SAMPLES,
    DEFAULT_TIME_BUDGET_S,
    DEFAULT_TOP,
    PROFILE_AXES,
)

PROFILE_FORMATS = ("table", "json")

_PROFILE_DEFAULTS = {
    "num_workers": "1; 0 profiles the main process alone",
    "batch_size": "256 on a CUDA device, 64 without",
    "pin_memory": "on with a CUDA device",
    "prefetch_factor": "2",
    "mp_context": "the platform's",
    "worker_threads": "torch's 1",
    "main_threads": "torch's",
    "decoder": "pil; the synthetic dataset only",
}

_FIXED: list[tuple[str, Any, Any]] = [
    ("config", Annotated[Path | None, typer.Argument(
        help="TOML config of a sweep (its dataset, device and one value per grid axis); flags override it.")], None),
    ("samples", Annotated[int, typer.Option(
        "--samples", min=1, max=1_000_000,
        help="Samples timed by each pass (stages, profiler), at most.")], DEFAULT_SAMPLES),
    ("time_budget", Annotated[float, typer.Option(
        "--time-budget", metavar="S", min=0.1, max=86_400.0,
        help="Seconds the profile may take once the dataset is built: each pass stops at its share of it.")],
     DEFAULT_TIME_BUDGET_S),
    ("top", Annotated[int, typer.Option(
        "--top", min=1, max=1000, help="Functions shown for the rest of __getitem__.")], DEFAULT_TOP),
    ("in_worker", Annotated[bool, typer.Option(
        "--in-worker", help="Time the samples inside a DataLoader worker instead of this process.")], False),
    ("format", Annotated[str, typer.Option("--format", help="What goes to stdout: table | json.")], "table"),
]


def _shared_options() -> list[Option]:
    """The sweep's options a profile takes: the dataset's, the device, the seed, and the grid
    axes of PROFILE_AXES."""
    keep = {("", "seed"), ("measure", "device")} | {("grid", a) for a in PROFILE_AXES}
    return [o for o in OPTIONS if o.cli and (o.section == "dataset" or (o.section, o.key) in keep)]


_SHARED = _shared_options()


def _param_name(opt: Option) -> str:
    return opt.flag_name[2:].replace("-", "_")


def _help(opt: Option) -> str:
    if opt.section != "grid":
        return opt.help
    text = re.sub(r"\s*\(default[^)]*\)", "", opt.help).rstrip(".")
    return f"{text}. One value (default {_PROFILE_DEFAULTS[opt.key]})."


def _option_param(opt: Option) -> tuple[str, Any, Any]:
    if opt.toggle:
        return _param_name(opt), Annotated[bool, typer.Option(opt.flag_name, help=_help(opt))], False
    if opt.many:
        return (_param_name(opt),
                Annotated[list[str] | None, typer.Option(opt.flag_name, metavar=opt.metavar, help=_help(opt))], None)
    return (_param_name(opt),
            Annotated[str | None, typer.Option(opt.flag_name, metavar=opt.metavar, help=_help(opt))], None)


_PARAMS = _FIXED[:1] + [_option_param(o) for o in _SHARED] + _FIXED[1:]


def profile_command(**kwargs: Any) -> None:
    """Where each sample's time goes: read, decode, each transform of a torchvision Compose, the
    rest of __getitem__ (by function), collate, and in the main process receive, pin and H2D."""
    from loaderbench.orchestration import config as cfgmod
    from loaderbench.orchestration.profile import execute_profile

    def body() -> None:
        fmt = common.check_format(kwargs["format"], PROFILE_FORMATS)
        overrides: dict[str, dict[str, Any]] = {}
        for opt in _SHARED:
            value = kwargs[_param_name(opt)]
            if opt.toggle:
                value = True if value else None
            if value is not None:
                overrides.setdefault(opt.section, {})[opt.key] = cfgmod.parse_flag(
                    opt.section, opt.key, value, opt.flag_name)
        cfg = cfgmod.build_config(kwargs["config"], overrides)
        common.say("loaderbench: profiling (building the dataset first) ...")
        try:
            outcome = execute_profile(cfg, samples=kwargs["samples"], time_budget_s=kwargs["time_budget"],
                                      in_worker=kwargs["in_worker"], top=kwargs["top"])
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        from loaderbench.render import stages as render

        if fmt == "json":
            import sys

            sys.stdout.write(render.profile_json(outcome) + "\n")
        else:
            render.render_profile(outcome, common.stdout())

    common.guard(body)


profile_command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
     for name, annotation, default in _PARAMS]
)
profile_command.__annotations__ = {name: annotation for name, annotation, _ in _PARAMS} | {"return": None}
