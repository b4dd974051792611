"""The decode what-ifs of a `whatif_decode_gpu.py` run, answered again by this version's model
from its kept result files, against the measured runs beside them (no GPU, nothing measured):

    python3 benchmarks/whatif_decode_replay.py docs/data/bench/whatif-decode-h200/budget60 [...]

Each folder holds `pil-NcpusN.json` (the sweep with the PIL decoder on N usable CPUs, with its
stage profile), `torchvision-NcpusN.json` (`--decoder torchvision`, measured on the same CPUs) and
optionally `nvjpeg-16cpus.json` (`--decoder nvjpeg --prefetch off,on` at the predicted knee).
Prints, per CPU count, `decode=torchvision` predicted (knee, samples/s, what binds, and the loader's
bound where it runs close behind) against the measured pick (samples/s, verdict, whether its
resource is one the prediction named), the measured row at the predicted knee's settings where
the run has one (its verdict's resource against the prediction's) and the error, and where the run
took host-speed references beside the two sweeps, the error against the host's speed during each;
and `decode=nvjpeg`'s two cases against the measured rows without and with the prefetcher.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loaderbench.analysis import analyze  # noqa: E402
from loaderbench.analysis.predict import parse_what_if  # noqa: E402
from loaderbench.results import read_results  # noqa: E402


def measured_pick(path: Path) -> tuple[float, int, str, bool | None]:
    """The measured result's pick: samples/s (its sustained figure where the sweep measured one,
    the figure its recommendation states), workers, verdict, whether its CPUs were saturated (at
    the pick, or at the best config where the recommendation says CPU saturation binds)."""
    rs = read_results(path)
    analysis = analyze(rs)
    s = analysis.recommendation.settings
    row = next(r for r in rs.results if r.settings == s and r.summary is not None)
    assert row.summary is not None and row.summary.verdict is not None and s is not None
    taken = rs.sweep.sustained
    figure = taken.samples_per_s if taken is not None and taken.config == s.key() else row.summary.samples_per_s
    # Where no setting clears the bottleneck, the recommendation names what binds at the best
    # config ("CPU saturation binds"): that is the run's own verdict on the CPUs.
    from loaderbench.conclusions import NotCleared, NotClearedCause

    cpu = any(isinstance(f, NotCleared) and f.cause is NotClearedCause.CPU for f in analysis.recommendation.findings)
    return figure, row.settings.num_workers, row.summary.verdict.value, bool(row.summary.cpu_saturated or cpu)


def resource(verdict: str, saturated: bool | None) -> str:
    """The measured run's binding resource in the what-if's words."""
    return {"loader-bound": "cpus" if saturated else "workers", "compute-bound": "step",
            "H2D-bound (pageable copy)": "h2d", "H2D-bound (copy not hidden)": "h2d"}.get(verdict, verdict)


def at_knee(path: Path, knee: Any, named: set[str | None]) -> str:
    """'; at the predicted knee (its workers, pin_memory and prefetcher) measured N (verdict,
    resource: same|differs)' where the measured run has that row, else ''."""
    rs = read_results(path)
    analyze(rs)
    row = next((r for r in rs.results if r.summary is not None and r.summary.verdict is not None
                and r.settings.num_workers == knee.num_workers and r.settings.pin_memory == knee.pin_memory
                and r.settings.prefetch == knee.prefetch), None)
    if row is None:
        return ""
    s = row.summary
    res = resource(s.verdict.value, bool(s.cpu_saturated))
    return (f"; at the predicted knee measured {s.samples_per_s:,.0f} ({s.verdict.value}, {res}: "
            f"{'same' if res in named else 'differs'})")


def host_ratio(folder: Path, cpus: int) -> float | None:
    """The host's speed during the torchvision sweep against during the PIL sweep on `cpus` CPUs,
    from the host-speed references the run took beside them (whatif_decode_gpu.py's
    `host_samples_per_s`: before, between, after), or None where it took none."""
    report = folder / "whatif_decode_gpu.json"
    if not report.exists():
        return None
    import json

    for entry in json.loads(report.read_text()).get("decode_torchvision") or []:
        host = entry.get("host_samples_per_s") or []
        if entry.get("cpus") == cpus and len(host) == 3 and None not in host:
            return float((host[1] + host[2]) / (host[0] + host[1]))
    return None


def main(folders: list[str]) -> int:
    errors: list[float] = []
    for folder in map(Path, folders):
        for pil in sorted(folder.glob("pil-*cpus.json"), key=lambda p: int(re.findall(r"\d+", p.name)[0])):
            n = int(re.findall(r"\d+", pil.name)[0])
            what = analyze(read_results(pil), what_if=[parse_what_if("decode=torchvision")]).what_if
            tv = folder / f"torchvision-{n}cpus.json"
            if what is None or what.why is not None or not tv.exists():
                why = None if what is None or what.why is None else what.why.value
                print(f"{folder.name} {n:2d} CPUs: no prediction ({why})")
                continue
            got, workers, verdict, saturated = measured_pick(tv)
            err = (what.knee_samples_per_s or 0.0) / got - 1.0
            errors.append(err)
            binds = None if what.binds is None else what.binds.value
            near = "" if what.binds_near is None else f", {what.binds_near.value} close behind"
            named = {binds, None if what.binds_near is None else what.binds_near.value}
            same = "same" if resource(verdict, saturated) in named else "differs"
            print(f"{folder.name} {n:2d} CPUs: decode=torchvision predicted {what.knee_samples_per_s:,.0f} at "
                  f"{what.knee_workers} workers (binds: {binds}{near}); measured {got:,.0f} at {workers} workers "
                  f"({verdict}, {resource(verdict, saturated)}: {same}); error {err:+.1%}"
                  + at_knee(tv, what.knee, named))
            ratio = host_ratio(folder, n)
            if ratio is not None:
                print(f"{'':>{len(folder.name)}} {n:2d} CPUs: the host ran {ratio:.2f}x as fast during the torchvision "
                      f"sweep as during the PIL sweep (host_speed.py beside each); error against it "
                      f"{(1.0 + err) * ratio - 1.0:+.1%}")
        nv = folder / "nvjpeg-16cpus.json"
        pil = folder / "pil-16cpus.json"
        if nv.exists() and pil.exists():
            what = analyze(read_results(pil), what_if=[parse_what_if("decode=nvjpeg")]).what_if
            rs = read_results(nv)
            analyze(rs)
            rows = {(f"{r.settings.num_workers} worker{'s' if r.settings.num_workers != 1 else ''}, "
                     + ("prefetcher" if r.settings.prefetch else "no prefetcher")):
                    r.summary.samples_per_s for r in rs.results if r.summary is not None}
            measured = ", ".join(f"{k} {v:,.0f}" for k, v in rows.items())
            if what is None or what.why is not None:
                why = None if what is None or what.why is None else what.why.value
                print(f"{folder.name} decode=nvjpeg: no prediction ({why}); measured {measured}")
                continue
            cases = ", ".join(f"{c.mode.value if c.mode else '?'} {c.knee_samples_per_s or 0.0:,.0f}"
                              + (" (the decode holds the main thread)" if c.host_waits else "") for c in what.cases)
            print(f"{folder.name} decode=nvjpeg: predicted {cases}; measured {measured}")
    if errors:
        print(f"decode=torchvision: largest error {max(abs(e) for e in errors):.1%} over {len(errors)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
