"""Which output placement reads slow? The race times each settled leader at 4 output placements (settled round j at
placement j mod 4: ``measure/race.py``, "Placements"), each a graph captured into a memory pool of its own. A leader
slow at a placement chosen at random by the allocator is the effect the rule is for; one slow at the same placement
in every tuning (the first new pool, say) would be an artefact of the captures.

One process, one shape, the given configs: ``--tunings`` fresh tunings of those configs alone
(``regime_check.tune_these``); for each, every leader's 8 settled samples (the last 8 of its round times) by
placement, over the leader's median. Prints one line per tuning and leader, then per placement how often each
leader read more than 2% over its median there; writes them to ``--out``.

Launch (one GPU): ``python benchmarks/placement_samples.py --family moe --m 32 --configs A,B,... --tunings 8 --out F``
CPU plumbing: ``TRITON_INTERPRET=1 python benchmarks/placement_samples.py --cpu-smoke --family moe --m 8 ...``
(on CPU no race is timed on the device: one placement, and no settled samples to split).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import json  # noqa: E402
import statistics  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
from _search_oracles import compile_all  # noqa: E402
from regime_check import configs_parser, kept_candidates, tune_these  # noqa: E402

from triton_dist_tune.measure.graphs import PLACEMENTS  # noqa: E402

SETTLED = 8


def main() -> int:
    p = configs_parser(__doc__.splitlines()[0])
    p.add_argument("--tunings", type=int, default=8)
    args = p.parse_args()
    space, kernel, st, texts, names = kept_candidates(args, "placement_samples")
    compile_all(space, kernel, st, [texts[n] for n in names])
    report: dict[str, Any] = {"gpu": bs.gpu_name(), "m": args.m, "tunings": []}
    slow: dict[str, list[int]] = {n: [0] * PLACEMENTS for n in names}
    for t in range(args.tunings):
        got = tune_these(space, kernel, st, [texts[n] for n in names], t)
        report["tunings"].append(got)
        for name, samples in sorted(got["samples"].items()):
            if len(samples) < SETTLED:
                continue
            settled = samples[-SETTLED:]
            centre = statistics.median(settled)
            by = [[s / centre for j, s in enumerate(settled) if j % PLACEMENTS == k] for k in range(PLACEMENTS)]
            for k, ratios in enumerate(by):
                slow[name][k] += min(ratios) > 1.02
            bs.say(f"tuning {t} chose {got['choice']}: {name} " + " | ".join(
                f"p{k} " + " ".join(f"{r:.3f}" for r in ratios) for k, ratios in enumerate(by)))
    for name in names:
        bs.say(f"{name}: both samples over 1.02 x its median at placement 0-{PLACEMENTS - 1}: {slow[name]}")
    report["slow_by_placement"] = slow
    args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
