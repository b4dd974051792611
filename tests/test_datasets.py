"""Tests of loaderbench.workload.datasets: synthetic JPEGs and their cache, cost datasets, folders,
factories, fingerprints and make-data. No DataLoader workers; the whole file runs in seconds."""

from __future__ import annotations

import io
import statistics
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from torch.utils.data import IterableDataset

from loaderbench.errors import DataError, UsageError
from loaderbench.model import DatasetSpec
from loaderbench.workload import datasets
from loaderbench.workload.datasets import (
    IMAGE_SIZE,
    SyntheticJPEGDataset,
    TensorCostDataset,
    build_collate_fn,
    build_dataset,
    load_factory,
    load_image_folder,
    load_synthetic_jpegs,
    make_image_folder,
    make_synthetic_jpegs,
)

SMALL = (64, 48)
UserModule = Callable[[str], str]
Damage = Callable[[bytes], bytes]


def _assert_one_line(err: pytest.ExceptionInfo[BaseException], *needles: str) -> str:
    msg = str(err.value)
    assert "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    return msg


# --------------------------------------------------------------------------------------------
# Synthetic JPEGs
# --------------------------------------------------------------------------------------------


def test_synthetic_jpegs_are_deterministic_per_seed() -> None:
    a = make_synthetic_jpegs(4, SMALL, seed=7)
    b = make_synthetic_jpegs(4, SMALL, seed=7)
    c = make_synthetic_jpegs(4, SMALL, seed=8)
    assert a == b
    assert all(x != y for x, y in zip(a, c))
    assert len(set(a)) == 4  # images within a set differ too
    # image i does not depend on how many are made
    assert make_synthetic_jpegs(2, SMALL, seed=7) == a[:2]


def test_synthetic_jpegs_are_valid_rgb_jpegs_of_the_requested_size() -> None:
    for data in make_synthetic_jpegs(3, (120, 80), quality=75, seed=1):
        with Image.open(io.BytesIO(data)) as im:
            assert im.format == "JPEG"
            assert im.mode == "RGB"
            assert im.size == (120, 80)


def test_synthetic_jpeg_sizes_look_like_imagenet_photos() -> None:
    sizes = [len(j) for j in make_synthetic_jpegs(40, (500, 375), quality=90, seed=0)]
    median_kb = statistics.median(sizes) / 1000
    assert 40 <= median_kb <= 80, median_kb
    # content varies between images, as in a real folder, but nothing degenerate
    assert max(sizes) > 1.1 * min(sizes)
    assert min(sizes) > 20_000 and max(sizes) < 150_000


def test_synthetic_jpeg_generation_is_fast() -> None:
    start = time.perf_counter()
    make_synthetic_jpegs(20, (500, 375))
    per_image_s = (time.perf_counter() - start) / 20
    assert per_image_s < 0.05  # ~5 ms on an idle core; generous for a shared CI machine


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_samples": -1},
        {"num_samples": 2, "image_size": (0, 10)},
        {"num_samples": 2, "image_size": (10,)},
        {"num_samples": 2, "quality": 0},
        {"num_samples": 2, "quality": 101},
        {"num_samples": 2, "seed": -3},
    ],
)
def test_synthetic_jpeg_bad_arguments_are_usage_errors(kwargs: dict) -> None:
    with pytest.raises(UsageError) as err:
        make_synthetic_jpegs(**kwargs)
    _assert_one_line(err)


def test_synthetic_dataset_decodes_to_uint8_chw_224() -> None:
    ds = SyntheticJPEGDataset(make_synthetic_jpegs(3, (500, 375)), num_classes=2)
    assert len(ds) == 3
    for i in range(3):
        image, label = ds[i]
        assert isinstance(image, torch.Tensor)
        assert image.dtype == torch.uint8
        assert image.shape == (3, IMAGE_SIZE, IMAGE_SIZE)
        assert label == i % 2 and isinstance(label, int)
    with pytest.raises(IndexError):
        ds[3]


def test_synthetic_dataset_uses_a_given_transform() -> None:
    ds = SyntheticJPEGDataset(make_synthetic_jpegs(1, SMALL), transform=lambda im: im.size)
    assert ds[0] == (SMALL, 0)


# --------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------


