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
    receive seconds; a row whose verdict is the receive floor ran at C' itself, and gives the R
    that makes it its measured samples/s (its median receive leaves out the slow takes).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from loaderbench.analysis.thresholds import (
    AT_THE_LOWER_RATE,
    BATCHED_FETCH_FIXED_SHARE,
    BOUND_STALL,
    CLEARS_STALL,
    DEFAULT_SHARPNESS,
    H2D_BINDS_SHARE,
    HARD_CORNER_RATIO,
    HOST_WAITS_SHARE,
    LOADER_BOUND_STALL,
    RECEIVE_BINDS_SHARE,
    SHARPNESS_MAX,
    SHARPNESS_MIN,
    STAGE_SHARE_THAT_COUNTS,
    UNCONTENDED_SHARE,
)
from loaderbench.analysis.wait import cpu_saturated
from loaderbench.conclusions import (
    BeyondKnobs,
    Binds,
    ChangeKind,
    DecodeMode,
    Decoder,
    FitInputs,
    MoreWorkers,
    PipelineChange,
    Prediction,
    PredictionErrors,
    StageChange,
    StageProfile,
    StageRow,
    StageShift,
    WhatIf,
    WhatIfAnswer,
    WhatIfCase,
    WhyNoPrediction,
)
from loaderbench.model import (
    DECODER_TIMING,
    GRID_AXES,
    ConfigResult,
    LoaderSettings,
    StageKind,
    Verdict,
    WarningKind,
)

__all__ = ["Fit", "Prediction", "WhatIf", "fit", "parse_what_if", "predict", "predict_anchored", "split_what_if",
           "what_if_cpus", "what_if_cpus_across", "what_if_disk"]


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


def with_worker_axes(results: Sequence[ConfigResult], base: LoaderSettings) -> LoaderSettings:
    """`base` as the series' configs with workers are: a 0-worker `base` has its workers-only
    axes idle (prefetch_factor None, ...), which no measured row with workers has, so its
    curve's cells with workers would match none of them and the anchoring would take the
    0-worker row's error for every count (on a collate of numpy arrays, 1-4 workers predicted at
    the 0-worker rate, 652 samples/s, where 310-462 were measured). Takes those axes from the
    fastest measured row of the series with workers; `base` itself where it has workers or none
    was measured."""
    if base.num_workers > 0:
        return base
    rows = [r for r in _ranked(results) if r.settings.num_workers > 0 and series_of(r.settings) == series_of(base)]
    if not rows:
        return base
    best = max(rows, key=lambda r: r.summary.samples_per_s)  # type: ignore[union-attr]
    return replace(best.settings, num_workers=0)


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
    # The most workers the dataset gives work to: a measured row's workers less its idle ones
    # (an IterableDataset split into fewer shards than workers; None: every worker works).
    working: int | None = None
    # The share of the main thread's time per batch besides the step (1 / main) that is the
    # host-to-device copy on the step's path (`_main_h2d_share`); None where none was timed.
    main_h2d: float | None = None

    def loader(self, workers: int, usable_cpus: int | None) -> float | None:
        """L(W): the loader's rate with `workers` workers on `usable_cpus` CPUs (workers past
        `working` add nothing: the dataset gives them no work)."""
        if self.working is not None:
            workers = min(workers, self.working)
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

    @property
    def main_thread(self) -> float | None:
        """The main thread's rate with workers, samples/s: it receives each batch (and, without
        the prefetcher, copies an unhidden batch to the device), then steps: 1 / (1/C + 1/R);
        C alone or R alone where only one is known; None where neither is."""
        if self.compute and self.main:
            return 1.0 / (1.0 / self.compute + 1.0 / self.main)
        return self.compute or self.main

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
        return softmin(load, self.main_thread or self.compute, self.sharpness)

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


def _main_extra_s(r: ConfigResult) -> float:
    """Seconds per batch the main thread spends besides the step: the receive floor (p50), and
    without the prefetcher the host-to-device copy's share not hidden behind the step (it runs on
    the step's path: a pageable copy of 7.6 ms beside a 54.6-ms step held a series to 4,100
    samples/s of a 4,687 ceiling). With the prefetcher an unhidden copy is inside the receive."""
    s = r.summary
    assert s is not None
    out = s.receive_p50_s or 0.0
    if out > 0 and not r.settings.prefetch and s.h2d_p50_s:
        out += s.h2d_p50_s * (1.0 - (s.h2d_hidden_fraction or 0.0))
    return out


def _main_h2d_share(r: ConfigResult) -> float | None:
    """The share of `_main_extra_s` that is the host-to-device copy not hidden behind the step:
    without the prefetcher the copy's unhidden part over the receive and it; with it, an
    unhidden copy is inside the receive (at most all of it). None without a receive or a copy
    timed."""
    s = r.summary
    assert s is not None
    extra = _main_extra_s(r)
    if extra <= 0 or not s.h2d_p50_s:
        return None
    copy = s.h2d_p50_s * (1.0 - (s.h2d_hidden_fraction or 0.0))
    return min(1.0, copy / extra)


def _main_from_receive(r: ConfigResult) -> float | None:
    """R of one row, samples/s: its samples per batch (x ranks) over `_main_extra_s`; None
    without a receive timed."""
    t = _main_extra_s(r)
    return _ranks(r) * _per_batch(r) / t if t > 0 else None


def _receive_bound_main(r: ConfigResult, compute: float | None) -> float | None:
    """R of a row whose verdict is the receive floor, samples/s: the main thread ran it, so R
    solves 1 / (1/C + 1/R) = its measured samples/s S (R = 1 / (1/S - 1/C)); None for another
    verdict, without C, or where S is not below C."""
    s = r.summary
    if s is None or s.verdict is not Verdict.RECEIVE_FLOOR or not compute or s.samples_per_s <= 0:
        return None
    if s.samples_per_s >= 0.999 * compute:
        return None
    return 1.0 / (1.0 / s.samples_per_s - 1.0 / compute)


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
    # A row with idle workers (Summary.idle_workers) was built by the workers that worked.
    rates = [(w, load / w) for r in with_w
             if (load := _loader_rate(r)) and (w := r.settings.num_workers - (r.summary.idle_workers or 0)) > 0]  # type: ignore[union-attr]
    working = min((r.settings.num_workers - r.summary.idle_workers for r in with_w  # type: ignore[union-attr]
                   if r.summary.idle_workers), default=None)  # type: ignore[union-attr]
    free = [x for w, x in rates if w <= max(1.0, cap)] or [x for w, x in rates if w == min(w for w, _ in rates)]
    per_worker = max(free) if free else None
    # kappa: CPU-seconds of the process tree per sample.
    kappas = [r.summary.cpu_util_pct / 100.0 / r.summary.samples_per_s for r in with_w  # type: ignore[union-attr]
              if r.summary.cpu_util_pct and r.summary.samples_per_s > 0]  # type: ignore[union-attr]
    kappa = float(statistics.median(kappas)) if kappas else None
    ceilings = [r.summary.compute_ceiling_samples_per_s for r in (mine or ok)  # type: ignore[union-attr]
                if r.summary.compute_ceiling_samples_per_s]  # type: ignore[union-attr]
    compute = float(statistics.median(ceilings)) if ceilings else None
    # R: samples per batch over the receive floor, from this series' configs with workers; in a
    # distributed sweep every rank's main process receives its own batches (x world size). A row
    # whose verdict is the receive floor ran at the main thread's rate: its R is what makes
    # 1 / (1/C + 1/R) its measured samples/s (`_receive_bound_main`), not its receive's median,
    # which leaves out the slow takes (pickled arrays: 0.1-0.3 ms median beside a stall of 50%).
    mains = [x for r in mine_w if (x := _receive_bound_main(r, compute) or _main_from_receive(r))]
    main = float(statistics.median(mains)) if mains else None
    copies = [x for r in mine_w if (x := _main_h2d_share(r)) is not None]
    main_h2d = float(statistics.median(copies)) if copies else None
    zero = next((r for r in mine if r.settings.num_workers == 0), None)
    zero_rate = None if zero is None else _loader_rate(zero)
    k = _sharpness(mine_w or with_w)
    inputs = FitInputs(sorted(r.settings.key() for r in ok), per_worker, kappa, main, zero_rate, compute, usable_cpus, k)
    return Fit(per_worker, kappa, main, zero_rate, compute, k, inputs, working=working, main_h2d=main_h2d)


