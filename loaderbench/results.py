"""Result files: the `ResultSet` a sweep (or a watched loop) saves, the records the orchestration
writes into it as it runs, and versioned JSON written atomically after every config, loaded with
checks and migrations.

No torch or pynvml here, so `show` starts fast on CPU-only runners.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderbench.conclusions import (
    Analysis,
    FitInputs,
    InOrderTrial,
    Prediction,
    PredictionErrors,
    Recommendation,
)
from loaderbench.errors import OutputError, ResultsFormatError
from loaderbench.model import (
    SCHEMA_VERSION,
    Ceiling,
    ConfigResult,
    LoaderSettings,
    Record,
    StageRecord,
    SustainedSettled,
    Trial,
)
from loaderbench.schema import mark_legacy_probes, migrate

# ---------------------------------------------------------------------------------------------
# What the orchestration records while a sweep runs (`ResultSet.sweep`)
# ---------------------------------------------------------------------------------------------


@dataclass
class Timing(Record):
    """Where a sweep's time went, in seconds (docs/benchmarks.md): `trials` trials taking
    `trial_wall_s`, in them the DataLoader's set-up, the worker start-up to the first batch, the
    warm-up, the measured windows, the probes after the windows and stopping the workers; the
    compute ceiling; `other_s`, the rest of the trials' wall time (the measuring process's round
    trip); `profile_s`, the stage profile of the pick (the dataset built again included);
    `sustained_s`, the pick's sustained trial (counted in `trials` too)."""

    trials: int = 0
    trial_wall_s: float = 0.0
    setup_s: float = 0.0
    first_batch_s: float = 0.0
    warmup_s: float = 0.0
    window_s: float = 0.0
    probe_s: float = 0.0
    stop_s: float = 0.0
    ceiling_s: float = 0.0
    other_s: float = 0.0
    profile_s: float = 0.0
    sustained_s: float = 0.0

    PARTS = ("setup_s", "first_batch_s", "warmup_s", "window_s", "probe_s", "stop_s")


@dataclass
class SearchStep(Record):
    """One config the search measured (`why`; `repeat` for a repeat the model's dispute asked
    for), with the model's prediction before it and what it measured."""

    config: str
    why: str = ""
    status: str | None = None
    repeat: bool = False
    predicted_samples_per_s: float | None = None
    measured_samples_per_s: float | None = None


@dataclass
class Widening(Record):
    """How far the search widened the worker counts past the usable CPUs (NOTE [model-guided
    search] in orchestration/search.py): the widest count searched (`workers`) and, when a
    measured limit refused twice that while the loader still starved, why (`refused`, e.g.
    "memory: 16 workers would ...", preflight.room_for_workers); None when only the loader
    stopped starving."""

    workers: int
    refused: str | None = None


@dataclass
class SearchLog(Record):
    """What the model-guided search did (orchestration/search.py): the grid's size, the worker
    counts searched (low, high), every step, the model's predictions before each config was
    measured, why it stopped (`budget_ended`: --time-budget ended the search before its plan,
    as against its repeats), and how far it widened past the usable CPUs (`widened`)."""

    method: str = "model-guided"
    grid_configs: int = 0
    steps: list[SearchStep] = field(default_factory=list)
    predicted_before_measured: list[Prediction] = field(default_factory=list)
    stopped: str | None = ""
    budget_ended: bool = False  # --time-budget ended the search itself (not its repeats)
    budget_s: float | None = None
    workers_searched: list[int] = field(default_factory=list)
    widened: Widening | None = None


@dataclass
class Drift(Record):
    """The drift check of a warm measuring process (NOTE [drift check] in
    orchestration/drift.py): the knee (`config`) measured again in fresh processes against its
    warm trials, the change, the threshold, whether drift was confirmed and which configs were
    measured again (`remeasured`) or, confirmed with no time left in `--time-budget`, kept their
    warm trials (`not_remeasured`). Files of schema 2 and before hold earlier forms (`first_samples_per_s` /
    `last_samples_per_s`: the first config in the warm process at the start and the end)."""

    config: str
    change: float = 0.0
    warm_samples_per_s: float | None = None
    warm_trials_samples_per_s: list[float] = field(default_factory=list)
    fresh_samples_per_s: float | None = None
    fresh_trials_samples_per_s: list[float] = field(default_factory=list)
    threshold: float | None = None
    confirmed: bool = False
    remeasured: list[str] = field(default_factory=list)
    not_remeasured: list[str] = field(default_factory=list)  # confirmed, but no time left to measure them again
    unconfirmed_for_budget: bool = False  # tripped, with no time left for the trials that would confirm it
    wall_s: float | None = None
    first_samples_per_s: float | None = None
    last_samples_per_s: float | None = None


@dataclass
class PredictionCheck(Record):
    """How well the pipeline model predicted the configs the search measured: leaving each out
    (`leave_one_out`, `errors`), and before measuring them (`before_measured`)."""

    leave_one_out: list[Prediction] = field(default_factory=list)
    errors: PredictionErrors | None = None
    before_measured: PredictionErrors | None = None


