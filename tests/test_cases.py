"""Real-world kinds of fault, end to end: batches that are not one stacked tensor, a batch of
many tiny tensors, intra-op threads in forked workers, a dataset of enormous length, and input
that would otherwise be ignored silently. Each asserts the right value, worked out by hand."""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loaderbench.cli import app
from tests.helpers import batch_load_s

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
FIX = "tests.fixture_datasets"


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the measuring processes import tests.fixture_datasets from here


def sweep(tmp_path: Path, *args: str, name: str = "r.json"):
    out = tmp_path / name
    extra = [] if "--repeats" in args else ["--repeats", "1"]
    extra += [] if "--search" in args else ["--search", "grid"]  # these tests check every row
    # ...of the grid only: the sweep's profile of its pick adds an in_order=False row where it
    # finds a long tail, which other load on a small machine can make of any dataset.
    extra += ["--no-profile"]
    res = runner.invoke(app, ["sweep", *args, *extra, "--output", str(out), "--no-progress"])
    data = json.loads(out.read_text()) if out.exists() else None
    return res, data


def rows(data: dict) -> dict[str, dict]:
    return {r["key"]: r for r in data["results"]}


def by_workers(data: dict) -> dict[int, dict]:
    return {r["settings"]["num_workers"]: r for r in data["results"]}


@pytest.mark.slow
@pytest.mark.truth
@pytest.mark.parametrize("dataset, collate", [
    ("make_numpy_samples", "collate_numpy"),  # [x (64, 3, 64, 64), y (64,)] as numpy arrays
    ("make_detection", "collate_detection"),  # (tuple of 64 images of different sizes, 64 dicts)
])
def test_every_sample_of_a_batch_is_counted_whatever_the_collate_returns(tmp_path, dataset, collate):
    res, data = sweep(tmp_path, "--dataset", f"{FIX}:{dataset}", "--collate-fn", f"{FIX}:{collate}",
                      "--batch-size", "64", "--compute", "sleep:40", "--num-workers", "0",
                      "--batches", "8", "--min-time", "1")
    assert res.exit_code == 0, res.output
    r0 = by_workers(data)[0]
    t = r0["trials"][0]
    assert t["samples_rule"] == "indices" and t["samples"] == 64 * len(t["step_s"])
    # 64 samples x 1 ms + a 40 ms step: at most 64 / 0.104 = 615 samples/s; counting 2 or 3
    # "samples" per batch gave 18-27. Each sleep overshoots by 0.1-0.4 ms on these VMs, so the
    # expectation uses the batch's cost timed here: batch / (load + the row's step).
    fix = importlib.import_module(FIX)
    load_s = batch_load_s(getattr(fix, dataset)(), 64, getattr(fix, collate))
    assert r0["summary"]["samples_per_s"] <= 1.01 * 615
    assert r0["summary"]["samples_per_s"] == pytest.approx(64 / (load_s + r0["summary"]["compute_p50_s"]), rel=0.12)
    if collate == "collate_numpy":
        # Bytes include the numpy arrays: 64 x 3 x 64 x 64 float32 + 64 int64 labels.
        assert t["batch_bytes"] == 64 * 3 * 64 * 64 * 4 + 64 * 8 and t["numpy_leaves"] == 2


@pytest.mark.slow
@pytest.mark.truth
def test_numpy_batches_scale_with_workers_and_name_the_pickled_hand_off(tmp_path):
    res, data = sweep(tmp_path, "--dataset", f"{FIX}:make_numpy_samples", "--collate-fn", f"{FIX}:collate_numpy",
                      "--batch-size", "64", "--compute", "sleep:40", "--num-workers", "0,2",
                      "--batches", "10", "--min-time", "1.5")
    assert res.exit_code == 0, res.output
    w = by_workers(data)
    # 2 workers build a batch every 32 ms, under the 40 ms step: about 1,300 samples/s against
    # about 570 at 0 workers (the main process receives a pickled 3 MB batch each step).
    assert w[2]["summary"]["samples_per_s"] > 1.8 * w[0]["summary"]["samples_per_s"]
    assert w[2]["summary"]["receive_p50_s"] > 0


