"""What the stage profile times besides the stages, for the what-ifs beyond the DataLoader's
settings (`ProfilePlan.alternatives`; analysis/predict.py NOTE [what-ifs beyond the knobs]):

- the dataset's own JPEGs (captured from its decoder while the profile ran) decoded by PIL and by
  torchvision.io on the CPU, and the dataset's transforms after the decode on each's output;
- the same JPEGs decoded in a batch on the GPU by nvJPEG, where there is a CUDA device;
- a map-style dataset without `__getitems__` asked for several samples in one call.

NOTE [the other decoder, timed]
    The ratio of two decoders depends on the images (their size, subsampling, quality) and on the
    CPU, so it is measured on this machine on the dataset's own JPEGs: the profile's decode
    interceptions keep the bytes of the first JPEGs they see (`capture`), and `time_decoders`
    decodes each of them with PIL (`Image.open` + `convert("RGB")`: the full decode) and with
    `torchvision.io.decode_jpeg` (RGB, on the CPU), in turns, image by image, over a few rounds,
    with the intra-op threads a worker has. The decode is not all that changes: torchvision's
    decode gives a uint8 tensor, so the transforms after it run on a tensor rather than PIL's
    image (the same crop is another kernel), and a conversion such as `PILToTensor` is not needed
    at all. So the dataset's transforms (those of its Compose, in order) are timed on both
    outputs too, with the same random draws (the RNG reseeded alike before each chain), on the
    tensor as `transforms.v2` runs them (a v1 transform rebuilt as its v2 class: v1's crop
    converts a uint8 tensor to float and back, 0.86 ms against v2's 0.28 ms for the embedded
    JPEGs' RandomResizedCrop on the 2-core machine, and a tensor pipeline uses v2): a conversion
    that a tensor does not need is dropped (PILToTensor, ToImage) or replaced by its tensor form
    (ToTensor: a float division by 255); any other transform that refuses a tensor ends the
    comparison there, and it and those after it keep their PIL cost in the prediction. CPU time
    of the calling thread is compared, not wall time: the decodes are CPU-bound, and CPU time does
    not stretch with other load on the machine.
    On the GPU, `torchvision.io.decode_jpeg(list, device=...)` decodes a batch of the pick's size
    (the captured JPEGs repeated), alone and followed by each image's crop and flip
    (workload/decode.GPUDecode, what `--decoder nvjpeg` does), timed with CUDA events after a
    warm-up, the median of a few repeats; torchvision returns once its decode is done, so the
    calling thread's CPU time over the call is what the main process spends waiting.
"""

from __future__ import annotations

import functools
import io
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from loaderbench.model import BatchedFetchTiming, DecoderTiming, GpuDecodeTiming

JPEG_MAGIC = b"\xff\xd8"
CAPTURE = 16
"""JPEGs kept from the profile's decodes for the decoders' timing."""

# A conversion a tensor does not need (dropped) or does as a division (ToTensor).
_NOT_NEEDED = ("PILToTensor", "ToImage", "ToImageTensor", "ToPureTensor")


