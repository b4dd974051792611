"""What the watched loader is: its DataLoader settings, the samples in one of its batches, the
dataset behind it, and whether it is an iterable of batches at all."""

from __future__ import annotations

from collections import Counter
from typing import Any

from loaderbench.model import LoaderSettings


def count_samples(batch: Any, batch_size: int | None) -> int:
    """Samples in a collated `batch` of any structure (NOTE [samples per batch] in
    measure/trial.py): the first dimension its array leaves (tensors, numpy arrays) agree on;
    else, with the loader's `batch_size` known, the largest size along which the batch could
    hold its samples (`batch.leading_sizes`: leading dimensions and sequence lengths) that does
    not exceed it (a tuple of B variable-size images, the last partial batch); else the most
    common of those sizes; 1 for a batch with no size at all (a scalar). Give
    `samples_per_batch=` to `watch` when each item holds several samples.
    """
    from loaderbench.workload.batch import array_rows, leading_sizes

    rows = array_rows(batch)
    if rows and len(set(rows)) == 1 and (batch_size is None or rows[0] <= batch_size):
        return rows[0]
    sizes = [s for s in leading_sizes(batch) if s > 0]
    if batch_size:
        fits = [s for s in sizes if s <= batch_size]
        if fits:
            return max(fits)
    if sizes:
        return Counter(sizes).most_common(1)[0][0]
    return 1


def read_settings(loader: Any, batch_size: int | None = None) -> tuple[LoaderSettings, Any]:
    """The `LoaderSettings` of `loader` (a DataLoader, a `CUDAPrefetcher` around one, or any
    iterable: 0 workers, nothing pinned) and the DataLoader itself (None when there is none).
    `batch_size`: the loader's own when it has one, else this (the first batch's count)."""
    from torch.utils.data import DataLoader

    from loaderbench.workload.prefetch import CUDAPrefetcher

    prefetch = isinstance(loader, CUDAPrefetcher)
    inner = getattr(loader, "loader", None) if prefetch else loader
    if not isinstance(inner, DataLoader):
        return LoaderSettings(0, False, prefetch, None, False, int(batch_size or 1)), None
    workers = int(inner.num_workers)
    ctx = inner.multiprocessing_context
    ctx_name = None if ctx is None else (ctx if isinstance(ctx, str) else ctx.get_start_method())
    bs = inner.batch_size if inner.batch_size is not None else batch_size
    _, changed, _ = loader_class_settings(inner)
    return LoaderSettings(
        num_workers=workers,
        pin_memory=bool(inner.pin_memory),
        prefetch=prefetch,
        prefetch_factor=(inner.prefetch_factor or 2) if workers else None,
        persistent_workers=bool(inner.persistent_workers) if workers else False,
        batch_size=int(bs or 1),
        mp_context=ctx_name if workers else None,
        in_order=bool(getattr(inner, "in_order", True)) if workers else True,
        loader_args=tuple(changed.items()),
    ), inner


def loader_class_settings(loader: Any) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """For a DataLoader subclass (torchdata's StatefulDataLoader, ...): its `module:Class`, and
    its own settings (the keyword parameters of its `__init__` that DataLoader does not have,
    read back from the attribute of the same name) split into those that differ from their
    default and those left at it, as {name: value}. (None, {}, {}) for torch's DataLoader or
    anything that is not a DataLoader. Only plain values (numbers, bools, strings, None) are
    read; a setting the instance does not keep under its own name is left out."""
    import inspect

    from torch.utils.data import DataLoader

    cls = type(loader)
    if not isinstance(loader, DataLoader) or cls is DataLoader:
        return None, {}, {}
    ref = f"{cls.__module__}:{cls.__qualname__}"
    try:
        params = inspect.signature(cls.__init__).parameters
        base = set(inspect.signature(DataLoader.__init__).parameters)
    except (TypeError, ValueError):
        return ref, {}, {}
    changed: dict[str, Any] = {}
    default: dict[str, Any] = {}
    for name, p in params.items():
        if name in base or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            continue
        value = getattr(loader, name, inspect.Parameter.empty)
        if value is inspect.Parameter.empty or not (value is None or isinstance(value, (bool, int, float, str))):
            continue
        (default if p.default is not p.empty and value == p.default else changed)[name] = value
    return ref, changed, default


def describe_source(loader: Any) -> str:
    """`module:Class` of the dataset behind `loader` (or of the iterable itself)."""
    inner = getattr(loader, "loader", loader)
    obj = getattr(inner, "dataset", inner)
    t = type(obj)
    return f"{t.__module__}:{t.__qualname__}"


def check_iterable(loader: Any) -> None:
    """TypeError unless `loader` is an iterable of batches (a Dataset, map-style or iterable, is
    not: it yields samples, and needs a DataLoader around it)."""
    from torch.utils.data import Dataset, IterableDataset

    if isinstance(loader, Dataset):
        how = "batch_size=..., or batch_size=None if it yields ready batches" if isinstance(
            loader, IterableDataset) else "batch_size=..."
        raise TypeError(
            f"watch(loader): expected a DataLoader or another iterable of batches, got the dataset "
            f"{type(loader).__name__}, which yields samples; wrap it first: "
            f"watch(DataLoader({type(loader).__name__.lower()}, {how}))"
        )
    if isinstance(loader, (str, bytes, bytearray)) or not hasattr(type(loader), "__iter__"):
        raise TypeError(
            f"watch(loader): expected a DataLoader or another iterable of batches, got {type(loader).__name__}"
        )
