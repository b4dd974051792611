"""Verdicts, the knee and the recommendation's findings on hand-made trials with analytic answers."""

from __future__ import annotations

import json
import random

import pytest

from loaderbench.analysis import analyze, summarize_config
from loaderbench.analysis.advice import epoch_samples_per_s, recommend
from loaderbench.analysis.knee import find_knee
from loaderbench.analysis.wait import stall_period, trial_wait_parts
from loaderbench.conclusions import Baseline, HeadroomBinds, NotClearedCause, RemainingWait, RemedyKind
from loaderbench.model import Ceiling, ConfigResult, FindingKind, Verdict, WaitPart
from loaderbench.results import ResultSet
from tests.helpers import reason, result, settings, trial, with_ceilings


def pipelined(nw: int, build_s: float, step_s: float, floor_s: float = 0.0005):
    """Steady-state wait for `nw` workers each building a batch in `build_s`, `step_s` compute:
    one batch per build_s/nw; wait = max(floor, build_s/nw - step_s); nw=0: serial build."""
    if nw == 0:
        return trial(build_s, step_s)
    return trial(max(floor_s, build_s / nw - step_s), step_s)


def with_(r: ConfigResult, **fields) -> ConfigResult:
    """Set raw trial fields on every trial of `r` (lists are per measured batch) and re-derive."""
    for t in r.trials:
        for k, v in fields.items():
            setattr(t, k, list(v) if isinstance(v, list) else v)
    summarize_config(r)
    return r


def finding(rec, kind: FindingKind):
    return next((f for f in rec.findings if f.kind is kind), None)


# ---- verdicts ------------------------------------------------------------------------------


def test_summary_of_the_ground_truth():
    # io 2 ms x 16 samples = 32 ms per batch, 12 ms step: 0 workers -> 44 ms steps.
    r0 = result(settings(0), pipelined(0, 0.032, 0.012))
    assert r0.summary.samples_per_s == pytest.approx(16 / 0.044)  # ~364
    assert r0.summary.stall_fraction == pytest.approx(0.032 / 0.044)  # ~0.73
    assert r0.summary.verdict == Verdict.LOADER_BOUND.value
    r4 = result(settings(4), pipelined(4, 0.032, 0.012))
    assert r4.summary.samples_per_s == pytest.approx(16 / 0.0125, rel=0.01)
    assert r4.summary.verdict == Verdict.COMPUTE_BOUND.value


def test_the_wait_is_split_into_measured_parts_in_order():
    # 4 batches of a 2-worker, no-prefetch, pinned config: per batch an H2D copy on the step's
    # path, the sampler's time, a receive floor of 1 ms; batch 2 started an epoch.
    t = trial(0, 0.010, waits=[0.004, 0.0015, 0.050, 0.0008])
    t.h2d_s = [0.002, 0.0005, 0.002, 0.002]
    t.sampler_s = [0.0005, 0.0, 0.010, 0.0]
    t.receive_s = [0.001, 0.001, 0.001]
    t.epoch_start_batches = [2]
    parts = trial_wait_parts(t, settings(2, pin=True))
    # batch 0: h2d 2, sampler 0.5, receive 1, loader 0.5; batch 1: h2d 0.5, receive 1;
    # batch 2: h2d 2, sampler 10, start-up 38 (the rest); batch 3: h2d takes all 0.8.
    assert parts[WaitPart.H2D] == pytest.approx(0.002 + 0.0005 + 0.002 + 0.0008)
    assert parts[WaitPart.SAMPLER] == pytest.approx(0.0005 + 0.010)
    assert parts[WaitPart.EPOCH_START] == pytest.approx(0.038)
    assert parts[WaitPart.RECEIVE] == pytest.approx(0.002)
    assert parts[WaitPart.LOADER] == pytest.approx(0.0005)
    assert sum(parts.values()) == pytest.approx(sum(t.data_wait_s))
    # With the prefetcher and pinned memory the copy is hidden: no H2D part.
    assert trial_wait_parts(t, settings(2, pin=True, pf=True))[WaitPart.H2D] == 0.0


def test_tail_stalls_count_as_loader_bound_with_zero_median_wait():
    # Every 10th batch waits 100 ms, the others 0, 5 ms step.
    r = result(settings(4), trial(0, 0.005, waits=([0.0] * 9 + [0.1]) * 4))
    assert r.summary.data_wait_p50_s == 0.0
    assert r.summary.verdict == Verdict.LOADER_BOUND.value


def test_a_stall_made_of_the_measured_receive_floor_is_not_loader_bound():
    # Measured on a 2-core machine: 4 and 8 workers wait ~1.5 ms per batch before a 12 ms
    # step (stall 11%), and receiving an already-built batch costs ~1.4 ms: not a late loader.
    rs = [
        result(settings(0), trial(0.032, 0.012)),
        with_(result(settings(2), trial(0.006, 0.012)), receive_s=[0.0014] * 4),
        with_(result(settings(4), trial(0.0016, 0.012)), receive_s=[0.0014] * 4),
        with_(result(settings(8), trial(0.0015, 0.012)), receive_s=[0.0014] * 4),
    ]
    rec = recommend(rs)
    assert rec.settings.num_workers == 4
    assert [r.summary.verdict for r in rs] == ["loader-bound", "loader-bound", "receive floor", "receive floor"]
    text = reason(rec)
    assert "taking a batch that was already built costs 1.4 ms" in text and "1.6 ms median wait" in text
    # The evidence: the row with the most workers still waits as long (1.5 ms of a 13.5-ms step).
    assert ("more workers cannot remove it: w8-nopin-nopf-f2-once-b16 still waited 1.5 ms per batch (median; stall 11.1%)"
            in text
            and "no measured setting clears" not in text)
    assert rs[2].summary.workers_needed is None  # the receive floor is nothing more workers fix


def test_a_receive_floor_beside_more_workers_that_waited_less_says_so():
    # A 25-ms step: 4 workers wait 1.6 ms (stall 6.0%), 1.4 ms of it receiving; 8 workers wait
    # 0.5 ms, under half that receive, and run 26.6 / 25.5 = 4.3% faster: within the 5% tolerance,
    # the knee stays at 4, and the sentence gives the 8-worker row's wait rather than saying it
    # waits as long.
    rs = [
        result(settings(0), trial(0.032, 0.025)),
        with_(result(settings(2), trial(0.006, 0.025)), receive_s=[0.0014] * 4),
        with_(result(settings(4), trial(0.0016, 0.025)), receive_s=[0.0014] * 4),
        with_(result(settings(8), trial(0.0005, 0.025)), receive_s=[0.0014] * 4),
    ]
    rec = recommend(rs)
    assert rec.settings.num_workers == 4
    text = reason(rec)
    assert ("more workers do not remove the receive, though w8-nopin-nopf-f2-once-b16 waited less: 0.5 ms per batch "
            "(median; stall 2.0%)") in text and "cannot remove it" not in text
    # 8 workers with the same 0.5-ms median wait but every fifth batch waiting 20 ms: a stall of
    # (4 x 0.5 + 20) / 5 = 4.4 ms of a 29.4-ms step, 15.0%, over the 4 workers' 6.0%: it did not wait less.
    rs[3] = with_(result(settings(8), trial(0.0, 0.025, waits=[0.0005] * 16 + [0.020] * 4)), receive_s=[0.0014] * 4)
    rec = recommend(rs)
    assert rec.settings.num_workers == 4 and rs[3].summary.stall_fraction == pytest.approx(0.0044 / 0.0294, rel=1e-3)
    text = reason(rec)
    assert ("more workers cannot remove it: w8-nopin-nopf-f2-once-b16 still waited 0.5 ms per batch (median; stall "
            "15.0%)") in text and "waited less" not in text


