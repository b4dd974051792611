"""The stage profile (`loaderbench profile`): the stage timer on a fake clock, what is intercepted
and put back, the table computed by hand, stages of known cost against a reference timed in the
same test, the profiler's attribution of a plain dataset, the command end to end and its errors."""

from __future__ import annotations

import builtins
import io
import json
import statistics
import threading
import time
from pathlib import Path

import pytest
import torch
from PIL import Image, ImageFile
from rich.console import Console
from typer.testing import CliRunner

from loaderbench.analysis.stages import StageNA, summarize_profile, waiting
from loaderbench.cli import app
from loaderbench.measure.stages import (
    Interceptions,
    ProfilePlan,
    SampleProfiler,
    StageTimer,
    find_transforms,
    profile_stages,
    top_functions,
)
from loaderbench.model import (
    BatchTiming,
    DatasetSpec,
    FunctionTime,
    LoaderSettings,
    SampleTiming,
    Stage,
    StageKind,
    StageRecord,
)
from tests import profile_datasets as pd
from tests.helpers import FakeClock, measured_again_if_missed

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = ROOT / "tests" / "data" / "expected"
runner = CliRunner()


def settings(nw: int = 0, bs: int = 4, pin: bool = False) -> LoaderSettings:
    return LoaderSettings(num_workers=nw, pin_memory=pin, prefetch=False, prefetch_factor=2 if nw else None,
                          persistent_workers=False, batch_size=bs)


# ---------------------------------------------------------------------------------------------
# The timer


def test_nested_stages_count_as_self_time_on_a_fake_clock(fake_clock):
    cpu, queued = FakeClock(), FakeClock()
    timer = StageTimer(wall=fake_clock, cpu=cpu, queued=queued)
    timer.armed = True
    enters: list[str] = []
    timer.on_enter, timer.on_exit = (lambda: enters.append("enter")), (lambda: enters.append("exit"))

    def read() -> None:
        fake_clock.advance(0.002)  # 2 ms waiting on a read: no CPU
        cpu.advance(0.0001)

    def decode() -> None:
        fake_clock.advance(0.003)
        cpu.advance(0.002)
        queued.advance(0.001)  # 1 ms of it queued behind another process
        timer.call("read", StageKind.READ, read, (), {})
        timer.call("decode", StageKind.DECODE, lambda: fake_clock.advance(0.001), (), {})  # decode inside decode
        fake_clock.advance(0.004)
        cpu.advance(0.004)

    timer.call("decode", StageKind.DECODE, decode, (), {})
    t = timer.take()
    # decode: 3 + 1 (the nested decode is the same stage: not split) + 4 = 8 ms; the read's 2 ms are its own.
    assert t.wall_s == pytest.approx({"decode": 0.008, "read": 0.002})
    assert t.cpu_s == pytest.approx({"decode": 0.006, "read": 0.0001})
    assert t.queued_s == pytest.approx({"decode": 0.001, "read": 0.0})
    assert t.calls == {"decode": 1, "read": 1}
    assert enters == ["enter", "exit"]  # once around the outermost stage
    assert timer.take().wall_s == {}


def test_the_timer_passes_calls_through_unarmed_or_from_another_thread(fake_clock):
    timer = StageTimer(wall=fake_clock, cpu=FakeClock())
    assert timer.call("read", StageKind.READ, lambda: 5, (), {}) == 5  # not armed
    timer.armed = True
    out: list[int] = []
    t = threading.Thread(target=lambda: out.append(timer.call("read", StageKind.READ, lambda: 7, (), {})))
    t.start()
    t.join()
    assert out == [7] and timer.take().calls == {}


def test_waiting_is_wall_neither_on_a_cpu_nor_queued_for_one():
    assert waiting(4.0, 0.02) and not waiting(4.0, 3.9) and not waiting(0.04, 0.0)
    assert not waiting(4.0, 1.0, queued_ms=2.5)  # other load, not I/O: 0.5 ms blocked of 1.5 unqueued
    assert waiting(4.0, 1.0, queued_ms=0.5)
    assert waiting(8.4, 0.04, queued_ms=4.3)  # a 4 ms sleep on a busy machine, queued after it woke


# ---------------------------------------------------------------------------------------------
# What is intercepted, and put back


