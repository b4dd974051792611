"""The runner's probes against a real DataLoader with workers (slow: starts processes)."""

from __future__ import annotations

import time

import pytest
import torch

from loaderbench.datasets import TensorCostDataset
from loaderbench.measure.introspect import _tracking_loader_class, ready_batches
from loaderbench.measure.loop import probe_receive


@pytest.mark.slow
@pytest.mark.parametrize("workers, factor", [(2, 2), (2, 4)])
def test_ready_queue_fills_to_workers_times_prefetch_factor(workers, factor):
    # prefetch_factor counts batches per worker, so W*P batches are built ahead.
    ds = TensorCostDataset(num_samples=512, sample_shape=(4,), cpu_ms=0.0, io_ms=0.2)
    loader = _tracking_loader_class()(ds, batch_size=4, num_workers=workers, prefetch_factor=factor)
    it = iter(loader)
    next(it)
    assert ready_batches(loader) is not None
    deadline = time.monotonic() + 10
    while ready_batches(loader) < workers * factor and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert ready_batches(loader) == workers * factor
    # Those batches are already built: next() costs only the receive floor.
    received = probe_receive(it, num_workers=workers, prefetch_factor=factor, period_s=0.0)
    assert len(received) == min(8, workers * factor)
    assert max(received) < 0.05
    del it


def test_ready_batches_is_none_without_workers():
    loader = _tracking_loader_class()(torch.zeros(8, 2), batch_size=2)
    iter(loader)
    assert ready_batches(loader) is None
