"""`loaderbench plot`: throughput and stall fraction against num_workers (matplotlib).

One line per pin_memory/prefetch combination (and per batch size, and per value of the loader's own
arguments, when there are several), the
compute ceiling as a horizontal line, the knee marked. Headless (Agg backend); imported only by
the plot command so other commands never load matplotlib.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from loaderbench.model import GRID_AXES, loader_arg_text
from loaderbench.results import ResultSet


def _series_label(pin: bool, prefetch: bool, batch: int, many_batches: bool, cuda: bool,
                  loader_args: tuple[tuple[str, Any], ...] = (), axes: tuple[tuple[str, str], ...] = ()) -> str:
    """`axes`: (name, cell) of the optional axes asked for (the decoder, in_order, ...)."""
    if cuda:
        label = f"pin {'on' if pin else 'off'}, prefetch {'on' if prefetch else 'off'}"
    else:
        label = "measured" if not loader_args and not axes else ""
    label = ", ".join([part for part in [label] if part] + [f"{k}={v}" for k, v in axes]
                      + [f"{k}={loader_arg_text(v)}" for k, v in loader_args])
    return f"{label}, batch {batch}" if many_batches else label


def plot_results(result_set: ResultSet, output: Path, *, width_in: float = 10.0, height_in: float = 7.0,
                 dpi: int = 100) -> Path:
    """Write a PNG of `width_in` x `height_in` inches at `dpi` (1000x700 px by default) to
    `output`: samples/s (top) and stall fraction (bottom) against num_workers. Returns the path.
    Raises OSError when the file cannot be written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cuda = bool((result_set.environment or {}).get("cuda_available"))
    ok = [r for r in result_set.results if r.status == "ok" and r.summary is not None]
    batches = sorted({r.settings.batch_size for r in ok})
    Series = tuple[bool, bool, int, tuple[tuple[str, Any], ...], tuple[tuple[str, str], ...]]
    series: dict[Series, list[tuple[int, float, float]]] = defaultdict(list)
    # A line per value of the loader's own arguments and of the optional axes asked for (the
    # decoder, in_order, the start method, threads), each named where it is not its default or
    # where the rows differ in it.
    varied = {a.name for a in GRID_AXES if a.optional and len({getattr(r.settings, a.name) for r in ok}) > 1}
    for r in ok:
        s = r.settings
        assert r.summary is not None
        axes = tuple((a.name, a.cell(getattr(s, a.name))) for a in GRID_AXES
                     if a.optional and (a.name in varied or getattr(s, a.name) != a.unset))
        series[(s.pin_memory, s.prefetch, s.batch_size, s.loader_args, axes)].append(
            (s.num_workers, r.summary.samples_per_s, r.summary.stall_fraction)
        )
    fig, (ax_rate, ax_stall) = plt.subplots(2, 1, sharex=True, figsize=(width_in, height_in), dpi=dpi)
    for (pin, pf, bs, args, axes), pts in sorted(series.items(), key=lambda kv: (kv[0][:3], repr(kv[0][3:]))):
        pts.sort()
        xs = [p[0] for p in pts]
        label = _series_label(pin, pf, bs, len(batches) > 1, cuda, args, axes)
        ax_rate.plot(xs, [p[1] for p in pts], marker="o", label=label)
        ax_stall.plot(xs, [100 * p[2] for p in pts], marker="o", label=label)
    shown = [] if result_set.analysis is None else result_set.analysis.compute_ceilings
    for c in shown:
        ax_rate.axhline(c.samples_per_s, linestyle="--", color="grey", linewidth=1)
        ax_rate.annotate(f"compute ceiling (batch {c.ceiling.batch_size}): {c.samples_per_s:,.0f}/s",
                         (0.01, c.samples_per_s), xycoords=("axes fraction", "data"),
                         va="bottom", fontsize=8, color="grey")
    rec = result_set.recommendation
    if rec is not None and rec.settings is not None:
        knee = next((r for r in ok if r.settings == rec.settings), None)
        if knee is not None and knee.summary is not None:
            ax_rate.plot([knee.settings.num_workers], [knee.summary.samples_per_s], marker="*",
                         markersize=18, color="crimson", linestyle="none", label="knee (recommended)")
            ax_stall.plot([knee.settings.num_workers], [100 * knee.summary.stall_fraction], marker="*",
                          markersize=18, color="crimson", linestyle="none")
    ax_stall.axhspan(0, 5, color="green", alpha=0.08, label="not input-bound (<5%)")
    ax_stall.axhspan(5, 20, color="orange", alpha=0.08, label="moderately input-bound (5-20%)")
    ax_stall.legend(fontsize=7, loc="upper right")
    ax_rate.set_ylabel("throughput (samples/s)")
    ax_stall.set_ylabel("stall fraction (%)")
    ax_stall.set_xlabel("num_workers")
    from matplotlib.ticker import MaxNLocator

    ax_stall.xaxis.set_major_locator(MaxNLocator(integer=True))
    tops = [r.summary.samples_per_s for r in ok if r.summary is not None] + [c.samples_per_s for c in shown]
    ax_rate.set_ylim(0, 1.12 * max(tops) if tops else None)
    ax_stall.set_ylim(0, 100)
    ax_rate.grid(alpha=0.3)
    ax_stall.grid(alpha=0.3)
    if series:
        ax_rate.legend(fontsize=8, loc="lower right")
    title = "loaderbench sweep" + (f" — {result_set.label}" if result_set.label else "")
    gpu = ((result_set.environment or {}).get("gpu") or {}).get("name") if cuda else "no GPU"
    fig.suptitle(f"{title} ({gpu})")
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=dpi)
    plt.close(fig)
    return output
