"""A model of the input pipeline fitted to measured configs: predicted samples/s and stall for the
configs that were not measured, what-if questions (fewer or more CPUs), and the error of each
prediction where the config was measured too.

Pure: no torch, no I/O.

NOTE [pipeline model]
    A training step takes batches from the loader; in steady state the loop runs at the slower
    of two rates, softened where they meet (jitter in either makes the other wait): the main
    thread's, and the loader's rate L(W) with W workers, bounded two ways:
          W x r      one worker builds r samples/s (the loader's rate at a config, over its
                     workers, at a count where the CPUs are not shared: NOTE [which rate
                     stands for the loader]);
          U / kappa  every sample costs the process tree kappa CPU-seconds (its measured CPU
                     over its throughput), and there are U usable CPUs: the curve bends where
                     the CPUs saturate.
    The main thread takes each finished batch from a worker (the receive floor, measured
    directly) and then steps (the compute ceiling C: the step fed a batch already on the
    device): in series, so its rate is C' = 1 / (1/C + 1/R) with R = samples-per-batch /
    receive seconds.
    With workers, loading overlaps the main thread: S = softmin(L, C') = (L^-k + C'^-k)^(-1/k),
    k calibrated on the measured configs (the larger k, the sharper the corner). With 0 workers
    the main process builds and then steps: S = 1 / (1/L0 + 1/C). The stall is 1 - S/C.
    This is the roofline idea (Williams et al., CACM 2009) applied to a loader and a step, as
    pipeline analysers such as Plumber (Kuchnik et al., MLSys 2022) do for tf.data: each
    resource's measured rate is a ceiling and the smallest one binds. Rates are fitted per
    series of configs that differ only in num_workers (pin_memory, the prefetcher and the
    batch size change C, R and k), and r and kappa are pooled over all series (building a
    batch does not depend on them).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from loaderbench.analysis.thresholds import (
    AT_THE_LOWER_RATE,
    BOUND_STALL,
    CLEARS_STALL,
    DEFAULT_SHARPNESS,
    HARD_CORNER_RATIO,
    SHARPNESS_MAX,
    SHARPNESS_MIN,
    UNCONTENDED_SHARE,
)
from loaderbench.conclusions import (
    FitInputs,
    MoreWorkers,
    Prediction,
    PredictionErrors,
    WhatIf,
    WhatIfAnswer,
    WhyNoPrediction,
)
from loaderbench.model import GRID_AXES, ConfigResult, LoaderSettings, Verdict

__all__ = ["Fit", "Prediction", "WhatIf", "fit", "parse_what_if", "predict", "split_what_if", "what_if_cpus", "what_if_disk"]


def _ranked(results: Sequence[ConfigResult]) -> list[ConfigResult]:
    return [r for r in results if r.ranked]


def _per_batch(r: ConfigResult) -> float:
    """Samples per batch of a summarised config, as counted (the summaries pass)."""
    assert r.summary is not None
    return r.summary.samples_per_batch or float(r.settings.batch_size)


def softmin(a: float, b: float, k: float) -> float:
    """(a^-k + b^-k)^(-1/k): the smaller of a and b, softened where they meet.

    >>> round(softmin(800.0, 800.0, 6.0), 1)
    712.7
    """
    if a <= 0 or b <= 0:
        return 0.0
    lo = min(a, b)
    return lo * ((a / lo) ** -k + (b / lo) ** -k) ** (-1.0 / k)


def series_of(settings: LoaderSettings) -> LoaderSettings:
    """The settings without their worker count (num_workers 0, the workers-only axes idle): the
    series a config belongs to, and the 0-worker config every series shares."""
    values = settings.to_dict()
    values["num_workers"] = 0
    for a in GRID_AXES:
        if a.workers_only:
            values[a.name] = a.idle
    return LoaderSettings(**values)


def with_workers(base: LoaderSettings, workers: int) -> LoaderSettings:
    """`base` (a config of the series) at `workers` workers, normalised for 0 workers."""
    return series_of(base) if workers == 0 else replace(base, num_workers=workers)


@dataclass(frozen=True)
class Fit:
    """One series' fitted rates (NOTE [pipeline model]); every rate in samples/s, None when
    nothing measured it."""

    per_worker: float | None
    cpu_s_per_sample: float | None
    main: float | None
    zero_workers: float | None
    compute: float | None
    sharpness: float
    inputs: FitInputs = FitInputs()
    device: float | None = None  # what the storage device can feed, samples/s (what_if_disk)

    def loader(self, workers: int, usable_cpus: int | None) -> float | None:
        """L(W): the loader's rate with `workers` workers on `usable_cpus` CPUs."""
        if workers == 0:
            zero = self.zero_workers or self.per_worker
            return min(zero, self.device) if zero and self.device else zero
        if not self.per_worker:
            return None
        bounds = [workers * self.per_worker]
        if usable_cpus and self.cpu_s_per_sample:
            bounds.append(usable_cpus / self.cpu_s_per_sample)
        out = bounds[0]
        for b in bounds[1:]:
            out = softmin(out, b, self.sharpness)
        # The device serves every worker's reads: its rate is a hard ceiling (NOTE [storage what-if]).
        return min(out, self.device) if self.device else out

    def samples_per_s(self, workers: int, usable_cpus: int | None) -> float | None:
        """Predicted throughput at `workers` workers, in samples/s (None when unknown)."""
        load = self.loader(workers, usable_cpus)
        if load is None:
            return None
        if not self.compute:
            return load
        if workers == 0:
            return 1.0 / (1.0 / load + 1.0 / self.compute)
        # The main process receives each batch, then steps: in series, one rate.
        step = self.compute if not self.main else 1.0 / (1.0 / self.compute + 1.0 / self.main)
        return softmin(load, step, self.sharpness)

    def stall_fraction(self, samples_per_s: float) -> float | None:
        """1 - S / C, the predicted share of the step's time spent waiting."""
        return None if not self.compute else max(0.0, 1.0 - samples_per_s / self.compute)


