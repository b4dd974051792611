"""Plain DataLoader measurement, no loaderbench code."""
import sys, time, json, importlib
import torch
from torch.utils.data import DataLoader
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import myds

def run(factory, W, step, skip=40, n=300, bs=8):
    ds = getattr(myds, factory)()
    dl = DataLoader(ds, batch_size=bs, shuffle=True, num_workers=W)
    it = iter(dl)
    for _ in range(skip):
        next(it)
        if step: time.sleep(0.005)
    t0 = time.perf_counter()
    for _ in range(n):
        next(it)
        if step: time.sleep(0.005)
    dt = time.perf_counter() - t0
    del it
    return n * bs / dt

if __name__ == "__main__":
    factory = sys.argv[1]
    workers = [int(x) for x in sys.argv[2].split(",")]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    res = []
    for r in range(reps):
        for W in workers:
            for step in (True, False):
                v = run(factory, W, step)
                rec = dict(ds=factory, W=W, step=step, rep=r, sps=round(v, 1))
                print(json.dumps(rec), flush=True)
                res.append(rec)
