"""loaderbench.machine.gpu against a fake NVML with named scenarios (no GPU, no libnvidia-ml needed).

Scenarios (gpustat style): "works", "GetSamples not supported", "library missing",
"init raises", "pynvml not installed", plus handle binding and facts.
"""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from loaderbench.machine import gpu
from loaderbench.machine.gpu import (
    GpuUtilReading,
    NullUtilSampler,
    NvmlUnavailableError,
    NvmlUtilSampler,
    UtilSampler,
    gpu_facts,
    make_util_sampler,
    normalize_uuid,
    nvml_handle_for_torch_device,
    nvml_status,
    pci_bus_id_candidates,
)

UUID = "58e6e8b0-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
NVML_UUID = "GPU-" + UUID
PCI = "00000000:3B:00.0"


# ---------------------------------------------------------------------------------------------
# The fake NVML module.


class NVMLError(Exception):
    value = 999

    def __str__(self) -> str:
        return {12: "NVML Shared Library Not Found", 3: "Not Supported", 6: "Not Found"}.get(
            self.value, "Unknown Error"
        )


class NVMLError_LibraryNotFound(NVMLError):
    value = 12


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_NotFound(NVMLError):
    value = 6


class NVMLError_Unknown(NVMLError):
    value = 999


class FakeNvml:
    """A module-like fake of pynvml with a fake clock and a driver sample timeline.

    The driver takes a utilization sample every `period_s` (timestamp in microseconds) holding
    `util_at(t_s)`; `nvmlDeviceGetSamples` returns those with timestamp <= now and > last_seen
    (all of them, ignoring last_seen, when `honour_last_seen` is False).
    """

    NVMLError = NVMLError
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_Unknown = NVMLError_Unknown
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_NOT_FOUND = 6
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(
        self,
        scenario: str = "works",
        *,
        now_s: float = 10.05,
        period_s: float = 0.2,
        util_at: Any = None,
        uuids: tuple[str, ...] = (NVML_UUID,),
        pci_ids: tuple[str, ...] = (PCI,),
        honour_last_seen: bool = True,
        gpm: bool = False,
        poll_value: float = 40.0,
    ) -> None:
        self.scenario = scenario
        self.now_s = now_s
        self.period_s = period_s
        self.util_at = util_at or (lambda t: 50.0)
        self.uuids = uuids
        self.pci_ids = pci_ids
        self.honour_last_seen = honour_last_seen
        self.poll_value = poll_value
        self.init_calls = 0
        self.lookups: list[tuple[str, str]] = []
        self.sample_calls: list[int] = []
        self.poll_calls = 0
        if gpm:
            self.nvmlGpmQueryDeviceSupport = lambda h: SimpleNamespace(isSupportedDevice=1)
            self.nvmlGpmSampleAlloc = lambda: SimpleNamespace(taken_at=None)
            self.nvmlGpmSampleFree = lambda s: None
            self.c_nvmlGpmMetricsGet_t = lambda: SimpleNamespace(
                version=0,
                numMetrics=0,
                sample1=None,
                sample2=None,
                metrics=[SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(4)],
            )

    # -- clock -------------------------------------------------------------------------------
    def clock(self) -> float:
        return self.now_s

    def advance(self, dt_s: float) -> None:
        self.now_s += dt_s

    # -- init --------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.scenario == "library missing":
            raise NVMLError_LibraryNotFound()
        if self.scenario == "init raises":
            raise NVMLError_Unknown()

    # -- handles -----------------------------------------------------------------------------
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.lookups.append(("uuid", uuid))
        if uuid in self.uuids:
            return f"handle:{uuid}"
        raise NVMLError_NotFound()

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> str:
        self.lookups.append(("pci", bus_id))
        if bus_id in self.pci_ids:
            return f"handle:{bus_id}"
        raise NVMLError_NotFound()

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        raise AssertionError("bound by ordinal")

    nvmlDeviceGetHandleByIndex_v2 = nvmlDeviceGetHandleByIndex

    # -- samples -----------------------------------------------------------------------------
    def _timeline_us(self) -> list[int]:
        n = int(self.now_s / self.period_s + 1e-9)
        first = max(1, n - 99)  # a ring buffer of 100 samples
        return [round(k * self.period_s * 1e6) for k in range(first, n + 1)]

    def nvmlDeviceGetSamples(self, handle: Any, sampling_type: int, last_seen_us: int) -> Any:
        assert sampling_type == self.NVML_GPU_UTILIZATION_SAMPLES
        self.sample_calls.append(last_seen_us)
        if self.scenario == "GetSamples not supported":
            raise NVMLError_NotSupported()
        if self.scenario == "GetSamples fails later" and len(self.sample_calls) > 1:
            raise NVMLError_Unknown()
        out = [
            SimpleNamespace(timeStamp=ts, sampleValue=SimpleNamespace(uiVal=self.util_at(ts / 1e6)))
            for ts in self._timeline_us()
            if ts > last_seen_us or not self.honour_last_seen
        ]
        if not out:
            raise NVMLError_NotFound()
        return 1, out

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        self.poll_calls += 1
        return SimpleNamespace(gpu=self.poll_value, memory=0)

    # -- GPM (installed by __init__ when gpm=True) ---------------------------------------------
    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        sample.taken_at = self.now_s
        return sample

    def nvmlGpmMetricsGet(self, req: Any) -> Any:
        assert req.sample2.taken_at > req.sample1.taken_at
        req.metrics[0].value = 1.5  # one tiny kernel: few SMs busy
        req.metrics[1].value = 0.8
        return req

    # -- facts -------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: Any) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return NVML_UUID

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.159.04"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(total=143_771_058_176, free=0, used=0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return 5

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        raise NVMLError_NotSupported()

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return 16


