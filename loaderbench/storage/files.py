"""The files of a dataset on disk: listing and size statistics.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loaderbench.errors import DataError
from loaderbench.kinds import KINDS
from loaderbench.model import DatasetSpec

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


def data_files(spec: DatasetSpec) -> list[Path]:
    """Every file under the --data paths of `spec` (`spec.data_roots`), sorted per root: for the
    folder dataset the image files ImageFolder loads, for any other kind every regular file.
    [] when no path was given.

    Raises `DataError` (one line naming the path and the fix) when a path does not exist, cannot
    be read, or holds no files.
    """
    kind = KINDS.get(spec.kind)
    exts: Sequence[str] | None = None
    if kind is not None and kind.file_extensions == "images":
        from torchvision.datasets.folder import IMG_EXTENSIONS

        exts = IMG_EXTENSIONS
    out: list[Path] = []
    for root in spec.data_roots:
        base = Path(root)
        if not base.exists():
            raise DataError(f"--data {root}: no such file or folder; give the folder your dataset reads")
        if not os.access(base, os.R_OK) or (base.is_dir() and not os.access(base, os.X_OK)):
            raise DataError(f"--data {root}: not readable by this user; fix its permissions or run as its owner")
        try:
            files = list_files(base, extensions=exts)
        except OSError as exc:
            raise DataError(f"--data {root}: cannot be listed ({exc.strerror or exc})") from None
        if not files:
            what = "no image files" if exts else "no files"
            raise DataError(f"--data {root}: {what} under it; give the folder that holds the dataset's files")
        out.extend(files)
    return out
