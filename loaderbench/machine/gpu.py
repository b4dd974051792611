"""GPU facts and GPU-utilization sampling through NVML, degrading to "unavailable" with a reason.

This is the only module of loaderbench that imports `pynvml` (the `nvidia-ml-py` package), and it
does so lazily in one guarded place, `_load_nvml`. Nothing here is fatal: a missing package, a
missing `libnvidia-ml.so.1` (a container started without the NVIDIA runtime), an `nvmlInit` that
raises or a query the GPU does not support all turn into a `NullUtilSampler` or `None` facts that
carry the reason, and the sweep goes on.

Every function takes an injectable `nvml` module-like object (tests pass a fake); `None` means the
real `pynvml`.

NOTE [ What NVML "utilization" measures ]
  NVML's `utilization.gpu` is the share of a driver sample window (between 1/6 s and 1 s
  depending on the GPU; 200 ms measured on an H200) during which at least one kernel was running.
  It is a kernel-active time fraction, NOT the share of the GPU's capacity in use: one spinning
  one-block kernel reads 100%. So loaderbench decides where the loader stops being the
  bottleneck from the measured data-wait, and reports NVML only as supporting evidence. Where the
  GPU supports GPM (Hopper and later), `sm_active_pct` gives the share of SMs that were busy,
  which does tell a tiny kernel from a large one.

NOTE [ Reading the driver's samples instead of polling ]
  The driver keeps a ring buffer of utilization samples with microsecond timestamps.
  `NvmlUtilSampler` notes the newest timestamp at `start()`, drains the newer samples in a
  background thread (every `drain_interval_s`, so a long window does not overflow the buffer) and
  at `stop()`, and averages the samples of the window, one value per driver window. Polling
  `nvmlDeviceGetUtilizationRates` faster than the driver's window only reads the same value
  again; it is the fallback for GPUs where `nvmlDeviceGetSamples` is not supported. Each sample
  covers the driver window that ENDS at its timestamp, so the averaged span may begin up to one
  sample period before `start()`; and the window's last partial period is reported only after
  `stop()`. A window shorter than about three sample periods is therefore reported with a note
  that it is too short to trust.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Clock = Callable[[], float]

#: NVML's sampling type for GPU utilization in `nvmlDeviceGetSamples` (`NVML_GPU_UTILIZATION_SAMPLES`).
_GPU_UTILIZATION_SAMPLES = 1
#: `NVML_ERROR_LIBRARY_NOT_FOUND` and `NVML_ERROR_NOT_FOUND`, used when a fake lacks the constants.
_ERROR_LIBRARY_NOT_FOUND = 12
_ERROR_NOT_FOUND = 6
#: `nvmlValue_t` member name for each `NVML_VALUE_TYPE_*`.
_VALUE_FIELDS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}
#: GPM metric ids: `NVML_GPM_METRIC_SM_UTIL` (share of SMs busy), `..._SM_OCCUPANCY`.
_GPM_SM_UTIL = 2
_GPM_SM_OCCUPANCY = 3
#: A window shorter than this many driver sample periods is reported as too short to trust.
MIN_TRUSTED_PERIODS = 3.0
#: When the driver's sample period is unknown (polling fallback), assume the slowest: 1 s.
_WORST_CASE_PERIOD_S = 1.0

METRIC_LABEL = "kernel-active time fraction (NVML utilization.gpu), not GPU capacity used"


# --------------------------------------------------------------------------------------------
# Loading and initialising NVML: the one guarded place.


@dataclass(frozen=True)
class NvmlStatus:
    """Whether NVML can be used in this process; `reason` says why not (or what is loaded)."""

    available: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class NvmlUnavailableError(Exception):
    """NVML (or the handle of the device in use) cannot be had; `str(err)` is the reason."""


_init_lock = threading.Lock()
# (pid, id(module)) -> (module, status). The module is kept so its id stays unique; the pid makes
# a forked or spawned child initialise NVML itself ("once per process").
_init_cache: dict[tuple[int, int], tuple[Any, NvmlStatus]] = {}


def _describe(exc: BaseException) -> str:
    """`ClassName: message`, safe even when the exception's `__str__` itself fails."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 (pynvml's __str__ calls into a library that may be absent)
        text = ""
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _is_library_not_found(exc: BaseException, nvml: Any) -> bool:
    code = getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", _ERROR_LIBRARY_NOT_FOUND)
    return type(exc).__name__ == "NVMLError_LibraryNotFound" or getattr(exc, "value", None) == code


