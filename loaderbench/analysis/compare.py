"""Pure core of `loaderbench compare` and `check`: match configs across result sets, decide.

No torch, no pynvml, no I/O: the CI gate starts fast on a CPU-only runner. Everything is derived
from the raw per-batch samples kept in every `Trial` (see the timing model in measure/loop.py).

NOTE [ The decision rule ]
A regression needs BOTH a magnitude and a significance (asv's `compare` rule; a gate that fails
on noise gets switched off, one that misses a real slowdown is worthless):

1. Samples. With at least MIN_REPEATS (3) fresh-process trials on both sides, the unit is the
   trial: one value per repeat (its throughput samples / sum(step_s), or its stall fraction
   sum(data_wait_s) / sum(step_s)), so run-to-run noise (process start, page placement, a busy
   neighbour) is inside the test. With fewer, the unit is the batch: batch_size / step_s (or
   data_wait_s / step_s) of every measured batch; that sees only within-run noise, and the pair
   carries a warning saying so.
2. Effect. The metric of each side is what loaderbench reports: the median over repeats of the
   per-trial value. `samples_per_s` compares the ratio current / baseline (lower is worse);
   `stall_fraction` the difference current - baseline in fraction points (higher is worse; a
   ratio of two near-zero stalls would be meaningless).
3. Uncertainty. A seeded percentile bootstrap (Efron & Tibshirani, "An Introduction to the
   Bootstrap", 1993, ch. 13) of that effect, BOOTSTRAP_RESAMPLES resamples, at level 1 - alpha:
   repeats are resampled per side; with the batch unit, batches are resampled within each trial
   and each trial's metric recomputed. The generator is seeded from `seed` and the config key,
   so a comparison is reproducible bit for bit.
4. Significance. The two-sided Mann-Whitney U test (Mann & Whitney, Ann. Math. Statist. 18, 50,
   1947) with the normal approximation and the tie-corrected variance
   sigma^2 = n1 n2 / 12 * ((N + 1) - sum(t^3 - t) / (N (N - 1))), no continuity correction,
   when the sample sizes let an exact test reach alpha at all (2 / C(n1 + n2, n1) < alpha). With
   fewer samples (3 vs 3 repeats: the smallest exact p is 0.1), it falls back, as asv's
   `statistics.is_different` does, to the interval: significant when the bootstrap interval of
   the effect excludes "no change". For 3 vs 3 both say the same: every current repeat is on the
   other side of every baseline repeat.
5. Verdict. |effect| at least `threshold` (fraction for the ratio, fraction points for the stall)
   and significant: "regressed" / "improved" by direction; at least the threshold but not
   significant: "not significant" (asv's `~`); under the threshold: "unchanged", however
   significant (a 2% change that is real is not worth a red CI run).

NOTE [ What is comparable ]
Two result sets are compared only when all of these match (else every matched config is
"not comparable", and only `--strict` fails the gate on it):
- the machine fingerprint `environment["fingerprint"]` (CPU model, usable CPUs, memory, GPU,
  torch major.minor: env.environment_fingerprint);
- the workload fingerprint (kinds.workload_fingerprint): the dataset kind, the keys that
  define its workload (not the data path: comparing the same dataset on different storage is
  what `compare A B C` is for), the synthetic generator's version and the transform, the
  collate function, sampler and samples per batch, and the compute step;
- the page-cache state (`config["cache"]` or `config["measure"]["cache"]`, "as-is" when not
  recorded); configs measured cold and warm in one run are matched by `ConfigResult.key()`
  (`...-cold`, `...-warm`), so a cold row is never compared with a warm one;
- the schema version the file was written with (a migrated file keeps it in
  `ResultSet.schema_written`): numbers measured differently (schema.measured_alike: version 0
  measured memory as USS) are not compared with today's;
- the number of ranks (`environment["distributed"]["world_size"]`, 1 for a single-process
  sweep): a distributed sweep's samples/s is the sum over its ranks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from loaderbench import kinds
from loaderbench.analysis import statistics as stats
from loaderbench.analysis.thresholds import BOOTSTRAP_RESAMPLES, DEFAULT_ALPHA, DEFAULT_THRESHOLD, MIN_REPEATS
from loaderbench.errors import UsageError
from loaderbench.model import (
    GRID_AXES,
    ComputeSpec,
    ConfigResult,
    LoaderSettings,
    ServedFrom,
    Trial,
)
from loaderbench.results import ResultSet
from loaderbench.schema import measured_alike

METRICS = ("samples_per_s", "stall_fraction")


class Change(str, Enum):
    """The verdict of one config between a baseline and a current run (NOTE [ The decision
    rule ]); the values are what the outputs print."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    NOT_SIGNIFICANT = "not significant"
    NOT_COMPARABLE = "not comparable"
    MISSING = "missing"  # in the baseline, not in this run
    NEW = "new"  # in this run, not in the baseline
    FAILED = "failed"


