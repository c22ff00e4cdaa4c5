"""The command line and the tuner at the edges of a cache folder: decisions copied (their files' times reset),
files that are not the tuner's, journals of a tuning in flight, keys naming a dtype vLLM's file names otherwise,
damaged measurements, superseded decisions in a plot, foreign log lines, a folder on a full disk.

The command line runs in this process (``main``) on real files under pytest's ``tmp_path``; the tuner runs as a
real process of its own (tests/harness.py ``tune_alone``, or ``run_ranks``: two ranks), and a journal's lock is
held by another real process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import describe, run_ranks, tune_alone, tuner_env

from triton_dist_tune.cli.commands import main
from triton_dist_tune.disk.cache import versions, write_json_atomic

TILE = "{{BLOCK_SIZE_K: 32, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 2, num_warps: 4}}"

#: one process tunes ``edges`` over a space whose first config is ``{"v": FIRST}``
EDGES = '''
import os, torch, triton_dist_tune as tdt
FIRST = int(os.environ["FIRST"])

@tdt.autotune([{"v": FIRST}, {"v": 9}], key_fn=lambda x: x.numel(), timing="cold", n_warmup=1, n_repeat=3)
def edges(x, *, v):
    return x + v

edges(torch.ones(4))
print(edges.tuner.decided)
'''


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    """The command line in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    status = main([str(a) for a in args])
    out = capsys.readouterr()
    return status, out.out, out.err


def decision(cache: Path, name: str, key: str, space: str, created: float, mtime: float | None = None,
             function: str = "moe", config: str = "{x: 1}", **extra) -> Path:
    """A decision of ``function`` as the tuner writes it (the fields that matter here), its file's modification
    time ``mtime`` (default: ``created``)."""
    data = {"format": 2, "function": function, "key": key, "index": 0, "config": config, "time_ms": 1.0,
            "timing": "steady", "group_size": 1, "group": "default", "created": created, "versions": versions(),
            "gpu": "cpu", "gpu_count": 0, "space": space, "origin": f"/src/prog.py:{function}", "measurements": [],
            **extra}
    path = write_json_atomic(cache / function / f"{name}.json", data)
    stamp = created if mtime is None else mtime
    os.utime(path, (stamp, stamp))
    return path


# -- 1: the decision served last, whatever the files' times --------------------------------------------------------


@pytest.mark.timeout(120)
def test_clear_superseded_orders_by_the_served_time_a_file_records_not_its_mtime(tmp_path, capsys):
    """A copy (``cp -r``, a checkout, ``import``) resets the files' modification times: the decision in use (served
    10 s ago, tuned 100 s ago) got an old mtime and the one of the space the job left a new one. Before, the newest
    was found by ``max(created, mtime)``: ``clear --superseded`` removed the decision in use and ``export`` shipped
    the other. A file of an earlier release (no ``served``) still counts its mtime."""
    cache, now = tmp_path / "cache", time.time()
    in_use = decision(cache, "a" * 20, "(1,)", "s1", now - 100, served=now - 10)
    left = decision(cache, "b" * 20, "(1,)", "s2", now - 50, mtime=now, served=now - 50)
    old_served = decision(cache, "c" * 20, "(2,)", "s1", now - 100, mtime=now - 5)  # an earlier release's: no served
    old_left = decision(cache, "d" * 20, "(2,)", "s2", now - 50)
    status, out, err = cli(["export", tmp_path / "bundle.json", "--json", "--cache-dir", cache], capsys)
    assert status == 0, err
    assert sorted(json.loads(out)["superseded_skipped"]) == sorted(f"moe/{p.name}" for p in (left, old_left)), out
    status, out, err = cli(["clear", "--superseded", "--json", "--cache-dir", cache], capsys)
    assert status == 0, err
    assert sorted(json.loads(out)["removed"]) == sorted(str(p) for p in (left, old_left)), out
    assert in_use.exists() and old_served.exists()