def _is_not_found(exc: BaseException, nvml: Any) -> bool:
    code = getattr(nvml, "NVML_ERROR_NOT_FOUND", _ERROR_NOT_FOUND)
    return type(exc).__name__ == "NVMLError_NotFound" or getattr(exc, "value", None) == code


def _import_pynvml() -> Any:
    """Import the real `pynvml` (from `nvidia-ml-py`); raises ImportError when it is absent."""
    import pynvml

    return pynvml


def _load_nvml(nvml: Any = None) -> tuple[Any, NvmlStatus]:
    """Import (unless injected) and initialise NVML once per process; never raises.

    Returns `(module, status)`; `module` is None when `status.available` is False.
    """
    if nvml is None:
        try:
            nvml = _import_pynvml()
        except ImportError as exc:
            return None, NvmlStatus(False, f"nvidia-ml-py not installed ({_describe(exc)})")
        except Exception as exc:  # noqa: BLE001 (a broken install must not stop the sweep)
            return None, NvmlStatus(False, f"pynvml import failed: {_describe(exc)}")
    key = (os.getpid(), id(nvml))
    with _init_lock:
        cached = _init_cache.get(key)
        if cached is not None:
            status = cached[1]
            return (nvml if status.available else None), status
        try:
            nvml.nvmlInit()
            status = NvmlStatus(True, "NVML initialised")
        except Exception as exc:  # noqa: BLE001 (NVMLError, OSError, ...: all mean "unavailable")
            if _is_library_not_found(exc, nvml):
                status = NvmlStatus(False, f"libnvidia-ml.so.1 not found ({type(exc).__name__})")
            else:
                status = NvmlStatus(False, f"nvmlInit failed: {_describe(exc)}")
        _init_cache[key] = (nvml, status)
    return (nvml if status.available else None), status


def nvml_status(nvml: Any = None) -> NvmlStatus:
    """Whether NVML is usable here (package importable, library found, `nvmlInit` succeeded)."""
    return _load_nvml(nvml)[1]


# --------------------------------------------------------------------------------------------
# Binding to the device torch actually uses.

_HEX32 = re.compile(r"^[0-9a-f]{32}$")


def normalize_uuid(raw: Any) -> str | None:
    """Torch's device UUID (a `_CUuuid`, str, bytes or 16 ints) -> NVML's `GPU-xxxxxxxx-...` form.

    Keeps a `MIG-` prefix. Returns None when `raw` holds no 128-bit UUID.
    """
    prefix = "GPU-"
    text: str | None = None
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        text = bytes(raw).hex()
    elif isinstance(raw, str):
        text = raw
    elif raw is not None:
        text = str(raw)
        if not _HEX32.match(text.strip().lower().removeprefix("gpu-").replace("-", "")):
            raw_bytes = getattr(raw, "bytes", None)  # torch's _CUuuid exposes .bytes
            if raw_bytes is not None and len(raw_bytes) == 16:
                text = bytes(raw_bytes).hex()
    if text is None:
        return None
    text = text.strip().lower()
    if text.startswith("mig-"):
        prefix, text = "MIG-", text[4:]
    elif text.startswith("gpu-"):
        text = text[4:]
    digits = text.replace("-", "")
    if not _HEX32.match(digits):
        return None
    d = digits
    return f"{prefix}{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:]}"


def pci_bus_id_candidates(domain: int, bus: int, device: int) -> list[str]:
    """NVML PCI bus id strings for a device, 8-digit domain first (`00000000:3B:00.0`), then the
    legacy 4-digit form, each upper- then lower-case hex."""
    out: list[str] = []
    for width in (8, 4):
        s = f"{domain:0{width}x}:{bus:02x}:{device:02x}.0"
        for cand in (s.upper(), s):
            if cand not in out:
                out.append(cand)
    return out


