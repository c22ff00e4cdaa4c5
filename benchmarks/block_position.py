"""Does a config's time depend on how long the device has been busy, or on the config that ran just before it?
At MoE M = 32 the tile M16-N128-K128-G1-w8-s3 read 62-64 us in every timing but one and 58.5-59.4 us inside the
race's settled block after its first round (``results/session_h200_22``, call 4). Here the first config named (the
subject) is timed in blocks that each start after 100 ms of idle device and then keep it busy without a
synchronize:

- ``alone``: the subject's samples back to back;
- ``after X``: X's samples and the subject's by turns, for each other config X;
- ``cycle``: all configs by turns in a fixed order, as a settled block's rounds run;
- with ``--predecessors``, kernels a model runs before its MoE layer (``gemm``: the attention's output projection,
  (M, 4096) x (4096, 4096); ``norm``: an RMS norm of (M, 4096); ``copy``: a 64 MB copy), each as ``after X`` above,
  and as ``layer X``: a graph of one call of X then one of the subject, by turns with X's graph alone (the subject's
  time: the pair's less X's median in that block), as a served layer follows the one before it on every call.

Every sample is ``--sample-ms`` of replays of the config's CUDA graph of one call of the tuned function (its
output allocated per call, as the tuner's graphs hold it), timed with device events. Prints, per block, the
subject's samples in order (us per call) and their medians over the first ``--head`` samples and the rest, and the
SM clock's median (pynvml); writes every sample to ``--out``.

Launch (one GPU): ``python benchmarks/block_position.py --family moe --m 32 --configs SUBJECT,A,B,... --out F``
CPU plumbing: ``TRITON_INTERPRET=1 python benchmarks/block_position.py --cpu-smoke --family moe --m 8 --configs ...``
(eager calls timed by the wall clock: no device, no idle).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
import torch  # noqa: E402
from _search_clocks import GraphClock, sm_clock  # noqa: E402
from _search_oracles import compile_all  # noqa: E402
from regime_check import configs_parser, kept_candidates  # noqa: E402


def _replayer(call: Callable[[], Any], sample_ms: float) -> tuple[Callable[[], Any], int]:
    """(one replay, replays per sample): the config's CUDA graph of one call (GPU), or the call itself (CPU)."""
    if not bs.GPU:
        return call, 1
    clock = GraphClock(1)
    graph = clock.capture(call)
    per = clock.screen_graph(graph)
    return graph.replay, max(1, math.ceil(sample_ms / per))


def _predecessor(kind: str, m: int) -> Callable[[], Any]:
    """One call of a kernel a model runs before its MoE layer (see the module docstring), on its own tensors."""
    device, dtype = ("cuda", torch.bfloat16) if bs.GPU else ("cpu", torch.float32)
    size = 4096 if bs.GPU else 64
    if kind == "gemm":
        a, w = torch.randn(m, size, device=device, dtype=dtype), torch.randn(size, size, device=device, dtype=dtype)
        return lambda: torch.matmul(a, w)
    if kind == "norm":
        x, weight = torch.randn(m, size, device=device, dtype=dtype), torch.ones(size, device=device, dtype=dtype)
        return lambda: torch.nn.functional.rms_norm(x, (size,), weight)
    if kind == "copy":
        count = (64 << 20) // 2 if bs.GPU else 1 << 16
        src, dst = torch.randn(count, device=device, dtype=dtype), torch.empty(count, device=device, dtype=dtype)
        return lambda: dst.copy_(src)
    raise SystemExit(f"block_position: no predecessor {kind!r} (gemm, norm, copy)")


def _block(order: list[str], replayers: dict[str, tuple[Callable[[], Any], int]], samples: int
           ) -> list[tuple[str, float]]:
    """After 100 ms of idle device: ``samples`` samples taken by turns in ``order``, no synchronize between them;
    each sample's (config, us per call)."""
    if bs.GPU:
        torch.cuda.synchronize()
    time.sleep(0.1)
    marks = []
    for k in range(samples):
        name = order[k % len(order)]
        replay, reps = replayers[name]
        if bs.GPU:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(reps):
                replay()
            e.record()
            marks.append((name, s, e, reps))
        else:
            t = time.perf_counter()
            replay()
            marks.append((name, t, time.perf_counter(), reps))
    if bs.GPU:
        torch.cuda.synchronize()
        return [(name, 1e3 * s.elapsed_time(e) / reps) for name, s, e, reps in marks]
    return [(name, 1e6 * (e - s) / reps) for name, s, e, reps in marks]


def main() -> int:
    p = configs_parser(__doc__.splitlines()[0])
    p.add_argument("--sample-ms", type=float, default=5.0)
    p.add_argument("--samples", type=int, default=48, help="samples per block")
    p.add_argument("--head", type=int, default=6, help="the subject's first samples, reported apart")
    p.add_argument("--repeats", type=int, default=3, help="each block this many times")
    p.add_argument("--predecessors", default="", help="kernels of a model before its MoE layer: gemm,norm,copy")
    args = p.parse_args()
    space, kernel, st, texts, names = kept_candidates(args, "block_position")
    compile_all(space, kernel, st, [texts[n] for n in names])
    subject = names[0]
    replayers = {n: _replayer(space.call(kernel, st, texts[n]), args.sample_ms) for n in names}
    blocks = [("alone", [subject])] + [(f"after {n}", [n, subject]) for n in names[1:]] + [("cycle", names)]
    for kind in filter(None, args.predecessors.split(",")):
        before, call = _predecessor(kind, args.m), space.call(kernel, st, texts[subject])
        replayers[kind] = _replayer(before, args.sample_ms)
        replayers[f"{kind}+{subject}"] = _replayer(lambda before=before, call=call: (before(), call()),
                                                   args.sample_ms)
        blocks += [(f"after {kind}", [kind, subject]), (f"layer {kind}", [kind, f"{kind}+{subject}"])]
    sampler = sm_clock()
    report: dict[str, Any] = {"gpu": bs.gpu_name(), "family": args.family, "m": args.m, "subject": subject,
                              "sample_ms": args.sample_ms, "blocks": []}
    for r in range(args.repeats):
        for label, order in blocks:
            if sampler is not None:
                with sampler:
                    got = _block(order, replayers, args.samples * len(order) // (2 if len(order) > 1 else 1))
                clock = sampler.median()
            else:
                got, clock = _block(order, replayers, args.samples), None
            mine = [us for name, us in got if name == subject]
            if label.startswith("layer "):  # the pair's time less the predecessor's own
                kind = label.split(" ", 1)[1]
                alone = statistics.median(us for name, us in got if name == kind)
                mine = [us - alone for name, us in got if name == f"{kind}+{subject}"]
            head, rest = mine[:args.head], mine[args.head:] or mine
            report["blocks"].append({"repeat": r, "block": label, "sm_mhz": clock, "samples": got})
            bs.say(f"{label} (repeat {r}, SM {clock} MHz): {subject} first {len(head)} median "
                   f"{statistics.median(head):.1f} us, the other {len(rest)} {statistics.median(rest):.1f} us; "
                   + " ".join(f"{us:.1f}" for us in mine))
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
