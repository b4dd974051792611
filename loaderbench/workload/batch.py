"""Walk, move and describe arbitrarily nested batches.

A batch is whatever a DataLoader's `collate_fn` returns: a tensor, or any nesting of tuples,
lists, dicts (and dict subclasses), namedtuples, dataclass instances and plain objects that hold
tensors as attributes, with strings, numbers and None mixed in. These helpers find every tensor
in it (`iter_tensors`), rebuild it with each tensor replaced (`map_tensors`, `move_to_device`),
and describe it (`inspect_batch`, `leading_sizes`).

What counts as a container, in the order it is checked:

- `torch.Tensor` (any subclass): a leaf.
- `str`, `bytes`, `bytearray`: never looked into.
- any `Mapping`: its values (keys are left alone).
- any `tuple` (namedtuples and other tuple subclasses included) and any `list`: its items.
- any other object with instance attributes (`__dict__`, or `__slots__` as in
  `@dataclass(slots=True)`): those attributes. Classes, modules and functions are not objects
  of a batch and are skipped.
- everything else (ints, floats, None, numpy arrays, deques, ...): skipped, returned as is
  (numpy arrays are array leaves for `inspect_batch` and `leading_sizes`, never moved).

A container is entered once per call even when the batch refers to it twice or holds a cycle,
and a tensor referred to twice is reported (and moved) once, so the rebuilt batch keeps the
aliasing of the original.
"""

from __future__ import annotations

import copy
import inspect
import sys
import types
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "BatchInfo",
    "inspect_batch",
    "iter_tensors",
    "leading_sizes",
    "map_tensors",
    "move_to_device",
]

_ATOMS = (str, bytes, bytearray)
_NOT_BATCH_OBJECTS = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
)


def iter_tensors(batch: Any) -> Iterator[torch.Tensor]:
    """Yield every tensor leaf of `batch`, depth first, in container order.

    Dict values come in insertion order, object attributes in `__dict__` order then slot order.
    Each distinct tensor object is yielded once, however often the batch refers to it. Nothing is
    copied and no device is touched.
    """
    yield from _iter_leaves(batch, arrays=False)