def test_a_receive_floor_with_no_row_of_more_workers_is_a_labelled_prediction():
    # As above without the 8-worker row: nothing measured shows more workers waiting as long.
    rs = [
        result(settings(0), trial(0.032, 0.012)),
        with_(result(settings(2), trial(0.006, 0.012)), receive_s=[0.0014] * 4),
        with_(result(settings(4), trial(0.0016, 0.012)), receive_s=[0.0014] * 4),
    ]
    rec = recommend(rs)
    assert rec.settings.num_workers == 4 and rs[2].summary.verdict == "receive floor"
    text = reason(rec)
    assert ("taking a batch is the main process's work, so more workers should not shorten it (a prediction: no "
            "config with more workers was measured)") in text and "cannot remove it" not in text


def _receive_beside_epoch_starts(start_s: float, loader_s: float) -> list[float]:
    """20 waits of a 5-ms step: 18 of 2 ms of receive (the probe's) + `loader_s` of batches
    not built in time, and batches 9 and 19 starting an epoch, waiting `start_s` each."""
    waits = [0.002 + loader_s] * 20
    waits[9] = waits[19] = start_s
    return waits


def test_a_receive_under_half_the_wait_names_no_floor():
    # Per 20 batches: receive 18 x 2 = 36 ms, loader 18 x 1.5 = 27 ms, epoch start 2 x 12 = 24 ms.
    # The receive is the largest part but 36 / 87 = 41% of the wait: more of it is parts settings
    # act on, so the row is loader-bound (27 > 24), not a floor no num_workers removes.
    rs = [
        result(settings(0), trial(0.020, 0.005)),
        with_(result(settings(4), trial(0, 0.005, waits=_receive_beside_epoch_starts(0.012, 0.0015))),
              receive_s=[0.002] * 4, epoch_start_batches=[9, 19]),
    ]
    parts = rs[1].summary.wait_parts_s
    assert (parts["receive"], parts["loader"], parts["epoch-start"]) == pytest.approx((0.0018, 0.00135, 0.0012))
    assert rs[1].summary.verdict == Verdict.LOADER_BOUND.value
    rec = recommend(rs)
    text = reason(rec)
    assert "receive" not in text and "cannot remove" not in text
    assert "The fastest config has the most workers of those measured: try more workers" in text
    # A receive of half the wait or more is the floor: 18 x 2 = 36 ms against 18 x 0.5 + 2 x 8 = 25.
    r = with_(result(settings(4), trial(0, 0.005, waits=_receive_beside_epoch_starts(0.008, 0.0005))),
              receive_s=[0.002] * 4, epoch_start_batches=[9, 19])
    assert r.summary.verdict == Verdict.RECEIVE_FLOOR.value


def test_a_largest_part_under_half_the_wait_is_named_as_the_largest():
    # Epoch starts of 20 ms (2 x 20 = 40 ms) beside 36 ms of receive and 18 x 1 = 18 ms of loader:
    # the start is the largest part, 40 / 94 = 43% of the wait, 2.0 of 4.7 ms per batch.
    rs = [
        result(settings(0), trial(0.020, 0.005)),
        with_(result(settings(4), trial(0, 0.005, waits=_receive_beside_epoch_starts(0.020, 0.001))),
              receive_s=[0.002] * 4, epoch_start_batches=[9, 19]),
    ]
    assert rs[1].summary.verdict == Verdict.EPOCH_START_BOUND.value
    text = reason(recommend(rs))
    assert ("comes most from workers starting again at each epoch start: 2.0 of its 4.7 ms mean wait per batch"
            in text and "is mostly" not in text)


def test_a_long_wait_with_a_small_receive_floor_stays_loader_bound():
    # Decode-bound on 2 CPUs: 28 ms of waiting per 100 ms step, of which 1.5 ms is receiving.
    r = with_(result(settings(2), trial(0.028, 0.100)), receive_s=[0.0015] * 4)
    assert r.summary.wait_parts_s["receive"] == pytest.approx(0.0015)
    assert r.summary.wait_parts_s["loader"] == pytest.approx(0.0265)
    assert r.summary.verdict == Verdict.LOADER_BOUND.value
    # 2 workers x 128 ms mean step per batch / (100 ms compute + 1.5 ms receive) -> 3 workers.
    assert r.summary.workers_needed == 3


def test_many_small_tensors_are_a_receive_floor_whatever_the_tail_says():
    # Detection batches of 16 images + 16 target dicts of 7 tensors cross as 113 tensors:
    # receiving one costs 33 ms; the 20 ms step then waits ~33 ms per batch, with a few longer
    # waits (workers and the unpickling main process share 2 cores). More workers cannot help.
    waits = [0.033] * 18 + [0.045, 0.060]
    r = with_(result(settings(4), trial(0, 0.020, waits=waits)), receive_s=[0.033] * 8,
              tensor_leaves=113, batch_bytes=16 * 3 * 96 * 96 * 4 + 2000)
    assert r.summary.verdict == Verdict.RECEIVE_FLOOR.value
    assert r.summary.workers_needed is None
    rec = recommend([with_(result(settings(2), trial(0, 0.020, waits=waits)), receive_s=[0.033] * 8,
                           tensor_leaves=113), r])
    text = reason(rec)
    assert "113 tensors" in text and "pack the batch's many small tensors into a few" in text
    assert "try more workers" not in text and "Estimate" not in text


def test_a_pinned_copy_on_the_steps_stream_is_named_with_the_prefetchers_measured_gain():
    # Batches of 128 x 3x224x224 float32 (77 MB), 6 workers, pinned, no prefetcher, a 30 ms step:
    # the median wait (1.4 ms) is the H2D copy (0% hidden); the receive probe reads 0.2 ms. The
    # prefetcher variant hid it and reached 95% of the compute ceiling against 91%.
    # The wait: 1.4 ms (the copy) in 16 of 20 batches, 8 ms in 4 (workers late): stall 8.3%.
    ceiling = 128 / 0.030
    waits = ([0.0014] * 4 + [0.008]) * 4
    knee = with_(result(settings(6, pin=True, bs=128), trial(0, 0.030, waits=waits, bs=128)),
                 h2d_s=[0.0014] * 20, receive_s=[0.0002] * 8, h2d_hidden_fraction=0.0)
    assert knee.summary.wait_parts_s["h2d"] == pytest.approx(0.0014)
    assert knee.summary.wait_parts_s["loader"] == pytest.approx(4 * (0.008 - 0.0016) / 20)
    pf = result(settings(6, pin=True, pf=True, bs=128), trial(0.0, 128 / (0.95 * ceiling), bs=128))
    assert knee.summary.verdict == Verdict.H2D_NOT_HIDDEN.value
    rec = recommend(with_ceilings([knee, pf], {128: ceiling}))
    assert rec.settings == knee.settings  # within the 5% tolerance, and cheaper
    wait = finding(rec, FindingKind.REMAINING_WAIT)
    assert wait.part is WaitPart.H2D
    [remedy] = wait.remedies
    assert remedy.remedy is RemedyKind.PREFETCH and remedy.measured
    knee_share = knee.summary.samples_per_s / ceiling  # 30 / 32.72 ms = 91.7%
    assert remedy.ceiling_share == pytest.approx(0.95) and remedy.knee_ceiling_share == pytest.approx(knee_share)
    text = reason(rec)
    assert "the CUDA-stream prefetcher hides the copy behind the step: measured w6-pin-pf-f2-once-b128" in text
    assert "95% of the compute ceiling vs 92%" in text


