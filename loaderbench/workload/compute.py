"""The step that consumes each batch: nothing, a host sleep, a GPU spin, a torchvision model's train
step, or the user's own train step.

`build_compute(spec, device)` returns a `ComputeStep`: a callable `step(batch) -> None` with a
`name`. On a GPU a step only *enqueues* its work and returns: it never synchronizes and never
reads a value back (`.item()`), so the runner decides where the step boundary is timed (see
NOTE [timing model] in measure/timing.py: a step that synchronised would hide queued GPU work from the
loop, and one that did not would leak it into the next data-wait).

Nothing heavy happens at import: torchvision is imported by `build_compute` for `model:` only.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Protocol

import torch

from loaderbench.errors import StepError, UsageError
from loaderbench.model import ComputeSpec
from loaderbench.workload.batch import iter_tensors, map_tensors

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ComputeStep",
    "UserStep",
    "build_compute",
    "normalize_on_device",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
NUM_CLASSES = 1000
_EXAMPLE_MODELS = ("resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "vit_b_16")


class ComputeStep(Protocol):
    """One training/inference step on one batch.

    `name` is the spec's label (`none`, `sleep:20`, `spin:50`, `model:resnet50`). Calling the step
    enqueues its work; on a GPU it returns before the work has run and must not synchronize.
    """

    name: str

    def __call__(self, batch: Any) -> None: ...


def build_compute(spec: ComputeSpec, device: torch.device, *, distributed: bool = False) -> ComputeStep:
    """Build the step that `spec` describes, for batches on `device`.

    `distributed` (a default process group is initialised, see measure.ranks.RankGroup): the step
    ends with the gradient all-reduce, as in synchronous data-parallel training: a model is
    wrapped in DistributedDataParallel; `none`, `sleep:` and `spin:` are followed by an
    all-reduce of one element (`AllReduceStep`), which stands for it.

    - `none`: does nothing.
    - `sleep:MS`: `time.sleep(MS / 1000)` on the host, on any device (on a CPU-only machine it
      stands for an accelerator step).
    - `spin:MS`: a GPU busy kernel (`torch.cuda._sleep`) of MS milliseconds, calibrated here once
      with CUDA events (a few hundred ms of build time); asynchronous.
    - `model:NAME`: a torchvision classification model's training step (forward, cross-entropy,
      backward, SGD lr=0.01 momentum=0.9) on the batch's images; see `ModelStep`.
    - `step:MODULE:FACTORY`: the user's own train step, `FACTORY(device)`; see `UserStep`. In a
      distributed trial the process group is initialised before the factory is called, and the
      step is not followed by an all-reduce: the user's model does its own (wrapped in DDP by
      the factory).

    Raises:
        UsageError: unknown kind, negative MS, `spin` without a CUDA device, `model` without a
            name, with a name that is not a torchvision classification model, or on a CUDA
            device when CUDA is not available.
        StepError: (`step:`) the factory cannot be imported, raises, or returns something that
            is not callable.
    """
    device = torch.device(device)
    step = _build(spec, device, distributed)
    if distributed and not isinstance(step, (ModelStep, UserStep)):
        return AllReduceStep(step, device)
    return step


def _build(spec: ComputeSpec, device: torch.device, distributed: bool) -> ComputeStep:
    name = spec.label()
    if spec.kind in ("sleep", "spin") and not spec.ms >= 0:
        raise UsageError(f"--compute {name}: the duration must be >= 0 ms")
    if spec.kind == "none":
        return NoStep(name)
    if spec.kind == "sleep":
        return SleepStep(name, spec.ms)
    if spec.kind == "spin":
        if device.type != "cuda" or not torch.cuda.is_available():
            why = (
                "CUDA is not available" if not torch.cuda.is_available() else f"device is {device}"
            )
            raise UsageError(
                f"--compute {name} is a GPU busy kernel and needs a CUDA device ({why}); "
                f"use --compute sleep:{spec.ms:g} to stand for the step on the host"
            )
        return SpinStep(name, spec.ms, device)
    if spec.kind == "model":
        if device.type == "cuda" and not torch.cuda.is_available():
            raise UsageError(
                f"--compute {name} was asked to train on {device} but CUDA is not available; "
                "measure on --device cpu"
            )
        return ModelStep(name, spec.model or "", device, distributed=distributed)
    if spec.kind == "step":
        return UserStep(name, spec.factory or "", device)
    raise UsageError(
        f"--compute: unknown kind {spec.kind!r}; use none, sleep:MS, spin:MS, model:NAME or step:MODULE:FACTORY"
    )


def load_step_factory(ref: str) -> Any:
    """The user's step factory `ref` ("module:name"), imported (StepError naming `--compute
    step:REF` when it cannot be imported or is not callable). Imports the module only: the
    sweep checks this in its own process before any config runs."""
    from loaderbench.errors import DataError
    from loaderbench.workload.datasets import load_callable

    try:
        return load_callable(ref, "make_step", "--compute")
    except DataError as exc:  # its messages name "--compute REF": the flag's value is step:REF
        text = str(exc).replace(f"--compute {ref}", f"--compute step:{ref}")
        raise StepError(text.replace(f"{ref} (--compute)", f"--compute step:{ref}")) from None


class UserStep:
    """`step:MODULE:FACTORY`: the user's own train step.

    `FACTORY(device)` (a `torch.device`) is called once, here, and returns a callable that takes
    one batch already on the device (as the DataLoader, or the collate function, made it, moved
    there with `batch.move_to_device`) and runs the user's step: forward, loss, backward, the
    optimizer's update. Its return value is ignored. As for every step, on a GPU it should only
    enqueue its work (a `.item()` or a synchronize inside it still times right: the runner's
    CUDA events bracket the step, the host just waits there). In a distributed trial the default
    process group exists when the factory is called, and the factory wraps its model in
    `DistributedDataParallel` itself; loaderbench does not.

    Raises StepError (one line naming `--compute step:REF`): the factory cannot be imported,
    raises, or returns something not callable (at build); the step raises on its first batch
    (at that call; later failures propagate unchanged).
    """

    def __init__(self, name: str, ref: str, device: torch.device) -> None:
        self.name = name
        self.ref = ref
        factory = load_step_factory(ref)
        try:
            step = factory(device)
        except Exception as exc:  # noqa: BLE001 - the user's code: one line naming it
            raise StepError(f"--compute {name}: the factory raised {_one_line(exc)}; "
                            "it is called with the torch.device to train on") from None
        if not callable(step):
            raise StepError(f"--compute {name}: the factory returned a {type(step).__name__}, not a callable; "
                            "return a function that takes one batch and runs your train step")
        self.step = step
        self._first = True

    def __call__(self, batch: Any) -> None:
        if not self._first:
            self.step(batch)
            return
        try:
            self.step(batch)
        except Exception as exc:  # noqa: BLE001 - the user's code: one line naming it
            raise StepError(f"--compute {self.name}: the step failed on the first batch with {_one_line(exc)}") from None
        self._first = False


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:500]


class AllReduceStep:
    """Another step followed by an all-reduce (sum) of one element on `device` over the default
    process group: what couples the ranks of synchronous data-parallel training, without a model.
    Asynchronous on a GPU (NCCL enqueues it on the current stream); blocking on CPU (gloo)."""

    def __init__(self, inner: ComputeStep, device: torch.device) -> None:
        self.inner = inner
        self.name = inner.name
        self._token = torch.zeros(1, device=device)

    def __call__(self, batch: Any) -> None:
        import torch.distributed as dist

        self.inner(batch)
        dist.all_reduce(self._token)


class NoStep:
    """`none`: consumes the batch and does nothing."""

    def __init__(self, name: str = "none") -> None:
        self.name = name

    def __call__(self, batch: Any) -> None:
        return None


class SleepStep:
    """`sleep:MS`: blocks the host for `ms` milliseconds (at least; the OS may add ~0.1 ms)."""

    def __init__(self, name: str, ms: float) -> None:
        self.name = name
        self.ms = ms
        self._seconds = ms / 1000.0

    def __call__(self, batch: Any) -> None:
        time.sleep(self._seconds)


class SpinStep:
    """`spin:MS`: one GPU kernel that spins for `ms` milliseconds on the current stream.

    `torch.cuda._sleep(cycles)` busy-waits a number of GPU clock cycles, so cycles per ms is
    measured at build (`cycles_per_ms`). A clock change afterwards (boost, thermal throttling)
    shifts the real duration; the runner times steps itself and never trusts `ms`. The kernel
    occupies one block: NVML counts it as 100% "utilization" while the GPU is almost idle.
    """

    def __init__(self, name: str, ms: float, device: torch.device) -> None:
        self.name = name
        self.ms = ms
        self.device = _cuda_device(device)
        self.cycles_per_ms = _calibrate_spin(self.device, ms)
        self.cycles = max(0, round(ms * self.cycles_per_ms))

    def __call__(self, batch: Any) -> None:
        if self.cycles > 0:
            with torch.cuda.device(self.device):
                torch.cuda._sleep(self.cycles)


def _cuda_device(device: torch.device) -> torch.device:
    return torch.device(
        "cuda", torch.cuda.current_device() if device.index is None else device.index
    )


def _time_spin_ms(cycles: int, repeats: int) -> float:
    """Median GPU duration (ms) of `torch.cuda._sleep(cycles)`, from CUDA events."""
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _calibrate_spin(device: torch.device, target_ms: float) -> float:
    """GPU clock cycles per millisecond of `torch.cuda._sleep`, measured on `device`.

    A coarse estimate from a ~1M-cycle spin, then one refined at the target duration (capped at
    100 ms), so kernel launch overhead and clock ramp-up weigh as they will in use.
    """
    with torch.cuda.device(device):
        torch.cuda.synchronize()
        torch.cuda._sleep(1_000_000)  # wake the clocks
        torch.cuda.synchronize()
        probe_cycles = 1_000_000
        rate = probe_cycles / max(_time_spin_ms(probe_cycles, 3), 1e-3)
        probe_ms = min(max(target_ms, 1.0), 100.0)
        probe_cycles = max(1, round(probe_ms * rate))
        rate = probe_cycles / max(_time_spin_ms(probe_cycles, 3), 1e-3)
    return rate


# --------------------------------------------------------------------------------------------
# normalization

_NORM_CONSTANTS: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _norm_constants(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift) of shape (3, 1, 1), float32, on `device`: y = x * scale - shift.

    Made once per device and cached, so the hot loop never copies constants host-to-device (a
    blocking copy there would synchronize the stream).
    """
    consts = _NORM_CONSTANTS.get(device)
    if consts is None:
        mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64)
        std = torch.tensor(IMAGENET_STD, dtype=torch.float64)
        scale = (1.0 / (255.0 * std)).to(torch.float32).view(3, 1, 1)
        shift = (mean / std).to(torch.float32).view(3, 1, 1)
        consts = (scale.to(device), shift.to(device))
        _NORM_CONSTANTS[device] = consts
    return consts


def _is_image_uint8(t: torch.Tensor) -> bool:
    return t.dtype == torch.uint8 and t.dim() in (3, 4) and t.shape[-3] == 3


def _normalize_tensor(x: torch.Tensor) -> torch.Tensor:
    scale, shift = _norm_constants(x.device)
    return x.to(torch.float32).mul_(scale).sub_(shift)


def normalize_on_device(x_uint8: Any) -> Any:
    """ImageNet-normalize uint8 images where they are: `(x / 255 - mean) / std`, as float32.

    Given a tensor: a uint8 image tensor of shape (3, H, W) or (N, 3, H, W), values 0..255, on any
    device; returns float32 of the same shape, device and memory format. Given a nested batch
    (usable as `CUDAPrefetcher(..., transform=normalize_on_device)`): the same structure with
    every (N, 3, H, W) uint8 leaf normalized and all other leaves (labels, float tensors)
    untouched. The work is queued on the current stream; nothing synchronizes after the first
    call per device (which makes the constants).

    Raises:
        TypeError: a tensor argument that is not uint8.
        ValueError: a uint8 tensor argument that is not (3, H, W) or (N, 3, H, W).
    """
    if isinstance(x_uint8, torch.Tensor):
        if x_uint8.dtype != torch.uint8:
            raise TypeError(f"normalize_on_device expects uint8 images, got {x_uint8.dtype}")
        if not _is_image_uint8(x_uint8):
            raise ValueError(
                "normalize_on_device expects (3, H, W) or (N, 3, H, W) uint8 images, "
                f"got shape {tuple(x_uint8.shape)}"
            )
        return _normalize_tensor(x_uint8)
    return map_tensors(
        x_uint8, lambda t: _normalize_tensor(t) if t.dim() == 4 and _is_image_uint8(t) else t
    )


# --------------------------------------------------------------------------------------------
# model training step


def _classification_models() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def check_model_name(name: str, model_name: str) -> None:
    """UsageError unless `model_name` is a torchvision classification model (cheap: no model is
    built), so a typo fails before the sweep instead of in every config."""
    if not model_name:
        raise UsageError(f"--compute {name}: name a model, e.g. model:resnet50")
    valid = _classification_models()
    if model_name not in valid:
        examples = ", ".join(m for m in _EXAMPLE_MODELS if m in valid)
        raise UsageError(
            f"--compute {name}: {model_name!r} is not a torchvision classification model; "
            f"try {examples} (all {len(valid)}: torchvision.models.list_models())"
        )


class ModelStep:
    """`model:NAME`: one SGD training step of a torchvision classifier per batch.

    Built with `getattr(torchvision.models, NAME)(weights=None, num_classes=1000)`, in train mode,
    with SGD(lr=0.01, momentum=0.9) and cross-entropy. Per batch:

    - images: the first 4-D tensor leaf, (N, C, H, W) with C in {1, 3} (C = 1 is repeated to 3);
      (N, H, W, C) channels-last-as-shape batches are permuted. uint8 (0..255) is normalized on
      the device with ImageNet mean/std; floating images are used as they are.
    - labels: the first 1-D integer tensor leaf of length N, taken `% 1000`; without one,
      zeros(N).
    - CUDA: bf16 autocast, model and images in channels_last. CPU: float32, channels_last.
    - `distributed`: the model is wrapped in DistributedDataParallel (NCCL on CUDA, gloo on CPU;
      the default process group must exist), so backward includes the gradient all-reduce.

    Tensors not yet on the device are copied there (non_blocking). The step enqueues forward,
    backward and the optimizer update and returns: no `.item()`, no synchronize.

    Raises (at build) UsageError for an unknown name; (per batch) UsageError when the batch holds
    no image tensor. Models that need a fixed input size (e.g. vit_b_16: 224x224) raise their own
    error on other sizes.
    """

    def __init__(self, name: str, model_name: str, device: torch.device, *, distributed: bool = False) -> None:
        if not model_name:
            raise UsageError(f"--compute {name}: name a model, e.g. model:resnet50")
        try:
            import torchvision
        except ImportError as exc:  # pragma: no cover - torchvision is a dependency
            raise UsageError(
                f"--compute {name} needs torchvision ({exc}); pip install torchvision"
            ) from exc
        check_model_name(name, model_name)
        self.name = name
        self.model_name = model_name
        self.device = _cuda_device(device) if device.type == "cuda" else device
        self.cuda = self.device.type == "cuda"
        model = getattr(torchvision.models, model_name)(weights=None, num_classes=NUM_CLASSES)
        self.model = model.to(self.device, memory_format=torch.channels_last).train()
        if distributed:
            # Gradients all-reduced in buckets during backward, as in real data-parallel training.
            from torch.nn.parallel import DistributedDataParallel

            self.model = DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.cuda else None
            )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        if self.cuda:
            _norm_constants(self.device)  # made now, not in the first timed step

    def __call__(self, batch: Any) -> None:
        images, labels = self._inputs(batch)
        if self.cuda:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                logits = _logits(self.model(images))
                loss = self.loss_fn(logits, labels)
        else:
            logits = _logits(self.model(images))
            loss = self.loss_fn(logits, labels)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _inputs(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(images float (N, 3, H, W) channels_last, labels int64 (N,)) on the device."""
        leaves = list(iter_tensors(batch))
        images = next((t for t in leaves if t.dim() == 4), None)
        if images is None:
            shapes = ", ".join(str(tuple(t.shape)) for t in leaves[:5]) or "no tensors"
            raise UsageError(
                f"--compute {self.name} needs image batches with a 4-D (N, C, H, W) tensor; "
                f"got {shapes}; use sleep:MS or spin:MS for this dataset"
            )
        n = images.shape[0]
        if images.shape[1] not in (1, 3) and images.shape[-1] in (1, 3):
            images = images.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)
        if images.shape[1] not in (1, 3):
            raise UsageError(
                f"--compute {self.name} needs 1- or 3-channel images, got shape "
                f"{tuple(images.shape)}"
            )
        images = images.to(self.device, non_blocking=True)
        if images.shape[1] == 1:
            images = images.expand(-1, 3, -1, -1)
        if images.dtype == torch.uint8:
            images = _normalize_tensor(images)
        elif not images.is_floating_point():
            images = images.to(torch.float32)
        images = images.contiguous(memory_format=torch.channels_last)

        labels = next(
            (
                t
                for t in leaves
                if t.dim() == 1
                and t.shape[0] == n
                and not t.is_floating_point()
                and not t.is_complex()
                and t.dtype != torch.bool
            ),
            None,
        )
        if labels is None:
            targets = torch.zeros(n, dtype=torch.int64, device=self.device)
        else:
            targets = labels.to(self.device, non_blocking=True).to(torch.int64) % NUM_CLASSES
        return images, targets


def _logits(out: Any) -> torch.Tensor:
    """The main logits of a model output (inception/googlenet return namedtuples in training)."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    return out[0]  # type: ignore[no-any-return]
