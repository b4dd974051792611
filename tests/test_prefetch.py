"""CUDAPrefetcher: iteration contract on CPU, stream protocol with a fake, and on a GPU."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from loaderbench.errors import UsageError
from loaderbench.model import ComputeSpec
from loaderbench.workload.batch import iter_tensors, move_to_device
from loaderbench.workload.compute import build_compute, normalize_on_device
from loaderbench.workload.prefetch import CUDAPrefetcher

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


def _loader(n: int = 10, batch_size: int = 4) -> DataLoader[Any]:
    ds = TensorDataset(torch.arange(n * 3, dtype=torch.float32).reshape(n, 3), torch.arange(n))
    return DataLoader(ds, batch_size=batch_size, shuffle=False)


class NoLen:
    """An iterable with no __len__ (like a DataLoader over an IterableDataset without one)."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        yield torch.zeros(2)


class Failing:
    """Yields `good` batches, then raises."""

    def __init__(self, good: int) -> None:
        self.good = good

    def __len__(self) -> int:
        return self.good + 1

    def __iter__(self) -> Iterator[torch.Tensor]:
        for i in range(self.good):
            yield torch.full((2,), float(i))
        raise RuntimeError("bad sample at index 137")


# ---- pass-through (CPU) --------------------------------------------------------------------


def test_passthrough_yields_identical_batches_and_partial_last_batch() -> None:
    loader = _loader(10, 4)
    expected = list(loader)
    got = list(CUDAPrefetcher(loader, device="cpu"))
    assert len(got) == 3
    assert [b[0].shape[0] for b in got] == [4, 4, 2]
    for g, e in zip(got, expected):
        assert type(g) is type(e)
        assert torch.equal(g[0], e[0]) and torch.equal(g[1], e[1])


def test_passthrough_returns_the_loaders_own_objects() -> None:
    batches = [Pair(torch.zeros(2), torch.ones(2)), {"x": torch.zeros(1), "meta": ["p"]}]
    got = list(CUDAPrefetcher(batches, device=CPU))
    assert got[0] is batches[0] and got[1] is batches[1]


def test_len_is_the_loaders_len() -> None:
    assert len(CUDAPrefetcher(_loader(10, 4), device="cpu")) == 3
    assert len(CUDAPrefetcher([1, 2], device="cpu")) == 2


def test_len_of_a_loader_without_len_is_a_type_error() -> None:
    pf = CUDAPrefetcher(NoLen(), device="cpu")
    with pytest.raises(TypeError, match="NoLen has no len"):
        len(pf)
    assert len(list(pf)) == 1  # iteration still works (list() tolerates the TypeError)


def test_empty_loader_yields_nothing() -> None:
    empty = DataLoader(TensorDataset(torch.zeros(0, 3)), batch_size=4)
    pf = CUDAPrefetcher(empty, device="cpu")
    assert len(pf) == 0
    assert list(pf) == []
    it = iter(pf)
    with pytest.raises(StopIteration):
        next(it)


def test_exactly_one_stop_iteration_and_no_none_batch() -> None:
    pf = CUDAPrefetcher(_loader(10, 4), device="cpu")
    it = iter(pf)
    got = []
    stops = 0
    while True:
        try:
            got.append(next(it))
        except StopIteration:
            stops += 1
            break
    assert stops == 1 and len(got) == 3 and all(b is not None for b in got)
    for _ in range(2):  # an exhausted iterator stays exhausted: no restart, no other error
        with pytest.raises(StopIteration):
            next(it)


def test_multiple_epochs_and_early_break() -> None:
    pf = CUDAPrefetcher(_loader(10, 4), device="cpu")
    for _ in range(3):
        assert [b[1].tolist() for b in pf] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    for _b in pf:  # break mid-epoch; the next epoch starts from the beginning
        break
    assert next(iter(pf))[1].tolist() == [0, 1, 2, 3]


def test_transform_is_applied_to_every_batch() -> None:
    calls = []

    def double(batch: Any) -> Any:
        calls.append(1)
        x, y = batch
        return x * 2, y

    got = list(CUDAPrefetcher(_loader(10, 4), device="cpu", transform=double))
    assert len(calls) == 3
    assert got[2][0].tolist() == [[48.0, 50.0, 52.0], [54.0, 56.0, 58.0]]


def test_normalize_on_device_as_transform_keeps_labels_and_structure() -> None:
    imgs = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    batch = {"img": imgs, "label": torch.tensor([1, 2]), "meta": ["a", "b"]}
    (out,) = list(CUDAPrefetcher([batch], device="cpu", transform=normalize_on_device))
    assert out["img"].dtype == torch.float32 and out["label"] is batch["label"]
    assert out["meta"] is batch["meta"]
    assert torch.allclose(out["img"][0, 0], torch.full((4, 4), (1 - 0.485) / 0.229))


def test_loader_error_is_raised_after_the_last_good_batch() -> None:
    pf = CUDAPrefetcher(Failing(good=2), device="cpu")
    it = iter(pf)
    assert next(it).tolist() == [0.0, 0.0]
    assert next(it).tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError, match="index 137"):
        next(it)


