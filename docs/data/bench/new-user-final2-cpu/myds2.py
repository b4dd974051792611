"""Datasets with a known per-sample cost, fixed by a hash of the index."""
import hashlib
import time

import torch
from torch.utils.data import Dataset


def _h(i, salt=""):
    return int.from_bytes(hashlib.blake2b(f"{salt}{i}".encode(), digest_size=8).digest(), "big")


class TailSleep(Dataset):
    """Claim 1: most samples sleep 20 ms, 1 in 20 (by hash) sleeps 200 ms. Mean 29 ms."""
    def __init__(self, n=640, base_ms=20.0, tail_ms=200.0, tail_every=20):
        self.n, self.base, self.tail, self.every = n, base_ms, tail_ms, tail_every

    def cost_ms(self, i):
        return self.tail if _h(i, "tail") % self.every == 0 else self.base

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.cost_ms(i) / 1000)
        return torch.full((3, 32, 32), float(i % 7)), i % 10


def tail_sleep(**kw):
    return TailSleep(**kw)


class PyCPU(Dataset):
    """Claim 2: pure-Python busy work, ~3-5 ms per sample (fixed iteration count by hash)."""
    def __init__(self, n=640, mean_ms=4.0):
        self.n = n
        # calibrate iterations per ms once, in the process that builds the dataset
        it = 200_000
        t = time.perf_counter(); _spin(it); dt = time.perf_counter() - t
        self.it_per_ms = it / (dt * 1000)
        self.mean_ms = mean_ms

    def cost_ms(self, i):
        return self.mean_ms * (0.75 + 0.5 * (_h(i, "cpu") % 1000) / 999)  # 3..5 ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        _spin(int(self.cost_ms(i) * self.it_per_ms))
        return torch.full((3, 32, 32), float(i % 7)), i % 10


def _spin(n):
    x = 0
    for k in range(n):
        x += k * k
    return x


def py_cpu(**kw):
    return PyCPU(**kw)


class FlatSleep(Dataset):
    """Claim 3: every sample sleeps 5 ms."""
    def __init__(self, n=640, ms=5.0):
        self.n, self.ms = n, ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.ms / 1000)
        return torch.full((3, 32, 32), float(i % 7)), i % 10


def flat_sleep(**kw):
    return FlatSleep(**kw)


def cpu_step(device, ms=30.0):
    """Claim 2 (extra): a train step that burns ~ms of pure-Python CPU (fixed iteration count)."""
    it = 200_000
    t = time.perf_counter(); _spin(it); dt = time.perf_counter() - t
    n = int(ms * it / (dt * 1000))

    def step(batch):
        _spin(n)
    return step
