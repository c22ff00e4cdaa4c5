"""Decided calls of both tuners inside a CUDA-graph capture, replayed, and a call that would tune inside one
(issue 29, item 11). Needs one GPU; one process (the tuners tune alone).

Usage: python benchmarks/check_cuda_graphs.py [--out results/cuda_graphs.json]

For ``autotune`` and for ``contextual_autotune`` (a ``triton.autotune`` kernel inside), each check:

1. tunes a key outside any capture (the first call);
2. captures a decided call of it in ``torch.cuda.graph`` (after a warm-up on a side stream, as PyTorch's recipe
   says): a synchronize, a store or file access during the capture would make the capture fail;
3. writes new values into the static input, replays the graph and compares the output with an eager call;
4. calls it with a new shape inside a capture: ``CaptureError`` naming the key is expected; the device stays
   usable and a new capture of the decided call still works;
5. (``autotune`` only) with ``undecided="first"``, a new key inside a capture is served without tuning.

Prints one line per check and writes every outcome as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TRITON_DIST_AUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="tdt_graphs_cache_"))
os.environ.setdefault("TRITON_DIST_AUTOTUNE_LOG_DIR", tempfile.mkdtemp(prefix="tdt_graphs_logs_"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.errors import CaptureError  # noqa: E402


@triton.jit
def axpy_kernel(x, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, alpha * tl.load(x + offs, mask=mask) + 1.0, mask=mask)


CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((128, 4), (256, 4), (1024, 8))]
axpy_tuned = triton.autotune(configs=CONFIGS, key=["n"])(axpy_kernel)


def launch(kernel: Any, x: torch.Tensor, out: torch.Tensor, **meta: Any) -> None:
    n = x.numel()
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n, 2.0, **meta)


@tdt.autotune([{"BLOCK": 128}, {"BLOCK": 256}, {"BLOCK": 1024}], key_fn=lambda x: x.numel(), n_warmup=1,
              n_repeat=5, name="graph_axpy")
def function_level(x: torch.Tensor, *, BLOCK: int) -> torch.Tensor:  # noqa: N803 - a Triton meta-parameter
    out = torch.empty_like(x)
    launch(axpy_kernel, x, out, BLOCK=BLOCK)
    return out


@tdt.autotune([{"BLOCK": 128}, {"BLOCK": 256}], key_fn=lambda x: x.numel(), undecided="first",
              name="graph_axpy_first")
def served_first(x: torch.Tensor, *, BLOCK: int) -> torch.Tensor:  # noqa: N803
    out = torch.empty_like(x)
    launch(axpy_kernel, x, out, BLOCK=BLOCK)
    return out


@tdt.contextual_autotune(is_dist=False, n_warmup=1, n_repeat=5)
def contextual(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    launch(axpy_tuned, x, out)
    return out


def capture(fn: Any, x: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Warm ``fn(x)`` up on a side stream, then capture one call; returns the graph and its static output."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(x)
    return graph, out


def check(name: str, fn: Any, n: int) -> dict[str, Any]:
    """Steps 1-4 for one tuned callable."""
    result: dict[str, Any] = {"name": name, "n": n}
    x = torch.randn(n, device="cuda")
    fn(x)  # tunes the key (outside any capture)
    torch.cuda.synchronize()
    try:
        graph, out = capture(fn, x)
        result["captured"] = True
    except Exception as exc:  # noqa: BLE001 - reported
        result.update(captured=False, capture_error=f"{type(exc).__name__}: {exc}")
        return result
    x.copy_(torch.randn(n, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    expected = fn(x)
    result["replay_matches_eager"] = bool(torch.equal(out, expected))
    result["replay_matches_reference"] = bool(torch.allclose(out, 2.0 * x + 1.0))
    # a new key inside a capture: the tuner must refuse before launching or synchronizing anything
    y = torch.randn(n // 2 + 7, device="cuda")
    try:
        graph2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph2):
            fn(y)
        result["undecided_in_capture"] = "no error (unexpected)"
    except CaptureError as exc:
        result["undecided_in_capture"] = "CaptureError"
        result["undecided_message"] = str(exc)
        result["message_names_key"] = str(n // 2 + 7) in str(exc)
    except Exception as exc:  # noqa: BLE001 - reported
        result["undecided_in_capture"] = f"{type(exc).__name__}: {exc}"[:500]
    try:
        torch.cuda.synchronize()
        graph3, out3 = capture(fn, x)
        graph3.replay()
        torch.cuda.synchronize()
        result["device_usable_after"] = bool(torch.allclose(out3, 2.0 * x + 1.0))
    except Exception as exc:  # noqa: BLE001 - reported
        result["device_usable_after"] = f"{type(exc).__name__}: {exc}"[:500]
    return result


def check_served_first(n: int) -> dict[str, Any]:
    """Step 5: ``undecided="first"`` serves a new key inside a capture without tuning."""
    x = torch.randn(n, device="cuda")
    try:
        graph, out = capture(served_first, x)
        x.copy_(torch.randn(n, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        return {"name": "autotune undecided='first'", "captured": True,
                "replay_matches_reference": bool(torch.allclose(out, 2.0 * x + 1.0)),
                "decided_keys": sorted(served_first.tuner.decided)}
    except Exception as exc:  # noqa: BLE001 - reported
        return {"name": "autotune undecided='first'", "captured": False, "error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/cuda_graphs.json")
    parser.add_argument("--n", type=int, default=1 << 20)
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("check_cuda_graphs.py needs a GPU")
    results = [check("autotune", function_level, opts.n), check("contextual_autotune", contextual, opts.n),
               check_served_first(opts.n)]
    summary = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "results": results}
    for r in results:
        print(json.dumps(r))
    ok = all(r.get("captured") and r.get("replay_matches_reference") for r in results) and all(
        r.get("undecided_in_capture") == "CaptureError" and r.get("message_names_key")
        and r.get("device_usable_after") is True for r in results[:2])
    summary["ok"] = ok
    print("OK" if ok else "FAILED")
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
