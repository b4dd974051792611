"""Test datasets with known per-sample costs (nu24)."""
import math
import time

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

ITERS_PER_MS = 43000  # calibrated on this machine (one idle core)


def burn(ms):
    """Fixed CPU work of ~ms milliseconds on an idle core."""
    x = 0
    for i in range(int(ms * ITERS_PER_MS)):
        x += i
    return x


class MapDS(Dataset):
    def __init__(self, n, cpu_ms=0.0, io_ms=0.0, shape=(3, 32, 32)):
        self.n, self.cpu_ms, self.io_ms, self.shape = n, cpu_ms, io_ms, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.io_ms:
            time.sleep(self.io_ms / 1000)
        if self.cpu_ms:
            burn(self.cpu_ms)
        return torch.zeros(self.shape), i % 10


class BufferedStream(IterableDataset):
    """Each worker fills a buffer of `buf` finished items in __iter__ before yielding,
    then builds one new item per yielded item (shuffle-buffer style)."""

    def __init__(self, n, cpu_ms, buf, shape=(3, 32, 32)):
        self.n, self.cpu_ms, self.buf, self.shape = n, cpu_ms, buf, shape

    def _item(self, i):
        burn(self.cpu_ms)
        return torch.zeros(self.shape), i % 10

    def __iter__(self):
        wi = get_worker_info()
        wid, nw = (wi.id, wi.num_workers) if wi else (0, 1)
        idx = iter(range(wid, self.n, nw))
        buffer = []
        for i in idx:
            buffer.append(self._item(i))
            if len(buffer) >= self.buf:
                break
        for i in idx:
            yield buffer.pop(0)
            buffer.append(self._item(i))
        while buffer:
            yield buffer.pop(0)


class BlockStream(IterableDataset):
    """Each worker fills a block of `buf` finished items in __iter__, yields the whole block, repeats."""

    def __init__(self, n, cpu_ms, buf, shape=(3, 32, 32)):
        self.n, self.cpu_ms, self.buf, self.shape = n, cpu_ms, buf, shape

    def __iter__(self):
        wi = get_worker_info()
        wid, nw = (wi.id, wi.num_workers) if wi else (0, 1)
        buffer = []
        for i in range(wid, self.n, nw):
            burn(self.cpu_ms)
            buffer.append((torch.zeros(self.shape), i % 10))
            if len(buffer) >= self.buf:
                yield from buffer
                buffer = []
        yield from buffer


class ShardStream(IterableDataset):
    """Shards (files) of given sizes; worker w reads shards w, w+nw, ... ."""

    def __init__(self, shard_sizes, io_ms=0.0, cpu_ms=0.0, shape=(3, 32, 32)):
        self.sizes, self.io_ms, self.cpu_ms, self.shape = list(shard_sizes), io_ms, cpu_ms, shape

    def __iter__(self):
        wi = get_worker_info()
        wid, nw = (wi.id, wi.num_workers) if wi else (0, 1)
        for s in range(wid, len(self.sizes), nw):
            for j in range(self.sizes[s]):
                if self.io_ms:
                    time.sleep(self.io_ms / 1000)
                if self.cpu_ms:
                    burn(self.cpu_ms)
                yield torch.zeros(self.shape), s


class SplitStream(IterableDataset):
    """Properly split stream: n items, per-item sleep/cpu."""

    def __init__(self, n, io_ms=0.0, cpu_ms=0.0, shape=(3, 32, 32)):
        self.n, self.io_ms, self.cpu_ms, self.shape = n, io_ms, cpu_ms, shape

    def __len__(self):
        return self.n

    def __iter__(self):
        wi = get_worker_info()
        wid, nw = (wi.id, wi.num_workers) if wi else (0, 1)
        for i in range(wid, self.n, nw):
            if self.io_ms:
                time.sleep(self.io_ms / 1000)
            if self.cpu_ms:
                burn(self.cpu_ms)
            yield torch.zeros(self.shape), i % 10