def _iter_leaves(batch: Any, *, arrays: bool) -> Iterator[Any]:
    """Tensor leaves (and, with `arrays`, numpy arrays too) of `batch`, each once, depth first."""
    seen: dict[int, Any] = {}  # id -> object, kept alive so that no id is reused meanwhile
    stack: list[Any] = [batch]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor) or (arrays and _is_array(obj)):
            if id(obj) not in seen:
                seen[id(obj)] = obj
                yield obj
            continue
        children = _children(obj)
        if children is None or id(obj) in seen:
            continue
        seen[id(obj)] = obj
        stack.extend(reversed(children))


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Return `batch` rebuilt with every tensor leaf `t` replaced by `fn(t)`.

    Container types are kept: a namedtuple stays that namedtuple, a dict subclass stays that
    subclass (with its instance attributes), a tuple a tuple, a list a list; other objects are
    shallow-copied (`copy.copy`) and get the new values as attributes, bypassing `__setattr__`
    (so frozen dataclasses work). A container none of whose leaves changed (`fn(t) is t`) is
    returned itself, not a copy; the input is never modified. `fn` is called once per distinct
    tensor.

    Raises:
        TypeError: an object that holds tensors cannot be copied (give it a `.to()` method).
    """
    return _Rebuilder(fn, device=None, non_blocking=False).rebuild(batch)


def move_to_device(batch: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """Return `batch` with every tensor moved by `t.to(device, non_blocking=non_blocking)`.

    Like `map_tensors`, but an object (other than a tensor) whose class defines a callable `.to`
    is moved by its own method: `obj.to(device, non_blocking=...)`, or `obj.to(device)` when the
    method does not take `non_blocking`. Non-tensors are untouched and strings are never entered.
    Tensors already on `device` come back as the same objects (that is what `.to` does), so a
    move to where the batch already is returns the batch itself.

    `non_blocking=True` is truly asynchronous only from pinned host memory; see the NOTE in
    prefetch.py for what the caller must then do about streams.
    """
    return _Rebuilder(None, device=torch.device(device), non_blocking=non_blocking).rebuild(batch)


@dataclass
class BatchInfo:
    """What a delivered batch holds.

    tensor_leaves: distinct tensors in the batch.
    pinned_leaves: how many of them are CPU tensors in page-locked (pinned) memory.
    nbytes: bytes of every array leaf (tensors: `numel * element_size`; numpy arrays:
        `ndarray.nbytes`), in bytes: what a worker hands to the main process.
    types: the class name of the top-level batch, e.g. `tuple`, `dict`, `MyBatch`.
    numpy_leaves / numpy_nbytes: the numpy arrays among the leaves and their bytes. A worker
        sends them through the pickler and its pipe, not through shared memory as it does
        torch tensors, and an H2D copy does not move them (`tensor_nbytes` is what it moves).
    """

    tensor_leaves: int
    pinned_leaves: int
    nbytes: int
    types: str
    numpy_leaves: int = 0
    numpy_nbytes: int = 0

    @property
    def tensor_nbytes(self) -> int:
        """Bytes of the tensor leaves: what `move_to_device` copies, in bytes."""
        return self.nbytes - self.numpy_nbytes


def inspect_batch(batch: Any) -> BatchInfo:
    """Count the array leaves of `batch` (tensors and numpy arrays), how many tensors are
    pinned, and their size in bytes.

    A CUDA (or other non-CPU) tensor is never counted as pinned. `Tensor.is_pinned()` can raise
    on a machine without a CUDA driver; that counts as not pinned.
    """
    leaves = pinned = nbytes = np_leaves = np_bytes = 0
    for leaf in _iter_leaves(batch, arrays=True):
        if isinstance(leaf, torch.Tensor):
            leaves += 1
            nbytes += leaf.numel() * leaf.element_size()
            if leaf.device.type == "cpu" and _is_pinned(leaf):
                pinned += 1
        else:
            np_leaves += 1
            np_bytes += int(leaf.nbytes)
    return BatchInfo(
        tensor_leaves=leaves, pinned_leaves=pinned, nbytes=nbytes + np_bytes, types=type(batch).__name__,
        numpy_leaves=np_leaves, numpy_nbytes=np_bytes,
    )


def leading_sizes(batch: Any) -> list[int]:
    """Every size along which a batch could hold its samples: the first dimension of each array
    leaf (tensor or numpy array with at least one dimension) and the length of every list and
    tuple in it (the top level included), depth first.

    Used to check a sample count against the batch (a collate keeps a batch of B samples as
    arrays of B rows, or as a sequence of B per-sample parts), never to guess it: a batch of
    images of shape (3, H, W) says 3 at its first leaf whatever B is.

    >>> leading_sizes((torch.zeros(8, 3), [torch.zeros(2), torch.zeros(2)]))
    [2, 8, 2, 2, 2]
    """
    out: list[int] = []
    seen: set[int] = set()
    stack: list[Any] = [batch]
    while stack:
        obj = stack.pop()
        if _is_array(obj):
            if obj.ndim > 0:
                out.append(int(obj.shape[0]))
            continue
        children = _children(obj)
        if children is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (list, tuple)):
            out.append(len(obj))
        stack.extend(reversed(children))
    return out


# --------------------------------------------------------------------------------------------
# internals


def array_dims(batch: Any) -> set[int]:
    """Every dimension size of every array leaf (tensor or numpy array) of `batch`.

    >>> sorted(array_dims({"x": torch.zeros(3, 16), "y": torch.zeros(16)}))
    [3, 16]
    """
    return {int(n) for leaf in _iter_leaves(batch, arrays=True) for n in leaf.shape}


def array_rows(batch: Any) -> list[int]:
    """The first dimension of every array leaf (tensor or numpy array, at least 1-d) of `batch`.

    >>> array_rows((torch.zeros(12, 3), [torch.zeros(12)], 7))
    [12, 12]
    """
    return [int(leaf.shape[0]) for leaf in _iter_leaves(batch, arrays=True) if leaf.ndim > 0]


def _is_array(obj: Any) -> bool:
    """A torch tensor or a numpy array (numpy is imported only when one can be in the batch)."""
    if isinstance(obj, torch.Tensor):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.ndarray)


def _is_pinned(t: torch.Tensor) -> bool:
    try:
        return bool(t.is_pinned())
    except RuntimeError:
        return False


def _slot_names(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        for name in slots:
            if name not in ("__dict__", "__weakref__") and name not in names:
                names.append(name)
    return names


def _attributes(obj: Any) -> list[tuple[str, Any, bool]] | None:
    """Instance attributes of a plain object as (name, value, lives_in_dict); None if not one."""
    if isinstance(obj, _NOT_BATCH_OBJECTS):
        return None
    attrs: list[tuple[str, Any, bool]] = []
    d = getattr(obj, "__dict__", None)
    has_dict = isinstance(d, dict)
    if isinstance(d, dict):
        attrs.extend((k, v, True) for k, v in d.items())
    for name in _slot_names(type(obj)):
        try:
            attrs.append((name, object.__getattribute__(obj, name), False))
        except AttributeError:  # slot never set
            continue
    if not has_dict and not attrs:
        return None
    return attrs


def _children(obj: Any) -> list[Any] | None:
    """The direct children of a container, or None for a leaf that is not a tensor."""
    if isinstance(obj, _ATOMS):
        return None
    if isinstance(obj, Mapping):
        return list(obj.values())
    if isinstance(obj, (tuple, list)):
        return list(obj)
    attrs = _attributes(obj)
    if attrs is None:
        return None
    return [v for _, v, _ in attrs]


_TO_TAKES_NON_BLOCKING: dict[type, bool] = {}


def _to_takes_non_blocking(cls: type) -> bool:
    """Whether `cls.to` accepts a `non_blocking` keyword (cached per class)."""
    known = _TO_TAKES_NON_BLOCKING.get(cls)
    if known is None:
        try:
            params = inspect.signature(cls.to).parameters.values()  # type: ignore[attr-defined]
            known = any(p.name == "non_blocking" or p.kind is p.VAR_KEYWORD for p in params)
        except (TypeError, ValueError):  # no readable signature: call it the plain way
            known = False
        _TO_TAKES_NON_BLOCKING[cls] = known
    return known


class _Rebuilder:
    """One rebuild of one batch: `fn` per tensor, or a device move (`fn` None)."""

    def __init__(
        self,
        fn: Callable[[torch.Tensor], Any] | None,
        device: torch.device | None,
        non_blocking: bool,
    ) -> None:
        self.fn = fn
        self.device = device
        self.non_blocking = non_blocking
        # id -> (original, rebuilt); the original is kept alive so that no id is reused meanwhile
        self.done: dict[int, tuple[Any, Any]] = {}
        self.active: set[int] = set()

    def rebuild(self, obj: Any) -> Any:
        key = id(obj)
        if key in self.done:
            return self.done[key][1]
        if key in self.active:  # a cycle: leave the back-reference pointing at the original
            return obj
        self.active.add(key)
        try:
            new = self._rebuild(obj)
        finally:
            self.active.discard(key)
        self.done[key] = (obj, new)
        return new

    def _leaf(self, t: torch.Tensor) -> Any:
        if self.fn is not None:
            return self.fn(t)
        assert self.device is not None
        return t.to(self.device, non_blocking=self.non_blocking)

    def _own_to(self, obj: Any) -> Any:
        assert self.device is not None
        if _to_takes_non_blocking(type(obj)):
            return obj.to(self.device, non_blocking=self.non_blocking)
        return obj.to(self.device)

    def _rebuild(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return self._leaf(obj)
        if isinstance(obj, _ATOMS):
            return obj
        if (
            self.fn is None
            and not isinstance(obj, _NOT_BATCH_OBJECTS)
            and callable(getattr(type(obj), "to", None))
        ):
            return self._own_to(obj)
        if isinstance(obj, Mapping):
            return self._mapping(obj)
        if isinstance(obj, tuple):
            return self._tuple(obj)
        if isinstance(obj, list):
            return self._list(obj)
        attrs = _attributes(obj)
        if attrs is None:
            return obj
        return self._object(obj, attrs)

    def _mapping(self, obj: Mapping[Any, Any]) -> Any:
        items = {k: self.rebuild(v) for k, v in obj.items()}
        if all(items[k] is v for k, v in obj.items()):
            return obj
        if type(obj) is dict:
            return items
        # A subclass may carry attributes and methods: clone it and update the clone (this is
        # what torch's pin_memory does: a dict subclass with methods must not become a plain dict).
        try:
            if isinstance(obj, MutableMapping):
                clone = copy.copy(obj)
                clone.update(items)
                return clone
            return type(obj)(items)  # type: ignore[call-arg]
        except TypeError:
            return items

    def _tuple(self, obj: tuple[Any, ...]) -> Any:
        items = [self.rebuild(v) for v in obj]
        if all(n is o for n, o in zip(items, obj)):
            return obj
        if type(obj) is tuple:
            return tuple(items)
        if hasattr(obj, "_fields"):  # namedtuple
            return type(obj)(*items)
        try:  # other tuple subclasses, e.g. torch.return_types (structseq)
            return type(obj)(items)  # type: ignore[call-arg]
        except TypeError:
            return tuple(items)

    def _list(self, obj: list[Any]) -> Any:
        items = [self.rebuild(v) for v in obj]
        if all(n is o for n, o in zip(items, obj)):
            return obj
        if type(obj) is list:
            return items
        try:
            clone = copy.copy(obj)
            clone[:] = items
            return clone
        except TypeError:
            return items

    def _object(self, obj: Any, attrs: list[tuple[str, Any, bool]]) -> Any:
        new_values = [(name, self.rebuild(v), v, in_dict) for name, v, in_dict in attrs]
        if all(n is o for _, n, o, _ in new_values):
            return obj
        try:
            clone = copy.copy(obj)
        except Exception as exc:
            raise TypeError(
                f"cannot copy a {type(obj).__name__} to replace its tensors ({exc}); "
                "give the class a .to(device, non_blocking=False) method"
            ) from exc
        for name, new, _, in_dict in new_values:
            if in_dict:
                clone.__dict__[name] = new
            else:
                object.__setattr__(clone, name, new)
        return clone