def _unique_workers(model: Fit, results: Sequence[ConfigResult]) -> Fit:
    """`model` with the workers that add samples capped at one where the dataset's workers replay
    the same stream (a row with WarningKind.REPLICATED): every further worker repeats the first's
    samples, so it adds no unique sample (what-ifs count unique samples)."""
    if any(r.status == "ok" and r.has(WarningKind.REPLICATED) for r in results):
        return replace(model, working=1 if model.working is None else min(model.working, 1))
    return model


def predict(results: Sequence[ConfigResult], cells: Sequence[LoaderSettings], usable_cpus: int | None,
            *, exclude_measured: bool = False, fit_cpus: int | None = None,
            unique: bool = False) -> list[Prediction]:
    """The model's prediction for every cell (a config of the grid) with `usable_cpus` CPUs,
    fitted on `results` (the measured configs, measured with `fit_cpus` CPUs, default
    `usable_cpus`; a prediction never uses the cell's own measurement when `exclude_measured`,
    which gives honest errors: leave-one-out). With `unique`, unique samples only: workers
    that replay the stream add none (`_unique_workers`). Cells whose series has no rates are
    left out."""
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
        if unique:
            f = _unique_workers(f, results)
        rate = f.samples_per_s(cell.num_workers, usable_cpus)
        if rate is None or not math.isfinite(rate):
            continue
        out.append(Prediction(cell, rate, f.stall_fraction(rate),
                              None if measured is None else measured.summary.samples_per_s))  # type: ignore[union-attr]
    return out


def predict_anchored(results: Sequence[ConfigResult], cells: Sequence[LoaderSettings],
                     usable_cpus: int | None) -> list[Prediction]:
    """`predict` for `cells` on the CPUs the rows were measured with, each series anchored to its
    own measured rows as the what-ifs and the plateau are (`_anchored`: the model's error at the
    nearest measured worker count), so that the table's predicted rows, the what-if curves and the
    changes beyond the settings give one figure for one config (unanchored, a long-tail input's
    table had predicted ~714 samples/s at 4 workers beside a plateau of ~654 in the same output).
    In `cells`' order; cells whose series has no rates are left out."""
    preds = predict(results, cells, usable_cpus)
    if not usable_cpus or not preds:
        return preds
    measured = [r.settings for r in _ranked(results)]
    by_series: dict[LoaderSettings, list[Prediction]] = {}
    for p in preds:
        by_series.setdefault(series_of(p.settings), []).append(p)
    out: dict[LoaderSettings, Prediction] = {}
    for key, ps in by_series.items():
        mine = [s for s in measured if series_of(s) == key]
        if not mine:
            out.update((p.settings, p) for p in ps)
            continue
        out.update((p.settings, p) for p in _anchored(ps, results, [*mine, *(p.settings for p in ps)], usable_cpus))
    return [out[p.settings] for p in preds]


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
              measured_cpus: int, cpus: int | None = None) -> list[Prediction]:
    """The what-if curve anchored to the measured rows: each prediction times the model's own
    error at the nearest measured worker count of the series on the machine that was measured
    (measured / predicted there, with `measured_cpus` CPUs), so that with K = measured_cpus the
    measured counts come out as measured and the model supplies only how K changes them. A
    factor above 1 never lifts a prediction past the higher of the series' main-thread rate (the
    compute ceiling with the receive and an unhidden copy in turn) and its fastest measured row: the anchoring corrects the loader's side, and the step does not
    run faster with more CPUs."""
    here = {p.settings.num_workers: p.samples_per_s for p in predict(results, cells, measured_cpus)}
    ok = {r.settings.num_workers: r.summary.samples_per_s for r in _ranked(results)  # type: ignore[union-attr]
          if r.settings in set(cells)}
    factors = {w: ok[w] / here[w] for w in ok if here.get(w)}
    if not factors:
        return preds
    model = fit(results, series_of(cells[0]), measured_cpus) if cells else None
    main = None if model is None else model.main_thread
    cap = None if not main else max(main, *ok.values())
    # Nor past what `cpus` CPUs build at the tree's measured CPU time per sample (U / kappa),
    # where they are fewer than measured: the anchoring corrects one worker's rate, not the CPUs'.
    kappa = None if model is None else model.cpu_s_per_sample
    cpu_cap = cpus / kappa if cpus and kappa and cpus < measured_cpus else None
    out = []
    for p in preds:
        w = p.settings.num_workers
        nearest = min(factors, key=lambda m: (abs(m - w), m))
        rate = p.samples_per_s * factors[nearest]
        if cap is not None and factors[nearest] > 1.0:
            rate = min(rate, max(cap, p.samples_per_s))
        if cpu_cap is not None and factors[nearest] > 1.0 and w > 0:
            rate = min(rate, max(cpu_cap, p.samples_per_s))
        out.append(Prediction(p.settings, rate, None if p.stall_fraction is None else
                              max(0.0, 1.0 - (1.0 - p.stall_fraction) * factors[nearest]), p.measured_samples_per_s))
    return out


WHAT_IF_FORM = {
    "cpus": "cpus=K (usable CPUs, an integer of 1 or more, e.g. cpus=8)",
    "disk": "disk=MBPS[,IOPS] (a device's MB/s and reads/s, positive numbers, e.g. disk=150,200)",
    "stage": "stage=NAME:F (a stage of the profile F times faster, F > 0, inf removes it, e.g. stage=decode:2)",
    "decode": "decode=torchvision or decode=nvjpeg (another JPEG decoder)",
    "ranks": "ranks=N (data-parallel ranks, an integer of 1 or more, e.g. ranks=8)",
}
"""Each `--what-if` change's form, by its key."""
WHAT_IF_FORMS = ", ".join(WHAT_IF_FORM.values())


def parse_what_if(text: str) -> WhatIf:
    """One `--what-if` change -> a WhatIf holding it: `cpus=K`, `disk=MBPS[,IOPS]` (the commas
    stay inside the change), `stage=NAME:F` (NAME as the stage table names it, F > 0 or `inf`),
    `decode=torchvision|nvjpeg` or `ranks=N`. ValueError naming the key's form otherwise (every
    form for an unknown key).

    >>> parse_what_if("stage=rest of __getitem__:inf").stages
    (StageChange(name='rest of __getitem__', speedup=None),)
    """
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
    if key == "stage":
        name, sep, factor = value.rpartition(":")
        try:
            f = float(factor)
        except ValueError:
            f = math.nan
        if sep and name.strip() and (f > 0 or f == math.inf):
            return WhatIf(stages=(StageChange(name.strip(), None if f == math.inf else f),))
    if key == "decode" and value in {d.value for d in Decoder}:
        return WhatIf(decode=Decoder(value))
    raise ValueError(f"expected {WHAT_IF_FORM.get(key, WHAT_IF_FORMS)}, got {text!r}")


