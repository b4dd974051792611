"""The model-guided search (`--search auto`): measure where the knee is predicted to be and its
neighbours, not the whole grid.

NOTE [model-guided search]
    The grid is a set of series (configs that differ only in num_workers) per batch size. For
    each batch size:
      1. base series: the prefetcher and pin_memory on where the grid has them on a GPU (they
         usually help, and the search measures the others at the knee anyway), every other
         axis at its first listed value;
      2. probe: the worker count nearest a quarter of the usable CPUs (an uncontended
         per-worker rate, and batches that come often enough to measure it quickly);
      3. fit the pipeline model (analysis/predict.py) on everything measured so far, predict
         every worker count of the series, and measure the predicted knee (the fewest workers
         within the tolerance of the best prediction) if it is not measured yet;
      4. take the measured knee of the series (analysis/knee.py: measured configs only) and
         measure its neighbours in the worker list (one fewer step, one more); repeat 3-4 until
         the measured knee's neighbours are measured;
      5. variants: every other combination of the non-worker axes at the knee's worker count;
         where a variant measures best, its series gets steps 3-4 from there;
      6. repeats where they decide: the configs between half and twice the tolerance below the
         best (a repeat may move them across the knee's edge), and a config with fewer workers
         than the knee that measured once far below a prediction that made it the knee (NOTE
         [a measurement the model disputes]), and a config whose step slowed beside the loader
         that could otherwise reach the best (`Search.slowed`), with the best and the knee, get
         repeats,
         interleaved, up to --repeats, while --time-budget lasts and any config is left near
         the edge; the knee is taken again after each round, and a new knee gets its
         neighbours measured.
    When the worker list was not given (--num-workers), the list searched is every count from
    0 to the default grid's largest (the usable CPUs), or twice that for a loader whose workers
    use under half a core each (I/O-bound) or that is still loader-bound at the usable CPUs with
    CPUs to spare, so the knee is found to one worker, not to a power of two, and an I/O-bound
    loader may use more workers than CPUs. While the widest count measured is still
    loader-bound with the process tree's measured CPU use under the usable CPUs, the list
    doubles again, as long as the memory and open files measured there leave room for twice the
    workers (NOTE [room for more workers] in preflight.py) and --time-budget lasts (no step
    starts that would end after it): a loader bound by latency, not CPU, gains from requests in
    flight far past the core count (knees at 16-32 workers on 8 cores), so no fixed multiple of
    the CPUs caps it. Where the widening stopped, and why, is in the log (`widened`). `--baseline-settings` (the
    user's current settings) are measured first; 0 workers is measured when it may compete
    (Search._maybe_no_workers), else predicted.
    Nothing is ranked or recommended that was not measured: the model only chooses what to
    measure next; its predictions for the cells left unmeasured are shown as predictions, with
    the error of every prediction that was measured later.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loaderbench.analysis.knee import find_knee, rankable
from loaderbench.analysis.predict import Prediction, predict, series_of, with_workers
from loaderbench.analysis.wait import workers_short_of_cpu
from loaderbench.model import GRID_AXES, CeilingBound, ConfigResult, LoaderSettings, Verdict
from loaderbench.orchestration.preflight import room_for_workers
from loaderbench.results import SearchLog, SearchStep, Widening

Measure = Callable[[LoaderSettings, int], ConfigResult]
"""Measure one trial (repeat index) of a config; returns its result with every trial so far,
summarised (status ok, failed, hung or skipped)."""


@dataclass(frozen=True)
class HostLimits:
    """The host's limits on workers past the CPUs (NOTE [room for more workers] in
    preflight.py): memory available (bytes), the soft open-file limit, and whether every tensor
    in flight holds a descriptor (torch's 'file_descriptor' sharing strategy)."""

    memory_available_bytes: int | None = None
    fd_soft_limit: int | None = None
    per_tensor_fds: bool = True

    @classmethod
    def from_environment(cls, env: dict[str, Any]) -> HostLimits:
        """From the environment record (machine/env.py `capture_environment`)."""
        return cls(memory_available_bytes=env.get("memory_available_bytes"),
                   fd_soft_limit=(env.get("fd_limit") or {}).get("soft"),
                   per_tensor_fds=env.get("torch_sharing_strategy", "file_descriptor") == "file_descriptor")


class Search:
    """One model-guided search over `cells` (the normalised grid, plus every worker count when
    `dense_workers`). `measure(settings, repeat)` runs one trial; `clock()` is monotonic
    seconds (a fake in tests)."""

    def __init__(self, cells: Sequence[LoaderSettings], *, measure: Measure, tolerance: float, repeats: int,
                 budget_s: float, usable_cpus: int | None, cuda: bool, dense_workers: bool,
                 clock: Callable[[], float] = time.monotonic, first: Sequence[LoaderSettings] = (),
                 ranks: int = 1, reserve_s: Callable[[], float] = lambda: 0.0,
                 limits: HostLimits | None = None) -> None:
        self.cells = list(dict.fromkeys(cells))
        self.first = list(dict.fromkeys(first))  # the user's own settings, measured first
        self.measure_fn, self.tolerance, self.repeats = measure, tolerance, repeats
        self.usable_cpus, self.cuda, self.dense = usable_cpus, cuda, dense_workers
        self.limits = limits or HostLimits()
        # A distributed sweep's rows are the whole job's (samples/s and CPU summed over its
        # `ranks`): the model and the CPU-saturation check use the job's CPUs; worker counts
        # (per rank) use one rank's share, `usable_cpus`.
        self.model_cpus = None if usable_cpus is None else usable_cpus * max(1, ranks)
        self.clock = clock
        self.deadline = clock() + budget_s
        # Seconds a step must leave before the deadline: the trial it starts and what the sweep
        # runs after the search (orchestrate.py: the drift check), estimated from trials so far.
        self.reserve_s = reserve_s
        self.results: dict[LoaderSettings, ConfigResult] = {}
        self.predicted: dict[LoaderSettings, float] = {}  # the model's samples/s before each was measured
        self.log = SearchLog(grid_configs=len(self.cells), budget_s=budget_s)

    # -- bookkeeping ------------------------------------------------------------------------

    def estimated_trials(self) -> int:
        """A first estimate of the trials the search will run (for the progress bar's time
        left): per batch size, the probe, the predicted knee and its two neighbours, one
        variant per other series, then the extra repeats of about three competing configs."""
        total = 0
        for bs in {c.batch_size for c in self.cells}:
            series = {_base_of(c) for c in self.cells if c.batch_size == bs and c.num_workers > 0}
            total += 4 + max(0, len(series) - 1)
        return min(len(self.cells) * self.repeats, total + 3 * (self.repeats - 1))

    def out_of_time(self) -> bool:
        """Whether a new step would end after the deadline (`reserve_s()` seconds kept for it)."""
        return self.clock() + self.reserve_s() >= self.deadline

    def measured(self) -> list[ConfigResult]:
        return list(self.results.values())

    def _ok(self, s: LoaderSettings) -> bool:
        r = self.results.get(s)
        return r is not None and r.status == "ok" and r.summary is not None

    def _measure(self, s: LoaderSettings, why: str) -> ConfigResult:
        """Measure `s` once (its first trial), logging the model's prediction for it first."""
        if s in self.results:
            return self.results[s]
        preds = predict(self.measured(), [s], self.model_cpus)
        pred = preds[0] if preds else None
        r = self.measure_fn(s, 0)
        self.results[s] = r
        entry = SearchStep(s.key(), why, r.status)
        if pred is not None:
            self.predicted[s] = pred.samples_per_s
            entry.predicted_samples_per_s = pred.samples_per_s
            if r.summary is not None:
                entry.measured_samples_per_s = r.summary.samples_per_s
                self.log.predicted_before_measured.append(
                    Prediction(s, pred.samples_per_s, pred.stall_fraction, r.summary.samples_per_s))
        self.log.steps.append(entry)
        return r

    def workers_of(self, base: LoaderSettings) -> list[int]:
        """The worker counts searched for `base`'s series, ascending."""
        counts = {c.num_workers for c in self.cells if series_of(c) == series_of(base)
                  and (c.num_workers == 0 or _same_but_workers(c, base))}
        if self.dense and counts:
            # Every count up to the default grid's largest (the usable CPUs), or twice that for
            # a loader whose workers wait more than they compute (under half a core each, as
            # measured): it gains from more workers than CPUs.
            top = max(counts)
            limit = 2 * top if self.io_bound() or self._starved_at(base, top) else top
            # Still starved at the widest count with CPUs to spare: wider again, while the
            # memory and open files measured there leave room for twice the workers.
            refused = None
            while limit > 0 and self._starved_at(base, limit):
                refused = self._no_room(base, limit, 2 * limit)
                if refused is not None:
                    break
                limit *= 2
            if limit > top:
                self.log.widened = Widening(limit, refused)
            counts = set(range(0, limit + 1))
        return sorted(counts)

    def _no_room(self, base: LoaderSettings, measured: int, workers: int) -> str | None:
        """Why `workers` workers of `base`'s series would not fit, judged from the config
        measured at `measured` workers (preflight.room_for_workers); None when they fit."""
        r = self.results.get(with_workers(base, measured))
        s = None if r is None else r.summary
        if s is None:
            return None
        leaves = next((t.tensor_leaves for t in r.trials if t.tensor_leaves), None)  # type: ignore[union-attr]
        return room_for_workers(
            workers, measured_workers=measured, measured_pss_bytes=s.memory_pss_bytes,
            memory_available_bytes=self.limits.memory_available_bytes, prefetch_factor=base.prefetch_factor,
            tensor_leaves=leaves, fd_soft_limit=self.limits.fd_soft_limit, per_tensor_fds=self.limits.per_tensor_fds)

    def _starved_at(self, base: LoaderSettings, workers: int) -> bool:
        """Whether `workers` of `base`'s series measured loader-bound with CPUs to spare (the
        process tree under the saturation mark, or the workers not waiting for a CPU there:
        `workers_short_of_cpu`, other processes' load) and every worker at work (no idle workers:
        `Summary.idle_workers`): more workers than CPUs may still help, so the search goes on
        past the usable CPUs instead of advising to try more workers."""
        if workers <= 0:
            return False  # 0 workers has no workers to be starved: the main process loads
        r = self.results.get(with_workers(base, workers))
        s = None if r is None or r.status != "ok" else r.summary
        if (s is None or s.verdict is not Verdict.LOADER_BOUND or s.cpu_util_pct is None or not self.model_cpus
                or s.idle_workers):
            return False  # idle workers: the dataset gives work to fewer, more get none
        return not workers_short_of_cpu(s.cpu_util_pct, s.other_cores, s.worker_queue_share, self.model_cpus)

    def io_bound(self) -> bool:
        """Whether the measured configs with workers used under half a CPU core per worker
        (median over them); False before any was measured."""
        shares = []
        for r in rankable(self.measured()):
            cpu = None if r.summary is None else r.summary.cpu_util_pct
            if r.settings.num_workers > 0 and cpu is not None:
                shares.append(cpu / 100.0 / r.settings.num_workers)
        shares.sort()
        return bool(shares) and shares[len(shares) // 2] < 0.5

    # -- the search ----------------------------------------------------------------------------

    def run(self) -> list[ConfigResult]:
        """Search every batch size; returns the measured configs."""
        for batch_size in sorted({c.batch_size for c in self.cells}):
            cells = [c for c in self.cells if c.batch_size == batch_size]
            self._search_batch(cells)
        self._repeat_where_it_decides()
        counts = sorted({w for c in self.cells for w in self.workers_of(c)})
        self.log.workers_searched = [counts[0], counts[-1]] if counts else []
        return self.measured()

    def _search_batch(self, cells: list[LoaderSettings]) -> None:
        for c in self.first:
            if c.batch_size == cells[0].batch_size:
                self._measure(c, "--baseline-settings: your current settings")
        with_w = [c for c in cells if c.num_workers > 0]
        if not with_w:
            for c in cells:
                self._measure(c, "the grid has no workers")
            return
        bases = list(dict.fromkeys(_base_of(c) for c in with_w))
        base = self._choose_base(bases)
        knee_w = self._search_workers(base)
        self._maybe_no_workers(base)
        # Variants at the knee: every other series at the knee's worker count.
        for other in bases:
            if other != base and not self.out_of_time():
                self._measure(with_workers(other, knee_w or _fewest_workers(self.workers_of(other))),
                              "a variant at the knee's worker count")
        mine = [r for r in self.measured() if r.settings.batch_size == cells[0].batch_size]
        knee = find_knee(mine, tolerance=self.tolerance)
        if knee is not None and knee.settings.num_workers > 0 and _base_of(knee.settings) != base:
            self._search_workers(_base_of(knee.settings), start=knee.settings.num_workers)

    def _maybe_no_workers(self, base: LoaderSettings) -> None:
        """Measure 0 workers of `base`'s series when it may compete: the model predicts it from
        the workers' rate, which includes handing every batch to the main process, a cost 0
        workers never pays. So when 0 workers is predicted at half the best measured throughput
        or more, or at a quarter or more while a measured row of the series is bound by that
        hand-off (the receive floor), it is measured rather than predicted (a 0-worker config
        predicted far below, as decoding on a GPU host, is not worth its slow window)."""
        if 0 not in self.workers_of(base) or with_workers(base, 0) in self.results or self.out_of_time():
            return
        series = [r for r in rankable(self.measured()) if series_of(r.settings) == series_of(base)]
        preds = predict(self.measured(), [with_workers(base, 0)], self.model_cpus)
        if not series or not preds:
            return
        best = max(r.summary.samples_per_s for r in series)  # type: ignore[union-attr]
        share = preds[0].samples_per_s / best if best > 0 else 0.0
        if share >= 0.5:
            self._measure(with_workers(base, 0), "0 workers: predicted at half the best or more")
        elif share >= 0.25 and any(r.summary is not None and r.summary.verdict is Verdict.RECEIVE_FLOOR
                                   for r in series):
            self._measure(with_workers(base, 0), "0 workers: the hand-off from the workers binds, and 0 workers has none")

    def _choose_base(self, bases: list[LoaderSettings]) -> LoaderSettings:
        def score(b: LoaderSettings) -> tuple[int, ...]:
            on = int(b.pin_memory) + int(b.prefetch) if self.cuda else 0
            return (-on, bases.index(b))
        return min(bases, key=score)

    def _search_workers(self, base: LoaderSettings, start: int | None = None) -> int | None:
        """Steps 2-4 of NOTE [model-guided search] for `base`'s series; returns the measured
        knee's worker count (None when nothing of the series could be measured)."""
        counts = self.workers_of(base)
        if not counts:
            return None
        if start is None:
            probe = self._probe_count(counts)
            self._measure(with_workers(base, probe), "probe: a quarter of the CPUs in workers")
        for _ in range(2 * len(counts) + 2):
            counts = self.workers_of(base)
            if self.out_of_time():
                self.log.stopped = "--time-budget reached during the search: the knee of what was measured"
                self.log.budget_ended = True
                break
            series = [r for r in self.measured() if series_of(r.settings) == series_of(base)
                      and (r.settings.num_workers == 0 or _same_but_workers(r.settings, base))]
            target = self._predicted_knee(base, counts)
            if target is not None and with_workers(base, target) not in self.results:
                self._measure(with_workers(base, target), "the predicted knee")
                continue
            knee = find_knee(series, tolerance=self.tolerance)
            if knee is None:
                # Nothing of the series measured well (the probe failed): the next count up.
                left = [c for c in counts if with_workers(base, c) not in self.results]
                if not left:
                    return None
                self._measure(with_workers(base, left[0]), "nothing measured yet: the next count")
                continue
            w = knee.settings.num_workers
            tried = {r.settings.num_workers for r in series}
            below = [c for c in tried if c < w]
            # Between the most workers measured below the knee and the knee: the model's
            # predicted knee there (refitted after every measurement), else the knee's own
            # lower neighbour, until they are neighbours.
            gap = [c for c in counts if (max(below) if below else -1) < c < w]
            if below and gap:
                guess = self._predicted_knee(base, gap, relative_to=knee)
                # No count in the gap is predicted to qualify: check the knee's own neighbour.
                pick = guess if guess is not None else gap[-1]
                self._measure(with_workers(base, pick), "between the knee and the most workers below it")
                continue
            i = counts.index(w) if w in counts else None
            nbrs = [] if i is None else [n for n in (self._neighbour(base, counts, i, -1),
                                                     self._neighbour(base, counts, i, +1)) if n is not None]
            todo = [n for n in nbrs if with_workers(base, n) not in self.results]
            if not todo:
                # The most workers measured is the fastest and still starves for data: the
                # curve has not flattened yet, so one step further.
                top = max(series, key=lambda r: r.settings.num_workers)
                fastest = max(rankable(series), key=lambda r: r.summary.samples_per_s)  # type: ignore[union-attr]
                j = counts.index(top.settings.num_workers) if top.settings.num_workers in counts else None
                nxt = None if j is None else self._neighbour(base, counts, j, +1)
                if (fastest is top and top.summary is not None and top.summary.verdict is Verdict.LOADER_BOUND
                        and nxt is not None and with_workers(base, nxt) not in self.results):
                    self._measure(with_workers(base, nxt), "the fastest measured still waits for data: one more step")
                    continue
                return w
            self._measure(with_workers(base, todo[0]), "a neighbour of the measured knee")
        knee = find_knee([r for r in self.measured() if series_of(r.settings) == series_of(base)],
                         tolerance=self.tolerance)
        return None if knee is None else knee.settings.num_workers

    def _neighbour(self, base: LoaderSettings, counts: list[int], i: int, step: int) -> int | None:
        """The next count from counts[i] in direction `step` that did not fail (a failed or hung
        config says nothing about the curve: the one past it is the neighbour)."""
        j = i + step
        while 0 <= j < len(counts):
            r = self.results.get(with_workers(base, counts[j]))
            if r is None or r.status == "ok":
                return counts[j]
            j += step
        return None

    def _probe_count(self, counts: list[int]) -> int:
        """The first count measured: the one nearest a quarter of the usable CPUs (at least 1),
        so its workers do not share CPUs (an uncontended per-worker rate) and its batches come
        often enough to measure it quickly."""
        target = max(1.0, (self.usable_cpus or 1) / 4)
        nonzero = [c for c in counts if c > 0] or counts
        return min(nonzero, key=lambda c: (abs(c - target), c))

    def _predicted_knee(self, base: LoaderSettings, counts: list[int],
                        relative_to: ConfigResult | None = None) -> int | None:
        """The fewest workers among `counts` predicted within the tolerance of the best
        prediction (or of `relative_to`'s measured throughput); None when nothing is predicted
        or (with `relative_to`) no count qualifies."""
        cells = [with_workers(base, w) for w in counts]
        preds = predict(self.measured(), cells, self.model_cpus)
        if not preds:
            return None
        top = (max(p.samples_per_s for p in preds) if relative_to is None or relative_to.summary is None
               else relative_to.summary.samples_per_s)
        within = [p for p in preds if p.samples_per_s >= (1.0 - self.tolerance) * top]
        return min(p.settings.num_workers for p in within) if within else None

    def _repeat_where_it_decides(self) -> None:
        """Step 6: repeats for the configs that compete with the best, then the knee's
        neighbours again if the knee moved."""
        if self.log.stopped:
            return
        for repeat in range(1, self.repeats):
            if self.out_of_time():
                self.log.stopped = f"--time-budget reached before repeat {repeat + 1}"
                return
            disputed = {r.settings for r in self.disputed()}
            for r in self.competitors():
                if self.out_of_time():
                    self.log.stopped = f"--time-budget reached during repeat {repeat + 1}"
                    return
                if len(r.trials) <= repeat and r.status == "ok":
                    self.results[r.settings] = self.measure_fn(r.settings, repeat)
                    if r.settings in disputed:
                        self.log.steps.append(SearchStep(
                            r.settings.key(), "repeat: measured once, far below the model's prediction, which would "
                            "make it the knee", self.results[r.settings].status, repeat=True))
            knee = find_knee(self.measured(), tolerance=self.tolerance)
            if knee is not None and knee.settings.num_workers > 0:
                self._search_workers(_base_of(knee.settings), start=knee.settings.num_workers)
            if not self.competitors():
                self.log.stopped = "the ranking is clear: no config near the knee's edge"
                return
        self.log.stopped = (f"every config near the knee's edge measured {self.repeats} times" if self.repeats != 1
                            else "every config near the knee's edge measured once")

    def competitors(self) -> list[ConfigResult]:
        """The measured configs whose place decides the pick: those between half the tolerance
        and twice the tolerance below the best (a repeat may move them across the knee's edge),
        with the best and the knee when there is any such config. A config within half the
        tolerance is equal to the best whatever a repeat says, one further than twice the
        tolerance is out (analysis.knee.qualifies caps noise there), so neither gets repeats,
        unless the model disputes its one trial (`disputed`), its step slowed beside the loader
        (`slowed`) or its window read above what its loader sustained alone (`above_ceiling`)."""
        ok = rankable(self.measured())
        if not ok:
            return []
        best = max(ok, key=lambda r: r.summary.samples_per_s)  # type: ignore[union-attr]
        top = best.summary.samples_per_s  # type: ignore[union-attr]
        edge = [r for r in ok if (1.0 - 2 * self.tolerance) * top <= r.summary.samples_per_s  # type: ignore[union-attr]
                < (1.0 - self.tolerance / 2) * top]
        edge += [r for r in self.disputed() if r not in edge]
        edge += [r for r in self.slowed() if r not in edge]
        edge += [r for r in self.above_ceiling() if r not in edge]
        if not edge:
            return []
        knee = find_knee(ok, tolerance=self.tolerance)
        chosen = {r.settings: r for r in [*edge, best, *([knee] if knee is not None else [])]}
        return sorted(chosen.values(), key=lambda r: r.settings.structural_key())

    def slowed(self) -> list[ConfigResult]:
        """Configs whose step ran over STEP_SLOWED slower beside the loader than alone
        (`Summary.step_slowed`: the training process short of CPU, or a disturbed host) and
        that could decide the pick: at their step's own pace (samples/s x (1 + the slowdown))
        they would reach the tolerance of the best (the best itself does). They get repeats,
        up to --repeats, like a competitor, until their median no longer slowed: a row must not
        rank low, or a pick rest on it, because of one disturbed trial."""
        ok = rankable(self.measured())
        if not ok:
            return []
        top = max(r.summary.samples_per_s for r in ok)  # type: ignore[union-attr]
        return [r for r in ok if r.summary is not None and r.summary.step_slowed
                and r.summary.samples_per_s * (1.0 + (r.summary.step_slowdown or 0.0)) >= (1.0 - self.tolerance) * top]

    def above_ceiling(self) -> list[ConfigResult]:
        """Configs whose window with the step read more than CEILING_SLACK above what the same
        loader then sustained alone (`Summary.loader_ceiling_bound` BELOW_STEP_RATE: the probe
        after the window read under the row) and that could decide the pick (within the
        tolerance of the best, or the best). One of the two readings was off: a short window of
        builds that vary reads far from the loader's rate (16 workers of jittered latency on
        the H200: windows of 809, 636 and 624 samples/s of one config in turn, plain loops
        634-712, the probe 646). They get repeats, up to --repeats, like a competitor: the
        median of windows ranks them, and the probe's reading is set against it again
        (statistics.summarize)."""
        ok = rankable(self.measured())
        if not ok:
            return []
        top = max(r.summary.samples_per_s for r in ok)  # type: ignore[union-attr]
        return [r for r in ok if r.summary is not None
                and r.summary.loader_ceiling_bound is CeilingBound.BELOW_STEP_RATE
                and r.summary.samples_per_s >= (1.0 - self.tolerance) * top]

    def disputed(self) -> list[ConfigResult]:
        """Configs whose one trial decides the pick against the model: measured once, with
        fewer workers than the knee of their series, the model's prediction made before they were
        measured within the tolerance of the best (they would be the knee), their measurement
        more than twice the tolerance below it (out of the competitors' band).

        NOTE [a measurement the model disputes]
            One trial can read far low: on 2 CPUs a 4-worker config read 862 samples/s where
            the model had predicted 1,070 and 4 workers measured 1,011-1,027 in other runs; the
            pick went to 6 workers (1,002). That one trial alone put the knee past it, so it
            gets the repeats a competitor gets (and the best and the knee with it, interleaved);
            the median then ranks it. A config the model also put low, or with more workers
            than the knee, cannot move the pick this way and is left alone."""
        ok = rankable(self.measured())
        if not ok:
            return []
        top = max(r.summary.samples_per_s for r in ok)  # type: ignore[union-attr]
        knee = find_knee(ok, tolerance=self.tolerance)
        if knee is None or knee.settings.num_workers <= 0:
            return []
        out = []
        for r in ok:
            predicted = self.predicted.get(r.settings)
            if (predicted is not None and len(r.trials) == 1 and _same_but_workers(r.settings, knee.settings)
                    and 0 < r.settings.num_workers < knee.settings.num_workers
                    and predicted >= (1.0 - self.tolerance) * top
                    and r.summary.samples_per_s < (1.0 - 2 * self.tolerance) * top):  # type: ignore[union-attr]
                out.append(r)
        return out


def _same_but_workers(a: LoaderSettings, b: LoaderSettings) -> bool:
    return _base_of(a) == _base_of(b)


def _base_of(s: LoaderSettings) -> LoaderSettings:
    """The settings with num_workers set to 1 (the workers-only axes kept): a series key for
    configs with workers."""
    return LoaderSettings(**{**s.to_dict(), "num_workers": 1}) if s.num_workers > 0 else s


def _fewest_workers(counts: list[int]) -> int:
    return next((w for w in counts if w > 0), counts[0])


def axes_varied(cells: Sequence[LoaderSettings]) -> list[str]:
    """The grid axes with more than one value among `cells`."""
    return [a.name for a in GRID_AXES if len({getattr(c, a.name) for c in cells}) > 1]
