"""The CI gate's commands: `loaderbench compare` and `loaderbench check`.

Each parses flags, calls the pure core (`compare.compare_results`; `check` first
runs `orchestrate.execute_sweep`), renders with render/compare.py, and exits 0 (no regression), 1
(regression, or not comparable with --strict) or 2 (usage, config or result-file error, through
cli/common.py).
"""

from __future__ import annotations

import datetime as _dt
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from loaderbench.cli import common
from loaderbench.errors import ResultsFormatError, UsageError

COMPARE_FORMATS = ("table", "markdown", "json")

# The options compare and check share, declared once.
Metric = Annotated[str, typer.Option(help="samples_per_s (lower is worse) | stall_fraction (higher is worse).")]
Threshold = Annotated[str, typer.Option(help="Smallest change that counts: 10% of throughput, or 10 stall points.")]
Alpha = Annotated[str, typer.Option(help="Significance level of the test (and 1 - the interval's level).")]
Seed = Annotated[int, typer.Option(help="Seed of the bootstrap interval.")]
Strict = Annotated[bool, typer.Option("--strict", help="Fail (exit 1) on results that are not comparable.")]
Format = Annotated[str, typer.Option("--format", help="table | markdown | json.")]


def parse_fraction(value: str, flag: str, *, lo: float, hi: float) -> float:
    """`10%` or `0.1` -> 0.1; UsageError naming the flag otherwise."""
    text = str(value).strip()
    try:
        x = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise UsageError(f"{flag}: expected a number such as 10% or 0.1, got {value!r}") from None
    if not lo < x <= hi:
        raise UsageError(f"{flag}: expected a value above {lo:g} and at most {hi:g}, got {value!r}")
    return x


def load_side(path: Path) -> tuple[Any, int]:
    """A result file, or a folder whose *.json files (runs of the same workload) are pooled.
    Returns (ResultSet, number of files). ResultsFormatError for a missing or empty folder."""
    from loaderbench.analysis.compare import pool_results
    from loaderbench.results import read_results

    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise ResultsFormatError(f"{path}: folder holds no *.json result files")
        sets = [read_results(f) for f in files]
        if len(sets) == 1:
            return sets[0], 1
        return pool_results(sets, [str(f) for f in files]), len(files)
    return read_results(path), 1


def display_names(paths: list[Path]) -> list[str]:
    """Short unique names: file stems (folder names) when unique, else the paths as given."""
    stems = [p.name if p.is_dir() else p.stem for p in paths]
    if len(set(stems)) == len(stems):
        return stems
    return [str(p) for p in paths]


def _render(comparison: Any, fmt: str, *, strict: bool) -> None:
    from loaderbench.render import compare as compare_render

    if fmt == "json":
        sys.stdout.write(compare_render.to_json(comparison, strict=strict) + "\n")
    elif fmt == "markdown":
        sys.stdout.write(compare_render.to_markdown(comparison, strict=strict))
    else:
        compare_render.render_comparison(comparison, common.stdout(), strict=strict)


def compare_command(
    results: Annotated[
        list[Path],
        typer.Argument(help="BASELINE CURRENT [MORE...]: result files, or folders of runs to pool."),
    ],
    metric: Metric = "samples_per_s",
    threshold: Threshold = "10%",
    alpha: Alpha = "0.05",
    seed: Seed = 0,
    strict: Strict = False,
    format: Format = "table",
) -> None:
    """Compare result files config by config: regressed, improved, unchanged, not significant,
    not comparable, missing, new or failed. Exit 0 no regression, 1 regression, 2 error."""
    from loaderbench.analysis.compare import compare_results

    def body() -> None:
        fmt = common.check_format(format, COMPARE_FORMATS)
        if len(results) < 2:
            raise UsageError("compare needs a BASELINE and at least one CURRENT result file")
        thr = parse_fraction(threshold, "--threshold", lo=0.0, hi=10.0)
        a = parse_fraction(alpha, "--alpha", lo=0.0, hi=0.5)
        loaded = [load_side(p) for p in results]
        comparison = compare_results(
            loaded[0][0], [rs for rs, _ in loaded[1:]], metric=metric, threshold=thr, alpha=a,
            seed=seed, names=display_names(list(results)), files=[n for _, n in loaded],
        )
        _render(comparison, fmt, strict=strict)
        code = comparison.exit_code(strict=strict)
        if code:
            raise typer.Exit(code)

    common.guard(body)


def check_config(baseline: Any, config_path: Path | None) -> Any:
    """The sweep `check` runs: the baseline's own config (`SweepConfig.from_dict`), or the
    dataset, step and measure settings of CONFIG.toml when given, over the grid that re-creates
    the baseline's configs (`baseline_grid`, and its loader arguments: `baseline_loader_args`),
    every config measured (`--search grid`)."""
    from loaderbench.analysis.compare import baseline_grid, baseline_loader_args
    from loaderbench.orchestration import config as cfgmod

    grid = baseline_grid(baseline)
    loader_args = baseline_loader_args(baseline)
    if config_path is not None:
        # The gate measures the baseline's configs, all of them: no search.
        return replace(cfgmod.build_config(config_path), search="grid", loader_args=loader_args).with_grid(**grid)
    cfg = cfgmod.SweepConfig.from_dict(baseline.config or {})
    return replace(cfg, label=baseline.label or cfg.label, source=f"baseline {baseline.label or ''}".strip(),
                   search="grid", loader_args=loader_args).with_grid(**grid)


