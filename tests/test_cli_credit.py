"""The command line credits a journal's records to the decision they will be written as, not to the journal's name.

A tuning's journals are named after its entry as steady timing names it, without the kept set
(``function/tuning.py``'s ``journal_entry``), so that a hang or crash under one timing mode or kept set counts under
every other: one journal file can hold the records of a tuning whose decision will be written under another entry
(a cold one, a kept subset) than the decision its name is. Each record names that entry (``decision``); ``list``,
``show`` and ``clear`` go by it. Real processes throughout: one that tunes (and kills itself, kill -9, at a chosen
config's first call), and ``python -m triton_dist_tune`` over its cache folder.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from harness import base_env, run_python, tuner_env

KILLED_AT_A_CALL = r"""
import os, signal
import torch
import triton_dist_tune as tdt

calls, kill = os.environ["CALLS"], int(os.environ.get("KILL", "-1"))

def keep(config, x):  # KEEP="0,1,2": pruning keeps those (one source: the journals' name is the same either way)
    return str(config["v"]) in os.environ.get("KEEP", "0,1,2,3").split(",")

@tdt.autotune([{"v": v} for v in range(4)], key_fn=lambda x: x.numel(), prune_fn=keep, n_warmup=1, n_repeat=3,
              sharded=True, name="credited")
def f(x, *, v):
    with open(calls, "a") as out:
        out.write(f"{v}\n")
    if v == kill:  # every call of it: each attempt that reaches it ends there
        os.kill(os.getpid(), signal.SIGKILL)
    return x + v

