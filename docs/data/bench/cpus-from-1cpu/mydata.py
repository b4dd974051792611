import time, os
import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info
from torchvision import transforms


def _spin(ms):
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass


class SpinCPU:
    def __init__(self, ms): self.ms = ms
    def __call__(self, x):
        _spin(self.ms); return x


class SleepWait:
    def __init__(self, ms): self.ms = ms
    def __call__(self, x):
        time.sleep(self.ms / 1000.0); return x


class AddOne:
    def __call__(self, x):
        return x + 1


class DS(Dataset):
    def __init__(self, n, spin_ms, sleep_ms, shape=(3, 32, 32)):
        self.n = n
        self.shape = shape
        self.transform = transforms.Compose([SpinCPU(spin_ms), SleepWait(sleep_ms), AddOne()])
    def __len__(self): return self.n
    def __getitem__(self, i):
        return self.transform(torch.zeros(self.shape)), i % 10


# check 1, dataset A: spin 5 ms + sleep 7 ms
def a_full(): return DS(4000, 5.0, 7.0)
def a_spin_half(): return DS(4000, 2.5, 7.0)
def a_sleep_half(): return DS(4000, 5.0, 3.5)
# dataset B: spin 8 + sleep 10
def b_full(): return DS(4000, 8.0, 10.0)
def b_spin_half(): return DS(4000, 4.0, 10.0)
def b_sleep_half(): return DS(4000, 8.0, 5.0)

# check 3: latency-bound: 20 ms sleep per sample
def sleep20(): return DS(4000, 0.0, 20.0)

# check 4: CPU heavy
def cpu4(): return DS(4000, 4.0, 0.0)


# check 2: numpy samples, collate -> list of numpy arrays ~1 MB each
class NP(Dataset):
    def __init__(self, n, spin_ms):
        self.n = n
        self.transform = transforms.Compose([SpinCPU(spin_ms), AddOne()])
    def __len__(self): return self.n
    def __getitem__(self, i):
        return self.transform(np.zeros(262144, dtype=np.float32))  # 1 MiB

def np1(): return NP(4000, 0.5)

def list_collate(batch):
    return [np.asarray(b) for b in batch]


# check 5: iterable
class ItSplit(IterableDataset):
    def __init__(self, n, replay=False):
        self.n = n; self.replay = replay
    def __iter__(self):
        wi = get_worker_info()
        if wi is None or self.replay:
            lo, hi = 0, self.n
        else:
            per = self.n // wi.num_workers
            lo, hi = wi.id * per, (wi.id + 1) * per
        for k, i in enumerate(range(lo, hi)):
            _spin(0.2)
            yield torch.zeros(3, 16, 16), k   # label restarts at 0 in each worker
    def __len__(self): return self.n

def it_split(): return ItSplit(1024)
def it_replay(): return ItSplit(1024, replay=True)
def cpu2(): return DS(4000, 2.0, 0.0)
