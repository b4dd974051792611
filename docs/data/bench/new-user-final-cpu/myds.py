"""Datasets with a known per-sample cost, fixed by a hash of the index (repeatable).

Cost kinds: sleep (no CPU, like storage latency) or busy (CPU time, via time.thread_time).
"""
import hashlib
import math
import random
import time

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info


def u01(i, salt):
    h = hashlib.blake2b(f"{salt}:{i}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64


def burn(ms):
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass


# ---- cost distributions (ms), each a function of the index ----
def c_fixed(ms):
    return lambda i: ms


def c_bimodal(lo, hi, p_hi, salt):
    return lambda i: hi if u01(i, salt) < p_hi else lo


def c_uniform(lo, hi, salt):
    return lambda i: lo + (hi - lo) * u01(i, salt)


def c_pareto(xm, alpha, cap, salt):
    # inverse CDF: xm / (1-u)^(1/alpha), capped
    return lambda i: min(cap, xm / (1.0 - u01(i, salt)) ** (1.0 / alpha))


def mean_cost(cost, n):
    return sum(cost(i) for i in range(n)) / n


class CostMap(Dataset):
    def __init__(self, n, cost, kind):
        self.n, self.cost, self.kind = n, cost, kind

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        ms = self.cost(i)
        if self.kind == "sleep":
            time.sleep(ms / 1000.0)
        else:
            burn(ms)
        return torch.full((8,), float(i))


class BufferedStream(IterableDataset):
    """Each worker takes items i % nw == wid, fills a shuffle buffer of `buf` items
    (paying each item's cost) before yielding anything, then yields a random buffered
    item and refills one, and drains the buffer at the end."""

    def __init__(self, n, cost, kind, buf, seed=0):
        self.n, self.cost, self.kind, self.buf, self.seed = n, cost, kind, buf, seed
        self.epoch = 0

    def _make(self, i):
        ms = self.cost(i)
        if self.kind == "sleep":
            time.sleep(ms / 1000.0)
        else:
            burn(ms)
        return torch.full((8,), float(i))

    def __iter__(self):
        wi = get_worker_info()
        nw, wid = (wi.num_workers, wi.id) if wi else (1, 0)
        rng = random.Random(self.seed * 1000 + wid + 17 * self.epoch)
        self.epoch += 1
        buffer = []
        for i in range(wid, self.n, nw):
            buffer.append(self._make(i))
            if len(buffer) >= self.buf:
                k = rng.randrange(len(buffer))
                buffer[k], buffer[-1] = buffer[-1], buffer[k]
                yield buffer.pop()
        rng.shuffle(buffer)
        yield from buffer


class Sharded(IterableDataset):
    """K shards (shard s = items i % K == s); worker w gets whole shards s with s % nw == w.
    Workers beyond K get nothing."""

    def __init__(self, n, k, cost, kind):
        self.n, self.k, self.cost, self.kind = n, k, cost, kind

    def __iter__(self):
        wi = get_worker_info()
        nw, wid = (wi.num_workers, wi.id) if wi else (1, 0)
        for s in range(self.k):
            if s % nw != wid:
                continue
            for i in range(s, self.n, self.k):
                ms = self.cost(i)
                if self.kind == "sleep":
                    time.sleep(ms / 1000.0)
                else:
                    burn(ms)
                yield torch.full((8,), float(i))


# ---- A: loader ceiling (also D) ----
def a1_fixed_busy():  # batch 16, 1.0 ms CPU per sample
    return CostMap(4096, c_fixed(1.0), "busy")


def a2_bimodal_sleep():  # batch 32, 90% 0.5 ms / 10% 10 ms sleep
    return CostMap(4096, c_bimodal(0.5, 10.0, 0.10, "a2"), "sleep")


def a3_buffered_stream():  # batch 8, heavy-tailed sleep, shuffle buffer 64
    return BufferedStream(4096, c_pareto(0.3, 1.8, 30.0, "a3"), "sleep", buf=64)


# ---- B: idle workers ----
def b1_one_shard_sleep():  # batch 16, K=1, 2 ms sleep
    return Sharded(3200, 1, c_fixed(2.0), "sleep")


def b2_two_shards_bimodal():  # batch 32, K=2, 80% 1 ms / 20% 5 ms sleep
    return Sharded(6400, 2, c_bimodal(1.0, 5.0, 0.20, "b2"), "sleep")


def b3_one_shard_busy():  # batch 8, K=1, 1 ms CPU
    return Sharded(3200, 1, c_fixed(1.0), "busy")


# ---- C: latency-bound (batch 8, sleep 15-60 ms) ----
def c1_uniform():
    return CostMap(4096, c_uniform(15.0, 60.0, "c1"), "sleep")


def c2_bimodal():
    return CostMap(4096, c_bimodal(15.0, 60.0, 0.20, "c2"), "sleep")


def c3_heavy():
    return CostMap(4096, c_pareto(15.0, 1.5, 60.0, "c3"), "sleep")


# ---- bad input ----
def raises():
    raise RuntimeError("dataset factory deliberately failed")


if __name__ == "__main__":
    for name, ds in [("a1", a1_fixed_busy()), ("a2", a2_bimodal_sleep()), ("a3", a3_buffered_stream()),
                     ("b1", b1_one_shard_sleep()), ("b2", b2_two_shards_bimodal()), ("b3", b3_one_shard_busy()),
                     ("c1", c1_uniform()), ("c2", c2_bimodal()), ("c3", c3_heavy())]:
        print(name, type(ds).__name__, "mean ms/sample", round(mean_cost(ds.cost, ds.n), 4),
              "max", round(max(ds.cost(i) for i in range(ds.n)), 3))
