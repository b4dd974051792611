"""The CI gate: `compare` and `check` verdicts, exit codes, fingerprints, renderings, schema
migration. Hand-made result files in tests/data (results-v1-base/head/other-machine, a version-0
file); no DataLoader, no worker process (`check`'s sweep is faked)."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import shutil
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from loaderbench.analysis.compare import (
    MIN_REPEATS,
    VERDICTS,
    baseline_grid,
    compare_results,
    mann_whitney_u,
    min_attainable_p,
    pool_results,
    workload_fingerprint,
)
from loaderbench.cli.compare import check_command, check_config, compare_command
from loaderbench.errors import ResultsFormatError, UsageError
from loaderbench.model import SCHEMA_VERSION
from loaderbench.render import compare as compare_render
from loaderbench.results import ResultSet, read_results, save_results
from loaderbench.schema import migrate
from tests.helpers import result as make_result
from tests.helpers import settings as make_settings
from tests.helpers import trial as make_trial

DATA = Path(__file__).resolve().parent / "data"
BASE = DATA / "results-v1-base.json"
HEAD = DATA / "results-v1-head.json"
OTHER = DATA / "results-v1-other-machine.json"
V0 = DATA / "results-v0-example.json"
V2 = DATA / "results-v2-example.json"
V3 = DATA / "results-v3-default-cpu.json"

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command("compare")(compare_command)
app.command("check")(check_command)
runner = CliRunner()

EXPECTED = {
    "w0-nopin-nopf-f--once-b16": "regressed",  # -20%, repeats apart
    "w1-nopin-nopf-f2-once-b16": "improved",  # +20%, repeats apart
    "w2-nopin-nopf-f2-once-b16": "unchanged",  # +0.3%
    "w3-nopin-nopf-f2-once-b16": "not significant",  # -15%, repeats overlap
    "w4-nopin-nopf-f2-once-b16": "missing",
    "w6-nopin-nopf-f2-once-b16": "failed",  # ran in the baseline, a worker is killed now
    "w8-nopin-nopf-f2-once-b16": "new",
}


def base() -> ResultSet:
    return read_results(BASE)


def head() -> ResultSet:
    return read_results(HEAD)


def verdicts(comparison, pair: int = 0) -> dict[str, str]:
    return {r.key: r.verdict for r in comparison.pairs[pair].rows}


def run_set(results, *, fingerprint: str = "a1b2c3d4e5f6", config: dict | None = None) -> ResultSet:
    cfg = config if config is not None else copy.deepcopy(base().config)
    return ResultSet(config=cfg, environment={"fingerprint": fingerprint}, results=list(results), label="mem")


# --------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------


def test_every_verdict_from_hand_made_files():
    c = compare_results(base(), [head()], names=["base", "head"])
    assert verdicts(c) == EXPECTED
    # together with "not comparable" (next test) every verdict is covered
    assert set(EXPECTED.values()) | {"not comparable"} == set(VERDICTS)
    rows = {r.key: r for r in c.pairs[0].rows}
    w0 = rows["w0-nopin-nopf-f--once-b16"]
    assert w0.effect == pytest.approx(0.8, abs=1e-6)
    assert w0.effect_low < 0.8 < w0.effect_high < 0.9
    assert (w0.unit, w0.test, w0.n_baseline, w0.n_current) == ("repeats", "bootstrap-ci", 3, 3)
    assert rows["w3-nopin-nopf-f2-once-b16"].effect_high > 1.0  # the interval holds "no change"
    assert [r.key for r in c.pairs[0].rows if r.fails_gate] == [
        "w0-nopin-nopf-f--once-b16", "w6-nopin-nopf-f2-once-b16",
    ]
    assert "killed by signal" in rows["w6-nopin-nopf-f2-once-b16"].note
    assert c.exit_code() == 1


def test_different_machine_is_not_comparable_and_fails_only_with_strict():
    c = compare_results(base(), [read_results(OTHER)], names=["base", "other"])
    pair = c.pairs[0]
    assert not pair.comparable
    assert pair.reasons == ("different machine fingerprint (a1b2c3d4e5f6 vs ffff00001111)",)
    assert set(verdicts(c).values()) == {"not comparable"}
    assert all(r.effect is None for r in pair.rows)
    assert c.exit_code() == 0
    assert c.exit_code(strict=True) == 1


def test_unchanged_run_passes_and_a_tiny_threshold_leaves_noise_not_significant():
    c = compare_results(base(), [base()])
    assert set(verdicts(c).values()) == {"unchanged"}
    assert c.exit_code(strict=True) == 0
    # w2 moved +0.3% with 1-2% noise: beyond a 0.1% threshold, but within noise.
    c = compare_results(base(), [head()], threshold=0.001)
    assert verdicts(c)["w2-nopin-nopf-f2-once-b16"] == "not significant"


def test_failed_in_the_baseline_only_or_in_both_does_not_fail_the_gate():
    ok = make_result(make_settings(2), *[make_trial(0.01, 0.002)] * 3)
    failed = make_result(make_settings(2), status="failed", error="boom")
    c = compare_results(run_set([failed]), [run_set([ok])])
    (row,) = c.pairs[0].rows
    assert (row.verdict, row.fails_gate) == ("failed", False)
    assert "baseline only" in row.note
    c = compare_results(run_set([failed]), [run_set([failed])])
    (row,) = c.pairs[0].rows
    assert (row.verdict, row.fails_gate, c.exit_code()) == ("failed", False, 0)


def _jittered(wait_s: float, n: int, phase: int) -> list[float]:
    return [wait_s * (1 + 0.02 * ((i * 7 + phase) % 5 - 2)) for i in range(n)]


def test_fewer_than_three_repeats_use_per_batch_samples_and_warn():
    b = make_result(make_settings(2), make_trial(0, 0.002, waits=_jittered(0.010, 40, 0)))
    slow = make_result(make_settings(2), make_trial(0, 0.002, waits=_jittered(0.0130, 40, 1)))
    c = compare_results(run_set([b]), [run_set([slow])])
    (row,) = c.pairs[0].rows
    assert (row.verdict, row.unit, row.test, row.n_baseline) == ("regressed", "batches", "mann-whitney", 40)
    assert row.p_value < 1e-6
    assert any(f"fewer than {MIN_REPEATS} repeats" in w for w in c.pairs[0].warnings)


def test_stall_fraction_higher_is_worse_and_threshold_is_in_points():
    def cfg(wait_s: float):
        return make_result(make_settings(2), *[make_trial(wait_s * f, 0.010) for f in (0.99, 1.0, 1.01)])

    # stall 0.30 -> 0.45 (+15 points): regressed; its throughput fell too
    b, worse = run_set([cfg(0.010 * 3 / 7)]), run_set([cfg(0.010 * 9 / 11)])
    c = compare_results(b, [worse], metric="stall_fraction")
    (row,) = c.pairs[0].rows
    assert c.effect_kind == "difference"
    assert row.baseline == pytest.approx(0.30, abs=0.01) and row.current == pytest.approx(0.45, abs=0.01)
    assert row.effect == pytest.approx(0.15, abs=0.01)
    assert row.verdict == "regressed"
    assert verdicts(compare_results(worse, [b], metric="stall_fraction")) == {row.key: "improved"}
    # +15 points is under a 20-point threshold
    assert verdicts(compare_results(b, [worse], metric="stall_fraction", threshold=0.2)) == {row.key: "unchanged"}


def test_core_rejects_bad_arguments():
    with pytest.raises(UsageError, match="--metric"):
        compare_results(base(), [head()], metric="latency")
    with pytest.raises(UsageError, match="--threshold"):
        compare_results(base(), [head()], threshold=0)
    with pytest.raises(UsageError, match="--alpha"):
        compare_results(base(), [head()], alpha=0.9)


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "y", "u", "p"),
    [
        # reference values: scipy.stats.mannwhitneyu(x, y, use_continuity=False, method="asymptotic")
        ([1, 2, 3], [4, 5, 6], 0.0, 0.049534613435626706),
        ([1.0, 2.0, 2.0, 3.0], [2.0, 3.0, 3.0, 4.0, 5.0], 3.0, 0.07592696298255763),
        ([0, 0, 0, 1], [0, 1, 1, 1], 4.0, 0.18587673236587576),
    ],
)
def test_mann_whitney_u_normal_approximation_with_ties(x, y, u, p):
    got_u, got_p = mann_whitney_u(x, y)
    assert got_u == u
    assert got_p == pytest.approx(p, rel=1e-12)


def test_mann_whitney_all_tied_and_minimum_p():
    assert mann_whitney_u([5, 5, 5], [5, 5]) == (3.0, 1.0)
    assert min_attainable_p(3, 3) == pytest.approx(0.1)  # too few: the interval decides
    assert min_attainable_p(4, 4) == pytest.approx(2 / 70)
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])


def test_bootstrap_interval_is_seeded():
    b = run_set([make_result(make_settings(2), make_trial(0, 0.002, waits=_jittered(0.010, 40, 0)))])
    cur = run_set([make_result(make_settings(2), make_trial(0, 0.002, waits=_jittered(0.011, 40, 3)))])
    a = compare_results(b, [cur], seed=0).pairs[0].rows[0]
    b2 = compare_results(b, [cur], seed=0).pairs[0].rows[0]
    c = compare_results(b, [cur], seed=1).pairs[0].rows[0]
    b = b2
    assert (a.effect_low, a.effect_high) == (b.effect_low, b.effect_high)
    assert (a.effect_low, a.effect_high) != (c.effect_low, c.effect_high)


# --------------------------------------------------------------------------------------------
# Fingerprints
# --------------------------------------------------------------------------------------------


def test_workload_fingerprint_rules():
    cfg = base().config
    fp = workload_fingerprint(cfg)
    slower = copy.deepcopy(cfg)
    slower["dataset"]["cpu_ms"] = 0.25
    other_step = copy.deepcopy(cfg)
    other_step["compute"]["ms"] = 3.0
    moved = copy.deepcopy(cfg)
    moved["dataset"]["data_path"] = "/mnt/ssd/train"  # storage A/B/C: same workload
    newer = copy.deepcopy(cfg)
    newer["dataset"]["jpeg_quality"] = 90  # a default value, as a later version would write it
    newer["measure"]["batches"] = 60  # measured longer: a warning, not another workload
    assert workload_fingerprint(slower) != fp
    assert workload_fingerprint(other_step) != fp
    assert workload_fingerprint(moved) == fp
    assert workload_fingerprint(newer) == fp


def _variant(change) -> ResultSet:
    rs = base()
    change(rs)
    return rs


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda rs: rs.environment.update(fingerprint="0000deadbeef"), "different machine fingerprint"),
        (lambda rs: rs.environment.pop("fingerprint"), "machine fingerprint missing in cur"),
        (lambda rs: rs.config["dataset"].update(io_ms=1.25), "different dataset/compute (dataset.io_ms 1.0 vs 1.25;"),
        (lambda rs: rs.config["compute"].update(ms=4.0), "different dataset/compute (compute.ms 2.0 vs 4.0;"),
        (lambda rs: rs.config.update(cache="cold"), "different cache state (as-is vs cold)"),
        (lambda rs: rs.config["measure"].update(cache="warm"), "different cache state (as-is vs warm)"),
        (lambda rs: setattr(rs, "schema_written", 0), "different loaderbench schema (version 1 vs 0)"),
    ],
)
def test_fingerprint_rules_make_runs_not_comparable(change, reason):
    c = compare_results(base(), [_variant(change)], names=["base", "cur"])
    assert not c.pairs[0].comparable
    assert any(reason in r for r in c.pairs[0].reasons), c.pairs[0].reasons
    assert c.exit_code() == 0 and c.exit_code(strict=True) == 1


def test_cold_and_warm_rows_are_matched_separately():
    def rows(cold_rate: float, warm_rate: float):
        out = []
        for cache, rate in (("cold", cold_rate), ("warm", warm_rate)):
            wait = 16 / rate - 0.002
            r = make_result(make_settings(2), *[make_trial(wait * f, 0.002) for f in (0.99, 1.0, 1.01)])
            out.append(dataclasses.replace(r, cache=cache))
        return out

    cfg = copy.deepcopy(base().config)
    cfg["measure"]["cache"] = "both"
    c = compare_results(run_set(rows(800, 1500), config=cfg), [run_set(rows(640, 1500), config=cfg)])
    assert verdicts(c) == {
        "w2-nopin-nopf-f2-once-b16-cold": "regressed",
        "w2-nopin-nopf-f2-once-b16-warm": "unchanged",
    }


def test_measure_differences_are_a_warning_only():
    longer = _variant(lambda rs: rs.config["measure"].update(batches=60))
    c = compare_results(base(), [longer])
    assert c.pairs[0].comparable
    assert c.pairs[0].warnings == ("measured differently: measure.batches: 6 vs 60",)
    older = _variant(lambda rs: rs.config["measure"].pop("timing"))  # not recorded: no difference
    assert compare_results(base(), [older]).pairs[0].warnings == ()
    # A check measures a searched baseline's configs with --search grid: which configs, not how.
    gridded = _variant(lambda rs: rs.config["measure"].update(search="grid", time_budget_s=None))
    searched = _variant(lambda rs: rs.config["measure"].update(search="auto", time_budget_s=120.0))
    assert compare_results(searched, [gridded]).pairs[0].warnings == ()


# --------------------------------------------------------------------------------------------
# Pooling, grid
# --------------------------------------------------------------------------------------------


def test_pool_joins_trials_and_refuses_other_machines():
    pooled = pool_results([base(), base()], ["a.json", "b.json"])
    assert all(len(r.trials) == 6 for r in pooled.results if r.status == "ok")
    c = compare_results(pooled, [head()])
    row = c.pairs[0].rows[0]
    assert (row.verdict, row.test, row.n_baseline) == ("regressed", "mann-whitney", 6)
    with pytest.raises(UsageError, match="cannot pool b.json with a.json: different machine"):
        pool_results([base(), read_results(OTHER)], ["a.json", "b.json"])


def test_baseline_grid_recreates_the_configs():
    grid = baseline_grid(base())
    assert grid["num_workers"] == (0, 1, 2, 3, 4, 6)
    assert grid["prefetch_factor"] == (2,)
    assert grid["pin_memory"] == (False,) and grid["prefetch"] == (False,)
    assert grid["batch_size"] == (16,) and grid["mp_context"] == (None,)
    with pytest.raises(UsageError, match="no configs"):
        baseline_grid(run_set([]))


def test_check_rebuilds_the_baselines_sweep_from_its_saved_config(tmp_path):
    from loaderbench.model import ComputeSpec, DatasetSpec

    b = base()
    cfg = check_config(b, None)
    assert cfg.dataset == DatasetSpec.from_dict(b.config["dataset"])
    assert cfg.compute == ComputeSpec(kind="sleep", ms=2.0)
    assert cfg.grid["num_workers"] == (0, 1, 2, 3, 4, 6) and cfg.grid["batch_size"] == (16,)
    assert (cfg.measure.batches, cfg.repeats, cfg.measure.device, cfg.label) == (6, 3, "cpu", "base")
    # A config file gives the dataset, step and measure settings; the grid is still the baseline's.
    toml = tmp_path / "c.toml"
    toml.write_text('[dataset]\nkind = "tensor"\nio_ms = 1.0\n[compute]\nstep = "sleep:3"\n[grid]\nnum_workers = [8]\n')
    other = check_config(b, toml)
    assert other.compute == ComputeSpec(kind="sleep", ms=3.0) and other.grid["num_workers"] == (0, 1, 2, 3, 4, 6)


# --------------------------------------------------------------------------------------------
# Renderings
# --------------------------------------------------------------------------------------------

GOLDEN_TABLE = """\
loaderbench compare — samples_per_s
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━┳━━━━┳━━━━━━━━━━━━━━━━━━━┓
┃ config                    ┃ base samples/s ┃ head samples/s ┃ ratio ┃ 95% interval ┃  p ┃ verdict           ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━╇━━━━╇━━━━━━━━━━━━━━━━━━━┩
│ w0-nopin-nopf-f--once-b16 │            800 │            640 │ 0.800 │  0.780–0.820 │ CI │ ▼ regressed       │
│ w1-nopin-nopf-f2-once-b16 │          1,000 │          1,200 │ 1.200 │  1.178–1.222 │ CI │ ▲ improved        │
│ w2-nopin-nopf-f2-once-b16 │          1,500 │          1,505 │ 1.003 │  0.980–1.020 │ CI │ = unchanged       │
│ w3-nopin-nopf-f2-once-b16 │          1,600 │          1,360 │ 0.850 │  0.667–1.214 │ CI │ ~ not significant │
│ w4-nopin-nopf-f2-once-b16 │          1,800 │              — │     — │            — │  — │ - missing         │
│ w6-nopin-nopf-f2-once-b16 │          1,900 │              — │     — │            — │  — │ x failed          │
│ w8-nopin-nopf-f2-once-b16 │              — │          2,000 │     — │            — │  — │ + new             │
└───────────────────────────┴────────────────┴────────────────┴───────┴──────────────┴────┴───────────────────┘
head: 1 regressed, 1 improved, 1 unchanged, 1 not significant, 1 missing, 1 new, 1 failed
head w6-nopin-nopf-f2-once-b16: failed: DataLoader worker (pid 123) is killed by signal: Killed
gate: FAIL (1 regressed, 1 newly failing; exit 1)
"""


def render_text(comparison, *, width: int = 200, strict: bool = False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, soft_wrap=False)
    compare_render.render_comparison(comparison, console, strict=strict)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def test_table_golden():
    text = render_text(compare_results(base(), [head()], names=["base", "head"]))
    lines = text.splitlines()
    assert lines[0].startswith("metric samples_per_s, threshold 10% of throughput, alpha 0.05: regressed")
    assert lines[1] == (
        "baseline base: label base, 2026-12-01T10:00:00+00:00, loaderbench 0.1.0 (schema 1), machine "
        "a1b2c3d4e5f6, workload tensor 3x32x32 cpu 0.2 ms + io 1 ms per sample | sleep:2 (54a4d58d7924), cache as-is"
    )
    assert "\n".join(lines[3:]) + "\n" == GOLDEN_TABLE


def test_side_by_side_for_more_than_two_runs():
    c = compare_results(base(), [head(), read_results(OTHER)], names=["base", "head", "other"])
    text = render_text(c)
    assert "NOT COMPARABLE other vs base: different machine fingerprint" in text
    header = next(line for line in text.splitlines() if "config" in line)
    for col in ("base", "head", "other", "verdict"):
        assert col in header
    row = next(line for line in text.splitlines() if "w0-nopin" in line)
    assert "0.800 (0.780–0.820)" in row and "▼ regressed" in row and "! not comparable" in row
    assert "other: 6 not comparable" in text


def test_markdown_comment():
    md = compare_render.to_markdown(compare_results(base(), [head()], names=["base", "head"]))
    lines = md.splitlines()
    assert lines[0] == "### ❌ loaderbench: FAIL (1 regressed, 1 newly failing; exit 1)"
    assert "| config | base samples/s | head samples/s | ratio (95% interval) | p | verdict |" in lines
    assert "|---|---:|---:|---:|---:|---|" in lines
    assert "| `w0-nopin-nopf-f--once-b16` | 800 | 640 | 0.800 (0.780–0.820) | CI | **▼ regressed** |" in lines
    assert "| `w3-nopin-nopf-f2-once-b16` | 1,600 | 1,360 | 0.850 (0.667–1.214) | CI | ~ not significant |" in lines
    assert "| `w8-nopin-nopf-f2-once-b16` | — | 2,000 | — | — | + new |" in lines
    assert "workload `tensor 3x32x32 cpu 0.2 ms + io 1 ms per sample \\| sleep:2`" in md  # pipes escaped
    assert "<details><summary>How loaderbench decides</summary>" in md
    ok = compare_render.to_markdown(compare_results(base(), [base()], names=["base", "rerun"]))
    assert ok.startswith("### ✅ loaderbench: pass (no regression; exit 0)")
    three = compare_render.to_markdown(
        compare_results(base(), [head(), read_results(OTHER)], names=["base", "head", "other"])
    )
    assert "> **not comparable** (other): different machine fingerprint (a1b2c3d4e5f6 vs ffff00001111)" in three
    assert "| config | base samples/s | head samples/s | head ratio (interval) | head verdict | other samples/s" in three


def test_stall_rendering_uses_points():
    c = compare_results(base(), [head()], metric="stall_fraction")
    text = render_text(c)
    row = next(line for line in text.splitlines() if "w0-nopin" in line)
    assert "Δ stall" in text and "10 stall points" in text
    assert "│      90.0% │      92.0% │ +2.0 pp │ +1.8 to +2.2 pp │ CI │ = unchanged │" in row


# --------------------------------------------------------------------------------------------
# The commands and their exit codes
# --------------------------------------------------------------------------------------------


def compare(*args: str):
    return runner.invoke(app, ["compare", *args])


def test_two_runs_with_no_config_in_common_say_nothing_was_compared_and_fail_only_with_strict():
    b = base()
    only = [r for r in b.results if r.key() == "w0-nopin-nopf-f--once-b16"]
    others = [r for r in b.results if r.key() != "w0-nopin-nopf-f--once-b16"][:1]
    c = compare_results(run_set(only), [run_set(others)], names=["base", "head"])
    pair = c.pairs[0]
    assert not pair.comparable and pair.reasons[0].startswith(
        "no config in common with the baseline, so nothing was compared (baseline: w0-nopin-nopf-f--once-b16; this run: ")
    assert set(verdicts(c).values()) <= {"missing", "new", "failed"}
    assert c.exit_code() == 0 and c.exit_code(strict=True) == 1
    # One config in common: compared as before.
    assert compare_results(run_set(only + others), [run_set(others)], names=["base", "head"]).pairs[0].comparable


def test_a_config_failing_in_runs_that_are_not_comparable_is_not_a_regression():
    from loaderbench.model import ConfigResult

    b = base()
    ok_row = next(r for r in b.results if r.status == "ok")
    failed = ConfigResult(settings=ok_row.settings, status="failed", error="OSError: read error")
    hung = ConfigResult(settings=ok_row.settings, status="hung", error="no end within --config-timeout 20s")
    other = run_set([failed], fingerprint="ffff00001111")
    c = compare_results(run_set([ok_row]), [other], names=["base", "other"])
    assert not c.pairs[0].comparable and c.exit_code() == 0 and c.exit_code(strict=True) == 1
    assert c.pairs[0].rows[0].note == "failed: OSError: read error (runs not comparable)"
    # Comparable: the same newly failing config fails the gate.
    assert compare_results(run_set([ok_row]), [run_set([failed])]).exit_code() == 1
    # Hung in the baseline, failed now: said as it was.
    row = compare_results(run_set([hung]), [run_set([failed])]).pairs[0].rows[0]
    assert row.note == "hung in the baseline, failed in this run: OSError: read error" and not row.fails_gate


def test_compare_exit_codes():
    assert compare(str(BASE), str(BASE)).exit_code == 0
    res = compare(str(BASE), str(HEAD))
    assert res.exit_code == 1, res.output
    assert "gate: FAIL (1 regressed, 1 newly failing; exit 1)" in res.stdout
    assert compare(str(BASE), str(OTHER)).exit_code == 0
    res = compare(str(BASE), str(OTHER), "--strict")
    assert res.exit_code == 1
    assert "gate: FAIL (not comparable, --strict; exit 1)" in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metric", "latency"], "--metric: expected one of samples_per_s, stall_fraction"),
        (["--threshold", "ten"], "--threshold: expected a number such as 10% or 0.1"),
        (["--threshold", "0%"], "--threshold: expected a value above 0 and at most 10"),
        (["--alpha", "0.7"], "--alpha: expected a value above 0 and at most 0.5"),
        (["--format", "csv"], "--format: expected one of table, markdown, json"),
    ],
)
def test_compare_usage_errors_exit_2(args, message):
    res = compare(str(BASE), str(HEAD), *args)
    assert res.exit_code == 2
    assert res.stderr.strip() == f"loaderbench: error: {message}, got {args[1]!r}"


def test_compare_file_errors_exit_2(tmp_path):
    res = compare(str(BASE))
    assert res.exit_code == 2 and "needs a BASELINE and at least one CURRENT" in res.stderr
    res = compare(str(BASE), str(tmp_path / "nope.json"))
    assert res.exit_code == 2 and "no such result file" in res.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = compare(str(BASE), str(bad))
    assert res.exit_code == 2 and "not JSON" in res.stderr
    newer = tmp_path / "newer.json"
    data = json.loads(BASE.read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    newer.write_text(json.dumps(data))
    res = compare(str(BASE), str(newer))
    assert res.exit_code == 2 and f"schema_version {SCHEMA_VERSION + 1} is newer" in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = compare(str(BASE), str(empty))
    assert res.exit_code == 2 and "no *.json result files" in res.stderr


def test_compare_formats_and_folders(tmp_path):
    res = compare(str(BASE), str(HEAD), "--format", "json")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert data["gate"] == {"strict": False, "exit_code": 1, "regression": True, "not_comparable": False}
    assert {r["key"]: r["verdict"] for r in data["pairs"][0]["rows"]} == EXPECTED
    res = compare(str(BASE), str(HEAD), "--format", "markdown")
    assert res.stdout.startswith("### ❌ loaderbench: FAIL")
    # a folder of runs is one side, pooled (an interleaved CI job's base/1.json base/2.json ...)
    runs = tmp_path / "base"
    runs.mkdir()
    shutil.copy(BASE, runs / "1.json")
    shutil.copy(BASE, runs / "2.json")
    res = compare(str(runs), str(HEAD), "--format", "json")
    data = json.loads(res.stdout)
    assert data["baseline"]["files"] == 2 and data["baseline"]["name"] == "base"
    assert data["pairs"][0]["rows"][0]["test"] == "mann-whitney"
    shutil.copy(OTHER, runs / "3.json")
    res = compare(str(runs), str(HEAD))
    assert res.exit_code == 2 and "cannot pool" in res.stderr


def test_compare_more_than_two_files_exit_code_counts_every_run():
    res = compare(str(BASE), str(BASE), str(OTHER), "--format", "json")
    assert res.exit_code == 0
    assert len(json.loads(res.stdout)["pairs"]) == 2
    res = compare(str(BASE), str(OTHER), str(HEAD), "--format", "json")
    assert res.exit_code == 1


# --------------------------------------------------------------------------------------------
# check (the sweep is faked: no worker processes here)
# --------------------------------------------------------------------------------------------


class FakeSweep:
    def __init__(self, answer: Path) -> None:
        self.answer = answer
        self.configs: list = []
        self.outputs: list[Path] = []

    def __call__(self, config, *, output, observer=None, **kwargs):
        self.configs.append(config)
        self.outputs.append(Path(output))
        rs = read_results(self.answer)
        save_results(rs, Path(output))
        return rs, Path(output)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "baselines").mkdir(parents=True)
    baseline = tmp_path / "results" / "baselines" / "ci.json"
    shutil.copy(BASE, baseline)
    return baseline


def fake_sweep(monkeypatch, answer: Path) -> FakeSweep:
    import loaderbench.orchestration.execute

    fake = FakeSweep(answer)
    monkeypatch.setattr(loaderbench.orchestration.execute, "execute_sweep", fake)
    return fake


def check(*args: str):
    return runner.invoke(app, ["check", *args, "--no-progress"])


def test_check_runs_the_baselines_configs_and_gates(in_tmp, monkeypatch):
    fake = fake_sweep(monkeypatch, HEAD)
    res = check("--baseline", str(in_tmp))
    assert res.exit_code == 1, res.output
    assert "▼ regressed" in res.stdout and "gate: FAIL" in res.stdout
    (cfg,) = fake.configs
    assert cfg.grid["num_workers"] == (0, 1, 2, 3, 4, 6) and cfg.grid["batch_size"] == (16,)
    assert (cfg.dataset.kind, cfg.dataset.cpu_ms, cfg.dataset.io_ms) == ("tensor", 0.2, 1.0)
    assert (cfg.compute.label(), cfg.repeats, cfg.measure.batches) == ("sleep:2", 3, 6)
    (out,) = fake.outputs
    assert out.parts[0] == "results" and "baselines" not in out.parts and out.name.startswith("base-check-")
    assert read_results(in_tmp).label == "base"  # the baseline is untouched
    fake_sweep(monkeypatch, BASE)
    assert check("--baseline", str(in_tmp)).exit_code == 0


def test_check_with_a_config_takes_its_workload_and_the_baselines_grid(in_tmp, tmp_path, monkeypatch):
    fake = fake_sweep(monkeypatch, BASE)
    toml = tmp_path / "ci.toml"
    toml.write_text('label = "ci"\n[dataset]\nkind = "tensor"\nio_ms = 3.0\n[grid]\nnum_workers = [9]\n')
    res = check("--baseline", str(in_tmp), str(toml))
    assert res.exit_code == 0, res.output
    (cfg,) = fake.configs
    assert cfg.dataset.io_ms == 3.0 and cfg.grid["num_workers"] == (0, 1, 2, 3, 4, 6)


def test_check_update_baseline_writes_it_on_purpose(in_tmp, monkeypatch):
    fake_sweep(monkeypatch, HEAD)
    res = check("--baseline", str(in_tmp), "--update-baseline")
    assert res.exit_code == 0, res.output
    assert "▼ regressed" in res.stdout  # shown, accepted on purpose
    assert f"baseline written to {in_tmp}" in res.stderr
    assert read_results(in_tmp).label == "head"


def test_check_first_baseline_and_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "results" / "baselines" / "ci.json"
    fake = fake_sweep(monkeypatch, BASE)
    res = check("--baseline", str(missing))
    assert res.exit_code == 2
    assert "no such baseline; make one with `loaderbench check --baseline" in res.stderr
    res = check("--baseline", str(missing), "--update-baseline")
    assert res.exit_code == 2 and "pass the sweep's CONFIG.toml" in res.stderr
    toml = tmp_path / "ci.toml"
    toml.write_text('label = "ci"\n[grid]\nnum_workers = [0, 2]\n')
    res = check("--baseline", str(missing), str(toml), "--update-baseline")
    assert res.exit_code == 0, res.output
    assert fake.configs[-1].grid["num_workers"] == (0, 2)  # the whole sweep of the config
    assert missing.exists()
    res = check("--baseline", str(missing), "--output", str(missing))
    assert res.exit_code == 2 and "is the baseline itself" in res.stderr
    res = check("--baseline", str(missing), "--metric", "x")
    assert res.exit_code == 2


# --------------------------------------------------------------------------------------------
# Schema versions
# --------------------------------------------------------------------------------------------


def test_version_0_file_is_migrated():
    raw = json.loads(V0.read_text())
    data = migrate(raw, V0)
    assert raw["schema_version"] == 0  # the input is not modified
    assert data["schema_version"] == SCHEMA_VERSION == 3
    assert (data["tool"], data["tool_version"]) == ("loaderbench", "0.0.9")
    assert "loaderbench_version" not in data
    summary = data["results"][0]["summary"]
    assert summary["memory_pss_bytes"] is None and "memory_uss_bytes" not in summary
    rs = ResultSet.from_dict(data)
    assert rs.results[0].trials[0].memory_uss_bytes == 300_000_000
    assert rs.results[0].trials[0].memory_pss_bytes is None
    assert rs.schema_written == 0
    # a migrated run is not compared with one measured today
    c = compare_results(base(), [rs])
    assert "different loaderbench schema (version 1 vs 0)" in c.pairs[0].reasons


def test_read_results_migrates_version_0():
    # Needs results.read_results to call schema.migrate (see schema.py).
    rs = read_results(V0)
    assert rs.schema_version == 3 and rs.schema_written == 0


def test_current_version_passes_through_unchanged():
    raw = json.loads(V3.read_text())
    assert migrate(raw, V3) == raw


def test_version_2_moves_what_the_sweep_recorded_and_drops_what_is_derived():
    raw = json.loads(V2.read_text())
    raw["analysis"]["search"] = {"steps": [{"config": "w2-nopin-nopf-f2-once-b16", "why": "repeat: disputed"},
                                           {"config": "w0-nopin-nopf-f--once-b16", "why": "probe"}]}
    raw["results"][1]["summary"]["verdict"] = "loader-bound (stall every 8 batches)"
    data = migrate(raw, V2)
    assert data["schema_version"] == 3 and data["schema_written"] == 2
    assert set(data["sweep"]) == {"configs_planned", "sweep_wall_s", "search"}
    assert [st["repeat"] for st in data["sweep"]["search"]["steps"]] == [True, False]
    assert "analysis" not in data and "recommendation" not in data
    assert data["results"][1]["summary"]["verdict"] is None and "wait_parts_s" not in data["results"][1]["summary"]
    rs = ResultSet.from_dict(data)
    assert rs.analysis is None and rs.sweep.configs_planned == raw["analysis"]["configs_planned"]


def test_version_2_keeps_a_watched_loaders_defaults_and_the_searchs_widening_and_drops_the_ties():
    # A schema-2 file of the loader and figures features: what the watch and the search recorded
    # moves to `sweep` as typed records; the ties the listing decided are derived again.
    from loaderbench.results import Widening

    raw = json.loads(V2.read_text())
    raw["analysis"]["loader_defaults"] = {"snapshot_every_n_steps": 1}
    raw["analysis"]["search"] = {"steps": [], "widened": {"workers": 8, "refused": "memory: 16 workers would ..."}}
    raw["analysis"]["listed_first"] = {"snapshot_every_n_steps": {"value": 1000, "tied": [1]}}
    rs = ResultSet.from_dict(migrate(raw, V2))
    assert rs.sweep.loader_defaults == {"snapshot_every_n_steps": 1}
    assert rs.sweep.search is not None and rs.sweep.search.widened == Widening(8, "memory: 16 workers would ...")
    assert rs.analysis is None


def test_version_1_warnings_and_notes_become_typed():
    raw = json.loads(BASE.read_text())
    raw["results"][0]["warnings"] = ["oversubscribed: 6 workers on 2 usable CPUs (num_workers sets processes)"]
    raw["results"][0]["trials"][0]["notes"] = ["the loader ended after 40 batches"]
    raw["recommendation"] = {"settings": None, "reason": "prose"}
    data = migrate(raw, BASE)
    assert data["results"][0]["warnings"] == [
        {"kind": "oversubscribed", "message": "oversubscribed: 6 workers on 2 usable CPUs (num_workers sets processes)"}]
    assert data["results"][0]["trials"][0]["notes"] == [{"kind": "loader-ended", "message": "the loader ended after 40 batches"}]
    assert "recommendation" not in data and data["schema_written"] == 1
    # Numbers measured alike: a version-1 baseline is not refused for its schema alone.
    reasons = compare_results(read_results(BASE), [read_results(V2)]).pairs[0].reasons
    assert not any("schema" in r for r in reasons)



@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(schema_version=4), "schema_version 4 is newer than this loaderbench reads (up to 3); it needs a loaderbench that reads schema 4"),
        (lambda d: d.update(schema_version=-1), "schema_version -1 is not supported"),
        (lambda d: d.update(schema_version="1"), "schema_version must be an integer, got '1'"),
        (lambda d: d.update(schema_version=True), "schema_version must be an integer"),
        (lambda d: d.pop("tool"), "not a loaderbench result file"),
        (lambda d: d.pop("schema_version"), "not a loaderbench result file"),
    ],
)
def test_unreadable_versions_are_refused(edit, message):
    data = json.loads(BASE.read_text())
    edit(data)
    with pytest.raises(ResultsFormatError, match="^x.json: " + message.replace("(", r"\(").replace(")", r"\)")):
        migrate(data, "x.json")


def test_version_0_without_raw_timings_is_refused():
    data = json.loads(V0.read_text())
    del data["results"][0]["trials"][1]["step_s"]
    with pytest.raises(ResultsFormatError, match=r"without raw per-batch timings \(results\[0\]\.trials\[1\]\.step_s\)"):
        migrate(data, "old.json")
    with pytest.raises(ResultsFormatError, match="not an object"):
        migrate([1, 2], "list.json")


def test_every_schema_version_has_an_example_file():
    versions = {json.loads(p.read_text())["schema_version"] for p in DATA.glob("results-v*.json")}
    assert versions == set(range(0, SCHEMA_VERSION + 1))


def test_records_round_trip_through_json():
    c = compare_results(base(), [head(), read_results(OTHER)])
    text = compare_render.to_json(c, strict=True)
    data = json.loads(text)
    assert data["gate"]["exit_code"] == 1 and data["effect_kind"] == "ratio"
    assert dataclasses.asdict(c.baseline) == data["baseline"]


def test_check_on_another_machine_reports_and_passes_unless_strict(in_tmp, monkeypatch):
    fake_sweep(monkeypatch, OTHER)
    res = check("--baseline", str(in_tmp))
    assert res.exit_code == 0, res.output
    assert "NOT COMPARABLE current vs baseline: different machine fingerprint" in res.stdout
    assert "make a baseline here with --update-baseline" in res.stderr
    assert check("--baseline", str(in_tmp), "--strict").exit_code == 1


def test_a_run_that_could_not_reach_its_cache_state_is_not_comparable():
    from loaderbench.analysis.compare import run_info
    from loaderbench.results import ResultSet
    from tests.helpers import result, settings, trial

    r = result(settings(0), trial(0.01, 0.01))
    r.cache = "not cold"
    rs = ResultSet(config={"measure": {"cache": "cold"}}, environment={}, results=[r])
    assert run_info(rs).cache_state == "cold (not achieved: not cold)"


def test_storage_probe_files_are_refused_as_results(tmp_path):
    import json

    import pytest

    from loaderbench.errors import ResultsFormatError
    from loaderbench.results import read_results

    p = tmp_path / "storage.json"
    p.write_text(json.dumps({"schema_version": 1, "tool": "loaderbench", "kind": "storage", "probe": {}}))
    with pytest.raises(ResultsFormatError, match="a `loaderbench storage` probe, not a sweep result"):
        read_results(p)
