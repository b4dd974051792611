"""Golden output of the human-facing table (colour off, width pinned)."""

from __future__ import annotations

import pytest

from loaderbench.analysis import analyze
from loaderbench.model import Ceiling, CeilingBound
from loaderbench.render import columns, footer
from loaderbench.render import sweep as render
from loaderbench.results import ResultSet, SearchLog, SearchStep, SweepRecord
from tests.helpers import result, settings, trial

GOLDEN = """\
dataset: tensor 3x64x64 cpu 0 ms + io 2 ms per sample | step: sleep:12 | device: no GPU | CPUs usable: 2
in every row: prefetch_factor=2, persistent_workers=off, batch_size=16
compute ceiling at batch 16: 1,333 samples/s (step 12.0 ms; batch / step time)
No GPU here: the sleep:12 step stands for an accelerator step of that length.
pin_memory, the CUDA prefetcher, H2D and GPU util: n/a without CUDA (not shown).
"""


def sample() -> ResultSet:
    rs = ResultSet(
        config={"dataset": {"kind": "tensor", "sample_shape": [3, 64, 64], "cpu_ms": 0, "io_ms": 2},
                "compute": {"kind": "sleep", "ms": 12}, "measure": {}},
        environment={"cuda_available": False, "usable_cpus": 2},
        results=[
            result(settings(0), trial(0.032, 0.012)),
            result(settings(2), trial(0.004, 0.012)),
            result(settings(4), trial(0.0005, 0.012)),
            result(settings(8), trial(0.0005, 0.012)),
            result(settings(16), status="failed", error="a DataLoader worker was killed by SIGKILL"),
        ],
        ceilings={16: Ceiling.analytic(16, 0.012)},
    )
    for r in rs.results[1:4]:
        r.trials[0].receive_s = [0.0004] * 4
    analyze(rs)
    return rs


def test_table_golden(console):
    render.render_table(sample(), console)
    text = console.export_text()
    assert text.startswith(GOLDEN)
    rows = [ln for ln in text.splitlines() if ln.startswith("│")]
    assert [ln.split("│")[1].strip() for ln in rows] == ["0", "2", "4", "8", "16"]
    knee = [ln for ln in rows if "◀ knee" in ln]
    assert len(knee) == 1 and knee[0].split("│")[1].strip() == "4"
    assert "│     1,280 │          96% │             n/a │  4.0% │" in knee[0]
    failed = rows[-1]
    assert "FAILED: a DataLoader worker was killed by SIGKILL" in failed
    assert "1,280" not in failed and "%" not in failed.split("FAILED")[0]
    assert "loader = DataLoader(dataset, batch_size=16, num_workers=4, pin_memory=False, prefetch_factor=2, persistent_workers=False)" in text


def test_markdown_and_csv():
    md = render.to_markdown(sample())
    assert "| workers | samples/s | % of ceiling | loader alone /s | stall |" in md
    assert "**4**" in md and "◀ knee" in md
    csv = render.to_csv(sample()).splitlines()
    assert csv[0].startswith("key,num_workers,pin_memory,prefetch,prefetch_factor")
    assert len(csv) == 6
    # Nested values (dicts, lists) are JSON in their cell, not Python reprs.
    import io
    import json

    import pandas as pd

    frame = pd.read_csv(io.StringIO(render.to_csv(sample())))
    nested = [c for c in frame.columns if frame[c].astype(str).str.startswith(("{", "[")).any()]
    assert nested and all(json.loads(v) is not None for c in nested for v in frame[c].dropna())


def test_a_noisy_config_is_flagged_with_advice(console):
    rs = sample()
    r = rs.results[1]
    r.trials = [trial(0.004, 0.012 * f) for f in (1.0, 1.3, 0.8)]
    analyze(rs)
    render.render_table(rs, console)
    text = console.export_text()
    assert "(noisy)" in text
    # Steps of 4 + 12, 4 + 15.6 and 4 + 9.6 ms: 816-1,176 samples/s around a median of 1,000 (36%).
    assert ("Noisy (figures uncertain by more than ±5%): 2 workers, 36% over 3 repeats: measure longer (--batches, "
            "--min-time) or more often (--repeats)") in " ".join(text.split())
    assert "1,000 ±18%" in text


