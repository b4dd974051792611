"""Datasets of known per-sample cost for trying loaderbench."""
import time
import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info


class MapDS(Dataset):
    def __init__(self, n, make, sleep_ms=0.0):
        self.n, self.make, self.sleep_s = n, make, sleep_ms / 1000.0
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.make(i)


# ---- A: receive floor ----
def many_small():
    """cheap sample: a list of 64 tiny tensors (a batch = 64 separate shared tensors + label)"""
    return MapDS(100000, lambda i: ([torch.full((4,), float(i)) for _ in range(64)], i))

def big_tensor():
    """cheap sample: one 3x256x256 float32 tensor (786 KB), a batch of 32 = 25 MB"""
    t = torch.zeros(3, 256, 256)
    return MapDS(100000, lambda i: (t.clone(), i))

def numpy_sleep3():
    """3 ms sleep per sample, returns a 3x64x64 float32 numpy array + 8 small numpy arrays"""
    a = np.zeros((3, 64, 64), np.float32)
    return MapDS(100000, lambda i: {"img": a.copy(), "extra": [np.full(3, i, np.float32) for _ in range(8)], "y": i}, sleep_ms=3)

# ---- B: latency-bound ----
def sleep20():
    return MapDS(100000, lambda i: (torch.zeros(16), i), sleep_ms=20)

def sleep40():
    return MapDS(100000, lambda i: (torch.zeros(16), i), sleep_ms=40)

def sleep60():
    return MapDS(100000, lambda i: (torch.zeros(16), i), sleep_ms=60)

# ---- C: iterable, split by shard ----
class ShardStream(IterableDataset):
    def __init__(self, n_shards, sleep_ms, per_shard=100000):
        self.n_shards, self.sleep_s, self.per_shard = n_shards, sleep_ms / 1000.0, per_shard
    def __iter__(self):
        wi = get_worker_info()
        wid, nw = (0, 1) if wi is None else (wi.id, wi.num_workers)
        for shard in range(wid, self.n_shards, nw):   # worker k reads shards k, k+nw, ...
            for j in range(self.per_shard):
                time.sleep(self.sleep_s)
                yield torch.full((16,), float(shard * self.per_shard + j)), shard

def shards2_sleep5():
    return ShardStream(2, 5)

def shards1_sleep5():
    return ShardStream(1, 5)

def shards3_sleep10():
    return ShardStream(3, 10)

# ---- E: bad input ----
def raises():
    class Bad(Dataset):
        def __len__(self): return 1000
        def __getitem__(self, i):
            raise ValueError("sample %d is broken" % i)
    return Bad()