def split_what_if(questions: Sequence[WhatIf]) -> tuple[WhatIf | None, WhatIf | None]:
    """The questions asked (`--what-if`, each one change) combined: (every change for the
    pipeline model in one question, the ranks= question), each None when not asked. Raises
    ValueError for a change given twice (two cpus=, disk=, decode= or ranks=, two stage= of one
    stage, or decode= beside stage=decode:F: both change the decode), naming it."""
    merged: dict[str, object] = {}
    stages: dict[str, StageChange] = {}
    ranks: WhatIf | None = None

    def twice(what: str) -> ValueError:
        return ValueError(f"{what} is given twice: each change once, and different changes combine, "
                          "e.g. --what-if cpus=8 --what-if decode=torchvision")

    for q in questions:
        if q.ranks is not None:
            if ranks is not None:
                raise twice("ranks=")
            ranks = WhatIf(ranks=q.ranks)
        for name in ("cpus", "decode"):
            if getattr(q, name) is not None:
                if name in merged:
                    raise twice(f"{name}=")
                merged[name] = getattr(q, name)
        if q.disk_mb_per_s is not None:
            if "disk_mb_per_s" in merged:
                raise twice("disk=")
            merged.update(disk_mb_per_s=q.disk_mb_per_s, disk_iops=q.disk_iops)
        for st in q.stages:
            if st.name in stages:
                raise twice(f"stage={st.name}")
            stages[st.name] = st
    if "decode" in merged and "decode" in stages:
        raise ValueError("decode= and stage=decode:F both change the decode: ask one of them")
    model = WhatIf(stages=tuple(stages.values()), **merged) if merged or stages else None  # type: ignore[arg-type]
    return model, ranks


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
    axes = with_worker_axes(results, base)
    cells = [with_workers(axes, w) for w in range(0, top_w + 1)]
    preds = predict(results, cells, cpus, fit_cpus=measured_cpus, unique=True)
    if measured_cpus:
        preds = _anchored(preds, results, cells, measured_cpus, cpus)
    knee = predicted_knee(preds, tolerance)
    if knee is None:
        return None
    curve = _curve(preds)
    best = max(preds, key=lambda p: (p.samples_per_s, -p.settings.num_workers))
    model = _unique_workers(fit(results, series_of(base), measured_cpus or cpus), results)
    # On other CPUs than measured, a best prediction the anchoring's cap holds at the main
    # thread's rate (`_anchored`) is bound by the main thread there. A best prediction with more
    # workers after it on the curve (none of them faster) is not bound by the workers, whatever
    # the model left unanchored says: the main thread's part binds.
    w_best, w_top = best.settings.num_workers, max(w for w, _ in curve)
    main = model.main_thread
    main_binds = cpus != measured_cpus and main is not None and best.samples_per_s >= AT_THE_LOWER_RATE * main
    if not main_binds and 0 < w_best < w_top and binds_at(model, w_best, cpus) is Binds.WORKERS:
        main_binds = True
    # A best prediction without workers, with workers on the curve after it or measured in the
    # series, none faster: the main process building each batch binds, not the workers (more of
    # them go no further).
    with_w = [r.summary.samples_per_s for r in _ranked(results) if r.summary is not None
              and r.settings.num_workers > 0 and series_of(r.settings) == series_of(base)]
    binds = (Binds.MAIN_PROCESS if workers_go_no_further(w_best, curve, best.samples_per_s, with_w)
             else binds_at(model, w_best, cpus, math.inf if main_binds else 1.0))
    return WhatIfAnswer(WhatIf(cpus=cpus), knee=knee.settings, knee_samples_per_s=knee.samples_per_s,
                        knee_stall_fraction=knee.stall_fraction, curve=curve,
                        shown_workers=shown_workers(knee.settings.num_workers, max(w for w, _ in curve), cpus),
                        binds=binds, binds_near=_near_at_knee(model, binds, knee, cpus),
                        usable_cpus=cpus)


def _near_at_knee(model: Fit, binds: Binds | None, knee: Prediction, cpus: int | None,
                  loader_scale: float = 1.0) -> Binds | None:
    """Where the main thread binds (the step, the receive, the copy) but the knee quoted runs
    LOADER_BOUND_STALL or more below the main thread's own rate, the loader's bound there (times
    `loader_scale`, the anchoring), close behind (`binds_near`): a measured row at the knee would
    read loader-bound."""
    main = model.main_thread
    wk = knee.settings.num_workers
    if binds not in (Binds.STEP, Binds.RECEIVE, Binds.H2D) or wk == 0 or not main:
        return None
    if knee.samples_per_s >= (1.0 - LOADER_BOUND_STALL) * main:
        return None
    return _loader_binds(model, wk, cpus, loader_scale)


def what_if_disk(results: Sequence[ConfigResult], base: LoaderSettings, mb_per_s: float, iops: float | None,
                 tolerance: float, usable_cpus: int | None, max_workers: int | None = None,
                 cpus: int | None = None) -> WhatIfAnswer:
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
    With `cpus` (a `cpus=` change asked beside it) the curve is for that many usable CPUs (the
    model still fitted, and anchored, with the `usable_cpus` the rows were measured with).
    Returns the question, the measured inputs and, when they are known, the knee and the curve;
    else `why` (no rows served from a cache, or no bytes per sample).
    """
    question = WhatIf(disk_mb_per_s=mb_per_s, disk_iops=iops, cpus=cpus)
    eval_cpus = cpus or usable_cpus
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
    top = max_workers if max_workers is not None else 2 * (eval_cpus or 1)
    cells = [with_workers(base, w) for w in range(0, top + 1)]
    unbound = []
    for cell in cells:
        rate = disk.samples_per_s(cell.num_workers, eval_cpus)
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
    best = max(preds, key=lambda p: (p.samples_per_s, -p.settings.num_workers))
    return replace(inputs, knee=knee.settings, knee_samples_per_s=knee.samples_per_s,
                   knee_stall_fraction=knee.stall_fraction, curve=curve,
                   shown_workers=shown_workers(knee.settings.num_workers, max(w for w, _ in curve), cpus),
                   binds=binds_at(replace(disk, device=device), best.settings.num_workers, eval_cpus),
                   usable_cpus=eval_cpus)


def answer_what_if(question: WhatIf, results: Sequence[ConfigResult], base: LoaderSettings | None,
                   tolerance: float, measured_cpus: int | None, profile: StageProfile | None = None) -> WhatIfAnswer:
    """The answer to `question` (every change asked, combined: `split_what_if`) for the series of
    `base` (the recommended settings; None when nothing was measured), fitted on `results`
    measured with `measured_cpus` CPUs; a change to a stage or the decoder reads the sweep's
    stage profile of its pick (`profile`: NOTE [what-ifs beyond the knobs])."""
    if base is None:
        return WhatIfAnswer(question, why=WhyNoPrediction.NOTHING_MEASURED)
    if question.changes_build:
        return what_if_pipeline(question, results, base, tolerance, measured_cpus, profile)
    if question.disk_mb_per_s is not None:
        return what_if_disk(results, base, question.disk_mb_per_s, question.disk_iops, tolerance, measured_cpus,
                            cpus=question.cpus)
    assert question.cpus is not None
    found = what_if_cpus_across(results, base, question.cpus, tolerance, measured_cpus)
    return found or WhatIfAnswer(question, why=WhyNoPrediction.NO_WORKERS_MEASURED)


MAIN_THREAD_BINDS = frozenset({Binds.STEP, Binds.RECEIVE, Binds.GPU_DECODE, Binds.H2D})
"""What binds where a series' main thread holds it: there the pin_memory/prefetcher series differ."""


def what_if_cpus_across(results: Sequence[ConfigResult], base: LoaderSettings, cpus: int, tolerance: float,
                        measured_cpus: int | None) -> WhatIfAnswer | None:
    """`what_if_cpus` for `base`'s series and for every other pin_memory/prefetcher series
    measured with workers (`_other_series`): where `base`'s own answer is held by its main thread
    (MAIN_THREAD_BINDS), another series' answer replaces it where its knee is predicted faster by
    more than `tolerance` (`series_samples_per_s`, `series_binds` keep `base`'s own), as a change
    to the build is answered (NOTE [what-ifs beyond the knobs]: with more CPUs the workers stop
    binding, and the series whose main thread is quicker, a pinned copy or one hidden by the
    prefetcher, can go further). Where the loader binds (the workers, the CPUs, the storage) it
    binds every series alike, and the series' answers differ only by how each was anchored to
    its own measured rows: `base`'s is kept (on the H200 case at 8 of 16 CPUs another series read
    2,403 samples/s where 2,079-2,117 were measured and the pick's own said 2,108). None when
    `base`'s series cannot be predicted."""
    own = what_if_cpus(results, base, cpus, tolerance, measured_cpus=measured_cpus)
    if own is None or not own.knee_samples_per_s:
        return own
    if own.binds not in MAIN_THREAD_BINDS:
        return replace(own, base=base)  # the loader binds: every series alike, the rest is noise
    others = [what_if_cpus(results, b, cpus, tolerance, measured_cpus=measured_cpus)
              for b in _other_series(results, base)]
    best = max((a for a in others if a is not None and a.knee_samples_per_s),
               key=lambda a: a.knee_samples_per_s or 0.0, default=None)
    if best is None or (best.knee_samples_per_s or 0.0) <= (1.0 + tolerance) * own.knee_samples_per_s:
        return replace(own, base=base)
    return replace(best, base=base, series_samples_per_s=own.knee_samples_per_s, series_binds=own.binds)