def jpeg_of(obj: Any) -> bytes | None:
    """The encoded bytes a decoder was given, when they are a JPEG: a path (read), a binary file
    object (read from where it stands, then put back), bytes, or a 1-D uint8 tensor; None for
    anything else or another format."""
    data: bytes | None = None
    try:
        if isinstance(obj, (bytes, bytearray, memoryview)):
            data = bytes(obj)
        elif isinstance(obj, (str, os.PathLike)):
            with open(obj, "rb") as fh:
                data = fh.read()
        elif isinstance(obj, io.BytesIO):
            data = obj.getvalue()[obj.tell():]
        elif hasattr(obj, "read") and hasattr(obj, "seek") and hasattr(obj, "tell"):
            pos = obj.tell()
            data = obj.read()
            obj.seek(pos)
        elif type(obj).__name__ == "Tensor" and getattr(obj, "dim", lambda: 0)() == 1:
            data = bytes(obj.cpu().numpy().tobytes())
    except (OSError, ValueError, TypeError, RuntimeError):
        return None
    return data if data is not None and data[:2] == JPEG_MAGIC else None


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(fn(), wall seconds, the thread's CPU seconds)."""
    w0, c0 = time.perf_counter(), time.thread_time()
    out = fn()
    return out, time.perf_counter() - w0, time.thread_time() - c0


def as_v2(t: Any) -> Any:
    """The `transforms.v2` equivalent of a torchvision v1 transform, built from its attributes
    (v2's classes take the same arguments: `RandomResizedCrop(size, scale, ratio, interpolation,
    antialias)`, ...): on a uint8 tensor it runs v2's kernels, as a tensor pipeline would. A v2
    transform, a user's own, or one that cannot be rebuilt is returned as it is."""
    import inspect

    cls = type(t)
    if not cls.__module__.startswith("torchvision.transforms") or cls.__module__.startswith("torchvision.transforms.v2"):
        return t
    try:
        from torchvision.transforms import v2

        target = getattr(v2, cls.__name__, None)
        if target is None:
            return t
        params = inspect.signature(target).parameters
        kwargs = {k: getattr(t, k) for k in params if hasattr(t, k)}
        return target(**kwargs)
    except (ImportError, TypeError, ValueError, AttributeError):
        return t


def _to_float(x: Any) -> Any:
    """ToTensor's work on a uint8 tensor: to float in [0, 1]."""
    return x.float().div_(255)


def _chain(x: Any, transforms: Sequence[tuple[str, Any]], tensor: bool, seed: int,
           state: dict[str, Any], each: dict[str, list[float]] | None = None) -> tuple[float, float]:
    """Apply `transforms` to `x` with the RNGs seeded to `seed`; on a tensor, a conversion it
    does not need is dropped (ToTensor becomes a division) and the first transform that refuses
    it ends the chain (`state['stopped_at']`; on PIL's image the chain stops there too). Returns
    (wall, CPU) seconds of the transforms applied."""
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    wall = cpu = 0.0
    stop = state.get("stopped_at")
    for name, t in transforms:
        if name == stop:
            break
        kind = type(t).__name__
        if tensor:
            t = as_v2(t)
        if tensor and kind in _NOT_NEEDED:
            state.setdefault("dropped", set()).add(name)
            if each is not None:
                each.setdefault(name, []).append(0.0)
            continue
        try:
            step = functools.partial(_to_float, x) if tensor and kind == "ToTensor" else functools.partial(t, x)
            x, w, c = _timed(step)
        except (TypeError, ValueError, RuntimeError, AttributeError):
            if tensor:
                state["stopped_at"] = name
            break
        wall += w
        cpu += c
        if each is not None:
            each.setdefault(name, []).append(c)
    return wall, cpu


def time_decoders(jpegs: Sequence[bytes], transforms: Sequence[tuple[str, Any]], *, threads: int,
                  rounds: int = 3, over: Callable[[], bool] = lambda: False) -> DecoderTiming | None:
    """PIL against torchvision.io on the CPU, on `jpegs`, with `transforms` (name, transform) after
    each (NOTE [the other decoder, timed]), in turns over up to `rounds` rounds (at least one;
    `over()` ends it early); None without a JPEG or when torchvision cannot decode them.
    Restores torch's and Python's RNG states and the thread count."""
    if not jpegs:
        return None
    import torch
    from PIL import Image

    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError:
        return None
    before_threads = torch.get_num_threads()
    rng_torch, rng_py = torch.random.get_rng_state(), random.getstate()
    pil: list[tuple[float, float]] = []
    tv: list[tuple[float, float]] = []
    after_pil: list[tuple[float, float]] = []
    after_tv: list[tuple[float, float]] = []
    state: dict[str, Any] = {}
    each_pil: dict[str, list[float]] = {}
    each_tv: dict[str, list[float]] = {}
    done = 0
    try:
        torch.set_num_threads(max(1, threads))
        encoded = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]

        def by_pil(data: bytes) -> Any:
            with Image.open(io.BytesIO(data)) as im:
                return im.convert("RGB")

        # a first decode and chain of each kind, untimed: one-off costs (imports, tables), and
        # where the chain on a tensor stops (the timed rounds then stop both chains there)
        _chain(by_pil(jpegs[0]), transforms, False, 0, state)
        _chain(decode_jpeg(encoded[0], mode=ImageReadMode.RGB), transforms, True, 0, state)
        for r in range(rounds):
            for i, data in enumerate(jpegs):
                seed = 1000 * r + i
                first_pil = (r + i) % 2 == 0  # which decoder goes first alternates
                for kind in ("pil", "tv") if first_pil else ("tv", "pil"):
                    if kind == "pil":
                        image, w, c = _timed(functools.partial(by_pil, data))
                        pil.append((w, c))
                        after_pil.append(_chain(image, transforms, False, seed, state, each_pil))
                    else:
                        image, w, c = _timed(functools.partial(decode_jpeg, encoded[i], mode=ImageReadMode.RGB))
                        tv.append((w, c))
                        after_tv.append(_chain(image, transforms, True, seed, state, each_tv))
            done += 1
            if over():
                break
    except (RuntimeError, OSError, ValueError):
        return None
    finally:
        torch.set_num_threads(before_threads)
        torch.random.set_rng_state(rng_torch)
        random.setstate(rng_py)
    stop = state.get("stopped_at")
    timed = [name for name, _ in transforms]
    timed = timed[: timed.index(stop)] if stop in timed else timed

    def mean_ms(xs: list[tuple[float, float]], k: int) -> float:
        return 1e3 * statistics.fmean(x[k] for x in xs)

    return DecoderTiming(
        images=len(jpegs), rounds=done, threads=max(1, threads),
        pil_ms=mean_ms(pil, 0), pil_cpu_ms=mean_ms(pil, 1), torchvision_ms=mean_ms(tv, 0),
        torchvision_cpu_ms=mean_ms(tv, 1), transforms=timed,
        transforms_pil_ms=mean_ms(after_pil, 0) if timed else None,
        transforms_pil_cpu_ms=mean_ms(after_pil, 1) if timed else None,
        transforms_tensor_ms=mean_ms(after_tv, 0) if timed else None,
        transforms_tensor_cpu_ms=mean_ms(after_tv, 1) if timed else None,
        dropped=sorted(state.get("dropped", set())), stopped_at=stop,
        per_transform={n: (1e3 * statistics.fmean(each_pil[n]), 1e3 * statistics.fmean(each_tv[n]))
                       for n in timed if each_pil.get(n) and each_tv.get(n)},
    )