VERDICTS = tuple(Change)
_EPS = 1e-12


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunInfo:
    """One side of a comparison: which run, and the facts that decide comparability."""

    name: str
    label: str
    created_utc: str
    tool_version: str
    schema_version: int
    machine_fingerprint: str | None
    workload_fingerprint: str
    cache_state: str
    workload: str
    files: int = 1
    ranks: int = 1  # a distributed sweep's world size (samples/s is summed over its ranks)
    fields: dict[str, Any] = field(default_factory=dict)  # workload_fields: what differs is named

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ConfigComparison:
    """The verdict of one config (matched by `config_key`) between baseline and current.

    `baseline` / `current`: the metric of each side (median over repeats), None when absent or
    failed. `effect`: current / baseline for samples_per_s, current - baseline for stall_fraction;
    `effect_low` / `effect_high`: its bootstrap interval at level 1 - alpha. `p_value`: the
    Mann-Whitney p (None when the interval decided, `test` == "bootstrap-ci"). `unit`: "repeats"
    or "batches". `fails_gate`: this row alone makes the gate exit 1 (regressed, or a config that
    ran in the baseline and fails now).
    """

    key: str
    settings: LoaderSettings | None
    verdict: Change
    baseline: float | None = None
    current: float | None = None
    effect: float | None = None
    effect_low: float | None = None
    effect_high: float | None = None
    p_value: float | None = None
    test: str = ""
    unit: str = ""
    n_baseline: int = 0
    n_current: int = 0
    fails_gate: bool = False
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["settings"] = None if self.settings is None else self.settings.to_dict()
        d["verdict"] = self.verdict.value
        return d


@dataclass(frozen=True)
class PairComparison:
    """Every config of one current run against the baseline."""

    current: RunInfo
    comparable: bool
    reasons: tuple[str, ...]
    rows: tuple[ConfigComparison, ...]
    warnings: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        """Number of rows per verdict (by its value), in Change order, verdicts with no row left out."""
        out = {v: 0 for v in Change}
        for r in self.rows:
            out[r.verdict] += 1
        return {k.value: n for k, n in out.items() if n}

    def row(self, key: str) -> ConfigComparison | None:
        return next((r for r in self.rows if r.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "current": self.current.to_dict(),
            "comparable": self.comparable,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "counts": self.counts(),
            "rows": [r.to_dict() for r in self.rows],
        }


@dataclass(frozen=True)
class Comparison:
    """`compare_results`' answer: one PairComparison per current run, all against `baseline`."""

    metric: str
    effect_kind: str  # "ratio" (samples_per_s) | "difference" (stall_fraction)
    threshold: float
    alpha: float
    seed: int
    baseline: RunInfo
    pairs: tuple[PairComparison, ...]
    keys: tuple[str, ...] = field(default=())

    def has_regression(self) -> bool:
        return any(r.fails_gate for p in self.pairs for r in p.rows)

    def has_not_comparable(self) -> bool:
        return any(not p.comparable for p in self.pairs) or any(
            r.verdict is Change.NOT_COMPARABLE for p in self.pairs for r in p.rows
        )

    def exit_code(self, *, strict: bool = False) -> int:
        """0 no regression; 1 a regression (or a newly failing config), or, with `strict`,
        anything not comparable."""
        if self.has_regression():
            return 1
        if strict and self.has_not_comparable():
            return 1
        return 0

    def to_dict(self, *, strict: bool = False) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "effect_kind": self.effect_kind,
            "threshold": self.threshold,
            "alpha": self.alpha,
            "seed": self.seed,
            "baseline": self.baseline.to_dict(),
            "keys": list(self.keys),
            "pairs": [p.to_dict() for p in self.pairs],
            "gate": {
                "strict": strict,
                "exit_code": self.exit_code(strict=strict),
                "regression": self.has_regression(),
                "not_comparable": self.has_not_comparable(),
            },
        }