def _loader_rate(r: ConfigResult) -> float | None:
    """The loader's own rate at this config: the measured throughput where the loader bound the
    window (verdict loader-bound, stall at least BOUND_STALL), else the probed loader-alone rate
    (at least the throughput), else None.

    NOTE [which rate stands for the loader]
        A window in which the step waited a quarter of its time or more for batches ran at what
        the loader delivers: its workers were never held back by a full queue. That rate, with
        the main process competing for the CPUs as it does in training, is the loader's rate.
        The loader-alone probe after the window is a second, shorter reading: at many workers
        its half second covers about one round of batches (a worker builds one batch in
        W / rate seconds), so it swings with the phase of the workers. On the H200 case it read
        1,339-4,576 samples/s where the windows read 2,699-4,060, and 4 workers probed at 1,657
        against a window of 972 with the four workers' CPUs full. Replaying the recorded H200
        searches (each prediction fitted on the configs measured before it), taking the window
        for such configs brought the median error from 13.8% to 8.9% and the p90 from 32% to
        26% (docs/benchmarks.md, "Time to the answer")."""
    s = r.summary
    assert s is not None
    if s.verdict is Verdict.LOADER_BOUND and s.stall_fraction >= BOUND_STALL:
        return s.samples_per_s
    if s.loader_ceiling_samples_per_s:
        return max(s.loader_ceiling_samples_per_s, s.samples_per_s)
    return s.samples_per_s if s.verdict is Verdict.LOADER_BOUND else None


