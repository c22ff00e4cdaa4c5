"""Where the first key's seconds go: one first-key tuning (compiles included, an empty Triton cache, the defaults,
no user code) sampled every 2 ms in every thread (issue 20).

Launch (one fresh process per tuning, each with a fresh ``HOME`` and Triton cache):
``python benchmarks/probe_first_key.py --out FILE.json [--no-launcher-ahead]``.

The same tuning as ``bench_fidelity.py``'s ``compile`` phase (40 configs, 4096 x 8192 x 4096 bf16). A sampler thread
reads ``sys._current_frames()`` every 2 ms and counts, for the main thread, the innermost frame of Triton or of
this package with the stage it belongs to (waiting for a compile, building Triton's launcher, loading a module,
the race ...), and for the compile threads the compiler stage each busy thread is in. ``--no-launcher-ahead`` turns
off the compile threads' building of each kernel's launcher
(:func:`triton_dist_tune.measure.compile_pass.build_launcher`), for a side-by-side (the files of the first runs call
it ``load_ahead``). Triton's own runtime (its driver's C module, built
once per process and Triton cache) is started before the timing, as ``bench_fidelity.py`` does. Prints and writes
the seconds per stage.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from bench_fidelity import ours_tuning, space, triton_runtime_init  # noqa: E402
from bench_gemm_tuning import fresh_kernel, use_triton_cache  # noqa: E402

from examples.gemm_kernels import _gemm_kernel  # noqa: E402

#: (a function name or file on the stack, the stage it means), the first match from the innermost frame wins
STAGES = [("_build", "launcher: gcc"), ("compile_module_from_src", "launcher: load"),
          ("load_binary", "module load"), ("_init_handles", "handles"), ("make_ttir", "ttir"),
          ("make_ir", "frontend (make_ir)"),
          ("make_ttgir", "ttgir"), ("make_llir", "llir"), ("make_ptx", "ptx"), ("make_cubin", "cubin"),
          ("wait", "wait: compile"), ("synchronize", "synchronize"), ("compile_pass", "compile pass"),
          ("_steady_rounds", "race"), ("_warm", "warm-up run"), ("compile", "compile: other")]


def stage_of(frame) -> str:
    while frame is not None:
        name, path = frame.f_code.co_name, frame.f_code.co_filename
        for key, stage in STAGES:
            if name == key and ("triton" in path):
                return stage
        frame = frame.f_back
    return "other"


def sample(stop: threading.Event, counts: dict[str, collections.Counter], period: float = 0.002) -> None:
    main = threading.main_thread().ident
    names = {}
    while not stop.wait(period):
        counts["ticks"]["ticks"] += 1
        for ident, frame in sys._current_frames().items():
            if ident == threading.get_ident():
                continue
            if ident not in names:
                names[ident] = next((t.name for t in threading.enumerate() if t.ident == ident), "?")
            who = "main" if ident == main else ("compile" if names[ident].startswith("tdt-compile") else None)
            if who == "compile" and frame.f_code.co_name in ("_worker", "get", "wait") and \
                    "thread" in frame.f_code.co_filename:
                continue  # an idle pool thread
            if who:
                stage = stage_of(frame)
                counts[who][stage] += 1
                if who == "compile" and stage in ("compile: other", "other"):
                    code = frame.f_code
                    counts["inner"][f"{Path(code.co_filename).name}:{code.co_firstlineno}:{code.co_name}"] += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--no-launcher-ahead", action="store_true")
    args = parser.parse_args()
    if args.no_launcher_ahead:
        from triton_dist_tune.measure import compile_pass

        compile_pass.build_launcher = lambda kernel: None
    use_triton_cache(tempfile.mkdtemp(prefix="tdt_probe_first_"))
    kernel = fresh_kernel(_gemm_kernel)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    triton_runtime_init()
    driver_s = time.perf_counter() - t0
    counts = {"main": collections.Counter(), "compile": collections.Counter(), "ticks": collections.Counter(),
              "inner": collections.Counter()}
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(stop, counts), daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    choice, seconds, warm, race = ours_tuning(kernel, space(), (4096, 8192, 4096), f"probe_first_{os.getpid()}")
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    tick_s = wall / max(1, counts["ticks"]["ticks"])  # the sampler's real period (it waits for the GIL)
    result = {"launcher_ahead": not args.no_launcher_ahead, "triton_driver_init_s": round(driver_s, 3),
              "seconds": seconds, "warmup_s": warm, "race_s": race,
              "choice": choice, "cpus": os.cpu_count(),
              "sample_period_ms": round(tick_s * 1e3, 2),
              "main_s": {k: round(v * tick_s, 3) for k, v in counts["main"].most_common()},
              "compile_thread_s": {k: round(v * tick_s, 3) for k, v in counts["compile"].most_common()},
              "compile_other_innermost_s": {k: round(v * tick_s, 3) for k, v in counts["inner"].most_common(25)}}
    print(json.dumps(result, indent=1), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
