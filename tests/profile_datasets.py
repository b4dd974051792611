"""Datasets of known stage costs for the stage profile's tests (also `--dataset
tests.profile_datasets:NAME` for the CLI tests and benchmarks/profile_check.py)."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, IterableDataset
from torchvision import transforms
from torchvision.io import decode_jpeg


def spin_ms(ms: float) -> None:
    """Busy the calling thread for `ms` of wall time (ends on time whatever the load)."""
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


class Spin:
    """A transform costing `ms` of busy wall time."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def __call__(self, x: Any) -> Any:
        spin_ms(self.ms)
        return x


class Nap:
    """A transform that sleeps `ms`: wall time with almost no CPU (a wait)."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def __call__(self, x: Any) -> Any:
        time.sleep(self.ms / 1000.0)
        return x


class Crop2(Spin):
    """A second class, so three transforms have three names."""


def spin_cpu_ms(ms: float) -> None:
    """Busy the calling thread for `ms` of its own CPU time (however long that takes on a busy
    machine)."""
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass


class CpuSpin:
    """A transform costing `ms` of the thread's CPU time."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def __call__(self, x: Any) -> Any:
        spin_cpu_ms(self.ms)
        return x


class CpuCrop(CpuSpin):
    """A second CPU-spinning class."""


def jpeg_bytes(width: int = 800, height: int = 600, seed: int = 0, quality: int = 90) -> bytes:
    """A photo-like JPEG (smooth colour, texture, grain) of known size."""
    rng = np.random.default_rng(seed)
    base = Image.fromarray(rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8), "RGB").resize(
        (width, height), Image.Resampling.BICUBIC)
    pixels = np.asarray(base, dtype=np.int16) + rng.integers(-12, 13, size=(height, width, 1), dtype=np.int16)
    buf = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def write_padded_jpegs(folder: Path, count: int, size_bytes: int, *, same: bool = True, **kw: Any) -> list[Path]:
    """`count` files, each a JPEG followed by zeros up to `size_bytes` (reading the file is then a
    known cost, decoding the JPEG in it another). `same`: one JPEG in every file, so every sample
    costs the same whichever the profile draws (a reference over all files then times what the
    profile's samples cost; different images decode in times up to ~10% apart)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        data = jpeg_bytes(seed=0 if same else i, **kw)
        p = folder / f"s{i:03d}.bin"
        p.write_bytes(data + bytes(max(0, size_bytes - len(data))))
        paths.append(p)
    return paths


def read_file(path: Path, buf: bytearray) -> memoryview:
    """The file's bytes, read into `buf` (kept by the caller: the read is then a copy from the
    page cache, not also a fresh 8 MB allocation whose cost depends on the allocator's state)."""
    with open(path, "rb") as f:
        n = f.readinto(buf)
    return memoryview(buf)[:n]


def decode(data: bytes | memoryview) -> Image.Image:
    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGB")


class KnownCost(Dataset):
    """Each sample: read a padded file (read), decode the JPEG in it with PIL (decode), then
    three transforms of a torchvision Compose: a spin of a ms, a sleep of b ms, a spin of c ms
    (`Spin`, `Nap`, `Crop2`: spins of wall time; with `cpu`: `CpuSpin`, `Nap`, `CpuCrop`, spins of
    the thread's CPU time)."""

    def __init__(self, paths: list[Path], ms: tuple[float, float, float] = (2.0, 4.0, 6.0), *,
                 cpu: bool = False) -> None:
        self.paths = paths
        # where each file's JPEG ends (its EOI marker): only that part is decoded
        self.lengths = [p.read_bytes().rfind(b"\xff\xd9") + 2 for p in paths]
        self.buffer = bytearray(max(p.stat().st_size for p in paths))
        first, last = (CpuSpin, CpuCrop) if cpu else (Spin, Crop2)
        self.transform = transforms.Compose([first(ms[0]), Nap(ms[1]), last(ms[2])])

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Any:
        img = decode(read_file(self.paths[i], self.buffer)[: self.lengths[i]])
        img = self.transform(img)
        return torch.zeros(4), i


class PlainUser(Dataset):
    """A user's dataset with no Compose and no decoder: its cost is in `featurize`, a Python loop."""

    def __init__(self, n: int = 64, work: int = 20_000) -> None:
        self.n, self.work = n, work

    def __len__(self) -> int:
        return self.n

    def featurize(self, i: int) -> float:
        acc = 0.0
        for k in range(self.work):
            acc += (k * i) % 7
        return acc

    def __getitem__(self, i: int) -> Any:
        x = self.featurize(i)
        return torch.tensor([x, float(i)])


