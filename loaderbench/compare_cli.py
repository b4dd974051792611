"""The CI gate's commands: `loaderbench compare` and `loaderbench check`.

Registered on the app in cli.py (`app.command("compare")(compare_command)`, `app.command("check")
(check_command)`). Each parses flags, calls the pure core (`compare.compare_results`; `check` first
runs `sweep.execute_sweep`), renders with `compare_render`, and exits 0 (no regression), 1
(regression, or not comparable with --strict) or 2 (usage, config or result-file error, through
cli._guard). cli is imported inside the functions so that either module can be imported first.
"""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from loaderbench.errors import ResultsFormatError, UsageError

COMPARE_FORMATS = ("table", "markdown", "json")


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


def _check_compare_format(fmt: str) -> str:
    if fmt not in COMPARE_FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(COMPARE_FORMATS)}, got {fmt!r}")
    return fmt


def load_side(path: Path) -> tuple[Any, int]:
    """A result file, or a folder whose *.json files (runs of the same workload) are pooled.
    Returns (ResultSet, number of files). ResultsFormatError for a missing or empty folder."""
    from loaderbench.compare import pool_results
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
    from loaderbench import cli, compare_render

    if fmt == "json":
        sys.stdout.write(compare_render.to_json(comparison, strict=strict) + "\n")
    elif fmt == "markdown":
        sys.stdout.write(compare_render.to_markdown(comparison, strict=strict))
    else:
        compare_render.render_comparison(comparison, cli._stdout(), strict=strict)


def compare_command(
    results: Annotated[
        list[Path],
        typer.Argument(help="BASELINE CURRENT [MORE...]: result files, or folders of runs to pool."),
    ],
    metric: Annotated[str, typer.Option(help="samples_per_s (lower is worse) | stall_fraction (higher is worse).")] = "samples_per_s",
    threshold: Annotated[str, typer.Option(help="Smallest change that counts: 10% of throughput, or 10 stall points.")] = "10%",
    alpha: Annotated[str, typer.Option(help="Significance level of the test (and 1 - the interval's level).")] = "0.05",
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap interval.")] = 0,
    strict: Annotated[bool, typer.Option("--strict", help="Fail (exit 1) on results that are not comparable.")] = False,
    format: Annotated[str, typer.Option("--format", help="table | markdown | json.")] = "table",
) -> None:
    """Compare result files config by config: regressed, improved, unchanged, not significant,
    not comparable, missing, new or failed. Exit 0 no regression, 1 regression, 2 error."""
    from loaderbench import cli
    from loaderbench.compare import compare_results

    def body() -> None:
        fmt = _check_compare_format(format)
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

    cli._guard(body)


def check_overrides(baseline: Any, *, with_workload: bool) -> dict[str, dict[str, Any]]:
    """Parsed overrides for `config.build_config` that re-create the baseline's sweep: its grid
    (from its configs' settings) and, with `with_workload`, its dataset, compute step, measure
    settings, label and seed (values re-validated with the config parsers)."""
    from loaderbench import config as cfgmod
    from loaderbench.compare import baseline_grid
    from loaderbench.errors import ConfigError
    from loaderbench.model import ComputeSpec

    out: dict[str, dict[str, Any]] = {"grid": dict(baseline_grid(baseline))}
    if not with_workload:
        return out
    cfg = baseline.config or {}
    schema = cfgmod.SCHEMA

    def parsed(section: str, key: str, value: Any) -> Any:
        try:
            return schema[section][key](value)
        except ValueError as exc:
            raise ConfigError(f"baseline config {section}.{key}: {exc}") from None

    ds = dict(cfg.get("dataset") or {})
    dataset: dict[str, Any] = {}
    kind = ds.get("kind", "synthetic")
    dataset["kind"] = ds.get("factory") if kind == "import" else kind
    if ds.get("data_path"):
        dataset["data"] = ds["data_path"]
    applies = cfgmod.KIND_KEYS.get(kind, frozenset()) | cfgmod.COMMON_DATASET_KEYS
    for key in ("num_samples", "image_size", "jpeg_quality", "sample_shape", "cpu_ms", "io_ms", "collate_fn",
                "sampler", "samples_per_batch", "seed"):
        if ds.get(key) is not None and key in applies:
            dataset[key] = parsed("dataset", key, ds[key])
    if ds.get("kwargs"):
        dataset["kwargs"] = dict(ds["kwargs"])
    dataset["kind"] = parsed("dataset", "kind", dataset["kind"])
    out["dataset"] = dataset
    compute = cfg.get("compute")
    if compute:
        out["compute"] = {"step": parsed("compute", "step", ComputeSpec.from_dict(compute).label())}
    measure = cfg.get("measure") or {}
    out["measure"] = {k: parsed("measure", k, v) for k, v in measure.items() if k in schema["measure"] and v is not None}
    top: dict[str, Any] = {}
    if cfg.get("seed") is not None:
        top["seed"] = parsed("", "seed", cfg["seed"])
    label = baseline.label or cfg.get("label")
    if label:
        top["label"] = str(label)
    out[""] = top
    return out


