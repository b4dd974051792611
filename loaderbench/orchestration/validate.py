"""Checks of the workload in the parent process before any config runs: the dataset built once under
a deadline, the first samples and one batch, the sampler, GPU steps without CUDA."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from loaderbench.kinds import KINDS
from loaderbench.model import GRID_AXES
from loaderbench.orchestration.config import SweepConfig
from loaderbench.orchestration.plan import Machine
from loaderbench.orchestration.preflight import (
    WorkloadFacts,
    workload_facts,
)


def _build_with_deadline(config: SweepConfig, cache_dir: str | None) -> Any:
    """Build the dataset in this process, under a deadline of `--config-timeout` seconds (a user
    factory that never returns must not hang the sweep)."""
    from loaderbench.workload import datasets

    def build() -> Any:
        return datasets.build_dataset(config.dataset, cache_dir=None if cache_dir is None else Path(cache_dir))

    name = config.dataset.factory or config.dataset.kind
    return _with_deadline(config, build, f"building the dataset ({name})", "check the factory")


T = TypeVar("T")


def _with_deadline(config: SweepConfig, fn: Callable[[], T], what: str, fix: str) -> T:
    """`fn()` under a deadline of `--config-timeout` seconds: the user's code that runs in this
    process (the factory, the first samples and their collate, the sampler) must not hang the
    sweep. DataError "<what> took over N s (--config-timeout): <fix>, or raise --config-timeout"
    when it expires. The deadline is a SIGALRM, so it applies only in the main thread of the
    main interpreter; elsewhere `fn` runs plain."""
    import signal
    import threading

    from loaderbench.errors import DataError

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        return fn()

    def expired(signum: int, frame: Any) -> None:
        raise _DeadlineExpired

    seconds = max(1, int(config.config_timeout_s))
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        return fn()
    except _DeadlineExpired:
        raise DataError(f"{what} took over {seconds} s (--config-timeout): {fix}, or raise --config-timeout") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class _DeadlineExpired(BaseException):
    """BaseException, so a factory's own `except Exception` cannot swallow the deadline."""


def validate_workload(config: SweepConfig, machine: Machine, *, cache_dir: str | None) -> WorkloadFacts:
    """Fail before any config runs: build the dataset once in this process (DataError for a
    missing folder, a failing import, ...; it also fills the synthetic-JPEG cache the per-config
    processes read) and reject GPU steps without CUDA (UsageError). Returns what the preflight
    checks need to know about the dataset."""
    from loaderbench.errors import DataError, UsageError
    from loaderbench.workload import datasets

    assert config.compute is not None
    cuda_in_use = machine.cuda and config.measure.device != "cpu"
    if config.compute.kind in ("spin",) and not cuda_in_use:
        raise UsageError(
            f"--compute {config.compute.label()} needs a CUDA GPU; without one use "
            f"--compute sleep:{config.compute.ms:g} (a host sleep that stands for the step)"
        )
    if config.measure.device.startswith("cuda") and not machine.cuda:
        raise UsageError("--device cuda: CUDA is not available here; use --device cpu or auto")
    import torch

    check_torch_axes(config, torch.__version__)
    if config.compute.kind == "model":
        from loaderbench.workload.compute import check_model_name

        check_model_name(config.compute.label(), config.compute.model or "")
    if config.compute.kind == "step":
        # Importable and callable here; made and run on a first batch in the measuring process,
        # by the compute ceiling, before any config (orchestration/ceilings.py).
        from loaderbench.workload.compute import load_step_factory

        load_step_factory(config.compute.factory or "")
    _check_loader(config)
    if config.dataset.kind == "tensor":
        _check_sample_fits(config)
    dataset = _build_with_deadline(config, cache_dir)
    datasets.build_collate_fn(config.dataset)
    try:
        size = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        size = None  # an IterableDataset without a length
    if size == 0:
        raise DataError(f"the dataset ({config.dataset.factory or config.dataset.kind}) has 0 samples: nothing to load")
    own_epochs = KINDS[config.dataset.kind].own_length and not config.measure.epoch_batches
    too_big = sorted(b for b in (config.grid["batch_size"] or ()) if size is not None and own_epochs and b > size)
    if too_big:
        raise UsageError(
            f"--batch-size {too_big[-1]} is larger than the dataset ({size} samples): every batch would hold "
            f"{size}, so throughput, ceilings and the recommended DataLoader would describe a batch that never "
            f"exists; give --batch-size {size} or less"
        )
    many_workers = any(n >= 2 for n in (config.grid["num_workers"] or ()))
    name = config.dataset.factory or config.dataset.kind
    facts = _with_deadline(config, lambda: workload_facts(dataset, check_replication=many_workers),
                           f"reading the first samples of the dataset ({name}) in this process",
                           "a sample that never returns hangs every config; check __getitem__ / __iter__")
    _with_deadline(config, lambda: warm_up(dataset, config, facts.sample_bytes),
                   f"loading one batch of the dataset ({name}) in this process before the first config",
                   "a sample or the collate never returned; check __getitem__ and --collate-fn")
    if config.dataset.sampler:
        kind, indices = _with_deadline(config, lambda: _sampler_kind(config, dataset, facts),
                                       f"drawing from --sampler {config.dataset.sampler}",
                                       "check the sampler factory")
        facts = replace(facts, sampler_kind=kind)
        too_big = sorted(b for b in (config.grid["batch_size"] or ()) if indices is not None and own_epochs and b > indices)
        if kind == "sampler" and too_big:
            raise UsageError(
                f"--batch-size {too_big[-1]} is larger than the epoch of --sampler {config.dataset.sampler} "
                f"({indices} indices): every batch would hold {indices}; give --batch-size {indices} or less"
            )
    return facts


