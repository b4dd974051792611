"""`loaderbench profile`: one set of DataLoader settings from the sweep's config, the dataset built,
its stage profile measured (measure/stages.py) and summarised (analysis/stages.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loaderbench.errors import DataError, UsageError
from loaderbench.model import AXES_BY_NAME, DatasetSpec, LoaderSettings, StageRecord
from loaderbench.orchestration.config import SweepConfig, option

if TYPE_CHECKING:  # the command's module imports this one: the analysis is imported when a profile runs
    from loaderbench.analysis.stages import StageProfile
    from loaderbench.conclusions import InOrderTrial
    from loaderbench.results import SweepProfile

PROFILE_AXES = ("num_workers", "batch_size", "pin_memory", "prefetch_factor", "mp_context", "worker_threads",
                "main_threads", "decoder")
"""The grid axes a profile takes (one value each); the others mean nothing to it."""

DEFAULT_SAMPLES = 200
DEFAULT_TIME_BUDGET_S = 20.0
DEFAULT_TOP = 10


@dataclass(frozen=True)
class ProfileOutcome:
    """A profile as the command renders it: the dataset and settings profiled, the device,
    the raw record and its table."""

    dataset: DatasetSpec
    settings: LoaderSettings
    device: str
    record: StageRecord
    profile: StageProfile
    setup_s: float  # building the dataset, before the profile's budget starts

    def to_dict(self) -> dict[str, Any]:
        """Everything the table shows (and the raw timings), for `--format json`."""
        # The profile's own `settings` (the sweep's pick, None here) gives way to the settings profiled.
        return {
            "dataset": self.dataset.to_dict(),
            **self.profile.to_dict(),
            "settings": self.settings.to_dict(),
            "device": self.device,
            "setup_s": self.setup_s,
            "raw": self.record.to_dict(),
        }


def profile_settings(config: SweepConfig, *, cuda: bool) -> LoaderSettings:
    """The one set of DataLoader settings a profile measures, from the config's grid: each of
    PROFILE_AXES must have one value (UsageError naming the flag otherwise); an axis left at
    the sweep's default takes the profile's: 1 worker, batch size 256 on a CUDA device and 64
    without, pin_memory on a CUDA device, prefetch_factor 2."""
    from loaderbench.orchestration.plan import DEFAULT_BATCH_CPU, DEFAULT_BATCH_GPU

    values: dict[str, Any] = {}
    for name in PROFILE_AXES:
        axis = AXES_BY_NAME[name]
        given = config.grid.get(name)
        if given is None or given == axis.default:
            values[name] = None
            continue
        if len(given) != 1:
            flag = option("grid", name).flag_name
            shown = ",".join("default" if v is None else str(v) for v in given)
            raise UsageError(f"{flag} {shown}: a profile measures one setting; give one value, e.g. {flag} "
                             f"{given[-1]}")
        values[name] = given[0]
    workers = 1 if values["num_workers"] is None else values["num_workers"]
    return LoaderSettings(
        num_workers=workers,
        pin_memory=cuda if values["pin_memory"] is None else bool(values["pin_memory"]),
        prefetch=False,
        prefetch_factor=(values["prefetch_factor"] or 2) if workers else None,
        persistent_workers=False,
        batch_size=values["batch_size"] or (DEFAULT_BATCH_GPU if cuda else DEFAULT_BATCH_CPU),
        mp_context=values["mp_context"] if workers else None,
        worker_threads=values["worker_threads"] if workers else None,
        main_threads=values["main_threads"],
        decoder=values["decoder"] or "pil",
    )


def dataset_for(config: SweepConfig, decoder: str, cache_dir: Path | None = None) -> tuple[Any, Any]:
    """(dataset, collate function) of `config` (resolved) with `decoder` (the `--decoder` axis:
    `datasets.with_decoder`; nvjpeg's workers send the encoded bytes, collated as they are).
    Raises what building the dataset raises, UsageError for a decoder its dataset cannot take."""
    from loaderbench.workload import datasets

    dataset = datasets.with_decoder(datasets.build_dataset(config.dataset, cache_dir=cache_dir), decoder)
    collate = datasets.build_collate_fn(config.dataset)
    if decoder == "nvjpeg":
        from torch.utils.data import default_collate

        from loaderbench.workload.decode import EncodedCollate

        collate = EncodedCollate(collate or default_collate)
    return dataset, collate


def execute_profile(
    config: SweepConfig,
    *,
    samples: int = DEFAULT_SAMPLES,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
    in_worker: bool = False,
    top: int = DEFAULT_TOP,
    cache_dir: Path | None = None,
) -> ProfileOutcome:
    """The whole `loaderbench profile`: the settings (`profile_settings`), the device, the
    dataset and its collate function built, the stage profile measured within `time_budget_s`
    seconds (counted from after the dataset is built) and summarised (`top` functions of the
    rest of `__getitem__`).

    Raises UsageError for settings a profile cannot take (several values of an axis,
    `in_worker` without workers, CUDA asked for and missing, `--decoder nvjpeg` without CUDA),
    DataError when the dataset cannot be built or raises while it is profiled (its type and
    message in one line).
    """
    from loaderbench.analysis.stages import summarize_profile
    from loaderbench.measure.stages import ProfilePlan, profile_stages
    from loaderbench.measure.trial import resolve_device

    device = resolve_device(config.measure)
    settings = profile_settings(config, cuda=device.startswith("cuda"))
    if settings.decoder == "nvjpeg" and not device.startswith("cuda"):
        raise UsageError(f"--decoder nvjpeg runs on a CUDA GPU and the profile's device is {device}: use --decoder pil "
                         "or torchvision (or run it on a GPU)")
    if in_worker and settings.num_workers == 0:
        raise UsageError("--in-worker times the samples inside a DataLoader worker: give --num-workers 1 or more")
    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(torch.device(device))
    t0 = time.perf_counter()
    dataset, collate = dataset_for(config, settings.decoder, cache_dir)
    setup_s = time.perf_counter() - t0
    plan = ProfilePlan(samples=samples, time_budget_s=time_budget_s, in_worker=in_worker, top=top,
                       seed=config.seed, device=device)
    try:
        record = profile_stages(dataset, settings, plan, collate_fn=collate)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's dataset may raise anything: one line, exit 2
        first = (str(exc).strip().splitlines() or [""])[0]
        raise DataError(f"the dataset raised {type(exc).__name__} while it was profiled: {first}; "
                        "fix the dataset (a sweep of it fails the same way)") from exc
    return ProfileOutcome(dataset=config.dataset, settings=settings, device=device, record=record,
                          profile=summarize_profile(record, top=top), setup_s=setup_s)


# ---------------------------------------------------------------------------------------------
# The sweep's profile of its pick
# ---------------------------------------------------------------------------------------------

# NOTE [the sweep's stage profile]
#     After the search (and its drift check) the sweep profiles the dataset at its pick's settings
#     (`profile_pick`), in this process, as `loaderbench profile` does, with what the what-ifs
#     beyond the settings need (the JPEG decoders on the dataset's own images, nvJPEG on a CUDA
#     device, a batched fetch: measure/alternatives.py) and without the profiler's pass over the
#     rest of __getitem__ (`loaderbench profile` names those functions). Its budget is
#     SWEEP_PROFILE_SHARE of the sweep's time before it, between SWEEP_PROFILE_MIN_S and
#     SWEEP_PROFILE_MAX_S, and never past what is left of --time-budget (at least the minimum); the
#     search keeps that share of --time-budget for it (run.py), so the profile counts against
#     --time-budget and stays under a tenth of the sweep's wall time. Each pass ends at its share
#     of the budget or when its samples are timed: the embedded JPEGs' full profile (200 samples)
#     takes about 1.6 s on the 2-core machine, where the default sweep takes 10-30 s, so a short
#     sweep gets a shorter profile (fewer samples, named as cut short) rather than one that
#     doubles its time (docs/benchmarks.md, section 13). A dataset that fails while profiled does
#     not fail the sweep: the record keeps the error.

SWEEP_PROFILE_SHARE = 0.08
SWEEP_PROFILE_MIN_S = 0.5
SWEEP_PROFILE_MAX_S = 15.0
SWEEP_PROFILE_SAMPLES = DEFAULT_SAMPLES


def sweep_profile_budget_s(time_budget_s: float, left_s: float | None = None, elapsed_s: float | None = None) -> float:
    """The seconds the sweep's profile may take (NOTE [the sweep's stage profile]): a share of
    the sweep's time so far (`elapsed_s`; without it, of --time-budget: what the search keeps)
    within its bounds, at most `left_s` (what --time-budget has left) but never under the
    minimum."""
    basis = time_budget_s if elapsed_s is None else elapsed_s
    budget = min(SWEEP_PROFILE_MAX_S, max(SWEEP_PROFILE_MIN_S, SWEEP_PROFILE_SHARE * basis))
    if left_s is not None:
        budget = min(budget, max(SWEEP_PROFILE_MIN_S, left_s))
    return budget


def profile_pick(config: SweepConfig, settings: LoaderSettings, budget_s: float, *,
                 cache_dir: Path | None = None) -> SweepProfile:
    """The sweep's stage profile of its pick (NOTE [the sweep's stage profile]): the dataset of
    `config` (resolved) built again with the pick's decoder, profiled at `settings` within
    `budget_s` seconds, the build included. Never raises for the dataset: a failure is the
    record's `error` (one line)."""
    import torch

    from loaderbench.measure.stages import ProfilePlan, profile_stages
    from loaderbench.measure.trial import resolve_device
    from loaderbench.results import SweepProfile

    t0 = time.perf_counter()
    try:
        device = resolve_device(config.measure)
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        dataset, collate = dataset_for(config, settings.decoder, cache_dir)
        left = max(0.2, budget_s - (time.perf_counter() - t0))
        plan = ProfilePlan(samples=SWEEP_PROFILE_SAMPLES, time_budget_s=left, seed=config.seed, device=device,
                           attribute=False, alternatives=True)
        record = profile_stages(dataset, settings, plan, collate_fn=collate)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's dataset may raise anything: recorded, the sweep goes on
        first = (str(exc).strip().splitlines() or [""])[0]
        return SweepProfile(settings, wall_s=time.perf_counter() - t0, budget_s=budget_s,
                            error=f"{type(exc).__name__}: {first}"[:300])
    return SweepProfile(settings, record=record, wall_s=time.perf_counter() - t0, budget_s=budget_s)


def in_order_blocked(config: SweepConfig, pick: LoaderSettings, torch_version: str) -> InOrderTrial | None:
    """Why the sweep cannot try `in_order=False` at `pick` (None when it can): no workers or one
    (one worker's batches come in order whatever the setting), the grid has it already, this
    torch's DataLoader has no in_order, or the loader class takes none."""
    from loaderbench.conclusions import InOrderTrial
    from loaderbench.orchestration.validate import _check_loader, check_torch_axes

    if pick.num_workers <= 1:
        return InOrderTrial.NO_WORKERS
    if False in (config.grid.get("in_order") or ()):
        return InOrderTrial.IN_GRID
    asked = config.with_grid(in_order=(True, False))
    try:
        check_torch_axes(asked, torch_version)
    except UsageError:
        return InOrderTrial.OLD_TORCH
    try:
        _check_loader(asked)
    except (UsageError, DataError):
        return InOrderTrial.LOADER_CLASS
    return None
