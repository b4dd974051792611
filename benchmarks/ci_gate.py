"""Does the CI gate keep its promise on this machine?

    python3 benchmarks/ci_gate.py [--checks 20] [--slowdown 1.25] [--config configs/ci.toml]
                                  [--workdir /tmp/ci-gate] [--out results/ci-gate.json]

1. Makes a baseline with `loaderbench check --update-baseline` from the sweep in configs/ci.toml.
2. Runs `loaderbench check --baseline ...` 2 x `--checks` times, alternating an unchanged data
   path and one whose per-sample cost is `--slowdown` times higher (unchanged, slowed, unchanged,
   ...: both kinds meet the same neighbours on a shared machine).
3. Counts exit codes and verdicts: a false regression is an unchanged check that exits 1; a
   detection is a slowed check that exits 1. Prints a summary and writes JSON after every check.

How the slowdown is injected. A regression in CI is a code change, not a config change: the
config (and so the workload fingerprint `compare` checks) stays the same while the data path gets
slower. So the sweep here is configs/ci.toml with its `tensor` dataset replaced by the factory
`benchmarks.ci_gate:gate_dataset` with the same sizes and costs, which builds loaderbench's
`TensorCostDataset` with its per-sample CPU work (`cpu_ms`, a busy loop) and storage latency
(`io_ms`, a sleep) multiplied by $LOADERBENCH_GATE_SLOWDOWN (read in every worker process). The
slowed runs therefore do 25% more real per-sample work in `__getitem__`, exactly like a slower
decode or a slower disk would.

Each check runs in its own `python -m loaderbench check` process, so exit codes are the real
ones. Run it in the background: about 30 s per check on a 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SLOWDOWN_ENV = "LOADERBENCH_GATE_SLOWDOWN"
FACTORY = "benchmarks.ci_gate:gate_dataset"


def gate_dataset(
    num_samples: int, sample_shape: list[int], cpu_ms: float, io_ms: float, seed: int = 0
) -> Any:
    """loaderbench's TensorCostDataset with its per-sample costs times $LOADERBENCH_GATE_SLOWDOWN."""
    from loaderbench.workload.datasets import TensorCostDataset

    factor = float(os.environ.get(SLOWDOWN_ENV, "1.0"))
    return TensorCostDataset(num_samples, tuple(sample_shape), cpu_ms * factor, io_ms * factor, seed=seed)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def gate_config_text(config_path: Path) -> str:
    """configs/ci.toml with its tensor dataset routed through `gate_dataset` (same costs)."""
    import tomllib

    raw = tomllib.loads(config_path.read_text())
    ds = dict(raw.get("dataset") or {})
    if ds.get("kind") != "tensor":
        raise SystemExit(f"{config_path}: the benchmark injects its slowdown into a tensor dataset")
    kwargs = {
        "num_samples": ds.get("num_samples", 512),
        "sample_shape": list(ds.get("sample_shape", [3, 64, 64])),
        "cpu_ms": float(ds.get("cpu_ms", 0.0)),
        "io_ms": float(ds.get("io_ms", 0.0)),
    }
    lines = [f"label = {_toml_value(str(raw.get('label', 'ci')) + '-gate')}", "", "[dataset]",
             f"kind = {_toml_value(FACTORY)}", "", "[dataset.kwargs]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in kwargs.items()]
    for table in ("compute", "grid", "measure"):
        if raw.get(table):
            lines += ["", f"[{table}]"] + [f"{k} = {_toml_value(v)}" for k, v in raw[table].items()]
    return "\n".join(lines) + "\n"


def check_argv() -> list[str]:
    return [sys.executable, "-m", "loaderbench", "check"]


def run_check(argv: list[str], args: list[str], slowdown: float, log: Path) -> dict[str, Any]:
    """One `loaderbench check` in its own process: exit code, wall time and its JSON answer."""
    env = dict(os.environ, **{SLOWDOWN_ENV: repr(slowdown)})
    start = time.monotonic()
    proc = subprocess.run(argv + args, cwd=ROOT, env=env, capture_output=True, text=True)
    wall_s = time.monotonic() - start
    with open(log, "a") as fh:
        fh.write(f"$ {SLOWDOWN_ENV}={slowdown} {' '.join(argv + args)}\n{proc.stderr}\n")
    answer: dict[str, Any] | None = None
    try:
        answer = json.loads(proc.stdout) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        answer = None
    return {"exit_code": proc.returncode, "wall_s": wall_s, "answer": answer,
            "stderr_tail": proc.stderr.strip().splitlines()[-3:]}


def summarize_check(kind: str, index: int, slowdown: float, outcome: dict[str, Any]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    answer = outcome["answer"]
    if answer:
        for r in answer["pairs"][0]["rows"]:
            rows[r["key"]] = {"verdict": r["verdict"], "ratio": r["effect"], "low": r["effect_low"],
                              "high": r["effect_high"], "p": r["p_value"], "test": r["test"]}
    return {"kind": kind, "index": index, "slowdown": slowdown, "exit_code": outcome["exit_code"],
            "wall_s": round(outcome["wall_s"], 1), "configs": rows,
            "stderr_tail": outcome["stderr_tail"] if outcome["exit_code"] not in (0, 1) else []}


def report(checks: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"meta": meta, "checks": checks, "summary": {}}
    for kind in ("unchanged", "slowed"):
        ks = [c for c in checks if c["kind"] == kind]
        if not ks:
            continue
        verdicts: dict[str, dict[str, int]] = {}
        ratios: dict[str, list[float]] = {}
        for c in ks:
            for key, r in c["configs"].items():
                verdicts.setdefault(key, {}).setdefault(r["verdict"], 0)
                verdicts[key][r["verdict"]] += 1
                if r["ratio"] is not None:
                    ratios.setdefault(key, []).append(r["ratio"])
        out["summary"][kind] = {
            "checks": len(ks),
            "exit_1": sum(1 for c in ks if c["exit_code"] == 1),
            "exit_0": sum(1 for c in ks if c["exit_code"] == 0),
            "other_exit": sum(1 for c in ks if c["exit_code"] not in (0, 1)),
            "wall_s_median": round(statistics.median(c["wall_s"] for c in ks), 1),
            "verdicts": verdicts,
            "ratio": {k: {"min": round(min(v), 3), "median": round(statistics.median(v), 3),
                          "max": round(max(v), 3)} for k, v in ratios.items()},
        }
    return out


def print_summary(result: dict[str, Any]) -> None:
    s = result["summary"]
    u, sl = s.get("unchanged"), s.get("slowed")
    if u:
        print(f"unchanged: {u['exit_1']} of {u['checks']} checks flagged a regression (false regressions; "
              f"target at most 1 of 20); median check {u['wall_s_median']} s")
        for key, r in u["ratio"].items():
            print(f"  {key}: ratio min {r['min']} median {r['median']} max {r['max']}; verdicts {u['verdicts'][key]}")
    if sl:
        print(f"slowed x{result['meta']['slowdown']}: {sl['exit_1']} of {sl['checks']} checks flagged "
              f"(target all); median check {sl['wall_s_median']} s")
        for key, r in sl["ratio"].items():
            print(f"  {key}: ratio min {r['min']} median {r['median']} max {r['max']}; verdicts {sl['verdicts'][key]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checks", type=int, default=20, help="checks of each kind (default 20)")
    ap.add_argument("--slowdown", type=float, default=1.25, help="per-sample cost factor (default 1.25)")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "ci.toml")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/ci-gate"))
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "ci-gate.json")
    ns = ap.parse_args(argv)

    work = ns.workdir.resolve()
    (work / "runs").mkdir(parents=True, exist_ok=True)
    gate_toml = work / "gate.toml"
    gate_toml.write_text(gate_config_text(ns.config))
    baseline = work / "baseline.json"
    baseline.unlink(missing_ok=True)
    log = work / "checks.log"
    cmd = check_argv()
    common = ["--format", "json", "--no-progress"]
    meta = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python3", "benchmarks/ci_gate.py", *(argv if argv is not None else sys.argv[1:])]),
        "check_command": " ".join(Path(a).name if a == sys.executable else a for a in cmd),
        "config": str(ns.config), "gate_config": gate_toml.read_text(), "slowdown": ns.slowdown,
        "checks_per_kind": ns.checks, "host": platform.node(), "cpus": os.cpu_count(),
    }
    print(f"baseline: {' '.join(cmd)} --baseline {baseline} {gate_toml} --update-baseline", flush=True)
    start = time.monotonic()
    made = run_check(cmd, ["--baseline", str(baseline), str(gate_toml), "--update-baseline",
                           "--output", str(work / "runs" / "baseline.json"), *common], 1.0, log)
    if made["exit_code"] != 0 or not baseline.exists():
        print(f"could not make the baseline (exit {made['exit_code']}): {made['stderr_tail']}", file=sys.stderr)
        return 2
    meta["baseline_wall_s"] = round(made["wall_s"], 1)
    checks: list[dict[str, Any]] = []
    for i in range(ns.checks):
        for kind, factor in (("unchanged", 1.0), ("slowed", ns.slowdown)):
            out = work / "runs" / f"{kind}-{i:02d}.json"
            outcome = run_check(cmd, ["--baseline", str(baseline), "--output", str(out), *common], factor, log)
            checks.append(summarize_check(kind, i, factor, outcome))
            c = checks[-1]
            ratios = ", ".join(f"{k.split('-')[0]} {v['ratio']:.3f} {v['verdict']}" for k, v in c["configs"].items()
                               if v["ratio"] is not None)
            print(f"[{time.monotonic() - start:6.0f} s] {kind:9s} {i:2d}: exit {c['exit_code']} ({c['wall_s']} s) {ratios}",
                  flush=True)
            meta["total_wall_s"] = round(time.monotonic() - start, 1)
            result = report(checks, meta)
            ns.out.parent.mkdir(parents=True, exist_ok=True)
            ns.out.write_text(json.dumps(result, indent=1) + "\n")
    print_summary(result)
    print(f"written: {ns.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
