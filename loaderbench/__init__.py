"""loaderbench: measure why the GPU waits for data and which DataLoader settings remove the wait.

Public API (imported lazily so `import loaderbench` stays cheap and torch-free):
- `loaderbench.CUDAPrefetcher(loader, device=None, transform=None)`: the side-stream prefetcher.
- `loaderbench.load_results(path)`: a saved result file as a pandas DataFrame.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["CUDAPrefetcher", "__version__", "load_results"]


def __getattr__(name: str) -> Any:
    if name == "CUDAPrefetcher":
        from loaderbench.prefetch import CUDAPrefetcher

        return CUDAPrefetcher
    if name == "load_results":
        from loaderbench.analysis.frame import load_results

        return load_results
    raise AttributeError(f"module 'loaderbench' has no attribute {name!r}")
