"""loaderbench.watch on CUDA: CUDA events on the compute stream, no per-step synchronisation,
queued GPU work never counted as data-wait, the H2D copy timed (skipped without CUDA)."""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import loaderbench
from loaderbench.model import ComputeSpec
from loaderbench.workload.compute import build_compute

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class HostCost(Dataset):
    """Samples of (3, 64, 64) that cost `ms` of host time each."""

    def __init__(self, n: int, ms: float) -> None:
        self.n, self.ms = n, ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.ms / 1000.0)
        return torch.zeros(3, 64, 64), i


def _spin(ms: float):
    return build_compute(ComputeSpec(kind="spin", ms=ms), torch.device("cuda"))


@pytest.mark.gpu
@needs_cuda
def test_queued_gpu_work_is_never_data_wait_and_no_step_synchronises():
    # A 20 ms GPU step and a 5 ms host fetch: the host queues the step and fetches the next
    # batch while the GPU runs, so the GPU never waits: stall ~0 with events (a host timer without
    # synchronisation would call the 5 ms fetch data-wait and hide the step).
    step = _spin(20)
    loader = DataLoader(HostCost(16 * 40, 5 / 16), batch_size=16, pin_memory=True)
    w = loaderbench.watch(loader, device="cuda", warmup_batches=3)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in w:
            step(batch)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    r = w.result().results[0]
    t = r.trials[0]
    assert t.timing == "events"
    assert r.summary.stall_fraction < 0.05
    assert r.summary.compute_p50_s == pytest.approx(0.020, rel=0.15)
    assert len(t.h2d_s) == len(t.step_s) and all(x > 0 for x in t.h2d_s)
    assert t.h2d_bytes_per_batch == 16 * 3 * 64 * 64 * 4 + 16 * 8


@pytest.mark.gpu
@needs_cuda
def test_a_slow_loader_shows_as_gpu_idle_time():
    # 16 samples x 2 ms = 32 ms of host loading (0 workers) against a 10 ms GPU step: the GPU
    # waits about 32 of every 42 ms.
    step = _spin(10)
    loader = DataLoader(HostCost(16 * 30, 2.0), batch_size=16)
    w = loaderbench.watch(loader, device="cuda")
    for batch in w:
        step(batch)
    s = w.result().results[0].summary
    assert 0.65 < s.stall_fraction < 0.85
    assert s.verdict == "loader-bound"
    assert s.gpu_util_pct is None or 0 <= s.gpu_util_pct <= 100
