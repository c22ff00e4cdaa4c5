"""Where one thread's wall time goes: a sampling profiler for a benchmark's process (not part of the library).

``start(path)`` starts a daemon thread that reads the stack of the thread that called it every ``interval``
seconds (``sys._current_frames``) and charges the time since its last reading to that stack, so that waits (a
lock, a synchronize, a sleep) count as much as Python work does. At exit it writes ``path``: the functions that
held the most wall time, inclusive (a function counted once per reading, however deep it recurs) and exclusive
(the innermost frame), then the collapsed stacks (``frame;frame;... seconds``, outermost first), which flame-graph
tools read. A reading waits for the GIL, so time in C code that holds it is charged to the next stack read.

Use: ``import stack_sampler; stack_sampler.start("stacks.txt")`` first in the process to profile (the campaign
scripts' prelude: ``benchmarks/gpu/_campaign.sh``), or ``python benchmarks/stack_sampler.py OUT script.py ARGS``.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import threading
import time
from collections import Counter
from pathlib import Path

#: frames kept per stack, innermost first (deeper frames are cut, their time kept)
DEPTH = 60
#: lines of each table in the report
TOP = 60


def _frame_name(frame) -> str:
    code = frame.f_code
    return f"{Path(code.co_filename).name}:{code.co_name}:{code.co_firstlineno}"


class Sampler:
    """Samples one thread's stack (see the module docstring)."""

    def __init__(self, thread_id: int, interval: float) -> None:
        self.thread_id = thread_id
        self.interval = interval
        self.stacks: Counter[tuple[str, ...]] = Counter()
        self.wall = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(self.thread_id)
            now = time.perf_counter()
            if frame is None:
                return
            stack = []
            while frame is not None and len(stack) < DEPTH:
                stack.append(_frame_name(frame))
                frame = frame.f_back
            self.stacks[tuple(reversed(stack))] += now - last
            self.wall += now - last
            last = now

    def report(self) -> str:
        inclusive: Counter[str] = Counter()
        exclusive: Counter[str] = Counter()
        for stack, seconds in self.stacks.items():
            for name in set(stack):
                inclusive[name] += seconds
            exclusive[stack[-1]] += seconds
        lines = [f"wall sampled: {self.wall:.2f} s (every {self.interval * 1000:.1f} ms)", "", "inclusive s:"]
        lines += [f"{s:9.2f}  {name}" for name, s in inclusive.most_common(TOP)]
        lines += ["", "exclusive s:"] + [f"{s:9.2f}  {name}" for name, s in exclusive.most_common(TOP)]
        lines += ["", "collapsed stacks:"]
        lines += [f"{';'.join(stack)} {s:.4f}" for stack, s in self.stacks.most_common()]
        return "\n".join(lines) + "\n"


def start(path: str | os.PathLike[str], interval: float = 0.002) -> Sampler:
    """Sample the calling thread until the process exits; the report goes to ``path``."""
    sampler = Sampler(threading.get_ident(), interval)
    sampler.start()

    def write() -> None:
        sampler.stop()
        Path(path).write_text(sampler.report())

    atexit.register(write)
    return sampler


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python benchmarks/stack_sampler.py OUT script.py [ARGS ...]")
    out, script = sys.argv[1], sys.argv[2]
    sys.argv = sys.argv[2:]
    start(out)
    runpy.run_path(script, run_name="__main__")
