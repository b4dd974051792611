"""The ranks of a distributed trial, inside each rank's measuring process: the trial's process
group (`RankGroup`: agree on the window, barriers) and each rank's shard of the sampled indices
(`RankShard`). The parent-side orchestration is in distributed.py."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from typing import Any


class RankShard:
    """Every `world_size`-th index of `sampler`, starting at `rank`: the same seeded stream on
    every rank, cut into disjoint shards, as torch's DistributedSampler cuts a permutation.

    Used where the dataset's length is arbitrary (synthetic, tensor, --epoch-batches): the
    base sampler draws `per_rank x world_size` indices, so each rank gets `per_rank`.
    """

    def __init__(self, sampler: Any, rank: int, world_size: int) -> None:
        self.sampler = sampler
        self.rank = rank
        self.world_size = world_size

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.world_size + (1 if self.rank < n % self.world_size else 0)

    def __iter__(self) -> Iterator[int]:
        for i, index in enumerate(self.sampler):
            if i % self.world_size == self.rank:
                yield index


class RankGroup:
    """The process group of one trial's measuring processes (one per rank).

    `spec` comes from the job (`rank`, `world_size`, `local_rank`, `store_host`, `store_port`,
    `prefix`, `timeout_s`). Backend NCCL when `device` is CUDA, else gloo; loop decisions
    (`agree`, `barrier`) always go over gloo on the host, so they never wait for the GPU.
    """

    def __init__(self, spec: dict[str, Any], device: Any) -> None:
        import torch.distributed as dist
        from torch.distributed import PrefixStore, TCPStore

        self.dist = dist
        self.rank = int(spec["rank"])
        self.world_size = int(spec["world_size"])
        self.local_rank = int(spec.get("local_rank", self.rank))
        timeout = _dt.timedelta(seconds=float(spec.get("timeout_s", 300)) + 60)
        store = TCPStore(
            spec["store_host"], int(spec["store_port"]), is_master=False, timeout=timeout,
        )
        self.cuda = getattr(device, "type", "cpu") == "cuda"
        backend = "nccl" if self.cuda else "gloo"
        kwargs: dict[str, Any] = {}
        if self.cuda:
            kwargs["device_id"] = device
        dist.init_process_group(
            backend, store=PrefixStore(spec["prefix"], store), rank=self.rank,
            world_size=self.world_size, timeout=timeout, **kwargs,
        )
        self.control: Any = dist.new_group(backend="gloo") if self.cuda else None

    def agree(self, flag: bool) -> bool:
        """True when `flag` is true on every rank (a MIN all-reduce over gloo; blocks until every
        rank asks)."""
        import torch

        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN, group=self.control)
        return bool(t.item())

    def barrier(self) -> None:
        self.dist.barrier(group=self.control)
