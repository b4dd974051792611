"""Storage comparisons with the user's own dataset: `--data` names the files a MODULE:FACTORY
dataset reads (any kind), `--cache` acts on them, every row counts the bytes read from the device
and through read() against the bytes its samples needed, and says when a cache served them
(the page cache, a memory filesystem, or a cache inside the dataset)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loaderbench.cli import app
from loaderbench.conclusions import NotClearedCause, WhyNoPrediction
from loaderbench.errors import ConfigError
from loaderbench.model import ServedFrom
from loaderbench.orchestration.config import build_config
from loaderbench.storage import read_summary
from tests.helpers import MiB, ThrottledDisk, in_cgroup

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the measuring process imports tests.fixture_datasets from here


def _files(folder: Path, n: int, size: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"s{i:03d}.bin").write_bytes(os.urandom(size))
    return folder


def _sweep(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["sweep", *args, "--repeats", "1", "--search", "grid", "--output", str(out),
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def _trial(data: dict, cache: str = "as-is") -> dict:
    return next(r for r in data["results"] if r["cache"] == cache)["trials"][0]


# ---------------------------------------------------------------------------------------------
# Config: --data for any dataset that reads files
# ---------------------------------------------------------------------------------------------


def test_data_names_the_files_of_a_factory_dataset_once_or_several_times():
    one = build_config(overrides={"dataset": {"kind": "tests.fixture_datasets:make_file_samples", "data": "/d/a"}})
    assert one.dataset.kind == "import" and one.dataset.data_roots == ("/d/a",)
    two = build_config(overrides={"dataset": {"kind": "tests.fixture_datasets:make_file_samples",
                                              "data": ["/d/a", "/d/b"]}})
    assert two.dataset.data_roots == ("/d/a", "/d/b")
    assert build_config(overrides={"dataset": {"data": "/d/a"}}).dataset.kind == "folder"  # alone: a folder
    with pytest.raises(ConfigError, match="one --data folder"):
        build_config(overrides={"dataset": {"kind": "folder", "data": ["/d/a", "/d/b"]}})
    with pytest.raises(ConfigError, match="built in memory and reads no files"):
        build_config(overrides={"dataset": {"kind": "tensor", "data": "/d/a"}})


def test_a_factory_with_a_root_parameter_gets_the_data_path(tmp_path):
    from loaderbench.workload.datasets import build_dataset

    folder = _files(tmp_path / "f", 3, 2048)
    cfg = build_config(overrides={"dataset": {"kind": "tests.fixture_datasets:make_file_samples",
                                              "data": str(folder)}})
    ds = build_dataset(cfg.dataset)
    assert len(ds) == 3 and ds[0].numel() == 1024  # type: ignore[arg-type]


@pytest.mark.parametrize("make, says", [
    (lambda p: p / "missing", "no such file or folder"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "no files under it"),
])
def test_a_bad_data_path_is_one_line_and_exit_2(tmp_path, make, says):
    path = make(tmp_path)
    res = runner.invoke(app, ["sweep", "--dataset", "tests.fixture_datasets:make_file_samples", "--data", str(path),
                              "--output", str(tmp_path / "r.json"), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert f"--data {path}: {says}" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "r.json").exists()


def test_a_dataset_that_names_no_files_keeps_the_cache_state_na(tmp_path):
    data = _sweep(tmp_path, "--dataset", "tensor", "--num-samples", "64", "--cache", "cold", "--num-workers", "0",
                  "--batch-size", "8", "--compute", "sleep:1", "--batches", "3", "--min-time", "0")
    assert data["results"][0]["cache"] == "as-is"


# ---------------------------------------------------------------------------------------------
# Which cache served it (storage.read_summary, NOTE [which cache served it])
# ---------------------------------------------------------------------------------------------


def test_read_summary_names_the_cache_from_the_counters():
    n = 100 * MiB
    assert read_summary(95 * MiB, n, 1.0).served_from == "storage"
    assert read_summary(40 * MiB, n, 1.0).served_from == "mixed"
    assert read_summary(0, n, 1.0, read_chars=n).served_from == "page cache"
    assert read_summary(0, n, 1.0, read_chars=n, memory_fs=True).served_from == "memory filesystem"
    # neither the device nor read() gave the bytes: not resident -> the dataset kept them
    assert read_summary(0, n, 1.0, read_chars=0, resident_fraction=0.0).served_from == "dataset cache"
    # resident and nobody maps the files -> the dataset kept them; mapped (or unknown) -> can't tell
    assert read_summary(0, n, 1.0, read_chars=0, resident_fraction=1.0, mapped=False).served_from == "dataset cache"
    assert read_summary(0, n, 1.0, read_chars=0, resident_fraction=1.0, mapped=True).served_from == "cache"
    assert read_summary(0, n, 1.0, read_chars=0, resident_fraction=1.0).served_from == "cache"


@pytest.mark.slow
def test_a_dataset_that_keeps_what_it_read_is_flagged_as_served_from_its_cache(tmp_path, disk_dir):
    # 20 files of 256 KiB, batch 4: an epoch is 5 batches, so the window runs through several
    # epochs; with keep=true the dataset (0 workers: the main process) keeps every sample after
    # the first epoch, and --cache cold evicts the files before the config.
    folder = _files(disk_dir / "keep", 20, 256 * 1024)
    toml = tmp_path / "keep.toml"
    toml.write_text(f'[dataset]\nkind = "tests.fixture_datasets:make_file_samples"\ndata = "{folder}"\n'
                    "[dataset.kwargs]\nkeep = true\n")
    data = _sweep(tmp_path, str(toml), "--cache", "cold", "--num-workers", "0", "--batch-size", "4",
                  "--compute", "sleep:2", "--batches", "12", "--min-time", "0")
    t = _trial(data, "cold")
    assert t["cache_state"]["achieved"] == "cold"
    first, *later = t["epoch_reads"]
    assert first[0] >= 0.9 * 20 * 256 * 1024  # the first epoch read every file from the device
    assert later and all(e[0] < 0.1 * 20 * 256 * 1024 and e[1] < 0.1 * 20 * 256 * 1024 for e in later)
    assert t["served_from"] == "dataset cache" and t["served_after_first_epoch"]
    [finding] = [f for f in data["analysis"]["notes"] if f["kind"] == "served-from-cache"]
    assert finding["all_rows"] and finding["rows"][0]["served_from"] == "dataset cache"
    shown = runner.invoke(app, ["show", str(tmp_path / "r.json")], env={"COLUMNS": "200"})
    assert "Served from a cache, not the device (their throughput is the cache's): 0 workers" in shown.output
    assert "(dataset cache)" in shown.output and "--verbose" in shown.output
    shown = runner.invoke(app, ["show", str(tmp_path / "r.json"), "--verbose"], env={"COLUMNS": "200"})
    assert "a cache inside the dataset or its workers served them" in shown.output
    # the same files, no cache in the dataset: after the first epoch the page cache serves them
    plain = _sweep(tmp_path, "--dataset", "tests.fixture_datasets:make_file_samples", "--data", str(folder),
                   "--cache", "cold", "--num-workers", "0", "--batch-size", "4", "--compute", "sleep:2",
                   "--batches", "12", "--min-time", "0")
    assert _trial(plain, "cold")["served_from"] == "page cache"
    # compare of two such runs says it measured caches
    cmp = runner.invoke(app, ["compare", str(tmp_path / "r.json"), str(tmp_path / "r.json")])
    assert "this comparison measured caches rather than devices" in cmp.output


# ---------------------------------------------------------------------------------------------
# A throttled device: cold reads at the cap, warm from the page cache
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_own_dataset_cold_vs_warm_on_a_throttled_device(tmp_path, throttled_disk: ThrottledDisk, kind):
    # 48 files of 256 KiB on a loop device read at 4 MiB/s: 0 workers read one file per sample,
    # 62.5 ms each, then a 2 ms step per batch of 4: about 4 / (4 x 0.0625 + 0.002) = 15.9
    # samples/s cold (one shard of 256 KiB per record for the stream, the same bytes per sample).
    # An epoch is 12 batches: the first batch, the warm-up and the window all fall in the first.
    # Warm, the page cache serves them far faster.
    size = 256 * 1024
    folder = throttled_disk.mount / f"own-{kind}"
    _files(folder, 48, size)
    cap = 4 * MiB
    throttled_disk.throttle(cap)
    factory = ("tests.fixture_datasets:make_file_samples" if kind == "map"
               else "tests.fixture_datasets:make_shard_stream")
    args = ["--dataset", factory, "--data", str(folder), "--cache", "both", "--num-workers", "0",
            "--batch-size", "4", "--compute", "sleep:2", "--batches", "4", "--min-time", "0"]
    if kind == "iterable":
        toml = tmp_path / "stream.toml"
        toml.write_text(f'[dataset]\nkind = "{factory}"\ndata = "{folder}"\n[dataset.kwargs]\n'
                        f"record_bytes = {size}\n")
        args = [str(toml), *args[4:]]
    with in_cgroup(throttled_disk.cgroup):
        data = _sweep(tmp_path, *args)
    cold, warm = _trial(data, "cold"), _trial(data, "warm")
    assert cold["cache_state"]["achieved"] == "cold"
    assert cold["needed_rule"] == "estimated" and cold["needed_bytes"] == pytest.approx(cold["samples"] * size)
    assert cold["storage_read_bytes"] >= 0.9 * cold["needed_bytes"], cold
    assert cold["served_from"] == "storage"
    # the loader-alone probe after a cold window would read what the window cached: not kept
    assert cold["loader_alone_samples_per_s"] is None and "not a storage rate" in cold["loader_alone_note"]
    assert warm["storage_read_bytes"] < 0.1 * warm["needed_bytes"], warm
    assert warm["served_from"] == "page cache"
    rows = {r["cache"]: r["summary"]["samples_per_s"] for r in data["results"]}
    expected = 4 / (4 * (size / cap) + 0.002)
    assert rows["cold"] == pytest.approx(expected, rel=0.25)
    assert rows["warm"] > 3 * rows["cold"]


# ---------------------------------------------------------------------------------------------
# Storage what-if (analysis.predict.what_if_disk, NOTE [storage what-if])
# ---------------------------------------------------------------------------------------------


def _warm_rows(per_worker: float, bytes_per_sample: int, *, cpus: int = 4, step_ms: float = 4.0):
    """Rows served from the page cache, 0-4 workers: one worker builds `per_worker` samples/s,
    the step takes `step_ms` per batch of 16 (C = 16 / step), no CPU bound within 4 workers."""
    from loaderbench.analysis import summarize_config
    from loaderbench.model import ConfigResult
    from tests.helpers import settings, trial

    c = 16 / (step_ms / 1e3)
    rows = []
    for w in (0, 1, 2, 4):
        load = per_worker if w == 0 else w * per_worker
        rate = 1 / (1 / load + 1 / c) if w == 0 else min(load, c)
        t = trial(16 / rate - step_ms / 1e3, step_ms / 1e3, n=30)
        t.loader_alone_samples_per_s = load
        t.receive_s = [0.0001] * 4 if w else []
        t.cpu_util_pct = 100.0 * (0.001 * rate + 0.05)
        t.needed_bytes, t.files_per_sample = t.samples * bytes_per_sample, 1.0
        t.storage_read_bytes, t.storage_read_chars = 0, t.needed_bytes
        t.served_from = "page cache"
        r = ConfigResult(settings=settings(w), status="ok", trials=[t])
        summarize_config(r)
        r.summary.compute_ceiling_samples_per_s = c
        rows.append(r)
    return rows


def test_the_disk_what_if_caps_the_loader_at_what_the_device_feeds():
    from loaderbench.analysis.predict import parse_what_if, what_if_disk
    from tests.helpers import settings

    # one worker builds 100 samples/s from the page cache; a sample is 250 kB; the step could
    # take 4,000/s. A 10 MB/s device feeds 10e6 / 250e3 = 40 samples/s whatever the workers.
    rows = _warm_rows(100.0, 250_000)
    what = what_if_disk(rows, settings(2), 10.0, None, 0.05, 4, max_workers=8)
    curve = dict(what.curve)
    assert what.device_samples_per_s == pytest.approx(40.0)
    assert all(x <= 40.0 + 1e-9 for x in curve.values())
    assert curve[1] == pytest.approx(40.0, rel=0.02)
    # 0 workers read, build and step in turn: at most 1 / (1/40 + 1/4000) = 39.6, within the
    # tolerance of the cap: the fewest workers that reach it is 0
    assert curve[0] == pytest.approx(1 / (1 / 40 + 1 / 4000), rel=0.02) and what.knee_workers == 0
    # 200 reads/s and one file per sample: each read keeps its worker 5 ms, and the device
    # serves 200 samples/s; at 100 MB/s (400 samples/s) one worker makes 1 / (0.01 + 0.005)
    fast = dict(what_if_disk(rows, settings(2), 100.0, 200.0, 0.05, 4, max_workers=8).curve)
    assert fast[1] == pytest.approx(1 / (1 / 100 + 1 / 200), rel=0.05)
    assert fast[4] == pytest.approx(200.0, rel=0.02)  # the device's reads/s bind
    assert parse_what_if("disk=150,200").disk_iops == 200.0 and parse_what_if("disk=80").disk_mb_per_s == 80.0
    for bad in ("disk=", "disk=0", "disk=fast", "disk=1,2,3", "gpu=2"):  # its form; an unknown key: every form
        with pytest.raises(ValueError, match="disk=MBPS"):
            parse_what_if(bad)
    with pytest.raises(ValueError, match="^expected cpus=K .*, got 'cpus=0'$"):
        parse_what_if("cpus=0")


def test_the_disk_what_if_needs_rows_served_from_a_cache():
    from loaderbench.analysis.predict import what_if_disk
    from tests.helpers import settings

    rows = _warm_rows(100.0, 250_000)
    for r in rows:
        for t in r.trials:
            t.served_from = "storage"
        r.summary.served_from = ServedFrom.STORAGE
    what = what_if_disk(rows, settings(2), 10.0, None, 0.05, 4)
    assert what.knee_workers is None and what.why is WhyNoPrediction.NO_CACHED_ROWS


def test_show_what_if_disk_says_it_is_a_prediction_and_bad_forms_exit_2(tmp_path):
    from loaderbench.analysis import analyze
    from loaderbench.results import ResultSet, save_results

    rs = ResultSet(config={"measure": {"tolerance": 0.05}}, environment={"usable_cpus": 4},
                   results=_warm_rows(100.0, 250_000), label="warm")
    analyze(rs)
    path = tmp_path / "warm.json"
    save_results(rs, path)
    res = runner.invoke(app, ["show", str(path), "--what-if", "disk=10"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "What if the files were on a device of 10 MB/s (a prediction" in res.output
    assert "the device feeds at most ~40 samples/s" in res.output
    bad = runner.invoke(app, ["show", str(path), "--what-if", "disk=fast"])
    assert bad.exit_code == 2 and "--what-if: expected disk=MBPS[,IOPS]" in bad.output and "Traceback" not in bad.output


def test_rows_served_unalike_are_named_and_trials_that_differ_are_mixed():
    from loaderbench.analysis.advice import served_from_cache
    from loaderbench.render.footer import served_from_cache_lines
    from tests.helpers import result, settings, trial

    def row(w, *served, read=1):
        trials = []
        for s in served:
            t = trial(0.01, 0.01)
            t.served_from, t.storage_read_bytes, t.needed_bytes = s, read, 100
            trials.append(t)
        return result(settings(w), *trials)

    # The 0-worker config read the device and left the files in the page cache; the next two
    # configs read them from there (part, then all): as-is rows that compare device and cache.
    rows = [row(0, "storage", read=100), row(1, "mixed", read=13), row(2, "page cache", read=0)]
    [f] = served_from_cache(rows)
    assert f.uneven == ["as-is"] and f.storage_rows == [rows[0].settings]
    assert [r.served_from for r in f.rows] == [ServedFrom.MIXED, ServedFrom.PAGE_CACHE]
    assert any("were not served alike" in line for line in served_from_cache_lines(f))
    # repeats of one config that disagree (a dataset cache filling up) make the config mixed
    assert row(0, "storage", "mixed", "dataset cache").summary.served_from == "mixed"
    assert served_from_cache([row(0, "storage"), row(1, "storage")]) == []


@pytest.mark.slow
def test_data_given_to_a_factory_without_root_is_named_in_a_warning(tmp_path):
    folder = _files(tmp_path / "f", 2, 1024)
    res = runner.invoke(app, ["sweep", "--dataset", "tests.fixture_datasets:make_nested", "--data", str(folder),
                              "--num-workers", "0", "--batch-size", "8", "--compute", "sleep:1", "--batches", "3",
                              "--min-time", "0", "--repeats", "1", "--search", "grid",
                              "--output", str(tmp_path / "r.json"), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "tests.fixture_datasets:make_nested has no `root` parameter, so the path is not passed to it" in res.output


def test_a_device_that_reads_alike_at_every_worker_count_is_named_not_more_workers():
    from loaderbench.analysis.advice import not_cleared
    from loaderbench.render.findings import finding_sentences
    from tests.helpers import result, settings, trial

    def row(w, mb_per_s, wait_s):
        t = trial(wait_s, 0.004, bs=16)
        t.served_from, t.storage_mb_per_s, t.storage_read_bytes, t.needed_bytes = "storage", mb_per_s, 100, 100
        return result(settings(w), t)

    # 10.5 MB/s over 262 kB per sample: ~40 samples/s, 0.4 s per batch of 16 whatever the workers
    rows = [row(0, 10.4, 0.396), row(1, 10.5, 0.395), row(2, 10.5, 0.390)]
    best = rows[2]
    [f] = not_cleared(best, best, rows, rows, usable_cpus=16)
    assert f.cause is NotClearedCause.STORAGE and f.device.workers == [0, 1, 2]
    text = " ".join(finding_sentences([f]))
    assert "The storage device binds: the configs with 0, 1, 2 workers read 10.4-10.5 MB/s" in text
    assert "try more workers" not in text
    # read at different rates (a faster device with more readers): more workers may help
    rows = [row(0, 10.4, 0.396), row(1, 20.8, 0.19), row(2, 41.0, 0.09)]
    [f] = not_cleared(rows[2], rows[2], rows, rows, usable_cpus=16)
    assert f.cause is NotClearedCause.GRID_EDGE
