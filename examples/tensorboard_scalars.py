"""data-wait, step time, stall fraction and samples/s as TensorBoard scalars (`tensorboard=`).

    pip install "loaderbench[tensorboard]"
    python examples/tensorboard_scalars.py --logdir runs/watch && tensorboard --logdir runs
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from torch.utils.data import DataLoader
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SleepyDataset  # noqa: E402

import loaderbench  # noqa: E402


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--logdir", default="runs/watch")
    p.add_argument("--every", type=int, default=10)
    a = p.parse_args(argv)
    loader = DataLoader(SleepyDataset(512, 0.5), batch_size=8)
    writer = SummaryWriter(a.logdir)
    for _x, _y in loaderbench.watch(loader, tensorboard=writer, log_every_steps=a.every):  # was: in loader
        time.sleep(0.004)
    writer.close()
    return Path(a.logdir)


if __name__ == "__main__":
    main()
