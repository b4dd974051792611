"""A PyTorch Lightning Trainer, watched: the one-line change is the callback.

    pip install "loaderbench[lightning]"
    python examples/lightning_callback.py --output watch.json && loaderbench show watch.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SleepyDataset, tiny_model  # noqa: E402

from loaderbench.integrations.lightning import LoaderbenchCallback  # noqa: E402


class Tiny(L.LightningModule):
    def __init__(self, step_ms: float) -> None:
        super().__init__()
        self.net = tiny_model()
        self.step_ms = step_ms

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        time.sleep(self.step_ms / 1000.0)  # stands for the rest of a real step
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(argv: list[str] | None = None) -> LoaderbenchCallback:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--output", default="watch.json")
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args(argv)
    loader = DataLoader(SleepyDataset(16 * a.steps, 1.0), batch_size=16)
    callback = LoaderbenchCallback(output=a.output)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[callback])  # was: callbacks=[]
    trainer.fit(Tiny(step_ms=10.0), loader)
    return callback


if __name__ == "__main__":
    main()
