"""The compute ceiling of each config: what the step alone can take, in the samples its batches
really held.

A sweep records one ceiling per batch size (`ResultSet.ceilings["compute"]`): the step time of
one batch already on the device (measured) or the `sleep:MS` time (analytic). The step of
`sleep` and `spin` costs the same per batch whatever the batch holds, so its ceiling in
samples/s is the samples a config's batches held (counted: NOTE [samples per batch]) over the
step time; a model's step costs per sample, so its ceiling is the measured samples/s of the
batch it was fed. A batch size that is not what batches hold (a batch sampler that buckets, a
dataset whose items are several samples, a sampler with fewer indices than a batch) would
otherwise put rows above 100% of their ceiling.
"""

from __future__ import annotations

from typing import Any

from loaderbench.analysis.wait import samples_per_batch
from loaderbench.model import ConfigResult

PER_BATCH_STEPS = ("sleep", "spin")
"""Compute kinds whose step takes the same time for any batch."""


def compute_ceiling(result: ConfigResult, ceilings: dict[str, Any], compute_kind: str | None) -> float | None:
    """The compute ceiling of `result`, in samples/s (summed over ranks in a distributed sweep);
    None when its batch size has no ceiling.

    `ceilings` is `ResultSet.ceilings["compute"]`: {"<batch_size>": {"samples_per_s", "step_s",
    "samples_per_batch"?}}, where `samples_per_batch` (the samples of the batch the step was fed)
    defaults to the batch size. A per-batch step's rate is scaled by the samples the config's
    batches held over those the step was fed.
    """
    c = ceilings.get(str(result.settings.batch_size))
    if not c:
        return None
    rate = float(c["samples_per_s"])
    if compute_kind in PER_BATCH_STEPS and result.trials:
        fed = float(c.get("samples_per_batch") or result.settings.batch_size)
        return rate * samples_per_batch(result) / fed
    return rate


def ceilings_by_batch(results: list[ConfigResult], ceilings: dict[str, Any],
                      compute_kind: str | None) -> dict[str, dict[str, Any]]:
    """Per batch size, the ceiling as the table's footer and the plot show it: its record plus
    `samples_per_batch` (the median counted samples per batch of the measured configs of that
    batch size, None if none) and `samples_per_s` at that many samples."""
    out: dict[str, dict[str, Any]] = {}
    for bs, c in ceilings.items():
        entry = dict(c)
        rows = sorted((r for r in results if str(r.settings.batch_size) == bs and r.summary is not None
                       and r.summary.compute_ceiling_samples_per_s), key=samples_per_batch)
        entry["samples_per_batch"] = samples_per_batch(rows[len(rows) // 2]) if rows else None
        if rows and compute_kind in PER_BATCH_STEPS:
            entry["samples_per_s"] = rows[len(rows) // 2].summary.compute_ceiling_samples_per_s  # type: ignore[union-attr]
        out[bs] = entry
    return out
