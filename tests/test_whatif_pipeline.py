"""The what-ifs beyond the DataLoader's settings: `--what-if stage=NAME:F` and `decode=...`
answered by the pipeline model with the build changed as the stage profile says, several changes
combined, the changes the recommendation lists where no setting clears the loader bottleneck,
the profile's tail and batched fetch, and the sweep's profile of its pick (NOTE [what-ifs beyond
the knobs] in analysis/predict.py, NOTE [the sweep's stage profile] in orchestration/profile.py)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from loaderbench.analysis import analyze, predict
from loaderbench.analysis.predict import (
    parse_what_if,
    rebuild,
    split_what_if,
    what_if_pipeline,
)
from loaderbench.conclusions import (
    BatchedFetch,
    Binds,
    ChangeKind,
    DecodeMode,
    Decoder,
    InOrderTrial,
    LongTail,
    ProfileCost,
    StageChange,
    StageProfile,
    StageRow,
    WhatIf,
    WhyNoPrediction,
)
from loaderbench.model import (
    BatchedFetchTiming,
    BatchTiming,
    ConfigResult,
    DecoderTiming,
    GpuDecodeTiming,
    SampleTiming,
    Stage,
    StageRecord,
)
from loaderbench.results import ResultSet, SweepProfile
from tests.helpers import settings
from tests.test_search import pipeline

# ---------------------------------------------------------------------------------------------
# 1. The question: one change per --what-if, several combined
# ---------------------------------------------------------------------------------------------


def test_each_change_parses_and_several_combine():
    assert parse_what_if("stage=Resize #2:3") == WhatIf(stages=(StageChange("Resize #2", 3.0),))
    assert parse_what_if("stage=rest of __getitem__:inf") == WhatIf(stages=(StageChange("rest of __getitem__"),))
    assert parse_what_if("stage=a:b:0.5").stages == (StageChange("a:b", 0.5),)  # the last colon splits
    assert parse_what_if("decode=nvjpeg") == WhatIf(decode=Decoder.NVJPEG)
    # A bad value names its key's form only; an unknown key every form.
    for bad in ("stage=decode", "stage=:2", "stage=decode:0", "stage=decode:-1", "stage=decode:x"):
        with pytest.raises(ValueError, match="^expected stage=NAME:F .*, got"):
            parse_what_if(bad)
    with pytest.raises(ValueError, match="^expected decode=torchvision or decode=nvjpeg .*, got 'decode=pil'$"):
        parse_what_if("decode=pil")
    with pytest.raises(ValueError, match="^expected cpus=K .*stage=NAME:F.*ranks=N"):
        parse_what_if("speed=2")
    model, ranks = split_what_if([parse_what_if(q) for q in
                                  ("cpus=8", "decode=torchvision", "stage=collate:2", "disk=150,200", "ranks=4",
                                   "stage=RandomResizedCrop:inf")])
    assert model == WhatIf(cpus=8, disk_mb_per_s=150.0, disk_iops=200.0, decode=Decoder.TORCHVISION,
                           stages=(StageChange("collate", 2.0), StageChange("RandomResizedCrop")))
    assert ranks == WhatIf(ranks=4)
    assert split_what_if([]) == (None, None)
    for twice, what in ((["cpus=8", "cpus=4"], "cpus="), (["disk=1", "disk=2"], "disk="),
                        (["stage=a:2", "stage=a:3"], "stage=a"), (["decode=nvjpeg", "decode=torchvision"], "decode=")):
        with pytest.raises(ValueError, match=f"{what} is given twice"):
            split_what_if([parse_what_if(q) for q in twice])
    with pytest.raises(ValueError, match="both change the decode"):
        split_what_if([parse_what_if("decode=nvjpeg"), parse_what_if("stage=decode:2")])


def test_the_toml_what_if_is_answered_by_show_without_the_flag(tmp_path):
    from loaderbench.errors import ConfigError
    from loaderbench.orchestration.config import SweepConfig, build_config

    path = tmp_path / "c.toml"
    path.write_text('what_if = ["cpus=8", "ranks=2"]\n')
    cfg = build_config(path)
    assert cfg.what_if == ("cpus=8", "ranks=2")
    assert SweepConfig.from_dict(cfg.to_dict()).what_if == ("cpus=8", "ranks=2")
    path.write_text('what_if = ["cpus=8", "cpus=4"]\n')
    with pytest.raises(ConfigError, match="what_if: cpus= is given twice"):
        build_config(path)
    # A result whose config asked cpus=2: analyze() answers it unless told otherwise.
    rows = _rows(pipeline(5.0, 2.0, cpus=2))
    rs = ResultSet(config={"what_if": ["cpus=2"]}, environment={"usable_cpus": 2}, results=rows)
    assert analyze(rs).what_if is not None and analyze(rs).what_if.question == WhatIf(cpus=2)
    assert analyze(rs, what_if=[]).what_if is None


# ---------------------------------------------------------------------------------------------
# 2. The build as a change makes it (rebuild), from a stage profile
# ---------------------------------------------------------------------------------------------

COST = ProfileCost(samples=200, plain_samples=200, plain_ms_per_sample=5.0, profiled_ms_per_sample=5.1, overhead=0.02,
                   attribution_samples=0, attribution_plain_ms_per_sample=None, attribution_ms_per_sample=None,
                   attribution_overhead=None, wall_s=2.0, time_budget_s=6.0)


def row(name: str, kind: str, ms: float | None, cpu: float | None = None, where: str = "worker", calls: float = 1.0,
        queued: float = 0.0, na: str | None = None) -> StageRow:
    return StageRow(name, kind, where, ms, ms if cpu is None and ms is not None else cpu, None,
                    queued_ms_per_sample=queued, calls_per_sample=calls, na=na)


def jpeg_profile(**kw) -> StageProfile:
    """Building a sample: decode 2 ms (PIL JPEG), RandomResizedCrop 1.5 ms, PILToTensor 0.5 ms, collate
    1 ms (5 ms); receive 0.5 ms in the main process; the decoders timed: torchvision.io 0.7x PIL, the
    crop 0.6 ms on the tensor against 1.5, PILToTensor not needed."""
    stages = [row("read", "read", 0.0, calls=0.0), row("decode", "decode", 2.0),
              row("RandomResizedCrop", "transform", 1.5), row("PILToTensor", "transform", 0.5),
              row("rest of __getitem__", "rest", 0.0), row("collate", "collate", 1.0),
              row("receive", "receive", 0.5, 0.1, where="main"), row("pin", "pin", None, where="main", na="no-cuda")]
    timing = DecoderTiming(images=16, rounds=3, threads=1, pil_ms=2.0, pil_cpu_ms=2.0, torchvision_ms=1.4,
                           torchvision_cpu_ms=1.4, transforms=["RandomResizedCrop", "PILToTensor"],
                           transforms_pil_ms=2.0, transforms_pil_cpu_ms=2.0, transforms_tensor_ms=0.6,
                           transforms_tensor_cpu_ms=0.6, dropped=["PILToTensor"],
                           per_transform={"RandomResizedCrop": (1.5, 0.6), "PILToTensor": (0.5, 0.0)})
    base = StageProfile(stages=stages, sample_build_ms=None, cost=COST, functions=[], unlisted_share=None,
                        decoders={"PIL JPEG": 200}, samples=200, batches_collated=3, batches_received=5,
                        sampled_in="this process", torch_threads=1, transforms_found=True, iterable=False,
                        rest_counts=False, queued_share=None, device="cpu", decoder_timing=timing)
    return replace(base, **kw)


def test_a_stage_made_faster_or_removed_scales_the_build():
    rb = rebuild(WhatIf(stages=(StageChange("collate", 2.0), StageChange("PILToTensor"))), jpeg_profile(), 16)
    assert not isinstance(rb, tuple)
    # 5 ms -> 2 + 1.5 + 0 + 0.5: 4 ms; 1 ms of CPU saved per sample.
    assert (rb.build_ms, rb.new_build_ms, rb.cpu_saved_s) == pytest.approx((5.0, 4.0, 0.001))
    shifts = {s.name: (s.new_ms_per_sample, s.share) for s in rb.shifts}
    assert sorted(shifts) == ["PILToTensor", "collate"]
    assert shifts["collate"] == pytest.approx((0.5, 0.2)) and shifts["PILToTensor"] == pytest.approx((0.0, 0.1))
    # Wall less the time queued for a CPU: a stage queued half its wall counts for the other half.
    queued = jpeg_profile(stages=[*jpeg_profile().stages[:1], row("decode", "decode", 4.0, 2.0, queued=2.0),
                                  *jpeg_profile().stages[2:]])
    assert rebuild(WhatIf(stages=(StageChange("decode", 2.0),)), queued, 16).new_build_ms == pytest.approx(4.0)
    # The receive is the main process's: its floor x F, the build unchanged.
    rb = rebuild(WhatIf(stages=(StageChange("receive", 4.0),)), jpeg_profile(), 16)
    assert rb.receive_factor == 4.0 and rb.new_build_ms == rb.build_ms == 5.0
    assert [(s.name, s.new_ms_per_sample, s.share) for s in rb.shifts] == [("receive", 0.125, None)]
    assert rebuild(WhatIf(stages=(StageChange("pin", 2.0),)), jpeg_profile(), 16)[0] is WhyNoPrediction.STAGE_NOT_BUILT
    # A pick without workers receives nothing: its profile names the receive but timed none, and a
    # question about it has no answer (it had read "nothing changes" beside the rows with workers).
    zero = jpeg_profile(stages=[*jpeg_profile().stages[:6], row("receive", "receive", None, where="main", na="no-workers"),
                                *jpeg_profile().stages[7:]])
    assert rebuild(WhatIf(stages=(StageChange("receive", None),)), zero, 16)[0] is WhyNoPrediction.STAGE_NOT_TIMED
    why, names = rebuild(WhatIf(stages=(StageChange("Crop", 2.0),)), jpeg_profile(), 16)
    assert why is WhyNoPrediction.STAGE_UNKNOWN and names[:3] == ["read", "decode", "RandomResizedCrop"]
    # A name in another case is the stage.
    assert not isinstance(rebuild(WhatIf(stages=(StageChange("DECODE", 2.0),)), jpeg_profile(), 16), tuple)


def test_the_other_cpu_decoder_uses_the_ratios_measured_on_the_datasets_jpegs():
    rb = rebuild(WhatIf(decode=Decoder.TORCHVISION), jpeg_profile(), 16)
    # decode 2 x 0.7 = 1.4; the crop 1.5 x 0.6/1.5 = 0.6; PILToTensor dropped; collate 1: 3 ms.
    assert rb.new_build_ms == pytest.approx(3.0) and rb.cpu_saved_s == pytest.approx(0.002)
    assert (rb.decode_from, rb.decoder_factor, rb.transforms_factor) == pytest.approx(("PIL", 0.7, 0.3))
    assert rebuild(WhatIf(decode=Decoder.TORCHVISION), jpeg_profile(decoders={"torchvision.io decode_jpeg JPEG": 9}),
                   16)[0] is WhyNoPrediction.SAME_DECODER
    assert rebuild(WhatIf(decode=Decoder.TORCHVISION), jpeg_profile(decoders={"PIL PNG": 9}),
                   16)[0] is WhyNoPrediction.NO_JPEG_DECODE
    assert rebuild(WhatIf(decode=Decoder.TORCHVISION), jpeg_profile(decoder_timing=None),
                   16)[0] is WhyNoPrediction.NO_DECODER_TIMING


def test_decoding_on_the_gpu_moves_the_decode_and_its_transforms_off_the_workers():
    assert rebuild(WhatIf(decode=Decoder.NVJPEG), jpeg_profile(), 16)[0] is WhyNoPrediction.NO_CUDA
    assert rebuild(WhatIf(decode=Decoder.NVJPEG), jpeg_profile(device="cuda:0"), 16)[0] is WhyNoPrediction.NO_GPU_TIMING
    gpu = GpuDecodeTiming(device="cuda:0", batch_size=64, reps=5, decode_ms_per_batch=10.0,
                          decode_crop_ms_per_batch=32.0, cpu_ms_per_batch=6.4)
    rb = rebuild(WhatIf(decode=Decoder.NVJPEG), jpeg_profile(device="cuda:0", gpu_decode=gpu), 16)
    # The workers keep the collate (1 ms); 32 ms per 64 -> 8 ms per batch of 16; 4 ms of CPU saved
    # less the 0.1 ms per sample the main process waits for the decode.
    assert (rb.new_build_ms, rb.gpu_ms_per_batch, rb.cpu_saved_s) == pytest.approx((1.0, 8.0, 0.0039))


# ---------------------------------------------------------------------------------------------
# 3. The pipeline model answers them
# ---------------------------------------------------------------------------------------------


def _rows(pipe, workers=(0, 1, 2, 4, 8)) -> list[ConfigResult]:
    """The rows of a `pipeline(...)` (its measure and calls) at `workers`."""
    measure = pipe[0] if isinstance(pipe, tuple) else pipe
    return [measure(settings(w), 0) for w in workers]


def two_transforms(a_ms: float, b_ms: float, cpu_share: float = 1.0, **kw) -> StageProfile:
    """A build of two transforms A and B (a_ms + b_ms per sample), CPU `cpu_share` of their wall."""
    return jpeg_profile(stages=[row("A", "transform", a_ms, cpu_share * a_ms), row("B", "transform", b_ms,
                                                                                   cpu_share * b_ms)],
                        decoders={}, decoder_timing=None, **kw)


def test_a_cheaper_stage_is_predicted_as_the_same_pipeline_measured_with_it():
    # Workers build a sample in 5 ms (A 3 + B 2), a 2 ms step of 16 (8,000/s), a 0.2 ms receive:
    # W workers run at 200 W samples/s. A twice as cheap: 3.5 ms, 285.7 W, what the same pipeline
    # measures with A at 1.5 ms (the pipeline helper's own figures at 4 workers).
    rows = _rows(pipeline(5.0, 2.0))
    what = what_if_pipeline(WhatIf(stages=(StageChange("A", 2.0),)), rows, settings(4), 0.05, 16,
                            two_transforms(3.0, 2.0))
    measured = pipeline(3.5, 2.0)[0](settings(4), 0).summary.samples_per_s
    curve = dict(what.curve)
    assert measured == pytest.approx(4 * 1000 / 3.5)
    assert curve[4] == pytest.approx(measured, rel=1e-3) and curve[1] == pytest.approx(1000 / 3.5, rel=1e-3)
    assert what.loader_speedup == pytest.approx(5.0 / 3.5)
    # Where it flattens, the step (with its receive: 1 / (1/8000 + 1/80000) = 7,273/s) binds.
    assert what.binds is Binds.STEP and max(curve.values()) < 7273
    assert what.base == settings(4) and what.base_samples_per_s == pytest.approx(800)
    # B removed: 3 ms, 333 W.
    gone = dict(what_if_pipeline(WhatIf(stages=(StageChange("B"),)), rows, settings(4), 0.05, 16,
                                 two_transforms(3.0, 2.0)).curve)
    assert gone[2] == pytest.approx(2000 / 3.0, rel=1e-3)
    # A stage asked in another case is answered, and named, as the profile spells it.
    lower = what_if_pipeline(WhatIf(stages=(StageChange("a", 2.0),)), rows, settings(4), 0.05, 16,
                             two_transforms(3.0, 2.0))
    assert lower.question.stages[0].name == "A" and lower.curve == what.curve


def test_a_change_is_answered_in_the_series_that_goes_furthest_with_the_picks_own_beside_it():
    # Workers build a sample in 5 ms (A 3 + B 2), a 2 ms step of 16 (8,000/s). With pin_memory
    # off (the pick's series) the main process receives each batch in 1 ms (16,000/s): the step
    # and the receive in turn hold it to 1 / (1/8000 + 1/16000) = 5,333/s, the receive a third of
    # its time. With pin_memory on the receive takes 0.2 ms: 1 / (1/8000 + 1/80000) = 7,273/s.
    # Both series measured at 1-8 workers, loader-bound (200 W samples/s) where the two agree.
    off = _rows(pipeline(5.0, 2.0, receive_ms=1.0), workers=(1, 2, 4, 8))
    on_measure = pipeline(5.0, 2.0, receive_ms=0.2)[0]
    on = [on_measure(settings(w, pin=True), 0) for w in (1, 2, 4, 8)]
    question = WhatIf(stages=(StageChange("A"),))  # 2 ms a sample: 500 W, the main thread binds
    what = what_if_pipeline(question, off + on, settings(8), 0.05, 16, two_transforms(3.0, 2.0))
    assert what.knee is not None and what.knee.pin_memory is True
    assert what.binds is Binds.STEP and max(x for _, x in what.curve) == pytest.approx(7273, rel=0.03)
    # The pick's own series, kept beside it: held by its receive.
    assert what.series_samples_per_s == pytest.approx(5333, rel=0.05) and what.series_binds is Binds.RECEIVE
    assert what.base == settings(8) and what.base_samples_per_s == pytest.approx(1600)
    # Only its own series measured: no switch, nothing beside it.
    alone = what_if_pipeline(question, off, settings(8), 0.05, 16, two_transforms(3.0, 2.0))
    assert alone.knee is not None and alone.knee.pin_memory is False and alone.series_samples_per_s is None
    assert alone.binds is Binds.RECEIVE and max(x for _, x in alone.curve) < 5333
    # The sentences say the knee's other settings and the pick's own series' figure.
    from loaderbench.render.findings import describe
    from loaderbench.render.pipeline import what_if_build_lines

    line = what_if_build_lines(what, describe)[0]
    assert ("That knee, and the curve, have pin_memory on instead of off; with the pick's pin_memory off (8 workers, "
            "pin_memory off") in line
    assert "the model reaches only ~5," in line and "the main process receiving each batch" in line


def test_more_cpus_are_answered_in_the_series_that_goes_furthest_as_a_change_to_the_build_is():
    # The series of the test above, no change to the build: with 64 CPUs more workers reach the
    # main thread, which holds the pick's pin_memory off series at 5,333/s (its receive a third of
    # its time) and the pin_memory on series at 7,273/s (the step).
    off = _rows(pipeline(5.0, 2.0, receive_ms=1.0), workers=(1, 2, 4, 8))
    on_measure = pipeline(5.0, 2.0, receive_ms=0.2)[0]
    on = [on_measure(settings(w, pin=True), 0) for w in (1, 2, 4, 8)]
    what = predict.answer_what_if(WhatIf(cpus=64), off + on, settings(8), 0.05, 16)
    assert what.knee is not None and what.knee.pin_memory is True
    assert max(x for _, x in what.curve) == pytest.approx(7273, rel=0.03) and what.binds is Binds.STEP
    assert what.series_samples_per_s == pytest.approx(5333, rel=0.05) and what.series_binds is Binds.RECEIVE
    # The same question with a change to the build that changes nothing gives the same answer.
    same = what_if_pipeline(WhatIf(cpus=64, stages=(StageChange("A", 1.0),)), off + on, settings(8), 0.05, 16,
                            two_transforms(3.0, 2.0))
    assert same.knee is not None and same.knee.pin_memory is True
    assert same.knee_samples_per_s == pytest.approx(what.knee_samples_per_s, rel=0.05)
    # With 2 CPUs the loader binds every series alike: the pick's own series answers, even where
    # the other series' rows read 20% high (a noisy host), which its anchoring would carry.
    lucky = [replace(r, summary=replace(r.summary, samples_per_s=1.2 * r.summary.samples_per_s)) for r in on]
    assert predict.what_if_cpus(off + lucky, settings(8, pin=True), 2, 0.05, measured_cpus=16).knee_samples_per_s > (
        1.1 * predict.what_if_cpus(off + lucky, settings(8), 2, 0.05, measured_cpus=16).knee_samples_per_s)
    few = predict.answer_what_if(WhatIf(cpus=2), off + lucky, settings(8), 0.05, 16)
    assert few.knee is not None and few.knee.pin_memory is False and few.series_samples_per_s is None
    assert few.binds is not None and few.binds not in predict.MAIN_THREAD_BINDS
    # Only the pick's series measured: its own answer, nothing beside it.
    alone = predict.answer_what_if(WhatIf(cpus=64), off, settings(8), 0.05, 16)
    assert alone.knee is not None and alone.knee.pin_memory is False and alone.series_samples_per_s is None
    assert alone.binds is Binds.RECEIVE
    from loaderbench.render.findings import describe
    from loaderbench.render.footer import what_if_lines

    line = what_if_lines(what, describe)[0]
    assert line.startswith("What if 64 usable CPUs (a prediction")
    assert ("That knee, and the curve, have pin_memory on instead of off; with the pick's pin_memory off (8 workers, "
            "pin_memory off") in line and "the main process receiving each batch" in line


def test_fewer_cpus_with_a_change_that_changes_nothing_agree_with_fewer_cpus_alone():
    # 4 ms of CPU per sample (A 2 + B 2) on 2 CPUs beside a 20 ms step of 16; the 2-worker row
    # read 1.25x (loader-bound, so it anchors the loader). On 1 CPU no worker count builds past
    # 250 samples/s, with a change of nothing asked beside it as without it.
    measure, _ = pipeline(4.0, 20.0, cpus=2, cpu_per_sample_s=0.004, outliers={(2, 0): 1.25})
    rows = [measure(settings(w), 0) for w in (0, 1, 2, 4)]
    alone = predict.answer_what_if(WhatIf(cpus=1), rows, settings(2), 0.05, 2)
    same = what_if_pipeline(WhatIf(cpus=1, stages=(StageChange("A", 1.0),)), rows, settings(2), 0.05, 2,
                            two_transforms(2.0, 2.0))
    for answer in (alone, same):
        assert max(x for w, x in answer.curve if w > 0) <= 250 * 1.001
    assert same.knee_samples_per_s == pytest.approx(alone.knee_samples_per_s, rel=0.05)


def test_a_change_is_weighed_against_what_more_workers_alone_would_give():
    # Workers build a sample in 5 ms (A 4.9 + B 0.1): 200 samples/s each; a 10 ms step of 16
    # (1,600/s); 16 CPUs; only 1 and 2 workers measured (400/s at 2, loader-bound). More workers
    # alone reach the step at 8; B twice as fast (0.05 ms saved of 5) changes nothing.
    rows = _rows(pipeline(5.0, 10.0), workers=(1, 2))
    profile = two_transforms(4.9, 0.1)
    b = what_if_pipeline(WhatIf(stages=(StageChange("B", 2.0),)), rows, settings(2), 0.05, 16, profile)
    assert b.knee_samples_per_s == pytest.approx(1600, rel=0.06)  # the fewest within 5% of the top
    # Best against best, up to twice the curve's counts: both reach the step.
    assert b.unchanged_samples_per_s == pytest.approx(b.changed_samples_per_s, rel=0.02)
    assert b.changed_samples_per_s == pytest.approx(1600, rel=0.03)
    from loaderbench.render.pipeline import what_if_build_lines

    assert "Without the change, the same model gives ~1,5" in what_if_build_lines(b, str)[0]
    # Neither stage's change is listed beyond the settings: their 4x over the pick is more workers'.
    beyond = predict.beyond_knobs(rows, settings(2), 0.05, 16, profile)
    assert [c.kind for c in beyond.changes if c.kind is ChangeKind.CHEAPER_STAGE] == []


def test_a_cheaper_build_is_never_predicted_below_what_its_worker_count_measured():
    # Workers build a sample in 1 ms, a 2 ms step of 16 (8,000/s), a receive of 1 ms per batch:
    # the model's main thread, the step and the receive in turn, gives 1 / (1/8000 + 1/16000) =
    # 5,333/s, yet 8 workers measured 8,000 (the receive overlapped the step). A twice faster A
    # is predicted at 8,000 there at least, and so is the settings' own curve.
    rows = _rows(pipeline(1.0, 2.0, receive_ms=1.0), workers=(1, 2, 4, 8))
    assert rows[-1].summary.samples_per_s == pytest.approx(8000)
    what = what_if_pipeline(WhatIf(stages=(StageChange("A", 2.0),)), rows, settings(8), 0.05, 16,
                            two_transforms(0.6, 0.4))
    assert dict(what.curve)[8] == pytest.approx(8000) and what.knee_samples_per_s >= 8000 * 0.999
    assert what.unchanged_samples_per_s >= 8000 * 0.999


def test_where_the_cpus_bind_a_cheaper_stage_lifts_the_cpus_ceiling_by_the_cpu_it_saves():
    # 2 CPUs, 4 ms of CPU per sample: at most 500/s. A (2.4 ms of CPU) removed leaves 1.6 ms: the
    # CPUs' ceiling 2.5x higher; workers then build 500/s each.
    rows = _rows(pipeline(5.0, 2.0, cpus=2, cpu_per_sample_s=0.004))
    profile = two_transforms(3.0, 2.0, cpu_share=0.8)
    before = what_if_pipeline(WhatIf(stages=(StageChange("A", 1.0),)), rows, settings(4), 0.05, 2, profile)
    after = what_if_pipeline(WhatIf(stages=(StageChange("A"),)), rows, settings(4), 0.05, 2, profile)
    assert before.binds is Binds.CPUS and after.binds is Binds.CPUS
    top_before, top_after = max(x for _, x in before.curve), max(x for _, x in after.curve)
    # kappa (the tree's CPU per sample, median over the rows) 4.11 ms -> 1.71 ms: 2.40x.
    assert top_after / top_before == pytest.approx(4.1125 / 1.7125, rel=0.05)
    assert before.curve[4][1] == pytest.approx(rows[3].summary.samples_per_s, rel=0.05)  # the measured row


def _gpu_decode_answer(cpu_ms_per_batch: float, gpu_ms_per_batch: float = 3.0):
    """`decode=nvjpeg` for workers that build a sample in 4.5 ms (decode 2, crop 1.5, collate 1)
    against a 2 ms step at batch 16, nvJPEG taking `gpu_ms_per_batch` of GPU per batch and
    `cpu_ms_per_batch` of its calling thread's CPU."""
    gpu = GpuDecodeTiming(device="cuda:0", batch_size=16, reps=5, decode_ms_per_batch=min(1.0, gpu_ms_per_batch),
                          decode_crop_ms_per_batch=gpu_ms_per_batch, cpu_ms_per_batch=cpu_ms_per_batch)
    profile = jpeg_profile(stages=[row("decode", "decode", 2.0), row("RandomResizedCrop", "transform", 1.5),
                                   row("collate", "collate", 1.0)], device="cuda:0", gpu_decode=gpu)
    return what_if_pipeline(WhatIf(decode=Decoder.NVJPEG), _rows(pipeline(4.5, 2.0)), settings(4), 0.05, 16, profile)