def test_prefetch_without_pinning_names_the_pageable_copy():
    # Measured on the H200: 14 workers, prefetch on, pin off: 7.4 ms of each 62 ms step is the
    # prefetcher's next() doing a pageable 38 MB copy.
    r = with_(result(settings(14, pf=True, bs=256), trial(0.0074, 0.055, bs=256)),
              h2d_s=[0.0072] * 20, receive_s=[0.0002] * 8)
    assert r.summary.verdict == Verdict.H2D_PAGEABLE.value
    r2 = with_(result(settings(14, pin=True, pf=True, bs=256), trial(0.0074, 0.055, bs=256)),
               h2d_s=[0.0072] * 20, receive_s=[0.0072] * 8)
    assert r2.summary.verdict == Verdict.RECEIVE_FLOOR.value  # pinned: the copy is hidden
    rs = ResultSet(config={"compute": {"kind": "none"}}, environment={}, results=[r])
    analyze(rs)
    assert r.summary.verdict == Verdict.LOADER_ALONE.value


def test_epoch_start_gaps_are_start_up_not_a_receive_floor():
    # A dataset of 40 million cheap items, 50-batch epochs, 2 workers: steady batches wait only
    # the 1 ms receive floor, but each epoch start waits 0.4 s (workers starting): the median
    # says "receive floor", the whole distribution says start-up.
    waits = ([0.4] + [0.001] * 49) * 2
    non = with_(result(settings(2), trial(0, 0.008, waits=waits)), receive_s=[0.001] * 4,
                epoch_start_batches=[0, 50], epoch_gap_s=[0.4, 0.4])
    assert non.summary.data_wait_p50_s == pytest.approx(0.001)
    assert non.summary.verdict == Verdict.EPOCH_START_BOUND.value
    # The persistent row, measured: its epoch starts wait 10 ms.
    waits_p = ([0.010] + [0.001] * 49) * 2
    per = with_(result(settings(2, persistent=True), trial(0, 0.008, waits=waits_p)), receive_s=[0.001] * 4,
                epoch_start_batches=[0, 50], epoch_gap_s=[0.01, 0.01])
    rec = recommend([non, per], epoch_batches=50)
    assert rec.settings.persistent_workers is True  # measured faster by far more than 5%
    assert "persistent_workers=True" in rec.dataloader_call
    # The headline names the swept setting that the pick turns on, not only workers and pin.
    assert rec.findings[0].swept == ["persistent_workers"]
    assert reason(rec).startswith("w2-nopin-nopf-f2-persist-b16: ")


def test_persistent_workers_are_not_advised_when_their_row_shows_the_same_gaps():
    # The epoch-start gap is the sampler materialising a permutation (3 s), which persistent
    # workers do not remove: the persistent row measured the same gaps.
    waits = ([3.0] + [0.001] * 49) * 2
    rows = []
    for persistent in (False, True):
        rows.append(with_(result(settings(2, persistent=persistent), trial(0, 0.008, waits=waits)),
                          receive_s=[0.001] * 4, epoch_start_batches=[0, 50], epoch_gap_s=[3.0, 3.0],
                          sampler_s=[2.9] + [0.0] * 49 + [2.9] + [0.0] * 49))
    assert rows[0].summary.verdict == Verdict.SAMPLER_BOUND.value
    rec = recommend(rows, epoch_batches=50)
    assert rec.settings.persistent_workers is False  # equal throughput: the cheaper one
    text = reason(rec)
    assert "the sampler drawing indices in the main process" in text and "draw indices lazily" in text
    assert "use persistent_workers=True" not in text


def test_predicted_start_up_share_quotes_a_measured_persistent_row_only_when_its_gaps_are_shorter():
    # Long epochs (the window spans none): start-up is predicted from the first batch.
    non = with_(result(settings(4), trial(0.0005, 0.010, first_s=3.0)), epoch_gap_s=[3.0])
    per_same = with_(result(settings(4, persistent=True), trial(0.0005, 0.010, first_s=3.0)), epoch_gap_s=[2.9])
    rec = recommend([non, per_same], epoch_batches=20)
    start = finding(rec, FindingKind.STARTUP)
    assert start.predicted and start.measured and not start.advised
    assert "does not remove it here" in reason(rec)
    # Its epoch gaps measured 50 ms: the persistent config costs less start-up at equal
    # throughput, so it is the knee itself (and the DataLoader line says so).
    per_short = with_(result(settings(4, persistent=True), trial(0.0005, 0.010, first_s=3.0)), epoch_gap_s=[0.05])
    rec2 = recommend([non, per_short], epoch_batches=20)
    assert rec2.settings.persistent_workers and "persistent_workers=True" in rec2.dataloader_call


def test_persistent_workers_measured_slower_are_not_advised():
    # 4 workers, 3 s first batch, 20-batch epochs: start-up is 3 / (3 + 0.21) = 93% of an epoch
    # (predicted). The persistent row measured 10% slower (beyond the 5% tolerance): its own
    # measurement says no, so the sentence says so and never "use persistent_workers=True".
    non = result(settings(4), trial(0.0005, 0.010, first_s=3.0))
    slow = result(settings(4, persistent=True), trial(0.0005, 0.0117, first_s=3.0))
    assert slow.summary.samples_per_s < 0.95 * non.summary.samples_per_s
    rec = recommend([non, slow], epoch_batches=20)
    start = finding(rec, FindingKind.STARTUP)
    assert start.slower and not start.advised
    text = reason(rec)
    assert "persistent_workers=True measured slower here" in text and "use persistent_workers=True" not in text


def test_the_samplers_draw_in_the_first_batch_is_not_worker_start_up():
    # The first batch took 3.0 s, 2.9 s of it the sampler materialising an epoch's permutation
    # in the main process: workers start in 0.1 s (0.1 / 3.21 = 3% of a 20-batch epoch, under
    # the 5% that is worth a finding), and persistent workers would not remove the draw.
    r4 = with_(result(settings(4), trial(0.0005, 0.010, first_s=3.0)), first_batch_sampler_s=2.9)
    assert finding(recommend([r4], epoch_batches=20), FindingKind.STARTUP) is None
    # Per epoch, a persistent config still pays the draw: 320 / (2.9 + 20 x 10.5 ms).
    per = with_(result(settings(4, persistent=True), trial(0.0005, 0.010, first_s=3.0)), first_batch_sampler_s=2.9)
    assert epoch_samples_per_s(per, 20) == pytest.approx(320 / (2.9 + 0.21))


