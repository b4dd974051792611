"""Orchestration in the parent process: the sweep's config and grid, the search, the trial loop with
its budget and drift check, preflight, the distributed ranks, and the Python API (`api.sweep`)."""