def test_a_window_whose_rounds_vary_is_flagged_with_its_uncertainty(console):
    # One trial of 2 workers whose rounds of 2 batches take 16 and 24 ms in turn after a first
    # step of 16 ms (waits 4, 4, 20, 4 ms, compute 12 ms): from the second step on, 10 rounds,
    # mean 20 ms, their standard deviation 4.216 ms, so the mean's relative standard error is
    # 4.216 / sqrt(10) / 20 = 6.67%, and the figure ±13%.
    rs = sample()
    r = rs.results[1]
    r.trials = [trial(0.0, 0.012, waits=[0.004] + [0.004, 0.004, 0.020, 0.004] * 5)]
    analyze(rs)
    assert r.summary.window_se == pytest.approx(0.0667, abs=1e-4)
    render.render_table(rs, console)
    text = " ".join(console.export_text().split())
    assert "808 ±13%" in text and "(noisy)" in text  # 21 batches of 16 in 0.416 s
    assert "2 workers, ±13% from its windows: measure longer" in text


def test_headroom_starts_from_the_baseline_settings():
    rs = sample()
    rs.config["baseline_settings"] = {"num_workers": 2}
    analyze(rs)
    assert not [ln for ln in footer.footer_lines(rs) if ln.startswith("Headroom")]  # --verbose says it
    lines = footer.footer_lines(rs, verbose=True)
    head = [ln for ln in lines if ln.startswith("Headroom")][0]
    # w2: stall 4 / 16 = 25% -> at most 1 / 0.75 = 1.33x faster
    assert head.startswith("Headroom from your current settings (2 workers): stall 25%")
    assert "at most 1.33x faster" in head


def test_partial_line_counts_configs_short_of_their_repeats():
    # Interrupted in the third repeat: 3 of 4 configs finished, two of them with 2 of 3 trials.
    rs = ResultSet(
        config={"dataset": {"kind": "tensor"}, "compute": {"kind": "sleep", "ms": 12}, "measure": {"repeats": 3}},
        environment={"cuda_available": False, "usable_cpus": 2},
        results=[
            result(settings(0), trial(0.032, 0.012), trial(0.032, 0.012), trial(0.032, 0.012)),
            result(settings(2), trial(0.004, 0.012), trial(0.004, 0.012)),
            result(settings(4), trial(0.0005, 0.012), trial(0.0005, 0.012)),
        ],
        sweep=SweepRecord(configs_planned=4, interrupted=True),
    )
    analyze(rs)

    def partial(rs):
        return next(ln for ln in footer.footer_lines(rs) if ln.startswith("PARTIAL"))

    assert partial(rs) == (
        "PARTIAL: 3 of 4 planned configs finished (the sweep was stopped), 2 of them with fewer than 3 repeats; "
        "the recommendation covers only these."
    )
    rs.results = rs.results[:1]
    analyze(rs)
    assert partial(rs).startswith("PARTIAL: 1 of 4 planned configs finished (the sweep was stopped);")
    # A search plans no fixed set: it says how far it got, not "of N planned".
    rs.sweep.search = SearchLog(grid_configs=4)
    analyze(rs)
    lines = footer.footer_lines(rs)
    assert ("PARTIAL: the search was stopped after 1 config; the recommendation covers only these, and what more "
            "configs would give is not known.") in lines