@dataclass
class LostRank(Record):
    """A rank a distributed sweep lost while it ran (orchestration/nodes.py NOTE [several
    nodes]): its heartbeat stopped for `after_s` seconds; on several nodes, its node (`node_rank`,
    `host`). The config it was in failed, naming it, and the configs after it were not run."""

    rank: int
    after_s: float
    node_rank: int | None = None
    host: str | None = None


@dataclass
class SweepProfile(Record):
    """The stage profile the sweep took of its pick after the search (orchestration/profile.py
    `profile_pick`; `--no-profile` turns it off): the `settings` profiled, the raw `record`
    (analysis/stages.py derives the table; None when the profile did not run: `error`, one
    line), its wall seconds with the dataset built again (`wall_s`) against the budget it was
    given (`budget_s`), and whether the sweep then tried `in_order=False` at the pick for a long
    per-sample tail (`in_order`, None when the tail was not long)."""

    settings: LoaderSettings
    record: StageRecord | None = None
    wall_s: float = 0.0
    budget_s: float = 0.0
    error: str | None = None
    in_order: InOrderTrial | None = None


@dataclass
class Sustained(Record):
    """The pick measured once more after the search over a window of several batches per worker
    (orchestration/sustained.py NOTE [the pick's sustained figure]): its `config` key, samples/s
    and stall fraction (0..1) over `batches` batches (`batches_per_worker` each, `window_s`
    seconds), beside the row's figure from the search's windows (`search_samples_per_s`, over
    `search_batches_per_worker` batches per worker, the median of its trials); `wall_s`: the
    wall seconds of its windows; `trial`: the first window's raw measurements. Where that window
    read past the tolerance from the search's figure and time allowed, a second window of the
    same length (`second`): `windows_samples_per_s` holds each window's own samples/s, and
    `settled` how `samples_per_s` and `stall_fraction` came from them
    (analysis.statistics.settle_windows; `batches` and `window_s` are the first window's)."""

    config: str
    samples_per_s: float
    stall_fraction: float
    batches: int
    batches_per_worker: float
    window_s: float
    search_samples_per_s: float
    search_batches_per_worker: float
    wall_s: float = 0.0
    trial: Trial | None = None
    windows_samples_per_s: list[float] = field(default_factory=list)
    settled: SustainedSettled = SustainedSettled.ONE
    second: Trial | None = None


@dataclass
class SweepRecord(Record):
    """What the orchestration recorded while the sweep ran: wall time (and since the command
    started, what --time-budget counts), configs planned, whether it was interrupted, batches
    per epoch (per rank), measuring processes started, where the time went, the search, the
    drift check, the model's predictions for the configs left unmeasured and its fitted inputs
    per series (`model`); for a watched loader of a class of its own, its settings left at
    their defaults (`loader_defaults`, name -> value: inloop/loader.py loader_class_settings); a
    rank a distributed sweep lost (`lost`); the stage profile of the pick (`profile`); the pick's
    sustained figure (`sustained`), or the pick whose windows were short and whose sustained
    trial --time-budget left no time for (`sustained_left_out`, its key)."""

    sweep_wall_s: float | None = None
    since_start_s: float | None = None
    configs_planned: int | None = None
    interrupted: bool = False
    epoch_batches: int | None = None
    measuring_processes: int | None = None
    timing: Timing | None = None
    search: SearchLog | None = None
    drift: Drift | None = None
    predictions: list[Prediction] = field(default_factory=list)
    prediction_check: PredictionCheck | None = None
    model: dict[str, FitInputs] = field(default_factory=dict)
    loader_defaults: dict[str, Any] = field(default_factory=dict)
    lost: LostRank | None = None
    profile: SweepProfile | None = None
    sustained: Sustained | None = None
    sustained_left_out: str | None = None  # the pick (its key) whose sustained trial --time-budget left no time for


# ---------------------------------------------------------------------------------------------
# The result set
# ---------------------------------------------------------------------------------------------