def _sharpness(rows: Sequence[ConfigResult]) -> float:
    """k such that softmin(L, C, k) meets the measured throughput, median over the configs
    with workers where L and C are known and the loop ran below both (bisection on k in
    [1.5, 30]); a config whose L and C are within 25% of each other and that ran at the lower
    one counts as a hard corner (30). DEFAULT_SHARPNESS when no config says."""
    ks = []
    for r in rows:
        s = r.summary
        assert s is not None
        load, c = _loader_rate(r), s.compute_ceiling_samples_per_s
        if r.settings.num_workers == 0 or not load or not c:
            continue
        if s.samples_per_s >= AT_THE_LOWER_RATE * min(load, c):
            if 1.0 / HARD_CORNER_RATIO <= load / c <= HARD_CORNER_RATIO:
                ks.append(SHARPNESS_MAX)  # both rates close, and the loop ran at the lower: a hard corner
            continue
        lo, hi = SHARPNESS_MIN, SHARPNESS_MAX
        if softmin(load, c, lo) > s.samples_per_s:
            ks.append(lo)
            continue
        for _ in range(40):
            mid = (lo + hi) / 2
            if softmin(load, c, mid) < s.samples_per_s:
                lo = mid
            else:
                hi = mid
        ks.append((lo + hi) / 2)
    return float(statistics.median(ks)) if ks else DEFAULT_SHARPNESS


def _ranks(r: ConfigResult) -> int:
    """The ranks whose rows were summed into `r` (1 outside a distributed sweep)."""
    return max([t.world_size or 1 for t in r.trials] or [1])


def fit(results: Sequence[ConfigResult], series: LoaderSettings, usable_cpus: int | None) -> Fit:
    """The model of `series` (a `series_of` value) from the measured configs: its own configs
    for C, R, k and L0, and every config with workers (all series) for r and kappa."""
    ok = _ranked(results)
    with_w = [r for r in ok if r.settings.num_workers > 0]
    mine = [r for r in ok if series_of(r.settings) == series]
    mine_w = [r for r in mine if r.settings.num_workers > 0]
    # r: one worker's rate, from configs whose workers do not share the CPUs (else the least
    # contended ones), pooled over series.
    cap = (usable_cpus or 1) * UNCONTENDED_SHARE
    rates = [(r.settings.num_workers, load / r.settings.num_workers) for r in with_w
             if (load := _loader_rate(r))]
    free = [x for w, x in rates if w <= max(1.0, cap)] or [x for w, x in rates if w == min(w for w, _ in rates)]
    per_worker = max(free) if free else None
    # kappa: CPU-seconds of the process tree per sample.
    kappas = [r.summary.cpu_util_pct / 100.0 / r.summary.samples_per_s for r in with_w  # type: ignore[union-attr]
              if r.summary.cpu_util_pct and r.summary.samples_per_s > 0]  # type: ignore[union-attr]
    kappa = float(statistics.median(kappas)) if kappas else None
    # R: samples per batch over the receive floor, from this series' configs with workers; in a
    # distributed sweep every rank's main process receives its own batches (x world size).
    mains = [_ranks(r) * _per_batch(r) / r.summary.receive_p50_s for r in mine_w  # type: ignore[union-attr]
             if r.summary.receive_p50_s and r.summary.receive_p50_s > 0]  # type: ignore[union-attr]
    main = float(statistics.median(mains)) if mains else None
    zero = next((r for r in mine if r.settings.num_workers == 0), None)
    zero_rate = None if zero is None else _loader_rate(zero)
    ceilings = [r.summary.compute_ceiling_samples_per_s for r in (mine or ok)  # type: ignore[union-attr]
                if r.summary.compute_ceiling_samples_per_s]  # type: ignore[union-attr]
    compute = float(statistics.median(ceilings)) if ceilings else None
    k = _sharpness(mine_w or with_w)
    inputs = FitInputs(sorted(r.settings.key() for r in ok), per_worker, kappa, main, zero_rate, compute, usable_cpus, k)
    return Fit(per_worker, kappa, main, zero_rate, compute, k, inputs)


