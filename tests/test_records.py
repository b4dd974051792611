"""The JSON boundary: enums and typed records in memory, plain JSON values in a result file."""

from __future__ import annotations

import json

import pytest

from loaderbench.conclusions import Finding, Knee, NotCleared, NotClearedCause, Remedy, RemedyKind
from loaderbench.model import (
    Ceiling,
    CeilingMethod,
    InputBound,
    Summary,
    Verdict,
    WaitPart,
    from_json,
    to_json,
)
from tests.helpers import settings


def test_enums_are_values_in_json_and_enums_again_when_read():
    s = Summary(samples_per_s=100, stall_fraction=0.5, data_wait_p50_s=0.1, data_wait_p95_s=0.2,
                compute_p50_s=0.1, step_p50_s=0.2, first_batch_s=1, verdict=Verdict.LOADER_BOUND,
                wait_parts_s={WaitPart.LOADER: 0.1}, band=InputBound.HIGHLY)
    d = json.loads(json.dumps(s.to_dict()))
    assert d["verdict"] == "loader-bound" and d["wait_parts_s"] == {"loader": 0.1} and d["band"] == "highly input-bound"
    back = Summary.from_dict(d)
    assert back == s and back.verdict is Verdict.LOADER_BOUND and isinstance(back.samples_per_s, float)
    assert list(back.wait_parts_s) == [WaitPart.LOADER]
    # An undecided verdict written as "" (schema 2 and before) is None; a value no member has is refused.
    assert Summary.from_dict({**d, "verdict": ""}).verdict is None
    with pytest.raises(ValueError):
        Summary.from_dict({**d, "verdict": "loader-bound (stall every 8 batches)"})


def test_a_finding_is_read_back_as_its_own_payload_class():
    f = NotCleared(settings(4), of_best=True, stall_fraction=0.3, band=InputBound.HIGHLY,
                   cause=NotClearedCause.GRID_EDGE, workers_needed=7)
    d = json.loads(json.dumps(f.to_dict()))
    assert d["kind"] == "not-cleared" and d["settings"]["num_workers"] == 4
    assert Finding.from_dict(d) == f and type(Finding.from_dict(d)) is NotCleared
    knee = Knee(settings(2), 900.0, 0.04, InputBound.NOT, swept=["prefetch_factor"])
    assert Finding.from_dict(json.loads(json.dumps(knee.to_dict()))) == knee
    with pytest.raises(ValueError):
        Finding.from_dict({"kind": "no-such-kind"})


def test_the_loader_branchs_records_cross_the_json_boundary_typed():
    # A tie the listing of a loader argument decided, a setting with loader arguments, the loader class.
    from loaderbench.conclusions import ListedFirst, LoaderClass
    from loaderbench.model import LoaderSettings

    tie = ListedFirst("snapshot_every_n_steps", 1000, [1, 10])
    assert Finding.from_dict(json.loads(json.dumps(tie.to_dict()))) == tie
    s = LoaderSettings(2, False, False, 2, False, 16, loader_args=(("snapshot_every_n_steps", 1000),),
                       loader_arg_order=(1,))
    knee = Knee(s, 900.0, 0.04, InputBound.NOT, swept=["snapshot_every_n_steps"])
    back = Finding.from_dict(json.loads(json.dumps(knee.to_dict())))
    assert back == knee and back.settings.loader_arg_order == (1,)  # type: ignore[attr-defined]
    loader = LoaderClass("torchdata.stateful_dataloader:StatefulDataLoader", ["snapshot_every_n_steps"], {"x": None})
    assert LoaderClass.from_dict(json.loads(json.dumps(loader.to_dict()))) == loader


def test_tuples_ints_and_nested_records_come_back_typed():
    c = Ceiling(16, 1800, 0.02, CeilingMethod.MEASURED, world_size=2, rank_samples_per_s=(1000.0, 800.0))
    back = Ceiling.from_dict(json.loads(json.dumps(c.to_dict())))
    assert back == c and back.rank_samples_per_s == (1000.0, 800.0) and back.method is CeilingMethod.MEASURED
    r = Remedy(RemedyKind.PREFETCH, measured=True, settings=settings(4, pf=True), gain=0.05)
    assert Remedy.from_dict(to_json(r)) == r
    assert from_json(list[tuple[int, float]], [[0, 1], [2, 3.5]]) == [(0, 1.0), (2, 3.5)]
    assert from_json(dict[int, float], {"16": 2}) == {16: 2.0}