print("CHOSE", int(f(torch.zeros(4))[0]))
"""

#: what makes the killed tuning's decision another entry than the steady one's, while its journals keep its name
OTHER = {"cold": {"TRITON_DIST_AUTOTUNE_TIMING": "cold"}, "kept": {"KEEP": "0,1,2"}}


def _tune(folder: Path, **extra: str) -> tuple[subprocess.CompletedProcess, Counter]:
    """One process that tunes ``f`` into ``folder``'s cache; its exit and the calls of each config it made."""
    script = folder.parent / "killed_at_a_call.py"
    script.write_text(KILLED_AT_A_CALL)
    calls = folder / "calls"
    calls.unlink(missing_ok=True)
    env = base_env({**tuner_env(folder, 30), "CALLS": str(calls), **extra})
    env.pop("RANK", None), env.pop("WORLD_SIZE", None)
    done = run_python([script], env, timeout=120)
    return done, Counter(int(v) for v in calls.read_text().split()) if calls.exists() else Counter()


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m triton_dist_tune ARGS`` on ``folder``'s cache, named by the cache folder's variable."""
    env = base_env({"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(folder / "cache")})
    done = run_python(["-m", "triton_dist_tune", *args], env, timeout=120)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done


def _decisions(folder: Path) -> set[Path]:
    return set((folder / "cache" / "credited").glob("*.json"))


@pytest.mark.timeout(400)
@pytest.mark.parametrize("other", sorted(OTHER))
def test_a_tuning_killed_under_another_entry_is_listed_shown_and_kept_apart_from_the_steady_decision(tmp_path, other):
    """A steady decision of the key exists; the same key tuned under ``other`` (cold timing, or a kept subset) is
    killed (kill -9) at config 2's first call, twice: its records are in the journal named after the steady
    decision (checked). ``list`` must name it a tuning never finished, under the entry its decision will be written
    as (that of a copy of the folder resumed to its end), ``show`` of the steady decision must not claim its journal,
    and ``clear --stale`` of the steady decision must keep that journal and say so: a third attempt then leaves
    config 2 out (it ended two attempts); before, the CLI went by the file name, the journal went with the steady
    decision and the third attempt ran config 2 again (killed a third time)."""
    job = tmp_path / "job"
    job.mkdir()
    done, _ = _tune(job)
    assert done.returncode == 0, done.stderr[-3000:]
    (steady,) = _decisions(job)
    for attempt in range(2):
        done, calls = _tune(job, KILL="2", **OTHER[other])
        assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
        assert calls[2] == 1 and calls[3] == 0, (attempt, calls)
    journals = sorted((job / "cache" / "credited").glob("*.journal"))
    assert [p.name.split(".")[0] for p in journals] == [steady.stem], journals  # the premise: the steady name
    resumed = tmp_path / "resumed"
    shutil.copytree(job, resumed)
    done, calls = _tune(resumed, **OTHER[other])
    assert done.returncode == 0 and calls[2] == 0, (calls, done.stderr[-3000:])  # ended two attempts: left out
    (decision,) = {p.name for p in _decisions(resumed)} - {steady.name}

    listed = json.loads(_cli(job, "list", "--json").stdout)
    assert [e["file"] for e in listed["entries"]] == [str(steady)], listed
    assert [t["entry"] for t in listed["unfinished"]] == [decision.removesuffix(".json")], listed["unfinished"]
    (cut,) = listed["unfinished"]
    assert cut["journals"] == [str(p) for p in journals] and cut["attempts"] == 2, cut
    assert decision[:8] in _cli(job, "list").stdout
    shown = _cli(job, "show", steady.stem[:12]).stdout
    assert "journals:" not in shown, shown  # none of the steady decision's own
    assert journals[0].name in _cli(job, "show", decision[:12]).stdout

    data = json.loads(steady.read_text())
    data["versions"] = {**data["versions"], "torch": "1.0"}  # tuned under another torch: stale
    steady.write_text(json.dumps(data))
    dry = json.loads(_cli(job, "clear", "--stale", "--dry-run", "--json").stdout)
    assert dry["would_remove"] == [str(steady)] and dry["shared"] == {str(journals[0]): [decision[:20]]}, dry
    cleared = _cli(job, "clear", "--stale")
    assert not steady.exists() and all(p.exists() for p in journals), cleared.stdout
    said = [line for line in cleared.stdout.splitlines() if str(journals[0]) in line]
    assert len(said) == 1 and said[0].startswith("kept ") and decision[:8] in said[0], cleared.stdout
    assert "removed 1 cache file(s) and 0 journal(s)" in cleared.stdout, cleared.stdout
    assert [t["entry"] for t in json.loads(_cli(job, "list", "--json").stdout)["unfinished"]] == \
        [decision.removesuffix(".json")]
    done, calls = _tune(job, KILL="2", **OTHER[other])
    assert done.returncode == 0 and calls[2] == 0, (calls, done.stderr[-3000:])  # the journal's evidence stood


@pytest.mark.timeout(400)
def test_clear_unfinished_keeps_a_decisions_cut_tuning_again_and_clear_of_the_decision_removes_it(tmp_path):
    """A decision exists; the same key tuned again (``..._ALWAYS_TUNE=1``) is killed (kill -9) at config 2's first
    call: its journal's records name that decision (checked). That journal is no tuning never finished (``list``
    names none): ``clear --unfinished`` must keep it and say why (its line, ``shared`` in ``--json``), while it still
    removes a tuning's journal that has no decision; ``clear`` of the decision (``--stale``) removes it. Before,
    ``--unfinished`` removed every journal it selected, the decision's evidence of a config that killed its process
    with them."""
    from triton_dist_tune.faults.journal import Journal

    job = tmp_path / "job"
    job.mkdir()
    done, _ = _tune(job)
    assert done.returncode == 0, done.stderr[-3000:]
    (steady,) = _decisions(job)
    done, calls = _tune(job, KILL="2", TRITON_DIST_AUTOTUNE_ALWAYS_TUNE="1")
    assert done.returncode == -signal.SIGKILL and calls[2] == 1, (calls, done.stderr[-3000:])
    journals = sorted((job / "cache" / "credited").glob("*.journal"))
    records = [json.loads(line) for p in journals for line in p.read_text().splitlines() if line.strip()]
    assert journals and records and {r.get("decision") for r in records} == {steady.stem}, records  # the premise
    orphan = Journal(job / "cache" / "credited" / "feedfacefeedfacefeed.0123456789.rank0.journal")
    orphan.append(2, "started", config="{v: 2}")
    orphan.close()
    assert [t["entry"] for t in json.loads(_cli(job, "list", "--json").stdout)["unfinished"]] == \
        ["feedfacefeedfacefeed"]

    dry = json.loads(_cli(job, "clear", "--unfinished", "--dry-run", "--json").stdout)
    assert dry["would_remove"] == [str(orphan.path)], dry
    assert dry["shared"] == {str(p): [steady.stem] for p in journals}, dry
    cleared = _cli(job, "clear", "--unfinished")
    assert all(p.exists() for p in journals) and not orphan.path.exists() and steady.exists(), cleared.stdout
    said = [line for line in cleared.stdout.splitlines() if str(journals[0]) in line]
    assert len(said) == 1 and said[0].startswith(f"kept {journals[0]}: it holds records of {steady.stem[:8]} "
                                                 "(a decision"), cleared.stdout
    assert "removed 0 cache file(s) and 1 journal(s)" in cleared.stdout, cleared.stdout

    data = json.loads(steady.read_text())
    data["versions"] = {**data["versions"], "torch": "1.0"}  # tuned under another torch: stale
    steady.write_text(json.dumps(data))
    gone = _cli(job, "clear", "--stale")
    assert not steady.exists() and not any(p.exists() for p in journals), gone.stdout
    assert f"removed 1 cache file(s) and {len(journals)} journal(s)" in gone.stdout, gone.stdout
