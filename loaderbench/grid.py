"""Expand the sweep grid into `LoaderSettings`, normalising what the DataLoader would reject.

NOTE [grid normalisation]
    `torch.utils.data.DataLoader` rejects `prefetch_factor` (any value but None on torch >= 2.0)
    and `persistent_workers=True` when `num_workers == 0` (and worker threads mean nothing
    there), and `pin_memory` / the CUDA-stream
    prefetcher mean nothing without CUDA. Rather than crash or measure the same thing twice, such
    combinations are mapped onto the one config they really are, measured once, and the merged
    combinations are kept in `normalized_from` so the table can show them as n/a (case C11).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loaderbench.model import LoaderSettings


@dataclass(frozen=True)
class GridAxes:
    """The comma-list axes of a sweep; each is a non-empty sequence."""

    num_workers: Sequence[int]
    pin_memory: Sequence[bool] = (False, True)
    prefetch: Sequence[bool] = (False, True)
    prefetch_factor: Sequence[int] = (2,)
    persistent_workers: Sequence[bool] = (False,)
    batch_size: Sequence[int] = (64,)
    mp_context: Sequence[str | None] = (None,)
    worker_threads: Sequence[int | None] = (None,)
    main_threads: Sequence[int | None] = (None,)


@dataclass
class GridPoint:
    """A config to measure plus the requested combinations that collapsed onto it."""

    settings: LoaderSettings
    normalized_from: list[dict[str, Any]] = field(default_factory=list)


def default_num_workers(usable_cpus: int) -> list[int]:
    """0, then powers of two below `usable_cpus`, then `usable_cpus` itself.

    >>> default_num_workers(16)
    [0, 1, 2, 4, 8, 16]
    >>> default_num_workers(6)
    [0, 1, 2, 4, 6]
    """
    out = [0]
    p = 1
    while p < usable_cpus:
        out.append(p)
        p *= 2
    out.append(max(1, usable_cpus))
    return sorted(set(out))


def normalize(settings: LoaderSettings, *, cuda: bool) -> LoaderSettings:
    """Map one requested combination onto what the DataLoader would really run (see NOTE)."""
    pin = settings.pin_memory and cuda
    prefetch = settings.prefetch and cuda
    if settings.num_workers == 0:
        return LoaderSettings(
            num_workers=0,
            pin_memory=pin,
            prefetch=prefetch,
            prefetch_factor=None,
            persistent_workers=False,
            batch_size=settings.batch_size,
            mp_context=None,
            worker_threads=None,
            main_threads=settings.main_threads,
        )
    return LoaderSettings(
        num_workers=settings.num_workers,
        pin_memory=pin,
        prefetch=prefetch,
        prefetch_factor=settings.prefetch_factor,
        persistent_workers=settings.persistent_workers,
        batch_size=settings.batch_size,
        mp_context=settings.mp_context,
        worker_threads=settings.worker_threads,
        main_threads=settings.main_threads,
    )


def expand_grid(axes: GridAxes, *, cuda: bool) -> list[GridPoint]:
    """The cartesian product of the axes, normalised and de-duplicated, in grid order.

    Order: batch size, then num_workers, then pin_memory, prefetch, prefetch_factor,
    persistent_workers, mp_context (so rows of one batch size read as a worker curve).
    """
    points: dict[LoaderSettings, GridPoint] = {}
    for bs, nw, pin, pf, pfac, pers, ctx, wt, mt in itertools.product(
        axes.batch_size,
        axes.num_workers,
        axes.pin_memory,
        axes.prefetch,
        axes.prefetch_factor,
        axes.persistent_workers,
        axes.mp_context,
        axes.worker_threads,
        axes.main_threads,
    ):
        requested = LoaderSettings(
            num_workers=nw,
            pin_memory=pin,
            prefetch=pf,
            prefetch_factor=pfac,
            persistent_workers=pers,
            batch_size=bs,
            mp_context=ctx,
            worker_threads=wt,
            main_threads=mt,
        )
        real = normalize(requested, cuda=cuda)
        point = points.setdefault(real, GridPoint(real))
        if requested != real:
            point.normalized_from.append(requested.to_dict())
    return list(points.values())
