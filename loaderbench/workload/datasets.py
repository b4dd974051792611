"""Datasets to measure: synthetic JPEGs, an image folder, tensors of known cost, a user factory.

Everything here builds a `torch.utils.data.Dataset` from a `DatasetSpec` (`build_dataset`), or
writes an image folder to disk (`make_image_folder`, behind `loaderbench make-data`). Nothing is
generated or imported at import time; torchvision is imported only by the functions that need it.

Errors are `loaderbench.errors.DataError` (the dataset cannot be built) or `UsageError` (a bad
argument value), each with a one-line message that names the path or name and the fix.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.data import Dataset, IterableDataset

from loaderbench.errors import DataError, UsageError
from loaderbench.kinds import GENERATOR_VERSION, KINDS
from loaderbench.model import DECODERS, DatasetSpec
from loaderbench.workload import decode

if TYPE_CHECKING:
    import torchvision

__all__ = [
    "IMAGE_SIZE",
    "NUM_CLASSES",
    "SyntheticJPEGDataset",
    "TensorCostDataset",
    "build_collate_fn",
    "build_dataset",
    "default_cache_dir",
    "imagenet_train_transform",
    "load_factory",
    "load_image_folder",
    "load_synthetic_jpegs",
    "make_image_folder",
    "make_synthetic_jpegs",
    "with_decoder",
]

IMAGE_SIZE = 224
"""Side of the square crop the ImageNet train transform produces (pixels)."""

NUM_CLASSES = 1000
"""Number of labels the synthetic datasets cycle through (label = index % NUM_CLASSES)."""


_CACHE_MAGIC = b"LBJPEG01"
_CACHE_FORMAT = 1


# --------------------------------------------------------------------------------------------
# Transform
# --------------------------------------------------------------------------------------------


def imagenet_train_transform() -> Callable[[Image.Image], torch.Tensor]:
    """The classic ImageNet training augmentation, stopped before float conversion.

    `RandomResizedCrop(224)`, `RandomHorizontalFlip()`, `PILToTensor()`: takes a PIL RGB image of
    any size and returns a `torch.uint8` tensor of shape `(3, 224, 224)` (CHW). Normalisation is
    left to the consumer (on the GPU, where it is cheap), as fast input pipelines do.
    """
    from torchvision import transforms

    transform: Callable[[Image.Image], torch.Tensor] = transforms.Compose(
        [
            transforms.RandomResizedCrop(IMAGE_SIZE),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ]
    )
    return transform


# --------------------------------------------------------------------------------------------
# Synthetic JPEGs
# --------------------------------------------------------------------------------------------

# NOTE [ Natural-looking synthetic images ]
# Decode cost and file size depend on image content: pure noise makes ~250 KB JPEGs that decode
# slowly, a flat colour makes ~5 KB ones that decode in no time; neither is what a real
# ImageNet-like folder looks like (500x375, ~110 KB mean but with a long tail; median around 50-80
# KB at quality 90 for photos of moderate detail). Each image is built from
#   1. a smooth low-frequency colour field (a 4x3 random colour grid, bicubic-upsampled),
#   2. a few flat-coloured ellipses and rectangles (hard edges, like objects),
#   3. mid-frequency luminance texture (random values on a 1/6-resolution grid, bilinear-upsampled),
#   4. fine luminance grain (per-pixel integer noise),
# with the texture and grain strengths drawn per image so sizes spread like real photos. At
# 500x375, quality 90 this gives a median of ~57 KB (about 42-70 KB). Everything is vectorised
# (numpy on int16, PIL for resizing, drawing and encoding): ~5 ms per image on one core.
# Each image has its own generator seeded by (seed, index), so image i is the same whether 10 or
# 10,000 are made, and `make_image_folder` writes the very same bytes as `make_synthetic_jpegs`.


def _validate_image_args(image_size: Sequence[int], quality: int, seed: int) -> tuple[int, int]:
    if len(image_size) != 2 or any(int(s) != s or s <= 0 for s in image_size):
        raise UsageError(
            f"image size {tuple(image_size)} is invalid; give two positive integers WIDTH, HEIGHT "
            "(e.g. 500 375)"
        )
    if not 1 <= int(quality) <= 100:
        raise UsageError(f"JPEG quality {quality} is out of range; give an integer from 1 to 100")
    if int(seed) < 0:
        raise UsageError(f"seed {seed} is negative; give a seed >= 0")
    return int(image_size[0]), int(image_size[1])


def _synthetic_jpeg(seed: int, index: int, width: int, height: int, quality: int) -> bytes:
    """One deterministic natural-looking RGB JPEG of `width` x `height` (see the NOTE above)."""
    rng = np.random.default_rng([seed, index, GENERATOR_VERSION])
    grain = int(rng.integers(5, 12))  # +- grey levels of per-pixel noise
    texture = int(rng.integers(20, 46))  # +- grey levels of mid-frequency texture

    # 1. smooth colour field, kept away from the extremes so grain is not clipped away
    grid = rng.integers(20, 236, size=(3, 4, 3), dtype=np.uint8)
    img = Image.fromarray(grid, "RGB").resize((width, height), Image.Resampling.BICUBIC)

    # 2. a few objects with hard edges
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 7))):
        x0 = int(rng.integers(-width // 4, width))
        y0 = int(rng.integers(-height // 4, height))
        x1 = x0 + int(rng.integers(max(1, width // 10), max(2, width // 2)))
        y1 = y0 + int(rng.integers(max(1, height // 10), max(2, height // 2)))
        fill = tuple(int(c) for c in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1, y1), fill=fill)
        else:
            draw.rectangle((x0, y0, x1, y1), fill=fill)

    # 3. mid-frequency texture + 4. fine grain, both on luminance (added to all three channels)
    coarse = rng.integers(0, 256, size=(max(1, height // 6), max(1, width // 6)), dtype=np.uint8)
    tex = np.asarray(
        Image.fromarray(coarse, "L").resize((width, height), Image.Resampling.BILINEAR),
        dtype=np.int16,
    )
    noise = (tex - 128) * texture // 128
    noise += rng.integers(-grain, grain + 1, size=(height, width), dtype=np.int16)
    pixels = np.asarray(img, dtype=np.int16) + noise[..., None]
    np.clip(pixels, 0, 255, out=pixels)

    buf = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8), "RGB").save(buf, format="JPEG", quality=int(quality))
    return buf.getvalue()


def make_synthetic_jpegs(
    num_samples: int,
    image_size: tuple[int, int] = (500, 375),
    quality: int = 90,
    seed: int = 0,
) -> list[bytes]:
    """Make `num_samples` deterministic, natural-looking RGB JPEGs in memory.

    `image_size` is (width, height) in pixels; `quality` is the JPEG quality (1-100). The same
    arguments give the same bytes (for a given Pillow/libjpeg build), image `i` does not depend on
    `num_samples`, and a different `seed` gives different images. At the defaults each JPEG is
    about 40-80 KB (median ~57 KB) and takes ~5 ms to make.

    Raises `UsageError` for a negative `num_samples` or seed, a non-positive size, or a quality
    outside 1-100.
    """
    if int(num_samples) != num_samples or num_samples < 0:
        raise UsageError(f"number of samples {num_samples} is invalid; give an integer >= 0")
    width, height = _validate_image_args(image_size, quality, seed)
    return [_synthetic_jpeg(seed, i, width, height, quality) for i in range(int(num_samples))]


def default_cache_dir() -> Path:
    """Where loaderbench caches generated data: `$XDG_CACHE_HOME/loaderbench`, else
    `~/.cache/loaderbench`. Only computes the path; creates nothing."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "loaderbench"


