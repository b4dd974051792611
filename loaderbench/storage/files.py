"""The files of a dataset on disk: listing and size statistics.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loaderbench.errors import DataError

# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def list_files(root: str | os.PathLike[str], *, extensions: Sequence[str] | None = None) -> list[Path]:
    """Every regular file under `root` (or `[root]` when it is a file), sorted by path.

    `extensions` (e.g. torchvision's IMG_EXTENSIONS, matched case-insensitively) keeps only the
    files a folder dataset would load. Hidden files count like any other. Raises `DataError` when
    `root` does not exist; an empty folder gives `[]`.
    """
    base = Path(root)
    if not base.exists():
        raise DataError(f"{base} does not exist; give an existing file or folder")
    exts = tuple(e.lower() for e in extensions) if extensions else None

    def keep(name: str) -> bool:
        return exts is None or name.lower().endswith(exts)

    if base.is_file():
        return [base] if keep(base.name) else []
    out: list[Path] = []
    for dirpath, _dirnames, filenames in os.walk(base):
        for name in filenames:
            p = Path(dirpath) / name
            if keep(name) and p.is_file():
                out.append(p)
    out.sort()
    return out


@dataclass(frozen=True)
class FileStats:
    """File count and size distribution in bytes (percentiles by nearest rank)."""

    count: int
    total_bytes: int
    min_bytes: int
    p50_bytes: int
    p95_bytes: int
    max_bytes: int
    mean_bytes: float


def size_stats(sizes: Sequence[int]) -> FileStats:
    """`FileStats` of `sizes` (bytes); all zeros for no files."""
    if not sizes:
        return FileStats(0, 0, 0, 0, 0, 0, 0.0)
    xs = sorted(int(s) for s in sizes)

    def rank(q: float) -> int:
        i = max(0, min(len(xs) - 1, int(-(-q * len(xs) // 100)) - 1))  # nearest rank, ceil(q*n)
        return xs[i]

    total = sum(xs)
    return FileStats(len(xs), total, xs[0], rank(50), rank(95), xs[-1], total / len(xs))


def file_sizes(paths: Iterable[Path]) -> list[int]:
    """The size in bytes of each of `paths` (files that vanished are left out)."""
    out = []
    for p in paths:
        try:
            out.append(os.stat(p).st_size)
        except OSError:
            out.append(0)
    return out
