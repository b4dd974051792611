"""data-wait, H2D and the step as named ranges in a torch.profiler trace (and NVTX on CUDA):
`annotate=True`.

    python examples/profiler_ranges.py --trace trace.json   # open in chrome://tracing or Perfetto
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SleepyDataset, tiny_model  # noqa: E402

import loaderbench  # noqa: E402


def main(argv: list[str] | None = None) -> set[str]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trace", default=None)
    a = p.parse_args(argv)
    loader = DataLoader(SleepyDataset(64, 0.5), batch_size=8)
    model = tiny_model()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for x, _y in loaderbench.watch(loader, annotate=True, device=device):  # was: for x, _y in loader:
            model(x).sum().backward()
    if a.trace:
        prof.export_chrome_trace(a.trace)
    names = {e.name for e in prof.events() if e.name.startswith("loaderbench.")}
    print("ranges:", ", ".join(sorted(names)))
    return names


if __name__ == "__main__":
    main()
