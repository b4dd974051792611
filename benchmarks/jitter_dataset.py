"""A map-style dataset of jittered per-sample latency, for the loader-ceiling checks (no device):

    --dataset import:benchmarks.jitter_dataset:JitteredLatency

Sample i sleeps 5 + 50 * u**3 ms (u uniform, seeded by i; every 17th sample's latency part four
times longer), a storage latency with a long tail that uses almost no CPU, and returns a 3 x 32 x 32
float tensor and a label. Batch 8 builds in ~0.14 s on average, 40 ms to ~1 s.
"""

from __future__ import annotations

import random
import time

import torch
from torch.utils.data import Dataset


def latency_s(i: int) -> float:
    """Sample i's latency in seconds (the module docstring's)."""
    u = random.Random(i).random()
    return (5.0 + 50.0 * u ** 3 * (4.0 if i % 17 == 0 else 1.0)) / 1000.0


class JitteredLatency(Dataset):
    """`length` samples of the latency in the module docstring."""

    def __init__(self, length: int = 100_000) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(latency_s(i))
        return torch.zeros(3, 32, 32), i % 10