@pytest.mark.timeout(400)
def test_a_cache_hit_records_when_it_served_and_a_copy_of_the_folder_keeps_the_decision_in_use(tmp_path, capsys):
    """Three real jobs of one process: space 1, space 2, then space 1 again (a cache hit). The file records the
    time a job served it (the tuner writes ``served`` with the decision, and again at a cache hit), so a copy of the
    folder whose mtimes make the left space's decision the newer one still keeps the one in use."""
    cache, _ = tune_alone(tmp_path, EDGES, FIRST="1")
    (first,) = cache.glob("edges/*.json")
    written = json.loads(first.read_text())
    assert written["served"] == written["created"], written
    tune_alone(tmp_path, EDGES, FIRST="2")
    (second,) = set(cache.glob("edges/*.json")) - {first}
    tune_alone(tmp_path, EDGES, FIRST="1")  # the first space again: its decision served from the cache
    assert len(list(cache.glob("edges/*.json"))) == 2
    served = json.loads(first.read_text())
    assert served["served"] > json.loads(second.read_text())["created"] > served["created"], served
    assert {k: v for k, v in served.items() if k != "served"} == {k: v for k, v in written.items() if k != "served"}
    copy = Path(shutil.copytree(cache, tmp_path / "copy", copy_function=shutil.copy))  # the copy's own times
    stamp = time.time()
    os.utime(copy / "edges" / first.name, (stamp - 60, stamp - 60))  # as a checkout may leave them
    os.utime(copy / "edges" / second.name, (stamp, stamp))
    status, out, err = cli(["clear", "--superseded", "--json", "--cache-dir", copy], capsys)
    assert status == 0, err
    assert json.loads(out)["removed"] == [str(copy / "edges" / second.name)], out
    assert (copy / "edges" / first.name).exists()


@pytest.mark.timeout(120)
def test_import_finds_a_decision_served_since_the_export_unchanged(tmp_path, capsys):
    """A job served the decision after the bundle was exported: the cache holds it, only its ``served`` time later.
    ``import`` leaves it as it is (not written over with the bundle's earlier time)."""
    cache, now = tmp_path / "cache", time.time()
    path = decision(cache, "a" * 20, "(1,)", "s1", now - 100, served=now - 100)
    assert cli(["export", tmp_path / "b.json", "--cache-dir", cache], capsys)[0] == 0
    data = json.loads(path.read_text())
    write_json_atomic(path, {**data, "served": now})  # as DiskCache.served does at a cache hit
    status, out, err = cli(["import", tmp_path / "b.json", "--json", "--cache-dir", cache], capsys)
    assert status == 0, err
    assert [Path(p).resolve() for p in json.loads(out)["unchanged"]] == [path.resolve()], out
    assert json.loads(path.read_text())["served"] == now


# -- 2: only the tuner's files -------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_clear_removes_only_files_named_as_the_tuner_names_them(tmp_path, capsys):
    """``clear`` pointed at a folder that is not only a cache (a mistaken ``--cache-dir``): before, ``--all`` and
    ``--function`` deleted every ``*.json`` and ``*.journal`` of its folders, and ``--older-than`` every corrupt
    ``*.json``, ``conf/settings.json`` included."""
    root, now = tmp_path / "project", time.time()
    entry = decision(root, "a" * 20, "(1,)", "s1", now - 100)
    journal = entry.with_name(f"{'a' * 20}.0123456789.rank0.journal")
    journal.write_text("")
    settings = root / "conf" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"learning_rate": 0.1}')
    notes = root / "conf" / "notes.journal"
    notes.write_text("my notes")
    named_by_hand = decision(root, "my_backup", "(2,)", "s1", now - 100)  # a decision, but not the tuner's name
    torn = root / "moe" / f"{'b' * 20}.json"
    torn.write_text("{torn")
    garbage = root / "moe" / "data.json"
    garbage.write_text("[1, 2")
    for stray in (torn, garbage, settings):  # corrupt files ("strays") ten days old
        os.utime(stray, (now - 10 * 86400, now - 10 * 86400))
    status, out, _ = cli(["clear", "--older-than", "5d", "--json", "--cache-dir", root], capsys)
    assert status == 0 and json.loads(out)["removed"] == [str(torn)], out
    status, out, _ = cli(["clear", "--function", "conf", "--json", "--cache-dir", root], capsys)
    assert status == 0 and json.loads(out)["removed"] == [], out
    status, out, _ = cli(["clear", "--all", "--cache-dir", root], capsys)
    assert status == 0
    assert f"removed {entry}" in out and f"removed {journal}" in out and not entry.exists()
    assert "removed 1 cache file(s) and 1 journal(s)" in out, out
    for kept in (settings, notes, named_by_hand, garbage):
        assert kept.exists() and str(kept) not in out, (kept, out)



