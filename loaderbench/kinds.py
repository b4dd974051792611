"""The dataset kinds: the one declaration of what each kind takes and how it behaves.

Consulted by the config (which [dataset] keys a kind uses), the sweep (real epochs or one long
one; files whose page-cache state can be controlled), the measuring process (how to build it),
compare (the workload fingerprint) and the renderers (a one-line description). Adding a kind is
one entry here plus its builder in workload/datasets.py. No torch: the commands that read results import
this.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

GENERATOR_VERSION = 1
"""Bumped whenever the synthetic JPEG generator would make different bytes for the same
arguments: part of its cache key and of the workload fingerprint, so a stale cache is never read
and runs made with another generator are not compared as equal."""

TRANSFORM = "imagenet_train_224"
"""The transform of the image datasets (RandomResizedCrop(224), flip, PILToTensor)."""

COMMON_KEYS = frozenset({"kind", "collate_fn", "sampler", "samples_per_batch"})
"""[dataset] keys every kind takes (`sampler_kind` is filled in by the sweep, not given)."""


@dataclass(frozen=True)
class DatasetKind:
    """One kind of dataset.

    `keys`: the [dataset] keys (and flags) it uses besides COMMON_KEYS; any other is refused.
    `own_length`: its length means something, so it runs real epochs (else one long epoch unless
    --epoch-batches). `in_files`: its samples may live in files under --data, whose page-cache
    state --cache controls and whose bytes the reads are set against; `needs_data`: --data is
    required (the folder dataset is its root). `describe(d)`: one line from a config's dataset dict. `fingerprint`: the
    keys (and constants) that define its workload. `builder`: "module:function" building it from
    a DatasetSpec (imported when a dataset is built).
    """

    name: str
    keys: frozenset[str]
    own_length: bool
    in_files: bool
    describe: Callable[[dict[str, Any]], str]
    fingerprint: tuple[str, ...]
    builder: str
    constants: dict[str, Any] = field(default_factory=dict)
    needs_data: bool = False
    file_extensions: str | None = None  # "images": only the files ImageFolder loads count


def _tensor_text(d: dict[str, Any]) -> str:
    shape = "x".join(str(x) for x in d.get("sample_shape", []))
    return f"tensor {shape} cpu {float(d.get('cpu_ms', 0)):g} ms + io {float(d.get('io_ms', 0)):g} ms per sample"


def _import_text(d: dict[str, Any]) -> str:
    roots = d.get("data_path")
    if not roots:
        return str(d.get("factory"))
    return f"{d.get('factory')} reading {', '.join(roots) if isinstance(roots, list) else roots}"


KINDS: dict[str, DatasetKind] = {
    k.name: k
    for k in (
        DatasetKind(
            "synthetic", frozenset({"num_samples", "image_size", "jpeg_quality", "seed"}), own_length=False,
            in_files=False, describe=lambda d: "synthetic",
            fingerprint=("num_samples", "image_size", "jpeg_quality", "seed"),
            builder="loaderbench.workload.datasets:build_synthetic",
            constants={"generator": GENERATOR_VERSION, "transform": TRANSFORM},
        ),
        DatasetKind(
            "folder", frozenset({"data"}), own_length=True, in_files=True,
            describe=lambda d: f"folder {d.get('data_path')}", fingerprint=(),
            builder="loaderbench.workload.datasets:build_folder", constants={"transform": TRANSFORM},
            needs_data=True, file_extensions="images",
        ),
        DatasetKind(
            "tensor", frozenset({"num_samples", "sample_shape", "cpu_ms", "io_ms", "seed"}), own_length=False,
            in_files=False, describe=_tensor_text, fingerprint=("num_samples", "sample_shape", "cpu_ms", "io_ms"),
            builder="loaderbench.workload.datasets:build_tensor",
        ),
        DatasetKind(
            "import", frozenset({"kwargs", "data"}), own_length=True, in_files=True,
            describe=_import_text, fingerprint=("factory", "kwargs"),
            builder="loaderbench.workload.datasets:build_import",
        ),
    )
}


def kind_name(value: str) -> str:
    """The kind a --dataset value names: a registered kind, or `import` for MODULE:FACTORY."""
    return value if value in KINDS else "import"


def describe(dataset: dict[str, Any]) -> str:
    """One line describing a config's dataset dict (a DatasetSpec's `to_dict()`)."""
    kind = KINDS.get(dataset.get("kind", "synthetic"))
    return kind.describe(dataset) if kind is not None else str(dataset.get("kind"))


def workload(config: dict[str, Any]) -> dict[str, Any]:
    """What defines the workload of a config dict (`SweepConfig.to_dict()` or a result file's
    `config`): the kind, the keys its kind says define it, the common keys that change what is
    loaded (collate_fn, sampler, samples_per_batch, and the loader class of `--loader`), the
    kind's constants (the synthetic generator's version, the transform) and the compute step.
    Not the data path: comparing the same dataset on two disks is what `compare` is for."""
    d = dict(config.get("dataset") or {})
    kind = KINDS.get(d.get("kind", "synthetic"))
    out: dict[str, Any] = {"kind": d.get("kind", "synthetic")}
    if kind is not None:
        out.update({k: d.get(k) for k in kind.fingerprint})
        out.update(kind.constants)
    else:
        out.update({k: v for k, v in d.items() if k not in ("data_path", "sampler_kind", "sampler_args")})
    for k in ("collate_fn", "sampler", "samples_per_batch", "loader"):
        if d.get(k) is not None:
            out[k] = d[k]
    compute = config.get("compute")
    out["compute"] = None if compute is None else {k: v for k, v in compute.items() if v not in (None, 0, 0.0)}
    return out


def workload_fingerprint(config: dict[str, Any]) -> str:
    """12 hex digits identifying `workload(config)`: two runs with the same fingerprint load the
    same data with the same per-item work and step, so their numbers are comparable. Pure."""
    blob = json.dumps(workload(config), sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