def make_plain_user(n: int = 64, work: int = 20_000) -> Dataset:
    return PlainUser(n, work)


class TorchvisionDecode(Dataset):
    """JPEG bytes decoded with `decode_jpeg` imported by name, then a v2 Compose."""

    def __init__(self, n: int = 16) -> None:
        from torchvision.transforms import v2

        self.data = [torch.frombuffer(bytearray(jpeg_bytes(320, 240, seed=i)), dtype=torch.uint8) for i in range(n)]
        self.transform = v2.Compose([v2.RandomResizedCrop(64, antialias=True), v2.RandomHorizontalFlip(),
                                     v2.Compose([v2.ToDtype(torch.float32, scale=True)])])

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        return self.transform(decode_jpeg(self.data[i])), i


def make_torchvision_decode(n: int = 16) -> Dataset:
    return TorchvisionDecode(n)


class Stream(IterableDataset):
    """An IterableDataset whose items spin 1 ms of CPU in a Compose."""

    def __init__(self, n: int = 64) -> None:
        self.n = n
        self.transform = transforms.Compose([CpuSpin(1.0)])

    def __iter__(self) -> Any:
        for i in range(self.n):
            yield self.transform(torch.full((4,), float(i)))


def make_stream(n: int = 64) -> IterableDataset:
    return Stream(n)


class Broken(Dataset):
    """Raises on every item."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> Any:
        raise ValueError(f"sample {i} is corrupt")


def make_broken() -> Dataset:
    return Broken()


class TwoStages(Dataset):
    """Each sample: a small tensor through a torchvision Compose of two CPU spins of known cost,
    `CpuSpin(a_ms)` then `CpuCrop(b_ms)` (the thread's CPU time, so other load stretches their
    wall time but not their work): what `--what-if stage=NAME:F` is checked against, with the
    same dataset made with that stage F times cheaper. With `cpu` False, spins of wall time
    (`Spin`, `Crop2`): their cost does not stretch with other load on the machine."""

    def __init__(self, n: int, a_ms: float, b_ms: float, cpu: bool = True) -> None:
        self.n = n
        first, last = (CpuSpin, CpuCrop) if cpu else (Spin, Crop2)
        self.transform = transforms.Compose([first(a_ms), last(b_ms)])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return self.transform(torch.full((8,), float(i))), i % 10


def make_two_stages(a_ms: float = 2.0, b_ms: float = 6.0, n: int = 100_000, cpu: bool = True) -> Dataset:
    return TwoStages(n, a_ms, b_ms, cpu)


class ArrowLike(Dataset):
    """A column store's rows (as a Hugging Face dataset over Arrow): one query costs `fixed_ms`
    (a sleep: formatting, slicing, conversion) plus `per_row_ms` per row; `__getitem__` takes an
    index (one row) or a list of indices (one query for all), and there is no `__getitems__`, so
    a DataLoader pays the fixed cost once per row."""

    def __init__(self, n: int, fixed_ms: float, per_row_ms: float) -> None:
        self.n, self.fixed_s, self.per_row_s = n, fixed_ms / 1000.0, per_row_ms / 1000.0

    def __len__(self) -> int:
        return self.n

    def _query(self, rows: list[int]) -> list[dict[str, Any]]:
        time.sleep(self.fixed_s + self.per_row_s * len(rows))
        return [{"input_ids": torch.full((128,), r % 1000), "label": r % 2} for r in rows]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, list):
            return self._query(key)
        return self._query([int(key)])[0]


class ArrowLikeBatched(ArrowLike):
    """The same with `__getitems__`: the DataLoader fetches a batch in one query."""

    def __getitems__(self, keys: list[int]) -> list[dict[str, Any]]:
        return self._query(list(keys))


def make_arrow_like(fixed_ms: float = 8.0, per_row_ms: float = 0.05, n: int = 4096) -> Dataset:
    return ArrowLike(n, fixed_ms, per_row_ms)


def make_arrow_like_batched(fixed_ms: float = 8.0, per_row_ms: float = 0.05, n: int = 4096) -> Dataset:
    return ArrowLikeBatched(n, fixed_ms, per_row_ms)
