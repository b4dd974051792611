"""Nested-batch utilities: traversal, structure-preserving moves, inspection."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, ClassVar, NamedTuple

import pytest
import torch

from loaderbench.workload.batch import (
    BatchInfo,
    inspect_batch,
    iter_tensors,
    leading_sizes,
    map_tensors,
    move_to_device,
)

CPU = torch.device("cpu")


class Pair(NamedTuple):
    image: torch.Tensor
    label: torch.Tensor


class BatchDict(dict):
    """A collate output that is a dict subclass with its own method and attribute."""

    def images(self) -> torch.Tensor:
        return self["image"]


class BatchDictWithTo(dict):
    """A dict subclass with a `.to()`; records how it was called."""

    calls: ClassVar[list[tuple[Any, ...]]] = []

    def to(self, device: Any, non_blocking: bool = False) -> BatchDictWithTo:
        BatchDictWithTo.calls.append((device, non_blocking))
        out = BatchDictWithTo({k: v.to(device) for k, v in self.items()})
        out.moved_by_own_to = True  # type: ignore[attr-defined]
        return out


class Holder:
    """A plain class holding tensors as attributes, no pinning/to method."""

    def __init__(self, image: torch.Tensor, label: torch.Tensor, note: str) -> None:
        self.image = image
        self.label = label
        self.note = note


class HolderWithTo(Holder):
    """The same class with its own `.to(device)` (no non_blocking)."""

    def to(self, device: Any) -> HolderWithTo:
        return HolderWithTo(self.image.to(device), self.label.to(device), self.note + "+to")


@dataclasses.dataclass
class DC:
    x: torch.Tensor
    name: str
    extra: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class FrozenSlots:
    x: torch.Tensor
    n: int


def _t(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    numel = 1
    for s in shape:
        numel *= s
    return torch.arange(numel).reshape(shape).to(dtype)


def _same_structure(a: Any, b: Any) -> None:
    """Types equal at every level, tensors equal in value, non-tensors equal."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_structure(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_structure(x, y)
    elif hasattr(a, "__dict__") and not isinstance(a, (str, int, float)):
        assert vars(a).keys() == vars(b).keys()
        for k in vars(a):
            _same_structure(vars(a)[k], vars(b)[k])
    else:
        assert a == b


# ---- iter_tensors ------------------------------------------------------------------------


def test_iter_tensors_finds_every_leaf_in_order_and_skips_non_tensors() -> None:
    a, b, c, d, e, f = (_t(i + 1) for i in range(6))
    batch = {
        "pair": Pair(a, b),
        "list": [c, "path/0.jpg", 3, None, 2.5],
        "obj": Holder(d, e, "n"),
        "dc": DC(f, "name"),
        "s": "a string",
    }
    assert [t.numel() for t in iter_tensors(batch)] == [1, 2, 3, 4, 5, 6]


def test_iter_tensors_single_tensor_and_no_tensor() -> None:
    x = _t(2, 3)
    assert list(iter_tensors(x)) == [x]
    assert list(iter_tensors(["a", 1, None, {"k": "v"}])) == []
    assert list(iter_tensors("abc")) == []


def test_iter_tensors_reports_a_shared_tensor_once_and_survives_cycles() -> None:
    x = _t(4)
    lst: list[Any] = [x, x]
    lst.append(lst)
    obj = Holder(x, _t(2), "n")
    obj.self_ref = obj  # type: ignore[attr-defined]
    assert [t.numel() for t in iter_tensors([lst, obj])] == [4, 2]


def test_iter_tensors_slots_dataclass_and_dict_subclass() -> None:
    x, y = _t(3), _t(5)
    assert [t.numel() for t in iter_tensors(FrozenSlots(x, 1))] == [3]
    assert [t.numel() for t in iter_tensors(BatchDict(image=y))] == [5]