def props(uuid: Any = UUID, domain: int | None = 0, bus: int | None = 0x3B, dev: int = 0) -> Any:
    """Stand-in for torch.cuda.get_device_properties(i)."""
    return SimpleNamespace(
        name="NVIDIA H200",
        uuid=uuid,
        total_memory=150_000_000_000,
        pci_domain_id=domain,
        pci_bus_id=bus,
        pci_device_id=dev,
    )


def window_util(t_s: float) -> float:
    """0 before the window [10.05, 12.05], 10, 20, ... 100 inside it, 100 after."""
    if t_s <= 10.05:
        return 0.0
    if t_s > 12.05:
        return 100.0
    return 10.0 * round((t_s - 10.0) / 0.2)


# ---------------------------------------------------------------------------------------------
# "works"


def test_works_averages_driver_samples_of_the_window() -> None:
    fake = FakeNvml(util_at=window_util)
    sampler = make_util_sampler(0, nvml=fake, clock=fake.clock, device_props=props())
    assert isinstance(sampler, NvmlUtilSampler)
    assert isinstance(sampler, UtilSampler)
    sampler.start()
    fake.advance(2.0)
    reading = sampler.stop()
    assert reading.method == "samples"
    assert reading.n_samples == 10  # 10.2 .. 12.0 s; 0.0 .. 10.0 s were before start
    assert reading.samples_pct == [10.0 * k for k in range(1, 11)]
    assert reading.util_pct == pytest.approx(55.0)
    assert reading.sample_period_s == pytest.approx(0.2)
    assert reading.window_s == pytest.approx(2.0)
    assert reading.covered_s == pytest.approx(2.0)
    assert "kernel-active" in reading.note and "too short" not in reading.note
    assert fake.sample_calls[0] == 0  # start reads the buffer to learn the newest timestamp
    assert fake.sample_calls[-1] == 10_000_000


def test_samples_outside_the_window_are_excluded_even_if_the_driver_returns_them() -> None:
    fake = FakeNvml(util_at=window_util, honour_last_seen=False)
    sampler = make_util_sampler(0, nvml=fake, clock=fake.clock, device_props=props())
    sampler.start()
    fake.advance(2.0)
    reading = sampler.stop()
    assert reading.n_samples == 10 and reading.util_pct == pytest.approx(55.0)
    # the driver keeps sampling after stop; a second window sees only its own samples
    sampler.start()
    fake.advance(1.0)
    second = sampler.stop()
    assert second.samples_pct == [100.0] * 5
    assert reading.util_pct == pytest.approx(55.0)