def time_gpu_decode(jpegs: Sequence[bytes], batch_size: int, device: str, *, reps: int = 5) -> GpuDecodeTiming | None:
    """nvJPEG's batched decode of `batch_size` of `jpegs` (repeated) on `device`, alone and with
    the crops (NOTE [the other decoder, timed]): the median GPU milliseconds per batch of `reps`
    repeats after two warm-ups, and the calling thread's CPU milliseconds. None without a JPEG,
    without CUDA, or when torchvision cannot decode on the GPU (built without nvJPEG)."""
    if not jpegs or not device.startswith("cuda") or batch_size < 1:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    from torchvision.io import ImageReadMode, decode_jpeg

    from loaderbench.workload.decode import EncodedJPEGs, GPUDecode, encoded_bytes

    dev = torch.device(device)
    images = [encoded_bytes(jpegs[i % len(jpegs)]) for i in range(batch_size)]
    packed = EncodedJPEGs.pack(images)
    with_crops = GPUDecode(dev)

    def decode() -> Any:
        return decode_jpeg(images, mode=ImageReadMode.RGB, device=dev)

    def decode_crop() -> Any:
        return with_crops.decode(packed)

    def gpu_ms(fn: Callable[[], Any]) -> tuple[float, float]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(dev)
        c0 = time.thread_time()
        start.record()
        out = fn()
        end.record()
        cpu = time.thread_time() - c0
        end.synchronize()
        del out
        return float(start.elapsed_time(end)), 1e3 * cpu

    try:
        for _ in range(2):
            gpu_ms(decode)
            gpu_ms(decode_crop)
        alone, crops, cpu = [], [], []
        for _ in range(max(1, reps)):
            ms, _c = gpu_ms(decode)
            alone.append(ms)
            ms, c = gpu_ms(decode_crop)
            crops.append(ms)
            cpu.append(c)
    except (RuntimeError, ValueError):
        return None
    return GpuDecodeTiming(device=str(dev), batch_size=batch_size, reps=max(1, reps),
                           decode_ms_per_batch=statistics.median(alone),
                           decode_crop_ms_per_batch=statistics.median(crops), cpu_ms_per_batch=statistics.median(cpu))


def has_getitems(dataset: Any) -> bool:
    """Whether the DataLoader fetches a batch of `dataset` in one call (`__getitems__`)."""
    return callable(getattr(dataset, "__getitems__", None))


