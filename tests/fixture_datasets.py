"""User datasets for end-to-end tests, given to `--dataset tests.fixture_datasets:NAME`."""

from __future__ import annotations

import os
import signal
import time
from collections import namedtuple

import torch
from torch.utils.data import Dataset, get_worker_info

Meta = namedtuple("Meta", ["path", "index"])


class Nested(Dataset):
    """A typical self-supervised sample: (imgs, img, patch2, theta, meta) with strings in meta."""

    def __init__(self, n: int = 64, size: int = 8) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        img = torch.full((3, self.size, self.size), float(i))
        return (
            [img, img + 1],
            img,
            {"patch2": img[:, :4, :4].clone(), "label": i % 10},
            torch.eye(2, 3),
            Meta(path=f"/data/img_{i:05d}.jpg", index=i),
        )


def make_nested(n: int = 64, size: int = 8) -> Dataset:
    return Nested(n=n, size=size)


class FailsInWorkers(Dataset):
    """Fine in the main process; inside a worker every third index raises (a corrupt sample)."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int):
        if get_worker_info() is not None and i % 3 == 0:
            raise ValueError(f"corrupt sample at index {i}")
        return torch.zeros(4)


def make_fails_in_workers() -> Dataset:
    return FailsInWorkers()


class Mixed(Dataset):
    """One sweep, one fault per worker count (case C12, issue 7): 1 worker hangs, 2 workers die of
    SIGKILL, 3 raise, 4 die of SIGBUS (what a full /dev/shm does), 5 of SIGSEGV; 0 and 6 work."""

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int):
        info = get_worker_info()
        n = 0 if info is None else info.num_workers
        if n == 1:
            time.sleep(3600)
        if n == 3 and i % 2 == 0:
            raise ValueError(f"corrupt sample at index {i}")
        signals = {2: signal.SIGKILL, 4: signal.SIGBUS, 5: signal.SIGSEGV}
        if n in signals:
            os.kill(os.getpid(), signals[n])
        return torch.zeros(4)


def make_mixed() -> Dataset:
    return Mixed()


def collate_as_dict(samples):
    return {"x": torch.stack([s[1] for s in samples]), "paths": [s[4].path for s in samples]}


class Stream(torch.utils.data.IterableDataset):
    """An IterableDataset that does not split by worker (every worker replays it, case C22)."""

    def __iter__(self):
        for i in range(4000):
            yield torch.tensor([i])


def make_stream() -> torch.utils.data.IterableDataset:
    return Stream()


def make_empty() -> Dataset:
    return torch.utils.data.TensorDataset(torch.zeros(0, 3))


def make_always_fails() -> Dataset:
    return FailsEverywhere()


class FailsEverywhere(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        raise OSError(f"cannot read sample {i}")


def make_slow_factory():
    time.sleep(30)
    return Nested()


class SplitStream(torch.utils.data.IterableDataset):
    """The same stream, split across workers with get_worker_info() (case C22, variant 2)."""

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, 4000, step):
            yield torch.tensor([i])


def make_split_stream() -> torch.utils.data.IterableDataset:
    return SplitStream()


class RankSkewed(Dataset):
    """Small tensors; on rank 1 (env RANK, inherited by the DataLoader's workers) each sample
    sleeps `slow_ms`: rank 1's loader is the slow one of a distributed sweep."""

    def __init__(self, n: int = 4096, slow_ms: float = 2.0) -> None:
        self.n = n
        self.slow_s = slow_ms / 1000.0 if os.environ.get("RANK") == "1" else 0.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.slow_s:
            time.sleep(self.slow_s)
        return torch.zeros(3, 8, 8), i % 10


def make_rank_skewed() -> Dataset:
    return RankSkewed()


class RankFaulty(Dataset):
    """Fine on rank 0 and in the main process; in rank 1's DataLoader workers, raises when the
    loader has 1 worker and hangs when it has 2."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        info = get_worker_info()
        if info is not None and os.environ.get("RANK") == "1":
            if info.num_workers == 1:
                raise ValueError(f"corrupt sample {i} on rank 1")
            if info.num_workers == 2:
                time.sleep(3600)
        return torch.zeros(3, 8, 8), i % 10


def make_rank_faulty() -> Dataset:
    return RankFaulty()


def make_rank_stuck() -> Dataset:
    """Rank 1 takes 30 s per sample: its measuring process sits in a load, not in a collective."""
    return RankSkewed(slow_ms=30_000.0)