def predict(results: Sequence[ConfigResult], cells: Sequence[LoaderSettings], usable_cpus: int | None,
            *, exclude_measured: bool = False, fit_cpus: int | None = None) -> list[Prediction]:
    """The model's prediction for every cell (a config of the grid) with `usable_cpus` CPUs,
    fitted on `results` (the measured configs, measured with `fit_cpus` CPUs, default
    `usable_cpus`; a prediction never uses the cell's own measurement when `exclude_measured`,
    which gives honest errors: leave-one-out). Cells whose series has no rates are left out."""
    fit_on = usable_cpus if fit_cpus is None else fit_cpus
    ok = {r.settings: r for r in _ranked(results)}
    fits: dict[LoaderSettings, Fit] = {}
    out = []
    for cell in cells:
        measured = ok.get(cell)
        pool = [r for r in results if r.settings != cell] if exclude_measured and measured else results
        key = series_of(cell)
        f = fit(pool, key, fit_on) if exclude_measured and measured else fits.setdefault(
            key, fit(results, key, fit_on))
        rate = f.samples_per_s(cell.num_workers, usable_cpus)
        if rate is None or not math.isfinite(rate):
            continue
        out.append(Prediction(cell, rate, f.stall_fraction(rate),
                              None if measured is None else measured.summary.samples_per_s))  # type: ignore[union-attr]
    return out


def prediction_errors(predictions: Sequence[Prediction]) -> PredictionErrors | None:
    """Median and p90 of |error| over the predictions that were also measured (None if none)."""
    errs = sorted(abs(p.error) for p in predictions if p.error is not None)
    if not errs:
        return None
    p90 = errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)]
    return PredictionErrors(len(errs), float(statistics.median(errs)), p90)


def predicted_knee(predictions: Sequence[Prediction], tolerance: float) -> Prediction | None:
    """The fewest-workers predicted config within `tolerance` of the best prediction (ties: the
    structural order), or None."""
    if not predictions:
        return None
    top = max(p.samples_per_s for p in predictions)
    within = [p for p in predictions if p.samples_per_s >= (1.0 - tolerance) * top]
    return min(within, key=lambda p: p.settings.structural_key())


def _anchored(preds: list[Prediction], results: Sequence[ConfigResult], cells: Sequence[LoaderSettings],
              measured_cpus: int) -> list[Prediction]:
    """The what-if curve anchored to the measured rows: each prediction times the model's own
    error at the nearest measured worker count of the series on the machine that was measured
    (measured / predicted there, with `measured_cpus` CPUs), so that with K = measured_cpus the
    measured counts come out as measured and the model supplies only how K changes them."""
    here = {p.settings.num_workers: p.samples_per_s for p in predict(results, cells, measured_cpus)}
    ok = {r.settings.num_workers: r.summary.samples_per_s for r in _ranked(results)  # type: ignore[union-attr]
          if r.settings in set(cells)}
    factors = {w: ok[w] / here[w] for w in ok if here.get(w)}
    if not factors:
        return preds
    out = []
    for p in preds:
        w = p.settings.num_workers
        nearest = min(factors, key=lambda m: (abs(m - w), m))
        rate = p.samples_per_s * factors[nearest]
        out.append(Prediction(p.settings, rate, None if p.stall_fraction is None else
                              max(0.0, 1.0 - (1.0 - p.stall_fraction) * factors[nearest]), p.measured_samples_per_s))
    return out


def parse_what_if(text: str) -> WhatIf:
    """`cpus=K`, `disk=MBPS[,IOPS]` or `ranks=N` -> a WhatIf (ValueError naming the forms otherwise)."""
    forms = ("cpus=K (usable CPUs, e.g. cpus=8), disk=MBPS[,IOPS] (a device's MB/s and reads/s, e.g. disk=150,200) "
             "or ranks=N (data-parallel ranks, e.g. ranks=8)")
    key, _, value = str(text).partition("=")
    key, value = key.strip(), value.strip()
    if key == "cpus" and value.isdigit() and int(value) >= 1:
        return WhatIf(cpus=int(value))
    if key == "ranks" and value.isdigit() and 1 <= int(value) <= 1_000_000:
        return WhatIf(ranks=int(value))
    if key == "disk":
        parts = [p.strip() for p in value.split(",")]
        try:
            nums = [float(p) for p in parts]
        except ValueError:
            nums = []
        if 1 <= len(nums) <= 2 and all(math.isfinite(x) and x > 0 for x in nums):
            return WhatIf(disk_mb_per_s=nums[0], disk_iops=nums[1] if len(nums) == 2 else None)
    raise ValueError(f"expected {forms}, got {text!r}")