def triton_dist_files(root: Path, function: str, n: int) -> list[Path]:
    """What Triton-distributed's own autotuner (``triton_dist.tune``) leaves in the folder it shares with this
    library by default: ``<function>/<sha256>.json`` (its format: config, deps, key, func, timestamp; an
    ``Infinity`` time for a config that failed), a tuning log ``<sha256>.log-<time>-rank<r>`` and the backup
    ``<sha256>.<timestamp>`` of a file it replaced. Returns the JSON files."""
    import hashlib

    written = []
    for i in range(n):
        stem = hashlib.sha256(f"{function}{i}".encode()).hexdigest()
        path = root / function / f"{stem}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"config": [[0.12, {"BLOCK_M": 128}], [float("inf"), {"BLOCK_M": 256}]],
                                    "deps": {"torch.version": "2.6.0"}, "key": [128, 256], "func": function,
                                    "timestamp": "2025-01-01_12_00_00"}))
        path.with_name(f"{stem}.log-2025-01-01_12-00-00-rank0").write_text("tuning log\n")
        path.with_name(f"{stem}.2024-12-01_12_00_00").write_text(path.read_text())
        written.append(path)
    return written


@pytest.mark.timeout(120)
def test_triton_distributeds_own_files_are_named_once_as_not_this_librarys_and_left_alone(tmp_path, capsys):
    """Triton-distributed's autotuner writes into the same default folder (~/.triton_dist/autotune). ``list`` and
    ``clear --dry-run`` said of each of its files "skipped ...json: unknown cache format None (this reader knows 1
    and 2)", then counted them as unreadable files that 'clear --older-than AGE' removes (it does not). Now one line
    says that they are not this library's (Triton-distributed's) and that clear leaves them; ``clear --all`` still
    removes only this library's decisions."""
    root, now = tmp_path / "autotune", time.time()
    mine = decision(root, "c" * 20, "(1,)", "s1", now - 100, function="ag_gemm")
    theirs = triton_dist_files(root, "ag_gemm", 2) + triton_dist_files(root, "gemm_rs", 1)
    others = sorted(p for p in root.glob("*/*") if p != mine)  # theirs, their logs and backups
    for args in (["list"], ["clear", "--all", "--dry-run"], ["clear", "--older-than", "0s", "--dry-run"]):
        status, out, err = cli([*args, "--cache-dir", root], capsys)
        assert status == 0, (args, err)  # another program's files are no fault of the cache (was 1)
        lines = err.splitlines()
        assert "unknown cache format" not in err and "unreadable" not in err, (args, err)
        assert len(lines) == 1 and "skipped 3 file(s)" in lines[0] and "Triton-distributed's autotuner" in lines[0] \
            and "not this library's" in lines[0] and "clear leaves them" in lines[0], (args, err)
        assert not any(str(p) in out for p in theirs), (args, out)
    status, _, err = cli(["show", theirs[0], "--cache-dir", root], capsys)
    assert status == 2 and "written by Triton-distributed's autotuner" in err and "unknown cache" not in err, err
    status, out, _ = cli(["clear", "--all", "--cache-dir", root], capsys)
    assert status == 0 and "removed 1 cache file(s)" in out and not mine.exists(), out
    assert sorted(root.glob("*/*")) == others


# -- 3: a tuning in flight keeps its journal -----------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_clear_keeps_a_journal_a_tuning_in_flight_holds(tmp_path, capsys):
    """A running tuning holds an exclusive ``flock`` on its journal (here: another real process holds it). Before,
    ``clear`` deleted it under the tuning; now it is kept and said, and removed once the lock is released."""
    cache, now = tmp_path / "cache", time.time()
    entry = decision(cache, "a" * 20, "(1,)", "s1", now - 100)
    held = entry.with_name(f"{'a' * 20}.0123456789.rank0.journal")
    free = entry.with_name(f"{'a' * 20}.0123456789.rank1.journal")
    held.write_text('{"index": 0, "state": "started"}\n')
    free.write_text('{"index": 0, "state": "started"}\n')
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_APPEND)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(100)\n", str(held)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        status, out, err = cli(["clear", "--all", "--dry-run", "--json", "--cache-dir", cache], capsys)
        assert status == 0, err
        said = json.loads(out)
        assert said == {"would_remove": sorted([str(entry), str(free)]), "kept": [str(held)], "left": [],
                         "shared": {}}, out
        assert held.exists() and free.exists() and entry.exists()
        status, out, err = cli(["clear", "--all", "--cache-dir", cache], capsys)
        assert status == 0, err
        assert f"kept {held}: a tuning in flight holds it" in out.splitlines(), out
        assert held.exists() and not free.exists() and not entry.exists()
        assert f"removed {held}" not in out
    finally:
        holder.kill()
        holder.wait()
    status, out, _ = cli(["clear", "--all", "--json", "--cache-dir", cache], capsys)
    assert status == 0 and json.loads(out) == {"removed": [str(held)], "kept": [], "left": [], "shared": {}}, out
    assert not held.exists()