def _cache_file(cache_dir: Path, num_samples: int, width: int, height: int, q: int, s: int) -> Path:
    name = f"synthetic-g{GENERATOR_VERSION}-n{num_samples}-{width}x{height}-q{q}-s{s}.jpegs"
    return cache_dir / name


# NOTE [ Synthetic JPEG cache format ]
# Every measured config runs in a fresh process, and each would otherwise spend ~2.5 s making the
# same 512 JPEGs. They are cached in one file per (generator version, count, size, quality, seed):
#   8 bytes  magic b"LBJPEG01"
#   8 bytes  little-endian unsigned length N of the header
#   N bytes  UTF-8 JSON header: {"format", "generator", "num_samples", "image_size", "quality",
#            "seed", "lengths": [...], "crc32"}  (crc32 of the payload)
#   payload  the JPEGs, concatenated in index order
# No pickle. The file is written to a temporary name in the same folder and moved into place with
# os.replace, so a reader sees either no file or a whole one, even with several processes racing
# (they all write the same bytes). A file that is truncated, has a wrong header, or fails the
# CRC is ignored and rewritten. Reading 30 MB and checking its CRC takes ~20-30 ms.


def _read_cache(
    path: Path, num_samples: int, width: int, height: int, quality: int, seed: int
) -> list[bytes] | None:
    """The cached JPEGs, or None when the file is missing, unreadable, partial or corrupt."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        if data[:8] != _CACHE_MAGIC:
            return None
        header_len = int.from_bytes(data[8:16], "little")
        header = json.loads(data[16 : 16 + header_len].decode("utf-8"))
        lengths = [int(n) for n in header["lengths"]]
        expected = {
            "format": _CACHE_FORMAT,
            "generator": GENERATOR_VERSION,
            "num_samples": num_samples,
            "image_size": [width, height],
            "quality": quality,
            "seed": seed,
        }
        if any(header.get(k) != v for k, v in expected.items()) or len(lengths) != num_samples:
            return None
        payload = memoryview(data)[16 + header_len :]
        if len(payload) != sum(lengths) or zlib.crc32(payload) != int(header["crc32"]):
            return None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    out: list[bytes] = []
    pos = 0
    for n in lengths:
        out.append(bytes(payload[pos : pos + n]))
        pos += n
    return out


def _write_cache(path: Path, jpegs: list[bytes], width: int, height: int, quality: int, seed: int) -> None:
    """Write the cache file atomically (tmp file + os.replace). Raises OSError on failure."""
    payload = b"".join(jpegs)
    header = json.dumps(
        {
            "format": _CACHE_FORMAT,
            "generator": GENERATOR_VERSION,
            "num_samples": len(jpegs),
            "image_size": [width, height],
            "quality": quality,
            "seed": seed,
            "lengths": [len(j) for j in jpegs],
            "crc32": zlib.crc32(payload),
        },
        separators=(",", ":"),
    ).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_CACHE_MAGIC)
            f.write(len(header).to_bytes(8, "little"))
            f.write(header)
            f.write(payload)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; the cache is as readable as any file
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_synthetic_jpegs(
    num_samples: int,
    image_size: tuple[int, int] = (500, 375),
    quality: int = 90,
    seed: int = 0,
    *,
    cache_dir: Path | None = None,
) -> list[bytes]:
    """`make_synthetic_jpegs(...)`, read from / written to an on-disk cache.

    The cache lives in `cache_dir` (default `default_cache_dir()`), one file per argument set
    (see the NOTE on the cache format). A missing, partial or corrupt file is regenerated and
    rewritten; when the folder cannot be written the JPEGs are made in memory only. A hit takes
    milliseconds (~25 ms for 512 images), a miss ~5 ms per image.

    Raises `UsageError` for invalid arguments, as `make_synthetic_jpegs` does.
    """
    if int(num_samples) != num_samples or num_samples < 0:
        raise UsageError(f"number of samples {num_samples} is invalid; give an integer >= 0")
    width, height = _validate_image_args(image_size, quality, seed)
    n, q, s = int(num_samples), int(quality), int(seed)
    path = _cache_file(Path(cache_dir) if cache_dir else default_cache_dir(), n, width, height, q, s)
    cached = _read_cache(path, n, width, height, q, s)
    if cached is not None:
        return cached
    jpegs = make_synthetic_jpegs(n, (width, height), q, s)
    try:
        _write_cache(path, jpegs, width, height, q, s)
    except OSError:
        pass  # unwritable or full cache location: the JPEGs are still good, just not cached
    return jpegs


class SyntheticJPEGDataset(Dataset[tuple[Any, int]]):
    """Map-style dataset over in-memory JPEG bytes; every item really decodes its JPEG, with the
    `decoder` of the `--decoder` axis (workload/decode.py).

    `dataset[i]` returns `(image, label)`, `label` the int `i % num_classes`:
    - `pil` (default): decodes `jpegs[i]` with PIL (to RGB) and applies `transform` (default
      `imagenet_train_transform()`);
    - `torchvision`: decodes it with `torchvision.io.decode_jpeg` (RGB) and applies `transform`
      (default `decode.tensor_train_transform()`);
    - `nvjpeg`: does not decode: `image` is the JPEG's bytes, a 1-D uint8 tensor, for
      `decode.EncodedCollate` and `decode.GPUDecode`, which crops the decoded batch on the GPU
      (`decode.BatchRandomResizedCrop`); `transform` is kept (default
      `tensor_train_transform()`) and not applied here.
    With the default transforms `image` is a `torch.uint8` tensor of shape `(3, 224, 224)` for
    `pil` and `torchvision`. Raises `UsageError` when `num_classes < 1` or for an unknown
    decoder; `IndexError` for an index out of range.
    """

    def __init__(
        self,
        jpegs: list[bytes],
        num_classes: int = NUM_CLASSES,
        transform: Callable[[Any], Any] | None = None,
        decoder: str = "pil",
    ) -> None:
        if num_classes < 1:
            raise UsageError(f"num_classes {num_classes} is invalid; give an integer >= 1")
        if decoder not in DECODERS:
            raise UsageError(f"decoder {decoder!r} is unknown; use one of {', '.join(DECODERS)}")
        self.jpegs = jpegs
        self.num_classes = int(num_classes)
        self.decoder = decoder
        self.transform: Callable[[Any], Any]
        if decoder == "pil":
            self.transform = transform if transform is not None else imagenet_train_transform()
            self._encoded: list[torch.Tensor] = []
        else:
            self.transform = transform if transform is not None else decode.tensor_train_transform()
            self._encoded = [decode.encoded_bytes(j) for j in jpegs]

    def __len__(self) -> int:
        return len(self.jpegs)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        label = index % self.num_classes
        if self.decoder == "nvjpeg":
            return self._encoded[index], label
        if self.decoder == "torchvision":
            return self.transform(decode.decode_jpeg_cpu(self._encoded[index])), label
        data = self.jpegs[index]
        with Image.open(io.BytesIO(data)) as im:
            rgb = im.convert("RGB")  # forces the full decode
        return self.transform(rgb), label


def with_decoder(dataset: Any, decoder: str) -> Any:
    """`dataset` decoding with `decoder` (the `--decoder` axis): a `SyntheticJPEGDataset` over the
    same JPEGs with that decoder (the dataset itself when it already has it). Any other dataset
    only with `pil`, its own decoding: UsageError otherwise (the config refuses it first)."""
    if isinstance(dataset, SyntheticJPEGDataset):
        if dataset.decoder == decoder:
            return dataset
        return SyntheticJPEGDataset(dataset.jpegs, dataset.num_classes, decoder=decoder)
    if decoder != "pil":
        raise UsageError(f"--decoder {decoder} applies to the synthetic dataset only; drop --decoder")
    return dataset


# --------------------------------------------------------------------------------------------
# Tensors of known cost
# --------------------------------------------------------------------------------------------

# NOTE [ Cost of a TensorCostDataset item ]
# `cpu_ms` stands for CPU work (decode, augment) and must behave like it: it is spent in a busy
# loop on `time.thread_time()`, the CPU time of the calling thread, not on the wall clock. When
# more workers than cores compete, a wall-clock spin would still "finish" in cpu_ms and show
# throughput growing past the number of cores; a CPU-time spin takes longer in wall time exactly
# as real decoding does, so throughput saturates at cores / cpu_ms, which is what the sweep must
# be able to find. The clock starts when the item is asked for, so the copy of the sample counts
# inside the budget (as long as it is cheaper than cpu_ms). `io_ms` stands for storage latency:
# `time.sleep`, which frees the core (Linux overshoots a sleep by ~0.05-0.1 ms).
# The sample is a copy of one tensor made at construction (allocating and filling a fresh random
# tensor per item would add untracked cost), with its first element set to the index so items
# differ and can be traced. The copy is made by numpy, not `Tensor.clone()`: in the main process
# (num_workers=0) torch splits a copy of a large tensor over its intra-op OpenMP threads, which
# then spin for a while after the copy and take the core the cost loop runs on; measured on 2
# cores, a 3x224x224 item of 2 + 3 ms then took 11-16 ms. (Workers run with one torch thread.)


class TensorCostDataset(Dataset[tuple[torch.Tensor, int]]):
    """Map-style dataset of `num_samples` float32 tensors that each cost a known amount of time.

    `dataset[i]` burns `cpu_ms` milliseconds of CPU time in the calling thread (a busy loop, see
    the NOTE), then sleeps `io_ms` milliseconds, and returns `(sample, label)`: `sample` is a
    `torch.float32` tensor of shape `sample_shape` (uniform [0, 1) values from `seed`, first element
    set to `i`), `label` the int `i % 1000`. One item costs cpu_ms + io_ms of wall time on an idle
    core (within a few percent).

    Raises `UsageError` for `num_samples < 1`, a shape with a non-positive dimension, or a negative
    cost; `IndexError` for an index out of range.
    """

    def __init__(
        self,
        num_samples: int,
        sample_shape: tuple[int, ...],
        cpu_ms: float,
        io_ms: float,
        seed: int = 0,
    ) -> None:
        if int(num_samples) != num_samples or num_samples < 1:
            raise UsageError(f"number of samples {num_samples} is invalid; give an integer >= 1")
        shape = tuple(sample_shape)
        if not shape or any(int(d) != d or d < 1 for d in shape):
            raise UsageError(f"sample shape {shape} is invalid; give positive integers (e.g. 3 64 64)")
        if cpu_ms < 0 or io_ms < 0:
            raise UsageError(f"cpu_ms={cpu_ms} / io_ms={io_ms} is invalid; give costs >= 0 milliseconds")
        self.num_samples = int(num_samples)
        self.sample_shape = tuple(int(d) for d in shape)
        self.cpu_ms = float(cpu_ms)
        self.io_ms = float(io_ms)
        gen = torch.Generator().manual_seed(int(seed))
        self._base = torch.rand(self.sample_shape, generator=gen, dtype=torch.float32)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        start_cpu_s = time.thread_time()
        if index < 0:
            index += self.num_samples
        if not 0 <= index < self.num_samples:
            raise IndexError(f"index {index} out of range for {self.num_samples} samples")
        sample = torch.from_numpy(self._base.numpy().copy())  # single-threaded: see the NOTE
        sample.view(-1)[0] = float(index)
        if self.cpu_ms > 0:
            end_cpu_s = start_cpu_s + self.cpu_ms / 1000.0
            while time.thread_time() < end_cpu_s:
                pass
        if self.io_ms > 0:
            time.sleep(self.io_ms / 1000.0)
        return sample, index % NUM_CLASSES


# --------------------------------------------------------------------------------------------
# Image folders
# --------------------------------------------------------------------------------------------


def _image_extensions() -> tuple[str, ...]:
    from torchvision.datasets.folder import IMG_EXTENSIONS

    return tuple(IMG_EXTENSIONS)


def _one_line(text: object) -> str:
    """Collapse whitespace (newlines included) so an error message stays on one line."""
    return " ".join(str(text).split())


def _name_list(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


class NamedImageLoader:
    """torchvision's default image loader (PIL, RGB) whose errors name the file and its sample
    index: a corrupt JPEG otherwise fails a config with "OSError: Truncated File Read" alone.
    `samples` is the folder's (path, class) list, set once the folder is built."""

    def __init__(self) -> None:
        self.samples: list[tuple[str, int]] = []

    def __call__(self, path: str) -> Any:
        from torchvision.datasets.folder import default_loader

        try:
            return default_loader(path)
        except Exception as e:
            index = next((i for i, (p, _) in enumerate(self.samples) if p == path), None)
            raise RuntimeError(
                f"cannot load sample {index if index is not None else '?'} ({path}): {type(e).__name__}: "
                f"{_one_line(e)}; fix or remove the file"
            ) from e


