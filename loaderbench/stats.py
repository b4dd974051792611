"""Statistics shared by the measuring process and the analysis (pure: no torch, no I/O, imports
nothing of the package)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["split_threshold"]


def split_threshold(values: Sequence[float]) -> tuple[float, float, float] | None:
    """Otsu's threshold of a 1-D sample (N. Otsu, "A threshold selection method from gray-level
    histograms", IEEE Trans. SMC 9(1), 1979): the split maximising the between-class variance.
    Returns (threshold, mean below, mean above), or None for fewer than two distinct values."""
    v = sorted(values)
    n, total = len(v), sum(v)
    best: tuple[float, float, float] | None = None
    best_var = -1.0
    below = 0.0
    for k in range(1, n):
        below += v[k - 1]
        if v[k] <= v[k - 1]:
            continue
        m0, m1 = below / k, (total - below) / (n - k)
        var = (k / n) * (1 - k / n) * (m1 - m0) ** 2
        if var > best_var:
            best_var, best = var, ((v[k - 1] + v[k]) / 2, m0, m1)
    return best
