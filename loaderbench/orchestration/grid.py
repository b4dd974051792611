"""Expand the sweep grid into `LoaderSettings`, normalising what the DataLoader would reject.

NOTE [grid normalisation]
    `torch.utils.data.DataLoader` rejects `prefetch_factor` (any value but None on torch >= 2.0)
    and `persistent_workers=True` when `num_workers == 0` (and worker threads or a start method
    mean nothing there), and `pin_memory` / the CUDA-stream prefetcher mean nothing without
    CUDA. Rather than crash or measure the same thing twice, such combinations are mapped onto
    the one config they really are (each axis says when it is idle: `Axis.workers_only`,
    `Axis.cuda_only`), measured once, and the merged combinations are kept in `normalized_from`
    so the table can show them as n/a.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loaderbench.model import GRID_AXES, LoaderSettings


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
    values = settings.to_dict()
    for a in GRID_AXES:
        if (a.cuda_only and not cuda) or (a.workers_only and settings.num_workers == 0):
            values[a.name] = a.idle
    return LoaderSettings(**values)


def expand_grid(axes: Mapping[str, Sequence[Any]], *, cuda: bool,
                loader_args: Mapping[str, Sequence[Any]] | None = None) -> list[GridPoint]:
    """The cartesian product of the axes (every axis of GRID_AXES, each a non-empty sequence)
    and of the `loader_args` (name -> values, `--loader-arg`), normalised and de-duplicated, in
    grid order: the outer axis (batch size) first, then the others in GRID_AXES order, the
    loader arguments innermost, so the rows of one batch size read as a worker curve. Each
    config records where its loader arguments' values, and those of the axes without a cost
    order (`Axis.listed`), stood in their lists (`LoaderSettings.loader_arg_order` and
    `axis_order`: their only cost order). Raises KeyError for a missing axis."""
    order = sorted(GRID_AXES, key=lambda a: not a.outer)
    extra = list((loader_args or {}).items())
    points: dict[LoaderSettings, GridPoint] = {}
    for combo in itertools.product(*(range(len(axes[a.name])) for a in order), *(range(len(v)) for _, v in extra)):
        picks = combo[len(order):]
        requested = LoaderSettings(
            **{a.name: axes[a.name][i] for a, i in zip(order, combo)},
            loader_args=tuple((name, values[i]) for (name, values), i in zip(extra, picks)),
            loader_arg_order=tuple(picks),
            axis_order=tuple((a.name, i) for a, i in zip(order, combo) if a.listed),
        )
        real = normalize(requested, cuda=cuda)
        point = points.setdefault(real, GridPoint(real))
        if requested != real:
            point.normalized_from.append(requested.to_dict())
    return list(points.values())