class EpochIndexStream(IterableDataset):
    """Each epoch, __iter__ in the worker builds an index (sleep index_s) then items are cheap."""

    def __init__(self, n, index_s, io_ms, shape=(3, 32, 32)):
        self.n, self.index_s, self.io_ms, self.shape = n, index_s, io_ms, shape

    def __len__(self):
        return self.n

    def __iter__(self):
        wi = get_worker_info()
        wid, nw = (wi.id, wi.num_workers) if wi else (0, 1)
        time.sleep(self.index_s)  # build the epoch's index
        for i in range(wid, self.n, nw):
            time.sleep(self.io_ms / 1000)
            yield torch.zeros(self.shape), i % 10


class Raises(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        if i % 7 == 3:
            raise ValueError(f"bad record {i}")
        return torch.zeros(3, 8, 8), 0


class Unpicklable(Dataset):
    def __init__(self):
        self.f = lambda x: x  # lambdas do not pickle

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.zeros(3, 8, 8) + self.f(0), 0


# ---- factories ----
# kind 1: loader ceiling
def k1a():  # map-style, 4 ms CPU per sample, 3x32x32
    return MapDS(100000, cpu_ms=4.0)

def k1b():  # map-style, 60 ms sleep per sample (batch 12 -> 0.72 s per worker batch)
    return MapDS(100000, io_ms=60.0)

def k1c():  # stream: 2.5 ms CPU per item, each worker fills a block of 160 finished items, yields them all, repeats
    return BlockStream(400000, cpu_ms=2.5, buf=160)

def k1d():  # stream: 2.5 ms CPU per item, shuffle buffer of 200 filled in __iter__ first
    return BufferedStream(400000, cpu_ms=2.5, buf=200)

# kind 2: idle workers
def k2a():  # 2 shards x 100000 items, 6 ms sleep each
    return ShardStream([100000] * 2, io_ms=6.0)

def k2b():  # 3 shards, 1.5 ms CPU each
    return ShardStream([100000] * 3, cpu_ms=1.5)

def k2c():  # 4 shards, one huge, three tiny, 4 ms sleep each
    return ShardStream([200000, 40, 40, 40], io_ms=4.0)

# kind 3: I/O latency bound
def k3a():  # 25 ms sleep per sample
    return MapDS(100000, io_ms=25.0)

def k3b():  # 40 ms sleep per sample
    return MapDS(100000, io_ms=40.0)

def k3c():  # split stream, 20 ms sleep per item
    return SplitStream(400000, io_ms=20.0)

# kind 4: step slows
def k4a():  # 2 ms CPU per sample
    return MapDS(100000, cpu_ms=2.0)

def k4b():  # 1 ms CPU per sample, 3x64x64
    return MapDS(100000, cpu_ms=1.0, shape=(3, 64, 64))

def k4c():  # 0.5 ms CPU + 1 ms sleep per sample
    return MapDS(100000, cpu_ms=0.5, io_ms=1.0)

# kind 5
def k5a():  # stream of 640 items, 1.2 s index build per epoch per worker, 2 ms sleep per item
    return EpochIndexStream(640, index_s=1.2, io_ms=2.0)

def k5b():  # 480 samples, 3 ms sleep each
    return MapDS(480, io_ms=3.0)

def k5c():  # 560 samples, 1.5 ms CPU each
    return MapDS(560, cpu_ms=1.5)

def k5d():  # 420 samples, 8 ms sleep each
    return MapDS(420, io_ms=8.0)

# kind 6
def raises():
    return Raises()

def factory_raises():
    raise RuntimeError("cannot open /data/index.db")

def unpicklable():
    return Unpicklable()


# ---- steps ----
def _busy_step(ms):
    def make(device):
        def step(batch):
            burn(ms)
        return step
    return make

busy30 = _busy_step(30)
busy50 = _busy_step(50)
busy20 = _busy_step(20)

busy40 = _busy_step(40)

def k4d():  # 1 ms CPU per sample, 3x32x32
    return MapDS(100000, cpu_ms=1.0)

def k2d():  # 2 shards, 3 ms sleep per item, big items 3x128x128 float (192 KiB)
    return ShardStream([100000] * 2, io_ms=3.0, shape=(3, 128, 128))

def k1e():  # map-style, 30 ms CPU per sample (batch 16 -> 0.48 s of CPU per worker batch)
    return MapDS(100000, cpu_ms=30.0)
