"""Host-to-device copy bandwidth: pageable vs pinned, against what the PCIe link allows.

NOTE [why measure this]
    `non_blocking=True` copies overlap compute only from page-locked (pinned) memory; from
    pageable memory the driver stages the data through a pinned bounce buffer and the host
    waits. The gap is large (7.0 vs 55 GB/s on the H200 machine, docs/benchmarks.md), and it
    is the yardstick for the per-config H2D GB/s the sweep reports.
"""

from __future__ import annotations

import statistics
from typing import Any

# Usable bytes per second per lane after line encoding, in GB/s (PCI-SIG: 8b/10b for gen 1-2,
# 128b/130b for gen 3-5; gen 6 uses FLIT mode, about 7.56 GB/s per lane).
PCIE_LANE_GB_PER_S = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.56}
# Achievable share of the link for large H2D copies: DMA and protocol overhead leave about
# 70-95% of the encoded rate in practice.
EXPECTED_BAND = (0.70, 0.95)


def pcie_expected_gb_per_s(gen: int | None, width: int | None) -> dict[str, Any] | None:
    """The link's encoded rate and the expected band of a large pinned copy, in GB/s, or None
    when the generation or width is unknown."""
    if not gen or not width or gen not in PCIE_LANE_GB_PER_S:
        return None
    link = PCIE_LANE_GB_PER_S[gen] * width
    return {
        "link_gb_per_s": link,
        "expected_low_gb_per_s": link * EXPECTED_BAND[0],
        "expected_high_gb_per_s": link * EXPECTED_BAND[1],
    }


def measure_h2d_bandwidth(size_bytes: int = 256 << 20, repeats: int = 5, device: int = 0) -> dict[str, Any]:
    """Median H2D GB/s of a `size_bytes` copy from pageable and from pinned memory (CUDA events,
    after one warm-up copy each). Raises RuntimeError without CUDA."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    dev = torch.device("cuda", device)
    dst = torch.empty(size_bytes, dtype=torch.uint8, device=dev)
    out: dict[str, Any] = {"size_bytes": size_bytes, "repeats": repeats}
    for name, pinned in (("pageable", False), ("pinned", True)):
        src = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=pinned)
        src.fill_(1)
        rates = []
        for i in range(repeats + 1):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            dst.copy_(src, non_blocking=pinned)
            end.record()
            end.synchronize()
            if i:
                rates.append(size_bytes / (begin.elapsed_time(end) / 1000.0) / 1e9)
        out[f"{name}_gb_per_s"] = statistics.median(rates)
    out["pinned_over_pageable"] = out["pinned_gb_per_s"] / out["pageable_gb_per_s"]
    return out
