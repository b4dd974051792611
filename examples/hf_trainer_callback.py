"""A Hugging Face Trainer, watched: the one-line change is the callback. At the end it prints
the TrainingArguments fields to set (dataloader_num_workers, dataloader_pin_memory,
dataloader_prefetch_factor, dataloader_persistent_workers).

    pip install "loaderbench[hf]"
    python examples/hf_trainer_callback.py --output watch.json && loaderbench show watch.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import Trainer, TrainingArguments

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SleepyDataset  # noqa: E402

from loaderbench.integrations.hf import LoaderbenchTrainerCallback  # noqa: E402


class DictDataset(SleepyDataset):
    """The Trainer's batches are dicts of model inputs."""

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:  # type: ignore[override]
        x, y = super().__getitem__(i)
        return {"x": x, "labels": torch.tensor(y)}


class TinyModel(torch.nn.Module):
    def __init__(self, step_ms: float) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))
        self.step_ms = step_ms

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        time.sleep(self.step_ms / 1000.0)  # stands for the rest of a real step
        return {"loss": torch.nn.functional.cross_entropy(self.net(x), labels)}


def main(argv: list[str] | None = None) -> LoaderbenchTrainerCallback:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--output", default="watch.json")
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args(argv)
    callback = LoaderbenchTrainerCallback(output=a.output)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=16, max_steps=a.steps,
                                 report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                                 dataloader_num_workers=0, disable_tqdm=True)
        trainer = Trainer(model=TinyModel(step_ms=10.0), args=args, train_dataset=DictDataset(16 * a.steps, 1.0),
                          callbacks=[callback])  # was: no callbacks
        trainer.train()
    return callback


if __name__ == "__main__":
    main()