@pytest.mark.slow
@pytest.mark.truth
def test_a_batch_of_many_tiny_tensors_is_a_receive_floor_and_packing_them_is_named(tmp_path):
    # 16 images + 16 target dicts of 7 tensors cross as 113 tensors; the same payload packed
    # crosses as 9. 16 x 2 ms per batch per worker: 2 workers easily keep up with a 20 ms step,
    # so what is left of the wait is the main process taking each batch.
    common = ["--dataset", f"{FIX}:make_target_dicts", "--batch-size", "16", "--compute", "sleep:20",
              "--batches", "15", "--min-time", "1.5"]
    res, listed = sweep(tmp_path, *common, "--collate-fn", f"{FIX}:collate_target_list", "--num-workers", "0,2,4",
                        name="list.json")
    assert res.exit_code == 0, res.output
    w = by_workers(listed)
    for n in (2, 4):
        s = w[n]["summary"]
        assert s["verdict"] == "receive floor" and s["workers_needed"] is None
        assert w[n]["trials"][0]["tensor_leaves"] == 113
    text = " ".join(res.output.split())  # the sentences as written, whatever the width wrapped
    assert "113 tensors" in text and "pack the batch's many small tensors into a few" in text
    assert "try more workers" not in text
    res_b, packed = sweep(tmp_path, *common, "--collate-fn", f"{FIX}:collate_target_packed", "--num-workers", "2",
                          name="packed.json")
    assert res_b.exit_code == 0, res_b.output
    b = by_workers(packed)[2]
    assert b["trials"][0]["tensor_leaves"] == 9
    # Receiving 9 tensors costs a fraction of 113: the packed batch is received faster and the
    # loop runs faster end to end.
    assert b["summary"]["receive_p50_s"] < 0.6 * w[2]["summary"]["receive_p50_s"]
    assert b["summary"]["samples_per_s"] > 1.15 * w[2]["summary"]["samples_per_s"]


@pytest.mark.slow
def test_worker_threads_after_a_parallel_op_in_the_parent_do_not_deadlock(tmp_path):
    # The dataset normalises a tensor with torch in __init__: an OpenMP parallel region in the
    # parent. torch.set_num_threads(2) in a forked worker then hangs in GNU libgomp unless the
    # pool is freed before the fork; the config must run (or fail in seconds), never wait out
    # the watchdog.
    res, data = sweep(tmp_path, "--dataset", f"{FIX}:make_matmul_torch_init", "--batch-size", "16",
                      "--compute", "sleep:4", "--num-workers", "1", "--worker-threads", "2",
                      "--mp-context", "fork", "--config-timeout", "60", "--batches", "5", "--min-time", "0.5")
    assert res.exit_code == 0, res.output
    [row] = data["results"]
    assert row["status"] == "ok", row["error"]
    assert row["trials"][0]["torch_threads_worker"] == 2


@pytest.mark.slow
@pytest.mark.truth
def test_one_worker_thread_wins_where_two_oversubscribe_the_cpus(tmp_path):
    # Two workers x two intra-op threads on 2 CPUs: oversubscribed, and measured slower.
    res, data = sweep(tmp_path, "--dataset", f"{FIX}:make_matmul_numpy_init", "--batch-size", "16",
                      "--compute", "sleep:4", "--num-workers", "2", "--worker-threads", "1,2",
                      "--mp-context", "fork", "--batches", "10", "--min-time", "1.5")
    assert res.exit_code == 0, res.output
    r = {row["settings"]["worker_threads"]: row for row in data["results"]}
    assert any(w["kind"] == "oversubscribed" and w["message"].startswith("could oversubscribe: 2 workers x 2 intra-op threads")
               for w in r[2]["warnings"])
    assert r[1]["summary"]["samples_per_s"] > r[2]["summary"]["samples_per_s"]
    assert data["recommendation"]["settings"]["worker_threads"] == 1


@pytest.mark.slow
def test_a_dataset_of_forty_million_items_starts_every_epoch_at_once(tmp_path):
    # 50-batch epochs of 16 items out of 40 million, 0.5 ms each, 2 workers, an 8 ms step. A
    # sampler that permutes the whole dataset spends seconds at every epoch start; ours draws
    # the 800 indices an epoch uses.
    res, data = sweep(tmp_path, "--dataset", f"{FIX}:make_virtual_length", "--batch-size", "16",
                      "--compute", "sleep:8", "--num-workers", "2", "--persistent-workers", "off,on",
                      "--epoch-batches", "50", "--batches", "60", "--min-time", "1")
    assert res.exit_code == 0, res.output
    for row in data["results"]:
        t = row["trials"][0]
        assert t["epoch_start_batches"], "the window spans an epoch start"
        assert max(t["epoch_gap_s"]) < 1.0
        assert sum(t["sampler_s"]) / len(t["sampler_s"]) < 0.001  # under 1 ms per batch
        # The verdict is the largest measured part of the wait, gaps at epoch starts included.
        parts = row["summary"]["wait_parts_s"]
        named = {"loader": "loader-bound", "receive": "receive floor", "epoch-start": "epoch-start-bound"}
        if row["summary"]["stall_fraction"] >= 0.05:
            assert row["summary"]["verdict"] == named[max(named, key=lambda p: parts[p])]
    # Advice never contradicts a measured row: the DataLoader line is a measured config.
    rec = data["recommendation"]["settings"]
    assert any(r["settings"] == rec for r in data["results"])


