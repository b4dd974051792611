"""User datasets for end-to-end tests, given to `--dataset tests.fixture_datasets:NAME`."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import namedtuple

import torch
from torch.utils.data import Dataset, get_worker_info

Meta = namedtuple("Meta", ["path", "index"])


class Nested(Dataset):
    """A typical self-supervised sample: (imgs, img, patch2, theta, meta) with strings in meta."""

    def __init__(self, n: int = 64, size: int = 8) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        img = torch.full((3, self.size, self.size), float(i))
        return (
            [img, img + 1],
            img,
            {"patch2": img[:, :4, :4].clone(), "label": i % 10},
            torch.eye(2, 3),
            Meta(path=f"/data/img_{i:05d}.jpg", index=i),
        )


def make_nested(n: int = 64, size: int = 8) -> Dataset:
    return Nested(n=n, size=size)


class FailsInWorkers(Dataset):
    """Fine in the main process; inside a worker every third index raises (a corrupt sample)."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int):
        if get_worker_info() is not None and i % 3 == 0:
            raise ValueError(f"corrupt sample at index {i}")
        return torch.zeros(4)


def make_fails_in_workers() -> Dataset:
    return FailsInWorkers()


class Mixed(Dataset):
    """One sweep, one fault per worker count: 1 worker hangs, 2 workers die of
    SIGKILL, 3 raise, 4 die of SIGBUS (what a full /dev/shm does), 5 of SIGSEGV; 0 and 6 work."""

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int):
        info = get_worker_info()
        n = 0 if info is None else info.num_workers
        if n == 1:
            time.sleep(3600)
        if n == 3 and i % 2 == 0:
            raise ValueError(f"corrupt sample at index {i}")
        signals = {2: signal.SIGKILL, 4: signal.SIGBUS, 5: signal.SIGSEGV}
        if n in signals:
            os.kill(os.getpid(), signals[n])
        return torch.zeros(4)


def make_mixed() -> Dataset:
    return Mixed()


def collate_as_dict(samples):
    return {"x": torch.stack([s[1] for s in samples]), "paths": [s[4].path for s in samples]}


class Stream(torch.utils.data.IterableDataset):
    """An IterableDataset that does not split by worker (every worker replays it)."""

    def __iter__(self):
        for i in range(4000):
            yield torch.tensor([i])


def make_stream() -> torch.utils.data.IterableDataset:
    return Stream()


def make_empty() -> Dataset:
    return torch.utils.data.TensorDataset(torch.zeros(0, 3))


def make_always_fails() -> Dataset:
    return FailsEverywhere()


class FailsEverywhere(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        raise OSError(f"cannot read sample {i}")


def make_slow_factory():
    time.sleep(30)
    return Nested()


class SplitStream(torch.utils.data.IterableDataset):
    """The same stream, split across workers with get_worker_info()."""

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, 4000, step):
            yield torch.tensor([i])


def make_split_stream() -> torch.utils.data.IterableDataset:
    return SplitStream()


class RankSkewed(Dataset):
    """Small tensors; on rank 1 (env RANK, inherited by the DataLoader's workers) each sample
    sleeps `slow_ms`: rank 1's loader is the slow one of a distributed sweep."""

    def __init__(self, n: int = 4096, slow_ms: float = 2.0) -> None:
        self.n = n
        self.slow_s = slow_ms / 1000.0 if os.environ.get("RANK") == "1" else 0.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.slow_s:
            time.sleep(self.slow_s)
        return torch.zeros(3, 8, 8), i % 10


def make_rank_skewed() -> Dataset:
    return RankSkewed()


