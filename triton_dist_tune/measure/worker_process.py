"""One compile worker process, as the rank sees it (:class:`Worker`): started (spawned as a new interpreter running
:mod:`~triton_dist_tune.measure.compile_worker`, or :class:`~.forked_worker.Forked`), fed tasks through its pipes,
ended. :mod:`~triton_dist_tune.measure.compile_workers` pools them."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from .compile_worker import NICENESS
from .forked_worker import Forked

_SCRIPT = Path(__file__).with_name("compile_worker.py")


def preloaded() -> list[str]:
    """The heavy modules a worker imports before it says it is ready: Triton's compiler, and torch where this
    process has imported it (a kernel's module mostly imports it; the worker would otherwise import it at its first
    task)."""
    return ["triton.compiler", *(["torch"] if "torch" in sys.modules else [])]


class Worker:
    """One worker process (spawned or :class:`Forked`) and its pipes; it lowers its priority by ``niceness``."""

    def __init__(self, fork: bool = False, niceness: int = NICENESS) -> None:
        self.proc: Any
        if fork:
            self.proc = Forked(niceness)
            return
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        self.proc = subprocess.Popen([sys.executable, str(_SCRIPT), f"--niceness={niceness}", *preloaded()],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)

    def ready(self) -> None:
        """Wait for the worker's first line, which it writes once its imports are done. Raises OSError when the
        worker ended or wrote something else."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise OSError("the compile worker ended before it was ready")
        if not json.loads(line).get("ready"):
            raise OSError(f"the compile worker did not say it was ready: {line[:200]!r}")

    def compile(self, task: bytes) -> tuple[bool, str]:
        """Send one task and wait for its answer: (compiled, error). Raises OSError when the worker is gone."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(struct.pack("<Q", len(task)) + task)
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise OSError("the compile worker ended")
        answer = json.loads(line)
        return bool(answer.get("ok")), str(answer.get("error", ""))

    def close(self) -> None:
        """End the worker now (its input closes; killed if it does not end within 2 s)."""
        self.close_input()
        self.end(2.0)

    def close_input(self) -> None:
        """Close the worker's input: it ends after its task."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass

    def end(self, wait: float) -> None:
        """Wait ``wait`` seconds for the worker to end, then kill it (and reap it: no zombie is left)."""
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:
                self.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