def binds_at(model: Fit, workers: int, usable_cpus: int | None, loader_scale: float = 1.0,
             gpu_decode: bool = False) -> Binds | None:
    """What binds `model` at `workers` workers on `usable_cpus` CPUs (NOTE [pipeline model]):
    the lowest of the loader's bounds (one worker's rate x workers, the CPUs' U / kappa, the
    device) when the loader (times `loader_scale`, the anchoring) is below the main thread's
    rate, else the main thread's: the host-to-device copy where it is most of the main thread's
    time besides the step and that time is at least LOADER_BOUND_STALL of the main thread's (the
    verdict a measured row gets then: `H2D-bound`), the receive where it takes at least
    RECEIVE_BINDS_SHARE of the main thread's time per sample (the receive and the step run in
    turn), else the step (`gpu_decode`:
    the model's step holds a decode on the GPU that the step waits for, a stall of at least
    LOADER_BOUND_STALL). With 0 workers the main process loads each batch in turn with the step:
    the workers bind (they would take the loading off it) where loading is LOADER_BOUND_STALL of
    the time or more, else the step. None when nothing is known."""
    load = model.loader(workers, usable_cpus)
    if load is None:
        return None
    load *= loader_scale
    main = model.compute if workers == 0 else model.main_thread
    if main is None or load < main:
        return Binds.WORKERS if workers == 0 else _loader_binds(model, workers, usable_cpus, loader_scale)
    if workers == 0 and (1.0 / load) / (1.0 / load + 1.0 / main) >= LOADER_BOUND_STALL:
        return Binds.WORKERS  # loading in turn with the step still takes a stall's share of the time
    if workers > 0 and model.main and model.compute:
        extra = (1.0 / model.main) / (1.0 / model.main + 1.0 / model.compute)
        if extra >= LOADER_BOUND_STALL and (model.main_h2d or 0.0) >= H2D_BINDS_SHARE:
            return Binds.H2D
        if extra >= RECEIVE_BINDS_SHARE:
            return Binds.RECEIVE
    return Binds.GPU_DECODE if gpu_decode else Binds.STEP


def workers_go_no_further(w_best: int, curve: Sequence[tuple[int, float]], best_samples_per_s: float,
                          measured_with_workers: Sequence[float]) -> bool:
    """Whether a series predicted best without workers (`w_best` 0) goes no further with them:
    worker counts on its `curve` (none faster, as `w_best` is the best) or, where the model has
    no rate for workers, its measured rows with workers (samples/s) none faster. There the main
    process building each batch binds (Binds.MAIN_PROCESS), not "more workers"."""
    if w_best != 0:
        return False
    if any(w > 0 for w, _ in curve):
        return True
    return bool(measured_with_workers) and max(measured_with_workers) <= best_samples_per_s


def _loader_binds(model: Fit, workers: int, usable_cpus: int | None, loader_scale: float) -> Binds:
    """The lowest of the loader's bounds at `workers` workers: one worker's rate x the workers
    the dataset gives work to, the CPUs' U / kappa, the device. The workers' bound is named the
    CPUs' where at that rate the process tree would saturate the usable CPUs (`cpu_saturated`,
    the one definition), as a measured row's verdict names it (loader-bound with the CPUs
    saturated): more workers go little further there."""
    capped = model.working is not None and workers >= model.working  # the rest get no work
    bounds = [(min(workers, model.working or workers) * (model.per_worker or math.inf) * loader_scale,
               Binds.WORKING if capped else Binds.WORKERS)]
    if usable_cpus and model.cpu_s_per_sample:
        bounds.append((usable_cpus / model.cpu_s_per_sample * loader_scale, Binds.CPUS))
    if model.device:
        bounds.append((model.device, Binds.STORAGE))
    rate, binds = min(bounds, key=lambda b: b[0])
    if binds is Binds.WORKERS and usable_cpus and len(bounds) > 1 and bounds[1][1] is Binds.CPUS:
        # The process tree's predicted CPU at that rate: its share of the CPUs' own bound.
        if cpu_saturated(100.0 * usable_cpus * rate / bounds[1][0], 0.0, usable_cpus):
            return Binds.CPUS
    return binds


def binds_near(model: Fit, workers: int, usable_cpus: int | None, loader_scale: float = 1.0) -> Binds | None:
    """Where the main thread binds at `workers` workers (`binds_at`) but the loader still holds
    the combined rate LOADER_BOUND_STALL or more below the main thread's own (the model's soft
    corner, NOTE [pipeline model]), the loader's bound close behind: a measured row there waits
    that share of its time for batches, and its verdict is loader-bound. None elsewhere.

    On the H200 case at 12 usable CPUs, `decode=torchvision` predicted ~4,221 samples/s, stall
    ~9%, "the step binds", where the main thread alone runs ~4,590; the measured run read 4,396,
    loader-bound with the CPUs saturated (docs/benchmarks.md, "decode=torchvision predicted
    against --decoder torchvision measured")."""
    load = model.loader(workers, usable_cpus)
    main = model.main_thread
    if workers == 0 or load is None or main is None:
        return None
    load *= loader_scale
    if load < main or softmin(load, main, model.sharpness) >= (1.0 - LOADER_BOUND_STALL) * main:
        return None
    return _loader_binds(model, workers, usable_cpus, loader_scale)


# NOTE [what-ifs beyond the knobs]
#     A change to how a sample is built (`--what-if stage=NAME:F`, `decode=torchvision`,
#     `decode=nvjpeg`) is answered by the same pipeline model (NOTE [pipeline model]) with the
#     rates that building sets changed, the main thread's as measured:
#       - the stage profile of the pick (the sweep's own, analysis/stages.py) gives each build
#         stage's milliseconds per sample (read, decode, each transform, the rest of
#         __getitem__, collate; wall less the time queued for a CPU, what it takes on a quiet
#         machine) and CPU milliseconds. A change gives each stage its new figures (F times
#         less; 0 removed; another decoder: the decode times the measured ratio of the two
#         decoders on the dataset's own JPEGs, the transforms after it times the measured ratio
#         of the same transforms on a tensor to on PIL's image; nvJPEG: the decode and those
#         transforms leave the workers for the GPU);
#       - one worker's rate r and the 0-worker rate L0 scale by T / T' (the build stages'
#         milliseconds before over after); the CPU per sample kappa loses the CPU milliseconds
#         the change saves; the receive floor R and the step C are as measured (a receive
#         F times faster: R x F);
#       - nvJPEG adds its GPU milliseconds per batch g (measured on this GPU) to the step: the
#         step's time per batch becomes t + g serialised (before the step, on its stream), and
#         max(t, g) overlapped (on a side stream while the step before runs: the two share the
#         GPU, so this is the best case). Both are given; a measured run tells which holds. Where
#         the decode holds its calling thread for its GPU time (CPU milliseconds per batch at
#         least HOST_WAITS_SHARE of the GPU's, as torchvision's batched nvJPEG does), the main
#         thread cannot launch the next step while it decodes, and the overlapped case is t + g
#         too (`WhatIfCase.host_waits`). Where the step waits for the decode a stall that a
#         measured row would not call compute-bound, the decode binds (such a row's verdict is
#         GPU-decode-bound). Timed in a loop on the H200 (benchmarks/nvjpeg_inloop.py): the decode
#         call waits for the step queued before it (36-40 ms against 10-14 ms alone), and the
#         step's own launches (12-25 ms of the thread) overlap the step's GPU time, so a batch
#         takes about t + g: 76.8 ms against 54.7 + 20.7 (workload/decode.py batches the crops;
#         with a crop per image, whose host time swung 1.6x within a run, 113-135 ms). The
#         answer says a measured run can read a few percent either side (3,519 and 3,493
#         samples/s measured against 3,287 predicted, docs/benchmarks.md section 20b).
#     The loader's side is anchored to the measured rows of the series: where a row was
#     loader-bound, the loader rate that reproduces its measured samples/s (the softmin solved
#     for L) over the model's, at the nearest measured worker count, multiplies the changed
#     loader; the main thread is not scaled (a change that makes the step bind is then
#     predicted at the step's measured rate, not at the loader-bound row's error).
#     The pick's pin_memory and prefetcher were chosen while the workers bound, among configs
#     within the tolerance of each other; a faster build can leave its main thread binding where
#     another combination's does not (on 8 CPUs of the H200 host the pick received each batch in
#     32 ms, a pageable copy, beside a 55 ms step: ~2,900 samples/s at best whatever the decoder,
#     where pin_memory on measured 4,222 with torchvision's decode). So a change built on the CPU
#     is answered for every combination measured with workers, and the fastest one's answer is
#     given where it beats the pick's own by more than the tolerance, the pick's own beside it.


