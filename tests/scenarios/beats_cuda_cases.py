"""The failure board's beat while a rank compiles in threads, on a real GPU, run as real ranks by
tests/test_beats_cuda.py (skipped without CUDA): two gloo ranks share one GPU.

- ``gemm_compiles_in_threads``: an ``autotune``d Triton GEMM of 72 configs (under 128: compiled by threads of the
  rank's own process, not by worker processes), with ``T`` = 4 s, so that a rank whose board has not beaten for
  ``T + max(1, T/10)`` = 5 s is given up on. Triton's compiler holds the interpreter lock in parts of every compile
  (its Python front end, MLIR passes called without releasing it), and 16 compile threads hold it by turns: the
  board's beat thread must still get it often enough, or the other rank, waiting at an exchange, takes this one for
  dead. Each rank reports the tuning's outcome, the config it decided, and the longest a Python thread that sleeps
  0.1 s at a time overslept while the tuning ran (``lag``: how long a beat thread can wait for the lock).
"""

from __future__ import annotations

import os
import threading
import time

import torch
import torch.distributed as dist
import triton
import triton.language as tl
from _cases import case, emit, main, outcome

import triton_dist_tune as tdt

SPACE = [{"BM": bm, "BN": bn, "BK": bk, "num_warps": w, "num_stages": s}
         for bm in (32, 64, 128) for bn in (32, 64, 128) for bk in (32, 64) for w in (4, 8) for s in (2, 3)]


@triton.jit
def gemm_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = k + rk
        x = tl.load(a + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@case
def gemm_compiles_in_threads():
    tdt.init_distributed(backend="gloo")  # two ranks on one GPU: NCCL takes one GPU per rank
    a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 512, device="cuda", dtype=torch.float16)

    @tdt.autotune(SPACE, key_fn=lambda a, b: tuple(a.shape), name="beats_gemm")
    def gemm(a, b, *, BM, BN, BK, num_warps, num_stages):
        c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        grid = (triton.cdiv(a.shape[0], BM), triton.cdiv(b.shape[1], BN))
        gemm_kernel[grid](a, b, c, a.shape[0], b.shape[1], a.shape[1], BM=BM, BN=BN, BK=BK, num_warps=num_warps,
                          num_stages=num_stages)
        return c

    lags, done = [0.0], threading.Event()

    def measure_lag() -> None:
        while not done.is_set():
            start = time.monotonic()
            time.sleep(0.1)
            lags[0] = max(lags[0], time.monotonic() - start - 0.1)

    threading.Thread(target=measure_lag, daemon=True).start()
    result = outcome(lambda: bool(torch.allclose(gemm(a, b).float(), (a.float() @ b.float()), atol=0.5, rtol=0.05)))
    done.set()
    decided = [str(config) for config in gemm.tuner.decided.values()]  # no autotune_pg: the default group
    emit(rank=dist.get_rank(), **result, decided=decided, lag=round(lags[0], 3))
    os._exit(0)


if __name__ == "__main__":
    main()
