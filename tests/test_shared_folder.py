"""One cache folder shared by several processes at once (a shared home, a node running several jobs): what one
process writes never puts back what another removed or replaced in the meantime.

Real processes: the tuner runs as processes of its own (tests/harness.py ``tune_alone``, or a script started here),
the command line in this process (``main``). A race is made deterministic by pausing the serving process, through a
marker file, between its read of a decision and what it does next."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import ROOT, tune_alone
from test_cache_folder_edges import EDGES, cli

#: ``EDGES``, its cache reads paused: after each read of a decision it touches ``$MARKS/read`` and waits (at most
#: 60 s) for ``$MARKS/go`` before going on with the cache hit (whose rewrite records when the decision was served)
PAUSED_AFTER_READ = '''
import os, time
from pathlib import Path
from triton_dist_tune.disk.cache import DiskCache

_marks, _load = Path(os.environ["MARKS"]), DiskCache.load

def _paused_load(self, *args, **kwargs):
    data = _load(self, *args, **kwargs)
    (_marks / "read").touch()
    deadline = time.monotonic() + 60
    while not (_marks / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return data

DiskCache.load = _paused_load
''' + EDGES


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("meanwhile", ["clear", "tuned again"])
def test_a_cache_hit_never_puts_back_a_decision_cleared_or_tuned_again_after_it_read_it(tmp_path, capsys, meanwhile):
    """A job serves a decision from the cache (its cache hit rewrites the file with its ``served`` time) while
    ``clear`` removes it, or another job tunes the key again (``ALWAYS_TUNE``) and writes a newer decision, between
    the serving job's read and its rewrite. Before: the rewrite put the decision it had read back, so the cleared
    decision was served again by every later job, and the newer one was lost (its ``created`` replaced by the old
    one's). Now the rewrite is made only where the file is still the one read."""
    cache, env = tune_alone(tmp_path, EDGES, FIRST="1")
    (path,) = (cache / "edges").glob("*.json")
    # its two configs do the same work: the tuning may choose either (the fresh-clone CI once chose v=9)
    chosen = f"{{4: {{'v': {[1, 9][json.loads(path.read_text())['index']]}}}}}"
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "serve_paused.py"
    script.write_text(PAUSED_AFTER_READ)
    server = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env={**env, "MARKS": str(marks)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(marks / "read", server, 120)  # the serving job has read the decision, and waits
        if meanwhile == "clear":
            status, _, err = cli(["clear", "--function", "edges", "--cache-dir", cache], capsys)
            assert status == 0 and not path.exists(), err
        else:
            (tmp_path / "again").mkdir()
            tune_alone(tmp_path / "again", EDGES, FIRST="1", TRITON_DIST_AUTOTUNE_ALWAYS_TUNE="1",
                       TRITON_DIST_AUTOTUNE_CACHE_DIR=str(cache))
            newer = json.loads(path.read_text())
        (marks / "go").touch()
        out, err = server.communicate(timeout=120)
        assert server.returncode == 0, err[-3000:]
        assert chosen in out, (chosen, out)  # served from the cache
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    if meanwhile == "clear":
        assert not path.exists(), json.loads(path.read_text())  # before: the cleared decision was back
    else:
        now = json.loads(path.read_text())
        assert now["created"] == newer["created"], (now["created"], newer["created"])  # before: the older one's