def split_what_if(questions: Sequence[WhatIf]) -> tuple[WhatIf | None, WhatIf | None]:
    """The questions asked (`--what-if`, given once or more) as (the cpus= or disk= one, the
    ranks= one), each None when not asked. Raises ValueError for two of a kind: the pipeline
    model answers one cpus= or disk= question at a time, and ranks=N combines with either."""
    model = [q for q in questions if q.ranks is None]
    ranks = [q for q in questions if q.ranks is not None]
    if len(model) > 1 or len(ranks) > 1:
        raise ValueError("one cpus= or disk= question and one ranks= question at most, "
                         "e.g. --what-if cpus=8 --what-if ranks=16")
    return (model[0] if model else None), (ranks[0] if ranks else None)


def _curve(preds: Sequence[Prediction]) -> list[tuple[int, float]]:
    return [(p.settings.num_workers, p.samples_per_s) for p in preds]


def shown_workers(knee_workers: int, top: int, cpus: int | None) -> list[int]:
    """The worker counts a what-if sentence quotes from a curve up to `top` workers: 0, powers
    of two, `cpus` and the knee's neighbours."""
    pts = {0, knee_workers - 1, knee_workers, knee_workers + 1, top} | ({cpus} if cpus else set())
    p = 1
    while p <= top:
        pts.add(p)
        p *= 2
    return sorted(w for w in pts if 0 <= w <= top)


def what_if_cpus(results: Sequence[ConfigResult], base: LoaderSettings, cpus: int, tolerance: float,
                 max_workers: int | None = None, measured_cpus: int | None = None) -> WhatIfAnswer | None:
    """Predicted throughput of `base`'s series with `cpus` usable CPUs, at every worker count
    from 0 to `max_workers`, and its predicted knee (the fewest workers within
    `tolerance` of the best prediction; `max_workers` defaults to twice the larger of `cpus` and
    the most workers measured, since a loader that waits on I/O gains from more workers than
    CPUs): the model fitted on `results` (measured with `measured_cpus` CPUs, which decides
    which of them ran uncontended) and evaluated with U = cpus (NOTE [pipeline model]),
    anchored to the measured rows when `measured_cpus` is known (`_anchored`). None when the
    series cannot be predicted."""
    widest = max((r.settings.num_workers for r in results), default=0)
    top_w = max_workers if max_workers is not None else 2 * max(cpus, widest)
    cells = [with_workers(base, w) for w in range(0, top_w + 1)]
    preds = predict(results, cells, cpus, fit_cpus=measured_cpus)
    if measured_cpus:
        preds = _anchored(preds, results, cells, measured_cpus)
    knee = predicted_knee(preds, tolerance)
    if knee is None:
        return None
    curve = _curve(preds)
    return WhatIfAnswer(WhatIf(cpus=cpus), knee=knee.settings, knee_samples_per_s=knee.samples_per_s,
                        knee_stall_fraction=knee.stall_fraction, curve=curve,
                        shown_workers=shown_workers(knee.settings.num_workers, max(w for w, _ in curve), cpus))


