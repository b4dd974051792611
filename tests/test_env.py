"""loaderbench.machine.env on this machine (CPU only) and preflight warnings on fake records."""

from __future__ import annotations

import json
import multiprocessing
import os
from typing import Any

import pytest

from loaderbench.machine import env as envmod
from loaderbench.machine.env import (
    capture_environment,
    environment_fingerprint,
    fd_limit,
    preflight_warnings,
    shm_info,
    usable_cpus,
)

EXPECTED_KEYS = {
    "host",
    "os",
    "kernel",
    "platform",
    "cpu_model",
    "cpu_count",
    "usable_cpus",
    "cpu_affinity",
    "cpu_quota",
    "memory_total_bytes",
    "memory_available_bytes",
    "shm",
    "fd_limit",
    "torch_sharing_strategy",
    "default_mp_start_method",
    "mp_start_method_set",
    "torch_num_threads",
    "python_version",
    "torch_version",
    "torchvision_version",
    "cuda_available",
    "cuda_version",
    "cudnn_version",
    "gpu",
    "nvml",
    "fingerprint",
    "CUDA_VISIBLE_DEVICES",
}


@pytest.fixture(scope="module")
def captured() -> dict[str, Any]:
    return capture_environment()


def test_capture_has_the_chosen_keys(captured: dict[str, Any]) -> None:
    assert set(captured) == EXPECTED_KEYS
    assert captured["usable_cpus"] == len(captured["cpu_affinity"]) >= 1
    assert captured["memory_total_bytes"] > 0
    assert captured["fd_limit"] == fd_limit()
    assert captured["gpu"] == {"available": False, "reason": "no CUDA device in use"}
    assert set(captured["nvml"]) == {"available", "reason"}
    assert captured["torch_sharing_strategy"] in {"file_descriptor", "file_system"}
    assert captured["default_mp_start_method"] in multiprocessing.get_all_start_methods()
    assert isinstance(captured["fingerprint"], str) and len(captured["fingerprint"]) == 12


def test_capture_is_json_and_dumps_no_environment(
    captured: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOADERBENCH_TEST_SECRET", "s3cr3t-value-do-not-record")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    env = capture_environment()
    text = json.dumps(env)
    assert json.loads(text) == env
    assert os.environ["PATH"] not in text
    assert "s3cr3t-value-do-not-record" not in text
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-abc"


def test_fingerprint_is_stable(captured: dict[str, Any]) -> None:
    again = capture_environment()
    assert again["fingerprint"] == captured["fingerprint"]
    assert environment_fingerprint(captured) == captured["fingerprint"]
    other_gpu = dict(captured, gpu={"available": True, "name": "NVIDIA H200"})
    assert environment_fingerprint(other_gpu) != captured["fingerprint"]
    patch_release = dict(captured, torch_version=captured["torch_version"] + ".post1")
    assert environment_fingerprint(patch_release) == captured["fingerprint"]
    more_memory = dict(captured, memory_total_bytes=captured["memory_total_bytes"] + 2**20)
    assert environment_fingerprint(more_memory) == captured["fingerprint"]


class TinyNvml:
    """Just enough of pynvml for capture_environment (the full fake lives in test_gpu.py)."""

    class NVMLError_LibraryNotFound(Exception):
        value = 12

    def __init__(self, missing: bool = False) -> None:
        self.missing = missing

    def nvmlInit(self) -> None:
        if self.missing:
            raise self.NVMLError_LibraryNotFound()


def test_capture_with_device_on_a_cpu_host() -> None:
    env = capture_environment(device_index=0, nvml=TinyNvml())
    assert env["nvml"] == {"available": True, "reason": "NVML initialised"}
    assert env["gpu"] == {"available": False, "reason": "torch reports no CUDA device"}
    env = capture_environment(device_index=0, nvml=TinyNvml(missing=True))
    assert env["nvml"]["available"] is False
    assert "libnvidia-ml.so.1" in env["nvml"]["reason"]


def test_reading_the_start_method_does_not_set_it() -> None:
    before = multiprocessing.get_start_method(allow_none=True)
    envmod.default_mp_start_method()
    assert multiprocessing.get_start_method(allow_none=True) == before


def test_shm_info_on_dev_shm() -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    info = shm_info()
    assert info["path"] == "/dev/shm" and info["reason"] is None
    assert info["total_bytes"] > 0 and 0 <= info["free_bytes"] <= info["total_bytes"]
    assert info["fs_type"] == "tmpfs"


def test_shm_info_missing_path() -> None:
    info = shm_info("/nonexistent/shm")
    assert info["total_bytes"] is None and info["fs_type"] is None
    assert "does not exist" in info["reason"]


def test_usable_cpus_and_fd_limit() -> None:
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)
    limit = fd_limit()
    assert set(limit) == {"soft", "hard"}
    assert limit["soft"] is None or limit["soft"] > 0


