"""What a sweep reports while it runs: the `SweepObserver` protocol the CLI implements (progress, phases,
warnings) and `NullObserver`; the core never prints."""

from __future__ import annotations

from typing import Protocol

from loaderbench.measure.isolation import Outcome
from loaderbench.model import (
    ConfigResult,
    LoaderSettings,
)


class SweepObserver(Protocol):
    """Receives progress; all methods optional in spirit (NullObserver implements them all)."""

    def phase(self, text: str) -> None: ...
    def sweep_started(self, total_trials: int) -> None: ...
    def trial_started(self, index: int, settings: LoaderSettings, repeat: int) -> None: ...
    def batch(self, index: int) -> None: ...
    def trial_finished(self, result: ConfigResult, outcome: Outcome) -> None: ...
    def warning(self, message: str) -> None: ...


class NullObserver:
    def phase(self, text: str) -> None:
        pass

    def sweep_started(self, total_trials: int) -> None:
        pass

    def trial_started(self, index: int, settings: LoaderSettings, repeat: int) -> None:
        pass

    def batch(self, index: int) -> None:
        pass

    def trial_finished(self, result: ConfigResult, outcome: Outcome) -> None:
        pass

    def warning(self, message: str) -> None:
        pass