def test_gpu_decode_is_stated_serialised_and_overlapped_with_what_binds_in_each():
    # The workers keep 1 ms (their collate) of 4.5; nvJPEG 3 ms per batch of 16 against a 2 ms step:
    # serialised 5 ms per batch, 16 / 5 ms = 3,200/s (with the receive 3,077/s); overlapped at best
    # the longer, 3 ms (5,333/s, 5,000/s with the receive), and then the decode binds.
    what = _gpu_decode_answer(cpu_ms_per_batch=0.0)
    serialised, overlapped = what.cases
    assert (serialised.mode, overlapped.mode) == (DecodeMode.SERIALISED, DecodeMode.OVERLAPPED)
    assert (serialised.step_ms_per_batch, overlapped.step_ms_per_batch) == pytest.approx((5.0, 3.0))
    assert dict(serialised.curve)[32] == pytest.approx(1 / (1 / 3200 + 1 / 80000), rel=1e-3)
    assert dict(overlapped.curve)[32] == pytest.approx(5000, rel=1e-3)
    # The step waits 3 of 5 ms serialised, 1 of 3 overlapped: the decode binds in both.
    assert (serialised.binds, overlapped.binds) == (Binds.GPU_DECODE, Binds.GPU_DECODE)
    assert what.knee == serialised.knee and what.loader_speedup == pytest.approx(4.5)
    # 0.1 ms of decode serialised with the 2-ms step: a 4.8% wait, under the 5% a measured row
    # calls compute-bound: the step binds; 0.12 ms (5.7%): the decode.
    assert _gpu_decode_answer(0.0, 0.1).cases[0].binds is Binds.STEP
    assert _gpu_decode_answer(0.0, 0.12).cases[0].binds is Binds.GPU_DECODE