class RankFaulty(Dataset):
    """Fine on rank 0 and in the main process; in rank 1's DataLoader workers, raises when the
    loader has 1 worker and hangs when it has 2."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        info = get_worker_info()
        if info is not None and os.environ.get("RANK") == "1":
            if info.num_workers == 1:
                raise ValueError(f"corrupt sample {i} on rank 1")
            if info.num_workers == 2:
                time.sleep(3600)
        return torch.zeros(3, 8, 8), i % 10


def make_rank_faulty() -> Dataset:
    return RankFaulty()


def make_rank_stuck() -> Dataset:
    """Rank 1 takes 30 s per sample: its measuring process sits in a load, not in a collective."""
    return RankSkewed(slow_ms=30_000.0)


class NumpySamples(Dataset):
    """Samples as numpy arrays: a (3, 64, 64) float32 image and an int label, `sleep_ms` each
    (the pattern of pipelines that feed JAX, which keep numpy batches)."""

    def __init__(self, n: int = 4096, sleep_ms: float = 1.0) -> None:
        self.n, self.sleep_s = n, sleep_ms / 1000.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import numpy as np

        time.sleep(self.sleep_s)
        return np.full((3, 64, 64), float(i % 7), dtype=np.float32), i % 10


def make_numpy_samples(n: int = 4096, sleep_ms: float = 1.0) -> Dataset:
    return NumpySamples(n, sleep_ms)


def collate_numpy(samples):
    """Stack into numpy arrays, recursively: [x (B, 3, 64, 64), y (B,)]."""
    import numpy as np

    return [np.stack([s[0] for s in samples]), np.array([s[1] for s in samples])]


def collate_numpy_as_tensors(samples):
    """The same payload as torch tensors (the control of collate_numpy)."""
    import numpy as np

    return [torch.from_numpy(np.stack([s[0] for s in samples])), torch.tensor([s[1] for s in samples])]


class Detection(Dataset):
    """Per-image tensors of different sizes with a target dict of small tensors, `sleep_ms` each
    (a detection pipeline: collate with `collate_detection`)."""

    def __init__(self, n: int = 4096, sleep_ms: float = 1.0, boxes: int = 3) -> None:
        self.n, self.sleep_s, self.boxes = n, sleep_ms / 1000.0, boxes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.sleep_s)
        h, w = 40 + i % 9, 48 + i % 5
        k = 1 + i % self.boxes
        target = {"boxes": torch.zeros(k, 4), "labels": torch.zeros(k, dtype=torch.int64), "image_id": i}
        return torch.zeros(3, h, w), target


def make_detection(n: int = 4096, sleep_ms: float = 1.0) -> Dataset:
    return Detection(n, sleep_ms)


def collate_detection(samples):
    """torchvision's detection references: a tuple of B images and a tuple of B target dicts."""
    return tuple(zip(*samples))


class MatmulSamples(Dataset):
    """Each sample: four 192x192 matmuls + tanh with torch on the CPU (~1 ms on one core).
    `torch_init=True` builds and normalises the weights with torch ops in `__init__`, which runs
    an OpenMP parallel region in the parent before the workers fork; False builds them with
    numpy."""

    def __init__(self, n: int = 4096, torch_init: bool = False) -> None:
        import numpy as np

        self.n = n
        if torch_init:
            w = torch.randn(4, 192, 192)
            big = torch.randn(1000, 1000)
            big = (big - big.mean()) / big.std()  # a parallel region in the parent
            self.w = w / w.std() + 0 * big[:192, :192]
        else:
            rng = np.random.default_rng(0)
            self.w = torch.from_numpy(rng.standard_normal((4, 192, 192)).astype(np.float32) / 14.0)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        x = torch.full((192, 192), float(i % 7) / 7)
        for k in range(4):
            x = torch.tanh(x @ self.w[k])
        return x[0, :16].clone(), i % 10


def make_matmul_numpy_init(n: int = 4096) -> Dataset:
    return MatmulSamples(n, torch_init=False)


def make_matmul_torch_init(n: int = 4096) -> Dataset:
    return MatmulSamples(n, torch_init=True)


