"""The typer app: parse flags, call one core function, render. Errors become one line + exit code.

Exit codes: 0 ok, 1 regression (compare/check), 2 usage / config / data / results-format error,
130 interrupted (Ctrl-C; finished configs are saved).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from loaderbench.errors import LoaderbenchError, UsageError

app = typer.Typer(
    name="loaderbench",
    help="Measure why the GPU waits for data, and which DataLoader settings remove the wait.",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

FORMATS = ("table", "json", "csv", "markdown")


def _stdout(width: int | None = None) -> Console:
    """The stdout console. Piped or redirected output takes its width from COLUMNS when set,
    else 200 (rich would otherwise assume 80 and fold whole table rows)."""
    if width is None and not sys.stdout.isatty():
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and int(columns) > 0 else 200
    return Console(width=width, soft_wrap=False, emoji=False)


def _stderr() -> Console:
    # No emoji codes: a path like /data/a:fire:b must print as written.
    return Console(stderr=True, emoji=False)


def _fail(exc: LoaderbenchError) -> None:
    _stderr().print(f"loaderbench: error: {exc}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _guard(fn: Callable[[], Any]) -> Any:
    """Run a command body, turning LoaderbenchError into its one-line message and exit code."""
    try:
        return fn()
    except LoaderbenchError as exc:
        _fail(exc)


def _render(rs: Any, fmt: str, console: Console, *, wide: bool = False) -> None:
    from loaderbench import render

    if fmt == "table":
        render.render_table(rs, console, wide=wide)
    elif fmt == "json":
        sys.stdout.write(render.to_json(rs) + "\n")
    elif fmt == "csv":
        sys.stdout.write(render.to_csv(rs))
    else:
        sys.stdout.write(render.to_markdown(rs))


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


class _ProgressObserver:
    """Rich progress bar and warnings on stderr (the core never prints)."""

    def __init__(self, enabled: bool) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.err = _stderr()
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
            disable=not enabled,
        )
        self.task: Any = None
        self.label = ""

    def __enter__(self) -> _ProgressObserver:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def sweep_started(self, total_trials: int) -> None:
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


Opt = Annotated[str | None, typer.Option()]


@app.command()
def sweep(
    config: Annotated[Path | None, typer.Argument(help="TOML config (see configs/); flags override it.")] = None,
    dataset: Annotated[str | None, typer.Option(help="synthetic (default) | folder | tensor | MODULE:FACTORY")] = None,
    data: Annotated[str | None, typer.Option(help="Image folder path (implies --dataset folder).")] = None,
    num_samples: Annotated[str | None, typer.Option(help="Samples in the synthetic/tensor dataset.")] = None,
    image_size: Annotated[str | None, typer.Option(help="Synthetic image size WxH (default 500x375).")] = None,
    sample_shape: Annotated[str | None, typer.Option(help="tensor dataset sample shape, e.g. 3,64,64.")] = None,
    cpu_ms: Annotated[str | None, typer.Option(help="tensor dataset: busy CPU ms per sample.")] = None,
    io_ms: Annotated[str | None, typer.Option(help="tensor dataset: sleep ms per sample (storage latency).")] = None,
    collate_fn: Annotated[str | None, typer.Option(help="MODULE:NAME of a collate function.")] = None,
    sampler: Annotated[str | None, typer.Option(help="MODULE:FACTORY making your sampler or batch sampler from the dataset (map-style datasets).")] = None,
    samples_per_batch: Annotated[str | None, typer.Option(help="Samples in every batch, when an item holds several (default: counted).")] = None,
    compute: Annotated[str | None, typer.Option(help="none | sleep:MS | spin:MS | model:NAME.")] = None,
    num_workers: Annotated[str | None, typer.Option(help="Comma list, default 0 and powers of two up to the usable CPUs.")] = None,
    pin_memory: Annotated[str | None, typer.Option(help="Comma list of off/on (default off,on).")] = None,
    prefetch: Annotated[str | None, typer.Option(help="CUDA-stream prefetcher off/on (default off,on).")] = None,
    prefetch_factor: Annotated[str | None, typer.Option(help="Batches per worker in flight (default 2).")] = None,
    persistent_workers: Annotated[str | None, typer.Option(help="Comma list of off/on (default off).")] = None,
    batch_size: Annotated[str | None, typer.Option(help="Comma list (default 256 with a GPU, 64 without).")] = None,
    worker_threads: Annotated[str | None, typer.Option(help="Intra-op threads set in each worker at start (comma list; torch's default is 1).")] = None,
    main_threads: Annotated[str | None, typer.Option(help="Intra-op threads of the main process (comma list; default: torch's).")] = None,
    mp_context: Annotated[str | None, typer.Option(help="fork | spawn | forkserver (comma list).")] = None,
    batches: Annotated[str | None, typer.Option(help="Measured batches per config (at least).")] = None,
    warmup_batches: Annotated[str | None, typer.Option(help="Batches dropped after the first (raised to workers x prefetch_factor).")] = None,
    min_time: Annotated[str | None, typer.Option(help="Measure at least this many seconds per config.")] = None,
    max_batches: Annotated[str | None, typer.Option(help="Measure at most this many batches per config.")] = None,
    repeats: Annotated[str | None, typer.Option(help="Fresh-process repeats per config, interleaved.")] = None,
    config_timeout: Annotated[str | None, typer.Option(help="Watchdog seconds per config (kills its process tree).")] = None,
    tolerance: Annotated[str | None, typer.Option(help="Knee tolerance vs the best, e.g. 5% or 0.05.")] = None,
    epoch_batches: Annotated[str | None, typer.Option(help="Batches per epoch, to weigh worker start-up (default: dataset length / batch size).")] = None,
    timing: Annotated[str | None, typer.Option(help="auto | events | sync | host.")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda | cuda:N.")] = None,
    seed: Annotated[str | None, typer.Option(help="Seed for data and sampling.")] = None,
    baseline_settings: Annotated[str | None, typer.Option(help="Your current settings for the headroom line, e.g. num_workers=4,pin_memory=off (default: the first row).")] = None,
    label: Annotated[str | None, typer.Option(help="Name of this run (shown by show/compare).")] = None,
    output: Annotated[Path | None, typer.Option(help="Result JSON (default results/<label>-<time>.json).")] = None,
    format: Annotated[str, typer.Option("--format", help="What goes to stdout: table | json | csv | markdown.")] = "table",
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every table column, whatever the terminal width.")] = False,
    plot: Annotated[bool, typer.Option("--plot", help="Also write a PNG plot beside the result file.")] = False,
    cache: Annotated[str | None, typer.Option(help="Page-cache state of a folder dataset before each config: as-is | cold | warm | both.")] = None,
    drop_caches: Annotated[bool, typer.Option("--drop-caches", help="With --cache cold, as root: drop all caches instead of per-file eviction.")] = False,
    nproc_per_node: Annotated[str | None, typer.Option("--nproc-per-node", help="Distributed sweep: run every config on N ranks of this node at once, one GPU and one DataLoader each (launches what `torchrun --nproc-per-node N -m loaderbench sweep ...` runs).")] = None,
) -> None:
    """Sweep num_workers x pin_memory x prefetch x prefetch_factor x persistent_workers and say
    where the loader stops being the bottleneck."""
    from loaderbench import config as cfgmod
    from loaderbench.sweep import SweepInterruptedAt

    flags: list[tuple[str, str, Any, str]] = [
        ("dataset", "kind", dataset, "--dataset"),
        ("dataset", "data", data, "--data"),
        ("dataset", "num_samples", num_samples, "--num-samples"),
        ("dataset", "image_size", image_size, "--image-size"),
        ("dataset", "sample_shape", sample_shape, "--sample-shape"),
        ("dataset", "cpu_ms", cpu_ms, "--cpu-ms"),
        ("dataset", "io_ms", io_ms, "--io-ms"),
        ("dataset", "collate_fn", collate_fn, "--collate-fn"),
        ("dataset", "sampler", sampler, "--sampler"),
        ("dataset", "samples_per_batch", samples_per_batch, "--samples-per-batch"),
        ("compute", "step", compute, "--compute"),
        ("grid", "num_workers", num_workers, "--num-workers"),
        ("grid", "pin_memory", pin_memory, "--pin-memory"),
        ("grid", "prefetch", prefetch, "--prefetch"),
        ("grid", "prefetch_factor", prefetch_factor, "--prefetch-factor"),
        ("grid", "persistent_workers", persistent_workers, "--persistent-workers"),
        ("grid", "batch_size", batch_size, "--batch-size"),
        ("grid", "mp_context", mp_context, "--mp-context"),
        ("grid", "worker_threads", worker_threads, "--worker-threads"),
        ("grid", "main_threads", main_threads, "--main-threads"),
        ("measure", "batches", batches, "--batches"),
        ("measure", "warmup_batches", warmup_batches, "--warmup-batches"),
        ("measure", "min_time_s", min_time, "--min-time"),
        ("measure", "max_batches", max_batches, "--max-batches"),
        ("measure", "repeats", repeats, "--repeats"),
        ("measure", "config_timeout_s", config_timeout, "--config-timeout"),
        ("measure", "tolerance", tolerance, "--tolerance"),
        ("measure", "epoch_batches", epoch_batches, "--epoch-batches"),
        ("measure", "cache", cache, "--cache"),
        ("measure", "drop_caches", True if drop_caches else None, "--drop-caches"),
        ("measure", "timing", timing, "--timing"),
        ("measure", "device", device, "--device"),
        ("", "seed", seed, "--seed"),
        ("", "label", label, "--label"),
        ("", "baseline_settings", baseline_settings, "--baseline-settings"),
    ]

    def body() -> None:
        from loaderbench import distributed as dist

        info = dist.RankInfo.from_environ()
        if info is not None and not info.leader:
            # A follower rank of a distributed sweep: runs what rank 0 posts, prints nothing.
            # SIGTERM (the launcher ending the job) must end its measuring process too, which
            # runs in its own session: run_isolated kills that tree on KeyboardInterrupt.
            _sigterm_as_interrupt()
            try:
                dist.follow(dist.open_store(info, timeout_s=120), info)
            except KeyboardInterrupt:
                raise typer.Exit(130) from None
            except RuntimeError as exc:  # c10d's store errors (DistStoreError, ...) are RuntimeErrors
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                _stderr().print(
                    f"loaderbench: error: rank {info.rank} lost the job's store at "
                    f"{info.master_addr}:{info.master_port} (did rank 0 end?): {first}",
                    highlight=False, markup=False, soft_wrap=True,
                )
                raise typer.Exit(1) from None
            return
        fmt = _check_format(format)
        overrides: dict[str, dict[str, Any]] = {}
        for section, key, value, flag in flags:
            if value is not None:
                overrides.setdefault(section, {})[key] = cfgmod.parse_flag(section, key, value, flag)
        cfg = cfgmod.build_config(config, overrides)
        if nproc_per_node is not None:
            raise typer.Exit(_launch_ranks(nproc_per_node, info, cfg, output))
        _sigterm_as_interrupt()
        show_progress = not no_progress and sys.stderr.isatty()
        with _ProgressObserver(show_progress) as obs:
            try:
                rs, out = _execute(cfg, output, obs, info)
            except SweepInterruptedAt as exc:
                obs.progress.stop()
                how = "interrupted"
                if _SIGTERM_SEEN:
                    how = "stopped by the launcher (SIGTERM)" if info is not None else "stopped (SIGTERM)"
                _report_interrupted(exc.output, fmt, how)
                raise typer.Exit(130) from None
        _render(rs, fmt, _stdout(), wide=wide)
        _stderr().print(f"results saved to {out}", highlight=False, markup=False)
        if not any(r.status == "ok" for r in rs.results):
            from loaderbench.errors import NothingMeasured

            raise NothingMeasured(
                "no config was measured successfully: every row failed, hung or was skipped "
                f"(each row says why; details in {out})"
            )
        if plot:
            from loaderbench.plot import plot_results

            png = plot_results(rs, out.with_suffix(".png"))
            _stderr().print(f"plot saved to {png}", highlight=False, markup=False)

    _guard(body)


def _launch_ranks(value: str, info: Any, cfg: Any, output: Path | None) -> int:
    """`--nproc-per-node N`: check N and the output location here (one-line errors before any
    rank starts), then start the ranks; rank 0 prints and writes. Returns rank 0's exit code."""
    from loaderbench import distributed as dist
    from loaderbench.results import check_result_path

    if info is not None:
        raise UsageError(
            "--nproc-per-node: this process already runs under a launcher (RANK is set); "
            "drop --nproc-per-node when you start loaderbench with torchrun"
        )
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--nproc-per-node: expected a whole number >= 1 (ranks on this node), got {value!r}")
    _check_layout(n, cfg, "--nproc-per-node")
    if output is not None:
        check_result_path(output)
    if _ARGV is None:
        raise UsageError("--nproc-per-node needs the loaderbench command line (run `loaderbench sweep ...`)")
    code, message = dist.launch(n, _strip_option(_ARGV, "--nproc-per-node"))
    if message:
        _stderr().print(f"loaderbench: error: {message}", highlight=False, markup=False, soft_wrap=True)
    return code