def test_a_gpu_decode_that_holds_the_main_thread_is_not_overlapped():
    # As above, but the decode's calling thread spends 2.7 ms of CPU for its 3 ms on the GPU (90%,
    # past HOST_WAITS_SHARE): the main thread cannot launch the next step while it decodes, so a
    # side stream is no better: 5 ms per batch in both cases, 3,077/s with the receive, the decode
    # in the step binding.
    from loaderbench.render.pipeline import what_if_build_lines

    what = _gpu_decode_answer(cpu_ms_per_batch=2.7)
    serialised, overlapped = what.cases
    assert (serialised.step_ms_per_batch, overlapped.step_ms_per_batch) == pytest.approx((5.0, 5.0))
    assert (serialised.host_waits, overlapped.host_waits) == (False, True)
    assert dict(overlapped.curve)[32] == pytest.approx(1 / (1 / 3200 + 1 / 80000), rel=1e-3)
    assert overlapped.binds is Binds.GPU_DECODE
    text = " ".join(what_if_build_lines(what, lambda s: f"{s.num_workers} workers"))
    assert ("On a side stream (the CUDA prefetcher), no better: the decode and its crops hold the main thread for "
            "their GPU time (2.7 ms of CPU per batch of 16 for 3.0 ms on the GPU, the decode alone 1.0 ms), so the "
            "next step cannot start while they run, 5.0 ms per batch") in text
    assert "the decode on the GPU binds (the step waits for it each batch)" in text
    assert "These add the decode and its crops, as timed alone, to the step" in text
    # Serialised is the decode before the step: its knee is named without the prefetcher.
    assert (serialised.knee.prefetch, overlapped.knee.prefetch) == (False, True)
    # 70% of its GPU time (under the share): overlapped at best, as before.
    what = _gpu_decode_answer(cpu_ms_per_batch=2.1)
    assert what.cases[1].step_ms_per_batch == pytest.approx(3.0) and not what.cases[1].host_waits


