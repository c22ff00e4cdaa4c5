"""One cache folder shared by several processes at once (a shared home, a node running several jobs): what one
process writes never puts back what another removed or replaced in the meantime, and a job's cache hit never deletes
another job's crash journals.

Real processes: the tuner runs as processes of its own (tests/harness.py ``tune_alone``, or a script started here),
the command line in this process (``main``). A race is made deterministic by pausing the serving process, through a
marker file, between its read of a decision and what it does next."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from harness import HERE, ROOT, describe, run_python, run_ranks, spawn, tune_alone, tuner_env
from test_cache_folder_edges import EDGES, cli

from triton_dist_tune.disk.files import write_json_atomic

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


def _paused(tmp_path: Path, name: str, text: str, env: dict[str, str]) -> tuple[Path, subprocess.Popen]:
    """(its marker folder, the process) of the script ``text`` saved as ``name``, run with ``MARKS`` set to a fresh
    folder where it touches and waits for marker files."""
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / name
    script.write_text(text)
    return marks, spawn(script, [], {**env, "MARKS": str(marks)}, cwd=ROOT)


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
    chosen = f"{{4: {{v: {[1, 9][json.loads(path.read_text())['index']]}}}}}"
    marks, server = _paused(tmp_path, "serve_paused.py", PAUSED_AFTER_READ, env)
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


#: ``EDGES``, its cache hit's rewrite paused while it holds the file's lock: once it has checked that the file still
#: holds the decision it read, it touches ``$MARKS/locked`` and waits (at most 60 s) for ``$MARKS/go`` before renaming
PAUSED_IN_LOCK = '''
import os, time
from pathlib import Path
import triton_dist_tune.disk.cache as _cache

_marks, _rewrite = Path(os.environ["MARKS"]), _cache.rewrite_json

def _paused_rewrite(path, data, unchanged, durable=True):
    def pausing(held):
        same = unchanged(held)
        (_marks / "locked").touch()
        deadline = time.monotonic() + 60
        while not (_marks / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return same
    return _rewrite(path, data, pausing, durable)

_cache.rewrite_json = _paused_rewrite
''' + EDGES


@pytest.mark.timeout(300)
def test_a_cache_hit_never_puts_back_a_decision_imported_while_it_held_the_files_lock(tmp_path, capsys):
    """``import --force`` replaces a decision while a job's cache hit holds the file's lock, between its check
    that the file still holds what it read and its rename. Before, ``import`` renamed without taking the lock
    (every other replacement takes it), so the cache hit's rename put the old decision back over the imported one
    (lost, though ``import`` said it was written). Now ``import`` waits for the lock, and renames after."""
    cache, env = tune_alone(tmp_path, EDGES, FIRST="1")
    (path,) = (cache / "edges").glob("*.json")
    bundle = tmp_path / "bundle.json"
    status, _, err = cli(["export", bundle, "--cache-dir", cache], capsys)
    assert status == 0, err
    data = json.loads(bundle.read_text())
    newer = data["entries"][0]["data"]["created"] + 1000  # another machine's decision of the entry, tuned later
    data["entries"][0]["data"]["created"] = newer
    bundle.write_text(json.dumps(data))
    marks, server = _paused(tmp_path, "serve_paused_in_lock.py", PAUSED_IN_LOCK, env)
    imported: list[tuple[int, str, str]] = []
    importer = threading.Thread(target=lambda: imported.append(
        cli(["import", bundle, "--force", "--cache-dir", cache], capsys)))
    try:
        _wait_for(marks / "locked", server, 120)  # the serving job holds the file's lock, and waits
        importer.start()
        importer.join(1.0)  # before: the import has replaced the file by now; now it waits for the lock (5 s at most)
        (marks / "go").touch()
        out, err = server.communicate(timeout=120)
        assert server.returncode == 0, err[-3000:]
        importer.join(60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert imported and imported[0][0] == 0, imported
    now = json.loads(path.read_text())
    assert now["created"] == newer, (now["created"], newer)  # before: the served, older decision was back


@pytest.mark.timeout(200)
def test_a_campaigns_learned_decision_never_replaces_one_another_job_wrote_after_it_looked(tmp_path):
    """A rank-local campaign on two "nodes" (a cache folder each): rank 0 learns rank 1's decision and writes it
    where its folder has none. Another job writes a newer decision of that entry into rank 0's folder (a tuning
    again, an ``import``) after rank 0 found none and before it wrote. Before, rank 0 checked (``exists``), then
    replaced (``store``): the newer decision was lost under the campaign's older one. Now the check and the write
    are one step (a hard link, which fails where a file is there): the newer decision stays."""
    marks = tmp_path / "marks"
    marks.mkdir()
    folders = [tmp_path / "node0", tmp_path / "node1"]
    per_rank = {0: {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(folders[0]), "MARKS": str(marks)},
                1: {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(folders[1]), "LOCAL_RANK": "0"}}
    results: list = []
    job = threading.Thread(target=lambda: results.append(run_ranks(
        HERE / "scenarios" / "campaign_cases.py", 2, ["learned_write_paused"], env=tuner_env(tmp_path, 20),
        timeout=150, per_rank_env=per_rank)))
    job.start()
    try:
        deadline = time.monotonic() + 150
        while not (marks / "entry").exists():  # rank 0 found no file of rank 1's decision, and waits
            assert job.is_alive() and time.monotonic() < deadline, results and describe(results[0])
            time.sleep(0.05)
        entry = (marks / "entry").read_text()
        record = json.loads((folders[1] / "learned" / f"{entry}.json").read_text())  # rank 1's tuning wrote it
        newer = {**record, "created": record["created"] + 1000}
        write_json_atomic(folders[0] / "learned" / f"{entry}.json", newer)  # the other job's write
    finally:
        (marks / "go").touch()
        job.join(160)
    assert results and [r.returncode for r in results[0]] == [0, 0], results and describe(results[0])
    assert all(r.result["states"] == ["tuned", "tuned"] for r in results[0]), describe(results[0])
    now = json.loads((folders[0] / "learned" / f"{entry}.json").read_text())
    assert now["created"] == newer["created"], (now["created"], newer["created"])  # before: the campaign's older one


#: ``EDGES`` whose config ``v=9`` kills its process (SIGKILL) while ``$CRASH`` is set: a tuning ended inside it
CRASHING = EDGES.replace("    return x + v", """    if os.environ.get("CRASH") and v == 9:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    return x + v""")


@pytest.mark.timeout(300)
def test_a_cache_hit_keeps_the_journal_of_another_job_tuning_the_entry_again(tmp_path):
    """Job X tunes a decided entry again (``ALWAYS_TUNE``) and is killed inside a config: its journal stays for its
    restart, which resumes from it (and, after a second such end, leaves that config out). Before the restart,
    job Y is served the entry from the same folder. Before, Y's cache hit deleted every unlocked journal of the
    entry, X's included, so X's restart ran the config again as if nothing had happened. Now a cache hit deletes
    only its own job's records (its cut attempts'): X's journal stays as it was."""
    cache, env = tune_alone(tmp_path, CRASHING, FIRST="1", TRITON_DIST_AUTOTUNE_JOB_ID="first")  # decided
    script = tmp_path / "crashing.py"
    script.write_text(CRASHING)
    crashed = run_python([script], cwd=ROOT, timeout=120,
                         env={**env, "CRASH": "1", "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1",
                              "TRITON_DIST_AUTOTUNE_JOB_ID": "X"})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    journals = {p: p.read_bytes() for p in (cache / "edges").glob("*.journal")}
    records = [json.loads(line) for data in journals.values() for line in data.splitlines()]
    assert records and {r["job"] for r in records} == {"X"}, records
    assert any(r["state"] == "started" and r["config"] == "{v: 9}" for r in records), records
    (tmp_path / "y").mkdir()
    tune_alone(tmp_path / "y", CRASHING, FIRST="1", TRITON_DIST_AUTOTUNE_JOB_ID="Y",
               TRITON_DIST_AUTOTUNE_CACHE_DIR=str(cache))
    assert "cache hit" in " ".join(p.read_text() for p in (tmp_path / "y" / "logs").rglob("*.log")), "not served"
    after = {p: p.read_bytes() for p in (cache / "edges").glob("*.journal")}
    assert after == journals, (sorted(map(str, after)), sorted(map(str, journals)))  # before: deleted
    # job Z tunes the entry again too (ALWAYS_TUNE), to the end: it resumed from its own job's records only, and
    # deletes only those; before, its end deleted every journal it adopted, X's included
    (tmp_path / "z").mkdir()
    tune_alone(tmp_path / "z", CRASHING, FIRST="1", TRITON_DIST_AUTOTUNE_JOB_ID="Z",
               TRITON_DIST_AUTOTUNE_ALWAYS_TUNE="1", TRITON_DIST_AUTOTUNE_CACHE_DIR=str(cache))
    assert "cache hit" not in " ".join(p.read_text() for p in (tmp_path / "z" / "logs").rglob("*.log")), "served"
    left = [json.loads(line) for p in (cache / "edges").glob("*.journal") for line in p.read_bytes().splitlines()]
    assert left == records, left