def test_a_loader_ceiling_that_is_a_bound_is_shown_as_at_least_and_binds_only_from_sustained_rates():
    # A short IterableDataset (split across workers): 0 workers' probe sustained a rate (882
    # samples/s); 2 and 4 workers' epochs ended before every worker built its batches in the
    # probe, so theirs are bounds: at least their own 3,200 and 4,000 samples/s.
    rows = [trial(0.0141, 0.004), trial(0.001, 0.004), trial(0.0, 0.004)]  # 16 / step: 883, 3,200, 4,000
    rows[0].loader_alone_samples_per_s, rows[0].loader_alone_method = 882.0, "sustained"
    for t, bound in ((rows[1], 3200.0), (rows[2], 4000.0)):
        t.loader_alone_method, t.loader_alone_bound_samples_per_s, t.loader_alone_reason = "bound", bound, "epoch_end"
    rs = ResultSet(
        config={"dataset": {"kind": "tensor"}, "compute": {"kind": "sleep", "ms": 4}, "measure": {}},
        environment={"cuda_available": False, "usable_cpus": 2},
        results=[result(settings(0), rows[0]), result(settings(2), rows[1]), result(settings(4), rows[2])],
        ceilings={16: Ceiling.analytic(16, 0.004)},
    )
    analyze(rs)
    s = rs.results[2].summary
    assert s.loader_ceiling_samples_per_s is None and s.loader_ceiling_bound_samples_per_s == 4000.0
    assert s.loader_ceiling_bound is CeilingBound.EPOCH_END and s.to_dict()["loader_ceiling_bound"] == "epoch_end"
    # 0 workers: the probe's 882 is within its slack below the row's own 884: the row's rate.
    assert [columns.row_cells(r, cuda=False)["loader_ceiling"] for r in rs.results] == ["884", "≥3,200", "≥4,000"]
    lc = rs.analysis.loader_ceiling
    assert (lc.probed, lc.bounded, lc.ranked) == (1, 2, 3)
    verbose = footer.footer_lines(rs, verbose=True)
    line = next(x for x in verbose if x.startswith("Loader ceiling"))
    # The 4-worker row ran at the compute ceiling: the loader alone delivers at least that, so the
    # step binds; that conclusion rests on the loop's own throughput, never on a bound taken for a rate.
    assert line == (
        "Loader ceiling (the loader alone, H2D included): 884 samples/s at best (0 workers), "
        "a sustained rate on 1 of 3 configs (2 only a bound: at least their own samples/s), "
        "at least 4,000 measured with the step (4 workers); compute ceiling 4,000 samples/s: the compute step binds."
    )
    assert ("loader alone /s ≥ (2 and 4 workers): not a sustained rate, only a bound: the loader alone delivers at "
            "least that many samples/s (at least the row's own); the epoch ended before every worker built its "
            "batches in the probe.") in verbose
    assert not any("n/a" in x and "loader alone" in x for x in verbose)
    assert "why loader alone is a bound (≥)" in footer.footer_lines(rs)[-1]
    # The fastest row well under the compute ceiling: a bound says nothing of which binds.
    rows[2].compute_s = rows[2].step_s = [0.008] * len(rows[2].step_s)  # 2,000 samples/s
    rows[2].loader_alone_bound_samples_per_s = 2000.0
    analyze(rs)
    assert rs.analysis.loader_ceiling.binds is None
    line = next(x for x in footer.footer_lines(rs, verbose=True) if x.startswith("Loader ceiling"))
    assert line.endswith("compute ceiling 4,000 samples/s: which one binds is not known (the loader alone delivers "
                         "at least that much, how much more was not measured).")
    rows[2].compute_s = rows[2].step_s = [0.004] * len(rows[2].step_s)
    rows[2].loader_alone_bound_samples_per_s = 4000.0
    # Probed everywhere: the usual conclusion.
    rows[1].loader_alone_samples_per_s, rows[2].loader_alone_samples_per_s = 3300.0, 5000.0
    rows[1].loader_alone_method = rows[2].loader_alone_method = "sustained"
    analyze(rs)
    line = next(x for x in footer.footer_lines(rs, verbose=True) if x.startswith("Loader ceiling"))
    assert line.endswith("compute ceiling 4,000 samples/s: the compute step binds.")
    # Within 10% of each other (4,100 vs 4,000): neither "binds" alone; the margin is missing.
    rows[2].loader_alone_samples_per_s = 4100.0
    analyze(rs)
    line = next(x for x in footer.footer_lines(rs, verbose=True) if x.startswith("Loader ceiling"))
    assert line.endswith("compute ceiling 4,000 samples/s: within 10% of each other: with no margin, the "
                         "loader's jitter stalls the step.")
    # The same at 0 workers: loading and the step take turns in the main process; no jitter.
    zero = ResultSet(config=rs.config, environment=rs.environment, ceilings=rs.ceilings,
                     results=[result(settings(0), trial(0.0, 0.004))])
    zero.results[0].trials[0].loader_alone_samples_per_s = 4100.0
    analyze(zero)
    line = next(x for x in footer.footer_lines(zero, verbose=True) if x.startswith("Loader ceiling"))
    assert line.endswith("within 10% of each other: with 0 workers the main process loads a batch, then steps, "
                         "so the two add up.")


