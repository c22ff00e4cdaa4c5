"""Start N CPU ranks of a benchmark script (gloo, one process each, torchrun's variables) and collect the ``RESULT``
line each prints: what the benchmarks that measure the tuner's control traffic share."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port free on this host now (for the ranks' store)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(n: int, command: list[str], package_root: Path, timeout: float, tuner_timeout: float,
              prefix: str) -> list[dict[str, Any]]:
    """Run ``command`` (a script and its arguments, after the interpreter) as ranks 0..n-1 of one job on this host,
    with the package at ``package_root``, a fresh cache and log folder (``prefix``: their folder's name) and the
    tuner's exchange timeout ``tuner_timeout``; return each rank's last ``RESULT {json}``, by rank. Every rank is
    killed when one fails or the job outlasts ``timeout`` seconds (a RuntimeError says which)."""
    port, work = free_port(), Path(tempfile.mkdtemp(prefix=prefix))
    procs = []
    for rank in range(n):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "PYTHONPATH": str(package_root), "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1",
               "CUDA_VISIBLE_DEVICES": "", "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(work / "cache"),
               "TRITON_DIST_AUTOTUNE_LOG_DIR": str(work / "logs"),
               "TRITON_DIST_AUTOTUNE_TIMEOUT": str(tuner_timeout)}
        env.pop("TORCHELASTIC_RESTART_COUNT", None)
        procs.append(subprocess.Popen([sys.executable, *command], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    deadline, results = time.monotonic() + timeout, []
    try:
        for rank, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{n} ranks did not finish within {timeout} s") from None
            lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise RuntimeError(f"rank {rank} of {n} failed (rc={proc.returncode}):\n{err[-3000:]}")
            results.append(json.loads(lines[-1][len("RESULT "):]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return results
