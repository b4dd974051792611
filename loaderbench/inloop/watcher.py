"""`loaderbench.watch`: the sweep's timing engine inside your own training loop.

    for batch in loaderbench.watch(loader):      # the one-line change
        train_step(batch)

`Watch` wraps a DataLoader (or any iterable of batches) and times every step with the sweep's
timing engine (measure/timing.py: its markers, `split_steps` and `WarmUp`; NOTE [timing model]);
on demand (`result()`, `save()`) or when its `with` block ends it assembles the `Trial` with the
sweep's Trial assembly (measure/assembly.py) and the records a one-config sweep writes: a
`ResultSet` with one `ConfigResult` whose settings are read from the DataLoader, so `loaderbench
show`, `compare` and `plot` read the saved file like any other.

The rooms of the watch: this module (the loop's protocol: iteration, callbacks, the window),
`loader.py` (what the loader is: settings, samples per batch), `usage.py` (the window meter's
segments), `ranges.py` (profiler ranges), `result.py` (ranks gathered, the `ResultSet`, the
prediction and the settings to try next).

NOTE [watching a training loop]
    The loop is the user's, so the instants of NOTE [timing model] come from where the loop
    touches the loader:
      t0[N]:    the loop asks for batch N (`next()` is called);
      ready[N]: batch N is usable (returned by the loader; after the H2D copy when `device=` is
                given, which moves it with non_blocking when its tensors are pinned);
      end[N]:   the step on batch N has finished: the next `next()` call (the loop came back
                for more), or an explicit `step_end()`;
      prev[N]:  end[N-1], or the epoch's start, or the window's start (below).
    With the implicit boundary t0[N] and end[N-1] are one instant, which is the sweep's loop
    exactly; with `step_end()` the loop's own work between `step_end()` and the next `next()`
    (logging, say) counts as compute, never as data-wait.
    The instants are host clock readings on CPU and CUDA events on the current (compute)
    stream when CUDA is in use (the engine's markers); no step is synchronised (events are read
    once, when a result is asked for; interval statistics read only the events already
    complete, with `query()`).
    An epoch (a new `iter()` of the watch) starts at the instant before `iter(loader)` is
    called, since that call starts the workers: the first batch of the first epoch is the
    start-up (`first_batch_s`, kept apart like the sweep's); the first batch of a later epoch
    is measured and marked as an epoch start (its wait is the epoch-start gap the verdicts
    split off). What the loop does between epochs (validation) is in no step. A batch handed
    out whose step never ended (a `break`, an exception) is not counted: only complete steps are.
    Warm-up as in the sweep (the engine's `WarmUp`, NOTE [backlog drain]): after the first
    batch at least max(warmup_batches, num_workers x prefetch_factor) batches are dropped, and
    on until a `next()` blocks or the loader's ready queue stays full, at most 8 x num_workers x
    prefetch_factor. Then up to `max_batches` steps are measured (the window), with the process
    tree's CPU and memory and NVML GPU utilisation read over it (measure.meter); later batches
    pass through with no timing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loaderbench.inloop.loader import (
    check_iterable,
    count_samples,
    describe_source,
    loader_class_settings,
    read_settings,
)
from loaderbench.inloop.ranges import RANGE_COPY, RANGE_STEP, RANGE_WAIT, enter_range, exit_range
from loaderbench.inloop.result import (
    build_result_set,
    gather_trial,
    process_group,
    suggested_settings,
)
from loaderbench.inloop.usage import SegmentedUsage
from loaderbench.measure.assembly import assemble_trial
from loaderbench.measure.introspect import delivered_by, pending_workers
from loaderbench.measure.timing import CudaEventMarker, HostMarker, LoopTimes, WarmUp, marker_for, split_steps
from loaderbench.model import ConfigResult, Note, Trial, WarningKind
from loaderbench.results import ResultSet

Clock = Callable[[], float]
TIMINGS = ("auto", "host", "events", "sync")
MIN_MEASURED = 10  # fewer measured steps get a few-batches note, as in the sweep
RECEIVES_KEPT = 64


class WatchError(RuntimeError):
    """Misuse of a `Watch` that would give a wrong number (e.g. `step_end()` without a batch)."""


# ---------------------------------------------------------------------------------------------
# The watch.


@dataclass
class _Step:
    """One step's instants (indices into the marker's timeline: timing.Instants) and what the
    host saw."""

    prev: int
    t0: int
    ready: int
    samples: int
    host_wait_s: float
    epoch_start: bool = False
    epoch_gap_s: float | None = None
    receive_s: float | None = None
    copy: tuple[int, int] | None = None
    end: int = -1
    range_: Any = None
    worker: int | None = None  # the DataLoader worker that built it, where known


class Watch:
    """Watch `loader` inside your own training loop: `for batch in loaderbench.watch(loader):`.

    Per step it records data-wait (the loop waiting for the batch, H2D included when `device`
    is given) and compute (the rest of the step), in seconds, as the sweep does (NOTE [watching
    a training loop]); over the measured window, the process tree's CPU and memory (PSS) and the
    GPU's NVML utilisation. The result (`w.result()`, `w.save(path)`, or `output=` written when
    a `with` block ends) is a one-config sweep result: `loaderbench show`, `compare` and `plot`
    read it.

    - `loader`: a DataLoader (its num_workers, pin_memory, prefetch_factor,
      persistent_workers and batch_size are the config's settings), a `CUDAPrefetcher` around
      one, or any iterable of batches. TypeError for anything else (a map-style Dataset: wrap
      it in a DataLoader).
    - `device`: move each batch there (`non_blocking` when its tensors are pinned), the copy
      timed with CUDA events as H2D; None: the loop moves it (its copy counts as compute).
    - `samples_per_batch`: a count, or a function of the batch; default: counted from the
      batch (`count_samples`: dicts, tuples, lists of tensors and numpy arrays).
    - `warmup_batches`: batches dropped after the first (raised to num_workers x
      prefetch_factor, as the sweep does); `max_batches`: steps measured at most (then batches
      pass through untimed).
    - `timing`: "auto" (CUDA events when CUDA is initialised or `device` is CUDA, else the
      host clock), "host", "events", "sync" (synchronise at both instants: exact, slower).
    - `annotate`: profiler ranges `loaderbench.data_wait`, `loaderbench.h2d` and
      `loaderbench.step` (torch.profiler.record_function, and NVTX on CUDA).
    - `tensorboard`: a SummaryWriter (anything with `add_scalar`): every `log_every_steps`
      measured steps, `loaderbench/data_wait_ms`, `step_time_ms`, `stall_fraction` and
      `samples_per_s`.
    - `output`: the result file a `with` block writes when it ends, and a plain `for` loop over
      the watch at the end of each epoch (one process only: under torch.distributed saving is a
      collective, so there only the `with` block writes it); `label`: the run's name.
    - `clock`: the host clock (seconds; a fake in tests); `measure_resources`: False skips the
      CPU/memory/GPU-utilisation meter.
    Raises ValueError for a bad option; `step_end()` without a batch raises WatchError.

    Iterate it (`for batch in w:`; each `iter()` is an epoch), or drive it from callbacks with
    `epoch_start()`, `batch_ready(batch)` and `step_end()`. `result()` gives the ResultSet,
    `save(path)` writes it, `report()` says it in sentences; `interval()` gives the statistics
    of the steps completed since its last call (for TensorBoard-style logging). NOTE [watching
    a training loop] says what is measured.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        *,
        device: Any = None,
        samples_per_batch: int | Callable[[Any], int] | None = None,
        warmup_batches: int = 3,
        max_batches: int = 10_000,
        timing: str = "auto",
        annotate: bool = False,
        tensorboard: Any = None,
        log_every_steps: int = 50,
        output: str | Path | None = None,
        label: str = "watch",
        clock: Clock = time.perf_counter,
        measure_resources: bool = True,
    ) -> None:
        check_iterable(loader)
        if timing not in TIMINGS:
            raise ValueError(f"watch(timing=...): expected one of {', '.join(TIMINGS)}, got {timing!r}")
        if warmup_batches < 0 or max_batches < 1:
            raise ValueError(
                f"watch(): warmup_batches must be >= 0 and max_batches >= 1, got {warmup_batches} and {max_batches}"
            )
        if isinstance(samples_per_batch, int) and samples_per_batch < 1:
            raise ValueError(f"watch(samples_per_batch=...): expected a count >= 1, got {samples_per_batch}")
        self.loader = loader
        self.label = label
        self.output = None if output is None else Path(output)
        if self.output is not None and self.output.suffix.lower() != ".json":
            raise ValueError(f"watch(output={str(output)!r}): the result file is JSON; name it *.json")
        self._clock = clock
        self._ended_by: str | None = None  # the exception that ended the `with` block, if any
        self._samples_per_batch = samples_per_batch
        self._warmup_batches = warmup_batches
        self._max_batches = max_batches
        self._annotate = annotate
        self._tensorboard = tensorboard
        self._log_every = max(1, int(log_every_steps))
        self._measure_resources = measure_resources
        self.settings, self._dataloader = read_settings(loader)
        self._device = None
        self._cuda = False
        self._timing_asked = timing
        if device is not None:
            import torch

            self._device = torch.device(device)
        self._marker: HostMarker | CudaEventMarker | None = None
        self.timing = ""
        # step state
        self._open: _Step | None = None
        self._prev_end: int | None = None
        self._epoch: tuple[int, float] | None = None  # (mark, host time) of an epoch not yet started
        self._epochs = 0
        self._batches_seen = 0
        self._phase = "first"  # first -> warm -> window -> full
        self._warm = 0
        self._warmup = WarmUp.for_loader(self.settings, warmup_batches, ready_count=self._ready_count,
                                         working_count=self._working_count)
        self._first_batch_s: float | None = None
        self._first_counted: int | None = None
        self._steps: list[_Step] = []
        self._next_worker: int | None = None  # the worker of the batch the iterator just returned
        self._receives: list[float] = []
        self._it: Iterator[Any] | None = None
        self._meter: Any = None
        self._usage = SegmentedUsage()
        self._interval_from = 0
        self._interval_logged = 0
        self._first_info: Any = None
        self._first_sizes: list[int] | None = None
        self._host_t0: float | None = None
        self._t0_ref: int | None = None
        self._was_ready = False
        self._last_result: tuple[int, ResultSet] | None = None

    # -- set-up ------------------------------------------------------------------------------

    def _start_marker(self) -> None:
        if self._marker is not None:
            return
        import torch

        cuda_on = torch.cuda.is_available() and (
            (self._device is not None and self._device.type == "cuda") or torch.cuda.is_initialized()
        )
        timing = self._timing_asked
        if timing == "auto":
            timing = "events" if cuda_on else "host"
        if timing in ("events", "sync") and not torch.cuda.is_available():
            raise WatchError(f"watch(timing={timing!r}) needs CUDA, which is not available here: use timing='host'")
        self._cuda = timing in ("events", "sync") or (self._device is not None and self._device.type == "cuda")
        self.timing = timing
        self._marker = marker_for(timing, clock=self._clock)

    def _mark(self) -> int:
        assert self._marker is not None
        return self._marker.mark()

    # -- the loop ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        self.epoch_start()
        self._it = iter(self.loader)
        return _Batches(self, self._it)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._open = None  # a step the block left unfinished is not counted
        if exc is not None and not isinstance(exc, GeneratorExit):
            first = (str(exc).strip().splitlines() or [""])[0]
            self._ended_by = f"{exc_type.__name__}: {first}" if first else exc_type.__name__
        if self.output is not None:
            self.save(self.output)  # also when nothing was measured: the file says why

    def epoch_start(self) -> None:
        """Mark the start of an epoch (what `iter()` does): the instant before the loader starts
        its workers. A batch handed out and never ended is dropped (not a complete step)."""
        self._start_marker()
        self._open = None
        if self._phase == "full":
            return
        self._epoch = (self._mark(), self._clock())
        self._epochs += 1

    def epoch_done(self) -> None:
        """The loader ran out (an epoch ended): with `output`, the result file is written now, so
        a plain `for` loop (no `with` block) leaves it too; in one process only (under
        torch.distributed saving gathers every rank, and ranks may end their epochs apart)."""
        if self.output is None:
            return
        world, _rank, _local = process_group()
        if world == 1:
            self.save(self.output)

    def wait_start(self) -> None:
        """The loop asks for the next batch (t0): ends the previous step when it is still open
        (the implicit step boundary). The iterator calls it at every `next()`."""
        self._start_marker()
        if self._phase == "full":
            self._host_t0 = self._clock()
            self._open = None
            return
        if self._open is not None:
            self._t0_ref = self._finish(self._mark())
        elif self._epoch is None and self._prev_end is not None:
            self._t0_ref = self._mark()  # after step_end(): the loop's own work since is compute
        self._host_t0 = self._clock()
        self._was_ready = self._phase == "window" and (self._ready_count() or 0) >= 1

    def batch_ready(self, batch: Any) -> Any:
        """The loop has its next batch (ready): moves it to `device` when one was given (the
        copy timed), marks ready, counts its samples and opens its step, which the next
        `wait_start()` (the iterator's `next()`) or `step_end()` closes. Returns the batch
        (moved). Callbacks that see a batch only after the loop fetched it call this alone: t0
        is then the previous step's end."""
        self._start_marker()
        host_t1 = self._clock()
        self._batches_seen += 1
        if self._phase == "full":
            return self._move(batch, timed=False)
        host_t0 = self._host_t0 if self._host_t0 is not None else host_t1
        if self._open is not None:  # no wait_start and no step_end: the step ended here
            self._t0_ref = self._finish(self._mark())
            host_t0, self._was_ready = host_t1, False
        if self._epoch is None and self._prev_end is None:
            self.epoch_start()
        gap = None
        if self._epoch is not None:
            prev, epoch_host = self._epoch
            t0, host_t0, gap = prev, epoch_host, host_t1 - epoch_host
            self._epoch = None
        else:
            assert self._prev_end is not None
            prev = self._prev_end
            t0 = self._t0_ref if self._t0_ref is not None else prev
        self._t0_ref = None
        self._host_t0 = None
        if self._first_info is None:
            self._inspect(batch)
        copy = None
        if self._device is not None:
            batch, copy = self._move(batch, timed=True)
        ready = self._mark()
        n = self._count(batch)
        step = _Step(prev=prev, t0=t0, ready=ready, samples=n, host_wait_s=host_t1 - host_t0,
                     epoch_start=gap is not None and self._phase != "first", epoch_gap_s=gap, copy=copy,
                     worker=self._next_worker)
        self._next_worker = None
        if self._phase == "first":
            self._first_batch_s = self._clock() - host_t0
            self._first_counted = n
        elif self._phase == "warm":
            self._warm += 1
            if self._warmup.over(self._warm, host_t0, host_t1 - host_t0):
                self._phase = "window-next"
        elif self._phase == "window" and self._was_ready and not step.epoch_start:
            step.receive_s = host_t1 - host_t0
        if self._annotate:
            step.range_ = enter_range(RANGE_STEP)
        self._open = step
        return batch

    def step_end(self) -> None:
        """The step on the current batch has finished (its kernels queued, on CUDA): call it
        once per batch, after the step, in loops where the next `next()` is not the step's end
        (work between steps that is not data-wait). Raises WatchError when no batch is open."""
        if self._phase == "full":
            return
        if self._open is None:
            raise WatchError(
                "step_end() without a batch: call it once per batch, after that batch's step "
                "(the loop must have taken a batch from the watch first)"
            )
        self._finish(self._mark())

    def _finish(self, end: int) -> int:
        """Close the open step at instant `end`; returns the instant the next step starts from:
        `end`, or, when the measured window begins here, an instant taken after the window's
        meter started (its start-up, about 0.1 s the first time in a process, is in no step)."""
        step = self._open
        assert step is not None
        self._open = None
        step.end = end
        self._prev_end = end
        if step.range_ is not None:
            exit_range(step.range_)
            step.range_ = None
        if self._phase == "first":
            self._phase = "warm"
            if self._warmup.most == 0:
                self._phase = "window-next"
        elif self._phase == "window":
            self._steps.append(step)
            if step.receive_s is not None:
                self._receives.append(step.receive_s)
                del self._receives[:-RECEIVES_KEPT]
            if len(self._steps) >= self._max_batches:
                self._stop_meter()
                self._phase = "full"
            elif self._tensorboard is not None and len(self._steps) - self._interval_logged >= self._log_every:
                self._log_interval()
        if self._phase == "window-next":
            self._phase = "window"
        if self._phase == "window" and self._meter is None:
            self._start_meter()
            end = self._prev_end = self._mark()
        return end

    def _ready_count(self) -> int | None:
        if self._dataloader is None or self._it is None:
            return None
        from loaderbench.measure.introspect import ready_batches

        return ready_batches(_IteratorHolder(self._it))

    def _working_count(self) -> int | None:
        if self._dataloader is None or self._it is None:
            return None
        from loaderbench.measure.introspect import working_workers

        return working_workers(_IteratorHolder(self._it))

    def _count(self, batch: Any) -> int:
        spb = self._samples_per_batch
        if callable(spb):
            return int(spb(batch))
        if spb:
            return int(spb)
        if self._per_item:
            return 1  # batch_size=None: the loader hands out dataset items uncollated, one each
        return count_samples(batch, self._dataloader.batch_size if self._dataloader is not None else None)

    @property
    def _per_item(self) -> bool:
        """A DataLoader with automatic batching off (batch_size=None): every item is one sample."""
        dl = self._dataloader
        return dl is not None and dl.batch_size is None and getattr(dl, "batch_sampler", None) is None

    def _inspect(self, batch: Any) -> None:
        from loaderbench.workload.batch import inspect_batch, leading_sizes

        self._first_info = inspect_batch(batch)
        self._first_sizes = leading_sizes(batch)

    def _move(self, batch: Any, *, timed: bool) -> Any:
        from loaderbench.workload.batch import move_to_device

        if self._device is None:
            return batch if not timed else (batch, None)
        pinned = self._first_info is not None and self._first_info.pinned_leaves > 0
        if not timed:
            return move_to_device(batch, self._device, non_blocking=pinned)
        rng = enter_range(RANGE_COPY) if self._annotate else None
        begin = self._mark() if self._cuda else None
        out = move_to_device(batch, self._device, non_blocking=pinned)
        end = self._mark() if self._cuda else None
        if rng is not None:
            exit_range(rng)
        return out, (None if begin is None or end is None else (begin, end))

    # -- the meter -----------------------------------------------------------------------------

    def _start_meter(self) -> None:
        if not self._measure_resources:
            self._meter = False
            return
        from loaderbench.machine import gpu
        from loaderbench.measure.meter import WindowMeter

        index = None
        if self._cuda:
            import torch

            index = self._device.index if self._device is not None and self._device.index is not None else (
                torch.cuda.current_device())
        self._meter = WindowMeter(gpu.make_util_sampler(index))
        self._meter.start()

    def _stop_meter(self) -> None:
        if self._meter:
            self._usage.add(self._meter.stop())
        self._meter = None if self._phase != "full" else False

    # -- results -------------------------------------------------------------------------------

    @property
    def has_open_step(self) -> bool:
        """Whether a batch was handed out and its step has not ended yet."""
        return self._open is not None

    @property
    def measured_steps(self) -> int:
        """Complete steps measured so far (warm-up excluded)."""
        return len(self._steps)

    def _times(self, *, wait: bool) -> list[float]:
        return [] if self._marker is None else self._marker.resolve(wait=wait)

    def interval(self) -> dict[str, float] | None:
        """Statistics of the measured steps completed since the last call whose instants can be
        read without waiting (CUDA events already complete): `steps`, `data_wait_mean_s`,
        `step_mean_s`, `stall_fraction` (0..1), `samples_per_s`. None when there is none."""
        t = self._times(wait=False)
        fresh = []
        for s in self._steps[self._interval_from:]:
            if s.end >= len(t) or s.prev >= len(t):
                break
            fresh.append(s)
        if not fresh:
            return None
        self._interval_from += len(fresh)
        split = split_steps(t, fresh)
        waits = split.data_wait_s
        total = sum(split.step_s)
        return {
            "steps": float(len(fresh)),
            "data_wait_mean_s": statistics.fmean(waits),
            "step_mean_s": total / len(fresh),
            "stall_fraction": min(1.0, max(0.0, sum(waits) / total)) if total > 0 else 0.0,
            "samples_per_s": sum(s.samples for s in fresh) / total if total > 0 else 0.0,
        }

    def _log_interval(self) -> None:
        self._interval_logged = len(self._steps)
        stats = self.interval()
        if stats is None:
            return
        w = self._tensorboard
        step = self._warm + self._interval_from
        w.add_scalar("loaderbench/data_wait_ms", stats["data_wait_mean_s"] * 1e3, step)
        w.add_scalar("loaderbench/step_time_ms", stats["step_mean_s"] * 1e3, step)
        w.add_scalar("loaderbench/stall_fraction", stats["stall_fraction"], step)
        w.add_scalar("loaderbench/samples_per_s", stats["samples_per_s"], step)

    def trial(self) -> Trial | None:
        """This process's measured window as a `Trial` (the sweep's record of one repeat), or
        None when no step was measured. Reads CUDA events once (one synchronise)."""
        if self._phase == "window" and self._meter:
            self._stop_meter()
        if not self._steps:
            return None
        t = self._times(wait=True)
        steps = self._steps
        split = split_steps(t, steps)
        h2d = [t[s.copy[1]] - t[s.copy[0]] for s in steps if s.copy is not None]
        notes: list[Note] = []
        if len(steps) < MIN_MEASURED:
            notes.append(Note.of(WarningKind.FEW_BATCHES,
                                 f"only {len(steps)} {'batch' if len(steps) == 1 else 'batches'} measured "
                                 f"(fewer than {MIN_MEASURED}): numbers are rough"))
        if self._ended_by:
            notes.append(Note.of(WarningKind.OTHER, f"the loop ended with {self._ended_by}: the figures cover "
                                                    "the steps completed before it"))
        if self._per_item and not self._samples_per_batch:
            notes.append(Note.of(WarningKind.SAMPLE_COUNT,
                                 "batch_size=None: every item the loader hands out is counted as one sample; "
                                 "give watch(..., samples_per_batch=N) when an item holds N samples"))
        loop = LoopTimes(
            first_batch_s=float(self._first_batch_s or 0.0),
            warmup_batches=self._warm,
            data_wait_s=split.data_wait_s,
            compute_s=split.compute_s,
            step_s=split.step_s,
            host_wait_s=[s.host_wait_s for s in steps],
            samples=sum(s.samples for s in steps),
            notes=notes,
            receive_s=list(self._receives),
            epoch_gap_s=[s.epoch_gap_s for s in steps if s.epoch_start and s.epoch_gap_s is not None],
            epoch_start_batches=[i for i, s in enumerate(steps) if s.epoch_start],
        )
        import torch

        trial = assemble_trial(
            loop,
            timing=self.timing,
            reading=self._usage.reading(),
            first_batch=self._first_info,
            cuda=self._cuda,
            h2d=bool(h2d),
            pin_memory=self.settings.pin_memory,
            torch_threads_main=torch.get_num_threads(),
            samples_rule="given" if self._samples_per_batch else "counted",
            h2d_s=h2d if len(h2d) == len(steps) else [],
            h2d_hidden_fraction=0.0 if h2d else None,  # copied on the compute stream: nothing hides it
        )
        # The batches each worker delivered in the window, where every step's worker is known
        # (NOTE [which worker built a watched batch] in measure/introspect.py).
        workers = self.settings.num_workers
        if workers > 0 and all(s.worker is not None for s in steps):
            from loaderbench.measure.trial import worker_batches

            trial.worker_batches = worker_batches([s.worker for s in steps], workers)
        return trial

    def _unmeasured_error(self) -> str:
        if self._ended_by:
            return (f"the loop ended with {self._ended_by} after {self._batches_seen} "
                    f"batch{'es' if self._batches_seen != 1 else ''}, before a step could be measured")
        if not self._batches_seen:
            return "the loader yielded no batch: nothing to measure"
        least = self._warmup.least
        return (
            f"too few batches to measure: {self._batches_seen} batch{'es' if self._batches_seen != 1 else ''} seen "
            f"and no complete step after the first batch and the warm-up (at least {least} batches: "
            f"max(warmup_batches={self._warmup_batches}, num_workers x prefetch_factor), more while the "
            f"workers' start-up backlog drains), so at least {least + 2} batches are needed; "
            "give more batches or a smaller warmup_batches"
        )

    def result(self) -> ResultSet:
        """The measured window as a one-config sweep result (`ResultSet`), analysed: summary,
        verdict, recommendation, headroom, the compute ceiling taken from the steps' compute
        time, and in `analysis.more_workers` the pipeline model's estimate of what more workers
        would give (a prediction, not a measurement).

        Under torch.distributed (a process group initialised, more than one rank) every rank
        must call it, at the same point of the loop (it gathers each rank's trial with
        `all_gather_object`, a collective: a rank that does not call it leaves the others
        waiting); the config then
        holds the job's trial (distributed.merge_trials: the slowest rank's waits, each rank's
        own trial kept). A window with no complete measured step gives a `failed` config whose
        error says why (too few batches, an empty loader). Safe to call more than once (each
        call covers every step measured so far).
        """
        trial, error = gather_trial(self.trial(), self._unmeasured_error)
        world, _rank, local_world = process_group()
        settings = replace(self.settings, batch_size=self.settings.batch_size if self._dataloader is not None
                           and self._dataloader.batch_size is not None else int(self._first_counted or 1))
        row = ConfigResult(settings=settings, status="ok" if trial is not None else "failed", error=error,
                           trials=[] if trial is None else [trial])
        if trial is not None:
            row.warnings = list(trial.notes)
        loader_ref, _, loader_defaults = loader_class_settings(self._dataloader)
        rs = build_result_set(row, label=self.label, source=describe_source(self.loader), timing=self.timing,
                                loader=loader_ref, loader_defaults=loader_defaults,
                                device=str(self._device) if self._device is not None else ("cuda" if self._cuda else "cpu"),
                                warmup_batches=self._warmup_batches, max_batches=self._max_batches,
                                samples_per_batch=self._samples_per_batch if isinstance(self._samples_per_batch, int) else None,
                                cuda=self._cuda, world=(world, local_world))
        self._last_result = (len(self._steps), rs)
        return rs

    def save(self, path: str | Path) -> Path | None:
        """Write `result()` to `path` (a `.json` file; UsageError otherwise, OutputError when it
        cannot be written). Under torch.distributed every rank calls it and rank 0 writes;
        returns the path written (None on the other ranks)."""
        from loaderbench.results import check_result_path, save_results

        path = Path(path)
        rs = self.result()
        if process_group()[1] != 0:
            return None
        check_result_path(path)
        save_results(rs, path)
        return path

    def report(self) -> str:
        """`result()` in sentences: throughput (samples/s), stall fraction, data-wait and step
        time, the verdict, the headroom and the prediction (render/watch.py). Reuses the last
        `result()` (or `save()`) when no step was measured since, so under torch.distributed
        one rank may call it after every rank called `result()` or `save()`."""
        from loaderbench.render.watch import watch_lines

        last = self._last_result
        rs = last[1] if last is not None and last[0] == len(self._steps) else self.result()
        return "\n".join(watch_lines(rs))


class _Batches:
    """The iterator of one epoch: every `next()` is t0 (and the previous step's end)."""

    def __init__(self, watch: Watch, it: Iterator[Any]) -> None:
        self._w = watch
        self._it = it

    def __iter__(self) -> _Batches:
        return self

    def __next__(self) -> Any:
        w = self._w
        w.wait_start()
        rng = enter_range(RANGE_WAIT) if w._annotate and w._phase != "full" else None
        pending = pending_workers(self._it) if w._phase in ("window", "window-next") else None
        try:
            batch = next(self._it)
        except StopIteration:
            w._epoch = None
            w.epoch_done()
            raise
        finally:
            if rng is not None:
                exit_range(rng)
        w._next_worker = delivered_by(pending, self._it)
        return w.batch_ready(batch)


class _IteratorHolder:
    """What measure.introspect.ready_batches and working_workers read: an object with the live
    iterator."""

    def __init__(self, it: Iterator[Any]) -> None:
        self.last_iterator = it


watch = Watch
"""`loaderbench.watch(loader, ...)`: `Watch` (the arguments are its own)."""


# The watch's public names, wherever their room is.
__all__ = ["Watch", "WatchError", "count_samples", "read_settings", "suggested_settings", "watch"]