def test_short_epochs_predict_start_up_and_never_change_the_measured_settings():
    # 16 spawned workers take 3 s to deliver the first batch; 0 workers start at once but stall.
    r0 = result(settings(0), trial(0.030, 0.010, first_s=0.05))  # 16/0.040 = 400 samples/s
    r4 = result(settings(4), trial(0.0005, 0.010, first_s=3.0))  # ~1524 samples/s steady
    steady = recommend([r0, r4])
    assert steady.settings.num_workers == 4 and finding(steady, FindingKind.STARTUP) is None
    short = recommend([r0, r4], epoch_batches=20)
    # The DataLoader line is the measured config: persistent_workers was not measured.
    assert short.settings == r4.settings and "persistent_workers=False" in short.dataloader_call
    text = reason(short)
    assert "Worker start-up (3.00 s of the 3.00 s first batch)" in text
    assert "not measured: add --persistent-workers off,on" in text
    # per epoch: w0 starts no worker: 320 / 0.8 = 400/s; w4 = 320 / (3.0 + 0.21) = 100/s
    assert epoch_samples_per_s(r0, 20) == pytest.approx(320 / 0.8)
    assert "predicted faster per epoch" not in text  # persistent workers would pay it once
    long = recommend([r0, r4], epoch_batches=100_000)
    assert finding(long, FindingKind.STARTUP) is None and "per epoch" not in reason(long)


# ---- the knee ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build_s, step_s, expected",
    [
        (0.032, 0.012, 4),  # 32/12 = 2.7 -> 3 not in grid -> 4
        (0.100, 0.050, 2),  # exactly 2 workers keep up
        (0.160, 0.005, 32),  # a sawtooth: 160 ms per batch, 5 ms step -> 32 workers
        (0.010, 0.050, 1),  # fast loader: one worker already hides it
    ],
)
def test_knee_is_the_analytic_worker_count(build_s, step_s, expected):
    grid = [0, 1, 2, 4, 8, 16, 32, 40]
    results = [result(settings(nw), pipelined(nw, build_s, step_s)) for nw in grid]
    knee = find_knee(results)
    assert knee is not None and knee.settings.num_workers == expected


def test_knee_prefers_cheaper_settings_at_equal_throughput_in_any_listed_order():
    rows = [
        result(settings(4, pin=True, pf=True), trial(0.0005, 0.012)),
        result(settings(4), trial(0.0006, 0.012)),
        result(settings(4, pin=True), trial(0.0005, 0.012)),
        result(settings(4, factor=4), trial(0.0005, 0.012)),
    ]
    for seed in range(6):
        random.Random(seed).shuffle(rows)
        knee = find_knee(rows)
        assert knee is not None and knee.settings == settings(4)


def test_knee_is_the_config_measured_cheapest_in_memory_start_up_and_cpu():
    from dataclasses import replace

    # Equal throughput: spawn holds a copy of the dataset in every worker (PSS), a persistent
    # loader with long warm-up pays more start-up, two intra-op threads per worker burn CPU.
    def row(s, pss_mib, first_s, cpu_pct):
        r = result(s, trial(0.0005, 0.012, first_s=first_s))
        r.summary.memory_pss_bytes, r.summary.cpu_util_pct = int(pss_mib * 2**20), cpu_pct
        return r

    fork = row(settings(4), 900, 0.3, 180)
    spawn = row(replace(settings(4), mp_context="spawn"), 2600, 2.0, 182)
    threads = row(replace(settings(4), worker_threads=2), 920, 0.3, 260)
    assert find_knee([spawn, threads, fork]) is fork
    # Memory within 10% and start-up equal: the CPU decides.
    assert find_knee([threads, row(replace(settings(4), worker_threads=1), 910, 0.3, 182)]).settings.worker_threads == 1
    # Without measured costs: the structural order (fork before spawn), never the list order.
    a, b = result(replace(settings(4), mp_context="spawn"), trial(0.0005, 0.012)), result(settings(4), trial(0.0005, 0.012))
    assert find_knee([a, b]) is b and find_knee([b, a]) is b


def test_knee_uses_noise_when_repeats_show_it_but_never_for_a_clearly_faster_best():
    # best: 3 repeats 1000, 1150, 1300 (median 1150); a cheaper config at 1000, 1080, 1200: 6%
    # below the best's median (outside 5%) but its fastest repeat reaches the best's median.
    best = result(settings(8), *(trial(0, 16 / r) for r in (1000.0, 1150.0, 1300.0)))
    cheap = result(settings(2), *(trial(0, 16 / r) for r in (1000.0, 1080.0, 1200.0)))
    assert find_knee([best, cheap], tolerance=0.05) is cheap
    # A cheaper config 17% below (900, 950, 1050), even though it overlaps the best's slow
    # repeat: the best is clearly faster, so it is not "equal".
    slow = result(settings(2), *(trial(0, 16 / r) for r in (900.0, 950.0, 1050.0)))
    assert find_knee([best, slow], tolerance=0.05) is best
    # A cold first repeat of the best (129 vs 292) must not make a 14% slower config equal.
    warm_best = result(settings(2), *(trial(0, 16 / r) for r in (129.0, 292.0, 295.0)))
    one = result(settings(1), *(trial(0, 16 / r) for r in (250.0, 253.0, 256.0)))
    assert find_knee([warm_best, one], tolerance=0.05) is warm_best


def test_failed_configs_are_never_the_knee():
    rs = [result(settings(0), status="failed", error="boom"), result(settings(2), trial(0.01, 0.01))]
    assert find_knee(rs).settings.num_workers == 2
    assert find_knee([rs[0]]) is None
    rec = recommend([rs[0]])
    assert rec.settings is None and "no config" in reason(rec)


# ---- the recommendation ----------------------------------------------------------------------


def test_recommendation_says_when_nothing_clears_the_bottleneck():
    rs = [result(settings(nw), pipelined(nw, 0.4, 0.01)) for nw in (0, 1, 2)]
    for r in rs:
        r.summary.cpu_util_pct = 195.0
    rec = recommend(rs, usable_cpus=2)
    assert rec.settings.num_workers == 2
    assert "no measured setting clears the loader bottleneck" in reason(rec)
    assert "CPU" in reason(rec) and "2 usable CPUs" in reason(rec)
    assert rec.dataloader_call == (
        "DataLoader(dataset, batch_size=16, num_workers=2, pin_memory=False, "
        "prefetch_factor=2, persistent_workers=False)"
    )


def test_best_config_at_the_grid_edge_suggests_more_workers_as_a_prediction():
    rs = [result(settings(2), trial(0.006, 0.012)), result(settings(8), trial(0.003, 0.012))]
    text = reason(recommend(rs))
    assert "try more workers" in text
    # 8 workers x 15 ms per batch / 12 ms compute = 10 workers.
    assert "Estimate (a prediction): about 10 workers" in text


def test_more_workers_that_failed_are_named_instead_of_advising_more_workers():
    # 2 workers measured loader-bound; 8 workers were tried and failed: advising "try more
    # workers, about 10" would send the user back to a config that fails.
    rs = [result(settings(2), trial(0.006, 0.012)),
          result(settings(8), status="failed", error="OSError: [Errno 5] read error on worker")]
    text = reason(recommend(rs))
    assert "try more workers" not in text and "Estimate" not in text
    assert ("The configs with more workers did not run: w8-nopin-nopf-f2-once-b16 failed (OSError: [Errno 5] read "
            "error on worker). Fix what stopped them (their rows say why); more workers may then help.") in text


def test_sawtooth_stalls_are_periodic_and_predict_the_workers_needed():
    # 160 ms to build a batch of 32, 5 ms step, 10 workers: 10 batches arrive together, then the
    # loop waits for the next round: (160 - 10 x 5) = 110 ms every 10th batch.
    waits = ([0.110] + [0.0] * 9) * 6
    r = result(settings(10, bs=32), trial(0, 0.005, waits=waits, bs=32))
    assert stall_period(r.trials[0].data_wait_s, r.trials[0].step_s) == 10
    # The tail: 6 spikes in 60 batches. p90 interpolates at position 0.9 x 59 = 53.1, between the
    # last zero (53) and the first spike (54): 0.1 x 110 ms; p99 and max are the spike.
    assert r.summary.data_wait_p90_s == pytest.approx(0.011)
    assert r.summary.data_wait_p99_s == pytest.approx(0.110)
    assert r.summary.stall_period_batches == 10
    assert r.summary.workers_needed == 32  # 10 x 16 ms mean step / 5 ms = 32


