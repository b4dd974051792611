"""Plain DataLoader draws: W warm-up batches untimed, then T timed; optional sleep step after each batch.
Usage: plainloop.py FACTORY BATCH WORKERS[,W..] STEP_MS REPS OUT.jsonl [WARM] [TIMED]
Worker counts are interleaved within each rep."""
import importlib
import json
import os
import sys
import time

from torch.utils.data import DataLoader, IterableDataset


def one(factory, bs, nw, step_ms, warm, timed):
    ds = factory()
    it_ds = isinstance(ds, IterableDataset)
    kw = dict(batch_size=bs, num_workers=nw, pin_memory=False)
    if nw > 0:
        kw.update(prefetch_factor=2, persistent_workers=False)
    if not it_ds:
        kw["shuffle"] = True
    dl = DataLoader(ds, **kw)
    n = 0
    samples = 0
    t0 = None
    t_first = None
    tstart = time.perf_counter()
    t_prev = None
    gap = 0.0
    epochs_crossed = 0
    while True:
        first_of_epoch = True
        for b in dl:
            if t_first is None:
                t_first = time.perf_counter() - tstart
            if step_ms > 0:
                time.sleep(step_ms / 1000.0)
            n += 1
            now = time.perf_counter()
            if n > warm and first_of_epoch and t_prev is not None:
                gap += now - t_prev  # epoch start (worker restart) gap, batch receive to batch receive
                epochs_crossed += 1
            first_of_epoch = False
            t_prev = now
            if n == warm:
                t0 = time.perf_counter()
            elif n > warm:
                samples += b.shape[0]
            if n == warm + timed:
                t1 = time.perf_counter()
                return dict(samples_per_s=samples / (t1 - t0), seconds=t1 - t0, first_batch_s=t_first,
                            epochs_crossed=epochs_crossed, epoch_gap_s=gap,
                            in_epoch_samples_per_s=samples / (t1 - t0 - gap))
        # epoch ended: continue with a new epoch (timed window spans it)


def main():
    fac, bs, nws, step, reps, out = sys.argv[1:7]
    warm = int(sys.argv[7]) if len(sys.argv) > 7 else 40
    timed = int(sys.argv[8]) if len(sys.argv) > 8 else 300
    mod, fn = fac.split(":")
    factory = getattr(importlib.import_module(mod), fn)
    for r in range(int(reps)):
        for nw in [int(x) for x in nws.split(",")]:
            rec = dict(factory=fac, batch=int(bs), workers=nw, step_ms=float(step), rep=r,
                       warm=warm, timed=timed, utc=time.strftime("%H:%M:%S", time.gmtime()),
                       load1=os.getloadavg()[0])
            rec.update(one(factory, int(bs), nw, float(step), warm, timed))
            print(json.dumps(rec), flush=True)
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