@pytest.fixture
def count_generation(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of make_synthetic_jpegs made by the cache layer."""
    calls: list[int] = []
    real = datasets.make_synthetic_jpegs

    def counting(*args: Any, **kwargs: Any) -> list[bytes]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "make_synthetic_jpegs", counting)
    return calls


def _cache_files(cache_dir: Path) -> list[Path]:
    return sorted(p for p in cache_dir.iterdir() if not p.name.startswith("."))


def test_cache_round_trip(tmp_path: Path, count_generation: list[int]) -> None:
    first = load_synthetic_jpegs(5, SMALL, 90, 3, cache_dir=tmp_path)
    assert len(count_generation) == 1
    (cache_file,) = _cache_files(tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left
    second = load_synthetic_jpegs(5, SMALL, 90, 3, cache_dir=tmp_path)
    assert len(count_generation) == 1  # read from the cache, not regenerated
    assert second == first == make_synthetic_jpegs(5, SMALL, 90, 3)
    # another key is another file
    load_synthetic_jpegs(5, SMALL, 90, 4, cache_dir=tmp_path)
    assert len(count_generation) == 2
    assert len(_cache_files(tmp_path)) == 2
    assert cache_file.read_bytes()[:8] == b"LBJPEG01"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
        pytest.param(lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), id="payload-bit-flip"),
        pytest.param(lambda b: b"XXXXXXXX" + b[8:], id="bad-magic"),
        pytest.param(lambda b: b[:16] + b"{not json" + b[25:], id="bad-header"),
        pytest.param(lambda b: b"", id="empty"),
    ],
)
def test_corrupt_cache_is_regenerated(tmp_path: Path, count_generation: list[int], damage: Damage) -> None:
    good = load_synthetic_jpegs(4, SMALL, cache_dir=tmp_path)
    (cache_file,) = _cache_files(tmp_path)
    intact = cache_file.read_bytes()
    cache_file.write_bytes(damage(intact))
    again = load_synthetic_jpegs(4, SMALL, cache_dir=tmp_path)
    assert len(count_generation) == 2
    assert again == good
    assert cache_file.read_bytes() == intact  # rewritten whole
    load_synthetic_jpegs(4, SMALL, cache_dir=tmp_path)
    assert len(count_generation) == 2


def test_unwritable_cache_dir_falls_back_to_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    jpegs = load_synthetic_jpegs(3, SMALL, cache_dir=blocker / "cache")
    assert jpegs == make_synthetic_jpegs(3, SMALL)


def test_default_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert datasets.default_cache_dir() == tmp_path / "loaderbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert datasets.default_cache_dir() == Path.home() / ".cache" / "loaderbench"


def test_build_synthetic_dataset_uses_the_cache(tmp_path: Path, count_generation: list[int]) -> None:
    spec = DatasetSpec(kind="synthetic", num_samples=3, image_size=SMALL, seed=5)
    ds = build_dataset(spec, cache_dir=tmp_path)
    ds2 = build_dataset(spec, cache_dir=tmp_path)
    assert len(count_generation) == 1
    assert isinstance(ds, SyntheticJPEGDataset) and isinstance(ds2, SyntheticJPEGDataset)
    assert ds.jpegs == ds2.jpegs
    assert ds[0][0].shape == (3, IMAGE_SIZE, IMAGE_SIZE)


# --------------------------------------------------------------------------------------------
# TensorCostDataset
# --------------------------------------------------------------------------------------------


def _run_queue_wait_s() -> float:
    """Seconds this thread has spent runnable but waiting for a core (Linux schedstat), else 0."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _per_item_s(ds: TensorCostDataset, items: int = 60) -> tuple[float, float]:
    """(wall, thread CPU) seconds per item, from per-item timings.

    Other load on this shared 2-core machine can only make items slower. The time the thread
    waited for a core (where Linux reports it) is taken off the wall time, and the estimate is the
    10th percentile: every item costs the same, so it still fails for items that are consistently
    too cheap or too dear. Thread CPU time is immune to being descheduled: median.
    """
    walls, cpus = [], []
    for i in range(items):
        q0 = _run_queue_wait_s()
        w0, c0 = time.perf_counter(), time.thread_time()
        ds[i]
        w1, c1 = time.perf_counter(), time.thread_time()
        walls.append(w1 - w0 - (_run_queue_wait_s() - q0))
        cpus.append(c1 - c0)
    return statistics.quantiles(walls, n=10)[0], statistics.median(cpus)


def _assert_cost(ds: TensorCostDataset, wall_s: float, cpu_s: float, attempts: int = 3) -> None:
    """Per-item cost is `wall_s` of wall time and `cpu_s` of thread CPU time (+-25%).

    Measured up to `attempts` times: a machine busy enough to slow every item of one attempt is
    given another chance, while a cost that is wrong fails every attempt."""
    measured: list[tuple[float, float]] = []
    for _ in range(attempts):
        wall, cpu = _per_item_s(ds)
        measured.append((wall, cpu))
        if wall == pytest.approx(wall_s, rel=0.25) and cpu == pytest.approx(cpu_s, rel=0.25, abs=5e-4):
            return
    pytest.fail(f"expected ({wall_s}, {cpu_s}) s per item (wall, CPU) +-25%, measured {measured}")


@pytest.mark.parametrize("shape", [(3, 64, 64), (3, 224, 224)])
def test_tensor_cost_dataset_costs_what_it_says(shape: tuple[int, ...]) -> None:
    # a large sample once cost 2-3x too much: torch's multi-threaded clone left OpenMP threads
    # spinning on the core the cost loop needed
    _assert_cost(TensorCostDataset(100, shape, cpu_ms=2.0, io_ms=3.0), 0.005, 0.002)


def test_tensor_cost_dataset_cpu_only_and_io_only() -> None:
    _assert_cost(TensorCostDataset(100, (8,), cpu_ms=2.0, io_ms=0.0), 0.002, 0.002)
    _assert_cost(TensorCostDataset(100, (8,), cpu_ms=0.0, io_ms=3.0), 0.003, 0.0)  # sleeps


def test_cost_check_can_fail() -> None:
    class SleepsInsteadOfSpinning(TensorCostDataset):
        def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
            time.sleep((self.cpu_ms + self.io_ms) / 1000)
            return self._base, index

    with pytest.raises(pytest.fail.Exception):
        _assert_cost(SleepsInsteadOfSpinning(100, (8,), 2.0, 3.0), 0.005, 0.002, attempts=1)
    with pytest.raises(pytest.fail.Exception):
        _assert_cost(TensorCostDataset(100, (8,), 2.0, 3.0), 0.0035, 0.002, attempts=1)


def test_tensor_cost_dataset_items() -> None:
    ds = TensorCostDataset(10, (3, 4, 5), cpu_ms=0.0, io_ms=0.0, seed=1)
    assert len(ds) == 10
    x, y = ds[7]
    assert x.dtype == torch.float32 and x.shape == (3, 4, 5)
    assert y == 7
    assert x.view(-1)[0].item() == 7.0
    x[0, 0, 1] = 123.0  # the caller's copy: the dataset is unchanged
    assert ds[7][0][0, 0, 1].item() != 123.0
    assert torch.equal(ds[7][0], TensorCostDataset(10, (3, 4, 5), 0.0, 0.0, seed=1)[7][0])
    assert not torch.equal(ds[7][0], TensorCostDataset(10, (3, 4, 5), 0.0, 0.0, seed=2)[7][0])
    assert ds[-1][1] == 9
    with pytest.raises(IndexError):
        ds[10]


@pytest.mark.parametrize(
    "args",
    [
        (0, (3,), 0.0, 0.0),
        (4, (), 0.0, 0.0),
        (4, (3, 0), 0.0, 0.0),
        (4, (3,), -1.0, 0.0),
        (4, (3,), 0.0, -1.0),
    ],
)
def test_tensor_cost_dataset_bad_arguments(args: tuple) -> None:
    with pytest.raises(UsageError) as err:
        TensorCostDataset(*args)
    _assert_one_line(err)


# --------------------------------------------------------------------------------------------
# Image folders
# --------------------------------------------------------------------------------------------


def _write_jpeg(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(make_synthetic_jpegs(1, SMALL)[0])


def test_load_image_folder_reads_a_valid_folder(tmp_path: Path) -> None:
    _write_jpeg(tmp_path / "cat" / "a.jpg")
    _write_jpeg(tmp_path / "dog" / "b.JPEG")
    folder = load_image_folder(str(tmp_path))
    assert folder.classes == ["cat", "dog"]
    assert len(folder) == 2
    image, label = folder[1]
    assert image.dtype == torch.uint8 and image.shape == (3, IMAGE_SIZE, IMAGE_SIZE)
    assert label == 1


def test_folder_missing(tmp_path: Path) -> None:
    path = str(tmp_path / "nope")
    with pytest.raises(DataError) as err:
        load_image_folder(path)
    _assert_one_line(err, path, "does not exist", "make-data")


def test_folder_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file.jpg"
    _write_jpeg(path)
    with pytest.raises(DataError) as err:
        load_image_folder(str(path))
    _assert_one_line(err, str(path), "not a folder")


def test_folder_empty(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_image_folder(str(tmp_path))
    _assert_one_line(err, str(tmp_path), "empty")


def test_folder_without_class_subfolders(tmp_path: Path) -> None:
    _write_jpeg(tmp_path / "a.jpg")
    with pytest.raises(DataError) as err:
        load_image_folder(str(tmp_path))
    _assert_one_line(err, str(tmp_path), "no class sub-folders")


def test_folder_whose_classes_hold_no_images(tmp_path: Path) -> None:
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "notes.txt").write_text("hi")
    (tmp_path / "dog").mkdir()
    with pytest.raises(DataError) as err:
        load_image_folder(str(tmp_path))
    _assert_one_line(err, str(tmp_path), "no image files", ".jpg", ".png")


def test_folder_with_one_empty_class(tmp_path: Path) -> None:
    _write_jpeg(tmp_path / "cat" / "a.jpg")
    (tmp_path / "dog").mkdir()
    with pytest.raises(DataError) as err:
        load_image_folder(str(tmp_path))
    _assert_one_line(err, str(tmp_path), "1 of the class folders", "dog", "no image files")


def test_build_folder_dataset_needs_a_path() -> None:
    with pytest.raises(DataError) as err:
        build_dataset(DatasetSpec(kind="folder"))
    _assert_one_line(err, "--data")


# --------------------------------------------------------------------------------------------
# Factories and collate functions
# --------------------------------------------------------------------------------------------


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[UserModule]:
    """Write a uniquely named module into tmp_path (on sys.path) and return its name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def write(source: str) -> str:
        name = f"lb_user_{uuid.uuid4().hex[:10]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


MODULE_SOURCE = """
    import torch
    from torch.utils.data import Dataset, IterableDataset

    class Squares(Dataset):
        def __init__(self, n):
            self.n = n
        def __len__(self):
            return self.n
        def __getitem__(self, i):
            return torch.tensor(i * i)

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    class Duck:
        def __len__(self):
            return 2
        def __getitem__(self, i):
            return i

    def make(n=4):
        return Squares(n)

    def broken(n=4):
        raise ValueError(f"bad n={n}\\nsecond line")

    def not_a_dataset():
        return 42

    def a_path():
        return "/data/train"

    def a_list():
        return [torch.zeros(2), torch.ones(2)]

    def stream():
        return Stream()

    def collate(batch):
        return batch

    NOT_CALLABLE = 3
"""


def test_load_factory_builds_map_style_and_iterable(user_module: UserModule) -> None:
    mod = user_module(MODULE_SOURCE)
    ds = load_factory(f"{mod}:make", {"n": 5})
    assert len(ds) == 5 and ds[3].item() == 9  # type: ignore[arg-type]
    assert isinstance(load_factory(f"{mod}:stream", {}), IterableDataset)
    assert len(load_factory(f"{mod}:Duck", {})) == 2  # type: ignore[arg-type]  # duck-typed ok
    assert len(load_factory(f"{mod}:Squares", {"n": 2})) == 2  # type: ignore[arg-type]


def test_build_import_dataset(user_module: UserModule) -> None:
    mod = user_module(MODULE_SOURCE)
    spec = DatasetSpec(kind="import", factory=f"{mod}:make", kwargs={"n": 3})
    assert len(build_dataset(spec)) == 3  # type: ignore[arg-type]
    with pytest.raises(DataError) as err:
        build_dataset(DatasetSpec(kind="import"))
    _assert_one_line(err, "--dataset MODULE:FACTORY")


def test_factory_imported_from_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"lb_cwd_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(
        "from torch.utils.data import TensorDataset\nimport torch\n"
        "def make():\n    return TensorDataset(torch.zeros(2))\n"
    )
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.chdir(tmp_path)
    try:
        assert len(load_factory(f"{name}:make", {})) == 2  # type: ignore[arg-type]
    finally:
        sys.modules.pop(name, None)


def test_factory_malformed() -> None:
    for ref in ("no_colon_here", ":make", "mod:"):
        with pytest.raises(DataError) as err:
            load_factory(ref, {})
        _assert_one_line(err, ref, "MODULE:NAME")


def test_factory_module_not_importable() -> None:
    with pytest.raises(DataError) as err:
        load_factory("lb_no_such_module_xyz:make", {})
    _assert_one_line(err, "lb_no_such_module_xyz", "No module named", "PYTHONPATH")


def test_factory_module_with_a_missing_dependency(user_module: UserModule) -> None:
    mod = user_module("import lb_no_such_dependency_xyz\n")
    with pytest.raises(DataError) as err:
        load_factory(f"{mod}:make", {})
    msg = _assert_one_line(err, mod, "lb_no_such_dependency_xyz", "install")
    assert "PYTHONPATH" not in msg


def test_factory_module_raises_on_import(user_module: UserModule) -> None:
    mod = user_module("raise RuntimeError('boom\\nat import')\n")
    with pytest.raises(DataError) as err:
        load_factory(f"{mod}:make", {})
    _assert_one_line(err, mod, "RuntimeError", "boom at import")


def test_factory_attribute_missing(user_module: UserModule) -> None:
    mod = user_module(MODULE_SOURCE)
    with pytest.raises(DataError) as err:
        load_factory(f"{mod}:nope", {})
    _assert_one_line(err, mod, "nope", "no attribute", "--dataset")
    with pytest.raises(DataError) as err:
        load_factory(f"{mod}:NOT_CALLABLE", {})
    _assert_one_line(err, "NOT_CALLABLE", "not a callable")


def test_factory_raises(user_module: UserModule) -> None:
    mod = user_module(MODULE_SOURCE)
    with pytest.raises(DataError) as err:
        load_factory(f"{mod}:broken", {"n": 7})
    _assert_one_line(err, f"--dataset {mod}:broken: the factory raised", "ValueError", "bad n=7 second line")
    with pytest.raises(DataError) as err:  # wrong kwargs are the factory's TypeError
        load_factory(f"{mod}:make", {"size": 7})
    _assert_one_line(err, "TypeError", "size")


def test_factory_returns_something_else(user_module: UserModule) -> None:
    mod = user_module(MODULE_SOURCE)
    with pytest.raises(DataError) as err:
        load_factory(f"{mod}:not_a_dataset", {})
    _assert_one_line(err, f"--dataset {mod}:not_a_dataset", "builtins.int", "not a dataset")
    with pytest.raises(DataError) as err:
        load_factory(f"{mod}:a_path", {})
    _assert_one_line(err, "builtins.str", "not a dataset")
    assert len(load_factory(f"{mod}:a_list", {})) == 2  # type: ignore[arg-type]  # indexable: ok


def test_collate_fn(user_module: UserModule) -> None:
    mod = user_module(MODULE_SOURCE)
    assert build_collate_fn(DatasetSpec()) is None
    fn = build_collate_fn(DatasetSpec(collate_fn=f"{mod}:collate"))
    assert fn is not None and fn([1, 2]) == [1, 2]
    for ref, needle in [
        ("nocolon", "MODULE:NAME"),
        ("lb_no_such_module_xyz:c", "PYTHONPATH"),
        (f"{mod}:missing", "no attribute"),
        (f"{mod}:NOT_CALLABLE", "not a callable"),
    ]:
        with pytest.raises(DataError) as err:
            build_collate_fn(DatasetSpec(collate_fn=ref))
        _assert_one_line(err, ref.split(":")[0], needle, "--collate-fn")


# --------------------------------------------------------------------------------------------
# Dispatch and fingerprint
# --------------------------------------------------------------------------------------------


def test_build_tensor_dataset() -> None:
    spec = DatasetSpec(kind="tensor", num_samples=6, sample_shape=(2, 3), cpu_ms=0.0, io_ms=0.0)
    ds = build_dataset(spec)
    assert isinstance(ds, TensorCostDataset) and len(ds) == 6
    assert ds[0][0].shape == (2, 3)


def test_build_unknown_kind() -> None:
    with pytest.raises(DataError) as err:
        build_dataset(DatasetSpec(kind="parquet"))
    _assert_one_line(err, "parquet", "synthetic", "folder", "tensor", "import")


def dataset_fingerprint(spec: DatasetSpec) -> str:
    from loaderbench.kinds import workload_fingerprint

    return workload_fingerprint({"dataset": spec.to_dict(), "compute": {"kind": "sleep", "ms": 5.0}})


def test_fingerprint_is_short_stable_and_tracks_the_workload() -> None:
    base = DatasetSpec(kind="synthetic")
    fp = dataset_fingerprint(base)
    assert len(fp) == 12 and all(c in "0123456789abcdef" for c in fp)
    assert dataset_fingerprint(DatasetSpec.from_dict(base.to_dict())) == fp
    assert dataset_fingerprint(DatasetSpec(kind="synthetic", num_samples=513)) != fp
    assert dataset_fingerprint(DatasetSpec(kind="synthetic", jpeg_quality=80)) != fp
    assert dataset_fingerprint(DatasetSpec(kind="synthetic", seed=1)) != fp
    assert dataset_fingerprint(DatasetSpec(kind="synthetic", collate_fn="m:c")) != fp
    # fields that do not change the workload of a kind do not change its fingerprint
    assert dataset_fingerprint(DatasetSpec(kind="synthetic", cpu_ms=9.0)) == fp
    t = DatasetSpec(kind="tensor", cpu_ms=2.0)
    assert dataset_fingerprint(DatasetSpec(kind="tensor", cpu_ms=2.0, seed=9)) == (dataset_fingerprint(t))
    assert dataset_fingerprint(DatasetSpec(kind="tensor", cpu_ms=2.5)) != dataset_fingerprint(t)
    imp = DatasetSpec(kind="import", factory="m:f", kwargs={"a": 1, "b": 2})
    assert dataset_fingerprint(
        DatasetSpec(kind="import", factory="m:f", kwargs={"b": 2, "a": 1})
    ) == dataset_fingerprint(imp)
    assert dataset_fingerprint(
        DatasetSpec(kind="import", factory="m:f", kwargs={"a": 2, "b": 2})
    ) != dataset_fingerprint(imp)
    # The same folder on two disks is the same workload: comparing them is what compare is for.
    assert dataset_fingerprint(DatasetSpec(kind="folder", data_path="/hdd/imgs")) == (
        dataset_fingerprint(DatasetSpec(kind="folder", data_path="/ssd/imgs"))
    )
    # The synthetic generator's version is part of it.
    from loaderbench import kinds

    assert kinds.workload({"dataset": base.to_dict()})["generator"] == kinds.GENERATOR_VERSION


# --------------------------------------------------------------------------------------------
# make-data
# --------------------------------------------------------------------------------------------


def test_make_image_folder_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "data"
    info = make_image_folder(root, images=10, size=SMALL, classes=3, seed=2)
    files = sorted(root.rglob("*.jpg"))
    assert info == {"images": 10, "classes": 3, "bytes": sum(f.stat().st_size for f in files)}
    folder = load_image_folder(str(root))
    assert folder.classes == ["class_000", "class_001", "class_002"]
    assert len(folder) == 10
    assert sorted(folder.targets).count(0) == 4  # round-robin: 4, 3, 3
    image, _ = folder[0]
    assert image.shape == (3, IMAGE_SIZE, IMAGE_SIZE) and image.dtype == torch.uint8
    # the same bytes as the in-memory synthetic set of the same seed
    assert (root / "class_001" / "img_00004.jpg").read_bytes() == make_synthetic_jpegs(5, SMALL, seed=2)[4]


def test_make_image_folder_refuses_non_empty_without_force(tmp_path: Path) -> None:
    root = tmp_path / "data"
    make_image_folder(root, images=12, size=SMALL, classes=4)
    (root / "README.txt").write_text("mine")
    with pytest.raises(DataError) as err:
        make_image_folder(root, images=6, size=SMALL, classes=2)
    _assert_one_line(err, str(root), "--force")
    info = make_image_folder(root, images=6, size=SMALL, classes=2, force=True)
    assert info["images"] == 6
    folder = load_image_folder(str(root))
    assert len(folder) == 6 and len(folder.classes) == 2  # the older, larger set is gone
    assert (root / "README.txt").read_text() == "mine"  # other files are left alone


def test_make_image_folder_on_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("x")
    with pytest.raises(DataError) as err:
        make_image_folder(path, images=1, size=SMALL, classes=1)
    _assert_one_line(err, str(path))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"images": 0, "size": SMALL, "classes": 1},
        {"images": 3, "size": SMALL, "classes": 0},
        {"images": 3, "size": SMALL, "classes": 4},
        {"images": 3, "size": (0, 5), "classes": 1},
        {"images": 3, "size": (5, -1), "classes": 1},
        {"images": 3, "size": SMALL, "classes": 1, "quality": 0},
    ],
)
def test_make_image_folder_bad_arguments(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(UsageError) as err:
        make_image_folder(tmp_path / "data", **kwargs)
    _assert_one_line(err)
    assert not (tmp_path / "data").exists()