class VirtualLength(Dataset):
    """A "virtual length" dataset: `length` items (40 million by default: random patches of big
    volumes, windows over a corpus), each a small tensor after a `sleep_ms` sleep."""

    def __init__(self, length: int = 40_000_000, sleep_ms: float = 0.5) -> None:
        self.length, self.sleep_s = length, sleep_ms / 1000.0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        time.sleep(self.sleep_s)
        return torch.full((8,), float(i % 1000)), i % 10


def make_virtual_length(length: int = 40_000_000, sleep_ms: float = 0.5) -> Dataset:
    return VirtualLength(length, sleep_ms)


def make_full_permutation_sampler(dataset, seed: int = 0):
    """The user's own sampler: torch's RandomSampler, which permutes the whole dataset at every
    epoch start (seconds for tens of millions of items)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.utils.data.RandomSampler(dataset, generator=gen)


def make_subset_sampler(dataset, seed: int = 0):
    """A user's sampler over the first 25 items only (a validation split, say)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.utils.data.SubsetRandomSampler(range(25), generator=gen)


def make_bucket_batch_sampler(dataset, batch_size: int):
    """A batch sampler of variable batch sizes: batch_size, then batch_size // 2, alternating."""

    class Buckets(torch.utils.data.Sampler):
        def __iter__(self):
            i, k = 0, 0
            while i + batch_size <= len(dataset) and k < 10_000:
                n = batch_size if k % 2 == 0 else batch_size // 2
                yield list(range(i, i + n))
                i, k = i + n, k + 1

        def __len__(self):
            return 10_000

    return Buckets()


class TargetDicts(Dataset):
    """A detection-style sample: a 3x96x96 float32 image and a target dict of 7 small tensors
    of k = 1..5 rows (boxes, labels, areas, crowd flags, ids, sizes, keypoints), `sleep_ms` each."""

    FIELDS = (("boxes", 4), ("labels", 0), ("area", 0), ("iscrowd", 0), ("ids", 0), ("size", 2), ("keypoints", 3))

    def __init__(self, n: int = 4096, sleep_ms: float = 2.0) -> None:
        self.n, self.sleep_s = n, sleep_ms / 1000.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.sleep_s)
        k = 1 + i % 5
        target = {name: torch.zeros((k, cols) if cols else (k,)) for name, cols in self.FIELDS}
        return torch.zeros(3, 96, 96), target


def make_target_dicts(n: int = 4096, sleep_ms: float = 2.0) -> Dataset:
    return TargetDicts(n, sleep_ms)


def collate_target_list(samples):
    """Stacked images + the list of per-sample target dicts: 1 + 16 x 7 = 113 tensors at batch 16."""
    return torch.stack([s[0] for s in samples]), [s[1] for s in samples]


def collate_target_packed(samples):
    """The same payload packed: stacked images, each target field concatenated across the batch,
    and the per-sample row offsets: 9 tensors whatever the batch size."""
    images = torch.stack([s[0] for s in samples])
    fields = {name: torch.cat([s[1][name] for s in samples]) for name, _ in TargetDicts.FIELDS}
    offsets = torch.tensor([0] + [len(s[1]["labels"]) for s in samples]).cumsum(0)
    return images, fields, offsets


class PreBatchedStream(torch.utils.data.IterableDataset):
    """An IterableDataset whose every item is already 16 samples (a shard reader that yields
    chunks), split across workers."""

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, 2000, step):
            time.sleep(0.001)
            yield torch.full((16, 3), float(i))


def make_pre_batched_stream() -> torch.utils.data.IterableDataset:
    return PreBatchedStream()


def collate_concat(items):
    """Concatenate chunks along the sample axis: (items x 16, 3)."""
    return torch.cat(items)


class HangsAt(Dataset):
    """Sample `at` never returns (a stuck read): in the main process as in the workers."""

    def __init__(self, at: int = 3, n: int = 64) -> None:
        self.at, self.n = at, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.at:
            time.sleep(3600)
        return torch.zeros(3)


def make_hangs_at_3() -> Dataset:
    return HangsAt(3)