def test_no_period_in_steady_random_or_irregular_waits():
    assert stall_period([0.001] * 50, [0.01] * 50) is None
    rng = random.Random(1)
    waits = [0.02 if rng.random() < 0.2 else 0.0 for _ in range(80)]  # stalls at random
    assert stall_period(waits, [0.01] * 80) is None
    # A round of 4 with a second, smaller stall right after the first (seen on 2 cores).
    assert stall_period(([0.025, 0.006, 0.0, 0.0]) * 20, [0.004] * 80) == 4
    # An uneven split across 2 workers: alternating stalls while both have items, then none.
    uneven = [0.02, 0.0] * 4 + [0.0] * 40
    assert stall_period(uneven, [0.01] * 48) is None


def test_a_step_slowed_by_cpu_contention_names_the_cpu():
    # 16 workers keep the step fed (stall 4%) but the process tree uses all 16 CPUs and the step
    # takes 60.8 ms instead of 54.5 ms alone.
    r = result(settings(16, pin=True, bs=256), trial(0.0027, 0.0608, bs=256))
    r.summary.cpu_util_pct = 1600.0
    text = reason(recommend(with_ceilings([r], {256: 256 / 0.0545}), usable_cpus=16))
    assert "60.8 ms per batch on average (median 60.8 ms) vs 54.5 ms alone" in text
    assert "16.0 of 16 usable CPUs" in text and "binding resource is the CPU" in text
    fed = result(settings(14, pin=True, bs=256), trial(0.0007, 0.0546, bs=256))
    assert "Past the knee the step itself binds: the knee runs at 99%" in reason(
        recommend(with_ceilings([fed], {256: 256 / 0.0545}), usable_cpus=16))


def test_a_grid_that_ends_while_the_loader_binds_does_not_say_more_workers_buy_nothing():
    # Ctrl-C after 0 and 1 workers of a loader needing ~30: 429 vs 435 samples/s, stall 97%.
    rs = ResultSet(config={}, environment={}, results=[
        result(settings(0), trial(0.0363, 0.001)),  # 16 / 37.3 ms = 429 samples/s
        result(settings(1), trial(0.0358, 0.001)),  # 16 / 36.8 ms = 435 samples/s
    ])
    analyze(rs)
    text = reason(rs.recommendation)
    assert rs.recommendation.settings.num_workers == 0  # within 5% of the best
    assert "within 5% or noise of it: 1 worker instead of 0 buys nothing measurable; the loader still binds." in text
    assert "buy nothing more." not in text
    assert "The fastest config has the most workers of those measured: try more workers." in text


def test_the_json_carries_what_the_table_concludes():
    rs = ResultSet(config={"compute": {"kind": "sleep", "ms": 12}}, environment={}, results=[
        result(settings(0), pipelined(0, 0.032, 0.012)),
        result(settings(4), pipelined(4, 0.032, 0.012)),
    ], ceilings={16: Ceiling.analytic(16, 0.012)})
    analyze(rs)
    d = ResultSet.from_dict(json.loads(json.dumps(rs.to_dict())))
    assert d.analysis.headroom.binds is HeadroomBinds.COMPUTE_CEILING and d.analysis.headroom.which is Baseline.FIRST
    kinds = [f.kind for f in d.recommendation.findings]
    assert kinds[:2] == [FindingKind.KNEE, FindingKind.ALSO_FASTEST] and FindingKind.STEP_BINDS in kinds
    assert d.analysis == rs.analysis and [r.summary for r in d.results] == [r.summary for r in rs.results]


def _sawtooth(seed: int, period: int, n: int = 100, shift_p: float = 0.03) -> list[float]:
    """Waits of a sawtooth with jitter (+-4 ms around 2 ms, 20 ms stalls) whose phase slips by one
    batch now and then, as on a busy 2-core machine."""
    rng = random.Random(seed)
    out, phase = [], 0
    for i in range(n):
        if rng.random() < shift_p:
            phase = (phase + 1) % period
        base = 0.020 if (i + phase) % period == 0 else 0.002
        out.append(max(0.0, base + rng.uniform(-0.004, 0.004)))
    return out


def test_a_noisy_sawtooth_is_found_and_random_stalls_are_not():
    for period in (2, 4):
        assert sum(stall_period(_sawtooth(s, period), [0.004] * 100) == period for s in range(30)) >= 28
    rng = random.Random(7)
    noise = [[0.02 if rng.random() < 0.4 else 0.002 + rng.uniform(0, 0.004) for _ in range(100)] for _ in range(30)]
    assert sum(stall_period(w, [0.004] * 100) is not None for w in noise) <= 2


def test_otsu_splits_stalls_from_the_receive_floor():
    from loaderbench.analysis.wait import split_threshold

    threshold, low, high = split_threshold([0.001, 0.0012, 0.0011, 0.020, 0.022, 0.0009])
    assert 0.0012 < threshold < 0.020
    assert low == pytest.approx((0.001 + 0.0012 + 0.0011 + 0.0009) / 4) and high == pytest.approx(0.021)
    assert split_threshold([0.001] * 5) is None


def test_a_setting_that_multiplies_memory_per_worker_is_named_with_its_measured_mib():
    from dataclasses import replace

    from loaderbench.render import footer

    def row(s, pss_mib):
        r = result(s, trial(0.0005, 0.012))
        for t in r.trials:
            t.memory_pss_bytes = int(pss_mib * 2**20)
        summarize_config(r)
        return r

    # 0 workers: 300 MiB. 4 forked workers: 900 MiB, (900 - 300) / 4 = 150 MiB each; 4 spawned
    # workers each import torch and hold a copy of the dataset: (2600 - 300) / 4 = 575 MiB each.
    rs = ResultSet(config={}, environment={}, results=[
        row(settings(0), 300), row(settings(4), 900), row(replace(settings(4), mp_context="spawn"), 2600)])
    analyze(rs)
    [f] = rs.analysis.notes
    assert f.settings.key() == "w4-nopin-nopf-f2-once-b16-spawn"
    assert f.mib_per_worker == pytest.approx(575) and f.ref_mib_per_worker == pytest.approx(150)
    assert not any(x.startswith("Memory per worker") for x in footer.footer_lines(rs))  # --verbose says it
    line = next(x for x in footer.footer_lines(rs, verbose=True) if x.startswith("Memory per worker"))
    # The rows' PSS as the column shows it: 2,600 vs 900 MiB, +189%.
    assert line.startswith("Memory per worker (4 workers, spawn start method): 575 MiB (PSS) vs 150 MiB with "
                           "4 workers, default start method (spawn start method instead of default; the rows' PSS "
                           "2,600 vs 900 MiB (+189%)): spawn and")