def _quiet_ms(row: StageRow) -> float:
    """A stage's milliseconds per sample less the time it was queued for a CPU."""
    return max(0.0, (row.ms_per_sample or 0.0) - (row.queued_ms_per_sample or 0.0))


def _builds(profile: StageProfile) -> list[StageRow]:
    """The rows of building a sample (a sample's stages and the collate) that have a figure."""
    return [r for r in profile.stages if StageKind(r.kind).builds and r.ms_per_sample is not None]


def jpeg_decoder_of(profile: StageProfile) -> str | None:
    """Which decoder the profile saw decode JPEGs: "PIL", "torchvision", or None (no JPEG decode
    seen: another format, or a decoder the profile does not recognise)."""
    pil = sum(n for d, n in profile.decoders.items() if d.startswith("PIL") and "JPEG" in d)
    tv = sum(n for d, n in profile.decoders.items() if d.startswith("torchvision.io")
             and ("JPEG" in d or "decode_jpeg" in d) and " on " not in d)
    if not pil and not tv:
        return None
    return "PIL" if pil >= tv else "torchvision"


@dataclass(frozen=True)
class _Rebuilt:
    """What a question's changes to building do (NOTE [what-ifs beyond the knobs])."""

    shifts: list[StageShift]
    build_ms: float
    new_build_ms: float
    cpu_saved_s: float
    receive_factor: float = 1.0
    gpu_ms_per_batch: float | None = None
    gpu_host_waits: bool = False  # the GPU decode holds the calling thread for its GPU time
    decode_from: str | None = None
    decoder_factor: float | None = None
    transforms_factor: float | None = None


def askable_stages(profile: StageProfile) -> list[str]:
    """The stages of `profile` a `stage=NAME:F` question may name: those it timed that build a
    sample, and the receive (pin and H2D are the main process's copy: --pin-memory and
    --prefetch act on them)."""
    return [r.name for r in profile.stages if r.ms_per_sample is not None
            and (StageKind(r.kind).builds or r.kind == StageKind.RECEIVE.value)]


def rebuild(question: WhatIf, profile: StageProfile, batch_size: int) -> _Rebuilt | tuple[WhyNoPrediction, list[str]]:
    """The build stages as `question` changes them, from `profile`, for batches of
    `batch_size`; or why it cannot be answered (with the profile's stage names)."""
    rows = {r.name: r for r in _builds(profile)}
    names = askable_stages(profile)
    new_ms = {n: _quiet_ms(r) for n, r in rows.items()}
    new_cpu = {n: r.cpu_ms_per_sample or 0.0 for n, r in rows.items()}
    extra_cpu_ms = 0.0
    receive_factor = 1.0
    main_shifts: list[StageShift] = []
    out: dict[str, object] = {}
    if question.decode is not None:
        decode = next((r for r in profile.stages if r.kind == StageKind.DECODE.value), None)
        source = jpeg_decoder_of(profile)
        if decode is None or decode.name not in rows or not decode.calls_per_sample or source is None:
            return WhyNoPrediction.NO_JPEG_DECODE, names
        out["decode_from"] = source
        timing = profile.decoder_timing
        after = [n for n in (timing.transforms if timing else []) if n in rows]
        if not after:
            after = [r.name for r in profile.stages if r.kind == StageKind.TRANSFORM.value and r.name in rows]
        if question.decode is Decoder.TORCHVISION:
            if source == "torchvision":
                return WhyNoPrediction.SAME_DECODER, names
            if timing is None or timing.pil_cpu_ms <= 0:
                return (WhyNoPrediction.PROFILE_TIME if DECODER_TIMING in profile.cost.cut_short
                        else WhyNoPrediction.NO_DECODER_TIMING), names
            df = timing.torchvision_cpu_ms / timing.pil_cpu_ms
            tf = (timing.transforms_tensor_cpu_ms / timing.transforms_pil_cpu_ms
                  if timing.transforms_pil_cpu_ms and timing.transforms_tensor_cpu_ms is not None else None)
            out.update(decoder_factor=df, transforms_factor=tf)
            new_ms[decode.name] *= df
            new_cpu[decode.name] *= df
            for n in (after if tf is not None else []):
                pil_ms, tensor_ms = timing.per_transform.get(n, (0.0, 0.0))
                each = tensor_ms / pil_ms if n in timing.per_transform and pil_ms > 0 else tf
                new_ms[n] *= each  # type: ignore[operator]
                new_cpu[n] *= each  # type: ignore[operator]
        else:
            if not (profile.device or "").startswith("cuda"):
                return WhyNoPrediction.NO_CUDA, names
            gpu = profile.gpu_decode
            if gpu is None or gpu.batch_size <= 0:
                return (WhyNoPrediction.PROFILE_TIME if DECODER_TIMING in profile.cost.cut_short
                        else WhyNoPrediction.NO_GPU_TIMING), names
            for n in [decode.name, *after]:
                new_ms[n] = new_cpu[n] = 0.0
            out["gpu_ms_per_batch"] = gpu.decode_crop_ms_per_batch * batch_size / gpu.batch_size
            out["gpu_host_waits"] = gpu.cpu_ms_per_batch >= HOST_WAITS_SHARE * gpu.decode_crop_ms_per_batch
            extra_cpu_ms = gpu.cpu_ms_per_batch / gpu.batch_size  # the main process waits for the decode
    for change in question.stages:
        row = next((r for r in profile.stages if r.name == change.name), None) or next(
            (r for r in profile.stages if r.name.lower() == change.name.lower()), None)
        if row is None:
            return WhyNoPrediction.STAGE_UNKNOWN, names
        if row.kind == StageKind.RECEIVE.value:
            if row.ms_per_sample is None:  # a pick without workers receives nothing: no time to change
                return WhyNoPrediction.STAGE_NOT_TIMED, names
            receive_factor = math.inf if change.speedup is None else change.speedup
            quiet = _quiet_ms(row)
            main_shifts.append(StageShift(row.name, quiet, quiet / receive_factor, row.cpu_ms_per_sample or 0.0,
                                          (row.cpu_ms_per_sample or 0.0) / receive_factor, None))
            continue
        if row.name not in rows:
            return (WhyNoPrediction.STAGE_NOT_BUILT if not StageKind(row.kind).builds
                    else WhyNoPrediction.STAGE_UNKNOWN), names
        keep = 0.0 if change.speedup is None else 1.0 / change.speedup
        new_ms[row.name] *= keep
        new_cpu[row.name] *= keep
    build = sum(_quiet_ms(r) for r in rows.values())
    if build <= 0:
        return WhyNoPrediction.NO_PROFILE, names
    shifts = [StageShift(n, _quiet_ms(r), new_ms[n], r.cpu_ms_per_sample or 0.0, new_cpu[n], _quiet_ms(r) / build)
              for n, r in rows.items() if abs(new_ms[n] - _quiet_ms(r)) > 1e-12 or abs(new_cpu[n] - (r.cpu_ms_per_sample or 0.0)) > 1e-12]
    shifts += main_shifts
    saved = sum((r.cpu_ms_per_sample or 0.0) - new_cpu[n] for n, r in rows.items()) - extra_cpu_ms
    return _Rebuilt(shifts, build, sum(new_ms.values()), saved / 1e3, receive_factor, **out)  # type: ignore[arg-type]