# ---------------------------------------------------------------------------------------------
# preflight_warnings


def healthy() -> dict[str, Any]:
    return {
        "shm": {"path": "/dev/shm", "total_bytes": 64 * 2**30, "free_bytes": 60 * 2**30},
        "fd_limit": {"soft": 1_048_576, "hard": 1_048_576},
        "torch_sharing_strategy": "file_descriptor",
        "usable_cpus": 16,
        "cpu_count": 16,
        "cpu_quota": {"cpus": None, "source": None},
        "cuda_available": True,
        "nvml": {"available": True, "reason": "NVML initialised"},
    }


def test_healthy_env_has_no_warnings() -> None:
    assert preflight_warnings(healthy()) == []
    assert preflight_warnings({}) == []


def test_small_shm_mentions_shm_size() -> None:
    env = healthy()
    env["shm"] = {"path": "/dev/shm", "total_bytes": 64 * 2**20, "free_bytes": 64 * 2**20}
    (warning,) = preflight_warnings(env)
    assert "shared memory (/dev/shm) is 64 MiB" in warning
    assert "--shm-size" in warning


def test_missing_and_nearly_full_shm() -> None:
    env = healthy()
    env["shm"] = {
        "path": "/dev/shm",
        "total_bytes": None,
        "free_bytes": None,
        "reason": "/dev/shm does not exist",
    }
    assert "does not exist" in preflight_warnings(env)[0]
    env["shm"] = {"path": "/dev/shm", "total_bytes": 8 * 2**30, "free_bytes": 100 * 2**20}
    assert "only 100 MiB free" in preflight_warnings(env)[0]


def test_low_fd_limit_matters_only_with_file_descriptor_strategy() -> None:
    env = healthy()
    env["fd_limit"] = {"soft": 1024, "hard": 4096}
    (warning,) = preflight_warnings(env)
    assert "ulimit -n" in warning and "1024" in warning and "file_system" in warning
    assert "raise it (ulimit -n 4096; hard limit 4096)" in warning  # never past the hard limit
    env["fd_limit"] = {"soft": 256, "hard": 256}
    assert "the hard limit is 256 too (raising it needs root) so use torch.multiprocessing" in preflight_warnings(env)[0]
    env["fd_limit"] = {"soft": 1024, "hard": None}
    assert "raise it (ulimit -n 65536; hard limit unlimited)" in preflight_warnings(env)[0]
    env["torch_sharing_strategy"] = "file_system"
    assert preflight_warnings(env) == []


def test_nvml_unavailable_and_no_cuda() -> None:
    env = healthy()
    env["nvml"] = {"available": False, "reason": "libnvidia-ml.so.1 not found"}
    (warning,) = preflight_warnings(env)
    assert warning.startswith("GPU utilization unavailable: libnvidia-ml.so.1 not found")
    env["cuda_available"] = False
    (warning,) = preflight_warnings(env)
    assert warning.startswith("no CUDA device")


def test_affinity_and_quota_below_cpu_count() -> None:
    env = healthy()
    env["usable_cpus"] = 4
    env["cpu_quota"] = {"cpus": 2.0, "source": "/sys/fs/cgroup/cpu.max"}
    warnings = preflight_warnings(env)
    assert any("4 of 16 CPUs" in w for w in warnings)
    assert any("quota allows 2 CPUs" in w for w in warnings)


def test_this_machine_preflight_runs(captured: dict[str, Any]) -> None:
    warnings = preflight_warnings(captured)
    assert all(isinstance(w, str) for w in warnings)
    assert any(w.startswith("no CUDA device") for w in warnings)  # CPU-only host


def test_pcie_expected_band_is_hand_computed():
    from loaderbench.machine.bandwidth import pcie_expected_gb_per_s

    band = pcie_expected_gb_per_s(5, 16)
    assert band["link_gb_per_s"] == pytest.approx(63.008)
    assert band["expected_low_gb_per_s"] == pytest.approx(63.008 * 0.70)
    assert pcie_expected_gb_per_s(None, 16) is None
    assert pcie_expected_gb_per_s(9, 16) is None