@pytest.mark.timeout(300)
def test_two_srun_steps_of_one_allocation_keep_each_others_journal_records(tmp_path):
    """Two ``srun`` steps of one Slurm allocation (one ``SLURM_JOB_ID``, ``SLURM_STEP_ID`` 0 and 1) tune one decided
    entry again under ``ALWAYS_TUNE`` in a shared folder. Step 0 is killed inside a config: its journal stays for
    its restart. Before, both steps were job ``42``: step 1 resumed from step 0's records as its own and deleted
    them at its end. Now each step is a job of its own (``42.0``, ``42.1``): step 1 tunes from scratch and leaves
    step 0's records as they were."""
    cache, env = tune_alone(tmp_path, CRASHING, FIRST="1", TRITON_DIST_AUTOTUNE_JOB_ID="first")  # decided
    for name in ("TRITON_DIST_AUTOTUNE_JOB_ID", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    script = tmp_path / "crashing.py"
    script.write_text(CRASHING)
    crashed = run_python([script], cwd=ROOT, timeout=120,
                         env={**env, "CRASH": "1", "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1", "SLURM_JOB_ID": "42",
                              "SLURM_STEP_ID": "0"})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    records = [json.loads(line) for p in (cache / "edges").glob("*.journal") for line in p.read_bytes().splitlines()]
    assert records and {r["job"] for r in records} == {"42.0"}, records
    (tmp_path / "step1").mkdir()
    tune_alone(tmp_path / "step1", CRASHING, FIRST="1", SLURM_JOB_ID="42", SLURM_STEP_ID="1",
               TRITON_DIST_AUTOTUNE_ALWAYS_TUNE="1", TRITON_DIST_AUTOTUNE_CACHE_DIR=str(cache))
    logs = " ".join(p.read_text() for p in (tmp_path / "step1" / "logs").rglob("*.log"))
    assert "cache hit" not in logs and "resum" not in logs, logs[-3000:]
    left = [json.loads(line) for p in (cache / "edges").glob("*.journal") for line in p.read_bytes().splitlines()]
    assert left == records, left  # before: deleted by step 1's end


#: a ``contextual_autotune`` function of one kernel (two configs) whose launch of config ``BLOCK=64`` kills its
#: process (SIGKILL, in the launch's grid) while ``$CRASH`` is set: a tuning ended inside that config
CONTEXTUAL_CRASHING = '''
import os, signal, torch, triton, triton.language as tl
import triton_dist_tune as tdt

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def double(x, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)

def grid(meta):
    if os.environ.get("CRASH") and meta["BLOCK"] == 64:
        os.kill(os.getpid(), signal.SIGKILL)
    return (triton.cdiv(100, meta["BLOCK"]),)

@tdt.contextual_autotune(n_repeat=1, n_warmup=1)
def layer(x):
    double[grid](x, x.numel())
    return x

layer(torch.ones(100))
'''


@pytest.mark.timeout(300)
def test_a_contextual_cache_hit_keeps_the_journal_of_another_job_tuning_the_entry_again(tmp_path):
    """``contextual_autotune``'s case of the test above: job X tunes a decided key again (``ALWAYS_TUNE``) and is
    killed inside a config; job Y's call is then served the key from the same folder. Before, Y's disk-cache hit
    deleted every journal its track adopted, X's included (X's restart ran the config again as if nothing had
    happened). Now it deletes only its own job's records: X's journal stays, and X's own cache hit (a restart
    without ``ALWAYS_TUNE``) deletes it."""
    cache, env = tune_alone(tmp_path, CONTEXTUAL_CRASHING, TRITON_DIST_AUTOTUNE_JOB_ID="first")  # decided
    crashed = run_python([tmp_path / "tune_alone.py"], cwd=ROOT, timeout=120,
                         env={**env, "CRASH": "1", "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1",
                              "TRITON_DIST_AUTOTUNE_JOB_ID": "X"})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    journals = {p: p.read_bytes() for p in (cache / "contextual").glob("*.journal")}
    records = [json.loads(line) for data in journals.values() for line in data.splitlines()]
    assert records and {r["job"] for r in records} == {"X"}, records
    assert records[-1]["state"] == "started" and "BLOCK: 64" in records[-1]["config"], records
    for job, kept in (("Y", journals), ("X", {})):  # another job's cache hit, then X's own (its restart's)
        (tmp_path / job).mkdir()
        tune_alone(tmp_path / job, CONTEXTUAL_CRASHING, TRITON_DIST_AUTOTUNE_JOB_ID=job,
                   TRITON_DIST_AUTOTUNE_CACHE_DIR=str(cache))
        said = " ".join(p.read_text() for p in (tmp_path / job / "logs").rglob("*.log"))
        assert "how=disk cache" in said, f"{job} not served"
        after = {p: p.read_bytes() for p in (cache / "contextual").glob("*.journal")}
        assert after == kept, (job, sorted(map(str, after)), sorted(map(str, kept)))  # before: Y deleted X's
        if job == "Y":  # job Z tunes the key again too (ALWAYS_TUNE), to the end: it deletes only its own records
            (tmp_path / "Z").mkdir()  # (before, every journal its track adopted, X's included)
            tune_alone(tmp_path / "Z", CONTEXTUAL_CRASHING, TRITON_DIST_AUTOTUNE_JOB_ID="Z",
                       TRITON_DIST_AUTOTUNE_ALWAYS_TUNE="1", TRITON_DIST_AUTOTUNE_CACHE_DIR=str(cache))
            assert "how=disk cache" not in " ".join(p.read_text() for p in (tmp_path / "Z" / "logs").rglob("*.log"))
            left = [json.loads(line) for p in (cache / "contextual").glob("*.journal")
                    for line in p.read_bytes().splitlines()]
            assert left == records, left


#: ``EDGES`` tuning three keys (sizes 4, 8 and 16)
EDGES_SIZES = EDGES.replace("edges(torch.ones(4))", "for n in (4, 8, 16):\n    edges(torch.ones(n))")

#: the command line's ``import``, paused after it renamed two decisions into place: before it takes the third file's
#: lock it touches ``$MARKS/renamed`` and waits (at most 60 s) for ``$MARKS/go``
PAUSED_IMPORT = '''
import contextlib, os, sys, time
from pathlib import Path
import triton_dist_tune.disk.bundles as _bundles
from triton_dist_tune.cli.commands import main

_marks, _holding, _taken = Path(os.environ["MARKS"]), _bundles.holding, []

@contextlib.contextmanager
def _paused_holding(path):
    _taken.append(path)
    if len(_taken) == 3:
        (_marks / "renamed").touch()
        deadline = time.monotonic() + 60
        while not (_marks / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    with _holding(path) as fd:
        yield fd

_bundles.holding = _paused_holding
sys.exit(main(sys.argv[1:]))
'''


@pytest.mark.timeout(300)
def test_an_imports_rollback_never_removes_or_replaces_a_decision_stored_meanwhile(tmp_path, capsys):
    """``import --force`` of three decisions into a folder: the first is new there, the second replaces an older
    one; while the import is paused after renaming those two, another process stores newer decisions of both
    entries (as a tuning's store does: ``write_json_atomic``, under each file's lock), and a folder takes the
    third's place, so its rename fails and the import rolls back. Before, the rollback removed the first file and
    put the older bytes back over the second, without the lock or a look: both newer decisions were lost. Now each
    is taken back under its lock only where it still holds the imported decision: the newer ones stay."""
    source, env = tune_alone(tmp_path, EDGES_SIZES, FIRST="1")
    bundle = tmp_path / "bundle.json"
    status, _, err = cli(["export", bundle, "--cache-dir", source], capsys)
    assert status == 0, err
    data = json.loads(bundle.read_text())
    data["entries"].sort(key=lambda e: int(e["data"]["key"]))  # renamed in this order: 4 (new), 8 (replacing), 16
    for e in data["entries"]:
        e["data"]["created"] += 1000  # another machine's decisions, tuned later
    bundle.write_text(json.dumps(data))
    first, second, third = (e["path"] for e in data["entries"])
    cache = tmp_path / "target"
    (cache / "edges").mkdir(parents=True)
    shutil.copy(source / second, cache / second)  # the decision the import replaces
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "paused_import.py"
    script.write_text(PAUSED_IMPORT)
    importer = spawn(script, ["import", str(bundle), "--force", "--cache-dir", str(cache)],
                     {**env, "MARKS": str(marks)}, cwd=ROOT)
    try:
        _wait_for(marks / "renamed", importer, 60)  # two decisions renamed into place; the import waits
        for path in (first, second):  # another job tunes the key again and stores its decision
            newer = {**json.loads((cache / path).read_text()), "created": time.time() + 2000}
            write_json_atomic(cache / path, newer)
        stored = {path: (cache / path).read_bytes() for path in (first, second)}
        (cache / third).mkdir()  # in the way of the third rename: the import fails and rolls back
        (marks / "go").touch()
        out, err = importer.communicate(timeout=60)
    finally:
        if importer.poll() is None:
            importer.kill()
            importer.communicate()
    assert importer.returncode != 0 and "nothing was imported" in err, (importer.returncode, out, err[-3000:])
    now = {path: (cache / path).read_bytes() if (cache / path).exists() else None for path in (first, second)}
    assert now == stored, now  # before: the first removed, the second the older decision the import had replaced