def test_transforms_are_found_named_by_class_and_put_back():
    from torchvision import transforms
    from torchvision.transforms import v2

    inner = v2.Compose([v2.RandomHorizontalFlip()])
    outer = transforms.Compose([pd.Spin(0.0), inner, pd.Spin(0.0), transforms.Lambda(lambda x: x)])
    lone = transforms.ToTensor()

    class Holder(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.pipeline = type("P", (), {})()
            self.pipeline.aug = outer  # found on the user's own object, one level down
            self.target_transform = lone
            self.also = outer  # the same Compose twice: found once

        def __len__(self) -> int:
            return 1

        def __getitem__(self, i: int):
            return self.pipeline.aug(i)

    ds = Holder()
    found = find_transforms(ds)
    assert [id(c) for c in found.composes] == [id(outer)] and [a for _, a, _ in found.lone] == ["target_transform"]
    before = outer.transforms
    timer = StageTimer()
    inter = Interceptions(ds, timer, where="worker")
    assert [s.name for s in inter.stages] == ["read", "decode", "Spin", "RandomHorizontalFlip", "Spin #2", "Lambda",
                                              "ToTensor"]
    assert {s.where for s in inter.stages} == {"worker"}
    open_before, pil_open, load, convert = builtins.open, Image.open, ImageFile.ImageFile.load, Image.Image.convert
    with inter:
        assert outer.transforms is not before and builtins.open is not open_before and Image.open is not pil_open
        assert ds.target_transform is not lone
        assert ds[0] == 0
    assert outer.transforms is before and inner.transforms[0].__class__.__name__ == "RandomHorizontalFlip"
    assert ds.target_transform is lone
    assert (builtins.open, io.open, Image.open) == (open_before, open_before, pil_open)
    assert (ImageFile.ImageFile.load, Image.Image.convert) == (load, convert)
    assert timer.take().calls == {"Spin": 1, "RandomHorizontalFlip": 1, "Spin #2": 1, "Lambda": 1}


def test_file_reads_inside_a_decode_are_the_read_stage(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(pd.jpeg_bytes(640, 480))
    text = tmp_path / "labels.txt"
    text.write_text("cat\n")

    class FromPath(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, i: int):
            with open(text) as f:  # text mode: not a read stage
                f.read()
            with Image.open(path) as im:  # opens and reads the file itself, lazily
                return im.convert("RGB").size

    profiler = SampleProfiler(FromPath(), where="main")
    item, timing, decoders = profiler.staged(lambda: profiler.dataset[0])
    assert item == (640, 480) and decoders == {"PIL JPEG": 1}
    assert timing.calls["read"] >= 2  # the open and at least one read, inside the decode
    assert timing.wall_s["read"] > 0 and timing.wall_s["decode"] > 0
    assert timing.wall_s["read"] + timing.wall_s["decode"] <= timing.getitem_wall_s


def test_torchvision_decode_imported_by_name_and_a_v2_compose():
    ds = pd.make_torchvision_decode(4)
    profiler = SampleProfiler(ds, where="worker")
    assert [s.name for s in profiler.interceptions.stages][2:] == ["RandomResizedCrop", "RandomHorizontalFlip",
                                                                  "ToDtype"]
    (img, _), timing, decoders = profiler.staged(lambda: ds[1])
    assert img.shape == (3, 64, 64) and img.dtype == torch.float32
    assert decoders == {"torchvision.io decode_jpeg JPEG": 1} and timing.calls["decode"] == 1
    assert timing.calls["RandomResizedCrop"] == 1 and timing.calls["ToDtype"] == 1
    assert pd.decode_jpeg.__module__ == "torchvision.io.image"  # the module's own name is back


def test_top_functions_leave_out_the_profiles_own_code():
    here = __import__("loaderbench.measure.stages", fromlist=["x"]).__file__
    stats = {
        ("/u/data.py", 10, "featurize"): (5, 5, 0.040, 0.040, {}),
        ("~", 0, "<built-in method time.sleep>"): (5, 5, 0.030, 0.030, {
            ("/u/data.py", 3, "__getitem__"): (4, 4, 0.020, 0.020),
            (here, 50, "call"): (1, 1, 0.010, 0.010)}),
        (here, 99, "call"): (5, 5, 0.050, 0.1, {}),
        ("~", 0, "<built-in method _thread.get_ident>"): (9, 9, 0.001, 0.001, {(here, 60, "active"): (9, 9, 0.001, 0.001)}),
    }
    rows = top_functions(stats, top=5)
    assert [(r.function, r.self_s, r.calls, r.called_from) for r in rows] == [
        ("featurize", 0.040, 5, None),
        ("built-in method time.sleep", pytest.approx(0.020), 4, "__getitem__ (data.py:3)"),
    ]


# ---------------------------------------------------------------------------------------------
# The table, by hand


def _record(device: str = "cpu", nw: int = 1) -> StageRecord:
    w = "worker" if nw else "main"
    stages = [Stage("read", "read", w), Stage("decode", "decode", w), Stage("Crop", "transform", w),
              Stage("rest of __getitem__", "rest", w), Stage("collate", "collate", w),
              Stage("receive", "receive", "main"), Stage("pin", "pin", "main"), Stage("H2D", "h2d", "main")]
    samples = [
        SampleTiming(wall_s={"read": 0.001, "decode": 0.002, "Crop": 0.003}, cpu_s={"read": 0.0001, "decode": 0.002,
                     "Crop": 0.003}, getitem_wall_s=0.0065, getitem_cpu_s=0.0055,
                     calls={"read": 2, "decode": 2, "Crop": 1}, getitem_queued_s=0.0),
        SampleTiming(wall_s={"read": 0.003, "decode": 0.002, "Crop": 0.003}, cpu_s={"read": 0.0001, "decode": 0.002,
                     "Crop": 0.003}, getitem_wall_s=0.0085, getitem_cpu_s=0.0055,
                     calls={"read": 2, "decode": 2, "Crop": 1}, queued_s={"decode": 0.0008},
                     getitem_queued_s=0.0015),
    ]
    batches = [BatchTiming(samples=2, wall_s={"collate": 0.0004}, cpu_s={"collate": 0.0004}),
               BatchTiming(samples=4, wall_s={"receive": 0.0008}, cpu_s={"receive": 0.0002})]
    return StageRecord(
        stages=stages, samples=samples, batches=batches, settings=settings(nw, bs=2), device=device,
        plain_s=[0.006, 0.008],
        functions=[FunctionTime("featurize", "data.py:10", 0.0003, 2), FunctionTime("<listcomp>", "data.py:12", 0.0001, 4)],
        attribution_samples=2, attribution_getitem_s=0.0170, attribution_stages_s=0.0162, attribution_plain_samples=2,
        attribution_plain_s=0.0150,
        decoders={"PIL JPEG": 2}, wall_s=1.5, time_budget_s=20.0, torch_threads=1,
    )


def test_the_table_by_hand():
    p = summarize_profile(_record())
    rows = {r.name: r for r in p.stages}
    # read: (1 + 3) / 2 = 2 ms, CPU 0.1 ms; decode 2; Crop 3; rest: ((6.5 - 6) + (8.5 - 8)) / 2 = 0.5 ms
    assert rows["read"].ms_per_sample == pytest.approx(2.0) and rows["read"].cpu_ms_per_sample == pytest.approx(0.1)
    assert rows["read"].waiting and not rows["decode"].waiting and rows["read"].calls_per_sample == 2
    assert rows["rest of __getitem__"].ms_per_sample == pytest.approx(0.5)
    assert rows["rest of __getitem__"].cpu_ms_per_sample == pytest.approx(0.5 - 0.1)  # (5.5 - 5.1) per sample
    # collate 0.4 ms over 2 samples; receive 0.8 ms over 4 samples
    assert rows["collate"].ms_per_sample == pytest.approx(0.2) and rows["receive"].ms_per_sample == pytest.approx(0.2)
    assert rows["pin"].na == StageNA.NO_CUDA.value and rows["H2D"].na == StageNA.NO_CUDA.value
    total = 2 + 2 + 3 + 0.5 + 0.2 + 0.2
    assert rows["Crop"].share == pytest.approx(3 / total) and sum(r.share or 0 for r in p.stages) == pytest.approx(1)
    assert (p.sample_build_ms.p50, p.sample_build_ms.p90, p.sample_build_ms.max) == pytest.approx((7.0, 7.8, 8.0))
    c = p.cost
    assert (c.plain_ms_per_sample, c.profiled_ms_per_sample, c.overhead) == pytest.approx((7.0, 7.5, 7.5 / 7 - 1))
    assert (c.samples, c.plain_samples) == (2, 2)
    assert (c.attribution_ms_per_sample, c.attribution_overhead) == pytest.approx((8.5, 17 / 15 - 1))
    # the rest under the profiler: 17.0 - 16.2 = 0.8 ms over 2 samples
    assert [(f.function, f.self_ms_per_sample, f.share_of_rest, f.calls_per_sample) for f in p.functions] == [
        ("featurize", pytest.approx(0.15), pytest.approx(0.375), 1), ("<listcomp>", pytest.approx(0.05),
                                                                       pytest.approx(0.125), 2)]
    assert p.unlisted_share == pytest.approx(0.5)
    assert p.queued_share == pytest.approx(1.5 / 15)
    # decode queued 0.8 ms in one of two samples: 0.4 ms per sample, under a quarter of its 2 ms; the
    # rest of that sample's 1.5 ms queued, 0.7 ms: 0.35 per sample, over a quarter of the rest's 0.5 ms
    assert rows["decode"].queued_ms_per_sample == pytest.approx(0.4) and not rows["decode"].queued
    assert rows["rest of __getitem__"].queued_ms_per_sample == pytest.approx(0.35)
    assert rows["rest of __getitem__"].queued
    assert rows["collate"].queued_ms_per_sample is None  # not measured for the batch
    assert (p.batches_collated, p.batches_received, p.rest_counts) == (1, 1, True)


def test_what_has_no_figure_and_why():
    rec = _record(device="cuda:0", nw=0)
    rec.batches = [BatchTiming(samples=2, wall_s={"collate": 0.0004, "H2D": 0.001}, cpu_s={"collate": 0.0004})]
    rows = {r.name: r for r in summarize_profile(rec).stages}
    assert rows["receive"].na == StageNA.NO_WORKERS.value and rows["pin"].na == StageNA.PIN_OFF.value
    assert rows["H2D"].ms_per_sample == pytest.approx(0.5) and rows["H2D"].na is None
    rec.settings = settings(0, bs=2, pin=True)
    assert {r.name: r for r in summarize_profile(rec).stages}["pin"].na == StageNA.NOT_REACHED.value


def test_the_table_renders_as_the_golden_file():
    from loaderbench.orchestration.profile import ProfileOutcome
    from loaderbench.render.stages import render_profile

    rec = _record()
    outcome = ProfileOutcome(dataset=DatasetSpec(), settings=rec.settings, device="cpu", record=rec,
                             profile=summarize_profile(rec), setup_s=0.1)
    console = Console(width=200, color_system=None, record=True, force_terminal=False)
    render_profile(outcome, console)
    # Regenerate on purpose: write console.export_text() to the file and read the difference.
    assert console.export_text() == (EXPECTED / "stage-profile.table.txt").read_text()


# ---------------------------------------------------------------------------------------------
# Known costs, against a reference timed in this test


def _reference(ds: pd.KnownCost) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each stage of KnownCost alone, in a plain loop over every file: (wall ms, CPU ms) per call."""
    names = ["read", "decode", *(type(t).__name__ for t in ds.transform.transforms)]
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}

    def timed(name: str, fn, *args):
        w0, c0 = time.perf_counter(), time.thread_time()
        out = fn(*args)
        wall[name].append(1e3 * (time.perf_counter() - w0))
        cpu[name].append(1e3 * (time.thread_time() - c0))
        return out

    for path, length in zip(ds.paths, ds.lengths):
        img = timed("decode", pd.decode, timed("read", pd.read_file, path, ds.buffer)[:length])
        for t, name in zip(ds.transform.transforms, names[2:]):
            img = timed(name, t, img)
    return wall, cpu


def _known_cost_profile(ds: pd.KnownCost, rounds: int = 4):
    """The reference and the profile in turns (`rounds` of each), so load on the machine hits
    both alike: (reference wall ms, reference CPU ms, per stage and call; the profiles' records
    merged; its table)."""
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    records: list[StageRecord] = []
    for round_ in range(rounds):
        wall, cpu = _reference(ds)
        for k in wall:
            walls.setdefault(k, []).extend(wall[k])
            cpus.setdefault(k, []).extend(cpu[k])
        records.append(profile_stages(ds, settings(0, bs=6), ProfilePlan(samples=12, time_budget_s=120, seed=round_,
                                                                          attribute=False)))
    record = records[0]
    for r in records[1:]:
        record.samples += r.samples
        record.plain_s += r.plain_s
        record.batches += r.batches
    return walls, cpus, record, summarize_profile(record)


def test_stages_of_known_cpu_cost_within_10_percent_of_their_reference(tmp_path):
    # read 8 MB (~1 ms), decode an 800x600 JPEG (~3 ms), then 2 ms CPU spin, 4 ms sleep, 6 ms CPU
    # spin. CPU time is checked: the thread's own, which other load on the machine moves far less
    # than wall time; and per-sample medians on both sides, the profile's raw samples against the
    # reference's calls: on a busy machine a few samples share their CPU's caches with a
    # neighbour's burst (an 8 MB read is a memory copy), and a mean follows them.
    ds = pd.KnownCost(pd.write_padded_jpegs(tmp_path, 12, 8_000_000), cpu=True)

    def missed(walls, cpus, record, p) -> list:
        """The checks this measurement fails (empty: all hold)."""
        out = []
        for name in ("read", "decode", "CpuSpin", "CpuCrop"):
            # Within 10%, or within the reference's own interquartile spread where that is wider (the
            # 8 MB read is a memory copy whose CPU time moved 1.5-2.4 ms between calls on a loaded
            # machine).
            profiled = statistics.median(1e3 * s.cpu_s.get(name, 0.0) for s in record.samples)
            q1, _, q3 = statistics.quantiles(cpus[name], n=4)
            rel = max(0.10, (q3 - q1) / statistics.median(cpus[name]))
            if profiled != pytest.approx(statistics.median(cpus[name]), rel=rel):
                out.append((name, profiled, rel, cpus[name]))
            # Its share at least half of the reference's (the 8 MB read is 3-6% of a sample's time,
            # by the machine's memory bandwidth), and a CPU-bound stage does not wait.
            ref_share = statistics.median(walls[name]) / sum(statistics.median(w) for w in walls.values())
            if p.stage(name).share < 0.5 * ref_share or p.stage(name).waiting:
                out.append((name, "share or waiting", p.stage(name).share, ref_share, p.stage(name).waiting))
        # The sleep: blocked (neither on a CPU nor queued), its CPU a fraction of a millisecond.
        nap = p.stage("Nap")
        if not (nap.waiting and nap.cpu_ms_per_sample < 0.1 * statistics.median(walls["Nap"])
                and nap.ms_per_sample > statistics.median(cpus["CpuSpin"])):  # 4 ms of sleep > 2 ms of CPU
            out.append(("Nap", nap.waiting, nap.cpu_ms_per_sample, nap.ms_per_sample))
        # Nothing else costs: the rest of __getitem__ is a small part of the CPU.
        total_cpu = sum(r.cpu_ms_per_sample or 0.0 for r in p.stages)
        if p.stage("rest of __getitem__").cpu_ms_per_sample >= 0.05 * total_cpu:
            out.append(("rest of __getitem__", p.stage("rest of __getitem__").cpu_ms_per_sample, total_cpu))
        return out

    measured = _known_cost_profile(ds)
    p = measured[3]
    assert p.samples == 48 and p.cost.plain_samples == 48 and not p.cost.cut_short
    failed = missed(*measured)
    if failed:  # measured once more, both sides: a burst of other load in a full run of the suite
        failed = missed(*_known_cost_profile(ds))
    assert failed == []


@pytest.mark.truth
def test_stages_of_known_wall_cost_within_10_percent_of_their_reference(tmp_path):
    # The same with wall-clock spins, each stage's wall time against its reference, per-sample
    # medians on both sides (the profile's raw samples against the reference's calls). The sleep
    # (Nap) is held to 10%: a wall time is what it costs. The CPU-bound stages are held to 10% on
    # CPU time in the test above; their wall time here only to 25%, since on a 2-CPU machine with
    # other load a 3-ms decode's wall time moved 8-30% between runs of the same code, on either side.
    ds = pd.KnownCost(pd.write_padded_jpegs(tmp_path, 12, 8_000_000))

    def missed(walls, _cpus, record, p) -> list:
        out = []
        whole = sum(statistics.median(w) for w in walls.values())
        for name in ("read", "decode", "Spin", "Nap", "Crop2"):
            row = p.stage(name)
            # Seen with at least half its share in the reference (the 8 MB read is 3-6% of a
            # sample's time, by the machine's memory bandwidth).
            if (row.share or 0) < 0.5 * statistics.median(walls[name]) / whole:
                out.append((name, "share", row.share))
                continue
            profiled = statistics.median(1e3 * s.wall_s.get(name, 0.0) for s in record.samples)
            rel = 0.10 if name == "Nap" else 0.25
            if profiled != pytest.approx(statistics.median(walls[name]), rel=rel):
                out.append((name, profiled, walls[name]))
        if abs(p.cost.overhead) >= 0.10:
            out.append(("overhead", p.cost.overhead))
        return out

    # Measured once more, both sides, where a stage misses: with two other busy processes on a
    # 2-CPU machine a 2-ms spin's reference calls read 2.0 or 5.4 ms (preempted or not), and
    # their median fell on the preempted side while the profile's did not.
    rounds = measured_again_if_missed(lambda: missed(*_known_cost_profile(ds)), lambda f: f == [])
    assert rounds[-1] == [], rounds


def test_a_plain_dataset_is_attributed_to_the_function_that_costs():
    ds = pd.make_plain_user(16, work=20_000)
    # The one batch's collate (0.003-0.03 ms a sample) read 0.2 ms once, preempted by other load:
    # the share of a function that costs ~0.9 ms a sample fell to 86%. Profiled again then.
    rounds = measured_again_if_missed(
        lambda: summarize_profile(profile_stages(ds, settings(0), ProfilePlan(samples=16, time_budget_s=60, top=5)),
                                  top=5),
        lambda q: q.stage("rest of __getitem__").share > 0.9)
    p = rounds[-1]
    assert not p.transforms_found and p.stage("rest of __getitem__").share > 0.9
    assert p.stage("read").calls_per_sample == 0 and p.stage("decode").calls_per_sample == 0
    top = p.functions[0]
    assert (top.function, top.location.split(":")[0]) == ("featurize", "profile_datasets.py")
    assert top.share_of_rest > 0.5 and top.calls_per_sample == 1
    assert p.cost.attribution_samples == 16 and p.cost.attribution_overhead is not None


def test_an_iterable_dataset_is_timed_item_by_item():
    record = profile_stages(pd.make_stream(40), settings(0, bs=8), ProfilePlan(samples=16, time_budget_s=60))
    p = summarize_profile(record)
    assert p.iterable and p.samples == 16 and p.cost.plain_samples == 16
    assert p.cost.block_item_ms is None and p.cost.overhead is not None  # even items: the cost is read
    from loaderbench.render.stages import summary_lines

    assert any(x.startswith("Per-sample build time (__iter__, ") for x in summary_lines(p))
    # A stream that ends during the plain run (24 items: 1 to warm up, 16 timed, 7 plain): the plain
    # run holds other items than the timed one's share, and the profile's cost is not read from it.
    short = summarize_profile(profile_stages(pd.make_stream(24), settings(0, bs=8),
                                             ProfilePlan(samples=16, time_budget_s=60)))
    assert short.samples == 16 and short.cost.plain_samples == 7
    assert short.cost.overhead is None and short.cost.attribution_overhead is None
    # 1 ms of the thread's CPU by construction (a CPU clock, not a wall clock: load does not move it)
    assert p.stage("CpuSpin").cpu_ms_per_sample == pytest.approx(1.0, rel=0.05)
    assert p.batches_collated == 4  # 32 items, timed and plain, in batches of 8
    # Its samples come from next(), not __getitem__: the rest of a sample's time is named so.
    assert p.stage("rest of __iter__") is not None and "rest of __getitem__" not in [s.name for s in p.stages]


def test_a_stream_that_finishes_blocks_is_timed_over_whole_runs_of_items():
    # Blocks of 20 items, 20 ms of sleep before each: 1.0 ms per item on average, all of it in the
    # block's first item. 40 items timed, then 40 plain: each run holds two block starts. Taken in
    # turn, every block start (an even item) fell on the plain side and the stage read ~0.
    from tests.fixture_datasets import make_bursts

    record = profile_stages(make_bursts(block=20, sleep_ms=1.0), settings(0, bs=8),
                            ProfilePlan(samples=40, time_budget_s=60, attribute=False))
    p = summarize_profile(record)
    assert p.samples == 40 and p.cost.plain_samples == 40
    assert p.stage("rest of __iter__").ms_per_sample == pytest.approx(1.0, rel=0.15)
    assert statistics.fmean(record.plain_s) * 1e3 == pytest.approx(1.0, rel=0.15)
    assert p.stage("rest of __iter__").share > 0.9
    # Each run's slowest item holds a block's 20 ms of its ~40: the profile's own cost is not read
    # from two such runs, and says why.
    assert p.cost.block_item_ms == pytest.approx(20.0, rel=0.2)
    assert p.cost.overhead is None and p.cost.attribution_overhead is None
    from loaderbench.render.stages import summary_lines

    assert any(x.startswith("The profile's cost: not measured. The stream finishes its items in blocks (its slowest "
                            "item took 2") for x in summary_lines(p))


@pytest.mark.slow
def test_an_iterable_dataset_asked_in_a_worker_is_timed_in_this_process():
    record = profile_stages(pd.make_stream(40), LoaderSettings(1, False, False, 2, False, 8),
                            ProfilePlan(samples=8, time_budget_s=60, in_worker=True, attribute=False))
    p = summarize_profile(record)
    assert p.sampled_in == "this process" and p.samples == 8 and p.batches_received == 5
    assert p.stage("receive").ms_per_sample > 0


def test_the_budget_cuts_the_passes_short():
    clock = iter(range(0, 10_000)).__next__  # one second per reading: every deadline is soon over
    record = profile_stages(pd.make_plain_user(8, work=10), settings(0), ProfilePlan(samples=8, time_budget_s=4),
                            clock=lambda: float(clock()))
    assert record.cut_short == ["samples", "attribution"] and len(record.samples) < 8


def test_a_budget_that_ends_before_the_decoders_are_timed_says_so(tmp_path):
    # JPEGs decoded by PIL, every deadline soon over: the decoders are not timed, and the record
    # says the budget ended that part (the what-ifs then name the time, not a missing JPEG).
    from loaderbench.model import DECODER_TIMING

    clock = iter(range(0, 10_000)).__next__
    ds = pd.KnownCost(pd.write_padded_jpegs(tmp_path, 4, 10_000))
    record = profile_stages(ds, settings(0), ProfilePlan(samples=4, time_budget_s=4, alternatives=True),
                            clock=lambda: float(clock()))
    assert record.decoders and record.decoder_timing is None and DECODER_TIMING in record.cut_short
    # With time for it, the decoders are timed and nothing is cut.
    record = profile_stages(ds, settings(0), ProfilePlan(samples=4, time_budget_s=60, attribute=False,
                                                         alternatives=True))
    assert record.decoder_timing is not None and DECODER_TIMING not in record.cut_short


# ---------------------------------------------------------------------------------------------
# The command


def _profile(*args: str):
    return runner.invoke(app, ["profile", *args])


@pytest.fixture
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_the_synthetic_dataset_shows_read_decode_and_each_transform():
    res = _profile("--dataset", "synthetic", "--num-samples", "24", "--samples", "12", "--num-workers", "0",
                   "--batch-size", "6", "--device", "cpu", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    names = [s["name"] for s in doc["stages"]]
    assert names == ["read", "decode", "RandomResizedCrop", "RandomHorizontalFlip", "PILToTensor",
                     "rest of __getitem__", "collate", "receive", "pin", "H2D"]
    by = {s["name"]: s for s in doc["stages"]}
    assert by["decode"]["ms_per_sample"] > 0 and by["RandomResizedCrop"]["ms_per_sample"] > 0
    assert by["read"]["calls_per_sample"] == 0  # the JPEGs are in memory
    assert by["receive"]["na"] == "no-workers" and by["H2D"]["na"] == "no-cuda"
    assert {"name", "where", "ms_per_sample", "cpu_ms_per_sample", "share"} <= set(by["decode"])
    assert set(doc["sample_build_ms"]) >= {"p50", "p90", "p99"} and doc["decoders"] == {"PIL JPEG": 12}
    assert doc["samples"] == 12 and doc["cost"]["plain_samples"] == 12 and len(doc["raw"]["samples"]) == 12


def test_the_synthetic_dataset_profiles_with_another_decoder():
    # --decoder torchvision: torchvision.io decodes, v2 crops the uint8 tensor (no PILToTensor).
    res = _profile("--dataset", "synthetic", "--num-samples", "24", "--samples", "12", "--num-workers", "0",
                   "--batch-size", "6", "--device", "cpu", "--decoder", "torchvision", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["decoders"] == {"torchvision.io decode_jpeg JPEG": 12} and doc["settings"]["decoder"] == "torchvision"
    assert "PILToTensor" not in [s["name"] for s in doc["stages"]]
    table = _profile("--dataset", "synthetic", "--num-samples", "24", "--samples", "6", "--num-workers", "0",
                     "--batch-size", "6", "--device", "cpu", "--decoder", "torchvision")
    assert table.exit_code == 0 and "decoder=torchvision" in table.stdout


@pytest.mark.slow
def test_in_a_worker_the_samples_come_back_with_the_batches(_at_repo_root):
    res = _profile("--dataset", "tests.profile_datasets:make_torchvision_decode", "--samples", "12",
                   "--num-workers", "1", "--batch-size", "4", "--device", "cpu", "--in-worker", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    by = {s["name"]: s for s in doc["stages"]}
    assert doc["sampled_in"] == "a DataLoader worker" and doc["samples"] == 12
    assert doc["decoders"] == {"torchvision.io decode_jpeg JPEG": 12}
    assert by["decode"]["where"] == "worker" and by["receive"]["where"] == "main"
    assert by["receive"]["ms_per_sample"] > 0 and by["collate"]["ms_per_sample"] > 0
    # 12 timed and 12 plain items after the worker's warm-up item: 25 in batches of 4
    assert doc["batches_received"] == 7 and doc["cost"]["plain_samples"] == 12


@pytest.mark.slow
def test_the_table_with_a_worker(_at_repo_root):
    res = _profile("--dataset", "tests.profile_datasets:make_plain_user", "--samples", "16", "--num-workers", "1",
                   "--batch-size", "4", "--device", "cpu")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "rest of __getitem__" in out and "featurize" in out and "receive" in out
    assert "no torchvision Compose found on the dataset" in out


@pytest.mark.parametrize("args, message", [
    (["--num-workers", "0,2"], "--num-workers 0,2: a profile measures one setting; give one value"),
    (["--num-workers", "0", "--in-worker"], "--in-worker times the samples inside a DataLoader worker"),
    (["--format", "csv"], "--format: expected one of table, json"),
    (["--batch-size", "x"], "--batch-size: expected an integer"),
    (["--dataset", "tests.profile_datasets:nothing"], "has no attribute 'nothing'"),
    (["--dataset", "tests.profile_datasets:make_broken"], "the dataset raised ValueError while it was profiled"),
    (["--samples", "0"], "Invalid value for '--samples'"),
    (["--decoder", "pil,torchvision"], "--decoder pil,torchvision: a profile measures one setting"),
    (["--dataset", "tensor", "--decoder", "torchvision"], "--decoder applies to the synthetic dataset"),
    (["--decoder", "nvjpeg"], "--decoder nvjpeg runs on a CUDA GPU and the profile's device is cpu"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, _at_repo_root):
    res = runner.invoke(app, ["profile", "--device", "cpu", "--samples" if "--samples" not in args else "--top", "4",
                              *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("loaderbench: profiling")]
    assert len(lines) <= 4 and message in " ".join(res.stderr.split()), res.stderr  # click boxes its own errors
    assert "Traceback" not in res.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pin_and_h2d_on_a_gpu():
    record = profile_stages(pd.make_torchvision_decode(8), settings(0, bs=4, pin=True),
                            ProfilePlan(samples=8, time_budget_s=60, device="cuda:0", attribute=False))
    p = summarize_profile(record)
    assert p.stage("pin").ms_per_sample > 0 and p.stage("H2D").ms_per_sample > 0
    assert p.stage("H2D").where == "main"
