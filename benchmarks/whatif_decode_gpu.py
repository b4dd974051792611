"""The decode what-ifs against measured runs, and the stage profile's cost, on a GPU host (under 8
minutes in all; each step is skipped, and said so, once the remaining time cannot hold it):

    PYTHONPATH=. python3 benchmarks/whatif_decode_gpu.py --out $OUT/whatif_decode_gpu.json

1. The profile's cost: the default sweep (ResNet-50, the embedded JPEGs, `--search auto`) with the
   stage profile of its pick (the default) and with `--no-profile`, interleaved, at
   `--pair-budget` seconds each: the profile's seconds and share of the sweep's wall time
   (target <= 10%), each run's wall time, the pick and its samples/s with the profile on and off.
2. `decode=torchvision`: at 8, 12 and 16 usable CPUs (taskset), the sweep with the PIL decoder
   (its profile times both decoders on the dataset's JPEGs), then `loaderbench show
   --what-if decode=torchvision` of it (predicted knee, samples/s, what binds), against
   `loaderbench sweep --decoder torchvision --no-profile` measured on the same CPUs (its pick,
   samples/s, verdict and CPU use). Target: samples/s within 10%, the binding resource the
   measured run's own. Beside each pair, a host-speed reference (benchmarks/host_speed.py: every
   usable CPU building the PIL samples for 2 s) before, between and after the two sweeps: the
   prediction's error is also given against the host's speed during each sweep
   (`error_host_adjusted`: (1 + error) x the torchvision sweep's reference / the PIL sweep's,
   each the mean of the two beside it), for a host that slows or speeds up between them.
3. `decode=nvjpeg`: from the 16-CPU PIL sweep, the prediction's two cases (serialised with the
   step, overlapped on a side stream) against `--decoder nvjpeg --prefetch off,on` measured at
   the predicted knee's workers (`--search grid`): samples/s of each (target 15%) and the step
   time per batch of each row against the step alone (the compute ceiling's), which says which
   case the measured run shows.

Writes one JSON (`--out`) and every result file next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
T0 = time.monotonic()


def left_s(total_s: float) -> float:
    return total_s - (time.monotonic() - T0)


def cpus_list(n: int) -> str:
    return f"0-{n - 1}"


def sweep(out: Path, flags: list[str], cpus: int | None = None, timeout_s: float = 300) -> dict[str, Any]:
    """One `loaderbench sweep` (under taskset with `cpus`): its wall seconds and result file."""
    cmd = [sys.executable, "-m", "loaderbench", "sweep", "--output", str(out), "--no-progress", *flags]
    if cpus is not None:
        cmd = ["taskset", "-c", cpus_list(cpus), *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"cmd": " ".join(cmd), "error": f"timed out after {timeout_s:.0f} s"}
    wall = time.monotonic() - t0
    (out.with_suffix(".table.txt")).write_text(proc.stdout)
    if proc.returncode != 0 or not out.exists():
        return {"cmd": " ".join(cmd), "wall_s": wall, "error": proc.stderr[-3000:]}
    return {"cmd": " ".join(cmd), "wall_s": wall, "data": json.loads(out.read_text())}


def host_speed(cpus: int, seconds: float = 2.0) -> float | None:
    """The host's speed at building the embedded dataset's PIL samples on `cpus` CPUs, one process
    a CPU (benchmarks/host_speed.py): samples/s, or None when the reference failed."""
    cmd = ["taskset", "-c", cpus_list(cpus), sys.executable, str(ROOT / "benchmarks" / "host_speed.py"),
           "--seconds", f"{seconds:g}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        return float(json.loads(proc.stdout.strip().splitlines()[-1])["samples_per_s"])
    except (subprocess.SubprocessError, ValueError, KeyError, IndexError):
        return None


def show_json(path: Path, *what_if: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "loaderbench", "show", str(path), "--format", "json"]
    for q in what_if:
        cmd += ["--what-if", q]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr[-2000:]}


def pick_of(data: dict[str, Any]) -> dict[str, Any]:
    """The pick of a result: its settings, samples/s, verdict, CPU cores, compute ms, and the
    resource its verdict names (cpus: loader-bound with the CPUs saturated, at the pick or, as the
    recommendation says, at the best config; workers: loader-bound otherwise; step; receive)."""
    rec = (data.get("analysis") or {}).get("recommendation") or {}
    s = rec.get("settings")
    row = next((r for r in data["results"] if r["settings"] == s and r.get("summary")), None)
    if row is None:
        return {}
    m = row["summary"]
    verdict = m.get("verdict")
    cpu = m.get("cpu_saturated")
    findings = rec.get("findings") or []
    # What the recommendation names as binding where no setting clears the bottleneck ("CPU
    # saturation binds": the best config's process tree used the usable CPUs), else the pick's row.
    cause = next((f.get("cause") for f in findings if f.get("kind") == "not-cleared"), None)
    resource = {"loader-bound": "cpus" if cpu or cause == "cpu" else "workers", "compute-bound": "step",
                "receive floor": "receive", "H2D-bound (pageable copy)": "h2d",
                "H2D-bound (copy not hidden)": "h2d"}.get(verdict, verdict)
    # The figure the recommendation states: the sustained one where the sweep measured its pick so.
    knee = next((f for f in findings if f.get("kind") == "knee"), {})
    figure = knee.get("sustained_samples_per_s") or m["samples_per_s"]
    return {"settings": s, "num_workers": s["num_workers"], "samples_per_s": figure,
            "search_samples_per_s": m["samples_per_s"],
            "stall_fraction": m["stall_fraction"], "verdict": verdict, "cpu_saturated": cpu,
            "cpu_cores": None if m.get("cpu_util_pct") is None else m["cpu_util_pct"] / 100.0,
            "compute_ms": None if m.get("compute_p50_s") is None else 1e3 * m["compute_p50_s"],
            "resource": resource}


def profile_of(data: dict[str, Any]) -> dict[str, Any]:
    sweep = data.get("sweep") or {}
    prof = (data.get("analysis") or {}).get("profile") or {}
    return {"profile_s": (sweep.get("timing") or {}).get("profile_s"), "sweep_wall_s": sweep.get("sweep_wall_s"),
            "stages": [{k: st.get(k) for k in ("name", "where", "ms_per_sample", "cpu_ms_per_sample", "share")}
                       for st in prof.get("stages") or []],
            "sample_build_ms": prof.get("sample_build_ms"), "decoder_timing": prof.get("decoder_timing"),
            "gpu_decode": prof.get("gpu_decode"), "error": (sweep.get("profile") or {}).get("error")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--total", type=float, default=465.0, help="seconds for everything (default 465: under 8 minutes)")
    ap.add_argument("--pair-budget", type=float, default=60.0, help="--time-budget of the profile-cost pair")
    ap.add_argument("--budget", type=float, default=40.0, help="--time-budget of each decoder sweep")
    ap.add_argument("--cpus", default="8,12,16")
    ap.add_argument("--no-host-reference", dest="host_reference", action="store_false",
                    help="no host-speed reference (benchmarks/host_speed.py) before, between and after each pair")
    ap.add_argument("--no-pair", action="store_true",
                    help="skip step 1 (the default sweep's own record gives its profile's seconds)")
    args = ap.parse_args()
    out = Path(args.out)
    folder = out.parent
    folder.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"skipped": []}

    def fits(need_s: float, what: str) -> bool:
        if left_s(args.total) < need_s:
            report["skipped"].append(f"{what}: {left_s(args.total):.0f} s left, {need_s:.0f} s needed")
            return False
        return True

    # 1. The profile's cost: on, off (interleaved within the pair).
    pair = []
    for profile in () if args.no_pair else (True, False):
        if not fits(args.pair_budget + 20, f"profile pair ({'on' if profile else 'off'})"):
            break
        r = sweep(folder / f"default-{'on' if profile else 'off'}.json",
                  ["--time-budget", f"{args.pair_budget:g}", *([] if profile else ["--no-profile"])])
        entry = {"profile": profile, "cmd": r["cmd"], "wall_s": r.get("wall_s"), "error": r.get("error")}
        if "data" in r:
            entry.update(pick=pick_of(r["data"]), **profile_of(r["data"]))
            if entry.get("profile_s") and r.get("wall_s"):
                entry["profile_share_of_wall"] = entry["profile_s"] / r["wall_s"]
        pair.append(entry)
    report["profile_cost"] = pair

    # 2. decode=torchvision at each CPU count; 3. decode=nvjpeg from the widest.
    rows = []
    widest = None
    for n in [int(c) for c in args.cpus.split(",")]:
        if not fits(2 * args.budget + (60 if args.host_reference else 40), f"decode=torchvision at {n} CPUs"):
            break
        # The host's speed beside each sweep (a reference timed in the same run): the two sweeps
        # run minutes apart on a shared host, and a prediction from one is checked on the other.
        host = [host_speed(n) if args.host_reference else None]
        pil = sweep(folder / f"pil-{n}cpus.json", ["--time-budget", f"{args.budget:g}"], cpus=n)
        host.append(host_speed(n) if args.host_reference else None)
        tv = sweep(folder / f"torchvision-{n}cpus.json",
                   ["--decoder", "torchvision", "--no-profile", "--time-budget", f"{args.budget:g}"], cpus=n)
        host.append(host_speed(n) if args.host_reference else None)
        entry: dict[str, Any] = {"cpus": n, "pil_cmd": pil["cmd"], "torchvision_cmd": tv["cmd"],
                                 "errors": [x.get("error") for x in (pil, tv) if x.get("error")],
                                 "host_samples_per_s": host}
        if "data" in pil:
            entry["pil_pick"] = pick_of(pil["data"])
            entry["profile"] = profile_of(pil["data"])
            what = (show_json(folder / f"pil-{n}cpus.json", "decode=torchvision").get("analysis") or {}).get("what_if")
            entry["predicted"] = None if what is None else {
                "knee_workers": (what.get("knee") or {}).get("num_workers"), "samples_per_s": what.get("knee_samples_per_s"),
                "binds": what.get("binds"), "why": what.get("why"), "curve": what.get("curve"),
                "decoder_factor": what.get("decoder_factor"), "transforms_factor": what.get("transforms_factor"),
                "loader_speedup": what.get("loader_speedup")}
            widest = (n, folder / f"pil-{n}cpus.json", entry["pil_pick"])
        if "data" in tv:
            entry["measured"] = pick_of(tv["data"])
        p, m = entry.get("predicted") or {}, entry.get("measured") or {}
        if p.get("samples_per_s") and m.get("samples_per_s"):
            entry["error"] = p["samples_per_s"] / m["samples_per_s"] - 1.0
            entry["binds_match"] = p.get("binds") == m.get("resource")
            if None not in host:
                # The host's speed during the torchvision sweep against during the PIL sweep (each
                # the mean of the references before and after it).
                entry["host_ratio"] = (host[1] + host[2]) / (host[0] + host[1])
                entry["error_host_adjusted"] = (1.0 + entry["error"]) * entry["host_ratio"] - 1.0
        rows.append(entry)
    report["decode_torchvision"] = rows

    if widest is not None and fits(90, "decode=nvjpeg"):
        n, path, pil_pick = widest
        what = (show_json(path, "decode=nvjpeg").get("analysis") or {}).get("what_if") or {}
        cases = {c.get("mode"): c for c in what.get("cases") or []}
        workers = (cases.get("overlapped") or cases.get("serialised") or {}).get("knee", {}) or {}
        w = workers.get("num_workers") or pil_pick.get("num_workers") or 8
        nv = sweep(folder / f"nvjpeg-{n}cpus.json",
                   ["--decoder", "nvjpeg", "--num-workers", str(w), "--prefetch", "off,on", "--pin-memory", "on",
                    "--search", "grid", "--repeats", "2", "--no-profile", "--min-time", "3"], cpus=n)
        measured = {}
        if "data" in nv:
            data = nv["data"]
            ceilings = (data.get("ceilings") or {}).get("compute") or {}
            step_ms = None
            for c in ceilings.values():
                step_ms = 1e3 * c.get("step_s") if c.get("step_s") else step_ms
            for r in data["results"]:
                m = r.get("summary") or {}
                if not m:
                    continue
                mode = "overlapped" if r["settings"]["prefetch"] else "serialised"
                measured[mode] = {"samples_per_s": m["samples_per_s"], "stall_fraction": m["stall_fraction"],
                                  "compute_ms": None if m.get("compute_p50_s") is None else 1e3 * m["compute_p50_s"],
                                  "wait_ms": None if m.get("data_wait_p50_s") is None else 1e3 * m["data_wait_p50_s"],
                                  "verdict": m.get("verdict")}
            measured["step_alone_ms"] = step_ms
        report["decode_nvjpeg"] = {
            "cpus": n, "workers": w, "cmd": nv["cmd"], "error": nv.get("error"),
            "why": what.get("why"), "gpu": what.get("gpu"),
            "predicted": {m: {"samples_per_s": c.get("knee_samples_per_s"), "knee_workers": (c.get("knee") or {}).get(
                "num_workers"), "binds": c.get("binds"), "step_ms_per_batch": c.get("step_ms_per_batch"),
                "at_workers": dict((int(k), v) for k, v in c.get("curve") or []).get(w)} for m, c in cases.items()},
            "measured": measured,
        }
    report["wall_s"] = time.monotonic() - T0
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k in ("skipped", "wall_s")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