def _torch_device_props(index: int) -> Any:
    """`torch.cuda.get_device_properties(index)`; note that this initialises CUDA here."""
    import torch

    return torch.cuda.get_device_properties(index)


def nvml_handle_for_torch_device(
    index: int, nvml: Any = None, *, device_props: Any = None
) -> tuple[Any, str]:
    """The NVML handle of torch CUDA device `index` (an ordinal under `CUDA_VISIBLE_DEVICES`).

    Binds by the device's UUID (`nvmlDeviceGetHandleByUUID`), then by its PCI bus id
    (`nvmlDeviceGetHandleByPciBusId`); NEVER by ordinal, because torch's ordinal `i` and NVML's
    index `i` are different GPUs whenever `CUDA_VISIBLE_DEVICES` reorders or hides devices.
    Returns `(handle, how)` with `how` "uuid" or "pci_bus_id"; raises `NvmlUnavailableError`.

    `device_props` (an object with `uuid`, `pci_domain_id`, `pci_bus_id`, `pci_device_id`)
    defaults to `torch.cuda.get_device_properties(index)`, which initialises CUDA in this
    process: a process that forks CUDA-using children should pass props obtained elsewhere.
    """
    mod, status = _load_nvml(nvml)
    if mod is None:
        raise NvmlUnavailableError(status.reason)
    if device_props is None:
        try:
            device_props = _torch_device_props(index)
        except Exception as exc:
            raise NvmlUnavailableError(
                f"torch cannot describe CUDA device {index}: {_describe(exc)}"
            ) from exc
    tried: list[str] = []
    uuid = normalize_uuid(getattr(device_props, "uuid", None))
    if uuid is not None:
        candidates = [uuid]
        if uuid.startswith("GPU-"):
            candidates.append("MIG-" + uuid[4:])
        for cand in candidates:
            try:
                return mod.nvmlDeviceGetHandleByUUID(cand), "uuid"
            except Exception as exc:  # noqa: BLE001 (try the next candidate)
                tried.append(f"UUID {cand}: {_describe(exc)}")
    else:
        tried.append("torch reports no device UUID")
    domain, bus, dev = (
        getattr(device_props, n, None) for n in ("pci_domain_id", "pci_bus_id", "pci_device_id")
    )
    if isinstance(domain, int) and isinstance(bus, int) and isinstance(dev, int):
        for cand in pci_bus_id_candidates(domain, bus, dev):
            try:
                return mod.nvmlDeviceGetHandleByPciBusId(cand), "pci_bus_id"
            except Exception as exc:  # noqa: BLE001 (try the next candidate)
                tried.append(f"PCI {cand}: {_describe(exc)}")
    else:
        tried.append("torch reports no PCI bus id")
    raise NvmlUnavailableError(
        f"no NVML device matches torch CUDA device {index} (" + "; ".join(tried) + ")"
    )


# --------------------------------------------------------------------------------------------
# Utilization sampling.


@dataclass
class GpuUtilReading:
    """NVML GPU utilization over one measurement window.

    `util_pct` is the kernel-active time fraction (see the module NOTE), None when unavailable;
    `window_s` the requested window (start to stop); `sample_period_s` the driver's sample period
    (median spacing of sample timestamps; None when polling); `n_samples` the values averaged;
    `covered_s` the span those samples describe; `method` "samples", "polling" or "none";
    `note` says how it was measured, or why it is missing or untrustworthy.
    `sm_active_pct` / `sm_occupancy_pct` come from GPM where supported (else None, see `sm_note`).
    """

    util_pct: float | None
    window_s: float
    sample_period_s: float | None
    n_samples: int
    note: str
    method: str = "none"
    covered_s: float | None = None
    sm_active_pct: float | None = None
    sm_occupancy_pct: float | None = None
    sm_note: str = ""
    samples_pct: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@runtime_checkable
class UtilSampler(Protocol):
    """Measures GPU utilization between `start()` and `stop()`."""

    def start(self) -> None: ...

    def stop(self) -> GpuUtilReading: ...


