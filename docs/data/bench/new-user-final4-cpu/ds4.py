import time
import numpy as np
import torch
from torch.utils.data import Dataset


class ManyTensors(Dataset):
    """3 ms sleep, returns 200 small tensors: costly hand-off."""
    def __init__(self, n=512, k=200, ms=3):
        self.n, self.k, self.ms = n, k, ms
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        time.sleep(self.ms / 1000)
        return [torch.full((4,), float(i)) for _ in range(self.k)]


class ManyArrays(Dataset):
    """3 ms sleep, returns dict of 150 small numpy arrays."""
    def __init__(self, n=512, k=150, ms=3):
        self.n, self.k, self.ms = n, k, ms
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        time.sleep(self.ms / 1000)
        return {f"a{j}": np.full((8,), i, dtype=np.float32) for j in range(self.k)}


class Pair(Dataset):
    """30 ms sleep, returns (tensor, i); no batched fetch."""
    def __init__(self, n=256):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        time.sleep(0.030)
        return torch.zeros(3, 32, 32), i


class AlwaysBad(Dataset):
    def __len__(self):
        return 256
    def __getitem__(self, i):
        raise ValueError(f"bad sample {i}")


class BadAt5(Dataset):
    def __len__(self):
        return 256
    def __getitem__(self, i):
        if i == 5:
            raise ValueError("sample 5 is corrupt")
        time.sleep(0.002)
        return torch.zeros(3, 16, 16)


def many_tensors():
    return ManyTensors()

def many_arrays():
    return ManyArrays()

def pair():
    return Pair()

def always_bad():
    return AlwaysBad()

def bad_at_5():
    return BadAt5()

def arrays_slow():
    """100 numpy arrays per sample, 8 ms sleep."""
    return ManyArrays(n=512, k=100, ms=8)
