"""One `Trial` from what a timed loop measured: the one Trial assembly, shared by the sweep's
measuring process (trial.measure_config) and `loaderbench.watch` (inloop/watcher.py), so that a
field means the same wherever it was measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loaderbench.measure.meter import WindowReading
from loaderbench.measure.timing import LoopTimes
from loaderbench.model import Note, Trial, WarningKind

if TYPE_CHECKING:
    from loaderbench.workload.batch import BatchInfo


def _pct(part_s: float | None, wall_s: float) -> float | None:
    """`part_s` as a percentage of `wall_s` (cores x 100), None when either is unknown."""
    return 100.0 * part_s / wall_s if part_s is not None and wall_s > 0 else None


def assemble_trial(
    loop: LoopTimes,
    *,
    timing: str,
    reading: WindowReading | None,
    first_batch: BatchInfo | None,
    cuda: bool,
    h2d: bool,
    pin_memory: bool,
    torch_threads_main: int | None,
    samples_rule: str | None,
    h2d_s: list[float] | None = None,
    h2d_hidden_fraction: float | None = None,
    **measured: Any,
) -> Trial:
    """The `Trial` of one measured window.

    `loop`: the per-batch seconds and bookkeeping (timing.LoopTimes); `timing`: 'host', 'sync'
    or 'events' (NOTE [timing model] in measure/timing.py); `reading`: the window meter's
    reading (meter.WindowReading: CPU, memory, GPU utilisation), None when the window was not
    metered (then `wall_s` is the sum of the step times and the meter's fields are None);
    `first_batch`: the first host-side batch (batch.inspect_batch), None when not inspected;
    `cuda`: the step runs on a CUDA device; `h2d`: the loop copies every batch to the device
    (the batch's tensor bytes are then the H2D bytes per batch); `pin_memory`: the loader's.
    `h2d_s` / `h2d_hidden_fraction`: per measured batch, the copy's seconds, and the share of
    copy time under a step. `measured`: further `Trial` fields only one loop measures (the
    sweep's storage reads, loader ceiling, set-up and stop time, rank); TypeError for a name
    `Trial` does not have.

    Notes: the loop's, then a pinning note when pinning was asked on CUDA and no tensor leaf of
    the first batch is pinned.
    """
    r = reading
    wall = r.wall_s if r is not None else sum(loop.step_s)
    util = r.util if r is not None else None
    info = first_batch
    notes = list(loop.notes)
    if cuda and pin_memory and info is not None and info.tensor_leaves and not info.pinned_leaves:
        notes.append(Note.of(WarningKind.PINNING_INEFFECTIVE,
                             "pinning ineffective: pin_memory=True but no tensor leaf of the batch is pinned"))
    return Trial(
        first_batch_s=loop.first_batch_s,
        warmup_batches=loop.warmup_batches,
        data_wait_s=loop.data_wait_s,
        compute_s=loop.compute_s,
        step_s=loop.step_s,
        samples=loop.samples,
        wall_s=wall,
        timing=timing,
        host_wait_s=loop.host_wait_s,
        cpu_time_s=None if r is None else r.cpu_s,
        processes=None if r is None else r.processes,
        cpu_util_pct=None if r is None else _pct(r.cpu_s, wall),
        main_cpu_util_pct=None if r is None else _pct(r.main_cpu_s, wall),
        other_cpu_util_pct=None if r is None else _pct(r.other_cpu_s, wall),
        steal_cpu_util_pct=None if r is None else _pct(r.steal_s, wall),
        workers_runq_pct=None if r is None else _pct(r.workers_runq_s, wall),
        memory_uss_bytes=None if r is None else r.memory_uss_bytes,
        memory_pss_bytes=None if r is None else r.memory_pss_bytes,
        gpu_util_pct=None if util is None else util.util_pct,
        gpu_util_window_s=None if util is None else (util.window_s or None),
        gpu_util_note=None if util is None else (util.note or None),
        gpu_sm_active_pct=None if util is None else getattr(util, "sm_active_pct", None),
        batch_bytes=None if info is None else info.nbytes,
        numpy_leaves=None if info is None else info.numpy_leaves,
        h2d_bytes_per_batch=None if (info is None or not h2d) else info.tensor_nbytes,
        pinned_leaves=None if info is None else info.pinned_leaves,
        tensor_leaves=None if info is None else info.tensor_leaves,
        torch_threads_main=torch_threads_main,
        receive_s=loop.receive_s,
        receive_cpu_s=loop.receive_cpu_s,
        h2d_s=list(h2d_s or []),
        h2d_hidden_fraction=h2d_hidden_fraction,
        epoch_gap_s=loop.epoch_gap_s,
        sampler_s=loop.sampler_s,
        gpu_decode_s=loop.gpu_decode_s,
        epoch_start_batches=loop.epoch_start_batches,
        first_batch_sampler_s=loop.first_batch_sampler_s,
        production_samples_per_s=loop.production_samples_per_s,
        ready_batches=loop.ready_batches,
        production_unit_batches=loop.production_unit_batches,
        samples_rule=samples_rule,
        warmup_s=loop.warmup_s,
        notes=notes,
        **measured,
    )
