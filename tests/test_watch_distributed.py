"""loaderbench.watch under torchrun: 2 CPU ranks over gloo, each watching its own DataLoader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _stall(t: dict) -> float:
    return sum(t["data_wait_s"]) / sum(t["step_s"])


def _rate(t: dict) -> float:
    return t["samples"] / sum(t["step_s"])


@pytest.mark.slow
def test_each_rank_watches_itself_and_the_slowest_rank_decides(tmp_path):
    import json

    out = tmp_path / "w.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(ROOT / "examples" / "ddp_watch.py"), "--output", str(out), "--steps", "30"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["environment"]["distributed"]["world_size"] == 2
    (row,) = data["results"]
    (merged,) = row["trials"]
    ranks = merged["rank_trials"]
    assert [t["rank"] for t in ranks] == [0, 1] and merged["world_size"] == 2
    # Rank 1's batches cost 16 x 2 ms to load; rank 0's nothing: rank 1 waits for data, rank 0
    # waits in the gradient all-reduce (its step, not its data-wait).
    assert _stall(ranks[1]) > 0.5 > 0.25 > _stall(ranks[0])
    summary = row["summary"]
    assert summary["slowest_rank"] == 1 and merged["rank"] == 1
    assert summary["stall_fraction"] == pytest.approx(_stall(ranks[1]))
    assert summary["samples_per_s"] == pytest.approx(_rate(ranks[0]) + _rate(ranks[1]))
    assert summary["rank_stall_fraction"] == pytest.approx([_stall(ranks[0]), _stall(ranks[1])])
    assert "Per rank: rank 0:" in proc.stdout and "slowest rank: 1" in proc.stdout