def _loader_anchors(model: Fit, rows: Sequence[ConfigResult], usable_cpus: int | None) -> dict[int, float]:
    """Per measured worker count of the series, the measured loader rate over the model's
    (NOTE [what-ifs beyond the knobs]): for a loader-bound row, the L that makes the model's
    main-thread formula give its measured samples/s; 1 for a row the loader did not bind."""
    out: dict[int, float] = {}
    for r in rows:
        s = r.summary
        w = r.settings.num_workers
        load = model.loader(w, usable_cpus)
        if s is None or not load or s.samples_per_s <= 0:
            continue
        measured = s.samples_per_s
        factor = 1.0
        if s.verdict is Verdict.LOADER_BOUND:
            if w == 0:
                solved = 1.0 / (1.0 / measured - 1.0 / model.compute) if model.compute and measured < model.compute \
                    else measured
            else:
                main = model.main_thread
                k = model.sharpness
                solved = ((measured ** -k - main ** -k) ** (-1.0 / k) if main and measured < main * 0.999
                          else measured)
            factor = solved / load
        out.setdefault(w, factor)
    return out


def _scaled(model: Fit, rebuilt: _Rebuilt | None) -> Fit:
    """`model` with the build changed (one worker's rate and L0 by T / T', kappa less what the
    change saves, the receive floor times its factor)."""
    if rebuilt is None:
        return model
    speed = rebuilt.build_ms / rebuilt.new_build_ms if rebuilt.new_build_ms > 0 else math.inf
    kappa = model.cpu_s_per_sample
    if kappa is not None:
        kappa = max(kappa - rebuilt.cpu_saved_s, 0.02 * kappa)
    main = model.main
    if main is not None:
        main = None if rebuilt.receive_factor == math.inf else main * rebuilt.receive_factor
    big = 1e12  # a build that costs nothing: the loader never binds
    return replace(model,
                   per_worker=None if model.per_worker is None else min(big, model.per_worker * speed),
                   zero_workers=None if model.zero_workers is None else min(big, model.zero_workers * speed),
                   cpu_s_per_sample=kappa, main=main)


def _case(model: Fit, anchors: dict[int, float], base: LoaderSettings, top: int, cpus: int | None,
          tolerance: float, mode: DecodeMode | None, gpu_binds: bool = False,
          floors: dict[int, float] | None = None, measured_cpus: int | None = None,
          measured_with_workers: Sequence[float] = ()) -> WhatIfCase:
    """The curve, knee and what binds of `model` from 0 to `top` workers on `cpus` CPUs, the loader
    anchored (`anchors`); `floors`: samples/s a worker count is predicted at least at (what it
    measured, for a change that costs the build nothing more). On fewer CPUs than the rows were
    measured with (`measured_cpus`), an anchor above 1 lifts one worker's rate but not the CPUs'
    bound (U / kappa): it corrects the workers' side, as `_anchored` does for `cpus=` alone."""
    fewer = cpus is not None and measured_cpus is not None and cpus < measured_cpus
    preds = []
    for w in range(0, top + 1):
        load = model.loader(w, cpus)
        if load is None:
            continue
        a = anchors[min(anchors, key=lambda m: (abs(m - w), m))] if anchors else 1.0
        ka = 1.0 if fewer and a > 1.0 else a
        scaled = replace(model, per_worker=None if model.per_worker is None else model.per_worker * a,
                         zero_workers=None if model.zero_workers is None else model.zero_workers * a,
                         cpu_s_per_sample=None if not model.cpu_s_per_sample else model.cpu_s_per_sample / ka)
        rate = scaled.samples_per_s(w, cpus)
        if rate is not None and math.isfinite(rate):
            rate = max(rate, (floors or {}).get(w, 0.0))
            preds.append(Prediction(with_workers(base, w), rate, model.stall_fraction(rate)))
    knee = predicted_knee(preds, tolerance)
    if knee is None:
        return WhatIfCase(mode=mode)
    best = max(preds, key=lambda p: (p.samples_per_s, -p.settings.num_workers))
    wb = best.settings.num_workers
    a = anchors[min(anchors, key=lambda m: (abs(m - wb), m))] if anchors else 1.0
    curve = _curve(preds)
    step_ms = None if not model.compute else 1e3 * base.batch_size / model.compute
    binds = binds_at(model, wb, cpus, a, gpu_binds)
    if binds is Binds.WORKERS and workers_go_no_further(wb, curve, best.samples_per_s, measured_with_workers):
        binds = Binds.MAIN_PROCESS
    near = None
    if binds is Binds.STEP:
        # Where the curve flattens, or at the knee the answer quotes (its stall is the one printed).
        wk = knee.settings.num_workers
        ak = anchors[min(anchors, key=lambda m: (abs(m - wk), m))] if anchors else 1.0
        near = binds_near(model, wb, cpus, a) or _near_at_knee(model, binds, knee, cpus, ak)
    return WhatIfCase(mode=mode, knee=knee.settings, knee_samples_per_s=knee.samples_per_s,
                      knee_stall_fraction=knee.stall_fraction, binds=binds, binds_near=near,
                      curve=curve, shown_workers=shown_workers(knee.settings.num_workers, max(w for w, _ in curve), cpus),
                      step_ms_per_batch=step_ms)


def _best_loader(model: Fit, anchors: dict[int, float], top: int, cpus: int | None) -> float | None:
    """The most the (anchored) loader delivers from 1 to `top` workers."""
    rates = []
    for w in range(1, top + 1):
        load = model.loader(w, cpus)
        if load is not None:
            rates.append(load * (anchors[min(anchors, key=lambda m: (abs(m - w), m))] if anchors else 1.0))
    return max(rates) if rates else None


def _other_series(results: Sequence[ConfigResult], base: LoaderSettings) -> list[LoaderSettings]:
    """For each series measured with workers besides `base`'s, at its batch size and decoder,
    the settings of its fastest row."""
    best: dict[LoaderSettings, ConfigResult] = {}
    for r in _ranked(results):
        s = r.settings
        key = series_of(s)
        if (s.num_workers == 0 or key == series_of(base) or s.batch_size != base.batch_size
                or s.decoder != base.decoder):
            continue
        if key not in best or r.summary.samples_per_s > best[key].summary.samples_per_s:  # type: ignore[union-attr]
            best[key] = r
    return [r.settings for r in best.values()]