def test_a_profile_whose_time_ended_before_the_decoders_says_so():
    # The profile's budget ended before it timed the decoders (ProfileCost.cut_short): not "no
    # JPEG captured", but the time, with what gives it more.
    from loaderbench.model import DECODER_TIMING
    from loaderbench.render.pipeline import what_if_build_lines

    base = jpeg_profile(device="cuda:0", decoder_timing=None)
    cut = replace(base, cost=replace(base.cost, cut_short=[DECODER_TIMING]))
    for decode in (Decoder.TORCHVISION, Decoder.NVJPEG):
        assert rebuild(WhatIf(decode=decode), cut, 16)[0] is WhyNoPrediction.PROFILE_TIME
    assert rebuild(WhatIf(decode=Decoder.NVJPEG), base, 16)[0] is WhyNoPrediction.NO_GPU_TIMING
    rows = _rows(pipeline(4.5, 2.0))
    what = what_if_pipeline(WhatIf(decode=Decoder.NVJPEG), rows, settings(4), 0.05, 16, cut)
    assert what_if_build_lines(what, str) == [
        "What if decode on the GPU with nvJPEG: no prediction (the stage profile's time ended before it timed the "
        "decoders on the dataset's JPEGs: sweep with a larger --time-budget (`loaderbench profile` times the "
        "decoders too, as figures of their own, not as this prediction))."]


def test_a_question_without_its_inputs_says_why():
    rows = _rows(pipeline(5.0, 2.0))
    assert what_if_pipeline(WhatIf(decode=Decoder.TORCHVISION), rows, settings(4), 0.05, 16,
                            None).why is WhyNoPrediction.NO_PROFILE
    zero = [r for r in rows if r.settings.num_workers == 0]
    assert predict.answer_what_if(WhatIf(stages=(StageChange("A", 2.0),)), rows, None, 0.05, 16,
                                  two_transforms(3.0, 2.0)).why is WhyNoPrediction.NOTHING_MEASURED
    assert what_if_pipeline(WhatIf(stages=(StageChange("A", 2.0),)), zero, settings(0), 0.05, 16,
                            two_transforms(3.0, 2.0)).why is None  # 0 workers: the main process builds
    assert what_if_pipeline(WhatIf(stages=(StageChange("C", 2.0),)), rows, settings(4), 0.05, 16,
                            two_transforms(3.0, 2.0)).stage_names[:2] == ["A", "B"]


# ---------------------------------------------------------------------------------------------
# 4. Where the settings stop: the changes that would act (BeyondKnobs)
# ---------------------------------------------------------------------------------------------


def test_beyond_the_knobs_lists_the_measured_change_first_then_predictions_by_gain():
    # CPU-bound at 500/s on 2 CPUs (the step could take 8,000/s): the decode (PIL JPEG) is 3 ms of
    # the 5-ms build; a --decoder torchvision row measured 700/s.
    rows = _rows(pipeline(5.0, 2.0, cpus=2, cpu_per_sample_s=0.004))
    tv = pipeline(3.5, 2.0, cpus=2, cpu_per_sample_s=0.0028)[0](replace(settings(4), decoder="torchvision"), 0)
    profile = jpeg_profile(stages=[row("decode", "decode", 3.0, 2.4), row("RandomResizedCrop", "transform", 2.0, 1.6)])
    b = predict.beyond_knobs([*rows, tv], settings(4), 0.05, 2, profile)
    assert b is not None and b.samples_per_s == pytest.approx(500) and b.binds is Binds.CPUS
    kinds = [c.kind for c in b.changes]
    assert kinds[0] is ChangeKind.DECODER and b.changes[0].measured == tv.settings
    assert b.changes[0].measured_samples_per_s == pytest.approx(tv.summary.samples_per_s)
    assert b.changes[0].answer is not None and b.changes[0].answer.question.decode is Decoder.TORCHVISION
    predicted = b.changes[1:]
    assert {c.kind for c in predicted} == {ChangeKind.MORE_CPUS, ChangeKind.CHEAPER_STAGE}
    assert [c.gain for c in predicted] == sorted((c.gain for c in predicted), reverse=True)
    assert all((c.gain or 0) > 1.05 and c.measured is None for c in predicted)
    cheaper = next(c for c in predicted if c.kind is ChangeKind.CHEAPER_STAGE)
    assert cheaper.question == WhatIf(stages=(StageChange("RandomResizedCrop", 2.0),))  # the decode has its own
    cpus = next(c for c in predicted if c.kind is ChangeKind.MORE_CPUS)
    assert cpus.question is not None and cpus.question.cpus in (4, 6, 8, 12, 16)
    # Without a profile only what needs none: more CPUs, and the measured decoder row.
    bare = predict.beyond_knobs([*rows, tv], settings(4), 0.05, 2, None)
    assert [c.kind for c in bare.changes] == [ChangeKind.DECODER, ChangeKind.MORE_CPUS] and not bare.profiled


def test_a_large_fixed_cost_per_call_is_named_with_what_getitems_would_buy():
    fetched = BatchedFetchTiming(items=16, rounds=3, one_ms=8.05, batch_ms=8.80)
    assert fetched.per_item_ms == pytest.approx(0.05) and fetched.fixed_ms == pytest.approx(8.0)
    profile = two_transforms(0.05, 8.0, batched_fetch=fetched)
    knee = pipeline(8.05, 10.0, bs=32)[0](settings(2, bs=32), 0)
    from loaderbench.analysis.advice import batched_fetch

    (f,) = batched_fetch(profile, knee)
    assert isinstance(f, BatchedFetch) and f.share == pytest.approx(8.0 / 8.05)
    # Paid once per batch of 32: 8.05 - 8 x 31/32 = 0.30 ms per sample, 26.8x as fast.
    assert f.new_build_ms == pytest.approx(0.30) and f.loader_gain == pytest.approx(8.05 / 0.30)
    assert batched_fetch(two_transforms(20.0, 20.0, batched_fetch=fetched), knee) == []  # 8 of 40 ms: 0.2
    small = BatchedFetchTiming(items=16, rounds=3, one_ms=1.0, batch_ms=15.0)  # 0.07 ms fixed of 10 ms
    assert batched_fetch(two_transforms(5.0, 5.0, batched_fetch=small), knee) == []
    # A build of almost nothing (0.004 ms, 0.0031 of it fixed per call) beside a 2-ms receive: the
    # fixed cost is 78% of the build and 0.15% of the sample's time. Nothing that counts to gain,
    # and no stage of the build is offered cheaper either.
    tiny = BatchedFetchTiming(items=16, rounds=3, one_ms=0.0032, batch_ms=0.0047)
    beside_receive = jpeg_profile(stages=[row("A", "transform", 0.001), row("B", "transform", 0.003),
                                          row("receive", "receive", 2.0, 0.5, where="main")],
                                  decoders={}, decoder_timing=None, batched_fetch=tiny)
    assert tiny.fixed_ms == pytest.approx(0.0031) and beside_receive.sample_ms() == pytest.approx(2.004)
    assert batched_fetch(beside_receive, knee) == []
    rows = _rows(pipeline(5.0, 2.0, cpus=2, cpu_per_sample_s=0.004))
    kinds = [c.kind for c in predict.beyond_knobs(rows, settings(4), 0.05, 2, beside_receive).changes]
    assert ChangeKind.CHEAPER_STAGE not in kinds and ChangeKind.BATCHED_FETCH not in kinds
    # The same build at 3 + 2 ms beside the receive: A twice as cheap is offered.
    real = jpeg_profile(stages=[row("A", "transform", 3.0), row("B", "transform", 2.0),
                                row("receive", "receive", 2.0, 0.5, where="main")], decoders={}, decoder_timing=None)
    assert ChangeKind.CHEAPER_STAGE in [c.kind for c in predict.beyond_knobs(rows, settings(4), 0.05, 2, real).changes]
    from loaderbench.render.findings import finding_sentence

    text = finding_sentence(f)
    assert "about 8.00 ms of every call is fixed (99% of a sample's build time, 8.05 ms)" in text
    assert "once per batch of 32: predicted ~0.30 ms per sample, one worker ~26.8x as fast (a prediction)" in text


