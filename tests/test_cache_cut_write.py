"""A decision's write cut short: its process SIGKILLed between the temporary file's write and its rename into place
(the lost decision's ``.<entry>.json.XXXXXXXX.tmp`` left in the function's folder). Real ranks (gloo), a real
signal, real files and the real command line."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from harness import HERE, base_env, describe, run_cli, run_python, run_ranks, tuner_env

CASES = HERE / "scenarios" / "cut_write_cases.py"
T = 30


def age(path, seconds: float) -> None:
    """``path`` as a file left ``seconds`` ago (its modification time set back): a write cut short long ago."""
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.mark.timeout(240)
def test_a_decision_write_cut_by_sigkill_is_said_removed_and_tuned_again(tmp_path):
    """Rank 0 is SIGKILLed as it renames the decision's temporary file into place. The next job finds no decision,
    says that a write of it was cut short (naming the temporary file), removes that file and tunes again; ``list``
    names such a file on stderr in between. Before, the temporary file stayed for ever, unnamed: ``list`` said
    nothing of it, ``clear --all`` neither removed nor named it (nor the folder that held it), and the next job
    tuned again without a word of the decision lost."""
    env = tuner_env(tmp_path, T)
    cache = tmp_path / "cache" / "cut"
    killed = run_ranks(CASES, 2, ["tune_once"], env={**env, "KILL_AT_RENAME": "0"}, timeout=150, stuck=[1])
    assert killed[0].returncode == -9, describe(killed)
    left = sorted(cache.glob(".*.json.*.tmp"))
    assert len(left) == 1 and not list(cache.glob("*.json")), (sorted(cache.iterdir()), describe(killed))
    age(left[0], 120)

    listed = run_cli(["list"], base_env(env), cwd=tmp_path)
    assert "1 temporary file(s) of decision writes cut short" in listed.stderr, listed.stderr
    assert str(left[0]) in listed.stderr, listed.stderr

    again = run_ranks(CASES, 2, ["tune_once"], env=env, timeout=150)
    assert all(r.returncode == 0 for r in again), describe(again)
    said = {r["rank"]: r["decided"] for result in again for r in result.results}
    assert said[0] == said[1] and len(said[0]) == 1, describe(again)
    assert "a write of it was cut short" in again[0].stderr and left[0].name in again[0].stderr, describe(again)
    assert not left[0].exists() and len(list(cache.glob("*.json"))) == 1, sorted(cache.iterdir())


def test_clear_removes_the_temporary_files_of_writes_cut_short_and_leaves_those_in_flight(tmp_path):
    """``clear --all`` removes a temporary file of a decision write cut short (named as the tuner's write names it,
    older than a minute) and says so, then the folder it emptied; a younger one (a write that may be in flight) and
    a file only like it (another name) are left. Before, every one was left, unnamed, and so the folder."""
    root = tmp_path / "cache"
    cut = root / "f" / ".0123456789abcdef0123.json.ab_cd123.tmp"
    fresh = root / "g" / ".0123456789abcdef0123.json.x1y2z3w4.tmp"
    other = root / "h" / ".mine.json.ab_cd123.tmp"
    for path in (cut, fresh, other):
        path.parent.mkdir(parents=True)
        path.write_text('{"format": 2, "ind')
    age(cut, 120)
    age(other, 120)
    done = run_cli(["clear", "--all", "--cache-dir", str(root)], base_env({}), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"removed {cut}" in done.stdout and "removed 1 temporary file(s) of decision writes cut short" in \
        done.stdout, done.stdout
    assert not cut.parent.exists() and fresh.exists() and other.exists(), done.stdout


#: one process that stores a decision into the cache folder ``sys.argv[1]`` (``DiskCache.store``, as a tuning does),
#: SIGKILLed, by a real signal to itself, as it renames the folder's versions record's temporary file into place
#: where ``sys.argv[2]`` is ``kill``
STORE = """
import os, signal, sys, time
from pathlib import Path
from triton_dist_tune.disk.cache import DiskCache
if sys.argv[2] == "kill":
    rename = os.replace
    def killed_at_rename(src, dst, *args, **kwargs):
        if os.path.basename(str(dst)).startswith(".versions-"):
            os.kill(os.getpid(), signal.SIGKILL)
        return rename(src, dst, *args, **kwargs)
    os.replace = killed_at_rename
decision = {"function": "f", "key": sys.argv[3], "index": 0, "config": "{v: 0}", "time_ms": 1.0, "group_size": 2,
            "created": time.time(), "measurements": []}
print(DiskCache("f", Path(sys.argv[1])).store(sys.argv[3].strip("()").rjust(20, "0"), decision, "space"))
"""


def test_a_versions_record_write_cut_short_is_named_by_list_and_removed_by_clear_all_and_the_next_write(tmp_path):
    """A process SIGKILLed between the cache folder's versions record's temporary file (``..versions-<hex>.
    XXXXXXXX.tmp``, written beside the functions' folders after each decision) and its rename. Before, that file
    stayed for ever: ``list`` named it nowhere, ``clear --all`` left it, and later writes of the record left it.
    Now, once over a minute old, ``list`` names it, ``clear --all`` removes it (and says so, the cache folder kept),
    and so does the next decision's write (its record written too)."""
    cache = tmp_path / "cache"
    killed = run_python(["-c", STORE, cache, "kill", "(4)"], base_env({}), timeout=120)
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-2000:])
    left = sorted(cache.glob("..versions-*.tmp"))
    assert len(left) == 1 and not list(cache.glob(".versions-*")) and len(list(cache.glob("f/*.json"))) == 1, \
        sorted(p.name for p in cache.rglob("*"))
    age(left[0], 120)

    listed = run_cli(["list", "--cache-dir", cache], base_env({}), cwd=tmp_path)
    assert listed.returncode == 0 and "1 decision(s)" in listed.stdout, (listed.stdout, listed.stderr)
    assert "1 temporary file(s) of versions-record writes cut short" in listed.stderr, listed.stderr
    assert str(left[0]) in listed.stderr, listed.stderr

    copy = tmp_path / "copy"
    shutil.copytree(cache, copy)
    (copy / "f" / next(cache.glob("f/*.json")).name).unlink()
    cleared = run_cli(["clear", "--all", "--cache-dir", copy], base_env({}), cwd=tmp_path)
    assert cleared.returncode == 0, cleared.stderr
    assert f"removed {copy / left[0].name}" in cleared.stdout, cleared.stdout
    assert "removed 1 temporary file(s) of versions-record writes cut short" in cleared.stdout, cleared.stdout
    assert copy.is_dir() and not list(copy.glob("..versions-*.tmp")), sorted(p.name for p in copy.rglob("*"))

    again = run_python(["-c", STORE, cache, "store", "(8)"], base_env({}), timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert not left[0].exists() and len(list(cache.glob(".versions-*"))) == 1, sorted(p.name for p in cache.iterdir())
