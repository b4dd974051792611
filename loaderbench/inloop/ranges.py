"""Profiler ranges around a watched loop's phases (`watch(..., annotate=True)`): the data-wait,
the H2D copy and the step, as torch.profiler ranges, and NVTX ranges on CUDA."""

from __future__ import annotations

from typing import Any

RANGE_WAIT = "loaderbench.data_wait"
RANGE_COPY = "loaderbench.h2d"
RANGE_STEP = "loaderbench.step"


def enter_range(name: str) -> Any:
    """Open a profiler range (torch.profiler.record_function; an NVTX range too when CUDA is
    initialised), to be closed by `exit_range`."""
    import torch

    rf = torch.profiler.record_function(name)
    rf.__enter__()
    nvtx = torch.cuda.is_available() and torch.cuda.is_initialized()
    if nvtx:
        torch.cuda.nvtx.range_push(name)
    return (rf, nvtx)


def exit_range(handle: Any) -> None:
    import torch

    rf, nvtx = handle
    if nvtx:
        torch.cuda.nvtx.range_pop()
    rf.__exit__(None, None, None)
