"""A plain PyTorch training loop, watched: the one-line change is the `for` line.

    python examples/plain_loop.py --output watch.json && loaderbench show watch.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SleepyDataset, tiny_model  # noqa: E402

import loaderbench  # noqa: E402


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--output", default="watch.json")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--sample-ms", type=float, default=1.0)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--epochs", type=int, default=1)
    a = p.parse_args(argv)
    loader = DataLoader(SleepyDataset(256, a.sample_ms), batch_size=16, shuffle=True, num_workers=a.num_workers)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with loaderbench.watch(loader, output=a.output) as w:
        for _epoch in range(a.epochs):
            for x, y in w:  # was: for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(a.step_ms / 1000.0)  # stands for the rest of a real step
    print(w.report())
    return Path(a.output)


if __name__ == "__main__":
    main()
