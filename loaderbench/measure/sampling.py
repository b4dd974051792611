"""Which indices a trial's DataLoader loads, and what drawing them costs the main process.

NOTE [index drawing]
    A map-style dataset can report an enormous length ("virtual length": random patches of big
    volumes, windows over a corpus, an index over 10^9 rows) while each item is cheap. A
    shuffling sampler that materialises a permutation of the whole dataset (torch's
    `RandomSampler`: `randperm(len)` every epoch) then costs seconds and gigabytes in the main
    process at every epoch start, although a measured epoch may use a few hundred indices.
    `EpochSampler` draws each pass over the dataset lazily: while fewer than 1/8 of the indices
    are taken it draws with replacement and rejects repeats (sequential rejection sampling: every
    new index is uniform over those not yet taken, so the order is a uniform random permutation
    prefix), keeping only the indices taken; from 1/8 on, it permutes the rest (then O(n) is at
    most 8x the indices taken). Time and memory are O(indices drawn) whatever the length.

NOTE [sampler cost]
    The DataLoader draws index lists in the main process, inside `next()` (it dispatches the
    next list to a worker when a batch arrives), so a slow sampler is data-wait the consumer
    sees. `TimedBatchSampler` adds the seconds spent drawing to a running total; the loop reads
    it around every `next()` and keeps the per-batch share (`Trial.sampler_s`). A user's own
    sampler or batch sampler (`--sampler MODULE:FACTORY`) is part of their loader's cost, so it
    is measured the same way.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

Clock = Callable[[], float]

_DENSE_FRACTION = 8  # permute the rest once 1/8 of a pass is taken
_CHUNK = 1024  # indices drawn (with replacement) per numpy call while sparse


def draw_pass(rng: np.random.Generator, length: int, count: int) -> Iterator[int]:
    """`count` distinct indices of `range(length)` in uniformly random order, drawn lazily (see
    NOTE [index drawing]): O(indices drawn) time and memory. Raises ValueError when `count`
    exceeds `length`."""
    if count > length:
        raise ValueError(f"cannot draw {count} distinct indices from {length}")
    taken: set[int] = set()
    order: list[int] = []
    while len(taken) < count and len(taken) * _DENSE_FRACTION < length:
        for i in rng.integers(0, length, size=_CHUNK).tolist():
            if i in taken:
                continue
            taken.add(i)
            order.append(i)
            yield i
            if len(taken) >= count or len(taken) * _DENSE_FRACTION >= length:
                break
    if len(taken) >= count:
        return
    need = count - len(order)
    mask = np.ones(length, dtype=bool)
    if order:
        mask[np.asarray(order, dtype=np.int64)] = False
    del taken, order
    rest = rng.permutation(np.flatnonzero(mask))
    del mask
    for start in range(0, need, _CHUNK):
        yield from rest[start : min(start + _CHUNK, need)].tolist()

class EpochSampler:
    """A seeded shuffling sampler of `num_samples` indices per epoch over a dataset of `length`.

    Each epoch is one or more passes over the dataset (`draw_pass`): within a pass no index
    repeats; a new pass starts when `num_samples` exceeds `length`. Epoch e draws from a
    generator seeded by (seed, e), so every rank of a distributed trial draws the same stream
    (`RankShard` cuts it). Draws lazily: O(indices used) time and memory (NOTE [index
    drawing]).
    """

    def __init__(self, length: int, num_samples: int, seed: int) -> None:
        if length < 1 or num_samples < 1:
            raise ValueError(f"EpochSampler needs a length and num_samples >= 1, got {length}, {num_samples}")
        self.length = int(length)
        self.num_samples = int(num_samples)
        self.seed = int(seed)
        self.epoch = 0

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        left = self.num_samples
        while left > 0:
            count = min(left, self.length)
            yield from draw_pass(rng, self.length, count)
            left -= count


class TimedBatchSampler:
    """Yields the index lists of `inner` (a batch sampler) unchanged, adding the main-process
    seconds spent drawing each one (creating its iterator included) to `spent_s`; with
    `record`, also keeps every index drawn (the storage accounting needs them); with `limit`,
    an epoch ends after that many lists (`--epoch-batches` applied to a user's sampler). See
    NOTE [sampler cost]."""

    def __init__(self, inner: Any, *, record: bool = False, limit: int | None = None,
                 clock: Clock = time.perf_counter) -> None:
        self.inner = inner
        self.spent_s = 0.0
        self.indices: list[int] | None = [] if record else None
        self.limit = limit
        self._clock = clock

    def __len__(self) -> int:
        n = len(self.inner)
        return n if self.limit is None else min(n, self.limit)

    def __iter__(self) -> Iterator[list[int]]:
        clock = self._clock
        t0 = clock()
        it = iter(self.inner)
        self.spent_s += clock() - t0
        drawn = 0
        while self.limit is None or drawn < self.limit:
            drawn += 1
            t0 = clock()
            try:
                batch = next(it)
            except StopIteration:
                self.spent_s += clock() - t0
                return
            self.spent_s += clock() - t0
            if self.indices is not None:
                self.indices.extend(int(i) for i in batch)
            yield batch


def yields_batches(sampler: Any) -> bool:
    """Whether a user's sampler object is a batch sampler (yields lists of indices) rather than
    a sampler (yields indices): a `torch.utils.data.BatchSampler`, or its first item is a
    sequence. Draws one item from a fresh iterator; raises what the sampler raises, and
    ValueError when it yields nothing."""
    from torch.utils.data import BatchSampler

    if isinstance(sampler, BatchSampler):
        return True
    try:
        first = next(iter(sampler))
    except StopIteration:
        raise ValueError("the sampler yielded no index") from None
    if isinstance(first, (list, tuple)):
        return True
    ndim = getattr(first, "ndim", 0)
    return bool(ndim and ndim >= 1)


def accepted_keywords(factory: Callable[..., Any], offered: dict[str, Any]) -> dict[str, Any]:
    """The `offered` keywords that `factory(dataset, **kw)` accepts, in the order offered: all of
    them when it takes `**kwargs`, none when its signature cannot be read (a builtin), else
    those its parameters name. What `call_factory` passes, and what the recommended call
    prints (NOTE [the recommended call runs as printed] in analysis/advice.py)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return dict(offered)
    names = {p.name for p in params if p.kind is not p.POSITIONAL_ONLY}
    return {k: v for k, v in offered.items() if k in names}


def call_factory(factory: Callable[..., Any], dataset: Any, **offered: Any) -> Any:
    """`factory(dataset, **kw)` where kw are the `offered` keywords its signature accepts
    (`accepted_keywords`): a user's sampler factory may take `batch_size`, `seed`, `rank`,
    `world_size` or none of them."""
    return factory(dataset, **accepted_keywords(factory, offered))