# ---------------------------------------------------------------------------------------------
# 5. Through analyze(): the profile of the pick, its tail, what the outputs say
# ---------------------------------------------------------------------------------------------


def stage_record(times_s: list[float], stages: dict[str, float], **kw) -> StageRecord:
    """A profile whose samples took `times_s` each (queued 0), split over `stages` in proportion."""
    total = sum(stages.values())
    samples = [SampleTiming(wall_s={k: t * v / total for k, v in stages.items()},
                            cpu_s={k: t * v / total for k, v in stages.items()}, getitem_wall_s=t, getitem_cpu_s=t,
                            calls={k: 1 for k in stages}, queued_s={k: 0.0 for k in stages}, getitem_queued_s=0.0)
               for t in times_s]
    return StageRecord(stages=[Stage(k, "transform", "worker") for k in stages] + [Stage("collate", "collate", "worker")],
                       samples=samples, batches=[BatchTiming(samples=16, wall_s={"collate": 0.0016}, cpu_s={})],
                       settings=settings(2), device="cpu", wall_s=2.0, time_budget_s=6.0, **kw)


def long_tail_set(off_faster: float) -> ResultSet:
    """A pick at 2 workers, the samples' build 2 ms with 2 of 200 at 40 ms, and the pick measured
    with in_order=False `off_faster` times as fast."""
    measure = pipeline(5.0, 2.0)[0]
    rows = _rows(measure, (1, 2))
    off = pipeline(5.0 / off_faster, 2.0)[0](replace(settings(2), in_order=False), 0)
    record = stage_record([0.002] * 198 + [0.040] * 2, {"A": 1.0})
    rs = ResultSet(config={"measure": {"tolerance": 0.05}}, environment={"usable_cpus": 16}, results=[*rows, off])
    rs.sweep.profile = SweepProfile(settings(2), record=record, wall_s=2.5, budget_s=6.0, in_order=InOrderTrial.TRIED)
    rs.sweep.sweep_wall_s = 50.0
    return rs


def test_a_long_tail_is_named_and_in_order_off_recommended_only_when_measured_faster():
    a = analyze(long_tail_set(1.12))
    (f,) = [f for f in a.recommendation.findings if isinstance(f, LongTail)]
    assert f.tail.long and f.tail.slow == 2 and f.tail.ratio == pytest.approx(20.0)
    assert f.faster and f.recommended and a.recommendation.settings.in_order is False
    assert f.gain == pytest.approx(0.12) and f.trial is InOrderTrial.TRIED
    assert "in_order=False" in a.recommendation.dataloader_call
    b = analyze(long_tail_set(1.02))
    (g,) = [f for f in b.recommendation.findings if isinstance(f, LongTail)]
    assert not g.faster and not g.recommended and b.recommendation.settings.in_order is True
    from loaderbench.render.findings import finding_sentence

    assert "the slowest 1% of samples take 40.0 ms on average, 20x the median 2.00 ms" in finding_sentence(f)
    assert "in_order=False measured 448 samples/s against 400 in order (+12.0%; " in finding_sentence(f)
    assert finding_sentence(f).endswith("): recommended.")
    assert finding_sentence(g).endswith("not faster beyond the tolerance, so the batches keep their order.")
    # One sample held up once is no tail.
    once = long_tail_set(1.12)
    once.sweep.profile = replace(once.sweep.profile, record=stage_record([0.002] * 199 + [0.040], {"A": 1.0}))
    assert not [f for f in analyze(once).recommendation.findings if isinstance(f, LongTail)]


def test_the_profile_is_in_the_result_json_and_summed_up_when_the_loader_binds():
    rs = long_tail_set(1.02)
    a = analyze(rs)
    assert a.profile is not None and a.profile.loader_binds  # 1 - 400/8000: loader-bound
    assert a.profile.sweep_share == pytest.approx(2.5 / 50.0) and a.profile.settings == settings(2)
    data = json.loads(json.dumps(rs.to_dict()))
    stages = data["analysis"]["profile"]["stages"]
    assert [s["name"] for s in stages] == ["A", "collate"]
    assert set(stages[0]) >= {"name", "where", "ms_per_sample", "cpu_ms_per_sample", "share"}
    assert set(data["analysis"]["profile"]["sample_build_ms"]) >= {"p50", "p90", "p99"}
    from loaderbench.results import ResultSet as RS

    back = RS.from_dict(data)
    assert back.analysis.profile == a.profile and back.sweep.profile == rs.sweep.profile
    from loaderbench.render.footer import footer_lines

    short = footer_lines(rs)
    (line,) = [x for x in short if x.startswith("Stage profile of the pick")]
    assert line.startswith("Stage profile of the pick (2 workers, in order), where each sample's time goes: A 96%, ")
    assert "(it took 2.0 s, 5% of the sweep; --verbose: the table)." in line
    verbose = footer_lines(rs, verbose=True)
    assert any(x.startswith("  A (worker): ") for x in verbose)
    assert not any(x.startswith("Stage profile of the pick (2 workers, in order), where") for x in verbose)


# ---------------------------------------------------------------------------------------------
# 6. The sentences: every what-if labelled a prediction, with what binds
# ---------------------------------------------------------------------------------------------


def test_the_what_if_sentences_say_prediction_and_what_binds():
    from loaderbench.render.pipeline import beyond_knobs_lines, what_if_build_lines

    rows = _rows(pipeline(5.0, 2.0))
    what = what_if_pipeline(WhatIf(cpus=16, stages=(StageChange("A", 2.0),)), rows, settings(4), 0.05, 16,
                            two_transforms(3.0, 2.0))
    (line,) = what_if_build_lines(what, lambda s: f"{s.num_workers} workers")
    assert line.startswith("What if 16 usable CPUs, A 2x faster (a prediction from the pipeline model")
    assert "A 3.00 -> 1.50 ms per sample; one worker builds a sample 1.43x faster" in line
    # The knee quoted (27 workers, ~6,656 samples/s, stall ~17% of the 2-ms step's 8,000) is held
    # under the main thread's rate by the workers: a measured row there would read loader-bound.
    assert ("stall ~17% (27 workers): the step binds, with the workers close behind (they still hold it back: a "
            "measured run there would read loader-bound). Predicted samples/s by num_workers: 0: ~") in line
    # With 8 CPUs the curve goes to 16 workers, still short of the step: more workers would go further.
    eight = what_if_pipeline(WhatIf(cpus=8, stages=(StageChange("A", 2.0),)), rows, settings(4), 0.05, 16,
                             two_transforms(3.0, 2.0))
    assert eight.binds is Binds.WORKERS and max(w for w, _ in eight.curve) == 16
    (no,) = what_if_build_lines(what_if_pipeline(WhatIf(decode=Decoder.NVJPEG), rows, settings(4), 0.05, 16,
                                                 jpeg_profile()), str)
    assert no == ("What if decode on the GPU with nvJPEG: no prediction (it cannot be predicted here: decoding on "
                  "the GPU is timed on a CUDA GPU, and this run had none).")
    b = predict.beyond_knobs(_rows(pipeline(5.0, 2.0, cpus=2, cpu_per_sample_s=0.004)), settings(4), 0.05, 2,
                             jpeg_profile(stages=[row("decode", "decode", 3.0, 2.4),
                                                  row("RandomResizedCrop", "transform", 2.0, 1.6)]))
    lines = beyond_knobs_lines(b, lambda s: f"{s.num_workers} workers")
    assert lines[0].startswith("Beyond the settings (no setting clears the loader bottleneck at 500 samples/s")
    # 8x the CPUs (none fewer clears the stall) first: the biggest predicted gain.
    assert lines[1].startswith("  16 usable CPUs: predicted ~") and lines[1].endswith(", then the usable CPUs bind.")
    assert any(re.match(r"  Decode with torchvision\.io on the CPU: predicted ~[\d,]+ samples/s \([\d.]+x the pick; "
                        r"the loader's rate ~1\.\dx\)", x) for x in lines)
    assert all("predicted" in x for x in lines[1:])
    assert b.compute_samples_per_s == pytest.approx(_rows(pipeline(5.0, 2.0))[0].summary.compute_ceiling_samples_per_s)


