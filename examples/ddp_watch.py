"""Every rank of a torchrun job watches its own DataLoader; the result gives each rank's figures
and the slowest rank. Rank 1's samples cost 2 ms each, rank 0's nothing, so rank 1 is slow.

    torchrun --standalone --nproc-per-node 2 examples/ddp_watch.py --output watch.json
    loaderbench show watch.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SleepyDataset, tiny_model  # noqa: E402

import loaderbench  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--output", default="watch.json")
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args(argv)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dataset = SleepyDataset(16 * a.steps * dist.get_world_size(), 2.0 if rank == 1 else 0.0)
    loader = DataLoader(dataset, batch_size=16, sampler=DistributedSampler(dataset))
    model = DistributedDataParallel(tiny_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = loaderbench.watch(loader)
    for x, y in w:  # was: for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()  # the gradient all-reduce: a rank whose loader is late holds the other back
        opt.step()
    w.save(a.output)  # every rank calls it (it gathers); rank 0 writes
    if rank == 0:
        print(w.report())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