# ---- move_to_device: structure preservation ------------------------------------------------


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param((_t(2, 3), _t(2)), id="tuple"),
        pytest.param([_t(2, 3), _t(2)], id="list"),
        pytest.param({"image": _t(2, 3), "label": _t(2)}, id="dict"),
        pytest.param(BatchDict(image=_t(2, 3), label=_t(2)), id="dict-subclass"),
        pytest.param(collections.OrderedDict(image=_t(2, 3)), id="ordereddict"),
        pytest.param(Pair(_t(2, 3), _t(2)), id="namedtuple"),
        pytest.param(DC(_t(2, 3), "n", extra=[_t(1), "s"]), id="dataclass"),
        pytest.param(Holder(_t(2, 3), _t(2), "note"), id="plain-object"),
        pytest.param(
            {"a": [Pair(_t(2), _t(1)), ("x", 1, None)], "b": {"c": [DC(_t(3), "d"), "s"]}},
            id="nested-mixture",
        ),
    ],
)
def test_move_to_cpu_keeps_types_and_values(batch: Any) -> None:
    moved = move_to_device(batch, CPU)
    _same_structure(batch, moved)


class _Clone:
    """A `fn` for map_tensors that makes new tensors, so every container must be rebuilt."""

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return t.clone()


def test_map_tensors_rebuilds_each_container_as_its_own_type() -> None:
    class Tagged(BatchDict):
        pass

    d = Tagged(image=_t(2, 3), label=_t(2))
    d.source = "shard-7"  # type: ignore[attr-defined]
    batch = (
        Pair(_t(2), _t(1)),
        [_t(3), "keep"],
        d,
        DC(_t(2), "n"),
        Holder(_t(1), _t(1), "note"),
        FrozenSlots(_t(4), 7),
    )
    out = map_tensors(batch, _Clone())
    assert type(out) is tuple
    assert type(out[0]) is Pair and torch.equal(out[0].image, batch[0].image)
    assert out[0].image is not batch[0].image
    assert type(out[1]) is list and out[1][1] == "keep"
    tagged: Any = out[2]
    assert type(tagged) is Tagged and vars(tagged)["source"] == "shard-7"
    assert tagged.images() is tagged["image"]
    assert type(out[3]) is DC and out[3].name == "n"
    assert type(out[4]) is Holder and out[4].note == "note"
    assert type(out[5]) is FrozenSlots and out[5].n == 7 and torch.equal(out[5].x, batch[5].x)
    # the input is not modified
    assert out[2] is not d and d["image"] is batch[2]["image"]
    assert out[4] is not batch[4] and out[4].image is not batch[4].image


def test_map_tensors_keeps_sharing_and_survives_cycles() -> None:
    x = _t(3)
    lst: list[Any] = [x, x, "s"]
    lst.append(lst)
    out = map_tensors(lst, _Clone())
    assert out[0] is out[1] and out[0] is not x
    assert out[2] == "s"
    assert out[3] is lst  # the back-reference is left pointing at the original


def test_map_tensors_returns_untouched_containers_themselves() -> None:
    meta = ["a.jpg", "b.jpg"]
    batch = (_t(2), meta)
    out = map_tensors(batch, lambda t: t)
    assert out is batch
    out = map_tensors(batch, _Clone())
    assert out[1] is meta


def test_move_the_imgs_img_patch2_theta_meta_tuple() -> None:
    """A 5-tuple collate output whose last element is a list of path strings."""
    imgs = torch.randint(0, 255, (4, 3, 8, 8), dtype=torch.uint8)
    img = torch.rand(4, 3, 8, 8)
    patch2 = torch.rand(4, 2, 3, 4, 4)
    theta = torch.rand(4, 2, 3)
    meta = ["/data/a/0001.jpg", "/data/a/0002.jpg", "/data/b/0003.jpg", "/data/b/0004.jpg"]
    batch = (imgs, img, patch2, theta, meta)
    moved = move_to_device(batch, CPU, non_blocking=True)
    _same_structure(batch, moved)
    assert moved[4] == meta and all(isinstance(p, str) for p in moved[4])
    cloned = map_tensors(batch, _Clone())
    assert type(cloned) is tuple and cloned[4] == meta
    assert [t.shape for t in iter_tensors(batch)] == [t.shape for t in iter_tensors(cloned)]
    assert leading_sizes(batch) == [5, 4, 4, 4, 4, 4]


