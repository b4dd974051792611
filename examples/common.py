"""What the examples share: a dataset whose samples cost a known time (a sleep standing for
reading and decoding), so each example's figures can be checked against arithmetic."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class SleepyDataset(Dataset):
    """`n` samples of shape (3, 8, 8) with a label; each costs `ms` milliseconds of sleep."""

    def __init__(self, n: int = 512, ms: float = 1.0) -> None:
        self.n, self.ms = n, ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.ms / 1000.0)
        return torch.full((3, 8, 8), float(i % 7)), i % 10


def tiny_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))
