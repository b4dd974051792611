"""Reproducible per-sample-latency datasets for testing loaderbench (sleep only, no CPU work)."""
import math, random, time
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

N = 4096

def _pareto_ms(i):
    r = random.Random(1000003 * i + 17)
    return min(4.0 * r.paretovariate(1.8), 1000.0)

def _every16_ms(i):
    return 150.0 if i % 16 == 0 else 3.0

def _gamma_ms(i):
    r = random.Random(7919 * i + 3)
    return r.gammavariate(0.5, 30.0)  # shape 0.5, scale 30 -> mean 15 ms

class LatDS(Dataset):
    def __init__(self, fn, n=N):
        self.fn, self.n = fn, n
        self.lat = [fn(i) / 1000.0 for i in range(n)]
    def __len__(self):
        return self.n
    def __getitem__(self, idx):
        time.sleep(self.lat[idx])
        return torch.zeros(3, 32, 32), idx % 10

def pareto():
    return LatDS(_pareto_ms)

def every16():
    return LatDS(_every16_ms)

def gamma():
    return LatDS(_gamma_ms)

class Sharded(IterableDataset):
    """Work split by worker into only 2 shards; workers with id >= 2 yield nothing."""
    def __init__(self, n=N, ms=20.0, shards=2):
        self.n, self.ms, self.shards = n, ms, shards
    def __iter__(self):
        wi = get_worker_info()
        wid = 0 if wi is None else wi.id
        if wid >= self.shards:
            return
        nw = 1 if wi is None else min(wi.num_workers, self.shards)
        for i in range(wid, self.n, nw):
            time.sleep(self.ms / 1000.0)
            yield torch.zeros(3, 32, 32), i % 10

def sharded():
    return Sharded()

if __name__ == "__main__":
    for name, fn in [("pareto", _pareto_ms), ("every16", _every16_ms), ("gamma", _gamma_ms)]:
        xs = [fn(i) for i in range(N)]
        xs2 = sorted(xs)
        print(name, "mean %.2f ms p50 %.2f p99 %.1f max %.1f" % (sum(xs)/N, xs2[N//2], xs2[int(N*.99)], xs2[-1]))

class Const(Dataset):
    """tensor-like: 3x64x64 zeros after a fixed sleep (like --dataset tensor --io-ms 30)."""
    def __init__(self, ms=30.0, n=N):
        self.ms, self.n = ms, n
    def __len__(self):
        return self.n
    def __getitem__(self, idx):
        time.sleep(self.ms / 1000.0)
        return torch.zeros(3, 64, 64), idx % 10

def const30():
    return Const(30.0)