@pytest.mark.slow
def test_a_users_slow_sampler_is_measured_and_named(tmp_path):
    # The user's own sampler: torch's RandomSampler over 4 million items permutes all of them
    # at every epoch start (~0.5 s here), in the main process.
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[dataset]\nkind = "{FIX}:make_virtual_length"\nsampler = "{FIX}:make_full_permutation_sampler"\n'
        "[dataset.kwargs]\nlength = 4000000\n"
    )
    res, data = sweep(tmp_path, str(cfg), "--batch-size", "16", "--compute", "sleep:8", "--num-workers", "2",
                      "--persistent-workers", "on", "--epoch-batches", "30", "--batches", "70", "--min-time", "1")
    assert res.exit_code == 0, res.output
    [row] = data["results"]
    t = row["trials"][0]
    assert data["config"]["dataset"]["sampler_kind"] == "sampler"
    # Each epoch start waits for the permutation; the sampler's time is most of that wait.
    starts = t["epoch_start_batches"]
    assert starts and all(t["sampler_s"][i] > 0.1 for i in starts)
    # The first batch's permutation is the sampler's too, not worker start-up.
    assert t["first_batch_sampler_s"] > 0.1 and t["first_batch_sampler_s"] < t["first_batch_s"]
    assert row["summary"]["verdict"] == "sampler-bound"
    assert "the sampler drawing indices in the main process" in " ".join(res.output.split())


@pytest.mark.slow
def test_a_users_batch_sampler_sets_the_batches_and_their_counts(tmp_path):
    # Batches of 16 and 8 alternate: 24 samples every 2 batches, counted as such.
    res, data = sweep(tmp_path, "--dataset", f"{FIX}:make_nested", "--sampler", f"{FIX}:make_bucket_batch_sampler",
                      "--batch-size", "16", "--compute", "sleep:5", "--num-workers", "0", "--batches", "10",
                      "--min-time", "0.3")
    assert res.exit_code == 0, res.output
    assert data["config"]["dataset"]["sampler_kind"] == "batch_sampler"
    t = data["results"][0]["trials"][0]
    # The dataset has 64 samples: an epoch is 16, 8, 16, 8, 16 (64 samples in 5 batches), then
    # the next epoch starts again. The window starts after the first batch and the warm-up.
    pattern = [16, 8, 16, 8, 16]
    start = 1 + t["warmup_batches"]
    assert t["samples"] == sum(pattern[(start + i) % 5] for i in range(len(t["step_s"])))


def test_bad_input_gets_one_line_and_exit_code_2(tmp_path):
    cases = [
        (["--dataset", f"{FIX}:make_nested", "--batch-size", "100", "--num-workers", "0"],
         "--batch-size 100 is larger than the dataset (64 samples)"),
        (["--output", str(tmp_path / "res.csv"), "--format", "csv"], "--output"),
        (["--io-ms", "2"], "--io-ms applies to the tensor dataset, not synthetic"),
        (["--dataset", "tensor", "--image-size", "64x64"], "--image-size applies to the synthetic dataset, not tensor"),
        (["--dataset", "tensor", "--num-workers", "0,2", "--baseline-settings", "num_workers=4"],
         "--baseline-settings num_workers=4 matches no config of this sweep (num_workers: 0,2)"),
        (["--dataset", f"{FIX}:make_nested", "--sampler", f"{FIX}:make_subset_sampler", "--batch-size", "32",
          "--num-workers", "0"],
         "--batch-size 32 is larger than the epoch of --sampler tests.fixture_datasets:make_subset_sampler (25 indices)"),
        (["--dataset", f"{FIX}:make_stream", "--sampler", f"{FIX}:make_full_permutation_sampler"],
         "--sampler tests.fixture_datasets:make_full_permutation_sampler: the dataset is an IterableDataset"),
    ]
    for args, expected in cases:
        out = [] if "--output" in args else ["--output", str(tmp_path / "r.json")]
        res = runner.invoke(app, ["sweep", *args, *out, "--no-progress", "--compute", "sleep:1"])
        assert res.exit_code == 2, (args, res.output)
        lines = [ln for ln in res.output.splitlines() if ln.startswith("loaderbench: error:")]
        assert len(lines) == 1 and expected in lines[0], (args, res.output)
        assert "Traceback" not in res.output


