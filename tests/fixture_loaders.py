"""Users' own loaders, samplers and train steps, for the tests of `--loader`, `--loader-arg`, the
recommended call and `--compute step:` (the measuring processes import this module by name, from
the repository root)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, Sampler

# ---------------------------------------------------------------------------------------------
# Token-budget batches: sequences of 16, 64 or 256 tokens, batched up to a 1,024-token budget.

LENGTHS = (16, 64, 256)
TOKEN_BUDGET = 1024


class Tokens(Dataset):
    """Item i: int64 token ids of length LENGTHS[i % 3] (values i, so a batch names its items)."""

    def __init__(self, n: int = 600) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((LENGTHS[i % 3],), i, dtype=torch.int64)


def make_tokens(n: int = 600) -> Tokens:
    return Tokens(n)


def pad_collate(items: list[torch.Tensor]) -> torch.Tensor:
    """(B, longest) int64, padded with -1."""
    out = torch.full((len(items), max(len(t) for t in items)), -1, dtype=torch.int64)
    for row, t in enumerate(items):
        out[row, : len(t)] = t
    return out


def _budget_batches(dataset: Any, seed: int, budget: int = TOKEN_BUDGET) -> list[list[int]]:
    order = np.random.default_rng(seed).permutation(len(dataset)).tolist()
    batches, batch, tokens = [], [], 0
    for i in order:
        n = LENGTHS[i % 3]
        if batch and tokens + n > budget:
            batches.append(batch)
            batch, tokens = [], 0
        batch.append(int(i))
        tokens += n
    if batch:
        batches.append(batch)
    return batches


class BudgetBatches(Sampler):
    """Index lists of at most `budget` tokens each, in a seeded random order."""

    def __init__(self, dataset: Any, seed: int = 0, budget: int = TOKEN_BUDGET) -> None:
        self.batches = _budget_batches(dataset, seed, budget)

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def make_sampler(dataset: Any, seed: int = 0) -> BudgetBatches:
    """The token-budget batch sampler: takes the dataset and a seed, no batch_size."""
    return BudgetBatches(dataset, seed)


# Batch-sampler factories of every signature the sweep accepts (sampling.accepted_keywords).

def bs_dataset_only(dataset):
    return BatchSampler(range(len(dataset)), 8, drop_last=False)


def bs_batch_size(dataset, batch_size):
    return BatchSampler(range(len(dataset)), batch_size, drop_last=False)


def bs_everything(dataset, batch_size, seed, rank, world_size):
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return BatchSampler(RandomSampler(range(rank, len(dataset), world_size), generator=gen), batch_size, drop_last=False)


def bs_kwargs(dataset, **kw):
    gen = torch.Generator().manual_seed(kw["seed"])
    return BatchSampler(RandomSampler(dataset, generator=gen), kw["batch_size"], drop_last=False)


def bs_keyword_only(dataset, *, batch_size=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return BatchSampler(RandomSampler(dataset, generator=gen), batch_size, drop_last=False)


def bs_positional_only(dataset, batch_size=8, /):
    return BatchSampler(range(len(dataset)), batch_size, drop_last=False)


class BucketBatchSampler(Sampler):
    """A class as the factory: `BucketBatchSampler(dataset, batch_size, seed=0)`."""

    def __init__(self, dataset, batch_size, seed=0):
        self.inner = BatchSampler(RandomSampler(dataset, generator=torch.Generator().manual_seed(seed)),
                                  batch_size, drop_last=False)

    def __iter__(self):
        return iter(self.inner)

    def __len__(self):
        return len(self.inner)


# Sampler factories (they yield indices; the DataLoader batches them).

def s_dataset_only(dataset):
    return range(len(dataset))


def s_seed(dataset, seed):
    return RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))


def s_kwargs(dataset, **kw):
    return RandomSampler(dataset, generator=torch.Generator().manual_seed(kw["seed"] + kw["rank"]))


# ---------------------------------------------------------------------------------------------
# Loaders.


class SnapshotLoader(DataLoader):
    """A DataLoader subclass with a setting of its own (as torchdata's StatefulDataLoader has)."""

    def __init__(self, *args: Any, snapshot_every: int = 1, mode: str = "fast", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.snapshot_every = snapshot_every
        self.mode = mode


class _Generated:
    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        yield from self.loader  # a generator: none of torch's iterator internals show


def generator_loader(dataset: Any, **kwargs: Any) -> _Generated:
    """A factory called like DataLoader whose loader iterates through a generator."""
    return _Generated(DataLoader(dataset, **kwargs))


# ---------------------------------------------------------------------------------------------
# An IterableDataset whose state costs: 15 ms per state_dict(), 1 ms per sample.


class CostlyState(IterableDataset):
    """Ids 0..n-1 split across workers, 1 ms (sleep) each; `state_dict()` sleeps 15 ms, as a
    dataset that snapshots a shard reader's position and buffers would."""

    def __init__(self, n: int = 100_000, sample_ms: float = 1.0, state_ms: float = 15.0) -> None:
        self.n = n
        self.sample_s = sample_ms / 1000.0
        self.state_s = state_ms / 1000.0
        self.position = 0

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(wid, self.n, workers):
            time.sleep(self.sample_s)
            self.position = i
            yield torch.tensor([i], dtype=torch.int64)

    def state_dict(self) -> dict[str, int]:
        time.sleep(self.state_s)
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


def make_costly_state(n: int = 100_000) -> CostlyState:
    return CostlyState(n)


# ---------------------------------------------------------------------------------------------
# Train steps: FACTORY(device) returns a callable taking one batch on the device.


class Features(Dataset):
    def __init__(self, n: int = 1024, dim: int = 64) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=gen)
        self.y = torch.randint(0, 10, (n,), generator=gen)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def make_features(n: int = 1024, dim: int = 64) -> Features:
    return Features(n, dim)


def make_mlp_step(device: torch.device):
    """A small MLP (64 -> 512 -> 512 -> 10) trained with Adam: forward, loss, backward, update."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10),
    ).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(batch):
        x, y = batch
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.model = model  # type: ignore[attr-defined]
    return step


def make_resnet50_step(device: torch.device):
    """The user's own ResNet-50 step, built as loaderbench's model:resnet50 is (weights=None,
    channels_last, SGD lr=0.01 momentum=0.9, bf16 autocast on CUDA, cross-entropy), on the
    batches of the synthetic dataset (uint8 images normalized on the device, labels)."""
    import torchvision

    from loaderbench.workload.compute import normalize_on_device

    model = torchvision.models.resnet50(weights=None, num_classes=1000).to(device, memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    cuda = torch.device(device).type == "cuda"

    def step(batch):
        images, labels = batch
        x = normalize_on_device(images).contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
            loss = loss_fn(model(x), labels.to(torch.int64) % 1000)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def make_step_raises(device):
    raise FileNotFoundError("checkpoint.pt")


def make_step_not_callable(device):
    return {"model": None}


def make_step_fails_first(device):
    def step(batch):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (16x3 and 64x10)")

    return step


NOT_A_FUNCTION = 3


def make_ddp_mlp_step(device: torch.device):
    """The MLP step as a distributed training script writes it: the process group already
    initialised (RuntimeError otherwise), the model wrapped in DistributedDataParallel here."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError("no process group: the factory expects a distributed sweep")
    step = make_mlp_step(device)
    ddp = torch.nn.parallel.DistributedDataParallel(step.model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)

    def ddp_step(batch):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()  # the gradients' all-reduce, in buckets
        opt.step()
        opt.zero_grad(set_to_none=True)

    ddp_step.world_size = dist.get_world_size()  # type: ignore[attr-defined]
    return ddp_step


def fixed_loader(dataset: Any, batch_size: int | None = 1, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Any = None, pin_memory: bool = False, prefetch_factor: int | None = None,
                 persistent_workers: bool = False) -> DataLoader:
    """A factory that takes DataLoader's older keywords only (no in_order, no **kwargs)."""
    return DataLoader(dataset, batch_size=batch_size, batch_sampler=batch_sampler, num_workers=num_workers,
                      collate_fn=collate_fn, pin_memory=pin_memory, prefetch_factor=prefetch_factor,
                      persistent_workers=persistent_workers)
