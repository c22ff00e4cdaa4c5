"""How often does the race's two-level rule fire on recorded device samples? (``measure/race.py``, "Two levels":
a settled leader whose samples, against the other leaders of each round, hold a slower level too is ranked by
their mean with the largest left out.) Every ``regime_check.py`` record under ``benchmarks/results`` holds, per
variant of the tuner's own screening samples, each config's samples of 10-20 shuffled rounds over 4-10 configs of
one shape; each config's ratios to the others' median per round are read as a settled leader's would be. Prints
the series it flags (the factor and the ratios) and how many of all.

Launch: ``python benchmarks/level_rule.py [RESULTS_DIR]`` (CPU only).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_dist_tune.measure.levels import slower_level  # noqa: E402


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "results"
    flagged = total = 0
    for path in sorted(root.rglob("regime_*.json")):
        record = json.loads(path.read_text())
        for variant in record.get("tuner_samples", []):
            views = variant["views"]
            names = sorted(views)
            rounds = min(len(views[n]["sample"]) for n in names)
            for name in names if rounds >= 3 and len(names) >= 2 else ():
                ratios = [views[name]["sample"][r] / statistics.median(views[o]["sample"][r] for o in names
                                                                      if o != name) for r in range(rounds)]
                total += 1
                factor = slower_level(ratios)
                if factor > 1:
                    flagged += 1
                    print(f"{path.relative_to(root)} M={record['m']} {variant['variant']} {name}: x{factor:.3f}; "
                          + " ".join(f"{x:.3f}" for x in ratios))
    print(f"{flagged} of {total} series flagged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
