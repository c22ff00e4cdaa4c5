"""A cache folder this process cannot write: the journals an earlier attempt left there are still read (its
culprits left out, its measured times adopted), nothing new is journaled (said once), and every rank agrees on what
it adopts. Real files, real ranks, a real read-only folder: a read-only bind mount as root (where chmod stops no
write), the folder's and files' modes otherwise."""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import describe, run_ranks, tuner_env

from triton_dist_tune.faults.journal import Journal

HERE = Path(__file__).resolve().parent
FAULTS = HERE / "scenarios" / "fault_cases.py"
RECOVERY = HERE / "scenarios" / "recovery_cases.py"
T = 2  # the ranks' timeout: the watchdog ends a config hung past it
WATCHDOG_EXIT = 86


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Callable[[Path], Path]]:
    """``read_only(folder)``: a view of ``folder`` (its files and subfolders) that no write reaches: a read-only
    bind mount as root, else ``folder`` itself with every mode's write bits cleared. Undone after the test."""
    mounts: list[Path] = []
    modes: list[tuple[Path, int]] = []

    def view(folder: Path) -> Path:
        if os.geteuid() == 0:
            target = tmp_path / f"read-only-{len(mounts)}"
            target.mkdir()
            for args in (["--bind", str(folder), str(target)], ["-o", "remount,bind,ro", str(target)]):
                done = subprocess.run(["mount", *args], capture_output=True, text=True)
                if done.returncode != 0:
                    pytest.skip(f"cannot make a read-only bind mount here: {done.stderr.strip()}")
                if args[0] == "--bind":
                    mounts.append(target)
            return target
        for path in [folder, *folder.rglob("*")]:
            modes.append((path, path.stat().st_mode))
            path.chmod(path.stat().st_mode & ~0o222)
        return folder

    try:
        yield view
    finally:
        for target in reversed(mounts):
            subprocess.run(["umount", "-l", str(target)], check=False)
        for path, mode in reversed(modes):
            path.chmod(mode)


def calls(folder: Path, rank: int) -> dict[int, Counter]:
    """config -> Counter(run.attempt -> calls) of one rank (fault_cases.py's ``calls.rank<r>``)."""
    found: dict[int, Counter] = {}
    for line in (folder / f"calls.rank{rank}").read_text().splitlines():
        attempt, config = line.split()
        found.setdefault(int(config), Counter())[attempt] += 1
    return found


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.timeout(240)
def test_a_read_only_cache_folder_still_resumes_its_journals_and_leaves_the_hung_config_out(tmp_path, read_only):
    """Rank 0 hangs inside config 1 (the watchdog ends it): the journals in the cache folder name config 1 as the
    culprit. The folder is then read-only (a shared, read-only cache; a full quota reads the same). Before, the
    journals were opened for appending, which failed, so they were not read at all ("cannot use the journal ...:
    this tuning will not be resumable"): the next attempt measured config 1 again and hung again. Now every rank
    reads them, config 1 is left out with the earlier attempt's error and never runs, both ranks choose config 0,
    each says once that it cannot journal, and the folder is left as it was."""
    cache = tmp_path / "cache"
    env = tuner_env(tmp_path, T, FAULT_DIR=str(tmp_path / "calls"), FAULTS="1:hang@0",
                    TRITON_DIST_AUTOTUNE_CACHE_DIR=str(cache))
    first = run_ranks(FAULTS, 2, ["tune"], env=env, timeout=120)
    assert first[0].returncode == WATCHDOG_EXIT, describe(first)
    before = snapshot(cache)
    assert sum(name.endswith(".journal") for name in before) == 2, before.keys()

    view = read_only(cache)
    again = run_ranks(FAULTS, 2, ["tune"], env={**env, "RUN": "1", "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(view)},
                      timeout=120)
    assert all(r.returncode == 0 for r in again), describe(again)
    for r in again:
        assert r.result["chosen"] == 0 and r.result["states"][1] == "failed", describe(again)
        assert re.match(rf"in an earlier attempt, hung on rank 0: warmup exceeded {T} s", r.result["errors"][1]), \
            r.result["errors"][1]
        assert r.stderr.count("cannot journal") == 1, describe(again)
        assert "will not be resumable" not in r.stderr, describe(again)
    for rank in (0, 1):
        assert "1.0" not in calls(tmp_path / "calls", rank).get(1, {}), calls(tmp_path / "calls", rank)
    assert snapshot(view) == before


@pytest.mark.timeout(240)
def test_ranks_that_see_different_folders_agree_on_the_culprit_one_of_them_reads_read_only(tmp_path, read_only):
    """Ranks on different hosts see different cache folders. Rank 0 hung inside config 1 and its journal says so in
    a folder it can no longer write; rank 1's folder is a fresh, writable one. Rank 0 alone holds the evidence,
    and the exchange of the journals gives it to both: neither runs config 1, both choose config 0."""
    cache = tmp_path / "cache"
    env = tuner_env(tmp_path, T, FAULT_DIR=str(tmp_path / "calls"), FAULTS="1:hang@0",
                    TRITON_DIST_AUTOTUNE_CACHE_DIR=str(cache))
    first = run_ranks(FAULTS, 2, ["tune"], env=env, timeout=120)
    assert first[0].returncode == WATCHDOG_EXIT, describe(first)
    for path in cache.rglob("*.rank1.journal"):
        path.unlink()  # rank 1's host keeps nothing of the first attempt

    view = read_only(cache)
    again = run_ranks(FAULTS, 2, ["tune"], env={**env, "RUN": "1"}, timeout=120,
                      per_rank_env={0: {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(view)},
                                    1: {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "fresh")}})
    assert all(r.returncode == 0 for r in again), describe(again)
    assert [r.result["chosen"] for r in again] == [0, 0], describe(again)
    assert [r.result["states"][1] for r in again] == ["failed", "failed"], describe(again)
    assert again[0].stderr.count("cannot journal") == 1 and "cannot journal" not in again[1].stderr, describe(again)
    for rank in (0, 1):
        assert "1.0" not in calls(tmp_path / "calls", rank).get(1, {}), calls(tmp_path / "calls", rank)


