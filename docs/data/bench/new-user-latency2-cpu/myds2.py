"""Three sleep-only map-style datasets, deterministic per index."""
import hashlib
import math
import time

import torch
from torch.utils.data import Dataset

N = 4096


def _u(idx, seed):
    """Deterministic uniform in (0,1) from a seeded hash of the index."""
    h = hashlib.blake2b(f"{seed}:{idx}".encode(), digest_size=8).digest()
    return (int.from_bytes(h, "little") + 0.5) / 2.0**64


class _Base(Dataset):
    def __len__(self):
        return N

    def latency_s(self, idx):
        raise NotImplementedError

    def __getitem__(self, idx):
        time.sleep(self.latency_s(idx))
        return torch.zeros(3, 32, 32), idx % 10


class TwoLevel(_Base):
    """~1 in 10 samples takes 40 ms, the rest 1.2 ms (33x); mean ~5.1 ms."""
    def latency_s(self, idx):
        return 0.040 if _u(idx, 11) < 0.10 else 0.0012


class LogNormal(_Base):
    """Lognormal latency, sigma 1.0, mean 15 ms (median ~9.1 ms)."""
    SIGMA = 1.0
    MEAN_MS = 15.0

    def latency_s(self, idx):
        u1, u2 = _u(idx, 21), _u(idx, 22)
        z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
        mu = math.log(self.MEAN_MS) - self.SIGMA**2 / 2
        return math.exp(mu + self.SIGMA * z) / 1000.0


class Blocks(_Base):
    """idx // 64 even: 2 ms, odd: 30 ms; mean 16 ms."""
    def latency_s(self, idx):
        return 0.002 if (idx // 64) % 2 == 0 else 0.030


def twolevel():
    return TwoLevel()


def lognormal():
    return LogNormal()


def blocks():
    return Blocks()
