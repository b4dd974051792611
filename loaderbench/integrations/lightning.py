"""`LoaderbenchCallback`: loaderbench.watch in a PyTorch Lightning `Trainer`.

    trainer = Trainer(callbacks=[LoaderbenchCallback(output="watch.json")])

Lightning owns the loop, so the callback marks the instants at its hooks (NOTE [watching a
training loop] in watcher.py): an epoch starts at `on_train_epoch_start`, batch N is ready at
`on_train_batch_start` (after Lightning fetched it and moved it to the device: the H2D copy is
part of its data-wait) and its step ends at `on_train_batch_end`. Lightning fetches one batch
ahead, so a batch's wait can show on the step before it; the sums, hence the stall fraction and
samples/s, are unchanged. On `on_train_end` the result is gathered from every rank (under DDP),
written to `output` by rank 0, and its summary printed by rank 0 (`report=True`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from loaderbench.inloop.watcher import Watch
from loaderbench.results import ResultSet


def _dataloader(obj: Any) -> Any:
    """The DataLoader behind Lightning's `trainer.train_dataloader` (a CombinedLoader or a
    collection of loaders: the first one)."""
    for attr in ("iterables", "flattened"):
        inner = getattr(obj, attr, None)
        if inner is not None and inner is not obj:
            obj = inner
            break
    if isinstance(obj, dict):
        obj = next(iter(obj.values()), obj)
    elif isinstance(obj, (list, tuple)) and obj:
        obj = obj[0]
    return obj


class LoaderbenchCallback(Callback):
    """Watch the training DataLoader of a Lightning `Trainer`.

    `output`: a .json result file written at the end of training (rank 0); `report`: print the
    summary (rank 0); other keywords go to `loaderbench.watch` (`warmup_batches`,
    `max_batches`, `samples_per_batch`, `timing`, `annotate`, `tensorboard`, ...).
    After training, `.result` holds the ResultSet and `.watch` the Watch.
    """

    def __init__(self, output: str | Path | None = None, *, report: bool = True, **watch_kwargs: Any) -> None:
        super().__init__()
        self.output = None if output is None else Path(output)
        self.report = report
        self.watch_kwargs = watch_kwargs
        self.watch: Watch | None = None
        self.result: ResultSet | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.watch = Watch(_dataloader(trainer.train_dataloader), **self.watch_kwargs)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.watch is not None:
            self.watch.epoch_start()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.watch is not None:
            self.watch.batch_ready(batch)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.watch is not None:
            self.watch.step_end()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.watch is None:
            return
        from loaderbench.render.watch import watch_lines
        from loaderbench.results import save_results

        self.result = self.watch.result()
        if trainer.global_rank != 0:
            return
        if self.output is not None:
            save_results(self.result, self.output)
        if self.report:
            print("\n".join(watch_lines(self.result)))