@pytest.mark.timeout(240)
def test_a_read_only_cache_folder_still_adopts_the_times_its_journals_measured(tmp_path, read_only):
    """``sharded=True``, 4 configs on 2 ranks: in the first attempt rank 1 is SIGKILLed as it starts config 3, after
    the ranks measured and journaled configs 0, 1 and 2 (recovery_cases.py). The folder is then read-only. The
    rerun takes those three times from the journals and measures only config 3, as it does in a writable folder
    (tests/test_recovery.py); before, it read nothing and measured all four again."""
    env = tuner_env(tmp_path, 4)
    first = run_ranks(RECOVERY, 2, ["sharded_killed_then_resumed", "0"], env=env, timeout=100)
    assert first[0].result.get("error") == "GroupTimeoutError", describe(first)
    view = read_only(tmp_path / "cache")
    results = run_ranks(RECOVERY, 2, ["sharded_killed_then_resumed", "1"], timeout=100,
                        env={**env, "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(view)})
    assert all(r.returncode == 0 and r.result.get("error") is None for r in results), describe(results)
    chosen = results[0].result["chosen"]
    assert [r.result["chosen"] for r in results] == [chosen, chosen], describe(results)
    assert set(results[0].result["ran"]) <= {3, chosen}, describe(results)
    assert set(results[1].result["ran"]) <= {chosen}, describe(results)


def test_a_journal_in_a_read_only_folder_is_read_whole_and_appends_are_dropped_said_once(tmp_path, read_only,
                                                                                         caplog):
    """In process: the records of a journal the process cannot write are read (a reader of what exists too, as a
    contextual tuning's exchange reads every journal of its group), appends are dropped with one warning, and
    ``remove`` leaves the file (it cannot go) without a traceback."""
    folder = tmp_path / "cache"
    writer = Journal(folder / "e.tag.rank0.journal")
    writer.append(0, "measured", config="{a: 0}", time=1.5)
    writer.append(1, "hung", config="{a: 1}", error="warmup exceeded 2 s")
    writer.close()
    data = (folder / "e.tag.rank0.journal").read_bytes()
    view = read_only(folder)
    with caplog.at_level(logging.WARNING, logger="triton_dist_tune"):
        assert [r["state"] for r in Journal(view / "e.tag.rank0.journal", create=False).read()] == ["measured", "hung"]
        journal = Journal(view / "e.tag.rank0.journal")
        assert [(r["index"], r["state"]) for r in journal.read()] == [(0, "measured"), (1, "hung")]
        journal.append(2, "started", config="{a: 2}")
        journal.append(2, "measured", config="{a: 2}", time=0.5)
        assert [r["index"] for r in journal.read()] == [0, 1]
        journal.remove()
    assert (view / "e.tag.rank0.journal").read_bytes() == data
    said = [r.getMessage() for r in caplog.records]
    assert sum("cannot journal" in m for m in said) == 1, said
    assert not any("will not be resumable" in m for m in said), said


def test_a_cache_folder_that_is_a_file_is_no_unreadable_cache_file(tmp_path, caplog):
    """A file where the cache folder should be (``TRITON_DIST_AUTOTUNE_CACHE_DIR`` naming a file, or a path through
    one): every lookup warned ``ignoring unreadable cache file <path> (NotADirectoryError ...); tuning again``, of
    a file that is not there. Now the lookup finds nothing, silently: the tuning's writes say what is wrong (``could
    not write the cache ([Errno 20] Not a directory ...)``, and the journal's ``cannot use the journal``)."""
    from triton_dist_tune.disk.cache import DiskCache

    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the cache folder should be")
    with caplog.at_level(logging.WARNING, logger="triton_dist_tune"):
        for root in (blocker, blocker / "cache"):
            assert DiskCache("fn", root).load("0" * 20, "space") is None
    assert not [r.getMessage() for r in caplog.records], [r.getMessage() for r in caplog.records]


@pytest.mark.timeout(240)
def test_a_hang_in_a_read_only_cache_folder_is_not_said_to_be_journaled(tmp_path, read_only):
    """Rank 0 hangs inside config 1 while its cache folder cannot be written: the watchdog ends the process, and
    its last words must not say the hang was "recorded as hung in the journal" (nothing could be written: the
    next attempt will run config 1 again) but that it was not recorded, and why."""
    cache = tmp_path / "cache"
    cache.mkdir()
    view = read_only(cache)
    env = tuner_env(tmp_path, T, FAULT_DIR=str(tmp_path / "calls"), FAULTS="1:hang@0",
                    TRITON_DIST_AUTOTUNE_CACHE_DIR=str(view))
    ranks = run_ranks(FAULTS, 2, ["tune"], env=env, timeout=120)
    assert ranks[0].returncode == WATCHDOG_EXIT, describe(ranks)
    last_words = [line for line in ranks[0].stderr.splitlines() if "watchdog: rank 0" in line]
    assert len(last_words) == 1, describe(ranks)
    assert "recorded as hung in the journal" not in last_words[0], last_words[0]
    assert "not recorded" in last_words[0].lower() and str(view) in last_words[0], last_words[0]
    assert list(cache.rglob("*.journal")) == []
