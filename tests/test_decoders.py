"""The decoder axis (`--decoder pil,torchvision,nvjpeg`, the synthetic dataset's JPEG decode) and
the in_order axis (`--in-order on,off`, DataLoader's `in_order`)."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, default_collate
from typer.testing import CliRunner

from loaderbench.analysis import analyze
from loaderbench.analysis.advice import dataloader_call, decoder_lines, prefetcher_call
from loaderbench.analysis.knee import find_knee, listed_first_ties
from loaderbench.cli import app
from loaderbench.conclusions import ListedFirst
from loaderbench.errors import ConfigError, UsageError
from loaderbench.model import AXES_BY_NAME, ConfigResult, LoaderSettings, Trial
from loaderbench.orchestration.config import build_config, parse_flag
from loaderbench.orchestration.grid import expand_grid
from loaderbench.orchestration.plan import Machine, drop_cuda_values
from loaderbench.orchestration.validate import check_torch_axes
from loaderbench.render.sweep import footer_lines, visible_columns
from loaderbench.results import ResultSet
from loaderbench.workload import batch as batch_mod
from loaderbench.workload.datasets import SyntheticJPEGDataset, load_synthetic_jpegs, with_decoder
from loaderbench.workload.decode import (
    BatchRandomResizedCrop,
    EncodedCollate,
    EncodedJPEGs,
    GPUDecode,
    decode_jpeg_cpu,
)
from tests.helpers import measured_again_if_missed

runner = CliRunner()
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
FIX = "tests.fixture_datasets"


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    return load_synthetic_jpegs(32)


def _sweep(tmp_path: Path, *args: str, repeats: int = 1) -> tuple:
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["sweep", *args, "--repeats", str(repeats), "--search", "grid", "--output", str(out),
                              "--no-progress"], env={"COLUMNS": "200"})
    return res, (json.loads(out.read_text()) if out.exists() else None)


def _axes(**given) -> dict:
    axes = {a.name: (a.default or (0,)) for a in AXES_BY_NAME.values()}
    axes.update({"num_workers": (2,), "batch_size": (16,), **given})
    return axes


# ---------------------------------------------------------------------------------------------
# One declaration each: flag, TOML key, key part, DataLoader keyword, n/a rule, cost order.


def test_the_flags_and_toml_keys_parse_and_name_the_allowed_values(tmp_path):
    assert parse_flag("grid", "decoder", "torchvision,pil", "--decoder") == ("torchvision", "pil")
    assert parse_flag("grid", "in_order", "on,off", "--in-order") == (True, False)
    with pytest.raises(UsageError, match="--decoder: expected one of pil, torchvision, nvjpeg, got 'opencv'"):
        parse_flag("grid", "decoder", "pil,opencv", "--decoder")
    toml = tmp_path / "c.toml"
    toml.write_text('[grid]\ndecoder = ["torchvision", "pil"]\nin_order = "on,off"\n')
    cfg = build_config(toml)
    assert cfg.grid["decoder"] == ("torchvision", "pil") and cfg.grid["in_order"] == (True, False)
    assert build_config(None).grid["decoder"] == ("pil",) and build_config(None).grid["in_order"] == (True,)
    res = runner.invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"})
    assert "--decoder" in res.output and "--in-order" in res.output and "torch >= 2.6" in res.output


def test_keys_dataloader_keywords_and_files_written_before_the_axes():
    plain = LoaderSettings(2, False, False, 2, False, 16)
    assert plain.key() == "w2-nopin-nopf-f2-once-b16"  # the defaults add nothing: old keys still match
    s = LoaderSettings(2, False, False, 2, False, 16, in_order=False, decoder="torchvision")
    assert s.key() == "w2-nopin-nopf-f2-once-b16-unordered-torchvision"
    # in_order is passed only when it is not torch's default (so the default runs on any torch);
    # the decoder is not a DataLoader keyword.
    assert s.dataloader_kwargs() == {"batch_size": 16, "num_workers": 2, "pin_memory": False, "prefetch_factor": 2,
                                     "persistent_workers": False, "in_order": False}
    assert "in_order" not in plain.dataloader_kwargs()
    assert "in_order" not in LoaderSettings(0, False, False, None, False, 16, in_order=False).dataloader_kwargs()
    old = {"num_workers": 2, "pin_memory": False, "prefetch": False, "prefetch_factor": 2,
           "persistent_workers": False, "batch_size": 16}
    back = LoaderSettings.from_dict(old)
    assert (back.decoder, back.in_order) == ("pil", True) and back == plain
    again = LoaderSettings.from_dict(LoaderSettings(2, False, False, 2, False, 16, decoder="nvjpeg",
                                                    axis_order={"decoder": 2}).to_dict())
    assert again.decoder == "nvjpeg" and again.listed_at("decoder") == 2


def test_the_grid_keeps_where_each_decoder_was_listed_and_in_order_means_nothing_without_workers():
    points = expand_grid(_axes(num_workers=(0, 2), decoder=("torchvision", "pil"), in_order=(True, False)), cuda=False)
    got = [(p.settings.num_workers, p.settings.decoder, p.settings.in_order, p.settings.listed_at("decoder"))
           for p in points]
    assert got == [(0, "torchvision", True, 0), (0, "pil", True, 1),
                   (2, "torchvision", True, 0), (2, "pil", True, 1),
                   (2, "torchvision", False, 0), (2, "pil", False, 1)]
    # With 0 workers in_order=False is the in-order config (normalised, shown n/a).
    assert sorted({d["in_order"] for d in points[0].normalized_from}) == [False, True]
    assert {d["decoder"] for d in points[0].normalized_from} == {"torchvision"}
    # Cost order: in order before out of order, whatever the decoder; then decoders by their
    # listed position, after every axis with a known order (batch size included).
    keys = [p.settings.structural_key() for p in points[2:]]
    assert keys[0] < keys[1] < keys[2] < keys[3]


def _row(s: LoaderSettings, rate: float, cpu_cores: float = 1.0) -> ConfigResult:
    step = 16 / rate
    trial = Trial(first_batch_s=0.1, warmup_batches=1, data_wait_s=[0.0] * 20, compute_s=[step] * 20,
                  step_s=[step] * 20, samples=320, wall_s=20 * step, timing="host", cpu_time_s=cpu_cores * 20 * step,
                  cpu_util_pct=100.0 * cpu_cores, memory_pss_bytes=500 * 2**20)
    return ConfigResult(settings=s, status="ok", trials=[trial])


def _dec(decoder: str, listed: int, in_order: bool = True) -> LoaderSettings:
    return LoaderSettings(2, False, False, 2, False, 16, in_order=in_order, decoder=decoder,
                          axis_order={"decoder": listed})


def _rs(rows: list[ConfigResult], decoders: list[str]) -> ResultSet:
    rs = ResultSet(config={"dataset": {"kind": "synthetic"}, "compute": {"kind": "sleep", "ms": 10.0},
                           "grid": {"decoder": decoders}, "measure": {"tolerance": 0.05}},
                   environment={"usable_cpus": 2, "fingerprint": "m1"}, results=rows)
    analyze(rs)
    return rs


def test_a_tie_between_decoders_goes_to_the_one_listed_first_and_the_output_says_so():
    # 1,480 and 1,500 samples/s: within the 5% tolerance, the same CPU and memory. No cost order
    # is known between decoders, so the listing decides: torchvision, listed first, wins ...
    rows = [_row(_dec("torchvision", 0), 1480.0), _row(_dec("pil", 1), 1500.0)]
    rs = _rs(rows, ["torchvision", "pil"])
    assert rs.recommendation.settings.decoder == "torchvision"
    assert [f for f in rs.recommendation.findings if isinstance(f, ListedFirst)] == [
        ListedFirst("decoder", "torchvision", ["pil"])]
    text = " ".join(footer_lines(rs))
    assert ("Tie on decoder: pil decoder measured as fast (within the tolerance) and as cheap as "
            "torchvision decoder; decoder has no known cost order, so the value listed first was picked.") in text
    assert ("decoder", "decoder") in visible_columns(rs)
    # ... listed the other way round, pil wins ...
    rows = [_row(_dec("torchvision", 1), 1480.0), _row(_dec("pil", 0), 1500.0)]
    assert _rs(rows, ["pil", "torchvision"]).recommendation.settings.decoder == "pil"
    # ... and a measured cost comes first: pil, listed first but using twice the CPU, loses.
    rows = [_row(_dec("torchvision", 1), 1480.0), _row(_dec("pil", 0), 1500.0, cpu_cores=2.0)]
    rs = _rs(rows, ["pil", "torchvision"])
    assert rs.recommendation.settings.decoder == "torchvision" and not listed_first_ties(rs.results)


def test_check_re_creates_the_decoders_in_the_order_they_were_listed():
    from loaderbench.analysis.compare import baseline_grid

    rows = [_row(_dec("pil", 1), 1500.0), _row(_dec("torchvision", 0), 1480.0), _row(_dec("nvjpeg", 2), 1400.0)]
    grid = baseline_grid(_rs(rows, ["torchvision", "pil", "nvjpeg"]))
    assert grid["decoder"] == ("torchvision", "pil", "nvjpeg") and grid["in_order"] == (True,)
    points = expand_grid({**_axes(), **grid}, cuda=True)
    assert [(p.settings.decoder, p.settings.listed_at("decoder")) for p in points] == [
        ("torchvision", 0), ("pil", 1), ("nvjpeg", 2)]


def test_a_tie_keeps_the_batches_in_order_and_in_order_off_is_picked_where_it_measured_faster():
    equal = [_row(_dec("pil", 0, in_order=False), 1500.0), _row(_dec("pil", 0, in_order=True), 1480.0)]
    assert _rs(equal, ["pil"]).recommendation.settings.in_order is True  # a tie keeps the batches in order
    faster = [_row(_dec("pil", 0, in_order=False), 1700.0), _row(_dec("pil", 0, in_order=True), 1480.0)]
    rs = _rs(faster, ["pil"])
    assert find_knee(faster).settings.in_order is False
    assert rs.recommendation.dataloader_call.endswith("persistent_workers=False, in_order=False)")
    assert "in_order=False" in " ".join(footer_lines(rs))


# ---------------------------------------------------------------------------------------------
# Where each axis means nothing: other datasets, no CUDA, an older torch.


@pytest.mark.parametrize("overrides, message", [
    ({"dataset": {"kind": "tensor"}, "grid": {"decoder": ("torchvision",)}},
     "--decoder applies to the synthetic dataset, not tensor (a dataset of your own decodes as its code does): "
     "drop it, or measure the synthetic dataset with --dataset synthetic"),
    ({"dataset": {"data": "/some/folder"}, "grid": {"decoder": ("pil",)}}, "--decoder applies to the synthetic "
                                                                           "dataset, not folder"),
    ({"dataset": {"kind": f"{FIX}:make_nested"}, "grid": {"decoder": ("nvjpeg",)}}, "not MODULE:FACTORY"),
])
def test_the_decoder_is_refused_for_any_other_dataset_with_the_fix(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_config(None, overrides)
    assert message in str(err.value)


def test_the_decoder_in_a_config_file_for_another_dataset_names_the_file(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[dataset]\nkind = "tensor"\n[grid]\ndecoder = ["torchvision"]\n')
    with pytest.raises(ConfigError, match=f"{toml}: grid.decoder applies to the synthetic dataset, not tensor"):
        build_config(toml)
    res = runner.invoke(app, ["sweep", "--dataset", "tensor", "--decoder", "torchvision"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "--decoder applies to the synthetic dataset, not tensor" in res.output


def test_nvjpeg_without_cuda_is_dropped_with_a_line_or_refused_when_it_is_the_only_value():
    cfg = build_config(None, {"grid": {"decoder": ("pil", "nvjpeg", "torchvision")}})
    kept, lines = drop_cuda_values(cfg, Machine(cuda=False, usable_cpus=2))
    assert kept.grid["decoder"] == ("pil", "torchvision")
    assert lines == ["--decoder nvjpeg: not measured, it runs on a CUDA GPU and there is no CUDA GPU here"]
    on_cpu = build_config(None, {"grid": {"decoder": ("pil", "nvjpeg")}, "measure": {"device": "cpu"}})
    assert drop_cuda_values(on_cpu, Machine(cuda=True, usable_cpus=2))[1] == [
        "--decoder nvjpeg: not measured, it runs on a CUDA GPU and CUDA is not in use (--device cpu)"]
    gpu = build_config(None, {"grid": {"decoder": ("pil", "nvjpeg")}})
    assert drop_cuda_values(gpu, Machine(cuda=True, usable_cpus=2)) == (gpu, [])
    alone = build_config(None, {"grid": {"decoder": ("nvjpeg",)}})
    with pytest.raises(UsageError) as err:
        drop_cuda_values(alone, Machine(cuda=False, usable_cpus=2))
    assert str(err.value) == ("--decoder nvjpeg runs on a CUDA GPU and there is no CUDA GPU here: use --decoder "
                              "pil,torchvision (or run it on a GPU)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_a_sweep_of_nvjpeg_alone_without_cuda_is_one_line_and_exit_2(tmp_path):
    res, data = _sweep(tmp_path, "--decoder", "nvjpeg", "--num-workers", "0", "--batch-size", "4")
    assert res.exit_code == 2 and data is None
    assert res.output.strip() == ("loaderbench: error: --decoder nvjpeg runs on a CUDA GPU and there is no CUDA GPU "
                                  "here: use --decoder pil,torchvision (or run it on a GPU)")


def test_in_order_off_on_a_torch_older_than_2_6_is_refused_with_the_reason():
    cfg = build_config(None, {"grid": {"in_order": (True, False)}})
    with pytest.raises(UsageError) as err:
        check_torch_axes(cfg, "2.5.1+cu121")
    assert str(err.value) == ("--in-order off: the DataLoader keyword in_order came with torch 2.6, and this is torch "
                              "2.5.1+cu121, whose DataLoader does not take it: upgrade torch (torch>=2.6), or drop "
                              "--in-order")
    check_torch_axes(build_config(None, {"grid": {"in_order": (True,)}}), "2.5.1")  # torch's default: not passed
    check_torch_axes(cfg, "2.6.0")
    check_torch_axes(cfg, "2.14.1")  # a two-digit minor is newer, not older


def test_in_order_off_with_a_loader_class_that_does_not_take_it_is_refused_before_any_config():
    from loaderbench.orchestration.validate import _check_loader

    cfg = build_config(None, {"loader": {"class": "tests.fixture_loaders:fixed_loader"},
                              "grid": {"in_order": (True, False)}})
    with pytest.raises(UsageError) as err:
        _check_loader(cfg)
    assert str(err.value) == ("--in-order: tests.fixture_loaders:fixed_loader takes no keyword argument 'in_order'; "
                              "drop --in-order")
    _check_loader(build_config(None, {"loader": {"class": "tests.fixture_loaders:fixed_loader"}}))  # on: not passed
    _check_loader(build_config(None, {"loader": {"class": "tests.fixture_loaders:SnapshotLoader"},
                                      "grid": {"in_order": (False,)}}))  # passes **kwargs on to DataLoader


def test_watch_reads_in_order_from_the_users_loader(jpegs):
    from loaderbench.inloop.loader import read_settings

    ds = SyntheticJPEGDataset(jpegs)
    assert read_settings(DataLoader(ds, batch_size=4, num_workers=2, in_order=False))[0].in_order is False
    assert read_settings(DataLoader(ds, batch_size=4, num_workers=2))[0].in_order is True


# ---------------------------------------------------------------------------------------------
# The decoders themselves.


def test_pil_and_torchvision_give_samples_and_batches_of_the_same_shape_and_dtype(jpegs):
    pil, tv = SyntheticJPEGDataset(jpegs), with_decoder(SyntheticJPEGDataset(jpegs), "torchvision")
    assert with_decoder(pil, "pil") is pil and tv.decoder == "torchvision" and tv.jpegs is pil.jpegs
    for i in (0, 5, 31):
        (a, la), (b, lb) = pil[i], tv[i]
        assert a.shape == b.shape == (3, 224, 224) and a.dtype == b.dtype == torch.uint8 and la == lb == i
    xa, ya = next(iter(DataLoader(pil, batch_size=8)))
    xb, yb = next(iter(DataLoader(tv, batch_size=8)))
    assert xa.shape == xb.shape == (8, 3, 224, 224) and xa.dtype == xb.dtype == torch.uint8
    assert torch.equal(ya, yb)
    assert decode_jpeg_cpu(tv._encoded[0]).shape == (3, 375, 500)  # the whole 500x375 image, before the crop
    with pytest.raises(UsageError, match="--decoder torchvision applies to the synthetic dataset only"):
        with_decoder([1, 2, 3], "torchvision")


def test_nvjpeg_workers_send_one_packed_buffer_of_the_encoded_bytes_that_no_copy_moves(jpegs):
    ds = with_decoder(SyntheticJPEGDataset(jpegs), "nvjpeg")
    item, label = ds[3]
    assert item.dtype == torch.uint8 and item.dim() == 1 and bytes(item.numpy()) == jpegs[3] and label == 3
    enc, labels = EncodedCollate(default_collate)([ds[i] for i in range(4)])
    assert isinstance(enc, EncodedJPEGs) and len(enc) == 4 and enc.nbytes == sum(len(j) for j in jpegs[:4])
    assert [bytes(t.numpy()) for t in enc.images()] == jpegs[:4] and labels.tolist() == [0, 1, 2, 3]
    # One tensor per batch crosses from the worker (not one per image) ...
    assert batch_mod.inspect_batch((enc, labels)).tensor_leaves == 2
    # ... and the H2D copy leaves the bytes in host memory, for nvJPEG to read.
    moved = batch_mod.move_to_device((enc, labels), "meta")
    assert moved[0] is enc and moved[1].device.type == "meta"
    batch = next(iter(DataLoader(ds, batch_size=4, collate_fn=EncodedCollate(default_collate))))
    assert len(batch[0]) == 4


def test_the_recommended_call_says_how_it_decodes_and_runs_as_printed(jpegs):
    tv = LoaderSettings(0, False, False, None, False, 4, decoder="torchvision")
    assert decoder_lines(tv)[0].startswith("# decoder=torchvision: each sample decoded by torchvision.io.decode_jpeg")
    assert dataloader_call(tv) == "DataLoader(dataset, batch_size=4, num_workers=0, pin_memory=False)"
    assert decoder_lines(LoaderSettings(0, False, False, None, False, 4)) == []
    nv = LoaderSettings(0, True, True, None, False, 4, decoder="nvjpeg")
    call = dataloader_call(nv)
    assert call == ("DataLoader(dataset, batch_size=4, num_workers=0, pin_memory=True, "
                    "collate_fn=EncodedCollate(default_collate))")
    lines = decoder_lines(nv)
    assert lines[:2] == ["from loaderbench.workload.decode import EncodedCollate, GPUDecode",
                         "from torch.utils.data import default_collate"]
    assert lines[2].endswith("as the prefetcher's transform, on its side stream while the step before runs")
    assert prefetcher_call(nv) == 'loaderbench.CUDAPrefetcher(loader, transform=GPUDecode("cuda"))'
    no_pf = LoaderSettings(0, False, False, None, False, 4, decoder="nvjpeg")
    assert decoder_lines(no_pf)[2].endswith('in the loop, before the step, on its stream: batch = GPUDecode("cuda")(batch)')
    assert "collate_fn=EncodedCollate(mine)" in dataloader_call(no_pf, {"collate_fn": "mydata:mine"})
    # The imports and the call, run as printed on the dataset (pin_memory off: no CUDA needed).
    space: dict = {"dataset": with_decoder(SyntheticJPEGDataset(jpegs), "nvjpeg")}
    exec("\n".join([*lines[:2], "from torch.utils.data import DataLoader",
                    f"loader = {dataloader_call(no_pf)}"]), space)
    enc, labels = next(iter(space["loader"]))
    assert isinstance(enc, EncodedJPEGs) and len(enc) == 4 and labels.tolist() == [0, 1, 2, 3]


@pytest.mark.truth
def test_torchvision_decodes_and_crops_faster_per_sample_than_pil_on_one_core(jpegs):
    # The same JPEGs, decoded and cropped in this process on one intra-op thread (as a worker
    # runs), the two paths interleaved round by round: torchvision.io.decode_jpeg and
    # transforms.v2 on uint8 tensors against PIL decode, PIL crop and PILToTensor. On the
    # GPU host 1.64 against 2.33 ms per image (0.70); here about 1.25 against 1.8 (0.69).
    pil, tv = SyntheticJPEGDataset(jpegs), with_decoder(SyntheticJPEGDataset(jpegs), "torchvision")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times: dict[str, list[float]] = {"pil": [], "torchvision": []}
        for _ in range(7):
            for name, ds in (("pil", pil), ("torchvision", tv)):
                t0 = time.perf_counter()
                for i in range(len(ds)):
                    ds[i]
                times[name].append((time.perf_counter() - t0) / len(ds))
    finally:
        torch.set_num_threads(threads)
    ratio = statistics.median(times["torchvision"]) / statistics.median(times["pil"])
    assert ratio < 0.9, times


# ---------------------------------------------------------------------------------------------
# Whole sweeps.


@pytest.mark.slow
def test_a_sweep_measures_each_cpu_decoder_and_leaves_nvjpeg_out_without_cuda(tmp_path):
    res, data = _sweep(tmp_path, "--num-samples", "64", "--decoder", "pil,torchvision,nvjpeg", "--num-workers", "1",
                       "--batch-size", "8", "--compute", "sleep:5", "--batches", "5", "--min-time", "0.2")
    assert res.exit_code == 0, res.output
    rows = {r["settings"]["decoder"]: r for r in data["results"]}
    cuda = torch.cuda.is_available()
    assert set(rows) == ({"pil", "torchvision", "nvjpeg"} if cuda else {"pil", "torchvision"})
    if not cuda:
        assert "--decoder nvjpeg: not measured, it runs on a CUDA GPU and there is no CUDA GPU here" in res.output
    for name in ("pil", "torchvision"):
        r = rows[name]
        assert r["status"] == "ok" and r["summary"]["samples_per_s"] > 0
        # The same batch: 8 uint8 (3, 224, 224) images and 8 int64 labels.
        assert r["trials"][0]["batch_bytes"] == 8 * 3 * 224 * 224 + 8 * 8
    assert rows["torchvision"]["key"] == "w1-nopin-nopf-f2-once-b8-torchvision"
    assert "decoder" in res.stdout and "torchvision" in res.stdout


def _in_order_rates(tmp_path: Path, dataset: str) -> dict[bool, float]:
    # 2 workers, batches of 4 samples of 2 ms of sleep, one batch ahead each (prefetch_factor 1),
    # a 1-ms step: loader-bound. The samples in index order, so every window holds the same
    # share of slow ones (drawn at random, their count in a window of ~1,400 samples would
    # vary by a quarter, and the rates by several percent). The repeats interleave the configs.
    # No stage profile of the pick: only the rows' rates are compared (it runs after them).
    res, data = _sweep(tmp_path, "--dataset", f"{FIX}:{dataset}", "--sampler", f"{FIX}:make_sequential_sampler",
                       "--epoch-batches", "1000000", "--in-order", "on,off", "--num-workers", "2",
                       "--prefetch-factor", "1", "--batch-size", "4", "--compute", "sleep:1",
                       "--batches", "100", "--min-time", "2", "--no-profile", repeats=3)
    assert res.exit_code == 0, res.output
    assert {r["key"] for r in data["results"]} == {"w2-nopin-nopf-f1-once-b4", "w2-nopin-nopf-f1-once-b4-unordered"}
    return {r["settings"]["in_order"]: r["summary"]["samples_per_s"] for r in data["results"]}


@pytest.mark.slow
@pytest.mark.truth
def test_in_order_off_reads_faster_where_one_sample_in_a_hundred_is_twenty_times_slower(tmp_path):
    # One sample in 100 sleeps 40 ms instead of 2: the batch holding it (one in 25) takes 46 ms
    # instead of 8. In order, the other worker builds its one batch ahead and then idles until
    # the slow batch is handed out; out of order, its batches overtake. Measured on 2 cores: 698
    # against 625 samples/s (1.12x, spreads of 2%) with the tail, 738 against 752 without.
    # Without the tail the two orders are one pipeline: equal within the run-to-run spread a
    # loaded 2-core machine gives two rows of one sweep (6.2% seen beside another test run; 12%
    # once in a full run of the suite, 0.5% alone minutes later): a pair outside is measured
    # once more, and an ordering that does not act (or acts without a tail) misses both.
    attempts = iter(range(2))

    def rates() -> tuple[dict, dict]:
        attempt = next(attempts)
        return (_in_order_rates(tmp_path / f"tail{attempt}", "make_long_tail"),
                _in_order_rates(tmp_path / f"flat{attempt}", "make_no_tail"))

    def ok(m: tuple[dict, dict]) -> bool:
        tail, flat = m
        return tail[False] / tail[True] > 1.05 and abs(flat[False] / flat[True] - 1.0) < 0.08

    rounds = measured_again_if_missed(rates, ok)
    assert ok(rounds[-1]), rounds


# ---------------------------------------------------------------------------------------------
# The batch's crop after a GPU decode (runs on any device: here the CPU).


def _two_sizes(jpegs: list[bytes]) -> list[torch.Tensor]:
    """Six decoded 500x375 images with two 300x225 ones between them: two roi_align groups."""
    images = [decode_jpeg_cpu(torch.frombuffer(bytearray(j), dtype=torch.uint8)) for j in jpegs[:8]]
    for k in (2, 5):
        images[k] = torch.nn.functional.interpolate(images[k][None].float(), size=(225, 300),
                                                    mode="area")[0].round().to(torch.uint8)
    return images


def test_the_batch_crop_of_whole_images_is_each_image_resized_in_its_own_place(jpegs):
    images = _two_sizes(jpegs)
    whole = BatchRandomResizedCrop(scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3), flip_p=0.0)
    out = whole(images)
    assert out.shape == (8, 3, 224, 224) and out.dtype == torch.uint8
    from torchvision.transforms.v2 import functional as F

    for k, image in enumerate(images):  # a box filter against v2's antialiased bilinear one
        ref = F.resize(image, [224, 224], antialias=True).float()
        assert (out[k].float() - ref).abs().mean() < 2.0, k
        assert (out[k].float() - ref).abs().mean() < (out[(k + 1) % 8].float() - ref).abs().mean() / 4


def test_the_batch_crop_draws_torchvisions_windows_and_flips_what_it_draws(jpegs):
    images = _two_sizes(jpegs)
    from torchvision.transforms import RandomResizedCrop

    crop = BatchRandomResizedCrop()
    torch.manual_seed(7)
    drawn = crop.windows(images)
    torch.manual_seed(7)
    assert drawn == [RandomResizedCrop.get_params(x, [0.08, 1.0], [3 / 4, 4 / 3]) for x in images]
    torch.manual_seed(3)
    kept = BatchRandomResizedCrop(flip_p=0.0)(images)
    torch.manual_seed(3)
    flipped = BatchRandomResizedCrop(flip_p=1.0)(images)
    assert torch.equal(flipped, kept.flip(-1))
    i, j, h, w = drawn[0]
    assert 0 <= i <= 375 - h and 0 <= j <= 500 - w and 0.08 * 375 * 500 * 0.9 <= h * w <= 375 * 500


def test_the_batch_crop_refuses_an_empty_batch_and_a_flat_image():
    with pytest.raises(ValueError, match="at least one image"):
        BatchRandomResizedCrop()([])
    with pytest.raises(ValueError, match=r"\(C, H, W\)"):
        BatchRandomResizedCrop()([torch.zeros(10, 10, dtype=torch.uint8)])


# ---------------------------------------------------------------------------------------------
# nvJPEG on the GPU (run on a GPU host).


@pytest.mark.gpu
@needs_cuda
def test_gpu_decode_matches_the_cpu_decode_and_crops_to_the_cpu_decoders_shape(jpegs):
    enc = EncodedJPEGs.pack([torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs[:16]])
    whole = GPUDecode("cuda", transform=lambda x: x).decode(enc)
    cpu = torch.stack([decode_jpeg_cpu(t) for t in enc.images()])
    assert whole.shape == cpu.shape == (16, 3, 375, 500) and whole.is_cuda
    assert (whole.cpu().float() - cpu.float()).abs().mean() < 3.0  # nvJPEG and libjpeg-turbo round differently
    images, labels = GPUDecode("cuda")((enc, torch.arange(16)))
    assert images.shape == (16, 3, 224, 224) and images.dtype == torch.uint8 and images.is_cuda
    assert labels.tolist() == list(range(16))


@pytest.mark.gpu
@needs_cuda
def test_the_printed_prefetcher_decodes_each_batch_on_the_gpu(jpegs):
    from loaderbench.workload.prefetch import CUDAPrefetcher

    ds = with_decoder(SyntheticJPEGDataset(jpegs), "nvjpeg")
    loader = DataLoader(ds, batch_size=8, num_workers=2, pin_memory=True, collate_fn=EncodedCollate(default_collate))
    shapes = [(tuple(x.shape), x.dtype, x.device.type, y.device.type)
              for x, y in CUDAPrefetcher(loader, transform=GPUDecode("cuda"))]
    assert shapes == [((8, 3, 224, 224), torch.uint8, "cuda", "cuda")] * 4


@pytest.mark.gpu
@pytest.mark.slow
@needs_cuda
def test_a_sweep_decodes_on_the_gpu_inside_the_prefetcher_and_before_the_step(tmp_path):
    res, data = _sweep(tmp_path, "--num-samples", "256", "--decoder", "pil,nvjpeg", "--prefetch", "off,on",
                       "--pin-memory", "on", "--num-workers", "2", "--batch-size", "32", "--compute", "spin:5",
                       "--batches", "10", "--min-time", "0.3")
    assert res.exit_code == 0, res.output
    rows = {(r["settings"]["decoder"], r["settings"]["prefetch"]): r for r in data["results"]}
    assert set(rows) == {("pil", False), ("pil", True), ("nvjpeg", False), ("nvjpeg", True)}
    for (decoder, _), r in rows.items():
        assert r["status"] == "ok", r["error"]
        if decoder == "nvjpeg":
            t = r["trials"][0]
            assert t["h2d_bytes_per_batch"] == 32 * 8  # the labels: nvJPEG copies the encoded bytes itself
            assert t["batch_bytes"] < rows[("pil", False)]["trials"][0]["batch_bytes"] / 2  # ~57 KB against 150 KB


def test_the_plot_draws_a_line_per_decoder_named_by_it():
    from loaderbench.render.plot import _series_label

    assert _series_label(False, False, 8, False, False, axes=(("decoder", "pil"),)) == "decoder=pil"
    assert _series_label(True, True, 8, False, True, axes=(("in_order", "off"), ("decoder", "nvjpeg"))) == (
        "pin on, prefetch on, in_order=off, decoder=nvjpeg")
    assert _series_label(False, False, 8, False, False) == "measured"