def load_image_folder(path: str) -> torchvision.datasets.ImageFolder:
    """Open `path` as a torchvision `ImageFolder` (PATH/CLASS/IMAGE) with the ImageNet transform.

    Items are `(image, class_index)` with `image` a `torch.uint8` tensor of shape `(3, 224, 224)`
    (see `imagenet_train_transform`). Raises `DataError` naming the path when it does not exist,
    is not a folder, is empty, has no class sub-folders, or has a class folder without image files
    (the message lists the valid extensions).
    """
    from torchvision.datasets import ImageFolder

    root = Path(path)
    make_hint = f"create one with `loaderbench make-data {path}` or point --data at a folder"
    layout = "the layout is PATH/CLASS_NAME/IMAGE.jpg"
    if not root.exists():
        raise DataError(f"dataset folder {path} does not exist; {make_hint}")
    if not root.is_dir():
        raise DataError(
            f"dataset path {path} is not a folder; point --data at a folder of class "
            "sub-folders (PATH/CLASS_NAME/IMAGE.jpg)"
        )
    try:
        entries = list(os.scandir(root))
    except OSError as e:
        raise DataError(f"cannot read dataset folder {path}: {_one_line(e.strerror or e)}") from e
    if not entries:
        raise DataError(f"dataset folder {path} is empty; {make_hint}")
    class_dirs = sorted(e.name for e in entries if e.is_dir())
    if not class_dirs:
        raise DataError(
            f"dataset folder {path} has no class sub-folders, only files; {layout} "
            "(move the images into one sub-folder per class)"
        )
    extensions = _image_extensions()
    loader = NamedImageLoader()
    try:
        folder = ImageFolder(str(root), transform=imagenet_train_transform(), allow_empty=True, loader=loader)
    except (OSError, RuntimeError, ValueError) as e:
        raise DataError(f"cannot open dataset folder {path} as an ImageFolder: {_one_line(e)}") from e
    loader.samples = folder.samples
    counts = [0] * len(folder.classes)
    for target in folder.targets:
        counts[target] += 1
    empty = [name for name, n in zip(folder.classes, counts) if n == 0]
    if empty:
        which = "the" if len(empty) == len(folder.classes) else f"{len(empty)} of the"
        raise DataError(
            f"{which} class folders of {path} contain no image files ({_name_list(empty)}); "
            f"valid extensions are {' '.join(extensions)} ({layout}; remove empty class folders)"
        )
    return folder


