"""End-to-end CLI runs: real DataLoaders in fresh processes, the tensor dataset's analytic answers,
user datasets by import path, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from loaderbench.cli import app
from loaderbench.workload.datasets import TensorCostDataset
from tests.helpers import batch_load_s

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    # The per-config processes import tests.fixture_datasets from the working directory.
    monkeypatch.chdir(ROOT)


def sweep(tmp_path: Path, *args: str):
    out = tmp_path / "r.json"
    extra = [] if "--repeats" in args else ["--repeats", "1"]
    extra += [] if "--search" in args else ["--search", "grid"]  # these tests check every row  # keep the suite fast
    res = runner.invoke(app, ["sweep", *args, *extra, "--output", str(out), "--no-progress"])
    return res, out


def by_workers(data: dict) -> dict[int, dict]:
    return {r["settings"]["num_workers"]: r for r in data["results"]}


@pytest.mark.slow
@pytest.mark.truth
def test_ground_truth_tensor_sweep(tmp_path):
    # io 2 ms x 16 samples = 32 ms per batch per worker; the step sleeps 12 ms.
    res, out = sweep(
        tmp_path, "--dataset", "tensor", "--io-ms", "2", "--batch-size", "16",
        "--compute", "sleep:12", "--num-workers", "0,1,2,4,8", "--min-time", "1.5",
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    rows = by_workers(data)
    s0, s4, s8 = rows[0]["summary"], rows[4]["summary"], rows[8]["summary"]
    # 0 workers: 16 x 2 ms + 12 ms = 44 ms per batch, 364 samples/s at most: nothing can make the
    # loop faster than its sleeps. Every sleep overshoots, by 0.1-0.4 ms on these VMs and more
    # when they are busy (a 2-core CI run read 283 samples/s, -22%), so the expectation uses this
    # machine's cost of a batch, timed here on the same dataset: batch / (load + step), where
    # the step is the row's own compute time. A miscount would be off by the batch size, 16x.
    load_s = batch_load_s(TensorCostDataset(80, (3, 64, 64), 0.0, 2.0), 16)
    assert s0["samples_per_s"] <= 1.01 * 16 / 0.044
    assert s0["samples_per_s"] == pytest.approx(16 / (load_s + s0["compute_p50_s"]), rel=0.12)
    assert s0["stall_fraction"] == pytest.approx(32 / 44, abs=0.05)  # ~0.73
    # 4 workers deliver a batch every 8 ms < 12 ms: the step is the limit, 1333 samples/s less
    # the cost of receiving each batch from a worker, which the sweep measures (receive_p50_s:
    # 1.1-1.7 ms on an idle 2-core machine, more when the machine is busy). Analytic given that
    # floor: batch / (step + receive floor).
    for s in (s4, s8):
        expected = 16 / (s["compute_p50_s"] + s["receive_p50_s"])
        assert s["samples_per_s"] == pytest.approx(expected, rel=0.15)
        assert s["samples_per_s"] > 0.7 * 16 / 0.012
        assert s["stall_fraction"] < 0.30  # the receive floor's share: 10-20% idle, 25% seen on a busy VM
    assert rows[2]["summary"]["samples_per_s"] < 0.85 * s4["samples_per_s"]
    assert data["recommendation"]["settings"]["num_workers"] == 4
    assert "DataLoader(dataset, batch_size=16, num_workers=4" in res.output
    for r in data["results"]:
        assert r["trials"] and len(r["trials"][0]["step_s"]) >= 20
    # The same file renders again in every format.
    for fmt in ("table", "json", "csv", "markdown"):
        shown = runner.invoke(app, ["show", str(out), "--format", fmt])
        assert shown.exit_code == 0, shown.output
    assert "◀ knee" in runner.invoke(app, ["show", str(out), "--format", "markdown"]).output


@pytest.mark.slow
def test_user_dataset_with_nested_batches_and_strings(tmp_path):
    res, out = sweep(
        tmp_path, "--dataset", "tests.fixture_datasets:make_nested", "--batch-size", "8",
        "--compute", "none", "--num-workers", "0,2", "--batches", "5", "--min-time", "0",
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert [r["status"] for r in data["results"]] == ["ok", "ok"]
    # imgs (2 tensors) + img + patch2 + label + theta + meta.index = 7 tensor leaves.
    assert data["results"][0]["trials"][0]["tensor_leaves"] == 7


@pytest.mark.slow
def test_user_collate_fn(tmp_path):
    res, out = sweep(
        tmp_path, "--dataset", "tests.fixture_datasets:make_nested",
        "--collate-fn", "tests.fixture_datasets:collate_as_dict", "--batch-size", "4",
        "--compute", "none", "--num-workers", "0", "--batches", "3", "--min-time", "0",
    )
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["results"][0]["trials"][0]["tensor_leaves"] == 1


@pytest.mark.slow
def test_a_failing_config_becomes_a_row_and_the_sweep_goes_on(tmp_path):
    res, out = sweep(
        tmp_path, "--dataset", "tests.fixture_datasets:make_fails_in_workers", "--batch-size", "4",
        "--compute", "none", "--num-workers", "0,2", "--batches", "5", "--min-time", "0",
    )
    assert res.exit_code == 0, res.output
    rows = by_workers(json.loads(out.read_text()))
    assert rows[0]["status"] == "ok" and rows[0]["summary"]["samples_per_s"] > 0
    assert rows[2]["status"] == "failed" and rows[2]["summary"] is None
    assert "ValueError" in rows[2]["error"] and "corrupt sample at index" in rows[2]["error"]
    assert "DataLoader worker process" in rows[2]["error"]


@pytest.mark.slow
def test_crash_hang_and_raise_are_rows_the_rest_is_measured_and_nothing_survives(tmp_path):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    # No stage profile of the pick: the rows are what is checked. The watchdog's 15 s stays: the
    # configs that end take 1.5-4 s each on a quiet 2-core machine, a fresh measuring process after
    # each fault included, and a loaded one can take several times that.
    res, out = sweep(
        tmp_path, "--dataset", "tests.fixture_datasets:make_mixed", "--batch-size", "4",
        "--compute", "none", "--num-workers", "0,1,2,3,4,5,6", "--batches", "5", "--min-time", "0",
        "--config-timeout", "15", "--no-profile",
    )
    assert res.exit_code == 0, res.output
    rows = by_workers(json.loads(out.read_text()))
    assert rows[0]["status"] == "ok" and rows[6]["status"] == "ok"
    assert rows[0]["summary"]["samples_per_s"] > 0 and rows[6]["summary"]["samples_per_s"] > 0
    assert rows[1]["status"] == "hung" and "before the first batch" in rows[1]["error"]
    # Python stacks of the hung tree were dumped before the kill (faulthandler on SIGUSR1).
    assert "most recent call first" in rows[1]["detail"]
    # One process at a time, each under its own header: the measuring process, then its worker.
    sections = rows[1]["detail"].split("--- Python stacks of pid ")[1:]
    assert [s.split("\n")[0].split(", ")[1] for s in sections][:2] == [
        "measuring process ---", "child (DataLoader worker or other) ---"
    ]
    assert all("most recent call first" in s for s in sections[:2])
    assert rows[2]["status"] == "failed" and "SIGKILL" in rows[2]["error"]
    assert rows[3]["status"] == "failed" and "ValueError: corrupt sample at index" in rows[3]["error"]
    assert rows[4]["status"] == "failed" and "shared memory (/dev/shm) too small" in rows[4]["error"]
    assert rows[5]["status"] == "failed" and "SIGSEGV" in rows[5]["error"]
    for k in (1, 2, 3, 4, 5):
        assert rows[k]["summary"] is None  # no throughput for a config that did not finish
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before


@pytest.mark.slow
def test_make_data_then_folder_sweep(tmp_path):
    folder = tmp_path / "imgs"
    made = runner.invoke(app, ["make-data", str(folder), "--images", "24", "--classes", "3",
                               "--size", "160x120"])
    assert made.exit_code == 0, made.output
    again = runner.invoke(app, ["make-data", str(folder), "--images", "4", "--classes", "2"])
    assert again.exit_code == 2 and "--force" in again.output
    res, out = sweep(tmp_path, "--data", str(folder), "--batch-size", "8", "--compute", "sleep:1",
                     "--num-workers", "0,2", "--batches", "4", "--min-time", "0")
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["config"]["dataset"]["kind"] == "folder"
    assert all(r["status"] == "ok" for r in data["results"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--num-workers", "0,x"], "--num-workers: expected an integer from 0 to 1024, got 'x'"),
        (["--data", "/no/such/dir"], "/no/such/dir"),
        (["--format", "xml"], "--format: expected one of table, json, csv, markdown"),
        (["--compute", "spin:5"], "needs a CUDA GPU"),
        (["--compute", "warp:9"], "--compute: expected none, sleep:MS, spin:MS, model:NAME or step:MODULE:FACTORY"),
        (["--dataset", "no_such_module_xyz:make"], "no_such_module_xyz"),
        (["--dataset", "/data/imagenet"], "got '/data/imagenet' (a folder of images: --data PATH)"),
        (["--batch-size", "0"], "--batch-size: expected an integer from 1"),
        (["--pin-memory", "maybe"], "--pin-memory: expected on/off"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    res, out = sweep(tmp_path, *args)
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not out.exists()


def test_bad_config_file_and_result_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[grid]\nnum_worker = [2]\n")
    res = runner.invoke(app, ["sweep", str(bad)])
    assert res.exit_code == 2 and "did you mean 'num_workers'" in res.output
    notjson = tmp_path / "x.json"
    notjson.write_text("{nope")
    res = runner.invoke(app, ["show", str(notjson)])
    assert res.exit_code == 2 and "not JSON" in res.output
    other = tmp_path / "o.json"
    other.write_text(json.dumps({"benchmarks": []}))
    res = runner.invoke(app, ["show", str(other)])
    assert res.exit_code == 2 and "not a loaderbench result file" in res.output
    newer = tmp_path / "n.json"
    newer.write_text(json.dumps({"tool": "loaderbench", "schema_version": 99}))
    res = runner.invoke(app, ["show", str(newer)])
    assert res.exit_code == 2 and "upgrade loaderbench" in res.output


def test_unwritable_output_is_refused_before_measuring(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = runner.invoke(app, ["sweep", "--dataset", "tensor", "--output", str(blocker / "r.json")])
    assert res.exit_code == 2
    assert f"--output {blocker / 'r.json'}: {blocker} is a file, not a folder; choose another --output" in res.output


@pytest.mark.slow
@pytest.mark.parametrize("sig, says", [
    ("SIGINT", b"loaderbench: interrupted: finished configs are saved in"),
    ("SIGTERM", b"loaderbench: stopped (SIGTERM): finished configs are saved in"),
])
def test_ctrl_c_exits_130_keeps_finished_configs_and_reaps_workers(tmp_path, sig, says):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loaderbench", "sweep", "--dataset", "tensor", "--io-ms", "1",
         "--batch-size", "8", "--compute", "sleep:5", "--num-workers", "0,2,2,2", "--prefetch-factor", "2,3,4",
         "--min-time", "3", "--search", "grid", "--repeats", "10", "--output", str(out), "--no-progress"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # A suite started in the background of a shell inherits SIGINT ignored, and so would the
        # sweep (an ignored signal stays ignored across exec): give it the default back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until at least one config is saved
        if out.exists() and json.loads(out.read_text())["results"]:
            break
        time.sleep(0.2)
    time.sleep(1.0)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert says in err
    assert b"Traceback" not in err
    data = json.loads(out.read_text())
    assert 1 <= len(data["results"]) < 4
    assert all(r["status"] == "ok" for r in data["results"])
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


@pytest.mark.slow
def test_cache_both_measures_cold_and_warm_reads_and_splits_the_stall(tmp_path):
    folder = Path("/var/tmp") / f"lb-cache-{tmp_path.name}"  # a disk path: /tmp may be tmpfs
    try:
        made = runner.invoke(app, ["make-data", str(folder), "--images", "96", "--classes", "2",
                                   "--size", "320x240", "--force"])
        assert made.exit_code == 0, made.output
        res, out = sweep(tmp_path, "--data", str(folder), "--cache", "both", "--compute", "sleep:5",
                         "--num-workers", "0", "--batch-size", "8", "--batches", "6", "--min-time", "0")
        assert res.exit_code == 0, res.output
        data = json.loads(out.read_text())
        by_cache = {r["cache"]: r for r in data["results"]}
        cold, warm = by_cache["cold"]["trials"][0], by_cache["warm"]["trials"][0]
        assert cold["cache_state"]["achieved"] == "cold"
        assert cold["storage_read_bytes"] >= 0.9 * cold["needed_bytes"]
        assert warm["storage_read_bytes"] < 0.1 * warm["needed_bytes"]
        assert warm["served_from"] == "page cache"  # read() returned the bytes, the device did not
        assert [fp["key"] for fp in data["analysis"]["fetch_prep"]] == ["w0-nopin-nopf-f--once-b8"]
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_cache_cold_on_tmpfs_is_never_labelled_cold(tmp_path):
    folder = Path("/dev/shm") / f"lb-cache-{tmp_path.name}"
    try:
        runner.invoke(app, ["make-data", str(folder), "--images", "16", "--classes", "2", "--size", "64x48"])
        res, out = sweep(tmp_path, "--data", str(folder), "--cache", "cold", "--compute", "none",
                         "--num-workers", "0", "--batch-size", "4", "--batches", "3", "--min-time", "0")
        assert res.exit_code == 0, res.output
        r = json.loads(out.read_text())["results"][0]
        assert r["trials"][0]["cache_state"]["achieved"] != "cold"
        assert r["trials"][0]["cache_state"]["evictable"] is False
        assert any(w["kind"] == "cache-not-achieved" and "--cache cold: achieved" in w["message"] for w in r["warnings"])
        assert r["cache"] == "not cold" and r["key"].endswith("-notcold")
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_persistent_workers_pay_startup_once_across_epochs(tmp_path):
    # Epochs of 3 batches with spawned workers: without persistent_workers every epoch starts
    # its workers again, with them only the first does. No stage profile of the pick (its
    # spawned workers' start-up again): the rows' epoch gaps and rates are what is checked.
    res, out = sweep(
        tmp_path, "--dataset", "tensor", "--compute", "sleep:2", "--num-workers", "2",
        "--persistent-workers", "off,on", "--mp-context", "spawn", "--epoch-batches", "3",
        "--batch-size", "4", "--batches", "6", "--min-time", "0", "--no-profile",
    )
    assert res.exit_code == 0, res.output
    rows = {r["settings"]["persistent_workers"]: r for r in json.loads(out.read_text())["results"]}
    gaps_off = rows[False]["trials"][0]["epoch_gap_s"]
    gaps_on = rows[True]["trials"][0]["epoch_gap_s"]
    assert len(gaps_off) >= 2 and len(gaps_on) >= 2
    assert min(gaps_off) > 0.3  # a spawn start-up per epoch
    assert max(gaps_on) < 0.5 * min(gaps_off)
    assert rows[True]["summary"]["samples_per_s"] > 1.5 * rows[False]["summary"]["samples_per_s"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--compute", "model:resnet5O"], "'resnet5O' is not a torchvision classification model"),
        (["--dataset", "tests.fixture_datasets:make_empty", "--compute", "none"], "has 0 samples"),
        (["--dataset", "tests.fixture_datasets:make_slow_factory", "--config-timeout", "2"],
         "took over 2 s (--config-timeout)"),
        (["--device", "tpu"], "--device (measure.device): expected auto, cpu, cuda or cuda:N"),
    ],
)
def test_workload_errors_fail_before_the_sweep(tmp_path, args, message):
    res, out = sweep(tmp_path, *args)
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_binary_files_and_non_table_sections_are_one_line_errors(tmp_path):
    blob = tmp_path / "x.bin"
    blob.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01")
    for cmd in (["sweep", str(blob)], ["show", str(blob)]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 2 and "not a text" in res.output and "Traceback" not in res.output
    cfg = tmp_path / "c.toml"
    cfg.write_text("grid = 3\n")
    res = runner.invoke(app, ["sweep", str(cfg)])
    assert res.exit_code == 2 and "'grid' must be a table" in res.output


def test_emoji_codes_are_printed_as_written(tmp_path):
    res, _ = sweep(tmp_path, "--data", str(tmp_path / "a:fire:b"))
    assert res.exit_code == 2 and "a:fire:b" in res.output


@pytest.mark.slow
def test_a_sweep_where_nothing_is_measured_exits_2_after_the_table(tmp_path):
    res, out = sweep(tmp_path, "--dataset", "tests.fixture_datasets:make_always_fails", "--compute", "none",
                     "--num-workers", "0", "--batch-size", "4")
    assert res.exit_code == 2
    assert "FAILED: OSError: cannot read" in res.output
    # The last line names the cause and where the user's code raised it, not only that every row failed.
    last = " ".join(res.output.split("loaderbench: error:")[-1].split())
    fixture = Path(__file__).resolve().parent / "fixture_datasets.py"
    line = 1 + fixture.read_text().splitlines().index('        raise OSError(f"cannot read sample {i}")')
    assert re.fullmatch(rf"no config was measured successfully: every row raised OSError: cannot read sample \d+, in "
                        rf"__getitem__ at {re.escape(str(fixture))} line {line}: fix it there \(each row's traceback "
                        rf"is in {re.escape(str(out))}\)", last), last
    row = json.loads(out.read_text())["results"][0]
    assert row["status"] == "failed" and "OSError: cannot read sample" in row["error"]
    assert "Traceback" in row["detail"]


def test_the_line_of_a_sweep_that_measured_nothing_names_the_users_line_only_where_every_row_raised_there():
    from loaderbench.errors import nothing_measured_line

    def tb(path: str, line: int, exc: str) -> str:
        return ('Traceback (most recent call last):\n'
                f'  File "{Path(__file__).resolve().parents[1] / "loaderbench" / "measure" / "loop.py"}", line 169, '
                'in timed_loop\n'
                f'  File "{path}", line {line}, in __getitem__\n    raise ...\n{exc}\n')

    # At 0 workers and at 2 (torch re-raises the worker's error; its last frame is still the user's).
    zero, two = tb("/home/u/myds.py", 70, "ValueError: sample 850 is broken"), tb(
        "/home/u/myds.py", 70, "ValueError: sample 851 is broken")
    assert nothing_measured_line([zero, two], ("0 workers", "ValueError: sample 850 is broken"), "r.json") == (
        "no config was measured successfully: every row raised ValueError: sample 850 is broken, in __getitem__ at "
        "/home/u/myds.py line 70: fix it there (each row's traceback is in r.json)")
    # Raised at two places, or a row with no traceback of the user's (a hang): the first row, as before.
    other = tb("/home/u/myds.py", 75, "OSError: no such file")
    for details in ([zero, other], [zero, ""]):
        assert nothing_measured_line(details, ("0 workers", "ValueError: x"), "r.json") == (
            "no config was measured successfully: every row failed, hung or was skipped (the first, 0 workers: "
            "ValueError: x; each row says why; details in r.json)")


def test_default_output_names_are_safe():
    import datetime

    from loaderbench.orchestration.config import build_config
    from loaderbench.orchestration.plan import default_output_path

    cfg = build_config(None, {"": {"label": "my run/x"}})
    path = default_output_path(cfg, datetime.datetime(2026, 11, 29, 12, 0, 0))
    assert path == Path("results/my_run_x-20261129T120000Z.json")


@pytest.mark.slow
@pytest.mark.truth
@pytest.mark.parametrize(
    "io_ms, batch, step_ms, grid",
    [
        # 16 samples x 1 ms = 16 ms per batch per worker, +5-7 ms to collate and send it on 2 cores;
        # 13 ms step (+1-3 ms to receive a batch): 1 worker delivers at about 75% of that cycle, 2
        # workers (one batch per 11 ms) keep up with a third to spare, so jitter does not stall them.
        ("1", "16", "13", "0,1,2,4"),
        # 8 x 3 ms = 24 ms per batch, 30 ms step: a single worker already keeps up.
        ("3", "8", "30", "0,1,2"),
        # 4 x 8 ms = 32 ms per batch, 10 ms step (+1-3 ms to receive a batch on 2 cores): about 3
        # workers needed, so 4 in a 0,2,4,8 grid (2 deliver one per 16 ms, 20-30% short).
        ("8", "4", "10", "0,2,4,8"),
    ],
)
def test_the_knee_is_the_analytic_worker_count(tmp_path, io_ms, batch, step_ms, grid):
    # The analytic answer, given the receive cost and the loader-alone rate the sweep measured: W
    # workers deliver a batch every build / W (build: the sleeps, or the worker's whole cycle as
    # the loader-alone probe measured it, whichever is longer), the main process takes one every
    # step + receive; the knee is the fewest workers within the tolerance (10%: a shared 2-core
    # runner jitters by a few percent) of the best. A config within 3% of the tolerance's edge
    # may fall either way. No stage profile of the pick: the rows and the knee are checked.
    res, out = sweep(tmp_path, "--dataset", "tensor", "--io-ms", io_ms, "--batch-size", batch,
                     "--compute", f"sleep:{step_ms}", "--num-workers", grid, "--min-time", "1",
                     "--tolerance", "10%", "--no-profile")
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    build_s, step_s = int(batch) * float(io_ms) / 1000, float(step_ms) / 1000
    predicted = {}
    for w, r in sorted(by_workers(data).items()):
        receive = r["summary"]["receive_p50_s"] or 0.0
        alone = r["summary"]["loader_ceiling_samples_per_s"]
        worker_build_s = max(build_s, w * int(batch) / alone) if w and alone else build_s
        predicted[w] = int(batch) / (build_s + step_s if w == 0 else max(worker_build_s / w, step_s + receive))
    best = max(predicted.values())
    chosen = data["recommendation"]["settings"]["num_workers"]
    assert predicted[chosen] >= (0.90 - 0.03) * best, (chosen, predicted)
    assert all(predicted[w] < (0.90 + 0.03) * best for w in predicted if w < chosen), (chosen, predicted)


@pytest.mark.slow
@pytest.mark.truth
def test_periodic_stalls_are_detected_in_a_real_sweep(tmp_path):
    # A sawtooth, scaled down: 2 samples x 20 ms = 40 ms per batch per worker, 1 ms step, 4 workers:
    # the 4 workers' batches arrive together, then the loop waits ~35 ms for the next round. Small
    # batches keep the receive short, so the workers stay in phase on 2 busy cores.
    res, out = sweep(tmp_path, "--dataset", "tensor", "--io-ms", "20", "--batch-size", "2",
                     "--compute", "sleep:1", "--num-workers", "4", "--batches", "40", "--min-time", "2")
    assert res.exit_code == 0, res.output
    summary = json.loads(out.read_text())["results"][0]["summary"]
    # The 4 workers' batches come in rounds of 4; on 2 shared cores the round sometimes splits
    # into two pairs, which is a period of 2: either way the stall recurs within the round.
    assert summary["stall_period_batches"] in (2, 4) and summary["verdict"] == "loader-bound"
    assert f"loader-bound (stall every {summary['stall_period_batches']} batches)" in res.output
    # 40 ms build / (1 ms step + 1-3 ms receive) = 10-40 workers, rough on 2 cores
    assert 8 <= summary["workers_needed"] <= 45


def test_click_usage_errors_are_one_line_too():
    import subprocess
    import sys

    for args in (["sweep", "--bogus"], ["nocmd"], ["show"]):
        p = subprocess.run([sys.executable, "-m", "loaderbench", *args], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith("loaderbench: error: ") and len(p.stderr.strip().splitlines()) == 1
    # A config file is the first argument, not --config (a common guess): the line says so.
    p = subprocess.run([sys.executable, "-m", "loaderbench", "sweep", "--config", "my.toml"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "the config file is the first argument: `loaderbench sweep CONFIG.toml`" in p.stderr
    v = subprocess.run([sys.executable, "-m", "loaderbench", "--version"], cwd=ROOT, capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.startswith("loaderbench ")


@pytest.mark.slow
def test_the_time_budget_counts_from_the_commands_own_start_not_its_shells():
    # `bash -c "A && loaderbench sweep"` runs the last command by exec in the shell's process:
    # the process was created before A ran. The budget counts from the command's start, so A's
    # time (a 2-s sleep here) is not spent from it: the command reads no more of it than the
    # same command started alone does, within a second.
    import os
    import subprocess
    import sys

    code = ("import time; t = time.monotonic(); from loaderbench.cli.common import command_started; "
            "print(t - command_started())")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))

    def spent(shell: str) -> float:
        out = subprocess.run(["bash", "-c", shell + f"exec {sys.executable} -c '{code}'"], env=env,
                             capture_output=True, text=True, check=True)
        return float(out.stdout)

    alone = spent("")
    after_sleep = spent("sleep 2 && ")
    assert after_sleep < alone + 1.0
    assert after_sleep > -0.5  # never after the command began


def test_a_sweep_run_in_process_gives_sigterm_back_as_it_was(tmp_path):
    # The CLI turns SIGTERM into Ctrl-C for the command's time only: a process that goes on after
    # it (Python calling the CLI, this test suite under `timeout`) keeps its own handler.
    import signal

    before = signal.getsignal(signal.SIGTERM)
    res, _ = sweep(tmp_path, "--dataset", "tensor", "--num-workers", "0", "--batch-size", "4", "--compute", "none",
                   "--batches", "3", "--min-time", "0", "--no-profile")
    assert res.exit_code == 0, res.output
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_forked_child_ends_on_sigterm_without_a_traceback():
    # The CLI turns SIGTERM into Ctrl-C in its own process; a child forked after it (a DataLoader
    # worker, a measuring process) inherits the handler and must end as it would without it:
    # killed by the signal, printing nothing.
    import multiprocessing
    import os
    import signal

    from loaderbench.cli import common

    before = signal.getsignal(signal.SIGTERM)
    try:
        common.sigterm_as_interrupt()
        ctx = multiprocessing.get_context("fork")
        r, w = os.pipe()
        child = ctx.Process(target=_sleep_and_report, args=(w,))
        child.start()
        os.close(w)
        os.read(r, 1)  # the child is up, its handler installed
        os.kill(child.pid, signal.SIGTERM)
        child.join(10)
        assert child.exitcode == -signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)


def _sleep_and_report(w: int) -> None:
    import os
    import time

    os.write(w, b"x")
    time.sleep(30)


def test_a_sweep_asked_of_a_stage_its_profile_lacks_saves_its_results_then_refuses_in_one_line(tmp_path):
    # The stage names are known only once the pick is profiled: the sweep runs, saves and shows
    # its results, then refuses the question as bad input (exit 2), one line naming the flag.
    res, out = sweep(tmp_path, "--dataset", "tensor", "--batch-size", "8", "--compute", "sleep:5",
                     "--num-workers", "0", "--device", "cpu", "--min-time", "0.3", "--what-if", "stage=nosuch:2")
    assert res.exit_code == 2, res.output
    assert out.exists() and json.loads(out.read_text())["results"]
    last = res.output.strip().splitlines()[-1]
    assert "Traceback" not in res.output
    assert last.startswith("loaderbench: error: --what-if stage=nosuch:2: the stage profile of ")
    assert "has no stage of that name; name one of its stages (" in last and "collate" in last