def holds_samples(result: Any, n: int, one: Any = None) -> bool:
    """Whether `result`, what `dataset[list of n indices]` returned, holds n samples: a list or
    tuple of n items (with `one`, what `dataset[i]` returned: each item built as `one` is, of
    the same types, lengths and array dimensions, so a sample that is itself a tuple of n fields
    is not taken for n samples), or a collated structure whose every array leaf has n rows (a
    TensorDataset's tuple of tensors); and, with `one`, not built as one sample is (same types,
    lengths and array shapes: a `__getitem__` that ignores its index and returns a sample of n
    rows)."""
    from loaderbench.workload.batch import array_rows

    if one is not None and _layout(result) == _layout(one):
        return False
    if (isinstance(result, (list, tuple)) and len(result) == n
            and (one is None or all(_kind(x) == _kind(one) for x in result))):
        return True
    rows = array_rows(result)
    return bool(rows) and all(r == n for r in rows)


def _kind(x: Any, depth: int = 0) -> Any:
    """`_layout` with arrays by their type and number of dimensions only: samples of one dataset
    whose arrays differ in size (images of different sizes) are of one kind."""
    shape = getattr(x, "shape", None)
    if shape is not None:
        return (type(x).__name__, len(tuple(shape)))
    if depth < 4 and isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_kind(v, depth + 1) for v in x))
    if depth < 4 and isinstance(x, dict):
        return ("dict", tuple((k, _kind(v, depth + 1)) for k, v in x.items()))
    return type(x).__name__


def _layout(x: Any, depth: int = 0) -> Any:
    """The structure of a sample or batch: types, the lengths of sequences and mappings, and the
    shapes of arrays (nested to a few levels)."""
    shape = getattr(x, "shape", None)
    if shape is not None:
        return (type(x).__name__, tuple(shape))
    if depth < 4 and isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_layout(v, depth + 1) for v in x))
    if depth < 4 and isinstance(x, dict):
        return ("dict", tuple((k, _layout(v, depth + 1)) for k, v in x.items()))
    return type(x).__name__


def probe_batched_fetch(dataset: Any, indices: Sequence[int], *, items: int = 16, rounds: int = 3,
                        over: Callable[[], bool] = lambda: False) -> BatchedFetchTiming | None:
    """A map-style dataset without `__getitems__` asked for `items` samples in one call
    (`dataset[list of indices]`) against `items` other samples one call each, in turns over up
    to `rounds` rounds (different samples each time, so neither finds the other's in a cache);
    the medians, per one-item call and per list call. None when the dataset has `__getitems__`
    (the DataLoader already fetches a batch in one call), or refuses a list (a first call of
    two indices raises), or does not return `items` samples for a list of `items` indices (a
    `__getitem__` that ignores what it is given returns one sample: `holds_samples`), or has
    fewer than 2 x `items` samples."""
    if has_getitems(dataset) or not hasattr(dataset, "__getitem__"):
        return None
    try:
        n = len(dataset)
    except TypeError:
        return None
    items = max(2, min(items, n // 2))
    if n < 4 or len(indices) < 2:
        return None
    try:
        dataset[[int(indices[0]), int(indices[1])]]
    except Exception:  # noqa: BLE001 - a dataset that takes one index raises anything for a list
        return None
    pool = [int(i) for i in indices] or list(range(n))
    one: list[float] = []
    many: list[float] = []
    done = 0
    for r in range(rounds):
        start = (2 * r * items) % max(1, len(pool))
        chunk = [pool[(start + k) % len(pool)] for k in range(2 * items)]
        singles, batch = (chunk[:items], chunk[items:]) if r % 2 == 0 else (chunk[items:], chunk[:items])
        try:
            t0 = time.perf_counter()
            for i in singles:
                single = dataset[i]
            one.append((time.perf_counter() - t0) / items)
            t0 = time.perf_counter()
            got = dataset[batch]
            many.append(time.perf_counter() - t0)
        except Exception:  # noqa: BLE001 - as above
            return None
        if not holds_samples(got, len(batch), single):
            return None
        done += 1
        if over():
            break
    return BatchedFetchTiming(items=items, rounds=done, one_ms=1e3 * statistics.median(one),
                              batch_ms=1e3 * statistics.median(many))