class NullUtilSampler:
    """The sampler used when NVML or a CUDA device is unavailable: reports None and the reason."""

    def __init__(self, reason: str, *, clock: Clock = time.monotonic) -> None:
        self.reason = reason
        self._clock = clock
        self._t0_s: float | None = None

    def start(self) -> None:
        self._t0_s = self._clock()

    def stop(self) -> GpuUtilReading:
        window_s = 0.0 if self._t0_s is None else self._clock() - self._t0_s
        return GpuUtilReading(
            util_pct=None,
            window_s=window_s,
            sample_period_s=None,
            n_samples=0,
            note=f"GPU utilization unavailable: {self.reason}",
            method="none",
        )


def _sample_value(sample: Any, value_type: int) -> float:
    value = sample.sampleValue
    name = _VALUE_FIELDS.get(value_type, "uiVal")
    return float(getattr(value, name))


def _median_period_s(timestamps_us: list[int]) -> float | None:
    ts = sorted(set(timestamps_us))
    diffs = [b - a for a, b in itertools.pairwise(ts) if b > a]
    return statistics.median(diffs) / 1e6 if diffs else None


class NvmlUtilSampler:
    """GPU utilization of one NVML device over `start()`..`stop()` (see the module NOTEs).

    Uses `nvmlDeviceGetSamples(handle, NVML_GPU_UTILIZATION_SAMPLES, last_seen_us)`, drained
    every `drain_interval_s` by a daemon thread (None: no thread, read only at start and stop;
    samples older than the driver's ring buffer are then lost on long windows, and the note says
    so). When `nvmlDeviceGetSamples` is not supported, a daemon thread polls
    `nvmlDeviceGetUtilizationRates` every `poll_interval_s`. `clock` (seconds) times the window;
    every NVML error becomes a note, never a raise.

    Start it once the DataLoader iterator exists (after the first batch): forking workers while
    the thread runs works, but Python 3.12+ warns about fork in a multi-threaded process.
    """

    def __init__(
        self,
        nvml: Any,
        handle: Any,
        *,
        clock: Clock = time.monotonic,
        poll_interval_s: float = 0.1,
        drain_interval_s: float | None = 2.0,
        sm_activity: bool = True,
    ) -> None:
        self._nvml = nvml
        self._handle = handle
        self._clock = clock
        self.poll_interval_s = poll_interval_s
        self.drain_interval_s = drain_interval_s
        self.sm_activity = sm_activity
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._reset()

    def _reset(self) -> None:
        self._t0_s: float | None = None
        self._start_ts_us = 0  # newest driver timestamp at start(); the window is after it
        self._method = "samples"
        self._fallback_reason = ""
        self._error: str | None = None
        self._last_seen_us = 0
        self._value_type = 1
        self._history_ts_us: list[int] = []  # every timestamp seen, for the period estimate
        self._window: dict[int, float] = {}  # timestamp_us -> value, samples after start
        self._polled: list[float] = []
        self._gpm: list[Any] = []
        self._sm_note = ""

    @property
    def _sampling_type(self) -> int:
        return int(getattr(self._nvml, "NVML_GPU_UTILIZATION_SAMPLES", _GPU_UTILIZATION_SAMPLES))

    # -- driver samples ------------------------------------------------------------------

    def _get_samples(self, last_seen_us: int) -> tuple[int, list[Any]]:
        """Samples newer than `last_seen_us`; an empty list when the driver has none (NotFound)."""
        try:
            value_type, samples = self._nvml.nvmlDeviceGetSamples(
                self._handle, self._sampling_type, last_seen_us
            )
        except Exception as exc:
            if _is_not_found(exc, self._nvml):
                return self._value_type, []
            raise
        return int(value_type), list(samples)

    def _drain(self) -> None:
        """Add the samples newer than the last one seen to the window (thread-safe)."""
        with self._lock:
            if self._error is not None:
                return
            try:
                value_type, samples = self._get_samples(self._last_seen_us)
            except Exception as exc:  # noqa: BLE001 (NVML must never crash the sweep)
                self._error = f"nvmlDeviceGetSamples failed during the window: {_describe(exc)}"
                return
            self._value_type = value_type
            for s in samples:
                ts = int(s.timeStamp)
                # Guard: keep only samples after the start, even if the driver (or a fake)
                # returned older ones.
                if ts > self._start_ts_us and ts not in self._window:
                    self._window[ts] = _sample_value(s, value_type)
                    self._history_ts_us.append(ts)
                self._last_seen_us = max(self._last_seen_us, ts)

    def _run_drain(self) -> None:
        interval_s = self.drain_interval_s or 2.0
        while not self._stop_event.wait(interval_s):
            self._drain()

    # -- polling fallback ----------------------------------------------------------------

    def _poll_once(self) -> None:
        try:
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            value = float(util.gpu)
        except Exception as exc:  # noqa: BLE001 (NVML must never crash the sweep)
            with self._lock:
                if self._error is None:
                    self._error = f"nvmlDeviceGetUtilizationRates failed: {_describe(exc)}"
            return
        with self._lock:
            self._polled.append(value)

    def _run_poll(self) -> None:
        while not self._stop_event.wait(self.poll_interval_s):
            self._poll_once()

    # -- SM activity through GPM (Hopper and later) --------------------------------------

    def _gpm_start(self) -> None:
        nv = self._nvml
        if not self.sm_activity:
            self._sm_note = "SM activity not requested"
            return
        try:
            support = nv.nvmlGpmQueryDeviceSupport(self._handle)
            if not getattr(support, "isSupportedDevice", 0):
                self._sm_note = "SM activity unavailable: GPM not supported on this GPU"
                return
            samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
            self._gpm = samples
            nv.nvmlGpmSampleGet(self._handle, samples[0])
        except Exception as exc:  # noqa: BLE001 (GPM is optional)
            self._sm_note = f"SM activity unavailable: {_describe(exc)}"
            self._gpm_free()

    def _gpm_stop(self) -> tuple[float | None, float | None]:
        nv = self._nvml
        if len(self._gpm) != 2:
            return None, None
        try:
            nv.nvmlGpmSampleGet(self._handle, self._gpm[1])
            req = nv.c_nvmlGpmMetricsGet_t()
            req.version = getattr(nv, "NVML_GPM_METRICS_GET_VERSION", 1)
            req.numMetrics = 2
            req.sample1, req.sample2 = self._gpm[0], self._gpm[1]
            req.metrics[0].metricId = getattr(nv, "NVML_GPM_METRIC_SM_UTIL", _GPM_SM_UTIL)
            req.metrics[1].metricId = getattr(nv, "NVML_GPM_METRIC_SM_OCCUPANCY", _GPM_SM_OCCUPANCY)
            nv.nvmlGpmMetricsGet(req)
            values: list[float | None] = []
            for i in range(2):
                metric = req.metrics[i]
                values.append(float(metric.value) if int(metric.nvmlReturn) == 0 else None)
            self._sm_note = "SM activity from NVML GPM: share of SMs busy / warps resident"
            return values[0], values[1]
        except Exception as exc:  # noqa: BLE001 (GPM is optional)
            self._sm_note = f"SM activity unavailable: {_describe(exc)}"
            return None, None
        finally:
            self._gpm_free()

    def _gpm_free(self) -> None:
        for sample in self._gpm:
            with contextlib.suppress(Exception):  # freeing is best effort; nothing to report
                self._nvml.nvmlGpmSampleFree(sample)
        self._gpm = []

    # -- the UtilSampler protocol ------------------------------------------------------------

    def start(self) -> None:
        """Note the driver's newest sample timestamp and begin the window."""
        if self._thread is not None:
            self.stop()
        self._reset()
        self._stop_event.clear()
        try:
            value_type, samples = self._get_samples(0)
            self._value_type = value_type
            ts = [int(s.timeStamp) for s in samples]
            self._history_ts_us = list(ts)
            self._last_seen_us = max(ts, default=0)
            self._start_ts_us = self._last_seen_us
            target = self._run_drain
        except Exception as exc:  # noqa: BLE001 (any failure here means: poll instead)
            self._method = "polling"
            self._fallback_reason = f"nvmlDeviceGetSamples unavailable ({_describe(exc)})"
            target = self._run_poll
        self._gpm_start()
        self._t0_s = self._clock()
        if self._method == "polling":
            self._poll_once()
        if self._method == "polling" or self.drain_interval_s is not None:
            self._thread = threading.Thread(target=target, name="loaderbench-nvml", daemon=True)
            self._thread.start()

    def stop(self) -> GpuUtilReading:
        """End the window and average its samples; never raises."""
        t1_s = self._clock()
        if self._t0_s is None:
            return GpuUtilReading(None, 0.0, None, 0, "stop() called without start()")
        window_s = t1_s - self._t0_s
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.poll_interval_s))
            self._thread = None
        if self._method == "samples":
            self._drain()
        else:
            self._poll_once()
        sm_active, sm_occ = self._gpm_stop()
        reading = self._reading(window_s)
        reading.sm_active_pct, reading.sm_occupancy_pct = sm_active, sm_occ
        reading.sm_note = self._sm_note
        self._t0_s = None
        return reading

    def _reading(self, window_s: float) -> GpuUtilReading:
        with self._lock:
            if self._method == "samples":
                items = sorted(self._window.items())
                values = [v for _, v in items]
                period_s = _median_period_s(self._history_ts_us)
                how = f"nvmlDeviceGetSamples, {len(values)} driver samples"
                # A gap between the start and the first kept sample: the ring buffer wrapped.
                gap_us = items[0][0] - self._start_ts_us if items and self._start_ts_us else 0
                if period_s and gap_us > 2.5 * period_s * 1e6:
                    how += " (early samples of the window lost from the driver's buffer)"
                covered_s: float | None = None
                if items:
                    first_begin_us = items[0][0] - (period_s or 0.0) * 1e6
                    covered_s = (items[-1][0] - first_begin_us) / 1e6
            else:
                values = list(self._polled)
                period_s = None
                how = (
                    f"polled nvmlDeviceGetUtilizationRates every {self.poll_interval_s:g} s "
                    f"({len(values)} reads) because {self._fallback_reason}"
                )
                covered_s = window_s
            error = self._error
        notes = [METRIC_LABEL, how]
        if error is not None:
            notes.append(error)
        util_pct = statistics.fmean(values) if values else None
        if not values:
            notes.append("no NVML samples in the window")
        period_for_check = period_s if period_s is not None else _WORST_CASE_PERIOD_S
        if window_s < MIN_TRUSTED_PERIODS * period_for_check:
            known = "" if period_s is not None else " (assumed worst case)"
            notes.append(
                f"window {window_s:.3g} s is shorter than {MIN_TRUSTED_PERIODS:g} sample periods "
                f"of {period_for_check:.3g} s{known}: too short to trust"
            )
        return GpuUtilReading(
            util_pct=util_pct,
            window_s=window_s,
            sample_period_s=period_s,
            n_samples=len(values),
            note="; ".join(notes),
            method=self._method,
            covered_s=covered_s,
            samples_pct=values,
        )


