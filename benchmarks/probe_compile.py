"""Where the first key's compile time goes: the GEMM space of ``bench_fidelity.py`` compiled with Triton's compiler
one config after another, then in thread pools, each pass into a fresh Triton cache folder.

For each pass: the wall time, the sum over configs of each compile stage's time (Triton's compilation listener:
front end ``init``, ``ttir``, ``ttgir``, ``llir``, ``ptx``, ``cubin``), and how much of the interpreter lock the
main thread still got (a Python counting loop in the main thread while the pool compiles, against the same loop
alone). A stage whose summed time grows with the threads while the wall time does not fall waits on the lock (or
on the CPUs). Launch: ``python benchmarks/probe_compile.py --out DIR [--threads 1,4,8,16]``; writes
DIR/compile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import triton  # noqa: E402
from bench_fidelity import space  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from examples.gemm_kernels import _gemm_kernel  # noqa: E402

CONSTS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K")


def source(config: triton.Config) -> ASTSource:
    """The GEMM kernel specialised for ``config`` (bf16 pointers, i32 sizes and strides)."""
    values = {**config.kwargs, "EVEN_K": True}
    signature, constexprs = {}, {}
    for i, name in enumerate(_gemm_kernel.arg_names):
        if name in CONSTS:
            signature[name] = "constexpr"
            constexprs[(i,)] = values[name]
        else:
            signature[name] = "*bf16" if name.endswith("_ptr") else "i32"
    return ASTSource(_gemm_kernel, signature, constexprs)


def count_for(seconds: float, stop: threading.Event | None = None) -> int:
    """Iterations of a Python loop in ``seconds`` (or until ``stop``)."""
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end and not (stop and stop.is_set()):
        n += 1
    return n


def one_pass(configs: list[triton.Config], threads: int, target) -> dict:
    folder = tempfile.mkdtemp(prefix="tdt_probe_compile_")
    triton.knobs.cache.dir = folder
    stages: dict[str, float] = {}
    lock = threading.Lock()

    def listen(**kw) -> None:
        times = kw["times"]
        with lock:
            stages["init"] = stages.get("init", 0.0) + times.ir_initialization / 1e6
            for name, us in times.lowering_stages:
                stages[name] = stages.get(name, 0.0) + us / 1e6

    triton.knobs.compilation.listener = listen

    def one(config: triton.Config) -> None:
        triton.compile(source(config), target=target,
                       options={"num_warps": config.num_warps, "num_stages": config.num_stages})

    alone = count_for(0.5) / 0.5
    done = threading.Event()
    counted: list[float] = []

    def counter() -> None:  # the main thread's share of the interpreter lock while the pool compiles
        t0 = time.perf_counter()
        n = count_for(3600, done)
        counted.append(n / (time.perf_counter() - t0))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(one, c) for c in configs]
        watcher = threading.Thread(target=lambda: ([f.result() for f in futures], done.set()))
        watcher.start()
        counter()
        watcher.join()
    wall = time.perf_counter() - t0
    triton.knobs.compilation.listener = None
    return {"threads": threads, "configs": len(configs), "wall_s": wall,
            "stage_sums_s": {k: round(v, 3) for k, v in stages.items()},
            "main_thread_loop_share": counted[0] / alone if counted else None}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--threads", default="1,4,8,16")
    p.add_argument("--limit", type=int, default=0, help="only the first N configs (a smoke run)")
    args = p.parse_args()
    try:
        target = triton.runtime.driver.active.get_current_target()
    except Exception:  # no GPU here: compile for an H100 (a smoke run of the script)
        from triton.backends.compiler import GPUTarget

        target = GPUTarget("cuda", 90, 32)
    configs = space()[:args.limit or None]
    one_pass(configs[:1], 1, target)  # load the compiler's libraries once, outside every pass
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        row = one_pass(configs, threads, target)
        rows.append(row)
        print(f"{threads:2d} thread(s): {row['configs']} configs in {row['wall_s']:.2f} s; main thread's loop at "
              f"{row['main_thread_loop_share']:.2f} of its speed alone; stage sums {row['stage_sums_s']}",
              flush=True)
    os.makedirs(args.out, exist_ok=True)
    Path(args.out, "compile.json").write_text(json.dumps({"cpus": os.cpu_count(), "triton": triton.__version__,
                                                          "passes": rows}, indent=1))


if __name__ == "__main__":
    main()
