"""Where recorded heavy races' screening ranked the best config: after one screening round, and after two.

The sift (``measure/race.py``) settles the 12 best configs of a heavy race's screening (:data:`SIFT_AFTER` rounds of
it). For every tuning of bench_fidelity's 40-config GEMM recorded on one H200 in sessions 46-49 (each decision file
holds every config's samples by round, ``round_times``; every variant listed in :data:`SCREENED_ALIKE`, whose
screening was the defaults'), this prints the rank the first screening round gave the best config by the sustained
oracle (and the best within 1.005 and 1.01 of it), and the rank the mean of the first two rounds gave: a sift of 12
after one round holds that config where the rank is 12 or better. The oracle times only the configs some tuning
chose and the screening pass's best, so "best" is the best of those.

Usage: ``python benchmarks/screening_ranks.py [--tgz FID.tgz ...]`` (CPU only; default: :data:`ARCHIVES`).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import Counter
from pathlib import Path

from sift_replay import recorded_tunings, spec

from triton_dist_tune.measure.timing import SETTLED_LEADERS_HEAVY, SIFT_AFTER

HERE = Path(__file__).resolve().parent
#: every archive of bench_fidelity's heavy GEMM tunings with decision files (sessions 46-49, one H200)
ARCHIVES = ("session_h200_46/call1_sift_first/fid.tgz", "session_h200_46/call2_sift_second/fid.tgz",
            "session_h200_47/call1_sift_ab/fid.tgz", "session_h200_47/call2_final/fid_held.tgz",
            "session_h200_47/call3_heldout/fid_held2.tgz", "session_h200_48/call1_keep4/fid.tgz",
            "session_h200_48/call2_final/fid_held.tgz", "session_h200_48/call3_bar/bar.tgz",
            "session_h200_48/call4_far/fid.tgz", "session_h200_49/call1_span/fid.tgz",
            "session_h200_49/call3_span_validate/fid_4096x14336.tgz",
            "session_h200_49/call3_span_validate/fid_5120x13824.tgz")
#: bench_fidelity's variants whose screening rounds were the defaults' (they differ after it)
SCREENED_ALIKE = ("ours", "ours_keep3", "ours_keep4", "ours_span10")
BARS = (1.0, 1.005, 1.01)


def ranks(decision: dict, ratios: dict[str, float], bar: float) -> tuple[int, int]:
    """(rank after the first screening round, rank by the mean of the first two) of the best-ranked config within
    ``bar`` of the oracle's best; 0 where the decision has no such config."""
    samples = {o["index"]: o["round_times"] for o in decision["measurements"] if o.get("round_times")}
    names = {o["index"]: spec(o["config"]) for o in decision["measurements"]}
    good = {i for i in samples if ratios.get(names[i], math.inf) <= bar}
    if not good:
        return 0, 0
    first = sorted(samples, key=lambda i: (samples[i][0], i))
    two = sorted((i for i in samples if len(samples[i]) > 1), key=lambda i: (statistics.mean(samples[i][:2]), i))
    return min(first.index(i) for i in good) + 1, min((two.index(i) + 1 for i in good if i in two), default=99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tgz", nargs="+", default=[str(HERE / "results" / name) for name in ARCHIVES])
    args = parser.parse_args()
    after = {bar: (Counter(), Counter()) for bar in BARS}
    shapes: set[tuple[str, str]] = set()
    for nk, m, variant, ratios, decision in recorded_tunings(args.tgz):
        if variant not in SCREENED_ALIKE:
            continue
        shapes.add((nk, m))
        for bar in BARS:
            one, two = ranks(decision, ratios, bar)
            if one:
                after[bar][0][one] += 1
                after[bar][1][two] += 1
    print(f"{sum(after[1.0][0].values())} recorded heavy tunings, {len(shapes)} shapes (N,K at M): "
          f"{', '.join(f'{nk} at {m}' for nk, m in sorted(shapes))}; the defaults sift {SETTLED_LEADERS_HEAVY} after "
          f"{SIFT_AFTER} screening round(s)")
    for bar in BARS:
        for name, got in zip(("one round", "two rounds"), after[bar], strict=True):
            print(f"best within {bar}: rank after {name}: worst {max(got)}, 12th or better in "
                  f"{sum(n for r, n in got.items() if r <= 12)} of {sum(got.values())}; {dict(sorted(got.items()))}")


if __name__ == "__main__":
    main()