# --------------------------------------------------------------------------------------------
# Fingerprints
# --------------------------------------------------------------------------------------------


def workload_fields(config: dict[str, Any]) -> dict[str, Any]:
    """What is measured (kinds.workload), as flat fields, so that a difference can be named."""
    out: dict[str, Any] = {}
    for k, v in kinds.workload(config).items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            out[f"dataset.{k}"] = v
    return out


def workload_fingerprint(config: dict[str, Any]) -> str:
    """kinds.workload_fingerprint: 12 hex digits identifying what is measured."""
    return kinds.workload_fingerprint(config)


def cache_state(config: dict[str, Any]) -> str:
    """The page-cache state a run was measured in: `config["cache"]` or `config["measure"]["cache"]`
    ("as-is", "cold", "warm", "both"), "as-is" when not recorded."""
    value = config.get("cache")
    if value is None:
        value = (config.get("measure") or {}).get("cache")
    if value is None:
        return "as-is"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _achieved_cache_state(rs: ResultSet, requested: str) -> str:
    """The requested cache state, unless some config could not reach it (`not cold`, e.g. on
    tmpfs): then "<state> (not achieved)", which is never comparable with a real <state> run."""
    missed = sorted({r.cache for r in rs.results if getattr(r, "cache", "").startswith("not ")})
    return f"{requested} (not achieved: {', '.join(missed)})" if missed else requested


def config_key(r: ConfigResult) -> str:
    """What matches a config across runs: `ConfigResult.key()` where the model has it (the
    settings key plus a controlled cache state, e.g. `-cold`), else the settings key."""
    key = getattr(r, "key", None)
    return str(key()) if callable(key) else r.settings.key()


def written_schema_version(rs: ResultSet) -> int:
    """The schema version the file was written with (before any migration on load)."""
    return int(rs.schema_version if rs.schema_written is None else rs.schema_written)


def describe_workload(config: dict[str, Any]) -> str:
    """A short human description, e.g. `tensor 3x32x32 cpu 0.2 ms + io 1 ms per sample | sleep:2`."""
    compute = config.get("compute")
    step = "default step" if not compute else ComputeSpec.from_dict(compute).label()
    return f"{kinds.describe(config.get('dataset') or {})} | {step}"


def run_info(rs: ResultSet, name: str | None = None, *, files: int = 1) -> RunInfo:
    """The RunInfo of a result set; `name` defaults to its label."""
    cfg = rs.config or {}
    fp = (rs.environment or {}).get("fingerprint")
    return RunInfo(
        name=name or rs.label or "run",
        label=rs.label,
        created_utc=rs.created_utc,
        tool_version=rs.tool_version,
        schema_version=written_schema_version(rs),
        machine_fingerprint=fp if isinstance(fp, str) and fp else None,
        workload_fingerprint=workload_fingerprint(cfg),
        cache_state=_achieved_cache_state(rs, cache_state(cfg)),
        workload=describe_workload(cfg),
        fields=workload_fields(cfg),
        files=files,
        ranks=int(((rs.environment or {}).get("distributed") or {}).get("world_size") or 1),
    )