def _check_layout(ranks_per_node: int, cfg: Any, flag: str) -> None:
    """One GPU and at least one CPU per rank on this node (distributed.check_ranks)."""
    import torch

    from loaderbench import distributed as dist
    from loaderbench.env import usable_cpus

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    dist.check_ranks(
        ranks_per_node, gpus=gpus, usable_cpus=usable_cpus(), device=cfg.measure.device, flag=flag
    )


def _strip_option(argv: list[str], name: str) -> list[str]:
    """`argv` without `name VALUE` / `name=VALUE`.

    >>> _strip_option(["sweep", "--nproc-per-node", "2", "--batches", "5"], "--nproc-per-node")
    ['sweep', '--batches', '5']
    """
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(name + "="):
            out.append(arg)
    return out


def _execute(cfg: Any, output: Path | None, obs: Any, info: Any) -> Any:
    """execute_sweep, as the leader (rank 0) of a distributed sweep when `info` says so."""
    from loaderbench import distributed as dist
    from loaderbench.sweep import detect_machine, execute_sweep

    if info is None:
        return execute_sweep(cfg, output=output, observer=obs)
    runner = dist.DistributedRunner(dist.open_store(info, timeout_s=600), info)
    try:
        _check_layout(info.local_world_size, cfg, "torchrun --nproc-per-node")
        runner.wait_for_followers()
    except BaseException:
        runner.finish(wait_s=0)
        raise
    layout = {
        "world_size": info.world_size,
        "local_world_size": info.local_world_size,
        "launcher": "torchrun" if info.agent_store else "env",
    }
    try:
        return execute_sweep(
            cfg, output=output, observer=obs, runner=runner, distributed=layout,
            machine=detect_machine(ranks_per_node=info.local_world_size, world_size=info.world_size),
        )
    finally:
        runner.finish()