@pytest.mark.parametrize("compute, held, want_ceiling", [
    # sleep:20 costs 20 ms per batch whatever it holds: batch_size 8, but each batch held 32
    # samples (items of 4 samples each) -> 32 / 0.020 = 1,600/s, not 8 / 0.020 = 400.
    ({"kind": "sleep", "ms": 20.0}, 32, 1600.0),
    # A batch sampler that buckets into 8, 16 and 32: 18.5 samples per batch held on average.
    ({"kind": "sleep", "ms": 20.0}, 18.5, 925.0),
    # A model step costs per sample: its measured samples/s stands whatever the batches held.
    ({"kind": "model", "model": "resnet50"}, 32, 400.0),
])
def test_the_compute_ceiling_is_taken_at_the_samples_batches_held(compute, held, want_ceiling):
    # 0 workers, 10 ms to build a batch, 20 ms step: 30 ms per batch of `held` samples.
    t = trial(0.010, 0.020, n=20)
    t.samples = int(held * 20)
    r = ConfigResult(settings=settings(0, bs=8), status="ok", trials=[t])
    rs = ResultSet(config={"dataset": {"kind": "tensor"}, "compute": compute, "measure": {}}, environment={},
                   results=[r], ceilings={8: Ceiling(8, 400.0, 0.020)})
    analyze(rs)
    m = rs.results[0].summary
    assert m.samples_per_s == pytest.approx(held / 0.030)
    assert m.compute_ceiling_samples_per_s == pytest.approx(want_ceiling)
    [shown] = rs.analysis.compute_ceilings
    assert shown.samples_per_s == pytest.approx(want_ceiling) and shown.samples_per_batch == pytest.approx(held)
    # Never above 100% of its own ceiling with a per-batch step (the step alone is 2/3 of the batch time).
    if compute["kind"] == "sleep":
        assert m.samples_per_s / m.compute_ceiling_samples_per_s == pytest.approx(2 / 3)


def test_the_recommended_call_carries_the_users_sampler_and_collate():
    from loaderbench.analysis.advice import dataloader_call

    s = settings(4, pin=True, bs=32)
    assert dataloader_call(s) == ("DataLoader(dataset, batch_size=32, num_workers=4, pin_memory=True, "
                                  "prefetch_factor=2, persistent_workers=False)")
    # A batch sampler replaces batch_size: the DataLoader refuses both.
    assert dataloader_call(s, {"sampler": "mydata:buckets", "sampler_kind": "batch_sampler"}) == (
        "DataLoader(dataset, batch_sampler=buckets(dataset, batch_size=32), num_workers=4, pin_memory=True, "
        "prefetch_factor=2, persistent_workers=False)")
    assert dataloader_call(s, {"sampler": "mydata:weighted", "sampler_kind": "sampler",
                               "collate_fn": "mydata:pad_collate"}) == (
        "DataLoader(dataset, batch_size=32, sampler=weighted(dataset), num_workers=4, pin_memory=True, "
        "prefetch_factor=2, persistent_workers=False, collate_fn=pad_collate)")
    # The worker threads the sweep set are set by the call too (none without workers).
    from dataclasses import replace

    # A module-level function (spawn and forkserver workers unpickle it; a lambda fails there),
    # none for torch's own 1 thread per worker, none without workers.
    assert dataloader_call(replace(s, worker_threads=2)) == (
        "DataLoader(dataset, batch_size=32, num_workers=4, pin_memory=True, prefetch_factor=2, "
        "persistent_workers=False, worker_init_fn=set_worker_threads)")
    assert "worker_init_fn" not in dataloader_call(replace(s, worker_threads=1))
    assert "worker_init_fn" not in dataloader_call(replace(settings(0), worker_threads=2))


def test_a_wait_that_building_batches_does_not_explain_is_not_sent_to_more_workers():
    # 0 workers, 8 samples per batch, 5 ms step (1,600/s): the loader alone builds 64,000
    # samples/s, so building explains a stall of 1,600 / 65,600 = 2.4% at most; the loop
    # stalls 20% (waits of 0.5 ms, and 4.7 ms every few batches). More workers are not the cure.
    waits = [0.0005] * 16 + [0.0047] * 4 + [0.0005] * 16 + [0.0047] * 4
    r = with_(result(settings(0, bs=8), trial(0, 0.005, waits=[w + 0.0002 for w in waits], bs=8)),
              loader_alone_samples_per_s=64_000.0)
    with_ceilings([r], {8: 1600.0})
    assert r.summary.verdict == Verdict.LOADER_BOUND.value and r.summary.stall_fraction > 0.1
    rec = recommend([r])
    nc = finding(rec, FindingKind.NOT_CLEARED)
    assert nc.cause is NotClearedCause.NOT_BUILD_RATE
    assert nc.build_rate.explained_stall == pytest.approx(1600 / 65_600) and nc.build_rate.in_tail
    text = reason(rec)
    assert "accounts for a stall of 2.4% at most; more workers are not the cure" in text
    assert "The wait sits in its tail (0.7 ms median, 4.9 ms p95)" in text
    assert "try more workers" not in text
    # No "floor not worth chasing" at a stall of 10% or more.
    assert finding(rec, FindingKind.LOWEST_STALL) is None
    # The same stall spread evenly over every batch (1.15 ms each): steady, not a tail.
    even = with_(result(settings(0, bs=8), trial(0, 0.005, waits=[0.00115] * 40, bs=8)),
                 loader_alone_samples_per_s=64_000.0)
    with_ceilings([even], {8: 1600.0})
    assert "The wait is steady, a fixed cost per batch (1.1 ms median, 1.1 ms p95)" in reason(recommend([even]))


def test_a_loader_bound_knee_is_named_even_when_the_best_config_is_bound_by_receiving():
    # The best (within 5% of the knee) is a receive floor; the knee, with the most workers
    # measured, is loader-bound at 37% stall: the grid's edge, not "a floor not worth chasing".
    knee = with_(result(settings(2), trial(0.0059, 0.010)), receive_s=[0.0015] * 4)
    best = with_(result(settings(2, factor=4), trial(0.0056, 0.010)), receive_s=[0.0040] * 4)
    assert knee.summary.verdict == Verdict.LOADER_BOUND.value
    assert best.summary.verdict == Verdict.RECEIVE_FLOOR.value
    rec = recommend([knee, best])
    assert rec.settings == knee.settings
    nc = finding(rec, FindingKind.NOT_CLEARED)
    assert not nc.of_best and nc.cause is NotClearedCause.GRID_EDGE
    text = reason(rec)
    assert "prefetch_factor 4 instead of 2 buys nothing measurable; the loader still binds." in text
    assert "The recommended config has the most workers of those measured: try more workers." in text
    assert "not worth chasing" not in text


def test_with_no_workers_an_epoch_start_is_building_a_batch_not_start_up():
    # One-batch epochs with 0 workers: every batch starts an epoch and is built in the main
    # process: the wait is the loader's (nothing starts again), never "epoch-start".
    r = with_(result(settings(0), trial(0.024, 0.020, n=10)), epoch_start_batches=list(range(10)))
    assert r.summary.verdict == Verdict.LOADER_BOUND.value
    assert r.summary.wait_parts_s[WaitPart.EPOCH_START.value] == 0.0
    # With 2 workers that start again every epoch, the same gaps are epoch starts.
    w2 = with_(result(settings(2), trial(0.024, 0.020, n=10)), epoch_start_batches=list(range(10)))
    assert w2.summary.verdict == Verdict.EPOCH_START_BOUND.value