def test_drains_keep_long_windows_beyond_the_driver_buffer() -> None:
    fake = FakeNvml()  # the fake driver keeps the last 100 samples (20 s)
    sampler = make_util_sampler(
        0, nvml=fake, clock=fake.clock, device_props=props(), drain_interval_s=None
    )
    sampler.start()
    fake.advance(10.0)
    assert isinstance(sampler, NvmlUtilSampler)
    sampler._drain()  # what the drain thread does every drain_interval_s
    fake.advance(15.0)
    reading = sampler.stop()
    assert reading.n_samples == 125 and "lost" not in reading.note
    assert reading.covered_s == pytest.approx(25.0)


def test_samples_lost_from_the_driver_buffer_are_noted() -> None:
    fake = FakeNvml()
    sampler = make_util_sampler(
        0, nvml=fake, clock=fake.clock, device_props=props(), drain_interval_s=None
    )
    sampler.start()
    fake.advance(25.0)
    reading = sampler.stop()
    assert reading.n_samples == 100
    assert "early samples of the window lost" in reading.note


def test_short_window_is_reported_but_flagged() -> None:
    fake = FakeNvml(util_at=lambda t: 30.0)
    sampler = make_util_sampler(0, nvml=fake, clock=fake.clock, device_props=props())
    sampler.start()
    fake.advance(0.4)
    reading = sampler.stop()
    assert reading.util_pct == pytest.approx(30.0)
    assert reading.n_samples == 2
    assert "too short to trust" in reading.note


def test_window_without_any_new_sample_gives_none() -> None:
    fake = FakeNvml()
    sampler = make_util_sampler(0, nvml=fake, clock=fake.clock, device_props=props())
    sampler.start()
    fake.advance(0.1)  # the driver has not produced the next sample yet (NotFound)
    reading = sampler.stop()
    assert reading.util_pct is None and reading.n_samples == 0
    assert "no NVML samples" in reading.note


def test_get_samples_failing_mid_window_is_a_note_not_a_crash() -> None:
    fake = FakeNvml("GetSamples fails later")
    sampler = make_util_sampler(0, nvml=fake, clock=fake.clock, device_props=props())
    sampler.start()
    fake.advance(2.0)
    reading = sampler.stop()
    assert reading.util_pct is None
    assert "nvmlDeviceGetSamples failed" in reading.note


def test_sm_activity_from_gpm_when_supported() -> None:
    fake = FakeNvml(gpm=True)
    sampler = make_util_sampler(0, nvml=fake, clock=fake.clock, device_props=props())
    sampler.start()
    fake.advance(2.0)
    reading = sampler.stop()
    assert reading.sm_active_pct == pytest.approx(1.5)
    assert reading.sm_occupancy_pct == pytest.approx(0.8)
    assert reading.util_pct == pytest.approx(50.0)


def test_sm_activity_absent_without_gpm() -> None:
    fake = FakeNvml()
    sampler = make_util_sampler(0, nvml=fake, clock=fake.clock, device_props=props())
    sampler.start()
    fake.advance(2.0)
    reading = sampler.stop()
    assert reading.sm_active_pct is None
    assert reading.sm_note.startswith("SM activity unavailable")


def test_reading_is_json_able() -> None:
    import json

    fake = FakeNvml()
    sampler = make_util_sampler(0, nvml=fake, clock=fake.clock, device_props=props())
    sampler.start()
    fake.advance(1.0)
    json.dumps(sampler.stop().to_dict())


# ---------------------------------------------------------------------------------------------
# "GetSamples not supported": polling fallback


def test_get_samples_not_supported_falls_back_to_polling() -> None:
    fake = FakeNvml("GetSamples not supported", poll_value=40.0)
    sampler = make_util_sampler(0, nvml=fake, device_props=props(), poll_interval_s=0.02)
    sampler.start()
    time.sleep(0.25)
    reading = sampler.stop()
    assert reading.method == "polling"
    assert reading.util_pct == pytest.approx(40.0)
    assert reading.n_samples == fake.poll_calls >= 3
    assert reading.sample_period_s is None
    assert "not supported" in reading.note.lower()
    assert "too short to trust" in reading.note  # 0.25 s < 3 x the worst-case 1 s period


