"""AllGather-GEMM tests, runnable as a pytest module or as a multi-rank script.

Script (one process per rank)::

    bash launch.sh tests/test_ag_gemm.py --case check   # every algo/config vs all_gather + matmul
    bash launch.sh tests/test_ag_gemm.py --case perf    # timings of every config the tuner would try (GPU)

As pytest, the ``check`` case runs on 2 CPU ranks (gloo, Triton interpreter; ``CHECK_TUNED=1`` adds the tuned path);
the GPU parts skip without CUDA.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

# CPU shapes (M_local, K, N): awkward rows (37 is no multiple of any tile), K and N not multiples of
# the tile, a single row per rank, and an even case.
CPU_SHAPES = [(37, 24, 20), (1, 16, 16), (5, 7, 3), (16, 32, 48)]
GPU_SHAPES = [(37, 200, 136), (256, 512, 384)]  # few shapes: each new one costs Triton compiles
PERF_SHAPES = [(4096, 8192, 4096), (16384, 3584, 4096), (64, 8192, 4096)]


def init_distributed() -> torch.device:
    """Start the default process group (NCCL + one GPU per rank with CUDA, else gloo); return the device."""
    import triton_dist_tune

    triton_dist_tune.init_distributed()
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float64 (NaN or inf when out has unwritten / bad elements)."""
    out64, ref64 = out.double(), ref.double()
    return ((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30)).item()


def runnable_configs(space: list[dict[str, Any]], A: torch.Tensor, group: Any, fused_op: str) -> list[dict]:
    """Every config that can run on A's device (uneven splits included: the functions support them)."""
    from examples._dist_common import symm_mem_available
    from examples.gemm_kernels import TORCH_GEMM, prune_by_shared_memory, shared_memory_limit

    keep = []
    for cfg in space:
        algo, splits, tile = cfg["algo"], cfg["splits"], cfg["gemm_config"]
        needs_symm_mem = algo in ("torch_fused", "p2p")
        if needs_symm_mem and not symm_mem_available(A, group, fused_op):
            ok = False
        elif algo in ("torch", "torch_fused"):
            ok = splits == 1 and tile == TORCH_GEMM
        else:
            ok = (algo in ("chunked", "p2p") or splits == 1) and (
                tile == TORCH_GEMM
                or prune_by_shared_memory(tile, A.element_size(), shared_memory_limit(A.device))
            )
        if ok:
            keep.append(cfg)
    return keep


def fill_empty_with_nan() -> None:
    """Have ``torch.empty`` fill its memory with NaN (deterministic algorithms, warnings only), so that an output a
    config leaves unwritten fails its check. The flag alone: ``torch.use_deterministic_algorithms`` also sets
    inductor's flag, and so imports torch._inductor and dynamo (2.9 s of CPU per rank here), which, after the
    process group exists, keep its gloo threads alive past destroy_process_group (the process then aborts at exit:
    "terminate called without an active exception")."""
    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_flag is None:  # a torch without it: the public call, before the process group exists
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        set_flag(True, warn_only=True)


def check(group: Any = None) -> int:
    """Check every config of ag_gemm against all_gather + matmul at several shapes; return #failures."""
    from examples.ag_gemm import ag_gemm, ag_gemm_config_space, ag_gemm_prune

    fill_empty_with_nan()  # before the process group exists
    device = init_distributed()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    cuda = device.type == "cuda"
    dtype, tol = (torch.bfloat16, 1e-2) if cuda else (torch.float32, 1e-5)
    gen = torch.Generator(device="cpu").manual_seed(1234 + rank)
    failures = 0
    for m_local, k, n in GPU_SHAPES if cuda else CPU_SHAPES:
        A = torch.randn(m_local, k, generator=gen).to(device, dtype)
        B = torch.randn(k, n, generator=gen).to(device, dtype) / k**0.5
        gathered = torch.empty(world * m_local, k, dtype=dtype, device=device)
        dist.all_gather_into_tensor(gathered, A, group=group)
        ref = gathered.float() @ B.float()
        space = ag_gemm_config_space(device)
        kept = [c for c in space if ag_gemm_prune(c, A, B, group=group)]
        assert kept and kept[0] == space[0], "prune_fn must keep the first (default) config"
        configs = runnable_configs(space, A, group, "fused_all_gather_matmul")
        for cfg in configs:
            try:
                out = ag_gemm(A, B, group=group, **cfg)
                err = relative_error(out, ref) if out.shape == ref.shape else float("inf")
            except Exception as exc:  # report and go on: one bad config must not hide the others
                err, out = float("nan"), None
                print(f"[rank {rank}] ERROR {cfg} at {(m_local, k, n)}: {type(exc).__name__}: {exc}")
            if not err <= tol:
                failures += 1
                print(f"[rank {rank}] FAIL ag_gemm {cfg} at M_local,K,N={(m_local, k, n)}: rel err {err:.3g}")
        if rank == 0:
            print(f"ag_gemm check {(m_local, k, n)} x{world}: {len(configs)} configs, {len(kept)} pass prune")
    failures += check_tuned(device, dtype, tol, group)
    total = torch.tensor([failures], dtype=torch.int64, device=device)
    dist.all_reduce(total, group=group)
    if rank == 0:
        print("ag_gemm check: " + ("PASSED" if total.item() == 0 else f"FAILED ({total.item()} failures)"))
    return int(total.item())


