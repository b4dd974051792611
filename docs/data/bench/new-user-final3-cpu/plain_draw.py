"""Draw batches from a plain DataLoader with no step and time them: python plain_draw.py FACTORY BATCH WORKERS NBATCHES"""
import sys, time, importlib
sys.path.insert(0, "/tmp/nu3")
from torch.utils.data import DataLoader
fac, bs, nw, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ds = getattr(importlib.import_module("myds"), fac)()
kw = dict(prefetch_factor=2, persistent_workers=False) if nw else {}
for rep in range(2):
    dl = DataLoader(ds, batch_size=bs, num_workers=nw, pin_memory=False, shuffle=False, **kw)
    it = iter(dl)
    for _ in range(max(10, 2 * nw * 2)):   # warm-up: start workers, drain the prefetched queue
        next(it)
    t0 = time.perf_counter()
    for _ in range(n):
        next(it)
    dt = time.perf_counter() - t0
    print(f"{fac} bs={bs} workers={nw}: {n} batches in {dt:.3f} s = {n*bs/dt:,.0f} samples/s ({dt/n*1e3:.2f} ms/batch)  [round {rep+1}]")
    del it, dl