def test_polling_averages_changing_values() -> None:
    fake = FakeNvml("GetSamples not supported")
    values = iter([0.0, 100.0, 50.0, 30.0])
    fake.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=next(values))  # type: ignore[method-assign,assignment]
    sampler = NvmlUtilSampler(fake, "h", clock=fake.clock, poll_interval_s=3600)
    sampler.start()  # poll 1
    sampler._poll_once()  # polls 2, 3 (the thread sleeps for an hour)
    sampler._poll_once()
    fake.advance(5.0)
    reading = sampler.stop()  # poll 4
    assert reading.samples_pct == [0.0, 100.0, 50.0, 30.0]
    assert reading.util_pct == pytest.approx(45.0)
    assert reading.window_s == pytest.approx(5.0)
    assert "too short" not in reading.note


# ---------------------------------------------------------------------------------------------
# "library missing", "init raises", "pynvml not installed"


def test_library_missing_gives_null_sampler_with_reason() -> None:
    fake = FakeNvml("library missing")
    status = nvml_status(fake)
    assert not status.available
    assert "libnvidia-ml.so.1" in status.reason and "LibraryNotFound" in status.reason
    sampler = make_util_sampler(0, nvml=fake, device_props=props())
    assert isinstance(sampler, NullUtilSampler)
    sampler.start()
    reading = sampler.stop()
    assert reading.util_pct is None
    assert reading.note == f"GPU utilization unavailable: {status.reason}"
    facts = gpu_facts(0, fake, device_props=props())
    assert facts["nvml"] is False and facts["name"] == "NVIDIA H200"
    assert facts["driver_version"] is None
    assert "libnvidia-ml.so.1" in facts["reasons"]["driver_version"]


def test_init_raises_gives_null_sampler_with_reason() -> None:
    fake = FakeNvml("init raises")
    assert nvml_status(fake).reason.startswith("nvmlInit failed: NVMLError_Unknown")
    sampler = make_util_sampler(0, nvml=fake, device_props=props())
    assert isinstance(sampler, NullUtilSampler)
    assert "nvmlInit failed" in sampler.reason


def test_init_called_once_per_process() -> None:
    fake = FakeNvml()
    for _ in range(3):
        assert nvml_status(fake).available
        make_util_sampler(0, nvml=fake, device_props=props())
        gpu_facts(0, fake, device_props=props())
    assert fake.init_calls == 1