def _major_minor(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as `2.5.1+cu121` ((0, 0) when unreadable)."""
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def check_torch_axes(config: SweepConfig, torch_version: str) -> None:
    """UsageError when the grid asks a DataLoader keyword that `torch_version` does not have
    (`Axis.min_torch`: `--in-order off` needs torch 2.6) for a value other than its default (the
    default is torch's own behaviour and is not passed, so it runs on any torch)."""
    from loaderbench.errors import UsageError

    have = _major_minor(torch_version)
    for a in GRID_AXES:
        if a.min_torch is None or have >= a.min_torch:
            continue
        asked = [v for v in config.grid.get(a.name) or () if v not in (a.default or ())]
        if asked:
            shown = ",".join(("on" if v else "off") if isinstance(v, bool) else str(v) for v in asked)
            need = ".".join(map(str, a.min_torch))
            raise UsageError(
                f"{a.flag} {shown}: the DataLoader keyword {a.loader_kw} came with torch {need}, and this is torch "
                f"{torch_version}, whose DataLoader does not take it: upgrade torch (torch>={need}), or drop {a.flag}"
            )


def _check_loader(config: SweepConfig) -> None:
    """The loader class (`--loader`, torch's DataLoader without it) takes every `--loader-arg`:
    DataError when it cannot be imported, UsageError naming the argument it does not take
    (checked on its signature: nothing is built)."""
    import inspect

    from loaderbench.errors import UsageError
    from loaderbench.workload import datasets

    if not config.dataset.loader and not config.loader_args:
        return
    if config.dataset.loader:
        cls = datasets.load_callable(config.dataset.loader, "StatefulDataLoader", "--loader")
        name = config.dataset.loader
    else:
        from torch.utils.data import DataLoader

        cls, name = DataLoader, "torch.utils.data:DataLoader"
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return  # no readable signature: the configs say what it refuses
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = {p.name for p in params if p.kind is not p.POSITIONAL_ONLY}
    for arg in config.loader_args:
        if arg not in names:
            raise UsageError(
                f"--loader-arg {arg}: {name} takes no keyword argument {arg!r}"
                + ("" if config.dataset.loader else "; name your loader class with --loader MODULE:NAME")
            )
    for a in GRID_AXES:  # a newer DataLoader keyword a loader class may not take (in_order)
        asked = [v for v in config.grid.get(a.name) or () if v not in (a.default or ())]
        if config.dataset.loader and a.min_torch is not None and asked and a.loader_kw not in names:
            raise UsageError(f"{a.flag}: {name} takes no keyword argument {a.loader_kw!r}; drop {a.flag}")


# The warm-up's batch may take at most this much memory, the samples and their collated copy
# together (so half of it each), and at most this share of the available memory: it runs in this
# process, before the preflight skips configs whose batches cannot fit (a 12 MiB sample at batch
# 20,000 once took 12 GiB here); a few samples warm the decoder and the collate as well, and a
# batch of 256 ImageNet-size float32 samples (150 MB) is still warmed whole.
WARM_UP_MAX_BYTES = 2**30
WARM_UP_MEMORY_SHARE = 1 / 8


def warm_up_samples(batch_size: int, length: int, sample_bytes: int | None, available_bytes: int | None) -> int:
    """How many samples the warm-up loads: one batch (`batch_size`, at most the dataset's
    `length`), fewer when that batch and its collated copy would take more than
    WARM_UP_MAX_BYTES or WARM_UP_MEMORY_SHARE of `available_bytes` (at least 1; `sample_bytes`:
    one sample's tensor bytes, None when unknown).

    >>> warm_up_samples(64, 1000, 2**20, 2**34), warm_up_samples(20000, 1024, 12 * 2**20, 24 * 2**30)
    (64, 42)
    """
    n = min(length, batch_size)
    if sample_bytes:
        room = min(WARM_UP_MAX_BYTES, WARM_UP_MEMORY_SHARE * available_bytes if available_bytes else WARM_UP_MAX_BYTES)
        n = min(n, max(1, int(room // (2 * sample_bytes))))
    return n


def warm_up(dataset: Any, config: SweepConfig, sample_bytes: int | None = None) -> None:
    """Load and collate one batch here before any trial, so the first measured trial does not pay
    for a cold start (the dataset's files in the page cache, the decoder's and the collate's
    first calls; the libraries a measuring process loads are warm once this process imported
    them); fewer samples when a batch would take much of the memory (`warm_up_samples`).
    Errors are ignored: the trials report their own. A map-style dataset only (an
    IterableDataset may be a one-pass stream)."""
    from torch.utils.data import IterableDataset, default_collate

    from loaderbench.machine.env import memory_available_bytes
    from loaderbench.workload import datasets

    if isinstance(dataset, IterableDataset):
        return
    try:
        n = warm_up_samples(min(config.grid["batch_size"] or (1,)), len(dataset), sample_bytes,
                            memory_available_bytes())
        collate = datasets.build_collate_fn(config.dataset) or default_collate
        collate([dataset[i] for i in range(n)])
    except Exception:  # noqa: BLE001 - a warm-up; the trials report any failure of the user's code
        pass


def _check_sample_fits(config: SweepConfig) -> None:
    """UsageError before building a tensor dataset whose one sample cannot fit in memory (the
    dataset allocates it, and the main process would be killed without a message)."""
    from loaderbench.errors import UsageError
    from loaderbench.machine.env import memory_available_bytes

    sample_bytes = 4 * math.prod(config.dataset.sample_shape)
    available = memory_available_bytes()
    if sample_bytes * 4 > available:
        raise UsageError(
            f"--sample-shape {','.join(map(str, config.dataset.sample_shape))}: one float32 sample is "
            f"{sample_bytes / 2**30:,.1f} GiB and {available / 2**30:,.1f} GiB of memory is available; "
            "give a smaller shape"
        )


def sampler_args(config: SweepConfig, world_size: int = 1) -> dict[str, Any]:
    """The keywords the user's `--sampler` factory is called with (DatasetSpec.sampler_args): those
    of batch_size (the smallest), seed, rank and world_size its signature accepts, as a
    single-process sweep's first repeat passes them; in a distributed sweep (`world_size` > 1)
    rank and world_size are each rank's own (None). DataError when it cannot be imported."""
    from loaderbench.measure.sampling import accepted_keywords
    from loaderbench.workload import datasets

    factory = datasets.load_callable(config.dataset.sampler or "", "make_sampler", "--sampler")
    distributed = world_size > 1
    offered = {"batch_size": min(config.grid["batch_size"] or (1,)), "seed": config.seed,
               "rank": None if distributed else 0, "world_size": None if distributed else 1}
    return accepted_keywords(factory, offered)


def _sampler_kind(config: SweepConfig, dataset: Any, facts: WorkloadFacts) -> tuple[str, int | None]:
    """('sampler' or 'batch_sampler', its length or None): what the user's `--sampler` factory
    makes for this dataset (DataError when it cannot be made or yields nothing; UsageError for
    an IterableDataset, which takes no sampler)."""
    from loaderbench.errors import DataError, UsageError
    from loaderbench.measure.sampling import call_factory, yields_batches
    from loaderbench.workload import datasets

    ref = config.dataset.sampler or ""
    if facts.iterable:
        raise UsageError(f"--sampler {ref}: the dataset is an IterableDataset, which takes no sampler; drop --sampler")
    factory = datasets.load_callable(ref, "make_sampler", "--sampler")
    bs = min(config.grid["batch_size"] or (1,))
    try:
        made = call_factory(factory, dataset, batch_size=bs, seed=config.seed, rank=0, world_size=1)
        kind = "batch_sampler" if yields_batches(made) else "sampler"
        try:
            length = len(made)
        except (TypeError, NotImplementedError):
            length = None
        return kind, length
    except Exception as exc:  # noqa: BLE001 - the user's code: one line naming it
        raise DataError(
            f"--sampler {ref}: making or drawing from the sampler failed with {type(exc).__name__}: "
            f"{' '.join(str(exc).split())}; check the factory (it is called with the dataset)"
        ) from None
