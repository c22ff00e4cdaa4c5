"""A decision's write cut short: its process SIGKILLed between the temporary file's write and its rename into place
(the lost decision's ``.<entry>.json.XXXXXXXX.tmp`` left in the function's folder). Real ranks (gloo), a real
signal, real files and the real command line."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from harness import HERE, base_env, describe, run_cli, run_python, run_ranks, spawn, tuner_env

from triton_dist_tune.disk.bundles import BUNDLE_FORMAT, BUNDLE_KIND
from triton_dist_tune.disk.cache import hardware, versions, write_json_atomic

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


def big_bundle(tmp_path: Path, count: int) -> Path:
    """A bundle of ``count`` decisions of function ``moe``, as ``export`` writes one (each a format-2 decision named as
    the tuner names its files): its import stages a temporary file per decision, each written and synced, for
    seconds in all."""
    hw, now = hardware(), versions()
    entries = []
    for i in range(count):
        data = {"format": 2, "function": "moe", "key": f"({i},)", "index": 0, "config": "{BLOCK: 64}", "time_ms": 1.0,
                "margin": 0.1, "near_tie": False, "runner_up": 1, "timing": "steady", "rounds": 2, "group_size": 2,
                "group": "default", "created": time.time() - 60, "versions": now, "gpu": hw["gpu"],
                "gpu_count": hw["gpu_count"], "space": "abc", "measurements": []}
        entries.append({"path": f"moe/{hashlib.sha1(repr(i).encode()).hexdigest()[:20]}.json", "data": data})
    return write_json_atomic(tmp_path / "bundle.json", {"kind": BUNDLE_KIND, "format": BUNDLE_FORMAT, "created": 0.0,
                                                       "versions": now, "entries": entries})


def killed_import(bundle: Path, cache: Path) -> list[Path]:
    """Run ``triton-dist-tune import BUNDLE`` in a process of its own (a fork of the tests' server), SIGKILL it once
    it has staged some of the bundle's temporary files (polled for), and return the temporary files it left, set back
    two minutes (a write cut short long ago: :data:`~triton_dist_tune.disk.files.CUT_WRITE_S`)."""
    proc = spawn("-m", ["triton_dist_tune", "import", str(bundle), "--cache-dir", str(cache)], base_env({}))
    deadline = time.monotonic() + 60
    try:
        while len(list(cache.glob("moe/.*.import"))) < 5 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.returncode
    left = sorted(cache.glob("moe/.*.import"))
    assert left, sorted(p.name for p in cache.glob("moe/*"))[:10]
    for path in left:
        age(path, 120)
    return left


@pytest.mark.timeout(240)
def test_an_import_killed_mid_write_leaves_files_that_list_names_and_clear_and_the_next_import_remove(tmp_path):
    """``import`` of a bundle of 300 decisions SIGKILLed while it stages them (a temporary file per decision beside
    its target, ``.<entry>.json.XXXXXXXX.import``, renamed into place once all are staged), and a file an import's
    undo leaves when killed (``.<entry>.json.XXXXXXXX.restore``): ``list`` names them as the temporary files of
    decision writes cut short, ``clear --all`` removes them, and the next import of the bundle removes those of the
    decisions it writes (over a minute old, as a tuning's write removes its entry's) and says so. Before, they were
    never named nor removed: ``list`` said nothing, ``clear --all`` left them and their folder, and an import again
    left them beside the decisions it wrote."""
    cache = tmp_path / "cache"
    bundle = big_bundle(tmp_path, 300)
    left = killed_import(bundle, cache)
    undo = cache / "moe" / f".{'0' * 20}.json.ab_cd123.restore"
    undo.write_text('{"format": 2, "ind')
    age(undo, 120)
    listed = run_cli(["list", "--cache-dir", str(cache)], base_env({}), cwd=tmp_path)
    said = f"{len(left) + 1} temporary file(s) of decision writes cut short"
    assert said in listed.stderr, (len(left), listed.stderr)
    cleared = run_cli(["clear", "--all", "--cache-dir", str(cache)], base_env({}), cwd=tmp_path)
    assert cleared.returncode == 0 and f"removed {said}" in cleared.stdout, (len(left), cleared.stdout)
    assert not (cache / "moe").exists(), sorted(p.name for p in (cache / "moe").iterdir())[:10]

    left = killed_import(bundle, cache)
    again = run_cli(["import", str(bundle), "--cache-dir", str(cache)], base_env({}), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"removed {len(left)} temporary file(s) of decision writes cut short" in again.stderr, (len(left), again)
    assert not list(cache.glob("moe/.*")) and len(list(cache.glob("moe/*.json"))) == 300, sorted(
        p.name for p in cache.glob("moe/.*"))[:10]
