"""CPU tests of the examples: the Triton GEMM (interpreter), GEMM-RS on 2 gloo ranks, the TP MLP on 4, the AG-GEMM
and GEMM-RS scripts on 2, and the flash-linear-attention example's skip line.

Also a script for the GEMM-RS check on any device::

    bash launch.sh tests/test_examples_cpu.py --case gemm_rs
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (HERE.parent, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before examples.gemm_kernels imports Triton

import pytest  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
from test_ag_gemm import fill_empty_with_nan, init_distributed, relative_error, runnable_configs  # noqa: E402

from examples._dist_common import split_rows  # noqa: E402
from examples.gemm_kernels import (  # noqa: E402
    TORCH_GEMM,
    config_spec,
    gemm,
    gemm_config_space,
    gemm_config_specs,
    interpreter_enabled,
    prune_by_shared_memory,
    shared_memory_bytes,
    tile_usable,
    to_triton_config,
)

needs_kernel = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreter_enabled(), reason="needs a GPU or TRITON_INTERPRET=1"
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE, TOL = (torch.bfloat16, 1e-2) if torch.cuda.is_available() else (torch.float32, 1e-5)

# ----------------------------------------------------------------------------------------------------
# The GEMM kernel, in this process.


@needs_kernel
@pytest.mark.parametrize("spec", gemm_config_specs(DEVICE))
@pytest.mark.parametrize("m, k, n", [(37, 24, 20), (1, 5, 3), (33, 48, 17)])
def test_gemm_matches_matmul(spec: str, m: int, k: int, n: int) -> None:
    a = torch.randn(m, k, device=DEVICE).to(DTYPE)
    b = torch.randn(k, n, device=DEVICE).to(DTYPE)
    out = torch.full((m, n), float("nan"), device=DEVICE, dtype=DTYPE)
    assert gemm(a, b, out, spec) is out
    assert relative_error(out, a.float() @ b.float()) <= TOL


@needs_kernel
@pytest.mark.parametrize("spec", [gemm_config_specs(DEVICE)[0], TORCH_GEMM])
def test_gemm_batched_into_strided_view(spec: str) -> None:
    """A strided batch written into the middle rows of a larger tensor; the rest stays untouched."""
    a = torch.randn(3, 40, 24, device=DEVICE).to(DTYPE)[:, 3:22]  # [3, 19, 24], strided
    b = torch.randn(24, 20, device=DEVICE).to(DTYPE)
    big = torch.full((3, 30, 20), float("nan"), device=DEVICE, dtype=DTYPE)
    gemm(a, b, big[:, 5:24], spec)
    assert relative_error(big[:, 5:24], a.float() @ b.float()) <= TOL
    assert big[:, :5].isnan().all() and big[:, 24:].isnan().all()


def test_gemm_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError):
        gemm(torch.zeros(4, 3), torch.zeros(4, 2))
    with pytest.raises(ValueError):
        gemm(torch.zeros(4, 3), torch.zeros(3, 2), torch.zeros(4, 3))


def test_gemm_hands_a_callable_config_the_checked_operands() -> None:
    """A launcher as the config (how a triton.autotune kernel runs inside the examples): called once with the
    operands and the output ``gemm`` allocated, after the shape checks; its result is returned."""
    seen = []

    def launcher(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        seen.append((a, b, tuple(out.shape)))
        return torch.mm(a, b, out=out)

    a, b = torch.randn(5, 3), torch.randn(3, 2)
    out = gemm(a, b, None, launcher)
    assert len(seen) == 1 and seen[0][0] is a and seen[0][1] is b and seen[0][2] == (5, 2)
    assert relative_error(out, a @ b) <= 1e-6
    with pytest.raises(ValueError):
        gemm(a, torch.zeros(4, 2), None, launcher)
    assert len(seen) == 1


def test_config_strings_round_trip() -> None:
    for spec in gemm_config_specs("cuda") + gemm_config_specs("cpu"):
        cfg = to_triton_config(spec)
        assert isinstance(cfg, triton.Config) and config_spec(cfg) == spec
    with pytest.raises(ValueError):
        to_triton_config("128x128")


def test_hopper_space_fits_shared_memory() -> None:
    """Every Hopper config fits 227 KiB in bf16; a 5-stage 128x256x64 tile would not."""
    hopper = (
        gemm_config_space("cuda")
        if not interpreter_enabled()
        else [to_triton_config(s) for s in ("128x256x64-g8-w8-s3", "128x256x64-g8-w8-s4")]
    )
    assert all(prune_by_shared_memory(c, 2) for c in hopper)
    assert shared_memory_bytes("128x256x64-g8-w8-s3", 2) == 3 * (128 * 64 + 64 * 256) * 2
    assert not prune_by_shared_memory("128x256x64-g8-w8-s5", 2)
    assert prune_by_shared_memory(TORCH_GEMM, 2)


def test_tile_usable_drops_tall_tiles_for_few_rows() -> None:
    a = torch.zeros(8, 8)
    assert tile_usable(TORCH_GEMM, a, 1)
    if interpreter_enabled():
        assert tile_usable("32x32x32-g4-w4-s2", a, 5)
        assert not tile_usable("256x128x64-g8-w8-s3", a, 5)


def test_prune_functions_keep_one_entry_per_torch_algo_and_drop_the_invalid() -> None:
    """On CPU: no symmetric memory (no p2p, torch_fused), splits divide, torch algos keep one entry."""
    from examples.ag_gemm import ag_gemm_config_space, ag_gemm_prune
    from examples.gemm_rs import gemm_rs_config_space, gemm_rs_prune

    a, b = torch.zeros(12, 8), torch.zeros(8, 8)
    for space, prune in (
        (ag_gemm_config_space("cpu"), ag_gemm_prune),
        (gemm_rs_config_space("cpu"), gemm_rs_prune),
    ):
        kept = [c for c in space if prune(c, a, b)]
        assert kept[0] == space[0] == {"algo": "chunked", "splits": 1, "gemm_config": TORCH_GEMM}
        assert [c["algo"] for c in kept].count("torch") == 1
        assert not any(c["algo"] in ("p2p", "torch_fused") for c in kept)
        assert not any(c["algo"] == "sequential" and c["gemm_config"] == TORCH_GEMM for c in kept)
        assert all(12 % c["splits"] == 0 for c in kept)
        assert not prune({"algo": "nope", "splits": 1, "gemm_config": TORCH_GEMM}, a, b)
    odd = torch.zeros(10, 8)  # 10 rows: splits=4 does not divide
    assert not ag_gemm_prune({"algo": "chunked", "splits": 4, "gemm_config": TORCH_GEMM}, odd, b)


def test_split_rows() -> None:
    assert split_rows(37, 4) == [(0, 10), (10, 9), (19, 9), (28, 9)]
    assert split_rows(2, 4) == [(0, 1), (1, 1)]
    assert split_rows(8, 1) == [(0, 8)]
    with pytest.raises(ValueError):
        split_rows(8, 0)


# ----------------------------------------------------------------------------------------------------
# GEMM-RS on real ranks (script side).

RS_CPU_SHAPES = [(74, 24, 20), (2, 16, 16), (10, 7, 3), (32, 32, 48)]  # (M, K_local, N), M % 2 == 0
RS_GPU_SHAPES = [(74, 200, 136), (512, 512, 384)]


def check_gemm_rs() -> int:
    """Check every gemm_rs config against matmul + reduce_scatter; return the number of failures."""
    from examples.gemm_rs import gemm_rs, gemm_rs_config_space, gemm_rs_prune

    fill_empty_with_nan()  # before the process group exists
    device = init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = device.type == "cuda"
    dtype, tol = (torch.bfloat16, 2e-2) if cuda else (torch.float32, 1e-5)
    gen = torch.Generator().manual_seed(4321 + rank)
    failures = 0
    for m, k, n in RS_GPU_SHAPES if cuda else RS_CPU_SHAPES:
        m = m // 2 * world
        A = torch.randn(m, k, generator=gen).to(device, dtype)
        B = (torch.randn(k, n, generator=gen) / k**0.5).to(device, dtype)
        partial = A.float() @ B.float()
        dist.all_reduce(partial)
        ref = partial[rank * (m // world) : (rank + 1) * (m // world)]
        space = gemm_rs_config_space(device)
        kept = [c for c in space if gemm_rs_prune(c, A, B)]
        assert kept and kept[0] == space[0], "prune_fn must keep the first (default) config"
        configs = runnable_configs(space, A, None, "fused_matmul_reduce_scatter")
        for cfg in configs:
            try:
                err = relative_error(gemm_rs(A, B, **cfg), ref)
            except Exception as exc:  # report and go on
                err = float("nan")
                print(f"[rank {rank}] ERROR {cfg} at {(m, k, n)}: {type(exc).__name__}: {exc}", flush=True)
            if not err <= tol:
                failures += 1
                print(f"[rank {rank}] FAIL gemm_rs {cfg} at M,K_local,N={(m, k, n)}: rel err {err:.3g}")
        if rank == 0:
            print(f"gemm_rs check {(m, k, n)} x{world}: {len(configs)} configs, {len(kept)} kept by prune")
    try:  # M not divisible by the group size: a clear error
        odd = torch.zeros(world + 1, 4, device=device, dtype=dtype)
        gemm_rs(odd, torch.zeros(4, 4, device=device, dtype=dtype))
        failures += 1
        print(f"[rank {rank}] FAIL gemm_rs accepted M={world + 1}")
    except ValueError as exc:
        assert "multiple of the group size" in str(exc)
    total = torch.tensor([failures], device=device)
    dist.all_reduce(total)
    if rank == 0:
        print("gemm_rs check: " + ("PASSED" if total.item() == 0 else f"FAILED ({total.item()} failures)"))
    dist.destroy_process_group()
    return int(total.item())


@pytest.mark.timeout(240)
def test_gemm_rs_check_cpu_two_ranks(tmp_path: Path) -> None:
    """Every gemm_rs config against matmul + reduce_scatter on 2 gloo ranks (forks of the test server, as in
    test_ag_gemm_check_cpu_two_ranks)."""
    from harness import describe, run_ranks

    ranks = run_ranks(Path(__file__), 2, ["--case", "gemm_rs"], timeout=220)
    assert all(r.returncode == 0 for r in ranks), describe(ranks)
    assert "gemm_rs check: PASSED" in ranks[0].stdout, describe(ranks)
    assert not any("FAIL" in r.stdout for r in ranks), describe(ranks)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("example", ["ag_gemm", "gemm_rs"])
def test_ag_gemm_and_gemm_rs_examples_run_on_two_cpu_ranks(tmp_path: Path, example: str) -> None:
    """``examples/<example>.py`` on 2 gloo ranks without a GPU (what ``bash launch.sh`` runs; the ranks here are forks
    of the test server with torchrun's variables, launch.sh itself being tested with the quick start and
    tests/test_newcomer.py): the interpreter, tiny shapes; rank 0 prints one OK line per rank, with one config for
    every rank (before: the files had no main and ran nothing), then that the key was tuned, none served from the
    cache; run again on the same cache, that it was served from the cache (before: both runs printed the same lines,
    and only the rank logs said 'cache hit')."""
    from harness import describe, run_ranks

    env = {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"),
           "TRITON_DIST_AUTOTUNE_LOG_DIR": str(tmp_path / "logs")}
    ranks = run_ranks(HERE.parent / "examples" / f"{example}.py", 2, timeout=220, env=env)
    assert all(r.returncode == 0 for r in ranks), describe(ranks)
    lines = [line for line in ranks[0].stdout.splitlines() if line.startswith(f"{example} rank ")]
    assert [line.split(":")[0] for line in lines] == [f"{example} rank 0/2", f"{example} rank 1/2"], describe(ranks)
    assert all(": OK rel err" in line and "'algo'" in line for line in lines), describe(ranks)
    assert len({line.split("; ", 1)[1] for line in lines}) == 1, lines
    said = [line for r in ranks for line in r.stdout.splitlines() if line.startswith(f"{example} keys: ")]
    assert said == [f"{example} keys: 1 tuned, 0 served from the cache"], describe(ranks)  # rank 0 alone says it
    assert said[0] in ranks[0].stdout
    again = run_ranks(HERE.parent / "examples" / f"{example}.py", 2, timeout=220, env=env)
    assert all(r.returncode == 0 for r in again), describe(again)
    said = [line for line in again[0].stdout.splitlines() if line.startswith(f"{example} keys: ")]
    assert said == [f"{example} keys: 0 tuned, 1 served from the cache (decided by an earlier run; "
                    "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1 tunes again)"], describe(again)


@pytest.mark.parametrize("example", ["quickstart", "ag_gemm", "gemm_rs", "tp_mlp", "fla_contextual"])
def test_an_example_without_options_refuses_an_argument_and_says_what_it_does_on_help(example, capsys) -> None:
    """``bash launch.sh examples/ag_gemm.py --tiny`` (the option moe_gemm.py has) ran the example as if nothing had
    been given: every one of these took any argument and ignored it. Now an argument is argparse's one-line error
    and exit status 2 before any group starts, and ``--help`` says what the example does."""
    import importlib

    main = importlib.import_module(f"examples.{example}").main
    with pytest.raises(SystemExit) as stopped:
        main(["--tiny"])
    assert stopped.value.code == 2 and "unrecognized arguments: --tiny" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 0
    first_line = importlib.import_module(f"examples.{example}").__doc__.split("\n")[0]
    assert first_line.split()[0] in capsys.readouterr().out


@pytest.mark.parametrize("example", ["ag_gemm", "gemm_rs"])
def test_the_tuned_gemms_docs_say_a_tp_group_goes_both_to_group_and_to_autotune_pg(example) -> None:
    """``tuned_ag_gemm`` "tunes them per shape over the group given as autotune_pg=", the module said, and nothing of
    ``group=``: ``tuned_ag_gemm(a, b, autotune_pg=tp)`` on 4 CPU ranks (two TP groups of 2) tuned each TP group on its
    own while the all-gathers ran on the default group, and gloo aborted the job ("Received data size doesn't match
    expected size"). The docs now give the call that works, as ``TPMLP.forward`` makes it."""
    import importlib

    doc = importlib.import_module(f"examples.{example}").__doc__
    assert f"tuned_{example}(a, b, group=tp, autotune_pg=tp)" in doc, doc
    assert "with ``autotune_pg=" in doc and "alone" in doc, doc  # and what goes wrong without group=


@pytest.mark.timeout(120)
def test_fla_example_says_it_is_skipped_without_fla_core_or_a_gpu() -> None:
    from harness import run_process

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the example would run")
    proc = run_process(HERE.parent / "examples" / "fla_contextual.py", timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "skipped: needs fla-core and a GPU\n", proc.stdout + proc.stderr[-3000:]


@pytest.mark.parametrize(("variables", "said"), [({"RANK": "1"}, False), ({"OMPI_COMM_WORLD_RANK": "2"}, False),
                                                 ({"RANK": "0"}, True), ({}, True)])
def test_the_fla_examples_skip_line_is_said_once_per_job(variables, said, monkeypatch, capsys) -> None:
    """``bash launch.sh examples/fla_contextual.py`` on 2 CPU ranks printed ``skipped: ...`` twice, once per rank,
    where every other example prints from rank 0 alone. Now only rank 0 (or a process no launcher ranked) says it;
    every rank still exits 0."""
    import importlib

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the example may run")
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert importlib.import_module("examples.fla_contextual").main([]) == 0
    assert capsys.readouterr().out == ("skipped: needs fla-core and a GPU\n" if said else "")


def test_the_fla_benchmark_refuses_a_bad_order_and_says_skipped_without_fla_core_or_a_gpu(tmp_path, monkeypatch,
                                                                                         capsys) -> None:
    """benchmarks/bench_fla.py (stock autotune against contextual_autotune around fla's chunk_gla) runs on a GPU
    only; here its plumbing: the example's helpers it imports, its --order check, the example's skip line."""
    import importlib.util

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark would run")
    spec = importlib.util.spec_from_file_location("bench_fla", HERE.parent / "benchmarks" / "bench_fla.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # the benchmark sets one where none is set
    out = tmp_path / "fla.json"
    monkeypatch.setattr(sys, "argv", ["bench_fla.py", "--order", "stock,stock", "--out", str(out)])
    with pytest.raises(SystemExit) as refused:
        bench.main()
    assert refused.value.code == 2 and "--order must name stock and contextual" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["bench_fla.py", "--order", "contextual,stock", "--out", str(out)])
    assert bench.main() == 0 and capsys.readouterr().out == "skipped: needs fla-core and a GPU\n"
    assert not out.exists()


def main(argv: list[str] | None = None) -> int:
    """Script entry: ``--case gemm_rs``."""
    parser = argparse.ArgumentParser(description="GEMM-RS check on real ranks")
    parser.add_argument("--case", choices=("gemm_rs",), default="gemm_rs")
    parser.parse_args(argv)
    return 1 if check_gemm_rs() else 0


if __name__ == "__main__":
    sys.exit(main())