def what_if_disk(results: Sequence[ConfigResult], base: LoaderSettings, mb_per_s: float, iops: float | None,
                 tolerance: float, usable_cpus: int | None, max_workers: int | None = None) -> WhatIfAnswer:
    """Predicted throughput of `base`'s series if the dataset's files were read from a device of
    `mb_per_s` MB/s (10^6 bytes) and `iops` reads/s, at every worker count from 0 to
    `max_workers` (default 2 x usable_cpus), and its predicted knee.

    NOTE [storage what-if]
        The rows served from a cache (warm: model.ServedFrom) measured the work per sample
        without this device's reads: the pipeline model fitted on them gives one worker's rate
        r, the CPU per sample, the receive floor and the step (NOTE [pipeline model]). The new
        device serves every reader together at most D = min(M / B, IOPS / F) samples/s, for B
        bytes and F file reads per sample (measured: the bytes the samples needed, the files
        per sample) at M bytes/s and IOPS reads/s: a hard ceiling on the loader, with any
        number of workers (0 too). Each file read also keeps the worker that issues it waiting
        one access, 1 / IOPS, so one worker makes r' = 1 / (1/r + F/IOPS). The transfer itself,
        B / M, is not added per worker: reads in flight and the kernel's readahead overlap it
        with the work (measured on a loop device capped by cgroup blkio: 0 and 1 worker ran at
        the cap, docs/benchmarks.md); a device slower per request than its rate says (a disk
        seeking at queue depth 1) is given by its IOPS. Like the CPU what-if, the curve is
        anchored to the measured rows (the model's own error at the nearest measured worker
        count), then capped by D (with 0 workers, reading and stepping in turn:
        1 / (1/D + 1/C)).
    Returns the question, the measured inputs and, when they are known, the knee and the curve;
    else `why` (no rows served from a cache, or no bytes per sample).
    """
    question = WhatIf(disk_mb_per_s=mb_per_s, disk_iops=iops)
    ok = _ranked(results)
    cached = [r for r in ok if r.summary is not None and r.summary.served_from is not None
              and r.summary.served_from.is_cache]
    per_sample = [t.needed_bytes / t.samples for r in ok for t in r.trials if t.needed_bytes and t.samples]
    files = [t.files_per_sample for r in ok for t in r.trials if t.files_per_sample]
    if not per_sample:
        return WhatIfAnswer(question, why=WhyNoPrediction.BYTES_UNKNOWN)
    if not cached:
        return WhatIfAnswer(question, why=WhyNoPrediction.NO_CACHED_ROWS)
    b = float(statistics.median(per_sample))
    f_reads = float(statistics.median(files)) if files else 1.0
    fit_ = fit(cached, series_of(base), usable_cpus)
    fetch_s = f_reads / iops if iops else 0.0  # the access each read waits for, per sample
    device = min(mb_per_s * 1e6 / b, iops / f_reads if iops else math.inf)
    disk = replace(
        fit_,
        per_worker=None if not fit_.per_worker else 1.0 / (1.0 / fit_.per_worker + fetch_s),
        zero_workers=None if not fit_.zero_workers else 1.0 / (1.0 / fit_.zero_workers + fetch_s),
    )
    top = max_workers if max_workers is not None else 2 * (usable_cpus or 1)
    cells = [with_workers(base, w) for w in range(0, top + 1)]
    unbound = []
    for cell in cells:
        rate = disk.samples_per_s(cell.num_workers, usable_cpus)
        if rate is not None and math.isfinite(rate):
            unbound.append(Prediction(cell, rate, disk.stall_fraction(rate)))
    # Anchored to the rows served from a cache (their measured rates where the model is off),
    # then the device's ceiling: with workers it overlaps the step, with 0 it runs in turn.
    if usable_cpus:
        unbound = _anchored(unbound, cached, cells, usable_cpus)
    preds = []
    for p in unbound:
        cap = device if p.settings.num_workers or not fit_.compute else 1.0 / (1.0 / device + 1.0 / fit_.compute)
        rate = min(p.samples_per_s, cap)
        preds.append(Prediction(p.settings, rate, disk.stall_fraction(rate)))
    inputs = WhatIfAnswer(question, bytes_per_sample=b, files_per_sample=f_reads, fetch_s_per_sample=fetch_s,
                          device_samples_per_s=device,
                          from_rows=sorted((r.settings for r in cached), key=lambda s: s.key()))
    knee = predicted_knee(preds, tolerance)
    if knee is None:
        return replace(inputs, why=WhyNoPrediction.NO_LOADER_RATE)
    curve = _curve(preds)
    return replace(inputs, knee=knee.settings, knee_samples_per_s=knee.samples_per_s,
                   knee_stall_fraction=knee.stall_fraction, curve=curve,
                   shown_workers=shown_workers(knee.settings.num_workers, max(w for w, _ in curve), None))


