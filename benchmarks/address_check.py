"""Does a MoE config's time depend on where its output lies? At M = 32, M16-N128-K128-G1-w8-s3 reads 1.00 in the
tuner's race and 1.03-1.09 in the judgement run right after it, in 10 of 12 alternations of one process
(``level_choices.py``, ``results/session_h200_21``). The judge writes one preallocated output (``st.out``); the
tuned function allocates a new output in every call, inside the tuner's CUDA graph's memory pool.

One process, one shape, the given configs, each timed in one set of shuffled rounds of the judge's clock (graphs of
20 launches, 10 ms settling, 20 ms windows) under several **outputs**: ``fixed`` (the judge's ``st.out``),
``fresh`` (a new output per call, from the graph's pool, as the tuned function allocates it), and ``offK``
(preallocated at byte offset ``K * --step`` of one large buffer, for K < ``--offsets``); then once more with graphs
of 2 launches (the size of the tuner's graphs at this shape), ``fixed`` and ``fresh`` only. Prints, per config and
output, the drift-free score over the best of its set of rounds; writes them to ``--out``.

Launch (one GPU): ``python benchmarks/address_check.py --family moe --m 32 --configs A,B,... --out FILE``
CPU plumbing: ``TRITON_INTERPRET=1 python benchmarks/address_check.py --cpu-smoke --family moe --m 8 --configs ...``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import json  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
import torch  # noqa: E402
from _search_clocks import GraphClock, WallClock  # noqa: E402
from _search_common import GPU  # noqa: E402
from _search_oracles import compile_all, scores  # noqa: E402
from regime_check import configs_parser, kept_candidates  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import moe_kernels  # noqa: E402


def timed(clock: Any, calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Each call's drift-free score over the best's, from one set of shuffled rounds."""
    names = sorted(calls)
    got = scores(clock.rounds(calls, rounds, seed=7), names)
    best = min(got.values())
    return {n: got[n] / best for n in names}


class Outputs:
    """Where the calls of :func:`calls` write: ``fixed`` (the state's ``out``), ``fresh`` (a new output per call),
    ``offK`` (byte offset ``K * step`` of one large buffer, ``K < offsets``)."""

    def __init__(self, st: Any, offsets: int, step: int) -> None:
        self.out = out = st.out
        nbytes = out.numel() * out.element_size()
        self.big = torch.empty(offsets * step + nbytes, dtype=torch.uint8, device=out.device)
        self.where: dict[str, Callable[[], torch.Tensor | None]] = {"fixed": lambda: out, "fresh": lambda: None}
        for k in range(offsets):
            view = self.big[k * step:k * step + nbytes].view(out.dtype).view(out.shape)
            self.where[f"off{k}"] = lambda view=view: view
        self.offsets = [f"off{k}" for k in range(offsets)]


def calls(st: Any, kernel: Any, texts: dict[str, Any], names: list[str], outputs: Outputs,
          wheres: list[str]) -> dict[str, Callable[[], Any]]:
    """``name|where`` -> the MoE call of config ``name`` writing where ``where`` says."""
    a, w, routing = st.args

    def call(name: str, where: str) -> Callable[[], Any]:
        config, target = texts[name], outputs.where[where]
        return lambda: moe_kernels.moe_gemm(a, w, routing, target(), config, kernel)

    return {f"{n}|{where}": call(n, where) for n in names for where in wheres}


def over_placements(st: Any, kernel: Any, texts: dict[str, Any], names: list[str], rounds: int,
                    offsets: int = 16, step: int = 64 * 1024) -> dict[str, list[float]]:
    """The judge over output placements: each config timed writing at every offset of :class:`Outputs` (one set of
    shuffled rounds of graphs of 20 launches); {name: its ratio at each offset, over the best of the set}. A
    served model's buffers lie wherever its allocator puts them: a config's mean over the offsets is what it
    costs there."""
    outputs = Outputs(st, offsets, step)
    ratios = timed(GraphClock(20) if GPU else WallClock(), calls(st, kernel, texts, names, outputs, outputs.offsets),
                   rounds)
    return {n: [ratios[f"{n}|{where}"] for where in outputs.offsets] for n in names}


def main() -> int:
    p = configs_parser(__doc__.splitlines()[0])
    p.add_argument("--offsets", type=int, default=16)
    p.add_argument("--step", type=int, default=64 * 1024, help="bytes between two offsets")
    args = p.parse_args()
    space, kernel, st, texts, names = kept_candidates(args, "address_check")
    compile_all(space, kernel, st, [texts[n] for n in names])
    outputs = Outputs(st, args.offsets, args.step)
    report: dict[str, Any] = {"gpu": bs.gpu_name(), "family": args.family, "m": args.m, "step": args.step,
                              "out_ptr_mod_2MiB": outputs.out.data_ptr() % (2 << 20), "big_ptr_mod_2MiB":
                              outputs.big.data_ptr() % (2 << 20), "sets": {}}
    for label, launches, wheres in (("graphs of 20", 20, list(outputs.where)), ("graphs of 2", 2, ["fixed", "fresh"])):
        clock = GraphClock(launches) if GPU else WallClock()
        ratios = timed(clock, calls(st, kernel, texts, names, outputs, wheres), args.rounds)
        report["sets"][label] = ratios
        bs.say(f"{label} ({clock.label}), each config's score over the best of this set:")
        for n in names:
            bs.say(f"  {n}: " + " ".join(f"{where} {ratios[f'{n}|{where}']:.3f}" for where in wheres))
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