def test_batches_that_hold_fewer_samples_than_batch_size_are_named():
    from loaderbench.analysis.advice import partial_batches

    # A sampler of 25 indices, batch_size 32: every batch holds 25.
    t = trial(0.01, 0.02, n=10, bs=25)
    r = result(settings(0, bs=32), t)
    [f] = partial_batches([r], {"kind": "tensor"})
    assert (f.batch_size, f.samples_per_batch, f.min, f.max) == (32, 25.0, 25.0, 25.0)
    # Full batches, a batch sampler (it sets the batches), or a count the user gave: nothing.
    assert partial_batches([result(settings(0, bs=25), trial(0.01, 0.02, n=10, bs=25))], {}) == []
    assert partial_batches([r], {"sampler_kind": "batch_sampler"}) == []
    assert partial_batches([r], {"samples_per_batch": 25}) == []
    assert not f.last_only  # the sampler's 25 indices fill no batch: not each epoch's last alone


def test_uniform_waits_that_wobble_in_a_cycle_are_not_periodic_stalls():
    # 0 workers: every batch waits 37-44 ms (the main process builds it); a 3-batch wobble of a
    # few ms correlates at lag 3, but no wait stands out from the others: no sawtooth.
    waits = [0.037, 0.040, 0.044] * 30
    assert stall_period(waits, [0.005] * 90) is None
    # The same cycle with a real stall (44 ms against 2 ms) is one.
    assert stall_period([0.002, 0.002, 0.044] * 30, [0.005] * 90) == 3


def _cpu_row(nw: int, samples_per_s: float, tree_cores: float, main_cores: float, other_cores: float | None = None):
    # batch 256, 54.7 ms step: the wait makes the row's samples/s (all loader-bound)
    r = result(settings(nw, bs=256), trial(256 / samples_per_s - 0.0547, 0.0547, bs=256))
    r.summary.cpu_util_pct, r.summary.main_cpu_util_pct = 100.0 * tree_cores, 100.0 * main_cores
    r.summary.other_cpu_util_pct = None if other_cores is None else 100.0 * other_cores
    r.summary.steal_cpu_util_pct = None if other_cores is None else 0.0
    r.summary.other_cores = other_cores  # as the summaries pass derives it
    return r


def test_more_workers_whose_cores_slowed_are_named_not_sent_to_more_workers():
    # 16 usable CPUs, none saturated (12.6 at most). Worker CPU per sample: w4 (4.4 - 0.4) cores /
    # 1,000 samples/s = 4.0 ms; w8 (8.5 - 0.5) / 1,500 = 5.33 ms; w12 (12.6 - 0.6) / 1,450 = 8.28 ms,
    # 2.07x w4's: 12 workers measured no faster because each core did less.
    rows = [_cpu_row(4, 1000.0, 4.4, 0.4), _cpu_row(8, 1500.0, 8.5, 0.5), _cpu_row(12, 1450.0, 12.6, 0.6)]
    rec = recommend(with_ceilings(rows, {256: 4680.0}), usable_cpus=16)
    assert rec.settings.num_workers == 8
    nc = finding(rec, FindingKind.NOT_CLEARED)
    assert nc.cause is NotClearedCause.CORES_SLOWER
    assert (nc.cores_slower.w_lo, nc.cores_slower.w_hi) == (4, 12)
    assert nc.cores_slower.lo_ms == pytest.approx(4.0) and nc.cores_slower.hi_ms == pytest.approx(12.0 / 1450 * 1e3)
    text = reason(rec)
    assert "no measured setting clears the loader bottleneck" in text
    assert ("w12-nopin-nopf-f2-once-b256 measured 1,450 samples/s, using 12.6 of 16 usable CPUs, its workers "
            "spending 8.3 ms of CPU per sample against 4.0 ms at 4 workers.") in text
    assert "more workers are not the cure" in text
    # The same CPU per sample at 12 workers as at 4 (1.1x): no such cause is claimed.
    flat = [_cpu_row(4, 1000.0, 4.4, 0.4), _cpu_row(8, 1500.0, 8.5, 0.5), _cpu_row(12, 1450.0, 6.98, 0.6)]
    nc = finding(recommend(with_ceilings(flat, {256: 4680.0}), usable_cpus=16), FindingKind.NOT_CLEARED)
    assert nc.cause is None
    # 12 workers measured clearly faster (+20%): the curve still rises, nothing to name.
    rising = [_cpu_row(4, 1000.0, 4.4, 0.4), _cpu_row(8, 1500.0, 8.5, 0.5), _cpu_row(12, 1800.0, 12.6, 0.6)]
    nc = finding(recommend(with_ceilings(rising, {256: 4680.0}), usable_cpus=16), FindingKind.NOT_CLEARED)
    assert nc.cause is NotClearedCause.GRID_EDGE


def test_cpus_taken_by_other_processes_count_toward_saturation_and_are_named():
    # The tree uses 8.5 of 16 CPUs; other processes took 6.0 more: 14.5 >= 0.85 x 16 = 13.6.
    rows = [_cpu_row(4, 1000.0, 4.4, 0.4, other_cores=0.2), _cpu_row(8, 1500.0, 8.5, 0.5, other_cores=6.0)]
    rec = recommend(with_ceilings(rows, {256: 4680.0}), usable_cpus=16)
    nc = finding(rec, FindingKind.NOT_CLEARED)
    assert nc.cause is NotClearedCause.CPU and nc.cpu.other_cores == pytest.approx(6.0) and not nc.cpu.mostly_other
    text = reason(rec)
    assert ("The process tree used 8.5 of 16 usable CPUs and other processes 6.0 more: CPU saturation binds "
            "(building the samples: fetch, decode, transforms, collate).") in text
    other = finding(rec, FindingKind.OTHER_LOAD)
    assert other.settings.key() == "w8-nopin-nopf-f2-once-b256"
    assert other.max_cores == pytest.approx(6.0) and other.median_cores == pytest.approx(3.1)
    assert ("Other processes used the CPUs this sweep ran on: up to 6.0 cores of the 16 usable CPUs during a "
            "measured window (w8-nopin-nopf-f2-once-b256), median 3.1 over 2 configs.") in text
    # Other load took more of the CPUs than the sweep's tree: not the loader's decode/augment.
    rows = [_cpu_row(0, 300.0, 0.1, 0.1, other_cores=1.9), _cpu_row(1, 310.0, 0.2, 0.1, other_cores=1.8)]
    text = reason(recommend(with_ceilings(rows, {256: 4680.0}), usable_cpus=2))
    assert ("The process tree used 0.2 of 2 usable CPUs and other processes 1.8 more: the CPUs are saturated, "
            "mostly by other load on the machine") in text and "decode/augment" not in text
    # On 2 CPUs, from a quarter of them (half a core): 0.99 of a core is named, 0.4 is not.
    small = [_cpu_row(0, 160.0, 0.2, 0.2, other_cores=0.99), _cpu_row(1, 390.0, 0.9, 0.1, other_cores=0.3)]
    rec = recommend(with_ceilings(small, {256: 4680.0}), usable_cpus=2)
    assert finding(rec, FindingKind.OTHER_LOAD).max_cores == pytest.approx(0.99)
    small = [_cpu_row(0, 160.0, 0.2, 0.2, other_cores=0.4), _cpu_row(1, 390.0, 0.9, 0.1, other_cores=0.3)]
    assert finding(recommend(with_ceilings(small, {256: 4680.0}), usable_cpus=2), FindingKind.OTHER_LOAD) is None
    # Under a core (and under 10% of the CPUs): not named; the tree alone is not saturated.
    quiet = [_cpu_row(4, 1000.0, 4.4, 0.4, other_cores=0.2), _cpu_row(8, 1500.0, 8.5, 0.5, other_cores=0.9)]
    rec = recommend(with_ceilings(quiet, {256: 4680.0}), usable_cpus=16)
    assert finding(rec, FindingKind.OTHER_LOAD) is None
    assert finding(rec, FindingKind.NOT_CLEARED).cause is NotClearedCause.GRID_EDGE


