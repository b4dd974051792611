"""`--what-if cpus=K` against measured runs under a CPU mask (docs/benchmarks.md, section 8).

Usage: python3 benchmarks/whatif_check.py FULL.json MASKED.json [MASKED.json ...]
FULL is a sweep with every usable CPU; each MASKED is the same sweep under `taskset` (its
`environment.usable_cpus` is K). For every config measured in MASKED, the what-if curve of that
config's series predicted from FULL alone is read at its worker count and set against the
measured median samples/s; then the predicted knee and its samples/s (as `--what-if cpus=K` answers
it, across the measured series) against the masked run's fastest config. Prints one line per config and the median / largest absolute error per K.
"""

from __future__ import annotations

import statistics
import sys

from loaderbench.analysis import analyze
from loaderbench.analysis.predict import what_if_cpus, what_if_cpus_across
from loaderbench.results import read_results


def main(full_path: str, masked_paths: list[str]) -> None:
    full = read_results(full_path)
    measured_cpus = full.environment["usable_cpus"]
    tolerance = float(full.config["measure"].get("tolerance", 0.05))
    for path in masked_paths:
        masked = read_results(path)
        k = masked.environment["usable_cpus"]
        errors = []
        for r in masked.results:
            if r.status != "ok" or r.summary is None:
                continue
            top = max(2 * k, r.settings.num_workers)
            what = what_if_cpus(full.results, r.settings, k, tolerance, max_workers=top, measured_cpus=measured_cpus)
            if what is None:
                continue
            predicted = dict((int(w), s) for w, s in what.curve)[r.settings.num_workers]
            m = r.summary.samples_per_s
            errors.append(abs(predicted / m - 1))
            print(f"cpus={k} {r.settings.key():28s} trials {len(r.trials)}  measured {m:7.0f}  "
                  f"predicted {predicted:7.0f}  error {predicted / m - 1:+.1%}")
        pick = analyze(full).recommendation.settings
        assert pick is not None
        what = what_if_cpus_across(full.results, pick, k, tolerance, measured_cpus)
        best = max((r for r in masked.results if r.summary), key=lambda r: r.summary.samples_per_s)  # type: ignore[union-attr]
        assert what is not None and best.summary is not None
        print(f"cpus={k}: predicted knee {what.knee_workers} workers at {what.knee_samples_per_s:.0f}/s; "
              f"measured: fastest {best.settings.key()} {best.summary.samples_per_s:.0f}/s "
              f"({(what.knee_samples_per_s or 0.0) / best.summary.samples_per_s - 1:+.1%}); "
              f"per config: median {statistics.median(errors):.1%}, largest {max(errors):.1%} over {len(errors)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