def make_util_sampler(
    device_index: int | None,
    *,
    nvml: Any = None,
    clock: Clock = time.monotonic,
    device_props: Any = None,
    poll_interval_s: float = 0.1,
    drain_interval_s: float | None = 2.0,
    sm_activity: bool = True,
) -> UtilSampler:
    """The sampler for torch CUDA device `device_index` (None: no CUDA device in use).

    Returns a `NullUtilSampler` carrying the reason whenever NVML or the device's handle cannot
    be had; never raises. See `nvml_handle_for_torch_device` for `device_props`.
    """
    if device_index is None:
        return NullUtilSampler("no CUDA device in use", clock=clock)
    try:
        mod, status = _load_nvml(nvml)
        if mod is None:
            return NullUtilSampler(status.reason, clock=clock)
        handle, _how = nvml_handle_for_torch_device(device_index, mod, device_props=device_props)
    except NvmlUnavailableError as exc:
        return NullUtilSampler(str(exc), clock=clock)
    except Exception as exc:  # noqa: BLE001 (the sweep must never crash because of NVML)
        return NullUtilSampler(_describe(exc), clock=clock)
    return NvmlUtilSampler(
        mod,
        handle,
        clock=clock,
        poll_interval_s=poll_interval_s,
        drain_interval_s=drain_interval_s,
        sm_activity=sm_activity,
    )


