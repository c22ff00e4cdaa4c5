"""The spans a process stood still, read from its own threads' waits (``group/pauses.py``): real processes, one
stopped (SIGSTOP) and continued, one whose main thread waits (a hung run) while its threads run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from harness import base_env

CHILD = """
import sys, threading, time
from triton_dist_tune.group.pauses import PAUSES
stop = threading.Event()
def tick():
    while not PAUSES.wait(stop.wait, 0.2):
        pass
threading.Thread(target=tick, daemon=True).start()
t0 = time.monotonic()
print("ready", flush=True)
sys.stdin.readline()  # the main thread waits here (a hung run), stopped or not
print(PAUSES.within(t0, time.monotonic()), flush=True)
"""


@pytest.mark.timeout(60)
def test_a_stopped_process_reads_the_span_it_stood_still_and_a_hung_one_none():
    """Two processes tick every 0.2 s through ``PAUSES.wait``: one is stopped for 3 s (SIGSTOP, then SIGCONT), the
    other's main thread waits as long, its threads running. The first reads the stop (most of its 3 s), the
    second nothing: a wait woken a second or more late, the process using no CPU meanwhile, is a pause; a thread
    that keeps ticking is none."""
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=base_env()) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        stopped, hung = procs
        os.kill(stopped.pid, signal.SIGSTOP)
        time.sleep(3.0)
        os.kill(stopped.pid, signal.SIGCONT)
        said = [float(proc.communicate("go\n", timeout=30)[0].strip()) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert 1.5 <= said[0] <= 30, said  # (stopped 3 s; the first late wait was due up to 0.2 s after the stop)
    assert said[1] == 0.0, said