def test_loader_error_on_the_first_batch_is_raised_at_once() -> None:
    with pytest.raises(RuntimeError, match="index 137"):
        next(iter(CUDAPrefetcher(Failing(good=0), device="cpu")))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only defaults")
def test_device_defaults_to_cpu_without_cuda_and_explicit_cuda_is_a_usage_error() -> None:
    pf = CUDAPrefetcher([torch.zeros(1)])
    assert pf.device == CPU and pf.copy_stream is None
    with pytest.raises(UsageError, match="CUDA is not available"):
        CUDAPrefetcher([torch.zeros(1)], device="cuda")


# ---- the stream protocol, with a recording fake (no GPU needed) ----------------------------


class FakeStreams:
    """Stands for `_CudaStreams`; logs copies and hand-overs in order."""

    stream = "fake-stream"

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def copy(self, host_batch: Any, transform: Any) -> Any:
        self.log.append(f"copy{int(host_batch[1][0]) // 4}")
        return host_batch

    def hand_over(self, batch: Any) -> Any:
        self.log.append(f"hand{int(batch[1][0]) // 4}")
        return batch


def test_protocol_order_consumer_waits_before_the_next_copy_is_queued() -> None:
    """hand_over(N) (consumer waits for copy N) must come before copy(N+1) is queued, and
    copy(N+1) before batch N is delivered: that ordering is the overlap (NOTE, point 1)."""
    log: list[str] = []
    pf = CUDAPrefetcher(_loader(10, 4), device="cpu")
    pf._ops = FakeStreams(log)  # type: ignore[assignment]
    for b in pf:
        log.append(f"use{int(b[1][0]) // 4}")
    assert log == ["copy0", "hand0", "copy1", "use0", "hand1", "copy2", "use1", "hand2", "use2"]


class _LoggingStream:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    def wait_stream(self, other: _LoggingStream) -> None:
        self.log.append(f"{self.name}.wait({other.name})")