def test_loader_ceiling_is_at_least_the_measured_throughput_and_ignores_unranked_rows():
    from loaderbench.model import Note, WarningKind
    from loaderbench.orchestration.preflight import REPLICATED_MESSAGE

    # Every config probed, but the best probe (3,439) reads below the best measured 3,612: within
    # the probe's slack (10%), so the loader alone sustains the row's own rate, and far below
    # the compute ceiling: the loader binds.
    rows = [trial(0.0, 0.0044297), trial(0.001, 0.004)]  # 16 / step: 3,612, 3,200
    rows[0].loader_alone_samples_per_s, rows[1].loader_alone_samples_per_s = 3439.0, 3100.0
    rs = ResultSet(
        config={"dataset": {"kind": "tensor"}, "compute": {"kind": "sleep", "ms": 2.5}, "measure": {}},
        environment={"cuda_available": False, "usable_cpus": 2},
        results=[result(settings(4), rows[0]), result(settings(2), rows[1])],
        ceilings={16: Ceiling.analytic(16, 0.0025)},
    )
    analyze(rs)
    assert footer.loader_ceiling_line(rs) == (
        "Loader ceiling (the loader alone, H2D included): 3,612 samples/s at best (4 workers); "
        "compute ceiling 6,400 samples/s: the loader binds."
    )
    # Which ceiling binds is concluded from sustained rates only: a probe far below its row (2,000
    # against 3,612) is a bound at the row's rate, which says nothing of it (here the step itself
    # ran slower beside the loader, 4.4 ms vs 2.5); the 2-worker probe (3,100) is within its
    # slack below its row's 3,200: that rate.
    rows[0].loader_alone_samples_per_s = 2000.0
    from loaderbench.analysis import summarize_config

    summarize_config(rs.results[0])
    analyze(rs)
    assert footer.loader_ceiling_line(rs) == (
        "Loader ceiling (the loader alone, H2D included): 3,200 samples/s at best (2 workers), "
        "a sustained rate on 1 of 2 configs (1 only a bound: at least their own samples/s), "
        "at least 3,612 measured with the step (4 workers); "
        "compute ceiling 6,400 samples/s: which one binds is not known (the loader alone delivers at least that "
        "much, how much more was not measured)."
    )
    rows[0].loader_alone_samples_per_s = 3439.0
    summarize_config(rs.results[0])
    analyze(rs)
    # A row counting duplicate samples (an unsplit IterableDataset) is not ranked, and neither is its probe.
    dup = result(settings(8), trial(0.0, 0.001))
    dup.trials[0].loader_alone_samples_per_s = 20000.0
    dup.warnings.append(Note.of(WarningKind.REPLICATED, REPLICATED_MESSAGE))
    rs.results.append(dup)
    analyze(rs)
    assert "20,000" not in footer.loader_ceiling_line(rs) and "3,612" in footer.loader_ceiling_line(rs)


