"""A result set as a pandas DataFrame (`loaderbench.load_results`): one row per config and repeat,
the statistics derived from each trial's raw samples. pandas is imported when asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loaderbench.analysis import statistics as stats
from loaderbench.model import GRID_AXES
from loaderbench.results import ResultSet


def to_frame(result_set: ResultSet) -> Any:
    """A pandas DataFrame with one row per config and repeat (trial).

    Columns: the settings (`num_workers`, `pin_memory`, `prefetch`, `prefetch_factor`,
    `persistent_workers`, `batch_size`, `mp_context`, ..., then each loader argument of
    `--loader-arg` by its name), `key`, `status`, `error`, `repeat`, and
    per-trial statistics (`samples_per_s`, `stall_fraction`, `data_wait_p50_s`, `data_wait_p90_s`,
    `data_wait_p95_s`, `data_wait_p99_s`, `data_wait_max_s`, `compute_p50_s`, `first_batch_s`,
    `cpu_util_pct`, `gpu_util_pct`, `memory_pss_bytes`, `receive_p50_s`).
    A config with no trial (failed) gives one row with NaN statistics.
    """
    import pandas as pd

    from loaderbench.analysis import analyze

    if any(r.status == "ok" and r.trials and r.summary is None for r in result_set.results):
        analyze(result_set)  # summaries are derived from the raw trials
    usable = (result_set.environment or {}).get("usable_cpus")
    usable = usable if isinstance(usable, int) else None
    rows: list[dict[str, Any]] = []
    for r in result_set.results:
        base = {
            "key": r.key(), **{a.name: getattr(r.settings, a.name) for a in GRID_AXES},
            **dict(r.settings.loader_args), "cache": r.cache, "status": r.status,
            "error": r.error, "verdict": None if r.summary is None or r.summary.verdict is None else r.summary.verdict.value,
        }
        if not r.trials:
            rows.append({**base, "repeat": None})
            continue
        for i, t in enumerate(r.trials):
            rows.append(
                {
                    **base,
                    "repeat": i,
                    "samples_per_s": stats.trial_samples_per_s(t),
                    "stall_fraction": stats.trial_stall_fraction(t),
                    "data_wait_p50_s": stats.percentile(t.data_wait_s, 50),
                    "data_wait_p95_s": stats.percentile(t.data_wait_s, 95),
                    "data_wait_p90_s": stats.percentile(t.data_wait_s, 90),
                    "data_wait_p99_s": stats.percentile(t.data_wait_s, 99),
                    "data_wait_max_s": max(t.data_wait_s),
                    "compute_p50_s": stats.percentile(t.compute_s, 50),
                    "first_batch_s": t.first_batch_s,
                    "cpu_util_pct": t.cpu_util_pct,
                    "gpu_util_pct": t.gpu_util_pct,
                    "memory_pss_bytes": t.memory_pss_bytes,
                    "receive_p50_s": (stats.percentile(rx, 50) if (rx := t.receives_read_s(r.settings.num_workers, usable))
                                      else None),
                }
            )
    return pd.DataFrame(rows)


def load_results(path: Path | str) -> Any:
    """`loaderbench.load_results(path)`: a result file as a pandas DataFrame (see `to_frame`).

    Raises ResultsFormatError like `results.read_results`.
    """
    from loaderbench.results import read_results

    return to_frame(read_results(path))