def test_storage_max_seconds_must_be_finite(tmp_path):
    for value in ("inf", "nan"):
        res = runner.invoke(app, ["storage", str(tmp_path), "--max-seconds", value])
        assert res.exit_code == 2 and "--max-seconds: give a finite number" in res.output


@pytest.mark.slow
def test_an_iterable_dataset_counts_the_items_collated_and_says_when_items_are_several_samples(tmp_path):
    # Each item is a chunk of 16 samples and the collate concatenates them: a batch of 4 items
    # is 64 samples, which the items rule cannot know; the leaves (64 rows, not 4) say so.
    common = ["--dataset", f"{FIX}:make_pre_batched_stream", "--collate-fn", f"{FIX}:collate_concat",
              "--batch-size", "4", "--compute", "sleep:5", "--num-workers", "0", "--batches", "10", "--min-time", "0.3"]
    res, data = sweep(tmp_path, *common, name="items.json")
    assert res.exit_code == 0, res.output
    [row] = data["results"]
    t = row["trials"][0]
    assert t["samples_rule"] == "items" and t["samples"] == 4 * len(t["step_s"])
    assert any(w["kind"] == "sample-count" and "no part of the batch has 4 rows (most common first dimension: 64)"
               in w["message"] for w in row["warnings"])
    res2, data2 = sweep(tmp_path, *common, "--samples-per-batch", "64", name="given.json")
    assert res2.exit_code == 0, res2.output
    t2 = data2["results"][0]["trials"][0]
    assert t2["samples_rule"] == "given" and t2["samples"] == 64 * len(t2["step_s"])
    assert not data2["results"][0]["warnings"]


@pytest.mark.slow
def test_a_corrupt_image_names_its_file_and_index(tmp_path):
    folder = tmp_path / "imgs"
    assert runner.invoke(app, ["make-data", str(folder), "--images", "8", "--size", "64x48", "--classes", "2"]).exit_code == 0
    bad = sorted(folder.rglob("*.jpg"))[3]
    bad.write_bytes(bad.read_bytes()[:200])
    res, data = sweep(tmp_path, "--data", str(folder), "--batch-size", "4", "--compute", "none",
                      "--num-workers", "0", "--batches", "2", "--min-time", "0")
    [row] = data["results"]
    assert row["status"] == "failed"
    assert f"({bad})" in row["error"] and "cannot load sample" in row["error"]


def test_a_batch_that_cannot_fit_in_memory_is_skipped_with_the_fix(tmp_path):
    # 3 x 1024 x 1024 float32 = 12 MiB per sample: a batch of 20,000 is 235 GiB, more than any
    # machine here has; the config is skipped before it runs (the out-of-memory killer would
    # otherwise take minutes and say nothing).
    res, data = sweep(tmp_path, "--dataset", "tensor", "--sample-shape", "3,1024,1024", "--batch-size", "20000",
                      "--compute", "sleep:1", "--num-workers", "0")
    assert res.exit_code == 2  # nothing could be measured
    [row] = data["results"]
    assert row["status"] == "skipped" and row["error"].startswith("host memory: the batches of this config need about")
    assert "lower batch_size, num_workers or prefetch_factor" in row["error"]


def test_a_sample_that_never_returns_in_the_first_batch_ends_the_check_within_the_timeout(tmp_path):
    # The sweep reads the first samples in its own process before any config (to check the
    # dataset and warm it): a stuck read there is bounded by --config-timeout, one line, exit 2.
    t0 = time.monotonic()
    res = runner.invoke(app, ["sweep", "--dataset", f"{FIX}:make_hangs_at_3", "--batch-size", "4",
                              "--num-workers", "0", "--compute", "sleep:1", "--config-timeout", "2",
                              "--output", str(tmp_path / "r.json"), "--no-progress"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("loaderbench: error:")]
    assert len(lines) == 1 and "took over 2 s (--config-timeout)" in lines[0] and FIX in lines[0]
    assert time.monotonic() - t0 < 30