def test_three_varying_settings_fit_80_columns_with_stacked_headers():
    # Start method x worker threads x workers vary: with every optional column left out, the
    # headers go one word per line so that the verdict and the knee mark stay whole.
    from dataclasses import replace

    from rich.console import Console

    results = []
    for mp in ("spawn", "forkserver", "fork"):
        for wt in (1, 2):
            s = replace(settings(2), mp_context=mp, worker_threads=wt)
            results.append(result(s, trial(0.004 if wt == 1 else 0.2, 0.010)))
    rs = ResultSet(config={"dataset": {"kind": "tensor"}, "compute": {"kind": "sleep", "ms": 10}, "measure": {}},
                   environment={"cuda_available": False, "usable_cpus": 2}, results=results)
    analyze(rs)
    console = Console(width=80, record=True, color_system=None, force_terminal=False)
    render.render_table(rs, console)
    lines = console.export_text().splitlines()
    table = [ln for ln in lines if ln[:1] in "┏┃┡│└"]
    assert table and all(len(ln) <= 80 for ln in table)
    assert all(ln.endswith(("┓", "┃", "┩", "│", "┘")) for ln in table)  # the right border is there
    assert any("◀ knee" in ln for ln in table)
    assert any(ln.split("┃")[2].strip() == "start" for ln in table if ln.startswith("┃"))


def test_a_search_where_every_config_hung_says_nothing_was_ranked():
    from loaderbench.model import ConfigResult

    rows = [ConfigResult(settings=settings(w), status="hung", error="no end within --config-timeout 5s")
            for w in (0, 1, 2)]
    rs = ResultSet(config={}, environment={}, results=rows,
                   sweep=SweepRecord(search=SearchLog(workers_searched=[0, 2], grid_configs=3, stopped=None),
                                     sweep_wall_s=27.0))
    analyze(rs)
    lines = footer.search_lines(rs)
    assert lines == ["Search (model-guided, --search auto): 3 configs tried in 27 s; none finished, so nothing "
                     "was ranked (each row says why)."]


def test_the_search_footer_names_a_repeat_the_model_asked_for():
    rows = [result(settings(w), trial(0.0, 0.012), trial(0.0, 0.012)) for w in (4, 6)]
    rs = ResultSet(config={}, environment={}, results=rows, sweep=SweepRecord(
        search=SearchLog(workers_searched=[0, 8], grid_configs=6, stopped="done", steps=[SearchStep(
            settings(4).key(), "repeat: measured once, far below the model's prediction, which would make it the knee",
            repeat=True)]),
        sweep_wall_s=20.0))
    analyze(rs)
    text = footer.search_lines(rs)[0]
    assert ("repeats where they decide: 4 workers (2 trials); 6 workers (2 trials); 4 workers repeated "
            "because its first trial read far below the model's prediction, which would make it the knee (done).") in text


def test_the_search_footer_says_how_far_it_widened_past_the_cpus_and_what_stopped_it():
    from loaderbench.results import Widening

    rows = [result(settings(w), trial(0.0, 0.012)) for w in (4, 8)]
    rs = ResultSet(config={}, environment={"usable_cpus": 2}, results=rows, sweep=SweepRecord(
        search=SearchLog(workers_searched=[0, 8], grid_configs=9, stopped="done",
                         widened=Widening(8, "memory: 16 workers would need about 3.3 GiB")),
        sweep_wall_s=20.0))
    analyze(rs)
    assert ("worker counts searched: 0-8; widened past the usable CPUs to 8 workers, not further (memory: 16 "
            "workers would need about 3.3 GiB))") in footer.search_lines(rs)[0]
    rs.sweep.search.widened = Widening(8)
    assert "widened past the usable CPUs to 8 workers)" in footer.search_lines(rs)[0]


def test_a_setting_that_differs_only_in_predicted_rows_keeps_its_column():
    # Every measured row runs persistent_workers=off; one predicted row is on: the header may not
    # say "in every row: persistent_workers=off", and the column shows which row is which.
    import json
    from pathlib import Path

    from loaderbench.schema import migrate

    path = Path(__file__).resolve().parents[1] / "docs/data/search-default-h200-3.json"
    data = migrate(json.loads(path.read_text()), path)
    rs = ResultSet.from_dict(data)
    analyze(rs)
    assert columns.constant_settings(rs)["persistent_workers"] == "off"
    with_workers = [p for p in data["sweep"]["predictions"] if p["settings"]["num_workers"] > 0]
    with_workers[0]["settings"]["persistent_workers"] = True
    rs = ResultSet.from_dict(data)
    analyze(rs)
    assert "persistent_workers" not in columns.constant_settings(rs)
    assert "persistent_workers" in [k for k, _ in columns.visible_columns(rs)]
    assert not any("persistent_workers=off" in line for line in render.header_lines(rs))