# -- 4: vLLM's file names ------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dtype", ["torch.float8_e4m3fn", "torch.int8"])
def test_vllm_export_asks_for_dtype_where_the_keys_name_one_vllm_names_otherwise(tmp_path, capsys, dtype):
    """vLLM asks for ``dtype=fp8_w8a8`` (``int8_w8a16``, ``int4_w4a16``), never ``dtype=float8_e4m3fn``: before,
    a key naming such a torch dtype wrote a file vLLM never opens. Now the export stops (exit 2, one line) asking
    for ``--dtype``; with it, the file is named as vLLM looks it up."""
    cache, out_dir, now = tmp_path / "cache", tmp_path / "out", time.time()
    for name, batch, m in (("a" * 20, 1, 16), ("b" * 20, 16, 32)):
        decision(cache, name, f"({batch}, '{dtype}')", "s1", now - 60, config=TILE.format(m=m))
    export = ["export", out_dir, "--format", "vllm-moe", "--function", "moe", "--experts", "8", "--n", "128",
              "--cache-dir", cache]
    status, _, err = cli(export, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "--dtype" in err and "fp8_w8a8" in err and dtype in err, err
    assert not out_dir.exists() or not list(out_dir.iterdir())
    status, _, err = cli([*export, "--dtype", "fp8_w8a8"], capsys)
    assert status == 0, err
    (written,) = out_dir.iterdir()
    assert written.name.startswith("E=8,N=128,device_name=") and written.name.endswith(",dtype=fp8_w8a8.json")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("dtype", "part"), [("torch.bfloat16", ""), ("torch.float16", ""),
                                             ("torch.float32", ",dtype=float32")])
def test_vllm_export_still_takes_the_dtype_of_plain_keys(tmp_path, capsys, dtype, part):
    cache, out_dir = tmp_path / "cache", tmp_path / "out"
    decision(cache, "a" * 20, f"(1, '{dtype}')", "s1", time.time() - 60, config=TILE.format(m=16))
    status, _, err = cli(["export", out_dir, "--format", "vllm-moe", "--function", "moe", "--experts", "8", "--n",
                          "128", "--cache-dir", cache], capsys)
    assert status == 0, err
    (written,) = out_dir.iterdir()
    assert written.name.endswith(f"{part}.json") and "dtype" not in written.name.removesuffix(f"{part}.json")


# -- 5: damaged measurements ---------------------------------------------------------------------------------------


@pytest.mark.timeout(400)
def test_damaged_measurements_are_a_retune_and_show_leaves_their_rows_out(tmp_path, capsys):
    """A cache file whose ``measurements`` is not a list passed the tuner's check, then rank 0 iterated it: every
    rank raised ``AutotuneError ... TypeError: 'int' object is not iterable``. Now it is a malformed file: a warning
    and a re-tune. Rows whose ``per_rank``, ``spread`` or ``order`` have the wrong types made ``show`` end in a
    traceback: they are left out (by the tuner too)."""
    cache, _ = tune_alone(tmp_path, EDGES, FIRST="1")
    (path,) = cache.glob("edges/*.json")
    data = json.loads(path.read_text())
    rows = data["measurements"]
    assert len(rows) == 2
    write_json_atomic(path, {**data, "measurements": 5})
    tune_alone(tmp_path, EDGES, FIRST="1")  # before: exit status 1 (AutotuneError)
    said = (tmp_path / "tune_alone.err").read_text()
    assert "ignoring malformed cache file" in said, said[-2000:]
    retuned = json.loads(path.read_text())
    assert isinstance(retuned["measurements"], list) and retuned["created"] > data["created"]

    damaged = [{**rows[0], "per_rank": 5, "spread": [1]}, {**rows[1], "order": "x"}]
    write_json_atomic(path, {**retuned, "measurements": damaged})
    status, out, err = cli(["show", path, "--cache-dir", cache], capsys)
    assert status == 0 and "Traceback" not in err, err
    status, out, err = cli(["show", path, "--json", "--cache-dir", cache], capsys)
    assert status == 0, err
    for row in json.loads(out)["measurements"]:  # read as an earlier format's rows: what has the right types
        assert row["per_rank"] is None or all(isinstance(t, float) for t in row["per_rank"]), row
        assert (row["spread"] is None or isinstance(row["spread"], float)) and isinstance(row["order"], list), row
    tune_alone(tmp_path, EDGES, FIRST="1")  # the tuner serves the decision, the damaged row left out
    assert "ignoring malformed cache file" not in (tmp_path / "tune_alone.err").read_text()