def what_if_pipeline(question: WhatIf, results: Sequence[ConfigResult], base: LoaderSettings, tolerance: float,
                     measured_cpus: int | None, profile: StageProfile | None,
                     rebuilt: _Rebuilt | None = None, *, across_series: bool = True) -> WhatIfAnswer:
    """The answer to a question that changes how a sample is built (a stage, the decoder;
    `cpus=` and `disk=` beside it too), for `base`'s series, per NOTE [what-ifs beyond the
    knobs]: the model fitted on the ranked rows that decode as `base` does, measured with
    `measured_cpus` CPUs, the build changed as the stage profile of the pick says (`profile`;
    or `rebuilt`, a change worked out by the caller), evaluated with the question's CPUs (else
    the measured ones) from 0 to twice the larger of those and the most workers measured.
    `why` when there is no profile, the stage or decoder cannot be found in it, or nothing with
    workers was measured. With `across_series`, a change built on the CPU is answered for each
    series measured (`_other_series`), and where `base`'s own answer is held by its main thread
    (MAIN_THREAD_BINDS) another series' answer replaces it where its knee is predicted faster by
    more than `tolerance` (`series_samples_per_s`, `series_binds` keep `base`'s own)."""
    names = [] if profile is None else askable_stages(profile)
    if profile is not None and question.stages:  # a stage asked in another case answers in the profile's
        spelled = {r.name.lower(): r.name for r in profile.stages}
        question = replace(question, stages=tuple(
            c if c.name in spelled.values() else replace(c, name=spelled.get(c.name.lower(), c.name))
            for c in question.stages))
    if rebuilt is None:
        if profile is None:
            return WhatIfAnswer(question, why=WhyNoPrediction.NO_PROFILE)
        found = rebuild(question, profile, base.batch_size)
        if isinstance(found, tuple):
            return WhatIfAnswer(question, why=found[0], stage_names=found[1])
        rebuilt = found
    if across_series and rebuilt.gpu_ms_per_batch is None:
        own = what_if_pipeline(question, results, base, tolerance, measured_cpus, profile, rebuilt,
                               across_series=False)
        if own.why is not None or not own.knee_samples_per_s or own.binds not in MAIN_THREAD_BINDS:
            return own
        others = [what_if_pipeline(question, results, b, tolerance, measured_cpus, profile, rebuilt,
                                   across_series=False) for b in _other_series(results, base)]
        best = max((a for a in others if a.why is None and a.knee_samples_per_s),
                   key=lambda a: a.knee_samples_per_s or 0.0, default=None)
        if best is None or (best.knee_samples_per_s or 0.0) <= (1.0 + tolerance) * own.knee_samples_per_s:
            return own
        return replace(best, base=base, base_samples_per_s=own.base_samples_per_s,
                       series_samples_per_s=own.knee_samples_per_s, series_binds=own.binds)
    cpus = question.cpus or measured_cpus
    rows = [r for r in _ranked(results) if r.settings.decoder == base.decoder]
    if question.disk_mb_per_s is not None:
        disk = what_if_disk(rows, base, question.disk_mb_per_s, question.disk_iops, tolerance, measured_cpus,
                            cpus=question.cpus)
        if disk.why is not None:
            return replace(disk, question=question, stage_names=names)
        rows = [r for r in rows if r.summary is not None and r.summary.served_from is not None
                and r.summary.served_from.is_cache]
    model = _unique_workers(fit(rows, series_of(base), measured_cpus), results)
    if not model.per_worker and not model.zero_workers:
        return WhatIfAnswer(question, why=WhyNoPrediction.NO_WORKERS_MEASURED, stage_names=names)
    if question.disk_mb_per_s is not None:
        b = statistics.median([t.needed_bytes / t.samples for r in rows for t in r.trials if t.needed_bytes and t.samples])
        files = [t.files_per_sample for r in rows for t in r.trials if t.files_per_sample]
        reads = float(statistics.median(files)) if files else 1.0
        iops = question.disk_iops
        fetch_s = reads / iops if iops else 0.0
        model = replace(model, device=min(question.disk_mb_per_s * 1e6 / b, iops / reads if iops else math.inf),
                        per_worker=None if not model.per_worker else 1.0 / (1.0 / model.per_worker + fetch_s),
                        zero_workers=None if not model.zero_workers else 1.0 / (1.0 / model.zero_workers + fetch_s))
    series = [r for r in rows if series_of(r.settings) == series_of(base)]
    anchors = _loader_anchors(fit(rows, series_of(base), measured_cpus), series, measured_cpus)
    widest = max((r.settings.num_workers for r in results), default=0)
    top = 2 * max(cpus or 1, widest)
    changed = _scaled(model, rebuilt)
    # What the series measured at each worker count, a floor on the same CPUs or more: for the
    # settings alone, and for a build no dearer (the model's main thread can read under a row
    # that ran faster: the receive and the step overlap a little).
    measured_at = ({} if (cpus or 0) < (measured_cpus or 0) else
                   {r.settings.num_workers: r.summary.samples_per_s for r in series if r.summary is not None})
    cheaper = (rebuilt.gpu_ms_per_batch is None and rebuilt.new_build_ms <= rebuilt.build_ms
               and rebuilt.cpu_saved_s >= 0.0 and rebuilt.receive_factor >= 1.0 and question.disk_mb_per_s is None)
    floors = measured_at if cheaper else None
    axes = with_worker_axes(series, base)  # the curve's configs with workers as the measured ones are
    # A change that makes the build no dearer leaves rows with workers at least as fast: theirs
    # tell whether the series goes further with workers where the model has no rate for them.
    with_workers = [] if not cheaper else [r.summary.samples_per_s for r in series
                                           if r.summary is not None and r.settings.num_workers > 0]
    cases: list[WhatIfCase] = []
    if rebuilt.gpu_ms_per_batch is not None:
        g = rebuilt.gpu_ms_per_batch
        t = 0.0 if not changed.compute else 1e3 * base.batch_size / changed.compute
        waits = rebuilt.gpu_host_waits  # the main thread waits for the decode: no overlap
        for mode, step_ms in ((DecodeMode.SERIALISED, t + g), (DecodeMode.OVERLAPPED, t + g if waits else max(t, g))):
            with_gpu = replace(changed, compute=1e3 * base.batch_size / step_ms if step_ms > 0 else changed.compute)
            # Serialised is the decode before the step (no prefetcher); overlapped, in the prefetcher.
            as_run = replace(axes, prefetch=mode is DecodeMode.OVERLAPPED)
            # The step waits for the decode for step_ms - t of each batch: where that is a stall a
            # measured row would not call compute-bound, the decode is what binds (its verdict:
            # GPU-decode-bound), whether it runs before the step or beside it.
            case = _case(with_gpu, anchors, as_run, top, cpus, tolerance, mode, measured_cpus=measured_cpus,
                         measured_with_workers=with_workers,
                         gpu_binds=step_ms > 0 and (step_ms - t) / step_ms >= LOADER_BOUND_STALL)
            cases.append(replace(case, step_ms_per_batch=step_ms,
                                 host_waits=waits and mode is DecodeMode.OVERLAPPED))
    else:
        cases.append(_case(changed, anchors, axes, top, cpus, tolerance,
                           DecodeMode.CPU if question.decode is not None else None, floors=floors,
                           measured_cpus=measured_cpus, measured_with_workers=with_workers))
    # What more workers alone give by the same model (no change; not with another storage
    # device, which the model already holds), and the change, each at best up to twice the
    # counts the curve shows: a loader that waits on I/O gains from workers past the CPUs, and
    # a change must beat what they give alone to be the change's gain (a decode on the GPU, whose
    # two cases keep the curve's counts, is weighed over those).
    unchanged = wide = None
    compared = 2 * top if rebuilt.gpu_ms_per_batch is None else top
    if question.disk_mb_per_s is None:
        unchanged = _case(model, anchors, axes, compared, cpus, tolerance, None, floors=measured_at,
                          measured_cpus=measured_cpus)
        if rebuilt.gpu_ms_per_batch is None:
            wide = _case(changed, anchors, axes, compared, cpus, tolerance, None, floors=floors,
                         measured_cpus=measured_cpus)
    first = cases[0]
    if first.knee is None:
        return WhatIfAnswer(question, why=WhyNoPrediction.NO_WORKERS_MEASURED, stage_names=names)
    before = _best_loader(model, anchors, top, cpus)
    after = _best_loader(changed, anchors, top, cpus)
    measured = next((r.summary.samples_per_s for r in _ranked(results) if r.settings == base  # type: ignore[union-attr]
                     and r.summary is not None), None)
    return WhatIfAnswer(
        question, knee=first.knee, knee_samples_per_s=first.knee_samples_per_s,
        knee_stall_fraction=first.knee_stall_fraction, curve=first.curve, shown_workers=first.shown_workers,
        binds=first.binds, binds_near=first.binds_near, usable_cpus=cpus, base=base, base_samples_per_s=measured, shifts=rebuilt.shifts,
        loader_speedup=rebuilt.build_ms / rebuilt.new_build_ms if rebuilt.new_build_ms > 0 else None,
        loader_gain=None if not before or not after else after / before,
        decode_from=rebuilt.decode_from, decoder_factor=rebuilt.decoder_factor,
        transforms_factor=rebuilt.transforms_factor,
        decoder_timing=None if profile is None or question.decode is not Decoder.TORCHVISION else profile.decoder_timing,
        gpu=None if profile is None or question.decode is not Decoder.NVJPEG else profile.gpu_decode,
        cases=cases if len(cases) > 1 else [], stage_names=names,
        unchanged_samples_per_s=None if unchanged is None else max((x for _, x in unchanged.curve), default=None),
        changed_samples_per_s=None if wide is None else max((x for _, x in wide.curve), default=None),
        compared_up_to_workers=None if unchanged is None else compared,
    )


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
def _best_row(results: Sequence[ConfigResult], keep: Callable[[LoaderSettings], bool]) -> ConfigResult | None:
    """The fastest ranked row whose settings `keep` accepts."""
    rows = [r for r in _ranked(results) if keep(r.settings)]
    return max(rows, key=lambda r: r.summary.samples_per_s) if rows else None  # type: ignore[union-attr]


