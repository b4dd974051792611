"""Compute steps: none, sleep, spin (GPU), torchvision model train step; normalization."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from loaderbench.errors import UsageError
from loaderbench.model import ComputeSpec
from loaderbench.workload.compute import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ModelStep,
    build_compute,
    normalize_on_device,
)

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _median_host_ms(fn: Any, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# ---- none / sleep ----------------------------------------------------------------------------


def test_none_does_nothing_quickly() -> None:
    step = build_compute(ComputeSpec(kind="none"), CPU)
    assert step.name == "none"
    step((torch.zeros(2), "meta"))
    assert _median_host_ms(lambda: step(None)) < 1.0


def test_sleep_20_takes_20_ms() -> None:
    step = build_compute(ComputeSpec(kind="sleep", ms=20), CPU)
    assert step.name == "sleep:20"
    assert 19.9 <= _median_host_ms(lambda: step(None)) <= 25.0


def test_sleep_0_is_immediate() -> None:
    step = build_compute(ComputeSpec(kind="sleep", ms=0), CPU)
    assert _median_host_ms(lambda: step(None)) < 1.0


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (ComputeSpec(kind="sleep", ms=-1), ">= 0"),
        (ComputeSpec(kind="sleep", ms=float("nan")), ">= 0"),
        (ComputeSpec(kind="warp", ms=1), "unknown kind 'warp'"),
        (ComputeSpec(kind="model", model=None), "name a model"),
    ],
)
def test_bad_specs_are_usage_errors(spec: ComputeSpec, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        build_compute(spec, CPU)


# ---- spin --------------------------------------------------------------------------------------


def test_spin_on_a_cpu_device_is_a_usage_error_that_points_to_sleep() -> None:
    with pytest.raises(UsageError, match="sleep:50"):
        build_compute(ComputeSpec(kind="spin", ms=50), CPU)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_spin_without_cuda_says_so() -> None:
    with pytest.raises(UsageError, match="CUDA is not available.*sleep:50"):
        build_compute(ComputeSpec(kind="spin", ms=50), torch.device("cuda"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_model_on_cuda_without_cuda_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="CUDA is not available"):
        build_compute(ComputeSpec(kind="model", model="resnet18"), torch.device("cuda"))


# ---- model -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["resnet_nope", "list_models", "fasterrcnn_resnet50_fpn"])
def test_unknown_model_is_a_usage_error_listing_valid_names(name: str) -> None:
    with pytest.raises(UsageError, match=r"not a torchvision classification model.*resnet50"):
        build_compute(ComputeSpec(kind="model", model=name), CPU)


@pytest.fixture(scope="module")
def resnet18_cpu() -> Iterator[ModelStep]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 busy cores: intra-op threads would only fight each other
    try:
        torch.manual_seed(0)
        step = build_compute(ComputeSpec(kind="model", model="resnet18"), CPU)
        assert isinstance(step, ModelStep)
        yield step
    finally:
        torch.set_num_threads(threads)


def test_model_resnet18_cpu_step_changes_parameters(resnet18_cpu: ModelStep) -> None:
    step = resnet18_cpu
    assert step.name == "model:resnet18"
    before = _params(step.model)
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    labels = torch.tensor([3, 1500])  # 1500 is taken % 1000
    step((images, labels, ["a.jpg", "b.jpg"]))
    after = _params(step.model)
    assert any(not torch.equal(b, a) for b, a in zip(before, after))
    assert all(torch.isfinite(a).all() for a in after)
    assert all(p.grad is None for p in step.model.parameters())  # zero_grad(set_to_none)


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param({"image": torch.rand(2, 3, 32, 32)}, id="float-images-no-labels"),
        pytest.param(
            (torch.randint(0, 256, (2, 32, 32, 3), dtype=torch.uint8), torch.tensor([-1, 7])),
            id="nhwc-uint8-negative-labels",
        ),
        pytest.param(
            [torch.randint(0, 256, (2, 1, 32, 32), dtype=torch.uint8), torch.tensor([0.5, 0.2])],
            id="grayscale-float-labels-ignored",
        ),
        pytest.param(
            (
                torch.tensor(1.0),
                torch.rand(2, 3, 32, 32),
                torch.tensor([1, 2, 3]),
                torch.tensor([4, 5]),
            ),
            id="labels-of-batch-length",
        ),
    ],
)
def test_model_step_accepts_common_batch_shapes(resnet18_cpu: ModelStep, batch: Any) -> None:
    images, labels = resnet18_cpu._inputs(batch)
    assert images.shape == (2, 3, 32, 32) and images.dtype == torch.float32
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64 and labels.shape == (2,)
    assert bool(((labels >= 0) & (labels < 1000)).all())


def test_model_step_runs_on_float_images_without_labels(resnet18_cpu: ModelStep) -> None:
    before = _params(resnet18_cpu.model)
    resnet18_cpu({"image": torch.rand(2, 3, 32, 32), "path": ["a", "b"]})
    assert any(not torch.equal(b, a) for b, a in zip(before, _params(resnet18_cpu.model)))


def test_model_step_takes_the_first_1d_integer_leaf_as_labels(resnet18_cpu: ModelStep) -> None:
    _, labels = resnet18_cpu._inputs(
        (torch.zeros(2, 3, 8, 8), torch.tensor([0.1, 0.2]), torch.tensor([1001, 2]))
    )
    assert labels.tolist() == [1, 2]
    _, labels = resnet18_cpu._inputs((torch.zeros(2, 3, 8, 8), "no labels"))
    assert labels.tolist() == [0, 0]


def test_model_step_without_images_is_a_usage_error(resnet18_cpu: ModelStep) -> None:
    with pytest.raises(UsageError, match="4-D"):
        resnet18_cpu((torch.zeros(4, 16), torch.zeros(4, dtype=torch.int64)))


# ---- normalize_on_device -----------------------------------------------------------------------


def test_normalize_on_device_matches_the_formula() -> None:
    x = torch.randint(0, 256, (2, 3, 5, 4), dtype=torch.uint8)
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    expected = (x.float() / 255 - mean) / std
    y = normalize_on_device(x)
    assert y.dtype == torch.float32 and y.shape == x.shape
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(normalize_on_device(x[0]), expected[0], rtol=1e-5, atol=1e-5)


def test_normalize_on_device_keeps_channels_last() -> None:
    x = torch.zeros(2, 3, 4, 4, dtype=torch.uint8).contiguous(memory_format=torch.channels_last)
    assert normalize_on_device(x).is_contiguous(memory_format=torch.channels_last)


def test_normalize_on_device_rejects_non_images() -> None:
    with pytest.raises(TypeError, match="uint8"):
        normalize_on_device(torch.zeros(2, 3, 4, 4))
    with pytest.raises(ValueError, match="3, H, W"):
        normalize_on_device(torch.zeros(2, 4, 4, 4, dtype=torch.uint8))


def test_normalize_on_device_on_a_batch_touches_only_image_leaves() -> None:
    imgs = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    mask = torch.zeros(3, 4, 4, dtype=torch.uint8)  # 3-D uint8: not an image batch, untouched
    labels = torch.tensor([1, 2])
    out = normalize_on_device({"img": imgs, "mask": mask, "label": labels, "meta": ["x"]})
    assert out["img"].dtype == torch.float32
    assert out["mask"] is mask and out["label"] is labels and out["meta"] == ["x"]


# ---- on a GPU ----------------------------------------------------------------------------------


def _event_ms(fn: Any) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


@pytest.mark.gpu
@needs_cuda
def test_gpu_spin_50_takes_50_ms_and_does_not_synchronize() -> None:
    dev = torch.device("cuda")
    step = build_compute(ComputeSpec(kind="spin", ms=50), dev)
    assert step.name == "spin:50"
    step(None)
    torch.cuda.synchronize()
    measured = statistics.median(_event_ms(lambda: step(None)) for _ in range(5))
    assert 45.0 <= measured <= 55.0, measured
    torch.cuda.set_sync_debug_mode("error")
    try:
        t0 = time.perf_counter()
        step(None)
        host_ms = (time.perf_counter() - t0) * 1000.0
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert host_ms < 10.0  # queued, not waited for


@pytest.mark.gpu
@needs_cuda
def test_gpu_model_resnet50_step_on_batch_32() -> None:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    step = build_compute(ComputeSpec(kind="model", model="resnet50"), dev)
    assert isinstance(step, ModelStep)
    images = torch.randint(0, 256, (32, 3, 224, 224), dtype=torch.uint8, device=dev)
    labels = torch.randint(0, 5000, (32,), device=dev)
    before = _params(step.model)
    step((images, labels))  # warm-up: cuDNN/cuBLAS handles may synchronize once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step((images, labels))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    after = _params(step.model)
    assert any(not torch.equal(b, a) for b, a in zip(before, after))
    assert all(bool(torch.isfinite(a).all()) for a in after)
    conv_weight: Any = step.model.conv1.weight
    assert conv_weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.gpu
@needs_cuda
def test_gpu_normalize_on_device_matches_cpu() -> None:
    x = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)
    torch.testing.assert_close(
        normalize_on_device(x.cuda()).cpu(), normalize_on_device(x), rtol=1e-6, atol=1e-6
    )