def test_cuda_stream_protocol_with_faked_cuda_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real `_CudaStreams` with torch.cuda's stream calls faked: two-way waits in the right
    places, the transform inside the side-stream context, record_stream on every nested leaf,
    and one stream for all epochs."""
    from contextlib import contextmanager, nullcontext

    from loaderbench.workload.prefetch import _CudaStreams

    log: list[str] = []
    created: list[str] = []
    consumer = _LoggingStream("consumer", log)

    def new_stream(device: Any = None) -> _LoggingStream:
        created.append(str(device))
        return _LoggingStream("copy", log)

    @contextmanager
    def use_stream(stream: _LoggingStream) -> Iterator[None]:
        log.append(f"enter({stream.name})")
        yield
        log.append(f"exit({stream.name})")

    monkeypatch.setattr(torch.cuda, "Stream", new_stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: consumer)
    monkeypatch.setattr(torch.cuda, "stream", use_stream)
    monkeypatch.setattr(torch.cuda, "device", lambda device: nullcontext())
    monkeypatch.setattr(
        torch.Tensor,
        "record_stream",
        lambda self, s: log.append(f"record{self.shape[0]}({s.name})"),
    )

    def transform(batch: Any) -> Any:
        log.append("transform")
        return batch

    batches = [{"x": torch.zeros(1), "nested": [Pair(torch.zeros(2), torch.zeros(3)), "s"]}] * 2
    pf = CUDAPrefetcher(batches, device="cpu", transform=transform)
    pf._ops = _CudaStreams(CPU)  # device CPU so that the moves are no-ops here
    for epoch in range(2):
        log.clear()
        for i, _ in enumerate(pf):
            log.append(f"use{i}")
        copy = ["copy.wait(consumer)", "enter(copy)", "transform", "exit(copy)"]
        hand = [
            "consumer.wait(copy)",
            "record1(consumer)",
            "record2(consumer)",
            "record3(consumer)",
        ]
        assert log == copy + hand + copy + ["use0"] + hand + ["use1"], epoch
    assert created == ["cpu"]


# ---- on a GPU ------------------------------------------------------------------------------


def _nested_host_batches(n: int, generator: torch.Generator) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        out.append(
            {
                "img": torch.randint(
                    0, 256, (16, 3, 32, 32), dtype=torch.uint8, generator=generator
                ).pin_memory(),
                "x": torch.randn(16, 256, generator=generator).pin_memory(),
                "pair": Pair(
                    torch.randn(16, 7, generator=generator), torch.arange(16) + i
                ),  # pageable
                "meta": [f"/data/{i}/{j}.jpg" for j in range(16)],
                "i": i,
            }
        )
    return out


def _all_equal(a: Any, b: Any) -> torch.Tensor:
    """A GPU bool: every tensor leaf of `a` equals its counterpart in `b` (no host sync)."""
    return torch.stack([(x == y).all() for x, y in zip(iter_tensors(a), iter_tensors(b))]).all()


@pytest.mark.gpu
@needs_cuda
def test_gpu_batches_are_bit_exact_under_in_place_edits_and_a_slow_consumer() -> None:
    dev = torch.device("cuda")
    host = _nested_host_batches(30, torch.Generator().manual_seed(0))
    refs = [move_to_device(b, dev) for b in host]  # plain synchronous .to
    torch.cuda.synchronize()
    oks = []
    pf = CUDAPrefetcher(host, device=dev)
    it = iter(pf)
    for i in range(30):
        b = next(it)
        assert b["i"] == i and b["meta"] is host[i]["meta"] and type(b["pair"]) is Pair
        assert all(t.is_cuda for t in iter_tensors(b))
        torch.cuda._sleep(5_000_000)  # slow consumer: every check below runs late on the GPU
        oks.append(_all_equal(b, refs[i]))
        b["x"].mul_(2)  # the consumer edits its inputs in place
        b["img"].add_(1)
        oks.append((b["x"] == refs[i]["x"] * 2).all())
        oks.append((b["img"] == refs[i]["img"] + 1).all())
        del b  # release batch i before the prefetcher queues the copy after next
    with pytest.raises(StopIteration):
        next(it)
    assert bool(torch.stack(oks).all().item())


@pytest.mark.gpu
@needs_cuda
def test_gpu_stream_is_created_once_per_prefetcher_across_epochs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created: list[int] = []
    original = torch.cuda.Stream

    class CountingStream(original):  # type: ignore[misc, valid-type]
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            if "stream_id" not in kwargs:  # current_stream() wraps existing streams this way
                created.append(1)
            return super().__new__(cls, *args, **kwargs)

    monkeypatch.setattr(torch.cuda, "Stream", CountingStream)
    batches = [(torch.zeros(8, 3).pin_memory(), torch.arange(8)) for _ in range(5)]
    pf = CUDAPrefetcher(batches, device="cuda")
    stream = pf.copy_stream
    for _ in range(6):
        assert len(list(pf)) == 5
    torch.cuda.synchronize()
    assert len(created) == 1
    assert pf.copy_stream is stream


@pytest.mark.gpu
@needs_cuda
def test_gpu_reserved_memory_levels_off_over_40_short_epochs() -> None:
    """A new stream per epoch would strand cached blocks: 40 epochs of 20 batches of 256x3x224x224 uint8, normalized on the device.

    The consumer synchronizes once per step, as a loop that logs `loss.item()` does, so the host
    cannot run epochs ahead of the GPU (see the memory paragraph of the NOTE in prefetch.py).
    """
    dev = torch.device("cuda")
    imgs = torch.randint(0, 256, (256, 3, 224, 224), dtype=torch.uint8).pin_memory()
    labels = torch.arange(256).pin_memory()
    loader = [(imgs, labels)] * 20
    batch_set_bytes = imgs.numel() * (1 + 4) + labels.numel() * 8  # uint8 copy + float result
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_reserved(dev)
    pf = CUDAPrefetcher(loader, device=dev, transform=normalize_on_device)
    reserved = []
    for _ in range(40):
        for x, y in pf:
            x.mul_(0.5)
            y.add_(1)
            torch.cuda.current_stream(dev).synchronize()
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved(dev) - baseline)
    mib = [r // 2**20 for r in reserved]
    assert max(reserved[1:]) - reserved[1] <= batch_set_bytes, mib
    assert reserved[1] <= 5 * batch_set_bytes, mib  # about N-1, N and N+1 in flight


@pytest.mark.gpu
@needs_cuda
def test_gpu_steady_state_does_not_synchronize() -> None:
    dev = torch.device("cuda")
    batches = [
        (torch.zeros(64, 3, 32, 32, dtype=torch.uint8).pin_memory(), torch.arange(64).pin_memory())
    ]
    pf = CUDAPrefetcher(batches * 5, device=dev, transform=normalize_on_device)
    list(pf)  # first epoch: makes the normalization constants (a one-off blocking copy)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for x, _ in pf:
            x.mul_(2)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


@pytest.mark.gpu
@needs_cuda
def test_gpu_copy_of_the_next_batch_is_hidden_behind_compute() -> None:
    """A pinned source + side stream: the copy mostly overlaps the step."""
    dev = torch.device("cuda")
    host = [torch.rand(64, 3, 224, 224).pin_memory() for _ in range(4)]  # ~38.5 MB each
    loader = [host[i % 4] for i in range(20)]

    def timed_ms(fn: Any) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    copy_ms = statistics.median(
        timed_ms(lambda: host[0].to(dev, non_blocking=True)) for _ in range(5)
    )
    spin_ms = max(3 * copy_ms, 5.0)
    step = build_compute(ComputeSpec(kind="spin", ms=spin_ms), dev)

    def serial() -> None:
        for b in loader:
            step(b.to(dev, non_blocking=True))

    def prefetched() -> None:
        for b in CUDAPrefetcher(loader, device=dev):
            step(b)

    serial_ms = timed_ms(serial)
    prefetched_ms = timed_ms(prefetched)
    hidden_ms = serial_ms - prefetched_ms
    # at least half of the copy time is hidden behind the steps
    assert hidden_ms > 0.5 * len(loader) * copy_ms, (serial_ms, prefetched_ms, copy_ms, spin_ms)