def test_pynvml_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` now raises ImportError
    status = nvml_status()
    assert not status.available
    assert status.reason.startswith("nvidia-ml-py not installed")
    sampler = make_util_sampler(0, device_props=props())
    assert isinstance(sampler, NullUtilSampler)
    assert "nvidia-ml-py not installed" in sampler.reason


def test_no_cuda_device_in_use() -> None:
    fake = FakeNvml()
    sampler = make_util_sampler(None, nvml=fake)
    assert isinstance(sampler, NullUtilSampler)
    sampler.start()
    assert sampler.stop().note == "GPU utilization unavailable: no CUDA device in use"
    assert fake.init_calls == 0


def test_torch_without_cuda_gives_null_sampler() -> None:
    """No device_props: torch (CPU build here) cannot describe device 0."""
    sampler = make_util_sampler(0, nvml=FakeNvml())
    assert isinstance(sampler, NullUtilSampler)
    assert "torch cannot describe CUDA device 0" in sampler.reason


def test_null_sampler_stop_without_start() -> None:
    reading = NullUtilSampler("x").stop()
    assert isinstance(reading, GpuUtilReading) and reading.window_s == 0.0


def test_real_pynvml_on_a_host_without_the_library() -> None:
    """NVML missing, for real: this CPU host has nvidia-ml-py but no libnvidia-ml.so.1."""
    pytest.importorskip("pynvml")
    status = nvml_status()
    if status.available:
        pytest.skip("NVML works on this host")
    assert "libnvidia-ml.so.1 not found" in status.reason
    assert isinstance(make_util_sampler(0), NullUtilSampler)


def test_import_does_no_work() -> None:
    code = (
        "import sys, loaderbench.machine.gpu, loaderbench.machine.env;"
        "assert 'pynvml' not in sys.modules, 'pynvml';"
        "assert 'torch' not in sys.modules, 'torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=gpu.__file__.rsplit("/", 2)[0])


def test_pynvml_imported_only_by_gpu_module() -> None:
    from pathlib import Path

    pkg = Path(gpu.__file__).parent
    importers = [
        p.name
        for p in pkg.glob("*.py")
        if "import pynvml" in p.read_text() or "from pynvml" in p.read_text()
    ]
    assert importers == ["gpu.py"]


# ---------------------------------------------------------------------------------------------
# Binding the handle: UUID, then PCI bus id, never ordinal


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (UUID, NVML_UUID),
        (UUID.upper(), NVML_UUID),
        (NVML_UUID, NVML_UUID),
        (UUID.replace("-", ""), NVML_UUID),
        ("MIG-" + UUID, "MIG-" + UUID),
        (bytes.fromhex(UUID.replace("-", "")), NVML_UUID),
        (SimpleNamespace(bytes=list(bytes.fromhex(UUID.replace("-", "")))), NVML_UUID),
        ("not-a-uuid", None),
        (None, None),
        ("", None),
    ],
)
def test_normalize_uuid(raw: Any, expected: str | None) -> None:
    assert normalize_uuid(raw) == expected


def test_pci_bus_id_candidates() -> None:
    assert pci_bus_id_candidates(0, 0x3B, 0) == [
        "00000000:3B:00.0",
        "00000000:3b:00.0",
        "0000:3B:00.0",
        "0000:3b:00.0",
    ]


def test_binds_by_uuid_first() -> None:
    fake = FakeNvml()
    handle, how = nvml_handle_for_torch_device(0, fake, device_props=props())
    assert (handle, how) == (f"handle:{NVML_UUID}", "uuid")
    assert fake.lookups == [("uuid", NVML_UUID)]


def test_falls_back_to_pci_bus_id() -> None:
    fake = FakeNvml(uuids=())
    handle, how = nvml_handle_for_torch_device(3, fake, device_props=props())
    assert (handle, how) == (f"handle:{PCI}", "pci_bus_id")
    assert [kind for kind, _ in fake.lookups] == ["uuid", "uuid", "pci"]


def test_pci_fallback_tries_the_legacy_domain_form() -> None:
    fake = FakeNvml(uuids=(), pci_ids=("0000:3B:00.0",))
    handle, how = nvml_handle_for_torch_device(0, fake, device_props=props(uuid=None))
    assert how == "pci_bus_id" and handle == "handle:0000:3B:00.0"
    assert fake.lookups[0] == ("pci", "00000000:3B:00.0")


def test_no_match_never_falls_back_to_ordinal() -> None:
    fake = FakeNvml(uuids=(), pci_ids=())
    with pytest.raises(NvmlUnavailableError, match="no NVML device matches torch CUDA device 0"):
        nvml_handle_for_torch_device(0, fake, device_props=props())
    sampler = make_util_sampler(0, nvml=fake, device_props=props())
    assert isinstance(sampler, NullUtilSampler)  # FakeNvml raises if bound by index
    assert "no NVML device matches" in sampler.reason


def test_no_uuid_and_no_pci_gives_reason() -> None:
    fake = FakeNvml()
    with pytest.raises(NvmlUnavailableError, match="no device UUID.*no PCI bus id"):
        nvml_handle_for_torch_device(0, fake, device_props=props(uuid=None, bus=None))


# ---------------------------------------------------------------------------------------------
# gpu_facts


def test_gpu_facts_works() -> None:
    fake = FakeNvml(now_s=30.0)
    facts = gpu_facts(0, fake, device_props=props())
    assert facts["nvml"] is True and facts["bound_by"] == "uuid"
    assert facts["name"] == "NVIDIA H200"
    assert facts["uuid"] == NVML_UUID
    assert facts["driver_version"] == "580.159.04"
    assert facts["cuda_driver_version"] == 13000
    assert facts["memory_total_bytes"] == 143_771_058_176
    assert (facts["pcie_gen_current"], facts["pcie_gen_max"]) == (5, 5)
    assert facts["pcie_width_max"] == 16
    assert facts["pcie_width_current"] is None  # not supported -> None with a reason
    assert facts["reasons"] == {"pcie_width_current": "NVMLError_NotSupported: Not Supported"}
    assert facts["util_sample_period_s"] == pytest.approx(0.2)


def test_gpu_facts_without_torch_cuda() -> None:
    facts = gpu_facts(0, FakeNvml())
    assert facts["nvml"] is False and facts["name"] is None
    assert "torch cannot describe CUDA device 0" in facts["reasons"]["name"]
