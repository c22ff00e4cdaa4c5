"""Where a first key's compile seconds go: a timeline of every compile of one fresh tuning (one GPU).

Runs one tuning of a ``corpus.py`` family at one shape with a fresh Triton cache (the first key with compiles, as
``validate_search.py --first-key``), and records, by wrapping the library's compile steps (no change to what they
do):

- each compile worker process: when it was started, and each task it ran (start, end; its first task includes the
  worker's own start: the interpreter, Triton and the kernel's module);
- each config's compile in a compile thread (submitted, started, ended: the worker's compile and the parent's load
  of the kernel from Triton's cache);
- each compile pass (one per search stage: its start, end and configs) and each wait of a warm-up for its
  config's compile.

Prints and writes (``--out``, JSON) a summary: the tuning's seconds and breakdown, the compile pass's stages, the
workers' busy time against the pool's capacity over the span of compiling (utilization), the distribution of one
kernel's compile in a worker, and the time the warm-ups waited. Launch (one GPU, fresh ``HOME``)::

    python3 benchmarks/diagnose_compile.py --family gemm_k4096_n4096 --shape 256 --out DIR/compile.json

``--cpu-smoke`` (``TRITON_INTERPRET=1``): the plumbing only (no compile pass runs there).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import bench_search as bs  # noqa: E402  (fresh HOME and caches before Triton is imported)
import corpus  # noqa: E402
from bench_gemm_tuning import fresh_kernel, use_triton_cache  # noqa: E402
from validate_search import tune_once  # noqa: E402

T0 = time.perf_counter()
events: list[dict[str, Any]] = []
_lock = threading.Lock()


def note(kind: str, **fields: Any) -> None:
    with _lock:
        events.append({"kind": kind, "t": time.perf_counter() - T0, **fields})


def instrument() -> None:
    """Wrap the compile steps to record the timeline (their behaviour unchanged)."""
    from triton_dist_tune.measure import compile_pass, compile_workers, precompile

    worker_init = compile_workers.Worker.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        note("worker_start", fork=kwargs.get("fork", False))
        worker_init(self, *args, **kwargs)
        self.tasks_done = 0

    worker_compile = compile_workers.Worker.compile

    def compile_task(self: Any, task: bytes) -> tuple[bool, str]:
        start = time.perf_counter() - T0
        try:
            return worker_compile(self, task)
        finally:
            note("worker_task", start=start, pid=self.proc.pid, first=self.tasks_done == 0)
            self.tasks_done += 1

    compile_workers.Worker.__init__ = init
    compile_workers.Worker.compile = compile_task

    submit = precompile.Compiles.submit

    def submit_timed(self: Any, index: int, compile_one: Any, *rest: Any) -> None:
        submitted = time.perf_counter() - T0

        def timed() -> Any:
            start = time.perf_counter() - T0
            try:
                return compile_one()
            finally:
                note("thread_compile", index=index, submitted=submitted, start=start)

        submit(self, index, timed, *rest)

    precompile.Compiles.submit = submit_timed

    wait = precompile.Compiles.wait

    def wait_timed(self: Any, index: int) -> str | None:
        start = time.perf_counter() - T0
        try:
            return wait(self, index)
        finally:
            note("wait", index=index, start=start)

    precompile.Compiles.wait = wait_timed

    run_pass = compile_pass.compile_pass

    def pass_timed(group: Any, label: str, todo: Any, *rest: Any, **kwargs: Any) -> Any:
        start = time.perf_counter() - T0
        try:
            return run_pass(group, label, todo, *rest, **kwargs)
        finally:
            note("compile_pass", start=start, configs=len(todo), later=kwargs.get("rank", 0) > 0)

    compile_pass.compile_pass = pass_timed


def summary(got: dict[str, Any], processes: int) -> dict[str, Any]:
    tasks = [e for e in events if e["kind"] == "worker_task"]
    threads = [e for e in events if e["kind"] == "thread_compile"]
    waits = [e for e in events if e["kind"] == "wait"]
    passes = [e for e in events if e["kind"] == "compile_pass"]
    starts = [e["t"] for e in events if e["kind"] == "worker_start"]
    later = [e["t"] - e["start"] for e in tasks if not e["first"]]
    first = [e["t"] - e["start"] for e in tasks if e["first"]]
    span = (min(e["start"] for e in threads), max(e["t"] for e in threads)) if threads else (0.0, 0.0)
    busy = sum(e["t"] - e["start"] for e in tasks)
    capacity = processes * (span[1] - span[0])

    def dist(xs: list[float]) -> dict[str, float]:
        if not xs:
            return {}
        xs = sorted(xs)
        return {"n": len(xs), "median": statistics.median(xs), "p90": xs[int(0.9 * (len(xs) - 1))],
                "max": xs[-1], "sum": sum(xs)}

    return {
        "seconds": got["seconds"], "breakdown": got["breakdown"], "search": got["decision"].get("search"),
        "workers_started": len(starts),
        "workers_forked": sum(1 for e in events if e["kind"] == "worker_start" and e.get("fork")),
        "worker_first_task_s": dist(first), "worker_task_s": dist(later),
        "thread_compile_s": dist([e["t"] - e["start"] for e in threads]),
        "queued_s": dist([e["start"] - e["submitted"] for e in threads]),
        "compile_span_s": span[1] - span[0], "worker_busy_s": busy,
        "utilization": busy / capacity if capacity > 0 else None,
        "waits_s": sum(e["t"] - e["start"] for e in waits),
        "stages": [{"start": p["start"], "end": p["t"], "configs": p["configs"], "ahead": p.get("later", False)}
                   for p in passes],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="gemm_k4096_n4096")
    p.add_argument("--shape", default="256")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cpu-smoke", action="store_true")
    args = p.parse_args()
    instrument()
    from triton_dist_tune.measure.precompile import default_processes

    space, _ = corpus.family(args.family, args.cpu_smoke)
    m = args.shape if "x" in args.shape else int(args.shape)
    use_triton_cache(tempfile.mkdtemp(prefix="triton_diag_", dir=bs.BASE))
    got = tune_once(space, fresh_kernel(space.source), space.state(m), f"diag_{os.getpid()}")
    import triton_dist_tune

    report = {"gpu": bs.gpu_name(), "cpus": os.cpu_count(), "family": args.family, "shape": args.shape,
              "library": triton_dist_tune.__file__, "summary": summary(got, default_processes(1, 840)),
              "events": events}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["summary"], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