class SplitLabelledStream(torch.utils.data.IterableDataset):
    """A stream split across workers whose samples are an equal image and a different label:
    `(zeros(3, 8, 8), i)`; `replicate=True` makes every worker replay it."""

    def __init__(self, replicate: bool = False) -> None:
        self.replicate = replicate

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None or self.replicate else (info.id, info.num_workers)
        for i in range(start, 4000, step):
            yield torch.zeros(3, 8, 8), i


def make_split_labelled_stream() -> torch.utils.data.IterableDataset:
    return SplitLabelledStream()


def make_replicated_labelled_stream() -> torch.utils.data.IterableDataset:
    return SplitLabelledStream(replicate=True)


class LocalLabelStream(torch.utils.data.IterableDataset):
    """A stream of 400 items split across workers (each worker its share), every item an
    all-zero tensor with a label local to the worker's shard (0, 1, 2, ... in every worker):
    two workers' first samples are equal, yet no worker replays another's."""

    def __init__(self, replicate: bool = False, item_ms: float = 0.0) -> None:
        self.replicate = replicate
        self.item_ms = item_ms

    def __iter__(self):
        info = get_worker_info()
        n = 400 if info is None or self.replicate else len(range(info.id, 400, info.num_workers))
        for i in range(n):
            if self.item_ms:
                time.sleep(self.item_ms / 1000)
            yield torch.zeros(3, 8, 8), i


def make_local_label_stream() -> torch.utils.data.IterableDataset:
    return LocalLabelStream()


def make_replicated_local_label_stream() -> torch.utils.data.IterableDataset:
    return LocalLabelStream(replicate=True)


def make_long_local_label_stream(replicate: bool = False) -> torch.utils.data.IterableDataset:
    """The same 400 items at 10 ms each: one pass takes 4 s, longer than a count may run."""
    return LocalLabelStream(replicate=replicate, item_ms=10.0)


class FileSamples(Dataset):
    """One sample per file under `root` (every file, sorted): its bytes as a uint8 tensor, read
    with read(); `keep=True` keeps what it read in its own memory (a cache inside the dataset,
    per process), so a repeat never reaches the files."""

    def __init__(self, root, keep: bool = False) -> None:
        import os

        self.paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
        self.keep = keep
        self.kept: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        if i in self.kept:
            return self.kept[i]
        with open(self.paths[i], "rb") as f:
            x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)[:1024].clone()
        if self.keep:
            self.kept[i] = x
        return x


def make_file_samples(root, keep: bool = False) -> Dataset:
    return FileSamples(root, keep)