def default_check_output(label: str, now: _dt.datetime) -> Path:
    """results/<label>-check-<UTC time>.json (never under results/baselines/)."""
    from loaderbench.results import timestamped_path

    return timestamped_path(f"{label or 'check'}-check", now)


def check_command(
    config: Annotated[Path | None, typer.Argument(help="TOML config for dataset/compute/measure (default: the baseline's).")] = None,
    baseline: Annotated[Path, typer.Option(help="Baseline result file, e.g. results/baselines/ci.json.")] = Path("results/baselines/ci.json"),
    update_baseline: Annotated[bool, typer.Option("--update-baseline", help="Write this run as the new baseline (on purpose; exit 0).")] = False,
    output: Annotated[Path | None, typer.Option(help="Where this run goes (default results/<label>-check-<time>.json).")] = None,
    metric: Metric = "samples_per_s",
    threshold: Threshold = "10%",
    alpha: Alpha = "0.05",
    seed: Seed = 0,
    strict: Strict = False,
    format: Format = "table",
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")] = False,
) -> None:
    """Run the baseline's configs here and compare with it in one command (the CI gate).
    Exit 0 no regression, 1 regression, 2 error; --update-baseline writes a new baseline."""
    from loaderbench.analysis.compare import compare_results
    from loaderbench.orchestration import config as cfgmod
    from loaderbench.orchestration.execute import SweepInterruptedAt, execute_sweep
    from loaderbench.results import read_results, save_results

    def body() -> None:
        fmt = common.check_format(format, COMPARE_FORMATS)
        thr = parse_fraction(threshold, "--threshold", lo=0.0, hi=10.0)
        a = parse_fraction(alpha, "--alpha", lo=0.0, hi=0.5)
        base_rs = None
        if baseline.exists():
            base_rs = read_results(baseline)
            ranks = ((base_rs.environment or {}).get("distributed") or {}).get("world_size") or 1
            if ranks > 1:
                raise UsageError(
                    f"--baseline {baseline} was measured on {ranks} ranks and check runs one process: "
                    f"run `loaderbench sweep CONFIG --nproc-per-node {ranks} --output NEW.json`, then "
                    f"`loaderbench compare {baseline} NEW.json`"
                )
            if (base_rs.config or {}).get("watch"):
                raise UsageError(
                    f"--baseline {baseline} was recorded by loaderbench.watch in a training loop, which check "
                    "cannot run again: run the loop again with watch(..., output='NEW.json'), then "
                    f"`loaderbench compare {baseline} NEW.json`"
                )
            from loaderbench.orchestration.api import PICKLED_FACTORY

            if ((base_rs.config or {}).get("dataset") or {}).get("factory") == PICKLED_FACTORY and config is None:
                raise UsageError(
                    f"--baseline {baseline} was measured from a Dataset object passed to loaderbench.sweep(), "
                    "which check cannot rebuild (its pickled copy is gone): make the baseline with a factory, "
                    "loaderbench.sweep('module:factory', ...), or pass a CONFIG.toml that names one"
                )
            cfg = check_config(base_rs, config)
        elif update_baseline and config is not None:
            cfg = cfgmod.build_config(config)  # first baseline: the whole sweep of CONFIG
        elif update_baseline:
            raise UsageError(
                f"--baseline {baseline} does not exist: pass the sweep's CONFIG.toml to make the first baseline"
            )
        else:
            raise ResultsFormatError(
                f"{baseline}: no such baseline; make one with `loaderbench check --baseline {baseline} "
                "CONFIG.toml --update-baseline`"
            )
        out = output or default_check_output(cfg.label, _dt.datetime.now(_dt.timezone.utc))
        if out.resolve() == baseline.resolve():
            raise UsageError(
                f"--output {out} is the baseline itself: write runs elsewhere (--update-baseline replaces it on purpose)"
            )
        show_progress = not no_progress and sys.stderr.isatty()
        with common.ProgressObserver(show_progress) as obs:
            try:
                # A check compares the measured configs with the baseline's: no stage profile of the
                # pick (nor the in_order=False row its long tail would add).
                current, out_path = execute_sweep(replace(cfg, profile=False), output=out, observer=obs)
            except SweepInterruptedAt as exc:
                obs.progress.stop()
                common.stderr().print(
                    f"loaderbench: interrupted: finished configs are saved in {exc.output}",
                    highlight=False, markup=False,
                )
                raise typer.Exit(130) from None
        err = common.stderr()
        err.print(f"results saved to {out_path}", highlight=False, markup=False, soft_wrap=True)
        code = 0
        if base_rs is not None:
            comparison = compare_results(
                base_rs, [current], metric=metric, threshold=thr, alpha=a, seed=seed,
                names=["baseline", "current"],
            )
            _render(comparison, fmt, strict=strict)
            code = comparison.exit_code(strict=strict)
            if comparison.has_not_comparable() and not update_baseline:
                err.print(
                    f"loaderbench: warning: this run is not comparable with {baseline} (see above); "
                    "make a baseline here with --update-baseline, or compare base and head on one "
                    "runner (docs/ci.md)",
                    highlight=False, markup=False, soft_wrap=True,
                )
        if update_baseline:
            save_results(current, baseline)
            err.print(f"baseline written to {baseline}", highlight=False, markup=False, soft_wrap=True)
            code = 0
        if code:
            raise typer.Exit(code)

    common.guard(body)