def test_a_plateau_below_the_compute_ceiling_is_not_said_to_be_the_step_alone():
    from loaderbench.conclusions import BeyondKnobs
    from loaderbench.render.pipeline import beyond_knobs_lines

    def line(plateau: float) -> str:
        b = BeyondKnobs(settings(8), 2_915.0, 0.38, [], profiled=True, binds=Binds.STEP,
                        plateau_samples_per_s=plateau, tolerance=0.05, compute_samples_per_s=4_700.0)
        (only,) = beyond_knobs_lines(b, str)
        return only

    # 3,236 of 4,700 (69%, past the 5% tolerance): the step alone would run faster; say what holds it.
    assert ("plateau at ~3,236 samples/s, where the step binds, held to 69% of its ~4,700 samples/s alone (the "
            "compute ceiling) by the main thread taking each batch between steps and by a loader close behind "
            "(a prediction)") in line(3_236.0)
    # 4,600 (98%): within the tolerance, the step binds.
    assert "plateau at ~4,600 samples/s, where the step binds (a prediction)" in line(4_600.0)


# ---------------------------------------------------------------------------------------------
# 7. The sweep profiles its pick, within its budget, and tries in_order=False for a long tail
# ---------------------------------------------------------------------------------------------


def _sweep_config(**measure):
    from loaderbench.model import ComputeSpec
    from loaderbench.orchestration.config import build_config
    from loaderbench.orchestration.plan import Machine, resolve_defaults

    cfg = build_config(None, {
        "dataset": {"kind": "tensor"},
        "compute": {"step": ComputeSpec(kind="sleep", ms=12.0)},
        "grid": {"num_workers": (0, 2), "batch_size": (16,)},
        "measure": {"repeats": 2, "search": "grid", **measure},
    })
    return resolve_defaults(cfg, Machine(cuda=False, usable_cpus=2))