def answer_what_if(question: WhatIf, results: Sequence[ConfigResult], base: LoaderSettings | None,
                   tolerance: float, measured_cpus: int | None) -> WhatIfAnswer:
    """The answer to `question` for the series of `base` (the recommended settings; None when
    nothing was measured), fitted on `results` measured with `measured_cpus` CPUs."""
    if base is None:
        return WhatIfAnswer(question, why=WhyNoPrediction.NOTHING_MEASURED)
    if question.cpus is not None:
        found = what_if_cpus(results, base, question.cpus, tolerance, measured_cpus=measured_cpus)
        return found or WhatIfAnswer(question, why=WhyNoPrediction.NO_WORKERS_MEASURED)
    assert question.disk_mb_per_s is not None
    return what_if_disk(results, base, question.disk_mb_per_s, question.disk_iops, tolerance, measured_cpus)


def predict_more_workers(row: ConfigResult, usable: int | None, tolerance: float) -> MoreWorkers | None:
    """What more workers would likely give a loader-bound watched config, from the sweep's
    models fitted on this one config: `workers_needed` (batch build time over the step's cycle,
    analysis/wait.py) and, with workers, the pipeline model's predicted knee on this machine's
    CPUs (`what_if_cpus`); at 0 workers, whether workers would share the step's CPUs
    (`step_shares_cpus`: then they do not clear it as predicted). None when the config is not
    loader-bound. A prediction, never a measurement: the renderers say so."""
    s = row.summary
    if s is None or s.verdict is not Verdict.LOADER_BOUND:
        return None
    out = MoreWorkers(row.settings.num_workers, usable, workers_needed=s.workers_needed)
    if row.settings.num_workers > 0 and usable:
        what = what_if_cpus([row], row.settings, usable, tolerance,
                            max_workers=max(2 * usable, (s.workers_needed or 0) + 1), measured_cpus=usable)
        if what is not None:
            stall = what.knee_stall_fraction
            out = replace(out, knee_workers=what.knee_workers, knee_samples_per_s=what.knee_samples_per_s,
                          knee_stall_fraction=stall, curve=what.curve, clears=stall is None or stall < CLEARS_STALL)
    if row.settings.num_workers == 0 and usable:
        shared = step_shares_cpus(s.main_cpu_util_pct, s.stall_fraction, usable)
        if shared is not None:
            out = replace(out, step_cores=shared[0], load_cores=shared[1], shares_cpus=shared[2],
                          clears=out.clears and not shared[2])
    if out.workers_needed is None and out.knee_workers is None:
        return None
    return out


def step_shares_cpus(main_cpu_util_pct: float | None, stall_fraction: float,
                     usable: int) -> tuple[float, float, bool] | None:
    """Whether workers would share the step's CPUs, from a 0-worker window where the main
    process loads, then steps: (the cores the step used while it ran, the cores loading needs to
    keep pace with it, whether together they exceed `usable`). Loading in the main process
    takes one core for the stall's share of the time, so the step used (main process's cores -
    stall) / (1 - stall); workers building at the step's pace need stall / (1 - stall) cores.
    A step on more threads than the CPUs leave it (torch's own intra-op threads on a CPU step)
    slows as workers take them: the stall moves into the step. None without the reading.

    >>> step_shares_cpus(152.0, 0.48, 2)  # a 2-thread step: 2.0 cores, loading 0.92 more
    (2.0, 0.923, True)
    """
    if main_cpu_util_pct is None or not 0.0 < stall_fraction < 1.0:
        return None
    step = max(0.0, (main_cpu_util_pct / 100.0 - stall_fraction) / (1.0 - stall_fraction))
    load = stall_fraction / (1.0 - stall_fraction)
    return round(step, 3), round(load, 3), step + load > usable