def test_move_uses_the_objects_own_to_and_passes_non_blocking_when_accepted() -> None:
    BatchDictWithTo.calls.clear()
    b = BatchDictWithTo(image=_t(2, 3))
    moved = move_to_device({"batch": b}, "cpu", non_blocking=True)
    assert type(moved["batch"]) is BatchDictWithTo
    assert moved["batch"].moved_by_own_to  # type: ignore[attr-defined]
    assert BatchDictWithTo.calls == [(CPU, True)]

    h = HolderWithTo(_t(2), _t(1), "n")
    out = move_to_device([h], CPU, non_blocking=True)  # its .to takes no non_blocking
    assert type(out[0]) is HolderWithTo and out[0].note == "n+to"


def test_move_does_not_enter_strings_or_bytes() -> None:
    batch = {"path": "x" * 1000, "raw": b"\x00\x01", "tensor": _t(2)}
    moved = move_to_device(batch, CPU)
    assert moved["path"] is batch["path"] and moved["raw"] is batch["raw"]


def test_move_of_a_tensor_already_there_returns_the_same_objects() -> None:
    x = _t(2, 2)
    assert move_to_device(x, CPU) is x
    batch = [x, {"y": _t(3)}]
    assert move_to_device(batch, CPU) is batch


def test_uncopyable_object_holding_tensors_gives_an_actionable_error() -> None:
    class NoCopy:
        def __init__(self) -> None:
            self.x = _t(2)

        def __reduce_ex__(self, protocol: Any) -> Any:
            raise RuntimeError("no")

    with pytest.raises(TypeError, match=r"\.to\(device"):
        map_tensors(NoCopy(), _Clone())


# ---- inspect_batch / leading_sizes ---------------------------------------------------------


def test_inspect_batch_counts_leaves_and_bytes_exactly() -> None:
    batch = {
        "image": torch.zeros(2, 3, 4, 4, dtype=torch.uint8),  # 96 bytes
        "label": torch.zeros(2, dtype=torch.int64),  # 16 bytes
        "extra": Holder(torch.zeros(5, dtype=torch.float16), torch.zeros(3), "s"),  # 10 + 12
        "meta": ["a", "b"],
        "none": None,
    }
    info = inspect_batch(batch)
    assert info == BatchInfo(
        tensor_leaves=4, pinned_leaves=0, nbytes=96 + 16 + 10 + 12, types="dict"
    )


def test_inspect_batch_names_the_top_level_type_and_counts_views_by_their_elements() -> None:
    base = torch.zeros(10, 10)  # 400 bytes of storage
    view = base[:2, :3]  # a copy would move 6 floats = 24 bytes
    info = inspect_batch(Pair(view, torch.zeros(2, dtype=torch.int32)))
    assert (info.tensor_leaves, info.nbytes, info.types) == (2, 24 + 8, "Pair")
    assert inspect_batch(BatchDict(a=view)).types == "BatchDict"


def test_inspect_batch_counts_a_shared_tensor_once() -> None:
    x = torch.zeros(4)
    assert inspect_batch([x, x, (x,)]) == BatchInfo(1, 0, 16, "list")


def test_inspect_batch_survives_is_pinned_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: torch.Tensor, *a: Any, **k: Any) -> bool:
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(torch.Tensor, "is_pinned", boom)
    assert inspect_batch([torch.zeros(2), torch.zeros(3)]).pinned_leaves == 0