def check_tuned(device: torch.device, dtype: torch.dtype, tol: float, group: Any) -> int:
    """With ``CHECK_TUNED=1``: tune one small shape with triton_dist_tune and check the result. (The pytest run
    leaves it out: the tuned path is run by the example's own main and by tp_mlp.py, in tests/test_examples_cpu.py.)"""
    if os.environ.get("CHECK_TUNED") != "1":
        return 0
    try:
        import triton_dist_tune  # noqa: F401
    except ImportError:
        if dist.get_rank(group) == 0:
            print("ag_gemm check: triton_dist_tune not importable, tuned path skipped")
        return 0
    from examples._dist_common import LAST_CONFIG
    from examples.ag_gemm import tuned_ag_gemm

    gen = torch.Generator(device="cpu").manual_seed(99 + dist.get_rank(group))
    A = torch.randn(16, 16, generator=gen).to(device, dtype)
    B = torch.randn(16, 16, generator=gen).to(device, dtype)
    gathered = torch.empty(dist.get_world_size(group) * 16, 16, dtype=dtype, device=device)
    dist.all_gather_into_tensor(gathered, A, group=group)
    ref = gathered.float() @ B.float()
    failures = 0
    for _ in range(2):  # tune, then the hot path
        err = relative_error(tuned_ag_gemm(A, B, group=group, autotune_pg=group), ref)
        if not err <= tol:
            failures += 1
            print(f"[rank {dist.get_rank(group)}] FAIL tuned ag_gemm: rel err {err:.3g}")
    if dist.get_rank(group) == 0:
        print(f"ag_gemm tuned: chose {LAST_CONFIG.get('ag_gemm')}")
    return failures


def perf() -> None:
    """Print the time of every config the tuner would try, per shape (GPU only)."""
    from examples._dist_common import time_group_ms
    from examples.ag_gemm import ag_gemm, ag_gemm_config_space, ag_gemm_prune

    device = init_distributed()
    if device.type != "cuda":
        raise SystemExit("--case perf needs GPUs")
    rank, world = dist.get_rank(), dist.get_world_size()
    for m_local, k, n in PERF_SHAPES:
        A = torch.randn(m_local, k, device=device, dtype=torch.bfloat16)
        B = torch.randn(k, n, device=device, dtype=torch.bfloat16)
        rows = []
        for cfg in [c for c in ag_gemm_config_space(device) if ag_gemm_prune(c, A, B)]:
            rows.append((time_group_ms(lambda A=A, B=B, cfg=cfg: ag_gemm(A, B, **cfg)), cfg))
        if rank == 0:
            flop = 2 * world * m_local * k * n
            print(f"\nag_gemm M={world * m_local} K={k} N={n} on {world} GPUs (max of rank medians)")
            for ms, cfg in sorted(rows, key=lambda r: r[0]):
                print(f"  {ms:8.3f} ms {flop / ms / 1e9:7.1f} TFLOP/s  {cfg}")


def main(argv: list[str] | None = None) -> int:
    """Script entry: ``--case check`` or ``--case perf``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("check", "perf"), default="check")
    args = parser.parse_args(argv)
    try:
        if args.case == "check":
            return 1 if check() else 0
        perf()
        return 0
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------------
# pytest side: real ranks (CPU: gloo + Triton interpreter; GPU: through launch.sh).


def launch(
    args: list[str], nproc: int, timeout: float, cpu: bool = True, **env: str
) -> subprocess.CompletedProcess:
    """Run ``bash launch.sh --nproc N args...`` (``--cpu``: gloo ranks, Triton interpreter) and capture it."""
    multi_node = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK")
    run_env = {k: v for k, v in os.environ.items() if k not in multi_node}
    run_env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **env)
    return subprocess.run(
        ["bash", str(ROOT / "launch.sh"), *(["--cpu"] if cpu else []), "--nproc", str(nproc), *args],
        cwd=ROOT,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.timeout(240)
def test_ag_gemm_check_cpu_two_ranks(tmp_path: Path) -> None:
    """Every ag_gemm config against all_gather + matmul on 2 gloo ranks. The ranks are forks of
    the test server (tests/harness.py sets what torchrun would); launch.sh itself is tested by the examples' tests."""
    from harness import describe, run_ranks

    ranks = run_ranks(Path(__file__), 2, ["--case", "check"], env={"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path)},
                      timeout=220)
    assert all(r.returncode == 0 for r in ranks), describe(ranks)
    assert "ag_gemm check: PASSED" in ranks[0].stdout, describe(ranks)
    assert not any("FAIL" in r.stdout for r in ranks), describe(ranks)


@pytest.mark.timeout(600)
def test_ag_gemm_check_gpu(tmp_path: Path) -> None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA GPUs")
    args = ["tests/test_ag_gemm.py", "--case", "check"]
    proc = launch(args, 2, 580, cpu=False, TRITON_DIST_AUTOTUNE_CACHE_DIR=str(tmp_path))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ag_gemm check: PASSED" in proc.stdout, output[-4000:]


if __name__ == "__main__":
    sys.exit(main())