def comparability(baseline: RunInfo, current: RunInfo) -> list[str]:
    """Why `current` cannot be compared with `baseline` (empty: it can)."""
    reasons: list[str] = []
    b, c = baseline.machine_fingerprint, current.machine_fingerprint
    if b is None or c is None:
        missing = baseline.name if b is None else current.name
        reasons.append(f"machine fingerprint missing in {missing}")
    elif b != c:
        reasons.append(f"different machine fingerprint ({b} vs {c})")
    if baseline.workload_fingerprint != current.workload_fingerprint:
        keys = sorted(set(baseline.fields) | set(current.fields))
        differs = [
            f"{k} {baseline.fields.get(k, 'default')!r} vs {current.fields.get(k, 'default')!r}"
            for k in keys if baseline.fields.get(k) != current.fields.get(k)
        ]
        what = "; ".join(differs) if differs else f"{baseline.workload} vs {current.workload}"
        reasons.append(
            f"different dataset/compute ({what}; fingerprint {baseline.workload_fingerprint} vs "
            f"{current.workload_fingerprint})"
        )
    if baseline.cache_state != current.cache_state:
        reasons.append(f"different cache state ({baseline.cache_state} vs {current.cache_state})")
    if baseline.ranks != current.ranks:
        reasons.append(
            f"different number of ranks ({baseline.ranks} vs {current.ranks}: samples/s is summed "
            "over a distributed sweep's ranks)"
        )
    if not measured_alike(baseline.schema_version, current.schema_version):
        reasons.append(
            f"different loaderbench schema (version {baseline.schema_version} vs {current.schema_version})"
        )
    return reasons


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test of `x` against `y`: (U of x, p).

    U counts the pairs with x > y (ties count 1/2). p from the normal approximation
    z = (U - n1 n2 / 2) / sigma with the tie-corrected sigma (see the module NOTE), no continuity
    correction. p = 1 when every value is tied. Raises ValueError on an empty sample.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("mann_whitney_u needs two non-empty samples")
    pooled = sorted([(float(v), 0) for v in x] + [(float(v), 1) for v in y])
    n = n1 + n2
    rank_sum_x = 0.0
    tie_term = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        avg_rank = (i + j) / 2.0 + 1.0  # ranks are 1-based
        t = j - i + 1
        tie_term += t**3 - t
        rank_sum_x += avg_rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        i = j + 1
    u_x = rank_sum_x - n1 * (n1 + 1) / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u_x, 1.0
    z = (u_x - n1 * n2 / 2.0) / math.sqrt(var)
    return u_x, min(1.0, math.erfc(abs(z) / math.sqrt(2.0)))


def min_attainable_p(n1: int, n2: int) -> float:
    """The smallest two-sided p an exact Mann-Whitney test can give for these sizes:
    2 / C(n1 + n2, n1). The test is used only when this is below alpha (as asv does)."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def _trial_value(metric: str, samples: int, step_s: Sequence[float], wait_s: Sequence[float]) -> float:
    total = float(sum(step_s))
    if total <= 0:
        return 0.0
    if metric == "samples_per_s":
        return samples / total
    return min(1.0, max(0.0, float(sum(wait_s)) / total))


def _usable_trials(r: ConfigResult) -> list[Any]:
    return [t for t in r.trials if t.step_s and sum(t.step_s) > 0]


def side_value(r: ConfigResult, metric: str) -> float | None:
    """The metric of one config as loaderbench reports it: median over repeats of the per-trial
    value (samples / sum(step_s), or sum(data_wait_s) / sum(step_s))."""
    trials = _usable_trials(r)
    if not trials:
        return None
    fn = stats.trial_samples_per_s if metric == "samples_per_s" else stats.trial_stall_fraction
    return float(statistics.median(fn(t) for t in trials))


def _job_scale(t: Trial) -> float:
    """1 for a single-process trial. For a distributed one (a copy of the slowest rank's trial
    with every rank's in `rank_trials`), the job's samples/s over that rank's own: its per-batch
    rates are scaled by this to stand for the whole job (the ranks step in lockstep)."""
    if not t.rank_trials:
        return 1.0
    own = t.samples / sum(t.step_s) if sum(t.step_s) > 0 else 0.0
    return stats.trial_samples_per_s(t) / own if own > 0 else 1.0


def trial_samples(r: ConfigResult, metric: str) -> list[float]:
    """One value per usable trial (the unit with >= MIN_REPEATS repeats); a distributed trial's
    samples/s is the whole job's (`stats.trial_samples_per_s`)."""
    if metric == "samples_per_s":
        return [stats.trial_samples_per_s(t) for t in _usable_trials(r)]
    return [_trial_value(metric, t.samples, t.step_s, t.data_wait_s) for t in _usable_trials(r)]


def batch_samples(r: ConfigResult, metric: str) -> list[float]:
    """One value per measured batch of every trial: batch_size / step_s (batches of zero
    duration are skipped; scaled to the whole job for a distributed trial, `_job_scale`) or
    data_wait_s / step_s clipped to [0, 1]."""
    out: list[float] = []
    for t in _usable_trials(r):
        waits = t.data_wait_s if len(t.data_wait_s) == len(t.step_s) else [0.0] * len(t.step_s)
        per_batch = t.samples / len(t.step_s) * _job_scale(t)
        for step, wait in zip(t.step_s, waits):
            if step <= 0:
                continue
            if metric == "samples_per_s":
                out.append(per_batch / step)
            else:
                out.append(min(1.0, max(0.0, wait / step)))
    return out


def _effect(metric: str, baseline: float, current: float) -> float | None:
    if metric == "samples_per_s":
        return current / baseline if baseline > 0 else None
    return current - baseline


def _rng(seed: int, key: str) -> Any:
    import numpy as np

    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(key.encode())])


