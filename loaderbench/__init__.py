"""loaderbench: measure why the GPU waits for data and which DataLoader settings remove the wait.

Public API (imported lazily so `import loaderbench` stays cheap and torch-free):
- `loaderbench.CUDAPrefetcher(loader, device=None, transform=None)`: the side-stream prefetcher.
- `loaderbench.load_results(path)`: a saved result file as a pandas DataFrame.
- `loaderbench.watch(loader, ...)`: time data-wait against compute inside your own training loop
  (`for batch in loaderbench.watch(loader):`); see loaderbench/inloop/watcher.py.
- `loaderbench.sweep(dataset, ...)`: the sweep from Python (a Dataset object or a factory); see
  loaderbench/orchestration/api.py.
"""

from __future__ import annotations

import time as _time
from typing import Any

from loaderbench._version import __version__

# When this interpreter first imported loaderbench (time.monotonic()) and the CPU seconds the
# process had used by then: where the command began (cli.common.command_started).
IMPORTED_AT: tuple[float, float] = (_time.monotonic(), _time.process_time())

__all__ = ["CUDAPrefetcher", "Watch", "__version__", "load_results", "sweep", "watch"]


def __getattr__(name: str) -> Any:
    if name == "CUDAPrefetcher":
        from loaderbench.workload.prefetch import CUDAPrefetcher

        return CUDAPrefetcher
    if name == "load_results":
        from loaderbench.analysis.frame import load_results

        return load_results
    if name in ("watch", "Watch"):
        from loaderbench.inloop import watcher

        return getattr(watcher, name)
    if name == "sweep":
        from loaderbench.orchestration.api import sweep

        return sweep
    raise AttributeError(f"module 'loaderbench' has no attribute {name!r}")
