import sys, time, importlib
import torch
from torch.utils.data import DataLoader
sys.path.insert(0, "/tmp/nu2")
import myds2

def run(factory, W, step=True):
    ds = getattr(myds2, factory)()
    dl = DataLoader(ds, batch_size=8, shuffle=True, num_workers=W)
    it = iter(dl)
    for _ in range(40):
        next(it)
        if step:
            time.sleep(0.005)
    t0 = time.perf_counter()
    for _ in range(300):
        next(it)
        if step:
            time.sleep(0.005)
    el = time.perf_counter() - t0
    del it
    return 300 * 8 / el

if __name__ == "__main__":
    factory = sys.argv[1]
    for W in (2, 4, 6):
        with_step = [round(run(factory, W, True), 1) for _ in range(3)]
        no_step = round(run(factory, W, False), 1)
        print(f"{factory} W={W} step: {with_step} median={sorted(with_step)[1]} | nostep: {no_step}", flush=True)
