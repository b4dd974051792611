"""Shared fixtures: a console of pinned width with colour off (golden renderings), a fake clock
(timing logic with hand-computed answers), and a fake trial runner (the sweep's orchestration
without processes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rich.console import Console

from loaderbench.measure.isolation import Outcome
from tests.helpers import FakeClock


@pytest.fixture
def console() -> Console:
    """A recording console, 200 columns, no colour, not a terminal."""
    return Console(width=200, color_system=None, record=True, force_terminal=False)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


class FakeRunner:
    """Stands for measure.isolation.run_isolated: `outcomes` maps num_workers to an Outcome (or a
    callable making one); every call is recorded as (num_workers, seed, kind)."""

    def __init__(self, outcomes: dict[int, Outcome | Callable[[], Outcome]]) -> None:
        self.outcomes = outcomes
        self.calls: list[tuple[int, Any, str]] = []
        self.jobs: list[Any] = []

    def __call__(self, job: Any, **kw: Any) -> Outcome:
        self.calls.append((job.settings.num_workers, job.seed, job.kind))
        self.jobs.append(job)
        out = self.outcomes[job.settings.num_workers]
        return out() if callable(out) else out


@pytest.fixture
def fake_runner() -> type[FakeRunner]:
    return FakeRunner
