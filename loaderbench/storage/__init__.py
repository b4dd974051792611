"""Storage: control and verify the page cache, count bytes really read, probe a path's speed.

Answers "is the disk what starves the GPU?" without torch (the sweep's parent process and
`loaderbench storage` import it and must start fast).

- `files`: the files of a dataset and their sizes;
- `cache`: the page cache as a controlled variable (`set_cache_state`: evict or warm, then verify
  with a residency check);
- `devices`: the filesystem and block device of a path, rotational or not;
- `accounting`: bytes a process tree read from storage, bytes the batches needed;
- `probe`: `probe_storage`, sequential and random read rates at several reader counts.
"""

from loaderbench.storage.accounting import (
    CACHE_MAX_FRACTION,
    ReadSummary,
    io_counters_tree,
    io_tree,
    maps_any,
    needed_bytes,
    read_summary,
)
from loaderbench.storage.cache import (
    CACHE_STATES,
    CacheOps,
    CacheState,
    EvictReport,
    drop_all_caches,
    evict,
    fstype_of,
    is_memory_fs,
    is_root,
    residency,
    set_cache_state,
    static_evictability,
    warm,
)
from loaderbench.storage.devices import (
    BlockDevice,
    FilesystemInfo,
    block_device_of,
    filesystem_of,
    is_rotational,
)
from loaderbench.storage.files import FileStats, data_files, file_sizes, list_files, size_stats
from loaderbench.storage.probe import ProbeRow, StorageProbe, probe_storage

__all__ = [
    "CACHE_MAX_FRACTION",
    "CACHE_STATES",
    "BlockDevice",
    "CacheOps",
    "CacheState",
    "EvictReport",
    "FileStats",
    "FilesystemInfo",
    "ProbeRow",
    "ReadSummary",
    "StorageProbe",
    "block_device_of",
    "data_files",
    "drop_all_caches",
    "evict",
    "file_sizes",
    "filesystem_of",
    "fstype_of",
    "io_counters_tree",
    "io_tree",
    "is_memory_fs",
    "maps_any",
    "is_rotational",
    "is_root",
    "list_files",
    "needed_bytes",
    "probe_storage",
    "read_summary",
    "residency",
    "set_cache_state",
    "size_stats",
    "static_evictability",
    "warm",
]
