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


SILENT_CHILD = """
import datetime, sys, threading
import torch.distributed as dist
from triton_dist_tune.group.beat import Silence
from triton_dist_tune.group.note import Note
from triton_dist_tune.group.pauses import PAUSES
stop = threading.Event()
def tick():
    while not PAUSES.wait(stop.wait, 0.2):
        pass
threading.Thread(target=tick, daemon=True).start()
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=10))
silence, note = Silence(), Note("1.1", ("f",), "its error", 5.0, beat_s=0.5)
print("ready", flush=True)
sys.stdin.readline()
print(silence.lost(store, "beat/1", 1, note, 2.0), flush=True)  # the first read: None, the clock starts
sys.stdin.readline()
print(silence.lost(store, "beat/1", 1, note, 2.0), flush=True)
"""


@pytest.mark.timeout(60)
def test_a_notes_beat_is_not_read_lost_over_a_span_the_waiting_rank_stood_still():
    """group/beat.py: a waiting rank reads a note's beat (a counter nobody moves: the note's process stood still
    with it, on one paused machine) once, is stopped 4 s (SIGSTOP, SIGCONT), and reads it again: with LOST_S 2 s, it
    does not read the process gone, for its own clock ran only milliseconds between the reads. Before, the raw
    clock counted the pause: it read the process silent for 4 s, and a wait would have raised naming it gone."""
    proc = subprocess.Popen([sys.executable, "-c", SILENT_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=base_env())
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write("first\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "None"
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(4.0)
        os.kill(proc.pid, signal.SIGCONT)
        said = proc.communicate("again\n", timeout=30)[0].strip()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert said == "None", said