def default_check_output(label: str, now: _dt.datetime) -> Path:
    """results/<label>-check-<UTC time>.json (never under results/baselines/)."""
    return Path("results") / f"{label or 'check'}-check-{now.strftime('%Y%m%dT%H%M%SZ')}.json"


def check_command(
    config: Annotated[Path | None, typer.Argument(help="TOML config for dataset/compute/measure (default: the baseline's).")] = None,
    baseline: Annotated[Path, typer.Option(help="Baseline result file, e.g. results/baselines/ci.json.")] = Path("results/baselines/ci.json"),
    update_baseline: Annotated[bool, typer.Option("--update-baseline", help="Write this run as the new baseline (on purpose; exit 0).")] = False,
    output: Annotated[Path | None, typer.Option(help="Where this run goes (default results/<label>-check-<time>.json).")] = None,
    metric: Annotated[str, typer.Option(help="samples_per_s | stall_fraction.")] = "samples_per_s",
    threshold: Annotated[str, typer.Option(help="Smallest change that counts, e.g. 10%.")] = "10%",
    alpha: Annotated[str, typer.Option(help="Significance level.")] = "0.05",
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap interval.")] = 0,
    strict: Annotated[bool, typer.Option("--strict", help="Fail (exit 1) on results that are not comparable.")] = False,
    format: Annotated[str, typer.Option("--format", help="table | markdown | json.")] = "table",
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")] = False,
) -> None:
    """Run the baseline's configs here and compare with it in one command (the CI gate).
    Exit 0 no regression, 1 regression, 2 error; --update-baseline writes a new baseline."""
    from loaderbench import cli
    from loaderbench import config as cfgmod
    from loaderbench.compare import compare_results
    from loaderbench.results import read_results, save_results
    from loaderbench.sweep import SweepInterruptedAt, execute_sweep

    def body() -> None:
        fmt = _check_compare_format(format)
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
            overrides = check_overrides(base_rs, with_workload=config is None)
        elif update_baseline and config is not None:
            overrides = {}  # first baseline: the whole sweep of CONFIG
        elif update_baseline:
            raise UsageError(
                f"--baseline {baseline} does not exist: pass the sweep's CONFIG.toml to make the first baseline"
            )
        else:
            raise ResultsFormatError(
                f"{baseline}: no such baseline; make one with `loaderbench check --baseline {baseline} "
                "CONFIG.toml --update-baseline`"
            )
        cfg = cfgmod.build_config(config, overrides)
        out = output or default_check_output(cfg.label, _dt.datetime.now(_dt.timezone.utc))
        if out.resolve() == baseline.resolve():
            raise UsageError(
                f"--output {out} is the baseline itself: write runs elsewhere (--update-baseline replaces it on purpose)"
            )
        show_progress = not no_progress and sys.stderr.isatty()
        with cli._ProgressObserver(show_progress) as obs:
            try:
                current, out_path = execute_sweep(cfg, output=out, observer=obs)
            except SweepInterruptedAt as exc:
                obs.progress.stop()
                cli._stderr().print(
                    f"loaderbench: interrupted: finished configs are saved in {exc.output}",
                    highlight=False, markup=False,
                )
                raise typer.Exit(130) from None
        err = cli._stderr()
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

    cli._guard(body)