def _report_interrupted(output: Path, fmt: str, how: str = "interrupted") -> None:
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
        _stderr().print(f"loaderbench: {how} before any config finished; nothing was measured",
                        highlight=False, markup=False, soft_wrap=True)
        return
    analyze(rs)
    _render(rs, fmt, _stdout())
    _stderr().print(
        f"loaderbench: {how}: finished configs are saved in {output} "
        f"({len(rs.results)} config{'s' if len(rs.results) != 1 else ''})",
        highlight=False, markup=False, soft_wrap=True,
    )


_SIGTERM_SEEN = False  # set by _sigterm_as_interrupt's handler: say "stopped", not "interrupted"


def _sigterm_as_interrupt() -> None:
    """SIGTERM stops a sweep like Ctrl-C: workers reaped, finished configs saved (exit 130)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():

        def handler(signum: int, frame: Any) -> None:
            global _SIGTERM_SEEN
            _SIGTERM_SEEN = True
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, handler)


@app.command()
def show(
    result: Annotated[Path, typer.Argument(help="A result JSON written by `loaderbench sweep`.")],
    format: Annotated[str, typer.Option("--format", help="table | json | csv | markdown.")] = "table",
    wide: Annotated[bool, typer.Option("--wide", help="Every table column, whatever the terminal width.")] = False,
) -> None:
    """Render a saved result again."""
    from loaderbench.analysis import analyze
    from loaderbench.results import read_results

    def body() -> None:
        fmt = _check_format(format)
        rs = read_results(result)
        analyze(rs)  # statistics are re-derived from the raw per-batch samples
        _render(rs, fmt, _stdout(), wide=wide)

    _guard(body)


@app.command("plot")
def plot_command(
    result: Annotated[Path, typer.Argument(help="A result JSON written by `loaderbench sweep`.")],
    output: Annotated[Path | None, typer.Option(help="PNG to write (default: RESULT with .png).")] = None,
) -> None:
    """Plot throughput and stall fraction against num_workers, ceilings and the knee marked."""
    from loaderbench.analysis import analyze
    from loaderbench.results import read_results

    def body() -> None:
        from loaderbench.errors import OutputError
        from loaderbench.plot import plot_results

        rs = read_results(result)
        analyze(rs)
        target = output or result.with_suffix(".png")
        if target.suffix.lower() != ".png":
            raise UsageError(f"--output {target}: the plot is a PNG; give a file name ending in .png")
        try:
            png = plot_results(rs, target)
        except OSError as exc:
            raise OutputError(f"cannot write the plot to {target}: {exc.strerror or exc}") from None
        _stderr().print(f"plot saved to {png}", highlight=False, markup=False)

    _guard(body)


@app.command("make-data")
def make_data(
    path: Annotated[Path, typer.Argument(help="Folder to write the ImageFolder into.")],
    images: Annotated[str, typer.Option(help="Number of JPEG images.")] = "1000",
    size: Annotated[str, typer.Option(help="Image size WxH.")] = "500x375",
    classes: Annotated[str, typer.Option(help="Number of class folders.")] = "10",
    quality: Annotated[str, typer.Option(help="JPEG quality 1-100.")] = "90",
    seed: Annotated[str, typer.Option(help="Random seed.")] = "0",
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty folder.")] = False,
) -> None:
    """Write a real JPEG ImageFolder (PATH/class_XXX/img_XXXXX.jpg) to test storage with."""
    from loaderbench import config as cfgmod
    from loaderbench.datasets import make_image_folder

    def body() -> None:
        def num(v: str, flag: str, lo: int, hi: int) -> int:
            try:
                return cfgmod._int(lo, hi)(v)
            except ValueError as exc:
                raise UsageError(f"{flag}: {exc}") from None

        try:
            wh = cfgmod._size(size)
        except ValueError as exc:
            raise UsageError(f"--size: {exc}") from None
        info = make_image_folder(
            path,
            images=num(images, "--images", 1, 10_000_000),
            size=wh,
            classes=num(classes, "--classes", 1, 100_000),
            quality=num(quality, "--quality", 1, 100),
            seed=num(seed, "--seed", 0, 2**31 - 1),
            force=force,
        )
        _stderr().print(
            f"wrote {info['images']} JPEGs in {info['classes']} classes "
            f"({info['bytes'] / 2**20:.1f} MiB) to {path}",
            highlight=False, markup=False,
        )

    _guard(body)


@app.command()
def env(
    format: Annotated[str, typer.Option("--format", help="table | json.")] = "table",
    no_bandwidth: Annotated[bool, typer.Option("--no-bandwidth", help="Skip the pageable vs pinned copy test.")] = False,
) -> None:
    """Print the machine facts a sweep depends on: CPUs and affinity, /dev/shm, fd limit,
    versions, CUDA, GPU and NVML status."""
    import json

    from loaderbench.env import capture_environment, preflight_warnings

    def body() -> None:
        if format not in ("table", "json"):
            raise UsageError(f"--format: expected table or json, got {format!r}")
        import torch

        facts = capture_environment(device_index=0 if torch.cuda.is_available() else None)
        if torch.cuda.is_available() and not no_bandwidth:
            from loaderbench.bandwidth import measure_h2d_bandwidth, pcie_expected_gb_per_s

            gpu = facts.get("gpu") or {}
            facts["h2d_bandwidth"] = {
                **measure_h2d_bandwidth(),
                "pcie": pcie_expected_gb_per_s(gpu.get("pcie_gen_current"), gpu.get("pcie_width_current")),
            }
        warnings = preflight_warnings(facts)
        if format == "json":
            sys.stdout.write(json.dumps({**facts, "warnings": warnings}, indent=1) + "\n")
            return
        from loaderbench.render import render_env

        render_env(facts, [], _stdout())
        for w in warnings:
            _stderr().print(f"loaderbench: warning: {w}", highlight=False, markup=False, soft_wrap=True)

    _guard(body)


def _register_extra_commands() -> None:
    from loaderbench.compare_cli import check_command, compare_command
    from loaderbench.storage_cli import storage_command

    app.command("compare")(compare_command)
    app.command("check")(check_command)
    app.command("storage")(storage_command)


_register_extra_commands()


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    """Measure why the GPU waits for data, and which DataLoader settings remove the wait."""
    if version:
        from loaderbench import __version__

        sys.stdout.write(f"loaderbench {__version__}\n")
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        sys.stdout.write(ctx.get_help() + "\n")
        raise typer.Exit(0)


_ARGV: list[str] | None = None  # the command line main() was given (for --nproc-per-node)


def main() -> None:
    """Console-script entry point: click's own usage errors (an unknown option or command, a
    missing argument) become one line and exit code 2, like loaderbench's."""
    global _ARGV
    _ARGV = list(sys.argv[1:])
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
            _stderr().print(
                f"loaderbench: error: {message} (see `{cmd} --help`)",
                highlight=False, markup=False, soft_wrap=True,
            )
            sys.exit(2)
        if "Abort" in names:
            sys.exit(130)
        raise
    sys.exit(code if isinstance(code, int) else 0)
