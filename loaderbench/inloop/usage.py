"""The watched window's resource use: the window meter's readings summed over the window's
segments (a `result()` asked for while training goes on ends a segment; the next measured step
starts another)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loaderbench.machine.gpu import GpuUtilReading
from loaderbench.measure.meter import WindowReading


@dataclass
class SegmentedUsage:
    """The sums of the meter's readings (measure.meter.WindowReading) over the segments: wall,
    CPU and main-process CPU seconds summed; the most processes alive; the last memory reading;
    the GPU utilisation weighted by each segment's window (a segment without a utilisation
    leaves its note instead)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    main_cpu_s: float = 0.0
    processes: int = 0
    memory_uss_bytes: int | None = None
    memory_pss_bytes: int | None = None
    util_weighted: float = 0.0
    util_window_s: float = 0.0
    util_note: str | None = None
    readings: int = 0

    def add(self, r: Any) -> None:
        """Add one segment's `WindowReading`."""
        self.readings += 1
        self.wall_s += r.wall_s
        self.cpu_s += r.cpu_s
        self.main_cpu_s += r.main_cpu_s
        self.processes = max(self.processes, r.processes)
        self.memory_uss_bytes = r.memory_uss_bytes
        self.memory_pss_bytes = r.memory_pss_bytes
        util = r.util
        if util is not None and getattr(util, "util_pct", None) is not None:
            w = float(getattr(util, "window_s", None) or r.wall_s or 1.0)
            self.util_weighted += float(util.util_pct) * w
            self.util_window_s += w
        elif util is not None:
            self.util_note = getattr(util, "note", None) or self.util_note

    def reading(self) -> WindowReading | None:
        """The whole window as one `WindowReading` (None before the first segment ended): other
        load, steal and storage reads are not summed (None)."""
        if not self.readings:
            return None
        util = GpuUtilReading(
            util_pct=self.util_weighted / self.util_window_s if self.util_window_s > 0 else None,
            window_s=self.util_window_s, sample_period_s=None, n_samples=self.readings,
            note=self.util_note or "", method="segments",
        )
        return WindowReading(
            wall_s=self.wall_s, cpu_s=self.cpu_s, main_cpu_s=self.main_cpu_s, processes=self.processes,
            memory_uss_bytes=self.memory_uss_bytes, memory_pss_bytes=self.memory_pss_bytes,
            read_bytes=None, util=util,
        )