@dataclass
class ResultSet:
    """A whole sweep as saved to JSON (`schema_version` changes only when the format does): the
    config, the environment, one `ConfigResult` per config (raw trials, and the summary the
    analysis derives), the compute ceilings per batch size (`ceilings`), what the orchestration
    recorded (`sweep`) and what `analysis.analyze()` derived (`analysis`, None before it ran).
    `schema_written`: the version a migrated file was written with (None: this one)."""

    config: dict[str, Any]
    environment: dict[str, Any]
    results: list[ConfigResult] = field(default_factory=list)
    label: str = ""
    created_utc: str = ""
    tool_version: str = ""
    config_hash: str = ""
    ceilings: dict[int, Ceiling] = field(default_factory=dict)
    sweep: SweepRecord = field(default_factory=SweepRecord)
    analysis: Analysis | None = None
    schema_version: int = SCHEMA_VERSION
    schema_written: int | None = None

    @property
    def recommendation(self) -> Recommendation | None:
        """The knee (settings, findings, `dataloader_call`); None before the analysis ran."""
        return None if self.analysis is None else self.analysis.recommendation

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": "loaderbench",
            "tool_version": self.tool_version,
            "created_utc": self.created_utc,
            "label": self.label,
            "config_hash": self.config_hash,
            "config": self.config,
            "environment": self.environment,
            **({} if self.schema_written is None else {"schema_written": self.schema_written}),
            "ceilings": {"compute": {str(bs): c.to_dict() for bs, c in sorted(self.ceilings.items())}},
            "results": [r.to_dict() for r in self.results],
            "sweep": self.sweep.to_dict(),
            "analysis": None if self.analysis is None else self.analysis.to_dict(),
            "recommendation": None if self.recommendation is None else self.recommendation.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResultSet:
        """From `to_dict` output of this schema version (`schema.migrate` brings older files
        here)."""
        compute = (d.get("ceilings") or {}).get("compute") or {}
        analysis = d.get("analysis")
        return cls(
            schema_version=int(d["schema_version"]),
            schema_written=d.get("schema_written"),
            tool_version=d.get("tool_version", ""),
            created_utc=d.get("created_utc", ""),
            label=d.get("label", ""),
            config_hash=d.get("config_hash", ""),
            config=d.get("config", {}),
            environment=d.get("environment", {}),
            ceilings={int(bs): Ceiling.from_dict({**c, "batch_size": int(bs)}) for bs, c in compute.items()},
            results=[ConfigResult.from_dict(r) for r in d.get("results", [])],
            sweep=SweepRecord.from_dict(d.get("sweep") or {}),
            analysis=None if not analysis else Analysis.from_dict(analysis),
        )


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def save_results(result_set: ResultSet, path: Path) -> None:
    """Write `result_set` to `path` atomically (see `write_json_atomic`), so a crash or a full
    disk never leaves a half-written or corrupted previous file. Raises OutputError."""
    write_json_atomic(result_set.to_dict(), path)


def write_json_atomic(data: dict[str, Any], path: Path) -> None:
    """Write `data` as JSON to `path` through a temp file in the same folder, fsync, rename.

    Raises OutputError when the folder cannot be written; the previous file is untouched then.
    """
    path = Path(path)
    text = json.dumps(data, indent=1, allow_nan=False, default=_json_default)
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise OutputError(f"--output {path}: {blocker} is a file, not a folder; choose another --output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a result file is for sharing
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise OutputError(
            f"cannot write results to {path}: {exc.strerror or exc}; choose another --output"
        ) from None


def check_writable(path: Path) -> None:
    """Fail before the sweep starts if `path`'s folder cannot take a file (OutputError)."""
    path = Path(path)
    if path.exists() and path.is_dir():
        raise OutputError(f"--output {path} is a directory: give a file name such as {path}/run.json")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise OutputError(f"--output {path}: {blocker} is a file, not a folder; choose another --output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise OutputError(
            f"cannot write results to {path}: {exc.strerror or exc}; choose another --output"
        ) from None


def timestamped_path(name: str, now: Any, *, folder: str = "results") -> Path:
    """`results/<name>-<UTC time>.json`, the name made safe for a file name (`sweep` when empty):
    where a command writes its result unless told (`--output`)."""
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name or "sweep").strip("._") or "sweep"
    return Path(folder) / f"{safe}-{now.strftime('%Y%m%dT%H%M%SZ')}.json"


def check_result_path(path: Path) -> None:
    """A sweep's `--output`: a *.json file name (the result file is JSON whatever `--format`
    prints: UsageError otherwise) in a folder that can take it (OutputError)."""
    from loaderbench.errors import UsageError

    path = Path(path)
    if path.suffix.lower() != ".json" and not path.is_dir():
        raise UsageError(
            f"--output {path}: the result file is JSON, whatever --format prints; name it *.json "
            f"(for CSV on stdout: --format csv > {path.with_suffix('.csv').name})"
        )
    check_writable(path)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def read_results(path: Path | str) -> ResultSet:
    """Read a result file written by any supported loaderbench version.

    Raises ResultsFormatError (one line, exit code 2) when the file is missing, not JSON, not a
    loaderbench result, or of a schema version this loaderbench cannot read.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ResultsFormatError(f"{path}: no such result file") from None
    except UnicodeDecodeError:
        raise ResultsFormatError(f"{path}: not a text file; pass a result JSON written by `loaderbench sweep`") from None
    except OSError as exc:
        raise ResultsFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsFormatError(
            f"{path}: not JSON (line {exc.lineno}: {exc.msg}); pass a file written by "
            "`loaderbench sweep --output`"
        ) from None
    if isinstance(data, dict) and data.get("kind") == "storage":
        raise ResultsFormatError(
            f"{path}: a `loaderbench storage` probe, not a sweep result; pass a file written by "
            "`loaderbench sweep`"
        )
    data = mark_legacy_probes(migrate(data, path))
    try:
        return ResultSet.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsFormatError(f"{path}: malformed result file ({type(exc).__name__}: {exc})") from None