class InOrderRunner:
    """A fake runner: 0 workers wait 32 ms per batch, 2 workers 6 ms in order and 2 ms with
    in_order=False, a 12 ms step of 16 (1,333/s at most)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, bool, int]] = []

    def __call__(self, job, **kw):
        from loaderbench.measure.isolation import Outcome
        from tests.helpers import trial

        s = job.settings
        self.calls.append((s.num_workers, s.in_order, job.seed))
        wait = 0.032 if s.num_workers == 0 else (0.006 if s.in_order else 0.002)
        return Outcome(status="ok", trial=trial(wait, 0.012))


def test_the_sweep_profiles_its_pick_and_measures_in_order_off_for_a_long_tail(tmp_path):
    from loaderbench.orchestration.plan import Machine
    from loaderbench.orchestration.profile import sweep_profile_budget_s
    from loaderbench.orchestration.run import run_sweep

    asked = []

    def profiler(cfg, pick, budget_s):
        asked.append((pick, budget_s))
        return SweepProfile(pick, record=stage_record([0.002] * 196 + [0.040] * 4, {"A": 1.0}), wall_s=1.5,
                            budget_s=budget_s)

    runner = InOrderRunner()
    cfg = _sweep_config()
    rs = run_sweep(cfg, output=tmp_path / "r.json", environment={"usable_cpus": 2}, machine=Machine(cuda=False, usable_cpus=2),
                   runner=runner, save=lambda r, p: None, profiler=profiler)
    # A fake sweep takes no time: the profile's budget is its least (8% of the sweep so far).
    assert asked == [(settings(2), sweep_profile_budget_s(cfg.time_budget_s, elapsed_s=0.0))]
    assert asked[0][1] == pytest.approx(0.5)
    assert rs.sweep.profile.in_order is InOrderTrial.TRIED and rs.sweep.timing.profile_s >= 0.0
    # The grid's 4 trials, then in_order=False at the pick, twice (--repeats 2; the pick has its two).
    assert runner.calls[4:] == [(2, False, 0), (2, False, 1)]
    assert rs.recommendation.settings == replace(settings(2), in_order=False)  # 2 ms against 6 ms of wait
    (f,) = [f for f in rs.analysis.recommendation.findings if isinstance(f, LongTail)]
    assert f.recommended and f.trial is InOrderTrial.TRIED
    # --no-profile: no profile, no in_order trial.
    runner = InOrderRunner()
    rs = run_sweep(replace(cfg, profile=False), output=tmp_path / "r.json", environment={"usable_cpus": 2},
                   machine=Machine(cuda=False, usable_cpus=2), runner=runner, save=lambda r, p: None, profiler=profiler)
    assert rs.sweep.profile is None and len(runner.calls) == 4 and len(asked) == 1


def test_a_short_tail_or_a_pick_with_fewer_than_two_workers_tries_nothing(tmp_path):
    from loaderbench.orchestration.plan import Machine
    from loaderbench.orchestration.run import run_sweep

    # A pick of 1 worker: its batches come in order whatever in_order says (nothing to overtake).
    for times, grid, trial in (([0.002] * 200, (0, 2), None), ([0.002] * 196 + [0.040] * 4, (0,), InOrderTrial.NO_WORKERS),
                               ([0.002] * 196 + [0.040] * 4, (1,), InOrderTrial.NO_WORKERS)):
        runner = InOrderRunner()
        cfg = _sweep_config().with_grid(num_workers=grid)
        rs = run_sweep(cfg, output=tmp_path / "r.json", environment={"usable_cpus": 2},
                       machine=Machine(cuda=False, usable_cpus=2), runner=runner, save=lambda r, p: None,
                       profiler=lambda c, pick, b, t=times: SweepProfile(pick, record=stage_record(t, {"A": 1.0})))
        assert rs.sweep.profile.in_order is trial and all(in_order for _, in_order, _ in runner.calls)
        # The analysis the output shows has it too (it said "not measured: add --in-order on,off").
        found = [f for f in (rs.recommendation.findings if rs.recommendation else []) if isinstance(f, LongTail)]
        assert [f.trial for f in found] == ([] if trial is None else [trial])


def test_the_profiles_budget_is_a_share_of_the_time_budget_within_its_bounds():
    from loaderbench.orchestration.profile import sweep_profile_budget_s

    # What the search keeps for it: 8% of --time-budget.
    assert sweep_profile_budget_s(120.0) == pytest.approx(9.6)
    # Once the sweep ran: 8% of its time so far, at least 0.5 s, at most 15 s.
    assert sweep_profile_budget_s(120.0, elapsed_s=20.0) == pytest.approx(1.6)
    assert sweep_profile_budget_s(120.0, elapsed_s=2.0) == pytest.approx(0.5)
    assert sweep_profile_budget_s(3600.0, elapsed_s=3000.0) == pytest.approx(15.0)
    # At most what --time-budget has left, and a spent budget still gets the least a profile takes.
    assert sweep_profile_budget_s(120.0, left_s=1.0, elapsed_s=100.0) == pytest.approx(1.0)
    assert sweep_profile_budget_s(120.0, left_s=-5.0, elapsed_s=100.0) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------
# 8. What the profile times besides the stages (measure/alternatives.py)
# ---------------------------------------------------------------------------------------------


def test_the_jpegs_a_decoder_is_given_are_kept_whatever_form_they_come_in(tmp_path):
    import io

    import torch

    from loaderbench.measure.alternatives import jpeg_of
    from tests.profile_datasets import jpeg_bytes

    data = jpeg_bytes(64, 48)
    path = tmp_path / "a.jpg"
    path.write_bytes(data)
    bio = io.BytesIO(b"xx" + data)
    bio.seek(2)
    with open(path, "rb") as fh:
        assert jpeg_of(fh) == data and fh.tell() == 0  # read, then put back
    assert jpeg_of(str(path)) == data and jpeg_of(path) == data and jpeg_of(bio) == data and bio.tell() == 2
    assert jpeg_of(torch.frombuffer(bytearray(data), dtype=torch.uint8)) == data and jpeg_of(data) == data
    assert jpeg_of(b"\x89PNG....") is None and jpeg_of(42) is None and jpeg_of(tmp_path / "missing") is None


def test_the_two_cpu_decoders_are_timed_on_the_datasets_jpegs_with_its_transforms():
    from loaderbench.measure.alternatives import time_decoders
    from loaderbench.workload.datasets import imagenet_train_transform
    from tests.profile_datasets import jpeg_bytes

    compose = imagenet_train_transform()
    names = [type(t).__name__ for t in compose.transforms]
    t = time_decoders([jpeg_bytes(seed=i) for i in range(4)], list(zip(names, compose.transforms)), threads=1,
                      rounds=2)
    assert t is not None and (t.images, t.rounds, t.threads) == (4, 2, 1)
    assert t.transforms == names == ["RandomResizedCrop", "RandomHorizontalFlip", "PILToTensor"]
    assert t.dropped == ["PILToTensor"] and t.stopped_at is None and t.per_transform["PILToTensor"][1] == 0.0
    assert min(t.pil_cpu_ms, t.torchvision_cpu_ms, t.transforms_pil_cpu_ms, t.transforms_tensor_cpu_ms) > 0
    # The thread's CPU time: libjpeg-turbo behind both, torchvision without PIL's image object and
    # conversion; v2's crop on a uint8 tensor against PIL's (a ratio within one test, not a nominal time).
    assert t.torchvision_cpu_ms < t.pil_cpu_ms
    assert time_decoders([], [], threads=1) is None


def test_a_transform_that_refuses_a_tensor_ends_the_comparison_there():
    from loaderbench.measure.alternatives import time_decoders
    from tests.profile_datasets import jpeg_bytes

    class PilOnly:
        def __call__(self, im):
            return im.rotate(10)  # a tensor has no rotate

    class Later:
        def __call__(self, x):
            return x

    t = time_decoders([jpeg_bytes()], [("PilOnly", PilOnly()), ("Later", Later())], threads=1, rounds=1)
    assert t.stopped_at == "PilOnly" and t.transforms == [] and t.transforms_pil_cpu_ms is None


def test_a_batched_fetch_measures_the_fixed_cost_of_a_call():
    from loaderbench.measure.alternatives import probe_batched_fetch
    from tests.profile_datasets import make_arrow_like, make_arrow_like_batched

    # 8 ms fixed per query, 0.05 ms per row (sleeps: what they cost does not depend on the load).
    t = probe_batched_fetch(make_arrow_like(), list(range(200)), items=16, rounds=3)
    assert t is not None and t.items == 16 and t.rounds == 3
    assert t.fixed_ms == pytest.approx(8.0, rel=0.25) and t.batch_ms < 3 * t.one_ms
    assert probe_batched_fetch(make_arrow_like_batched(), list(range(200))) is None  # the DataLoader batches it
    from loaderbench.workload.datasets import TensorCostDataset

    assert probe_batched_fetch(TensorCostDataset(64, (4,), 0.0, 0.0), list(range(64))) is None  # refuses a list

    import torch

    class IgnoresTheIndex(torch.utils.data.Dataset):
        # A __getitem__ that takes a list without complaint but returns one sample: no batched fetch.
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.zeros(3, 8), 1

    assert probe_batched_fetch(IgnoresTheIndex(), list(range(64))) is None

    class SixteenRows(IgnoresTheIndex):
        # ... even when its one sample has as many rows as the items asked for.
        def __getitem__(self, i):
            return torch.zeros(16, 8), 1

    assert probe_batched_fetch(SixteenRows(), list(range(64)), items=16) is None

    class PassesTheIndexThrough(torch.utils.data.Dataset):
        # ... or passes its list of indices through as the label: asked for 2, it returns one pair.
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.zeros(16), i

    assert probe_batched_fetch(PassesTheIndexThrough(), list(range(64)), items=2) is None
    from loaderbench.measure.alternatives import holds_samples

    assert holds_samples([(1, 2)] * 16, 16) and holds_samples((torch.zeros(16, 3), torch.arange(16)), 16)
    assert not holds_samples((torch.zeros(3, 8), 1), 16) and not holds_samples({"x": torch.zeros(15, 2)}, 16)
    assert not holds_samples((torch.zeros(16, 8), 1), 16, one=(torch.zeros(16, 8), 1))
    assert holds_samples((torch.zeros(16, 8), torch.arange(16)), 16, one=(torch.zeros(8), 1))
    # A sample that is a pair, from a __getitem__ that passes its list of 2 indices through as the
    # label: (tensor(16), [3, 4]) is one sample, not 2, though a tuple of 2; a list of 2 pairs is 2
    # samples, of different sizes or not; a TensorDataset's 2 rows still are.
    pair = (torch.zeros(16), 3)
    assert not holds_samples((torch.zeros(16), [3, 4]), 2, one=pair)
    assert holds_samples([(torch.zeros(16), 3), (torch.zeros(9), 4)], 2, one=pair)
    assert holds_samples((torch.zeros(2, 8), torch.arange(2)), 2, one=(torch.zeros(8), 1))


def test_the_sweeps_profile_keeps_the_jpegs_and_times_the_decoders():
    from loaderbench.measure.stages import CAPTURE, ProfilePlan, profile_stages
    from loaderbench.workload.datasets import SyntheticJPEGDataset, load_synthetic_jpegs

    ds = SyntheticJPEGDataset(load_synthetic_jpegs(48, (320, 240), 90, 0))
    record = profile_stages(ds, settings(0), ProfilePlan(samples=20, time_budget_s=30.0, attribute=False,
                                                         alternatives=True))
    assert record.jpegs_captured == CAPTURE and record.decoder_timing is not None
    assert record.decoder_timing.images == CAPTURE and record.batched_fetch is None  # a list index raises
    assert record.gpu_decode is None and len(record.plain_queued_s) in (0, len(record.plain_s))
    # The interceptions are gone: the dataset decodes as before.
    assert ds[0][0].shape == (3, 224, 224)


def test_nvjpeg_is_not_timed_without_cuda():
    from loaderbench.measure.alternatives import time_gpu_decode
    from tests.profile_datasets import jpeg_bytes

    assert time_gpu_decode([jpeg_bytes()], 16, "cpu") is None and time_gpu_decode([], 16, "cuda:0") is None


@pytest.mark.gpu
def test_nvjpeg_is_timed_per_batch_on_the_gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from loaderbench.measure.alternatives import time_gpu_decode
    from tests.profile_datasets import jpeg_bytes

    t = time_gpu_decode([jpeg_bytes(seed=i) for i in range(4)], 32, "cuda:0", reps=3)
    assert t is not None and (t.batch_size, t.reps, t.device) == (32, 3, "cuda:0")
    assert 0 < t.decode_ms_per_batch <= t.decode_crop_ms_per_batch and t.cpu_ms_per_batch >= 0


def test_show_answers_combined_changes_from_the_kept_profile_in_every_format():
    from pathlib import Path

    from typer.testing import CliRunner

    from loaderbench.cli import app

    kept = str(Path(__file__).resolve().parent / "data" / "results-v3-profile-cpu.json")
    args = ["show", kept, "--what-if", "cpus=4", "--what-if", "decode=torchvision", "--what-if", "stage=collate:inf"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    flat = " ".join(res.stdout.splitlines())  # the console wraps a long sentence at a space
    line = flat[flat.index("What if "):flat.index("Stage profile of the pick")]
    assert line.startswith("What if 4 usable CPUs, decode with torchvision.io on the CPU, collate removed (a prediction")
    assert "collate 0.082 -> 0.000 ms per sample" in line and "binds" in line
    data = json.loads(CliRunner().invoke(app, [*args, "--format", "json"]).stdout)
    w = data["analysis"]["what_if"]
    assert w["question"] == {"cpus": 4, "disk_mb_per_s": None, "disk_iops": None, "ranks": None,
                             "stages": [{"name": "collate", "speedup": None}], "decode": "torchvision"}
    assert w["why"] is None and w["binds"] in {b.value for b in Binds} and w["usable_cpus"] == 4
    assert data["analysis"]["profile"]["sample_build_ms"]["p50"] > 0
    bad = CliRunner().invoke(app, ["show", kept, "--what-if", "stage=collate"])
    assert bad.exit_code == 2 and "--what-if: expected stage=NAME:F" in bad.output and "cpus=K" not in bad.output


def test_the_sweeps_profile_gives_the_samples_most_of_its_budget():
    from loaderbench.measure.stages import _shares_with_alternatives as shares

    # Where each pass ends, in the order they run: the samples first (their tail needs a few
    # hundred), then the alternatives (they need the decoders the samples saw), then the receive.
    assert shares(in_worker=False, workers=True, attribute=False) == pytest.approx(
        {"samples": 0.6, "alternatives": 0.8, "loader": 1.0})
    assert shares(in_worker=False, workers=False, attribute=False) == pytest.approx({"samples": 0.75, "alternatives": 1.0})
    assert list(shares(in_worker=True, workers=True, attribute=True)) == ["loader", "alternatives", "attribution"]


def test_show_with_a_stage_the_profile_lacks_is_one_line_and_exit_2():
    from typer.testing import CliRunner

    from loaderbench.cli import app

    kept = Path(__file__).resolve().parent / "data" / "results-v3-profile-cpu.json"
    res = CliRunner().invoke(app, ["show", str(kept), "--what-if", "stage=nosuch:2"])
    assert res.exit_code == 2
    line = res.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "--what-if stage=nosuch:2: " in line and "decode, RandomResizedCrop" in line
    assert "pin" not in line.split("its stages", 1)[1]  # a CPU run's profile timed no copy
    # pin and H2D are refused the same way, naming the flags that act on them; the stages offered
    # are those a question may name (the receive among them, never pin or H2D).
    res = CliRunner().invoke(app, ["show", str(kept), "--what-if", "stage=pin:2"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    line = " ".join(res.output.split())
    assert "--what-if stage=pin:2: pin and H2D are the main process's copy" in line
    assert "--pin-memory and --prefetch act on them" in line
    offered = line.rsplit("(", 1)[1]
    assert "receive" in offered and "pin" not in offered and "H2D" not in offered


def test_the_profiles_own_cost_is_said_as_measured_or_as_nothing_measurable():
    # Timed samples 3% dearer than plain ones: said. 0.4% cheaper: the two sets are different
    # samples of one dataset, so it is within their spread, never a negative cost.
    from loaderbench.render.pipeline import profile_lines

    def took(overhead: float) -> str:
        return profile_lines(jpeg_profile(cost=replace(COST, overhead=overhead)), str)[-1]

    assert "its stage timing cost +3.0% per sample" in took(0.03)
    assert "its stage timing cost nothing measurable per sample (-0.4%, within the samples' spread)" in took(-0.004)


@pytest.mark.parametrize("extra_ms, copy_share, expected", [
    (6.9, 0.8, "h2d"),       # 6.9 / (6.9 + 54.5) = 11% of the main thread, most of it the copy
    (6.9, 0.3, "step"),      # 11%, mostly the receive: under RECEIVE_BINDS_SHARE, the step
    (32.0, 0.3, "receive"),  # 32 / (32 + 54.5) = 37%, mostly the receive
    (32.0, 0.9, "h2d"),
    (2.0, 0.9, "step"),      # 2 / 56.5 = 3.5%: under LOADER_BOUND_STALL, no verdict would name it
])
def test_a_main_thread_that_binds_names_what_a_measured_verdict_would(extra_ms, copy_share, expected):
    # ResNet-50 at batch 256: the step 54.5 ms (4,697 samples/s); the main thread's time besides
    # the step `extra_ms` per batch, `copy_share` of it the host-to-device copy; workers far
    # faster than the main thread, so it binds.
    from loaderbench.analysis.predict import Fit, binds_at

    model = Fit(per_worker=2_000.0, cpu_s_per_sample=None, main=256 / (extra_ms / 1e3), zero_workers=None,
                compute=256 / 0.0545, sharpness=6.0, main_h2d=copy_share)
    assert binds_at(model, 16, 16).value == expected


@pytest.mark.parametrize("cpus_rate, sharpness, near", [
    # The main thread: the step 54.5 ms + 0.7 ms receive per batch of 256 = 4,638 samples/s.
    # U / kappa = 12 / (12 / 5,300) = 5,300 per s: softmin(5,300, 4,638, 6) = 4,638 x (1 +
    # (4,638 / 5,300)^6)^(-1/6) = 4,638 x 1.449^(-1/6) = 4,638 x 0.940 = 4,360, 6.0% under the
    # main thread: a measured row waits for batches that share of its time.
    (5_300.0, 6.0, "cpus"),
    (5_300.0, 30.0, None),   # a hard corner: 4,638 x (1 + 0.0182)^(-1/30) = 4,635, nothing behind
    (9_000.0, 6.0, None),    # 4,638 x (1 + 0.0188)^(-1/6) = 4,624: 0.3% under, nothing behind
])
def test_the_loader_close_behind_a_binding_step_is_named(cpus_rate, sharpness, near):
    from loaderbench.analysis.predict import Fit, binds_at, binds_near, softmin

    model = Fit(per_worker=2_000.0, cpu_s_per_sample=12 / cpus_rate, main=256 / 0.0007, zero_workers=None,
                compute=256 / 0.0545, sharpness=sharpness)
    main = model.main_thread
    assert main == pytest.approx(4_638, abs=1)
    assert binds_at(model, 16, 12) is Binds.STEP
    got = binds_near(model, 16, 12)
    assert (None if got is None else got.value) == near
    if near is not None:
        assert softmin(cpus_rate, main, sharpness) == pytest.approx(4_360, abs=5)
    # Where the loader binds outright, nothing is named close behind.
    assert binds_near(replace(model, cpu_s_per_sample=12 / 3_000.0), 16, 12) is None


@pytest.mark.parametrize("workers, expected", [
    (8, "workers"),   # 8 x 400 = 3,200 samples/s, the CPUs' 12 / (12 / 4,600) = 4,600: 70% of them
    (10, "cpus"),     # 4,000: 87% of the CPUs' rate, CPU_SATURATED (85%) or more, as a measured row names it
    (11, "cpus"),     # 4,400: 96%
    (13, "cpus"),     # 5,200 > 4,600: the CPUs' own bound is the lower
])
def test_workers_that_would_saturate_the_cpus_are_named_as_the_cpus(workers, expected):
    from loaderbench.analysis.predict import Fit, binds_at

    model = Fit(per_worker=400.0, cpu_s_per_sample=12 / 4_600.0, main=None, zero_workers=None,
                compute=50_000.0, sharpness=6.0)
    assert binds_at(model, workers, 12).value == expected


@pytest.mark.parametrize("zero_rate, expected", [
    (1_000.0, "workers"),   # loading slower than the step: it binds, workers would take it off
    (3_000.0, "workers"),   # (1/3,000) / (1/3,000 + 1/1,600) = 35% of the time spent loading
    (100_000.0, "step"),    # 1/100,000 / (1/100,000 + 1/1,600) = 1.6%: under LOADER_BOUND_STALL
])
def test_without_workers_loading_in_turn_with_the_step_binds_while_it_takes_a_stalls_share(zero_rate, expected):
    from loaderbench.analysis.predict import Fit, binds_at

    model = Fit(per_worker=None, cpu_s_per_sample=None, main=None, zero_workers=zero_rate, compute=1_600.0,
                sharpness=6.0)
    assert binds_at(model, 0, 2).value == expected


def test_a_build_change_best_without_workers_names_the_main_process_not_more_workers():
    # Batch 3, a 5-ms step: 0 workers wait 1.5 ms a batch (A 0.3 + B 0.2 ms a sample: 3 / 6.5 ms
    # = 462 samples/s); with 2 and 4 workers the main process takes 2.7-2.8 ms to receive each
    # batch (390 samples/s: no loader rate for workers). A 2x cheaper: 1.05 ms a batch, 3 / 6.05
    # ms = 496 samples/s, a stall of 1 - 496 / 600 = 17%: not "the step binds"; and the rows
    # with workers, slower and held by their receive, say more workers go no further.
    from tests.test_figures import main_bound_rows

    rs = main_bound_rows(0.0015)
    what = what_if_pipeline(WhatIf(stages=(StageChange("A", 2.0),)), rs.results, settings(0, bs=3), 0.05, 2,
                            two_transforms(0.3, 0.2))
    assert what.why is None and what.knee_workers == 0
    assert what.knee_samples_per_s == pytest.approx(496, rel=0.01) and what.knee_stall_fraction > 0.15
    assert what.binds is Binds.MAIN_PROCESS


def test_beyond_the_settings_offers_the_stage_whose_halving_goes_furthest_not_the_longest():
    # A build of 5 ms a sample on 2 CPUs: A spins 2 ms of CPU, B sleeps 3 ms (no CPU). 8 workers
    # would build 1,600 samples/s, the CPUs only 2 / 2 ms = 1,000: they bind (a 2-ms step of 16,
    # 8,000/s, is far off). B halved saves no CPU: still 1,000. A halved: 2 / 1 ms = 2,000, so A
    # is the stage offered, though B takes longer.
    rows = _rows(pipeline(5.0, 2.0, cpus=2, cpu_per_sample_s=0.002))
    profile = jpeg_profile(stages=[row("A", "transform", 2.0, 2.0), row("B", "transform", 3.0, 0.0)],
                           decoders={}, decoder_timing=None)
    b = predict.beyond_knobs(rows, settings(8), 0.05, 2, profile)
    cheaper = [c for c in b.changes if c.kind is ChangeKind.CHEAPER_STAGE]
    assert [c.question.stages[0].name for c in cheaper] == ["A"]
    b_alone = what_if_pipeline(WhatIf(stages=(StageChange("B", 2.0),)), rows, settings(8), 0.05, 2, profile)
    assert max(x for _, x in b_alone.curve) == pytest.approx(1000, rel=0.05)


def test_a_cpus_what_if_names_the_workers_close_behind_a_knee_under_the_main_threads_rate():
    # Workers of 200 samples/s each, a 2-ms step of 16 with a 0.2-ms receive: the main thread runs
    # 1 / (1/8,000 + 1/80,000) = 7,273 samples/s, k = 6. On 32 CPUs the curve flattens at 64
    # workers (softmin(12,800, 7,273) = 7,233): the step binds there. With a 10% tolerance the
    # knee is the fewest workers within 10% of that, ~6,510 (L ~7,340, ~37 workers): 10.5% under
    # the main thread, so a measured row there would wait for batches: the workers close behind.
    # With a 2% tolerance the knee (~7,089) is 2.5% under it: nothing named behind.
    from loaderbench.analysis.predict import what_if_cpus

    rows = _rows(pipeline(5.0, 2.0))
    loose = what_if_cpus(rows, settings(4), 32, 0.10, measured_cpus=16)
    assert loose.binds is Binds.STEP and loose.binds_near is Binds.WORKERS
    assert loose.knee_samples_per_s == pytest.approx(6_510, rel=0.02)
    tight = what_if_cpus(rows, settings(4), 32, 0.02, measured_cpus=16)
    assert tight.binds is Binds.STEP and tight.binds_near is None


def test_a_profile_that_timed_no_sample_says_so_in_one_line():
    # Its budget ended before a sample was timed (a stream whose __iter__ spends a second on an
    # index): no empty list of stages after "where each sample's time goes:".
    from loaderbench.render.pipeline import profile_summary_line

    empty = jpeg_profile(stages=[row("rest of __iter__", "rest", None)], samples=0)
    line = profile_summary_line(empty, lambda s: "1 worker")
    assert line.startswith("Stage profile of the pick: no sample was timed within its share of the budget (it took ")
    assert "where each sample's time goes" not in line