# --------------------------------------------------------------------------------------------
# Static facts.

GPU_FACT_KEYS = (
    "name",
    "uuid",
    "driver_version",
    "cuda_driver_version",
    "memory_total_bytes",
    "pcie_gen_current",
    "pcie_gen_max",
    "pcie_width_current",
    "pcie_width_max",
    "util_sample_period_s",
)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_facts(index: int, nvml: Any = None, *, device_props: Any = None) -> dict[str, Any]:
    """Facts about torch CUDA device `index`, JSON-able; never raises.

    Keys: `index`, `nvml` (bool: NVML facts present), `bound_by` ("uuid" / "pci_bus_id" / None),
    every key of `GPU_FACT_KEYS` (None when unknown) and `reasons` {key: why it is None}.
    `pcie_*_current` may read lower than the max while the GPU idles (link power saving).
    `name`, `uuid` and `memory_total_bytes` come from torch when NVML is unavailable.
    """
    facts: dict[str, Any] = {"index": index, "nvml": False, "bound_by": None}
    facts.update({k: None for k in GPU_FACT_KEYS})
    reasons: dict[str, str] = {}
    facts["reasons"] = reasons

    if device_props is None:
        try:
            device_props = _torch_device_props(index)
        except Exception as exc:  # noqa: BLE001 (no CUDA, bad index, driver error: all "unknown")
            reason = f"torch cannot describe CUDA device {index}: {_describe(exc)}"
            reasons.update({k: reason for k in GPU_FACT_KEYS})
            return facts
    facts["name"] = getattr(device_props, "name", None)
    facts["uuid"] = normalize_uuid(getattr(device_props, "uuid", None))
    total = getattr(device_props, "total_memory", None)
    facts["memory_total_bytes"] = int(total) if isinstance(total, int) else None

    mod, status = _load_nvml(nvml)
    try:
        if mod is None:
            raise NvmlUnavailableError(status.reason)
        handle, how = nvml_handle_for_torch_device(index, mod, device_props=device_props)
    except Exception as exc:  # noqa: BLE001 (facts are optional)
        reason = str(exc) if isinstance(exc, NvmlUnavailableError) else _describe(exc)
        reasons.update({k: reason for k in GPU_FACT_KEYS if facts[k] is None})
        return facts
    facts["nvml"] = True
    facts["bound_by"] = how

    def query(key: str, fn: Callable[[], Any]) -> None:
        try:
            facts[key] = fn()
        except Exception as exc:  # noqa: BLE001 (one missing fact must not lose the others)
            facts[key] = None
            reasons[key] = _describe(exc)

    query("name", lambda: _text(mod.nvmlDeviceGetName(handle)))
    query("uuid", lambda: _text(mod.nvmlDeviceGetUUID(handle)))
    query("driver_version", lambda: _text(mod.nvmlSystemGetDriverVersion()))
    query("cuda_driver_version", lambda: int(mod.nvmlSystemGetCudaDriverVersion()))
    query("memory_total_bytes", lambda: int(mod.nvmlDeviceGetMemoryInfo(handle).total))
    query("pcie_gen_current", lambda: int(mod.nvmlDeviceGetCurrPcieLinkGeneration(handle)))
    query("pcie_gen_max", lambda: int(mod.nvmlDeviceGetMaxPcieLinkGeneration(handle)))
    query("pcie_width_current", lambda: int(mod.nvmlDeviceGetCurrPcieLinkWidth(handle)))
    query("pcie_width_max", lambda: int(mod.nvmlDeviceGetMaxPcieLinkWidth(handle)))

    def sample_period_s() -> float | None:
        sampling = getattr(mod, "NVML_GPU_UTILIZATION_SAMPLES", _GPU_UTILIZATION_SAMPLES)
        _vt, samples = mod.nvmlDeviceGetSamples(handle, sampling, 0)
        period = _median_period_s([int(s.timeStamp) for s in samples])
        if period is None:
            reasons["util_sample_period_s"] = "fewer than two NVML utilization samples"
        return period

    query("util_sample_period_s", sample_period_s)
    return facts