# --------------------------------------------------------------------------------------------
# User factories
# --------------------------------------------------------------------------------------------


def load_callable(ref: str, what: str, flag: str) -> Any:
    """Import `module:attr` (attr may be dotted) and check that it is callable; `what` names an
    example attribute and `flag` the option, for the messages. The current directory is put on
    `sys.path` first. Raises DataError with a one-line message."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise DataError(f"{flag} {ref!r} is not MODULE:NAME; write it as e.g. mypkg.data:{what}")
    module_name, attr = module_name.strip(), attr.strip()
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        missing = getattr(e, "name", None)
        if missing and (missing == module_name or module_name.startswith(missing + ".")):
            raise DataError(
                f"cannot import module {module_name!r} for {flag} {ref}: {_one_line(e)}; run "
                "from the folder that holds it or add that folder to PYTHONPATH"
            ) from e
        # the module was found but an import inside it failed (a missing dependency, ...)
        raise DataError(
            f"importing module {module_name!r} for {flag} {ref} failed with "
            f"{type(e).__name__}: {_one_line(e)}; install what it needs or fix the module"
        ) from e
    except Exception as e:  # the module itself raised (SyntaxError, RuntimeError, ...)
        raise DataError(
            f"importing module {module_name!r} for {flag} {ref} failed with "
            f"{type(e).__name__}: {_one_line(e)}; fix the module"
        ) from e
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise DataError(
                f"module {module_name!r} has no attribute {attr!r} (from {flag} {ref}); check the "
                "name after the colon"
            ) from e
    if not callable(obj):
        raise DataError(f"{ref} ({flag}) is a {type(obj).__name__}, not a callable; name a function or class")
    return obj


def _is_dataset(obj: object) -> bool:
    """A DataLoader accepts an IterableDataset or any object with `__getitem__` and `__len__`
    (a list of samples is fine); text and bytes also have both, but are a mistake."""
    if isinstance(obj, IterableDataset):
        return True
    if isinstance(obj, (str, bytes, bytearray)):
        return False
    return hasattr(obj, "__getitem__") and hasattr(obj, "__len__")


def load_factory(factory: str, kwargs: dict[str, Any]) -> Dataset[Any]:
    """Import `factory` ("module:callable", the attribute may be dotted) and call it with `kwargs`.

    The current directory is put first on `sys.path` so a user's `mydata.py` next to the config
    imports. Returns the dataset the factory made: a map-style dataset (has `__getitem__` and
    `__len__`) or a `torch.utils.data.IterableDataset`. Raises `DataError` when the reference is
    malformed (no colon), the module cannot be imported, the attribute is missing or not callable,
    the factory raises (type and message are shown), or it returns something that is not a dataset
    (its type is named).
    """
    fn = load_callable(factory, "make_dataset", "--dataset")
    try:
        dataset = fn(**kwargs)
    except Exception as e:
        raise DataError(
            f"--dataset {factory}: the factory raised {type(e).__name__}: {_one_line(e)}; check the "
            "factory and its kwargs"
        ) from e
    if not _is_dataset(dataset):
        t = type(dataset)
        raise DataError(
            f"--dataset {factory}: the factory returned {t.__module__}.{t.__qualname__}, not a dataset; "
            "return a map-style dataset (with __getitem__ and __len__) or an IterableDataset"
        )
    return cast(Dataset[Any], dataset)


def build_collate_fn(spec: DatasetSpec) -> Callable[[list[Any]], Any] | None:
    """The collate function named by `spec.collate_fn` ("module:name"), or None for the
    DataLoader default. Raises `DataError` as `load_factory` does for a malformed reference, a
    failing import, a missing attribute or one that is not callable."""
    if not spec.collate_fn:
        return None
    return cast(Callable[[list[Any]], Any], load_callable(spec.collate_fn, "collate", "--collate-fn"))


# --------------------------------------------------------------------------------------------
# Dispatch and fingerprint
# --------------------------------------------------------------------------------------------


def build_synthetic(spec: DatasetSpec, cache_dir: Path | None) -> Dataset[Any]:
    """`SyntheticJPEGDataset` over `spec.num_samples` JPEGs (cached in `cache_dir`, default
    `default_cache_dir()`); items `(uint8 (3, 224, 224), int)`."""
    jpegs = load_synthetic_jpegs(spec.num_samples, spec.image_size, spec.jpeg_quality, spec.seed, cache_dir=cache_dir)
    return SyntheticJPEGDataset(jpegs)


def build_folder(spec: DatasetSpec, cache_dir: Path | None) -> Dataset[Any]:
    """`load_image_folder(spec.data_path)`; items `(uint8 (3, 224, 224), int)`."""
    if len(spec.data_roots) != 1:
        raise DataError("dataset kind 'folder' needs one folder; pass --data PATH once")
    folder: Dataset[Any] = load_image_folder(spec.data_roots[0])
    return folder


def build_tensor(spec: DatasetSpec, cache_dir: Path | None) -> Dataset[Any]:
    """`TensorCostDataset`; items `(float32 spec.sample_shape, int)`."""
    return TensorCostDataset(spec.num_samples, spec.sample_shape, spec.cpu_ms, spec.io_ms, seed=spec.seed)


def build_import(spec: DatasetSpec, cache_dir: Path | None) -> Dataset[Any]:
    """`load_factory(spec.factory, spec.kwargs)`; items are whatever the factory's are. A factory
    with a `root` parameter that the kwargs do not set gets the --data path (a list when
    several were given)."""
    if not spec.factory:
        raise DataError("dataset kind 'import' needs a factory; pass --dataset MODULE:FACTORY")
    kwargs = dict(spec.kwargs)
    if spec.data_roots and "root" not in kwargs and takes_root(spec.factory):
        kwargs["root"] = spec.data_path
    return load_factory(spec.factory, kwargs)


def takes_root(factory: str) -> bool:
    """Whether the callable `factory` ("module:name") names a `root` parameter (False when it
    cannot be inspected; load_factory then reports any import error)."""
    import inspect

    try:
        return "root" in inspect.signature(load_callable(factory, "make_dataset", "--dataset")).parameters
    except (DataError, TypeError, ValueError):  # load_factory reports a bad reference clearly
        return False


def build_dataset(spec: DatasetSpec, *, cache_dir: Path | None = None) -> Dataset[Any]:
    """Build the dataset `spec` describes with its kind's builder (kinds.KINDS).

    Raises `DataError` for an unknown kind, a missing `data_path`/`factory`, or anything the
    per-kind builders raise; `UsageError` for invalid sizes or counts.
    """
    kind = KINDS.get(spec.kind)
    if kind is None:
        raise DataError(f"unknown dataset kind {spec.kind!r}; use one of {', '.join(KINDS)}")
    module, _, name = kind.builder.partition(":")
    builder: Callable[[DatasetSpec, Path | None], Dataset[Any]] = getattr(importlib.import_module(module), name)
    return builder(spec, cache_dir)


# --------------------------------------------------------------------------------------------
# make-data
# --------------------------------------------------------------------------------------------

_GENERATED_FILE = re.compile(r"img_\d{5,}\.jpg")
_GENERATED_DIR = re.compile(r"class_\d{3,}")


def _remove_generated(root: Path) -> None:
    """Remove files a previous `make_image_folder` wrote (class_NNN/img_NNNNN.jpg) and the class
    folders they leave empty; anything else is left alone."""
    for class_dir in root.iterdir():
        if not (class_dir.is_dir() and _GENERATED_DIR.fullmatch(class_dir.name)):
            continue
        for f in class_dir.iterdir():
            if f.is_file() and _GENERATED_FILE.fullmatch(f.name):
                f.unlink()
        if not any(class_dir.iterdir()):
            class_dir.rmdir()


def make_image_folder(
    path: Path,
    *,
    images: int,
    size: tuple[int, int],
    classes: int,
    quality: int = 90,
    seed: int = 0,
    force: bool = False,
) -> dict[str, int]:
    """Write an ImageFolder of synthetic JPEGs: `path/class_XXX/img_XXXXX.jpg`.

    Image `i` is `make_synthetic_jpegs(..., seed=seed)[i]` (deterministic), of `size` (width,
    height) pixels at JPEG `quality`, in class `i % classes` (round-robin). Returns
    `{"images": count, "classes": count, "bytes": total JPEG bytes written}`. Takes ~5 ms per
    500x375 image.

    A non-empty `path` is refused unless `force`; with `force`, images a previous run wrote
    (class_NNN/img_NNNNN.jpg) are removed first and other files are left alone.
    Raises `UsageError` unless images > 0, classes > 0, classes <= images, size positive and
    quality 1-100; `DataError` naming the path when it is non-empty without `force`, is a file, or
    cannot be written.
    """
    if int(images) != images or images < 1:
        raise UsageError(f"--images {images} is invalid; give a number of images >= 1")
    if int(classes) != classes or classes < 1:
        raise UsageError(f"--classes {classes} is invalid; give a number of classes >= 1")
    if classes > images:
        raise UsageError(
            f"--classes {classes} is more than --images {images}; every class needs an image, so "
            "give at most as many classes as images"
        )
    width, height = _validate_image_args(size, quality, seed)
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise DataError(f"{root} exists and is not a folder; choose another path")
    try:
        if root.is_dir() and any(root.iterdir()):
            if not force:
                raise DataError(
                    f"folder {root} is not empty; pass --force to overwrite loaderbench's images "
                    "there, or choose an empty or new path"
                )
            _remove_generated(root)
        root.mkdir(parents=True, exist_ok=True)
        class_dirs = [root / f"class_{c:03d}" for c in range(int(classes))]
        for d in class_dirs:
            d.mkdir(exist_ok=True)
        total_bytes = 0
        for i in range(int(images)):
            data = _synthetic_jpeg(int(seed), i, width, height, int(quality))
            (class_dirs[i % int(classes)] / f"img_{i:05d}.jpg").write_bytes(data)
            total_bytes += len(data)
    except OSError as e:
        where = e.filename if e.filename else root
        raise DataError(
            f"cannot write image folder {root} ({where}: {_one_line(e.strerror or e)}); choose a "
            "writable path with enough free space"
        ) from e
    return {"images": int(images), "classes": int(classes), "bytes": total_bytes}