def _bootstrap_side(r: ConfigResult, metric: str, unit: str, rng: Any, resamples: int) -> Any:
    """`resamples` bootstrap replicates of this side's metric (median over repeats)."""
    import numpy as np

    trials = _usable_trials(r)
    if unit == "repeats":
        vals = np.asarray(trial_samples(r, metric), dtype=float)
        idx = rng.integers(0, len(vals), size=(resamples, len(vals)))
        return np.median(vals[idx], axis=1)
    per_trial = []
    for t in trials:
        step = np.asarray(t.step_s, dtype=float)
        wait = np.asarray(t.data_wait_s if len(t.data_wait_s) == len(t.step_s) else [0.0] * len(step))
        n = len(step)
        per_batch = t.samples / n * _job_scale(t)
        reps = np.empty(resamples)
        chunk = max(1, 2_000_000 // n)
        for start in range(0, resamples, chunk):
            stop = min(resamples, start + chunk)
            idx = rng.integers(0, n, size=(stop - start, n))
            step_sum = step[idx].sum(axis=1)
            if metric == "samples_per_s":
                reps[start:stop] = np.where(step_sum > 0, per_batch * n / np.maximum(step_sum, 1e-300), 0.0)
            else:
                wait_sum = wait[idx].sum(axis=1)
                reps[start:stop] = np.clip(wait_sum / np.maximum(step_sum, 1e-300), 0.0, 1.0)
        per_trial.append(reps)
    return np.median(np.vstack(per_trial), axis=0)


def bootstrap_effect_interval(
    baseline: ConfigResult,
    current: ConfigResult,
    *,
    metric: str,
    unit: str,
    alpha: float,
    seed: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval (level 1 - alpha) of the effect (ratio or difference).

    Seeded from `seed` and the config key: the same inputs give the same interval. None when a
    side has no usable trial or a ratio's baseline replicate is 0.
    """
    import numpy as np

    rng = _rng(seed, config_key(baseline))
    b = _bootstrap_side(baseline, metric, unit, rng, resamples)
    c = _bootstrap_side(current, metric, unit, rng, resamples)
    if metric == "samples_per_s":
        if np.any(b <= 0):
            return None
        eff = c / b
    else:
        eff = c - b
    lo, hi = np.quantile(eff, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


def _worse(metric: str, effect: float, threshold: float) -> int:
    """+1 worse by at least the threshold, -1 better by at least it, 0 within it."""
    change = (1.0 - effect) if metric == "samples_per_s" else effect
    if change >= threshold - _EPS:
        return 1
    if -change >= threshold - _EPS:
        return -1
    return 0


def compare_config(
    baseline: ConfigResult,
    current: ConfigResult,
    *,
    metric: str = "samples_per_s",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    comparable: bool = True,
) -> ConfigComparison:
    """The verdict of one config present in both runs (see NOTE [ The decision rule ])."""
    key = config_key(baseline)
    b_ok = baseline.status == "ok" and bool(_usable_trials(baseline))
    c_ok = current.status == "ok" and bool(_usable_trials(current))
    b_val = side_value(baseline, metric) if b_ok else None
    c_val = side_value(current, metric) if c_ok else None
    row = ConfigComparison(key=key, settings=current.settings, verdict=Change.FAILED, baseline=b_val, current=c_val)
    if not c_ok:
        why = current.error or ("no measured batches" if current.status == "ok" else current.status)
        if not b_ok:
            b_st, c_st = (r.status if r.status != "ok" else "not measured" for r in (baseline, current))
            both = f"{c_st} in both runs" if b_st == c_st else f"{b_st} in the baseline, {c_st} in this run"
            return dataclasses.replace(row, verdict=Change.FAILED, note=f"{both}: {why}")
        # A newly failing config fails the gate, unless the runs are not comparable (then
        # nothing is a regression; --strict fails on the pair instead).
        return dataclasses.replace(row, verdict=Change.FAILED, fails_gate=comparable,
                                   note=f"{current.status}: {why}" + ("" if comparable else " (runs not comparable)"))
    if not b_ok:
        why = baseline.error or ("no measured batches" if baseline.status == "ok" else baseline.status)
        return dataclasses.replace(row, verdict=Change.FAILED, note=f"failed in the baseline only ({why})")
    if not comparable:
        return dataclasses.replace(row, verdict=Change.NOT_COMPARABLE, note="see the reasons above")
    assert b_val is not None and c_val is not None
    n_b, n_c = len(_usable_trials(baseline)), len(_usable_trials(current))
    unit = "repeats" if min(n_b, n_c) >= MIN_REPEATS else "batches"
    if unit == "repeats":
        xs_b, xs_c = trial_samples(baseline, metric), trial_samples(current, metric)
    else:
        xs_b, xs_c = batch_samples(baseline, metric), batch_samples(current, metric)
    effect = _effect(metric, b_val, c_val)
    if effect is None or not xs_b or not xs_c:
        return dataclasses.replace(row, verdict=Change.FAILED, note="baseline throughput is 0")
    interval = bootstrap_effect_interval(baseline, current, metric=metric, unit=unit, alpha=alpha, seed=seed)
    lo, hi = interval if interval is not None else (None, None)
    no_change = 1.0 if metric == "samples_per_s" else 0.0
    if min_attainable_p(len(xs_b), len(xs_c)) < alpha:
        _, p = mann_whitney_u(xs_c, xs_b)
        test, significant = "mann-whitney", p < alpha
    else:
        p = None
        test = "bootstrap-ci"
        significant = lo is not None and hi is not None and (lo > no_change or hi < no_change)
    direction = _worse(metric, effect, threshold)
    if direction == 0:
        verdict = Change.UNCHANGED
    elif not significant:
        verdict = Change.NOT_SIGNIFICANT
    else:
        verdict = Change.REGRESSED if direction > 0 else Change.IMPROVED
    return dataclasses.replace(
        row,
        verdict=verdict,
        effect=effect,
        effect_low=lo,
        effect_high=hi,
        p_value=p,
        test=test,
        unit=unit,
        n_baseline=len(xs_b),
        n_current=len(xs_c),
        fails_gate=verdict is Change.REGRESSED,
    )


# --------------------------------------------------------------------------------------------
# Whole result sets
# --------------------------------------------------------------------------------------------


NOT_HOW_MEASURED = frozenset({"cache", "search", "time_budget_s", "tolerance", "config_timeout_s"})


def _measure_differences(baseline: ResultSet, current: ResultSet) -> list[str]:
    """Measure settings recorded by both runs that differ (a key one file does not record, e.g.
    written by an older version, is not a difference; the cache state is a comparability rule;
    the keys that choose which configs are measured, not how one is, are left out: a `check`
    measures a searched baseline's configs with --search grid)."""
    b = (baseline.config or {}).get("measure") or {}
    c = (current.config or {}).get("measure") or {}
    keys = sorted(k for k in set(b) & set(c) if b[k] != c[k] and k not in NOT_HOW_MEASURED)
    return [f"measure.{k}: {b[k]!r} vs {c[k]!r}" for k in keys]


def compare_pair(
    baseline: ResultSet,
    current: ResultSet,
    *,
    baseline_info: RunInfo,
    current_info: RunInfo,
    metric: str,
    threshold: float,
    alpha: float,
    seed: int,
) -> PairComparison:
    """Every config of `current` against `baseline` (matched by `config_key`)."""
    reasons = comparability(baseline_info, current_info)
    comparable = not reasons
    b_by = {config_key(r): r for r in baseline.results}
    c_by = {config_key(r): r for r in current.results}
    rows: list[ConfigComparison] = []
    for key, b in b_by.items():
        c = c_by.get(key)
        if c is None:
            rows.append(
                ConfigComparison(
                    key=key, settings=b.settings, verdict=Change.MISSING,
                    baseline=side_value(b, metric) if b.status == "ok" else None,
                    note="in the baseline, not in this run",
                )
            )
            continue
        rows.append(
            compare_config(
                b, c, metric=metric, threshold=threshold, alpha=alpha, seed=seed, comparable=comparable
            )
        )
    for key, c in c_by.items():
        if key in b_by:
            continue
        c_ok = c.status == "ok" and bool(_usable_trials(c))
        rows.append(
            ConfigComparison(
                key=key, settings=c.settings, verdict=Change.NEW if c_ok else Change.FAILED,
                current=side_value(c, metric) if c_ok else None,
                note="not in the baseline" if c_ok else f"not in the baseline; {c.status}: {c.error}",
            )
        )
    warnings: list[str] = []
    if b_by and c_by and not set(b_by) & set(c_by):
        # Config by config, two runs of different settings share nothing: say so rather than
        # pass quietly on "missing" and "new" rows (not comparable: --strict fails on it).
        comparable = False
        reasons.append(
            "no config in common with the baseline, so nothing was compared (baseline: "
            f"{', '.join(sorted(b_by)[:3])}{', ...' if len(b_by) > 3 else ''}; this run: "
            f"{', '.join(sorted(c_by)[:3])}{', ...' if len(c_by) > 3 else ''}); measure the same settings on both sides"
        )
    diffs = _measure_differences(baseline, current)
    if diffs:
        warnings.append("measured differently: " + "; ".join(diffs))
    cached = [_cache_served(baseline), _cache_served(current)]
    if cached[0][0] * 2 > cached[0][1] and cached[1][0] * 2 > cached[1][1]:
        names = ", ".join(sorted(cached[0][2] | cached[1][2]))
        warnings.append(
            f"both runs were served from caches ({names}): {cached[0][0]} of {cached[0][1]} rows of the baseline "
            f"and {cached[1][0]} of {cached[1][1]} of this run got their samples from a cache, not the device "
            "(`loaderbench show` gives each row's bytes), so this comparison measured caches rather than devices"
        )
    else:
        for (n, total, which), who in zip(cached, ("the baseline", "this run")):
            if n:
                warnings.append(
                    f"{n} of {total} rows of {who} were served from a cache ({', '.join(sorted(which))}), not "
                    "the device: their throughput is not the storage's"
                )
    if any(r.unit == "batches" for r in rows):
        warnings.append(
            f"fewer than {MIN_REPEATS} repeats on a side: the test uses per-batch samples and sees "
            f"no run-to-run noise; sweep with --repeats {MIN_REPEATS} or more for a trustworthy gate"
        )
    return PairComparison(
        current=current_info, comparable=comparable, reasons=tuple(reasons), rows=tuple(rows),
        warnings=tuple(warnings),
    )


def _cache_served(rs: ResultSet) -> tuple[int, int, set[str]]:
    """(rows served from a cache, rows measured, which caches) of a result set (model.ServedFrom)."""
    measured = [r for r in rs.results if r.status == "ok" and r.summary is not None]
    served = [r.summary.served_from for r in measured if r.summary is not None and r.summary.served_from]
    caches = [v for v in served if ServedFrom(v).is_cache]
    return len(caches), len(measured), set(caches)


def compare_results(
    baseline: ResultSet,
    currents: list[ResultSet],
    *,
    metric: str = "samples_per_s",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    names: Sequence[str] | None = None,
    files: Sequence[int] | None = None,
) -> Comparison:
    """Compare every run in `currents` with `baseline`, config by config.

    `metric`: "samples_per_s" (lower is worse) or "stall_fraction" (higher is worse).
    `threshold`: the smallest change that counts (a fraction of the baseline's throughput, or
    stall fraction points). `alpha`: the significance level of the test and 1 - the interval's
    level. `seed`: the bootstrap's seed. `names` (baseline first) and `files` (how many result
    files were pooled into each side) are for display. Raises UsageError for an unknown metric,
    a threshold outside (0, 10] or an alpha outside (0, 0.5).
    """
    if metric not in METRICS:
        raise UsageError(f"--metric: expected one of {', '.join(METRICS)}, got {metric!r}")
    if not 0 < threshold <= 10:
        raise UsageError(f"--threshold: expected a fraction such as 10% or 0.1, got {threshold!r}")
    if not 0 < alpha < 0.5:
        raise UsageError(f"--alpha: expected a level such as 0.05, got {alpha!r}")
    if not currents:
        raise UsageError("compare needs a baseline and at least one more result")
    all_names = list(names) if names is not None else [rs.label or f"run{i}" for i, rs in enumerate([baseline, *currents])]
    counts = list(files) if files is not None else [1] * (len(currents) + 1)
    base_info = run_info(baseline, all_names[0], files=counts[0])
    pairs = []
    for i, rs in enumerate(currents, start=1):
        info = run_info(rs, all_names[i], files=counts[i])
        pairs.append(
            compare_pair(
                baseline, rs, baseline_info=base_info, current_info=info,
                metric=metric, threshold=threshold, alpha=alpha, seed=seed,
            )
        )
    keys: list[str] = [config_key(r) for r in baseline.results]
    for rs in currents:
        for r in rs.results:
            if config_key(r) not in keys:
                keys.append(config_key(r))
    return Comparison(
        metric=metric,
        effect_kind="ratio" if metric == "samples_per_s" else "difference",
        threshold=threshold,
        alpha=alpha,
        seed=seed,
        baseline=base_info,
        pairs=tuple(pairs),
        keys=tuple(keys),
    )


def pool_results(sets: Sequence[ResultSet], names: Sequence[str]) -> ResultSet:
    """Join several runs of the same workload on the same machine into one result set whose
    configs hold every run's trials (e.g. base/1.json base/2.json base/3.json of an interleaved
    CI job). Raises UsageError naming the files when they are not comparable with the first."""
    if not sets:
        raise UsageError("no result files to pool")
    first = sets[0]
    first_info = run_info(first, names[0])
    for rs, name in zip(sets[1:], names[1:]):
        reasons = comparability(first_info, run_info(rs, name))
        if reasons:
            raise UsageError(
                f"cannot pool {name} with {names[0]}: {'; '.join(reasons)}; compare them instead"
            )
    by_key: dict[str, ConfigResult] = {}
    for rs in sets:
        for r in rs.results:
            key = config_key(r)
            if key not in by_key:
                by_key[key] = dataclasses.replace(
                    r, trials=list(r.trials), normalized_from=list(r.normalized_from),
                    warnings=list(r.warnings),
                )
                continue
            into = by_key[key]
            if r.status != "ok" and into.status == "ok":
                into.status, into.error = r.status, r.error
            into.trials.extend(r.trials)
    results = list(by_key.values())
    usable = (first.environment or {}).get("usable_cpus")
    for r in results:
        if r.status == "ok" and r.trials:
            r.summary = stats.summarize(r.trials, r.settings.num_workers, usable if isinstance(usable, int) else None)
    return dataclasses.replace(
        first,
        results=results,
        analysis=None,  # the pooled trials are analysed again
        created_utc=min((rs.created_utc for rs in sets if rs.created_utc), default=first.created_utc),
    )


def baseline_loader_args(baseline: ResultSet) -> dict[str, tuple[Any, ...]]:
    """The loader arguments that re-create the baseline's configs (`--loader-arg`): per name,
    the values its configs took, in the order the user listed them (their only cost order)."""
    seen: dict[str, dict[Any, int]] = {}
    for r in baseline.results:
        for (name, value), order in zip(r.settings.loader_args, r.settings.loader_arg_order):
            seen.setdefault(name, {}).setdefault(value, order)
    return {name: tuple(sorted(values, key=lambda v: values[v])) for name, values in seen.items()}


def baseline_grid(baseline: ResultSet) -> dict[str, tuple[Any, ...]]:
    """The grid axes that re-create the baseline's configs (their product may add a few: those
    come out as "new" and never fail the gate): per axis of GRID_AXES, the values its configs
    took (leaving out the idle value a config without workers takes on a workers-only axis), in
    the axis's cost order (an axis without one: the order the user listed them in). Raises
    UsageError for a baseline without configs."""
    settings = [r.settings for r in baseline.results]
    if not settings:
        raise UsageError("the baseline has no configs to check; pass a result file with results")
    grid: dict[str, tuple[Any, ...]] = {}
    for a in GRID_AXES:
        values = [getattr(s, a.name) for s in settings if not (a.workers_only and s.num_workers == 0)]
        listed: dict[Any, int] = {}
        for s in settings:  # an axis without a cost order keeps the user's order (Axis.listed)
            listed.setdefault(getattr(s, a.name), s.listed_at(a.name))
        unique = sorted(dict.fromkeys(values), key=listed.__getitem__ if a.listed else a.order)
        grid[a.name] = tuple(unique) if unique else (a.default or (a.idle,))
    return grid