def test_worker_threads_advice_names_a_picklable_hook_or_none():
    # The knee at 4 workers with 2 threads each: the call names a module-level function and the
    # table prints its definition; with 1 thread (torch's own setting in workers) no hook at all.
    from dataclasses import replace

    from loaderbench.render.findings import finding_sentences

    for threads, hook in ((2, True), (1, False)):
        rs = sample()
        for r in rs.results:
            r.settings = replace(r.settings, worker_threads=threads if r.settings.num_workers else None)
        analyze(rs)
        text = "\n".join(footer.footer_lines(rs))
        call = rs.recommendation.dataloader_call
        assert ("worker_init_fn=set_worker_threads" in call) is hook and "lambda" not in call
        said = " ".join(finding_sentences(rs.recommendation.findings))
        assert ("def set_worker_threads(worker_id): torch.set_num_threads(2)" in text) is hook
        if hook:
            assert "torch.set_num_threads(2) in each worker (worker_init_fn)" in said
        else:
            assert "1 intra-op thread in each worker (torch's own setting there: no worker_init_fn needed)" in said


def test_verbose_names_the_drift_check_of_a_grid_sweep():
    # A grid sweep (no search) whose warm process drifted: the short block says --verbose has the
    # drift check, and --verbose shows it (it used to appear only beside a search).
    from loaderbench.results import Drift

    rs = sample()
    rs.sweep.drift = Drift(settings(4).key(), change=-0.24, warm_samples_per_s=1280.0, fresh_samples_per_s=975.0,
                           fresh_trials_samples_per_s=[970.0, 980.0], warm_trials_samples_per_s=[1280.0, 1279.0],
                           threshold=0.10, confirmed=True, remeasured=[settings(2).key(), settings(4).key()])
    analyze(rs)
    assert footer.footer_lines(rs)[-1].startswith("More with --verbose (or --format json): the drift check,")
    assert ("Drift: the knee (4 workers) measured -24.0% in two fresh processes against the warm measuring process; "
            "measured again, each in a fresh process: 2 and 4 workers.") in footer.footer_lines(rs, verbose=True)


def test_a_warning_of_no_kind_is_shown_by_its_message():
    from loaderbench.model import Note, WarningKind

    rows = [result(settings(2), trial(0.001, 0.004)), result(settings(4), trial(0.0, 0.004))]
    for r in rows:
        r.warn(Note.of(WarningKind.OTHER, "--loader m:L: its iterator does not show the batches ready"))
    rows[0].warn(Note.of(WarningKind.OVERSUBSCRIBED, "could oversubscribe"))
    rs = ResultSet(config={"dataset": {"kind": "tensor"}, "compute": {"kind": "sleep", "ms": 4}, "measure": {}},
                   environment={"cuda_available": False, "usable_cpus": 2}, results=rows,
                   ceilings={16: Ceiling.analytic(16, 0.004)})
    analyze(rs)
    [line] = [x for x in footer.note_lines(rs, str) if x.startswith("Warnings: ")]
    assert "a note" not in line
    assert "--loader m:L: its iterator does not show the batches ready (" in line
    # The preflight's "could oversubscribe" is not repeated for a row whose measured CPU demand
    # stayed short of the usable CPUs; it is for one that reached them, or was not measured.
    assert "could oversubscribe" not in line
    rows[0].summary.cpu_saturated = rows[0].summary.workers_short_of_cpu = True
    [line] = [x for x in footer.note_lines(rs, str) if x.startswith("Warnings: ")]
    assert "could oversubscribe, before measuring (more workers or threads than usable CPUs): " in line
