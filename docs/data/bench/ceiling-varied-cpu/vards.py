import math, random, time
import torch
from torch.utils.data import Dataset

class _VarDS(Dataset):
    def __init__(self, n=4096):
        self.n = n
    def __len__(self):
        return self.n
    def latency_s(self, idx):
        raise NotImplementedError
    def __getitem__(self, idx):
        time.sleep(self.latency_s(idx))
        return torch.zeros(3, 32, 32), idx % 10

class LogNormalDS(_VarDS):
    # median 15 ms, sigma 1
    def latency_s(self, idx):
        r = random.Random(1000003 * idx + 1)
        return 0.015 * math.exp(r.gauss(0.0, 1.0))

class BimodalDS(_VarDS):
    # 90% 5 ms, 10% 120 ms
    def latency_s(self, idx):
        r = random.Random(1000003 * idx + 2)
        return 0.120 if r.random() < 0.10 else 0.005

class StallDS(_VarDS):
    # uniform 2-40 ms + 1 in 50: extra 400 ms stall
    def latency_s(self, idx):
        r = random.Random(1000003 * idx + 3)
        t = r.uniform(0.002, 0.040)
        if r.random() < 1.0 / 50:
            t += 0.400
        return t

def lognormal(): return LogNormalDS()
def bimodal(): return BimodalDS()
def stall(): return StallDS()
