"""Does the validations' judge repeat itself within one process? At MoE M = 32 it read M16-N128-K128-G1-w8-s3
1.064-1.086 times the best in ``validate_search.py``'s process (three runs, two hosts), where
``regime_check.py``'s process, timing those configs by the same method, read it the fastest
(``results/session_h200_19``). One process, one shape: the candidates are judged as ``validate_search.py
--judge-here`` judges them (``_search_oracles.judge_here``: a fresh state, graphs of 20 launches, shuffled
rounds) at each step of what the validation does before it judges: (a) with only the candidates compiled, (b) after
every kept config is compiled, (c) after one fresh tuning of the whole space, (d) once more at once. Prints each
step's ratios and how far its even and odd rounds disagree; writes them to ``--out``.

Launch (one GPU): ``python benchmarks/judge_repeat.py --family moe --m 32 --configs A,B,... --out FILE``
CPU plumbing: ``TRITON_INTERPRET=1 python benchmarks/judge_repeat.py --cpu-smoke --family moe --m 8 --configs ...``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import json  # noqa: E402
import os  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
from _search_oracles import compile_all, judge_here  # noqa: E402
from regime_check import configs_parser, kept_candidates  # noqa: E402
from validate_search import tune_once  # noqa: E402


def main() -> int:
    args = configs_parser(__doc__.splitlines()[0]).parse_args()
    space, kernel, st, texts, names = kept_candidates(args, "judge_repeat")
    report: dict[str, Any] = {"gpu": bs.gpu_name(), "family": args.family, "m": args.m, "steps": []}

    def judge(step: str) -> None:
        here = judge_here(space, args.m, kernel, names, args.rounds)
        report["steps"].append({"step": step, **here})
        repeat = here.get("repeat_max_dev")
        bs.say(f"{step}: " + ", ".join(f"{n} {here['ratios'][n]:.3f}" for n in names)
               + ("" if repeat is None else f"; halves disagree by up to {100 * repeat:.1f}%"))

    compile_all(space, kernel, st, [texts[n] for n in names])
    judge("a: the candidates compiled")
    bs.precompile(space, kernel, st)
    judge("b: every kept config compiled")
    got = tune_once(space, kernel, st, f"judge_repeat_{args.m}_{os.getpid()}")
    report["tuning"] = {"choice": got["choice"], "seconds": got["seconds"]}
    bs.say(f"one tuning chose {got['choice']} in {got['seconds']:.2f} s")
    judge("c: after one tuning")
    judge("d: again")
    args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