def test_more_workers_within_the_tolerance_are_not_offered_as_acting_on_the_wait():
    # 4 workers wait 30 ms before a 12 ms step (16 / 0.042 = 381 samples/s); 8 workers 29 ms
    # (16 / 0.041 = 390, +2.4%: within the 5% tolerance, so 4 is the knee and 8 "buys nothing
    # measurable"). Listing 8 workers as what acts on the wait would contradict that.
    rows = [result(settings(2), trial(0.052, 0.012)), result(settings(4), trial(0.030, 0.012)),
            result(settings(8), trial(0.029, 0.012))]
    rec = recommend(rows)
    assert rec.settings.num_workers == 4
    text = reason(rec)
    assert "8 workers instead of 4 buys nothing measurable" in text
    assert "What acts on it: more workers" not in text
    # 8 workers measured slower (-6.7%): kept, as measured without gain.
    rows = [result(settings(2), trial(0.052, 0.012)), result(settings(4), trial(0.030, 0.012)),
            result(settings(8), trial(0.033, 0.012))]
    text = reason(recommend(rows))
    assert "Measured without gain (more workers): w8-nopin-nopf-f2-once-b16, 356 samples/s (-6.7%)" in text


def test_a_wait_on_the_gpu_decode_is_named_as_the_main_threads_not_the_receive():
    # --decoder nvjpeg on the H200 case: nvJPEG and its crops hold the main thread 68 ms a batch,
    # next() on an already-built batch costs 1 ms more; 1 and 4 workers wait alike.
    def row(w, wait):
        t = trial(wait, 0.055, n=10)
        t.gpu_decode_s, t.receive_s = [0.068] * 10, [0.001] * 4
        return result(settings(w), t)

    rows = [row(1, 0.069), row(4, 0.0685)]
    rec = recommend(rows)
    assert [r.summary.verdict for r in rows] == [Verdict.GPU_DECODE_BOUND] * 2
    text = reason(rec)
    assert ("is mostly the main process decoding each batch on the GPU (nvJPEG and the crops hold its thread): "
            "68.0 ms per batch (paid on the main thread whatever the workers: more workers cannot remove it; "
            "decoding in the workers, --decoder pil or torchvision, moves it off that thread).") in text
    assert "taking each finished batch from a worker" not in text


def test_waits_that_alternate_while_every_batch_waits_a_step_are_no_sawtooth():
    # 1 worker, 48 ms a batch against a 20 ms step: every batch waits about 28-32 ms, every 4th
    # twice that (the prefetch slot refills unevenly): a period in the waits, but no batch is
    # ready between the stalls, so no "stall every 4 batches". The same rhythm with ready batches
    # between (waits of 1 ms) is a sawtooth.
    assert stall_period([0.030, 0.028, 0.032, 0.060] * 20, [0.020] * 80) is None
    assert stall_period([0.001, 0.001, 0.001, 0.060] * 20, [0.020] * 80) == 4


def _epoch_start_row(persistent: bool, start_wait_s: float):
    """2 workers, a 20-ms step, 20 batches of 16 that never wait but the epoch start at batch 10."""
    waits = [0.0] * 10 + [start_wait_s] + [0.0] * 9
    t = trial(0, 0.02, waits=waits)
    t.epoch_start_batches = [10]
    return result(settings(2, persistent=persistent), t)


def test_an_epoch_start_that_persistent_workers_do_not_shorten_is_not_named_workers_starting():
    # 0.30 s at the start against 0.297 s with persistent workers: 320 samples over 0.70 s and
    # 0.697 s, 457 and 459 samples/s (+0.4%, inside the 5% tolerance): the start is the dataset's
    # own, and persistent workers are measured without gain, not offered as acting on it.
    rs = [_epoch_start_row(False, 0.30), _epoch_start_row(True, 0.297)]
    rec = recommend(rs)
    assert not rec.settings.persistent_workers
    [w] = [f for f in rec.findings if isinstance(f, RemainingWait)]
    assert w.start_outlasts_persistent and not w.remedies
    assert [r.gain for r in w.measured_no_gain] == [pytest.approx(0.70 / 0.697 - 1.0)]
    text = reason(rec)
    assert ("is mostly each epoch's start, which persistent workers, measured, did not shorten (not the workers "
            "starting again: the pipeline refilling, or the dataset's own __iter__): 15.0 ms per batch") in text
    assert ("Measured without gain (persistent_workers): w2-nopin-nopf-f2-persist-b16, 459 samples/s (+0.4%, within "
            "the 5% tolerance).") in text
    assert "What acts on it" not in text and "workers starting again at each epoch start" not in text


def test_an_epoch_start_with_persistent_workers_unmeasured_names_workers_starting_and_the_remedy():
    rs = [_epoch_start_row(False, 0.30)]
    rec = recommend(rs)
    [w] = [f for f in rec.findings if isinstance(f, RemainingWait)]
    assert not w.start_outlasts_persistent and [r.remedy for r in w.remedies] == [RemedyKind.PERSISTENT_WORKERS]
    text = reason(rec)
    assert "is mostly workers starting again at each epoch start: 15.0 ms per batch" in text
    assert "What acts on it: persistent_workers=True" in text


# One row of 2 workers over sleep-only latency (blocks of 64 indices at 2 or 30 ms, shuffled;
# batch 8, a 5 ms step), its three trials' waits in seconds as measured: the first correlates
# at lag 6 by chance (r = 0.57 over 12 pairs), the third is the 2-worker sawtooth.
CHANCE_WAITS = [0.0004, 0.1018, 0.0004, 0.1196, 0.0007, 0.0349, 0.0236, 0.0977, 0.0512, 0.0687, 0.1074, 0.0133,
                0.0227, 0.1252, 0.0019, 0.0622, 0.1353, 0.0004]
NO_PERIOD_WAITS = [0.0042, 0.1684, 0.0005, 0.0631, 0.121, 0.0837, 0.0925, 0.0281, 0.0648, 0.0279, 0.0932, 0.0021,
                   0.0897, 0.0565, 0.1197, 0.0007]
SAWTOOTH_WAITS = [0.0006, 0.0302, 0.0006, 0.147, 0.0007, 0.1479, 0.0005, 0.1206, 0.0006, 0.0906, 0.0006, 0.0905,
                  0.0005, 0.1204, 0.0004, 0.0637, 0.0005, 0.0932]


def test_a_stall_period_is_named_only_where_most_of_the_rows_trials_find_it():
    from loaderbench.analysis.wait import row_stall_period

    chance, none, saw = (trial(0.0, 0.0051, waits=w) for w in (CHANCE_WAITS, NO_PERIOD_WAITS, SAWTOOTH_WAITS))
    assert [stall_period(t.data_wait_s, t.step_s) for t in (chance, none, saw)] == [6, None, 2]
    assert row_stall_period([chance, none, saw]) is None  # 6 in one trial of three
    assert row_stall_period([saw, none, saw]) == 2  # two of three
    assert row_stall_period([chance]) == 6  # one trial: its own
    assert row_stall_period([saw, chance]) == 2  # half of two
