"""`LoaderbenchTrainerCallback`: loaderbench.watch in a Hugging Face `Trainer`.

    trainer = Trainer(..., callbacks=[LoaderbenchTrainerCallback(output="watch.json")])

The Trainer's loop is its own, so the callback marks the instants at its events (NOTE [watching
a training loop] in watcher.py): an epoch starts at `on_epoch_begin`, a step's batches are ready
at `on_step_begin` and its step ends at `on_step_end`. A Trainer step is one optimizer step: with
gradient accumulation it takes `gradient_accumulation_steps` batches, fetched at its start, so
the watched samples per step are per_device_train_batch_size x gradient_accumulation_steps and
the data-wait is the time between one step's end and the next one's start (the fetch of those
batches, and their move to the device). At `on_train_end` the result is gathered from every
rank, written to `output` and printed by the main process with the `TrainingArguments` fields
to set (`dataloader_num_workers`, `dataloader_pin_memory`, `dataloader_prefetch_factor`,
`dataloader_persistent_workers`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from loaderbench.inloop.watcher import Watch
from loaderbench.results import ResultSet


def _dataloader(obj: Any) -> Any:
    """The torch DataLoader behind an accelerate-prepared one (`base_dataloader`)."""
    return getattr(obj, "base_dataloader", obj)


class LoaderbenchTrainerCallback(TrainerCallback):
    """Watch the training DataLoader of a Hugging Face `Trainer`.

    `output`: a .json result file (main process); `report`: print the summary and the
    `TrainingArguments` fields; other keywords go to `loaderbench.watch`. After training,
    `.result` holds the ResultSet and `.training_arguments` the suggested fields (a dict).
    """

    def __init__(self, output: str | Path | None = None, *, report: bool = True, **watch_kwargs: Any) -> None:
        self.output = None if output is None else Path(output)
        self.report = report
        self.watch_kwargs = watch_kwargs
        self.watch: Watch | None = None
        self.result: ResultSet | None = None
        self.training_arguments: dict[str, Any] = {}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loader = kwargs.get("train_dataloader")
        per_step = int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps)
        self.watch_kwargs.setdefault("samples_per_batch", per_step)
        self.watch = Watch(_dataloader(loader) if loader is not None else [], **self.watch_kwargs)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.watch is not None:
            self.watch.epoch_start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.watch is not None:
            self.watch.batch_ready(None)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.watch is not None and self.watch.has_open_step:
            self.watch.step_end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.watch is None:
            return
        from loaderbench.inloop.result import suggested_settings
        from loaderbench.render.watch import training_arguments_line, watch_lines
        from loaderbench.results import save_results

        self.result = self.watch.result()
        suggested = suggested_settings(self.result)
        predicted = suggested.pop("predicted")
        self.training_arguments = {f"dataloader_{k}": v for k, v in suggested.items()}
        if not state.is_world_process_zero:
            return
        if self.output is not None:
            save_results(self.result, self.output)
        if self.report:
            print("\n".join([*watch_lines(self.result), training_arguments_line(self.training_arguments, predicted)]))