# -- 6: plot --function --------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_plot_function_leaves_superseded_decisions_out(tmp_path, capsys, monkeypatch):
    """Before, ``plot --function`` drew a superseded decision (of a config space the function left) beside the
    current one of its key; now it leaves it out, as ``export`` does, and says how many it skipped."""
    from triton_dist_tune.cli import plots

    cache, now = tmp_path / "cache", time.time()
    decision(cache, "a" * 20, "(1,)", "s1", now - 100, served=now - 100)
    current = [decision(cache, "b" * 20, "(1,)", "s2", now - 10, served=now - 10),
               decision(cache, "c" * 20, "(2,)", "s2", now - 10, served=now - 10)]
    drawn: list[list[Path]] = []

    def plot_function(entries, out):
        drawn.append(sorted(e.path for e in entries))
        out.write_bytes(b"png")
        return out

    monkeypatch.setattr(plots, "plot_function", plot_function)
    status, out, err = cli(["plot", "--function", "moe", "-o", tmp_path / "f.png", "--cache-dir", cache], capsys)
    assert status == 0, err
    assert drawn == [current], drawn
    assert out.strip() == str(tmp_path / "f.png") and "skipped 1 superseded decision(s)" in err, err


# -- 7: logs -------------------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_logs_prints_a_level_that_is_not_text(tmp_path, capsys):
    """A foreign line whose ``level`` is null or a list ended ``logs`` in a TypeError; now it is printed as
    ``str`` prints it."""
    folder, now = tmp_path / "logs", time.time()
    folder.mkdir()
    lines = [{"job": "j1", "rank": 0, "time": now + i, "level": level, "message": f"m{i}"}
             for i, level in enumerate([None, ["x", "y"], {"a": 1}, 3, "INFO"])]
    (folder / "rank-0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    status, out, err = cli(["logs", "--log-dir", folder], capsys)
    assert status == 0, err
    shown = [line for line in out.splitlines() if " rank  0 " in line]
    assert len(shown) == 5, out
    for line, level in zip(shown, ["None", "['x', 'y']", "{'a': 1}", "3", "INFO"], strict=True):
        assert f" {level} " in line, (line, level)


EDGES_SCENARIO = Path(__file__).resolve().parent / "scenarios" / "edges_cases.py"


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs at ``tmp_path / "disk"`` (root only), unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a disk that fills up) needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> None:
    """Write ``disk`` full (every write past it: no space left on device)."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.timeout(300)
def test_a_tuning_that_finishes_on_a_full_disk_removes_every_ranks_journal_and_says_the_cache_was_not_written(
        tmp_path, small_disk, capsys):
    """A tuning is cut (rank 1's process ends inside a config) in a cache folder on a small disk; one rank's
    journal ends in a torn record that fills its last page (what a full disk leaves), and the disk is then full.
    The next job tunes the key to the end: both ranks choose alike and raise nothing, rank 0 warns that the cache
    could not be written, and no journal stays behind. Before, the rank whose journal was torn could not end the
    torn line (that write failed on the full disk), gave its journals up unread ("cannot use the journal ...: this
    tuning will not be resumable") and never removed them: the earlier attempt's journal stayed behind, which
    ``list`` then showed as a tuning that never finished."""
    cache = small_disk / "cache"
    env = tuner_env(tmp_path, timeout=5, TRITON_DIST_AUTOTUNE_CACHE_DIR=str(cache))
    run_ranks(EDGES_SCENARIO, 2, ["full_disk"], env={**env, "CUT": "1"}, timeout=120)
    journals = sorted(cache.rglob("*.journal"))
    assert len(journals) == 2 and all(p.stat().st_size for p in journals), journals
    torn = journals[1]  # the last page of its file ends inside a record, and no byte more fits on the disk
    data = torn.read_bytes()
    page = os.sysconf("SC_PAGE_SIZE")
    record = data.splitlines()[-1]
    with open(torn, "ab") as fh:
        fh.write((record * (page // len(record) + 1))[:page - len(data) % page])
    fill(small_disk)
    assert os.statvfs(small_disk).f_bavail == 0

    results = run_ranks(EDGES_SCENARIO, 2, ["full_disk"], env=env, timeout=120)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert all(r.result["error"] == "" and r.result["chosen"] == [1] for r in results), describe(results)
    assert "could not write the cache" in results[0].stderr and "No space left on device" in results[0].stderr
    assert sorted(cache.rglob("*.journal")) == [], [p.name for p in cache.rglob("*")]
    status, out, err = cli(["list", "--cache-dir", str(cache)], capsys)
    assert "never finished" not in out, out
