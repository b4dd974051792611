import sys, time, json
import torch
from torch.utils.data import DataLoader
import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vards

def draw(factory, B, W, step_s=0.0, skip=40, n=300):
    ds = getattr(vards, factory)()
    dl = DataLoader(ds, batch_size=B, num_workers=W, shuffle=True)
    it = iter(dl)
    for _ in range(skip):
        next(it)
    t0 = time.perf_counter(); s = 0
    for _ in range(n):
        x, y = next(it); s += x.shape[0]
        if step_s: time.sleep(step_s)
    dt = time.perf_counter() - t0
    del it
    return s / dt

if __name__ == '__main__':
    factory, B, Ws, step = sys.argv[1], int(sys.argv[2]), [int(w) for w in sys.argv[3].split(',')], float(sys.argv[4])
    for W in Ws:
        r = draw(factory, B, W, step)
        print(json.dumps(dict(ds=factory, B=B, W=W, step=step, sps=round(r, 1), t=time.strftime('%H:%M:%S'))), flush=True)