def _top_rate(answer: WhatIfAnswer) -> tuple[float | None, float | None]:
    """The best case's knee samples/s and stall (of several cases, the faster)."""
    cases = answer.cases or [WhatIfCase(knee=answer.knee, knee_samples_per_s=answer.knee_samples_per_s,
                                        knee_stall_fraction=answer.knee_stall_fraction)]
    best = max(cases, key=lambda c: c.knee_samples_per_s or 0.0)
    return best.knee_samples_per_s, best.knee_stall_fraction


def beyond_knobs(results: Sequence[ConfigResult], base: LoaderSettings, tolerance: float, measured_cpus: int | None,
                 profile: StageProfile | None) -> BeyondKnobs | None:
    """The changes to the pipeline that would act where no setting clears the loader bottleneck
    (the caller asks only then), for the pick `base` (NOTE [what-ifs beyond the knobs]): another
    JPEG decoder (torchvision.io on the CPU; nvJPEG on the GPU where it was timed), each with a
    measured row of `--decoder` where the sweep has one; more usable CPUs where the CPUs bind on
    this machine (the fewest predicted to clear the stall, up to 8x the measured, else 8x); the largest other build stage of the
    profile twice as cheap; `__getitems__` where a batched fetch measured a large fixed cost per
    call (each only where it is STAGE_SHARE_THAT_COUNTS of a sample's whole time in the table or
    more: a build of almost nothing beside a slow receive has nothing to gain). A prediction is listed when it gains more than `tolerance` over the pick's measured
    samples/s; a measured row always. Measured first, then by predicted gain. None when the pick
    was not measured."""
    row = _best_row(results, lambda s: s == base)
    if row is None or row.summary is None:
        return None
    rate = row.summary.samples_per_s
    changes: list[PipelineChange] = []

    def add(kind: ChangeKind, question: WhatIf | None, answer: WhatIfAnswer | None,
            measured: ConfigResult | None = None) -> None:
        if answer is not None and (answer.why is not None or answer.knee is None):
            answer = None
        top, stall = (None, None) if answer is None else _top_rate(answer)
        gain = None if top is None or rate <= 0 else top / rate
        # Over what more workers alone would give too, best against best: that gain is not the change's.
        alone = None if answer is None else answer.unchanged_samples_per_s
        curves = [] if answer is None else [answer.curve, *(c.curve for c in answer.cases)]
        after = max((x for curve in curves for _, x in curve), default=None)
        if answer is not None and answer.changed_samples_per_s is not None:
            after = answer.changed_samples_per_s  # over the counts the alone figure is taken over
        if measured is None and (gain is None or gain <= 1.0 + tolerance
                                 or (alone is not None and after is not None and after <= (1.0 + tolerance) * alone)):
            return
        changes.append(PipelineChange(
            kind, question, answer, None if measured is None else measured.settings,
            None if measured is None or measured.summary is None else measured.summary.samples_per_s,
            gain, clears=stall is not None and stall < CLEARS_STALL))

    source = None if profile is None else jpeg_decoder_of(profile)
    decoded: set[str] = set()
    for dec in (Decoder.TORCHVISION, Decoder.NVJPEG):
        measured = _best_row(results, lambda s, d=dec: s.decoder == d.value and s.batch_size == base.batch_size)  # type: ignore[misc]
        if dec.value == base.decoder:
            continue
        question = WhatIf(decode=dec)
        answer = None
        if profile is not None and source is not None and not (dec is Decoder.TORCHVISION and source == "torchvision"):
            answer = what_if_pipeline(question, results, base, tolerance, measured_cpus, profile)
            if answer.why is None:
                decoded.add("decode")
        add(ChangeKind.DECODER, question, answer, measured)
    here = None if not measured_cpus else what_if_cpus(results, base, measured_cpus, tolerance,
                                                        measured_cpus=measured_cpus)
    if measured_cpus and here is not None and here.binds is Binds.CPUS:
        tried = [k * measured_cpus for k in (2, 3, 4, 6, 8)]
        answers = [(k, what_if_cpus_across(results, base, k, tolerance, measured_cpus)) for k in tried]
        clear = next(((k, a) for k, a in answers if a is not None and a.knee_stall_fraction is not None
                      and a.knee_stall_fraction < CLEARS_STALL), None)
        k, a = clear or answers[-1]
        add(ChangeKind.MORE_CPUS, WhatIf(cpus=k), a)
    if profile is not None:
        stages = [r for r in _builds(profile) if r.name not in decoded and not (
            r.kind == StageKind.DECODE.value and "decode" in decoded)]
        build = sum(_quiet_ms(r) for r in _builds(profile))
        whole = profile.sample_ms()  # a build of almost nothing beside a slow receive: no stage counts
        # Every stage that counts, made 2x cheaper; the one predicted to go furthest is offered (the
        # largest by time is not always it: a sleep beside CPUs that bind buys nothing).
        counted = [r for r in stages if build > 0 and _quiet_ms(r) / build >= STAGE_SHARE_THAT_COUNTS
                   and _quiet_ms(r) >= STAGE_SHARE_THAT_COUNTS * whole]
        halved = [(q, what_if_pipeline(q, results, base, tolerance, measured_cpus, profile))
                  for q in (WhatIf(stages=(StageChange(r.name, 2.0),)) for r in counted)]
        if halved:
            question, answer = max(halved, key=lambda qa: _top_rate(qa[1])[0] or 0.0
                                   if qa[1].why is None and qa[1].knee is not None else 0.0)
            add(ChangeKind.CHEAPER_STAGE, question, answer)
        fetched = profile.batched_fetch
        if (fetched is not None and build > 0 and fetched.fixed_ms / build >= BATCHED_FETCH_FIXED_SHARE
                and fetched.fixed_ms >= STAGE_SHARE_THAT_COUNTS * whole):
            saved = fetched.fixed_ms * (1.0 - 1.0 / base.batch_size)
            cpu = sum(r.cpu_ms_per_sample or 0.0 for r in _builds(profile))
            shift = StageShift("fixed cost per __getitem__ call", fetched.fixed_ms, fetched.fixed_ms / base.batch_size,
                               cpu * fetched.fixed_ms / build, cpu * fetched.fixed_ms / build / base.batch_size,
                               fetched.fixed_ms / build)
            rebuilt = _Rebuilt([shift], build, build - saved, cpu * saved / build / 1e3)
            add(ChangeKind.BATCHED_FETCH, None, what_if_pipeline(WhatIf(), results, base, tolerance, measured_cpus,
                                                                 profile, rebuilt=rebuilt))
    changes.sort(key=lambda c: (c.measured is None, -(c.gain or 0.0)))
    plateau = None if here is None else max((x for _, x in here.curve), default=None)
    return BeyondKnobs(base, rate, row.summary.stall_fraction, changes, profiled=profile is not None,
                       binds=None if here is None else here.binds, plateau_samples_per_s=plateau, tolerance=tolerance,
                       compute_samples_per_s=fit(results, series_of(base), measured_cpus).compute)