class ShardStream(torch.utils.data.IterableDataset):
    """Records of `record_bytes` read in turn from every shard file under `root`, split across
    workers by shard; its length is the records in all shards."""

    def __init__(self, root, record_bytes: int = 65536) -> None:
        import os

        self.paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
        self.record_bytes = record_bytes
        self.records = sum(os.path.getsize(p) // record_bytes for p in self.paths)

    def __len__(self) -> int:
        return self.records

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        mine = self.paths if info is None else self.paths[info.id::info.num_workers]
        for p in mine:
            with open(p, "rb") as f:
                while chunk := f.read(self.record_bytes):
                    if len(chunk) == self.record_bytes:
                        yield torch.frombuffer(bytearray(chunk), dtype=torch.uint8)[:1024].clone()


def make_shard_stream(root, record_bytes: int = 65536) -> torch.utils.data.IterableDataset:
    return ShardStream(root, record_bytes)


class FailsOutsideItsProcess(Dataset):
    """Fine in the process that made it; in any other (a measuring process that unpickled it)
    every sample raises."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        if os.getpid() != self.pid:
            raise OSError(f"cannot read sample {i} outside process {self.pid}")
        return torch.zeros(2)


class HeldBuffer(torch.utils.data.IterableDataset):
    """A stream whose every worker fills a queue of `held` finished items in a thread started by
    `__iter__` (a prefetching reader), each item costing a `sleep_ms` sleep; the stream is split
    by worker. While the loop's step is slower than the workers the queues fill, so a worker
    then hands out `held` items at once before it builds at its own rate again."""

    def __init__(self, held: int = 64, sleep_ms: float = 10.0, n: int = 1_000_000) -> None:
        self.held, self.sleep_s, self.n = held, sleep_ms / 1000.0, n

    def __iter__(self):
        import queue
        import threading

        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        items: queue.Queue = queue.Queue(maxsize=self.held)

        def fill() -> None:
            for i in range(start, self.n, step):
                time.sleep(self.sleep_s)
                items.put(i)

        threading.Thread(target=fill, daemon=True).start()
        for _ in range(start, self.n, step):
            yield torch.full((4,), float(items.get()))


def make_held_buffer(held: int = 64, sleep_ms: float = 10.0) -> torch.utils.data.IterableDataset:
    return HeldBuffer(held, sleep_ms)


class Shards(torch.utils.data.IterableDataset):
    """A stream split by shard: worker k reads shards k, k + W, k + 2W, ...; each shard holds
    `per_shard` items of `sleep_ms` each. With fewer shards than workers, the workers past the
    shard count have nothing to read."""

    def __init__(self, shards: int = 1, per_shard: int = 100_000, sleep_ms: float = 5.0) -> None:
        self.shards, self.per_shard, self.sleep_s = shards, per_shard, sleep_ms / 1000.0

    def __iter__(self):
        info = get_worker_info()
        me, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for shard in range(me, self.shards, workers):
            for i in range(self.per_shard):
                time.sleep(self.sleep_s)
                yield torch.full((4,), float(shard * self.per_shard + i))


def make_shards(shards: int = 1, sleep_ms: float = 5.0) -> torch.utils.data.IterableDataset:
    return Shards(shards=shards, sleep_ms=sleep_ms)


class Bursts(torch.utils.data.IterableDataset):
    """A stream that finishes items a block at a time (a record file read, or a block decoded, at
    once): each worker sleeps `block` x `sleep_ms`, then yields the block's `block` items at once.
    A worker sustains 1000 / sleep_ms items/s, in bursts."""

    def __init__(self, block: int = 160, sleep_ms: float = 2.0, n: int = 10_000_000) -> None:
        self.block, self.sleep_s, self.n = block, sleep_ms / 1000.0, n

    def __iter__(self):
        info = get_worker_info()
        me, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for start in range(me * self.block, self.n, workers * self.block):
            time.sleep(self.block * self.sleep_s)
            for i in range(start, start + self.block):
                yield torch.full((4,), float(i))


def make_bursts(block: int = 160, sleep_ms: float = 2.0) -> torch.utils.data.IterableDataset:
    return Bursts(block, sleep_ms)


class HoldsLambda(Dataset):
    """A dataset holding a lambda as its transform (fine under fork; spawn and forkserver must
    pickle it to the workers and cannot), 1 ms per sample."""

    def __init__(self) -> None:
        self.transform = lambda x: x * 2

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        time.sleep(0.001)
        return self.transform(torch.zeros(8))


def make_holds_lambda() -> Dataset:
    return HoldsLambda()


class LongTail(Dataset):
    """Samples that sleep `sleep_ms`, except one in a hundred (index % 100 == 7: 1% of them),
    which sleeps `slow_factor` times as long: a long per-sample tail that holds back the batch it
    falls in."""

    def __init__(self, n: int, sleep_ms: float, slow_factor: float) -> None:
        self.n, self.sleep_s, self.slow_factor = n, sleep_ms / 1000.0, slow_factor

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.sleep_s * (self.slow_factor if i % 100 == 7 else 1.0))
        return torch.full((4,), float(i)), i % 10


def make_long_tail(n: int = 100_000, sleep_ms: float = 2.0, slow_factor: float = 20.0) -> Dataset:
    return LongTail(n, sleep_ms, slow_factor)


def make_no_tail(n: int = 100_000, sleep_ms: float = 2.0) -> Dataset:
    return LongTail(n, sleep_ms, 1.0)


def make_sequential_sampler(dataset):
    """The user's own sampler: the dataset in index order (the slow samples of a LongTail then
    fall once every 100 samples, the same in every window)."""
    return torch.utils.data.SequentialSampler(dataset)


class FolderLatency(Dataset):
    """One sample per `sample_*` file under `root`, each read and then waited on (storage
    latency, not CPU) as `root/latency_ms` says: `BASE` milliseconds, or `BASE P SPIKE` for a
    wait of SPIKE ms with probability P instead (a rare slow read), drawn independently in every
    process. A node's own data folder decides how slow its loader is, with the same command
    line on every node."""

    def __init__(self, root) -> None:
        import os

        self.paths = sorted(os.path.join(root, f) for f in os.listdir(root) if f.startswith("sample_"))
        with open(os.path.join(root, "latency_ms")) as f:
            parts = [float(x) for x in f.read().split()]
        self.base_s = parts[0] / 1000.0
        self.p, self.spike_s = (parts[1], parts[2] / 1000.0) if len(parts) == 3 else (0.0, 0.0)
        self._rng: random.Random | None = None
        self._pid = 0

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        with open(self.paths[i], "rb") as f:
            x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).clone()
        if self.p:
            if self._rng is None or self._pid != os.getpid():
                self._rng, self._pid = random.Random(os.urandom(8)), os.getpid()
            time.sleep(self.spike_s if self._rng.random() < self.p else self.base_s)
        else:
            time.sleep(self.base_s)
        return x


def make_folder_latency(root) -> Dataset:
    return FolderLatency(root)


def write_latency_folder(root, latency_ms: float, n: int = 256, size: int = 256, spike: tuple[float, float] | None = None) -> str:
    """A data folder for `make_folder_latency`: `n` files of `size` bytes and its latency
    (`spike` = (probability, ms) for rare slow reads)."""
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        with open(os.path.join(root, f"sample_{i:05d}"), "wb") as f:
            f.write(bytes([i % 251]) * size)
    with open(os.path.join(root, "latency_ms"), "w") as f:
        f.write(f"{latency_ms}" + ("" if spike is None else f" {spike[0]} {spike[1]}") + "\n")
    return str(root)


class PythonCpu(Dataset):
    """Samples that each cost `cpu_ms` of pure-Python CPU work (a loop on the thread's CPU clock,
    holding the GIL as Python code does) and return a (3, 32, 32) float tensor and a label."""

    def __init__(self, n: int, cpu_ms: float) -> None:
        self.n, self.cpu_s = n, cpu_ms / 1000.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        end = time.thread_time() + self.cpu_s
        x = 0
        while time.thread_time() < end:
            x += 1
        return torch.full((3, 32, 32), float(i % 7)), i % 10


def make_python_cpu(n: int = 100_000, cpu_ms: float = 3.0) -> Dataset:
    return PythonCpu(n, cpu_ms)


class EpochIndexStream(torch.utils.data.IterableDataset):
    """`items` items split across workers; every epoch's __iter__ first builds an index for
    `index_s` (a sleep), then yields its items at `item_ms` each (sleeps): an epoch start that
    costs however persistent the workers are."""

    def __init__(self, items: int = 320, index_s: float = 0.3, item_ms: float = 2.0) -> None:
        self.items, self.index_s, self.item_ms = items, index_s, item_ms

    def __iter__(self):
        info = get_worker_info()
        mine = range(self.items) if info is None else range(info.id, self.items, info.num_workers)
        time.sleep(self.index_s)
        for i in mine:
            time.sleep(self.item_ms / 1000)
            yield torch.zeros(3, 8, 8), i


def make_epoch_index_stream(items: int = 320, index_s: float = 0.3, item_ms: float = 2.0):
    return EpochIndexStream(items, index_s, item_ms)