def test_inspect_batch_counts_pinned_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinning needs CUDA; fake `is_pinned` to check the counting on any machine."""
    pinned = torch.zeros(2)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self, *a, **k: self is pinned)
    info = inspect_batch(Holder(pinned, torch.zeros(3), "plain class: not pinned"))
    assert (info.tensor_leaves, info.pinned_leaves) == (2, 1)


def test_inspect_batch_counts_numpy_arrays_as_leaves_with_their_bytes() -> None:
    import numpy as np

    # The collate JAX users copy: [x (B, 3, 8, 8) float32, y (B,) int64] as numpy arrays.
    batch = [np.zeros((4, 3, 8, 8), dtype=np.float32), np.zeros(4, dtype=np.int64), torch.zeros(4)]
    info = inspect_batch(batch)
    assert (info.tensor_leaves, info.numpy_leaves) == (1, 2)
    assert info.numpy_nbytes == 4 * 3 * 8 * 8 * 4 + 4 * 8  # 3,072 + 32
    assert info.nbytes == 3104 + 16 and info.tensor_nbytes == 16


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        # a stacked batch of 8 plus a 5-vector
        ((torch.zeros(8, 3), torch.zeros(5)), [2, 8, 5]),
        # numpy collate: the outer list has 2 parts, every leaf has 64 rows
        (["X", [torch.zeros(64, 3)]], [2, 1, 64]),
        # detection collate tuple(zip(*batch)): 2 parts of 3 per-image entries; each image's
        # first dimension is its 3 channels, each box tensor has k rows
        (
            ((torch.zeros(3, 5, 5), torch.zeros(3, 7, 6), torch.zeros(3, 4, 4)),
             ({"boxes": torch.zeros(2, 4)}, {"boxes": torch.zeros(1, 4)}, {"boxes": torch.zeros(5, 4)})),
            [2, 3, 3, 3, 3, 3, 2, 1, 5],
        ),
        ({"scalar": torch.tensor(3.0), "a": 1}, []),
        (None, []),
    ],
)
def test_leading_sizes(batch: Any, expected: list[int]) -> None:
    assert leading_sizes(batch) == expected


def test_leading_sizes_reads_numpy_rows() -> None:
    import numpy as np

    assert leading_sizes([np.zeros((64, 3)), np.zeros(64), np.float32(1.0)]) == [3, 64, 64]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_inspect_and_move_with_real_pinned_memory_and_cuda() -> None:
    dev = torch.device("cuda")
    batch = BatchDict(image=torch.zeros(2, 3).pin_memory(), label=torch.zeros(2), meta=["p"])
    info = inspect_batch(batch)
    assert (info.tensor_leaves, info.pinned_leaves) == (2, 1)
    moved = move_to_device(batch, dev, non_blocking=True)
    assert type(moved) is BatchDict and moved["meta"] == ["p"]
    assert all(t.is_cuda for t in iter_tensors(moved))
    assert inspect_batch(moved).pinned_leaves == 0


def test_a_collate_that_drops_samples_is_named_and_a_transposed_batch_is_not():
    from loaderbench.measure.trial import check_sample_count
    from loaderbench.workload.batch import array_dims, array_rows, leading_sizes

    def check(batch, items=16, iterable=False):
        return check_sample_count(items, leading_sizes(batch), iterable=iterable, fixed=None,
                                  rows=array_rows(batch), dims=array_dims(batch))

    # 16 indices, every 4th sample None and dropped: images (12, 3, 8, 8) and labels (12,).
    dropped = (torch.zeros(12, 3, 8, 8), torch.zeros(12, dtype=torch.long))
    text = check(dropped)
    assert "given 16 indices and returned arrays of 12 rows" in text and "overstates by up to 33%" in text
    # Batch-second layouts keep all 16 samples: (3, 16) features, (seq 7, batch 16) tokens.
    assert check((torch.zeros(3, 16), torch.zeros(16))) == ""
    assert check({"tokens": torch.zeros(7, 16, dtype=torch.long)}) == ""
    # A full batch, and a count the user gave, are never questioned.
    assert check((torch.zeros(16, 3), torch.zeros(16))) == ""
    assert check_sample_count(16, [12], iterable=False, fixed=16, rows=[12], dims={12}) == ""
    # Leaves that disagree (a padded target list of 3 boxes each) say nothing either way.
    assert check((torch.zeros(12, 3), torch.zeros(5, 4))) == ""
