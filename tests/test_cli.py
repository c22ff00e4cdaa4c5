"""The command line (``python -m triton_dist_tune``) on caches and logs made by real tunings of 2 gloo ranks.

The tunings run ``tests/scenarios/cli_cases.py`` twice (a tuning, then a job that finds both keys in the cache).
Format-2 entries (the lead's new writer) are written here directly from :class:`Outcome` records.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import ROOT, RankResult, base_env, describe, run_cli, run_ranks, tuner_env

from triton_dist_tune.disk.cache import versions, write_json_atomic
from triton_dist_tune.faults.journal import Journal
from triton_dist_tune.records import TIME_PARTS, Outcome

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "cli_cases.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHOSEN_RGB, FAILED_RGB = (0xD9, 0x5F, 0x02), (0xC0, 0x39, 0x2B)  # plots.CHOSEN, plots.FAILED


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, worker_id) -> dict:
    """Two real jobs of 2 ranks: the first tunes keys (4,) and (8,), the second hits the cache for both.

    Run once per test session: under pytest-xdist the first worker to get here runs them (the others wait on a
    lock) into the session's shared temporary folder; every test reads them only (or copies the cache)."""
    base = tmp_path_factory.getbasetemp()
    tmp = (base.parent if worker_id != "master" else base) / "cli-tuned"
    with open(f"{tmp}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = tmp / "jobs.json"
        if not saved.exists():
            env = tuner_env(tmp, timeout=60)
            jobs = []
            for _ in range(2):
                results = run_ranks(SCENARIO, 2, ["tune"], env=env, timeout=240)
                assert all(r.returncode == 0 for r in results), describe(results)
                jobs.append([dataclasses.asdict(r) for r in results])
            saved.write_text(json.dumps(jobs))
    jobs = [[RankResult(**r) for r in job] for job in json.loads(saved.read_text())]
    return {"root": tmp, "cache": tmp / "cache", "logs": tmp / "logs", "jobs": jobs}


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m triton_dist_tune ARGS`` in a process of its own, forked from one that imported torch already
    (harness.run_cli; the test of the console script starts a fresh one)."""
    return run_cli(list(args), base_env(env), cwd, timeout=120)


def cache_copy(tuned: dict, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tuned["cache"], tmp_path / "cache"))


def entries_of(cache: Path) -> list[Path]:
    return sorted(cache.glob("*/*.json"))


def format2_entry(cache: Path, function: str = "drifting", key: str = "(1024, 'bf16')") -> Path:
    """A format-2 entry as the lead's writer makes it: Outcome.to_json measurements with rounds and drift."""
    outcomes = [
        Outcome(0, "{BLOCK: 64}", "measured", time=1.30, spread=0.02, per_rank=[1.28, 1.30], samples=30,
                order=[0, 3, 6], round_times=[1.20, 1.30, 1.42]),
        Outcome(1, "{BLOCK: 128}", "measured", time=1.00, spread=0.01, per_rank=[0.99, 1.00], samples=30,
                order=[1, 4, 7], round_times=[0.95, 1.00, 1.08]),
        Outcome(2, "{BLOCK: 256}", "stopped", time=2.10, spread=0.05, per_rank=[2.0, 2.1], samples=5,
                order=[2], round_times=[2.10]),
        Outcome(3, "{BLOCK: 512}", "failed", error="OutOfResources: shared memory 262144 > 232448"),
        Outcome(4, "{BLOCK: 1024}", "pruned"),
    ]
    data = {"format": 2, "function": function, "key": key, "index": 1, "config": "{BLOCK: 128}", "time_ms": 1.0,
            "margin": 0.3, "near_tie": False, "runner_up": 0, "timing": "steady", "rounds": 3,
            "tuning_seconds": 4.5, "group_size": 8, "group": "default", "created": time.time() - 3 * 86400,
            "versions": versions(), "gpu": "NVIDIA H200", "gpu_count": 8, "space": "abc",
            "measurements": [o.to_json() for o in outcomes]}
    return write_json_atomic(cache / function / "0123456789abcdef0123.json", data)


def png_ok(path: Path) -> set[tuple[int, int, int]]:
    """Check that ``path`` is a real, non-trivial PNG; return its set of RGB colours."""
    import matplotlib.image

    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 20_000, (path, len(data))
    import numpy

    pixels = (matplotlib.image.imread(path)[..., :3] * 255).round().astype(int).reshape(-1, 3)
    packed = numpy.unique((pixels[:, 0] << 16) | (pixels[:, 1] << 8) | pixels[:, 2])  # each colour once, at once
    colours = {(int(c) >> 16, (int(c) >> 8) & 255, int(c) & 255) for c in packed}
    assert len(colours) > 50, (path, len(colours))  # not a blank (one-colour) picture
    return colours


# -- what the tunings printed ----------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_verbose_output_names_group_cache_file_and_logs_and_reports_cache_hits(tuned):
    first, second = (job[0].stderr for job in tuned["jobs"])
    files = [str(p) for p in entries_of(tuned["cache"])]
    assert len(files) == 2
    assert "on 2 rank(s) of group 'default'" in first and "group '0'" not in first
    for path in files:
        assert f"cache file: {path}" in first and f"cache file: {path}" in second
    assert f"logs: {tuned['logs']}" in first
    assert second.count(": cache hit on 2 rank(s) of group 'default'") == 2 and "best config selected" not in second
    assert all("cache hit" not in r.stderr and "Triton autotuning" not in r.stderr for r in
               (tuned["jobs"][0][1], tuned["jobs"][1][1]))  # rank 1 prints nothing


# -- list / show -----------------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_list_shows_every_decision_and_filters(tuned, tmp_path):
    cache = cache_copy(tuned, tmp_path)
    format2_entry(cache)
    out = cli("list", "--cache-dir", str(cache))
    assert out.returncode == 0, out.stderr
    assert "cli_sleepy" in out.stdout and "(4,)" in out.stdout and "(8,)" in out.stdout
    chosen = {json.loads(p.read_text())["config"] for p in entries_of(tuned["cache"])}
    assert all(c in out.stdout for c in chosen) and "drifting" in out.stdout and "+30.0%" in out.stdout
    assert "3 decision(s)" in out.stdout and "current" in out.stdout and "3d" in out.stdout
    data = json.loads(cli("list", "--json", "--cache-dir", str(cache)).stdout)
    by_key = {e["key"]: e for e in data["entries"]}
    assert {e["function"] for e in data["entries"]} == {"cli_sleepy", "drifting"}
    real = by_key["(4,)"]
    assert real["index"] in (1, 4) and real["group_size"] == 2 and real["gpu"] == "cpu" and real["stale"] is False
    times = {m["index"]: m["time"] for m in real["measurements"] if m["time"] is not None}
    assert real["margin"] == pytest.approx(min(t for i, t in times.items() if i != 1) / times[1] - 1)
    assert by_key["(1024, 'bf16')"]["margin"] == 0.3 and by_key["(1024, 'bf16')"]["format"] == 2
    only = json.loads(cli("list", "--json", "--function", "drifting", "--cache-dir", str(cache)).stdout)
    assert [e["function"] for e in only["entries"]] == ["drifting"]
    assert json.loads(cli("list", "--json", "--stale", "--cache-dir", str(cache)).stdout)["entries"] == []
    stale = entries_of(cache)[0]
    data = json.loads(stale.read_text())
    data["versions"]["triton"] = "0.0.1"
    stale.write_text(json.dumps(data))
    listed = json.loads(cli("list", "--json", "--stale", "--cache-dir", str(cache)).stdout)["entries"]
    assert [e["file"] for e in listed] == [str(stale)]
    assert "STALE: triton 0.0.1 (now " in cli("list", "--stale", "--cache-dir", str(cache)).stdout


@pytest.mark.timeout(600)
def test_show_prints_the_whole_table_with_failures(tuned, tmp_path):
    cache = cache_copy(tuned, tmp_path)
    big = next(p for p in entries_of(cache) if json.loads(p.read_text())["key"] == "(8,)")
    name = f"cli_sleepy/{big.stem[:8]}"
    chosen = json.loads(big.read_text())["index"]  # config 1, unless load on this machine made another faster
    out = cli("show", name, "--cache-dir", str(cache))
    assert out.returncode == 0, out.stderr
    assert "key: (8,)" in out.stdout and f"chosen: config {chosen}: {{variant: {chosen}}}" in out.stdout
    assert "boom: config 3 does not fit on rank 1" in out.stdout and "failures:" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if line.strip().startswith(("->", "0 ", "2 ", "3 "))]
    assert [r[1] for r in rows if r[0] == "->"] == [str(chosen)]
    data = json.loads(cli("show", name, "--json", "--cache-dir", str(cache)).stdout)
    states = {m["index"]: m["state"] for m in data["measurements"]}
    assert states[chosen] == "measured" and states[3] == "failed" and states.get(4) == "pruned"  # pruned for (8,)
    assert all(states[i] in ("measured", "stopped") for i in (0, 1, 2))
    assert all(len(m["per_rank"]) == 2 for m in data["measurements"] if m["state"] in ("measured", "stopped"))
    # issue 41 item 1: where the tuning's seconds went, its parts exclusive and summing to its wall time
    assert "time spent: " in out.stdout and "exchanges " in out.stdout and "device floor" in out.stdout
    spent = data["breakdown"]
    assert spent["exchanges"] > 0 and spent["warmup"] > 0 and spent["race"] > 0 and spent["floor"] > 0
    assert sum(spent[part] for part in TIME_PARTS) == pytest.approx(spent["wall"], rel=1e-6)
    by_path = cli("show", str(big), "--cache-dir", str(cache))
    assert by_path.returncode == 0 and "key: (8,)" in by_path.stdout
    format2 = cli("show", "drifting", "--cache-dir", str(format2_entry(cache).parents[1]))
    assert format2.returncode == 0, format2.stderr
    assert "±1.0%" in format2.stdout and "+30.0% over config 0" in format2.stdout and "steady timing" in format2.stdout
    assert "OutOfResources" in format2.stdout and "pruned" in format2.stdout and "stopped" in format2.stdout


@pytest.mark.timeout(600)
def test_missing_and_corrupt_caches_are_one_line_errors(tuned, tmp_path):
    cache = cache_copy(tuned, tmp_path)
    missing = cli("list", "--cache-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "no cache folder at" in missing.stderr
    victim = entries_of(cache)[0]
    victim.write_text('{"format": 1, "index": ')  # a torn write
    listed = cli("list", "--cache-dir", str(cache))
    assert listed.returncode == 1 and "1 decision(s)" in listed.stdout  # the readable ones, and status 1
    assert f"skipped {victim}: corrupt cache file" in listed.stderr
    as_json = cli("list", "--json", "--cache-dir", str(cache))
    assert json.loads(as_json.stdout)["problems"] and as_json.returncode == 1
    exported = cli("export", str(tmp_path / "b.json"), "--cache-dir", str(cache))
    assert exported.returncode == 1 and "exported 1 decision(s)" in exported.stdout
    nowhere = cli("export", str(tmp_path / "no" / "such" / "b.json"), "--cache-dir", str(cache))
    assert nowhere.returncode == 2 and "create it first" in nowhere.stderr and not (tmp_path / "no").exists()
    shown = cli("show", str(victim), "--cache-dir", str(cache))
    assert shown.returncode == 2 and shown.stderr.count("\n") == 1 and "corrupt cache file" in shown.stderr
    assert "Traceback" not in shown.stderr
    victim.write_text(json.dumps({"format": 7, "index": 0}))
    other = cli("show", str(victim), "--cache-dir", str(cache))
    assert other.returncode == 2 and "unknown cache format 7" in other.stderr
    unknown = cli("show", "no-such-decision", "--cache-dir", str(cache))
    assert unknown.returncode == 2 and "no decision called" in unknown.stderr


def test_contextual_entries_are_listed_with_their_kernel(tmp_path):
    """contextual_autotune's entries (under <root>/contextual/) keep the kernel and a table of rows of their own."""
    table = [{"index": 0, "config": "BLOCK: 64, num_warps: 4", "state": "measured", "time": 0.5, "per_rank": [0.5, 0.4],
              "error": None},
             {"index": 1, "config": "BLOCK: 128, num_warps: 4", "state": "measured", "time": 0.4,
              "per_rank": [0.4, 0.4], "error": None},
             {"index": 2, "config": "BLOCK: 256, num_warps: 8", "state": "skipped", "time": None, "per_rank": None,
              "error": None}]
    data = {"format": 2, "function": "layer", "kernel": "__main__.add_kernel", "key": "(64, 'torch.float32')",
            "index": 1, "config": "BLOCK: 128, num_warps: 4", "group_size": 2, "time_ms": 0.4, "space": "x",
            "versions": versions(), "gpu": "cpu", "gpu_count": 0, "measurements": table}
    write_json_atomic(tmp_path / "contextual" / "00aa.json", data)
    listed = cli("list", "--cache-dir", str(tmp_path))
    assert listed.returncode == 0 and "layer:add_kernel" in listed.stdout and "+25.0%" in listed.stdout
    shown = json.loads(cli("show", "contextual/00aa", "--json", "--cache-dir", str(tmp_path)).stdout)
    assert shown["kernel"] == "__main__.add_kernel" and shown["margin"] == pytest.approx(0.25)
    assert [m["state"] for m in shown["measurements"]] == ["measured", "measured", "pruned"]
    text = cli("show", "contextual/00aa", "--cache-dir", str(tmp_path)).stdout  # a CPU decision: "cpu x0" before
    assert re.search(r"^\s*gpu: cpu$", text, re.MULTILINE) and "x0" not in text, text


# -- plot ------------------------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_plot_writes_real_pictures(tuned, tmp_path):
    pytest.importorskip("matplotlib")
    cache = cache_copy(tuned, tmp_path)
    format2_entry(cache)
    one = tmp_path / "one.png"
    out = cli("plot", "cli_sleepy/" + entries_of(cache)[0].stem[:6], "-o", str(one), "--cache-dir", str(cache))
    assert out.returncode == 0, out.stderr
    colours = png_ok(one)
    assert CHOSEN_RGB in colours and FAILED_RGB in colours  # the chosen config and the failed one are drawn
    across = tmp_path / "across.png"
    out = cli("plot", "--function", "cli_sleepy", "-o", str(across), "--cache-dir", str(cache))
    assert out.returncode == 0, out.stderr
    assert CHOSEN_RGB in png_ok(across)
    drift = tmp_path / "drift.png"
    out = cli("plot", "drifting", "-o", str(drift), "--cache-dir", str(cache))
    assert out.returncode == 0, out.stderr
    assert CHOSEN_RGB in png_ok(drift)
    default_name = cli("plot", "drifting", "--cache-dir", str(cache), cwd=tmp_path)
    assert default_name.returncode == 0 and (tmp_path / default_name.stdout.strip()).exists()
    nothing = cli("plot", "--function", "absent", "--cache-dir", str(cache))
    assert nothing.returncode == 2 and "no function 'absent' in" in nothing.stderr, nothing.stderr  # as list says
    assert "(functions: " in nothing.stderr and "cli_sleepy" in nothing.stderr, nothing.stderr
    if os.environ.get("TDT_KEEP_PLOTS"):  # to look at them: TDT_KEEP_PLOTS=/some/folder
        Path(os.environ["TDT_KEEP_PLOTS"]).mkdir(parents=True, exist_ok=True)
        for p in (one, across, drift):
            shutil.copy(p, Path(os.environ["TDT_KEEP_PLOTS"]) / p.name)


# -- clear -----------------------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_clear_by_filter_removes_entries_and_journals(tuned, tmp_path):
    cache = cache_copy(tuned, tmp_path)
    drifting = format2_entry(cache)
    stem = entries_of(cache)[0].stem
    for rank in range(2):  # journals of an interrupted tuning, named as the tuners name them (issue 17)
        journal = Journal(cache / "cli_sleepy" / f"{stem}.0123456789.rank{rank}.journal")
        journal.append(0, "started", config="{variant: 0}")
        journal.close()
    shown = cli("show", stem[:12], "--cache-dir", str(cache))
    assert f"{stem}.0123456789.rank0.journal, {stem}.0123456789.rank1.journal" in shown.stdout, shown.stdout
    orphan = Journal(cache / "cli_sleepy" / "feedfacefeedfacefeed.rank0.journal")
    orphan.append(2, "started", config="{variant: 2}")
    orphan.close()
    assert len(list(cache.glob("*/*.journal"))) == 3

    refused = cli("clear", "--cache-dir", str(cache))
    assert refused.returncode == 2 and "--all" in refused.stderr
    dry = cli("clear", "--older-than", "2d", "--dry-run", "--cache-dir", str(cache))
    assert dry.returncode == 0 and f"would remove {drifting}" in dry.stdout and drifting.exists()
    old = cli("clear", "--older-than", "2d", "--json", "--cache-dir", str(cache))
    assert json.loads(old.stdout)["removed"] == [str(drifting)] and not drifting.exists()
    assert not (cache / "drifting").exists()  # an emptied function folder goes too

    data = json.loads(entries_of(cache)[0].read_text())
    data["versions"] = {**data["versions"], "torch": "1.0"}
    entries_of(cache)[0].write_text(json.dumps(data))
    stale = cli("clear", "--stale", "--cache-dir", str(cache))
    assert stale.returncode == 0, stale.stderr
    assert "removed 1 cache file(s) and 2 journal(s)" in stale.stdout  # the stale entry and its journals
    assert len(entries_of(cache)) == 1 and [p.name for p in cache.glob("*/*.journal")] == [orphan.path.name]

    everything = cli("clear", "--function", "cli_sleepy", "--cache-dir", str(cache))
    assert "removed 1 cache file(s) and 1 journal(s)" in everything.stdout  # the orphan journal too
    assert [p.name for p in cache.rglob("*")] == [p.name for p in cache.glob(".versions-*")]  # records only
    bad_age = cli("clear", "--older-than", "banana", "--cache-dir", str(cache))
    assert bad_age.returncode == 2 and bad_age.stderr.count("\n") == 1
    assert "--older-than wants an age" in bad_age.stderr and "float" not in bad_age.stderr
    again = cache_copy(tuned, tmp_path / "again")
    assert cli("clear", "--all", "--cache-dir", str(again)).returncode == 0 and entries_of(again) == []


@pytest.mark.timeout(300)
def test_clear_unfinished_removes_the_journals_of_tunings_never_finished_and_no_decision(tuned, tmp_path):
    """A job cut short on 4 ranks and restarted on 2 tunes another entry (the group is part of its name): the
    4-rank group's journals stay, listed as a tuning never finished. Before, ``clear`` removed them only with the
    function's decisions (``--function``) or by age; ``--unfinished`` removes journals alone (``--function``,
    ``--older-than`` narrow it), and refuses the filters that select decisions.

    The 4-rank group's journals are named after an entry of their own (the group is part of it), no decision's:
    they once took a decision's name here (``decisions[0].stem``), which this test read as a tuning never finished;
    such journals are a tuning of that decision again, which ``--unfinished`` now keeps
    (tests/test_cli_credit.py::test_clear_unfinished_keeps_a_decisions_cut_tuning_again_and_clear_of_the_decision_removes_it)."""
    cache = cache_copy(tuned, tmp_path)
    decisions = entries_of(cache)
    stem = "0123456789abcdef4444"  # the 4-rank group's entry: no decision of it
    for rank in range(4):
        journal = Journal(cache / "cli_sleepy" / f"{stem}.0123456789.rank{rank}.journal", {"ranks": [0, 1, 2, 3]})
        journal.append(0, "started", config="{variant: 0}")
        journal.close()
    other = Journal(cache / "another_fn" / "feedfacefeedfacefeed.0123456789.rank0.journal")
    other.append(2, "started", config="{variant: 2}")
    other.close()
    assert "never finished" in cli("list", "--cache-dir", str(cache)).stdout
    refused = cli("clear", "--unfinished", "--stale", "--cache-dir", str(cache))
    assert refused.returncode == 2 and "--unfinished" in refused.stderr, refused.stderr
    young = cli("clear", "--unfinished", "--older-than", "1d", "--cache-dir", str(cache))
    assert "removed 0 cache file(s) and 0 journal(s)" in young.stdout, young.stdout
    mine = cli("clear", "--unfinished", "--function", "cli_sleepy", "--cache-dir", str(cache))
    assert mine.returncode == 0 and "removed 0 cache file(s) and 4 journal(s)" in mine.stdout, mine.stdout
    assert entries_of(cache) == decisions and other.path.exists()
    rest = cli("clear", "--unfinished", "--cache-dir", str(cache))
    assert "removed 0 cache file(s) and 1 journal(s)" in rest.stdout and not other.path.exists(), rest.stdout
    assert entries_of(cache) == decisions and "never finished" not in cli("list", "--cache-dir", str(cache)).stdout


@pytest.mark.timeout(120)
def test_the_journals_of_a_first_tuning_cut_short_are_listed_and_shown(tmp_path):
    """No decision yet, only the journals of a first tuning that was cut short (issue 40, item 11): 'list' names
    it and 'show' prints what its journals recorded, per config, as the next attempt starts from it."""
    cache = tmp_path / "cache"
    stem = "0123456789abcdef0123"
    for rank in range(2):  # as the tuner writes them: the group's tag, the job and group in every record
        journal = Journal(cache / "cut_short" / f"{stem}.0123456789.rank{rank}.journal",
                          {"job": "job-1", "group": "default", "ranks": [0, 1]})
        journal.record(Outcome(0, "{BLOCK: 64}", "measured", time=1.25, spread=0.01, per_rank=[1.2, 1.25]))
        journal.record(Outcome(1, "{BLOCK: 128}", "failed", error="RuntimeError: out of resources"))
        journal.append(2, "started", config="{BLOCK: 256}")  # in flight when the job was killed
        journal.close()

    listed = cli("list", "--cache-dir", str(cache))
    assert listed.returncode == 0, listed.stderr
    assert "no decisions in" in listed.stdout and "tunings never finished" in listed.stdout, listed.stdout
    line = next(text for text in listed.stdout.splitlines() if text.strip().startswith(stem[:8]))
    assert "cut_short" in line and "0,1" in line and "1 measured, 1 failed, 1 suspect" in line, line
    as_json = json.loads(cli("list", "--json", "--cache-dir", str(cache)).stdout)
    assert [t["name"] for t in as_json["unfinished"]] == [f"cut_short/{stem}"] and as_json["entries"] == []

    shown = cli("show", stem[:8], "--cache-dir", str(cache))
    assert shown.returncode == 0, shown.stderr
    assert f"{stem}.0123456789.rank0.journal, {stem}.0123456789.rank1.journal" in shown.stdout, shown.stdout
    rows = {text.split()[0]: text.split() for text in shown.stdout.splitlines() if text[:1].isdigit()}
    assert rows["0"][1:3] == ["measured", "1.2500"] and rows["1"][1] == "failed" and rows["2"][1] == "suspect", rows
    assert "out of resources" in shown.stdout and "ranks [0, 1] were inside this config" in shown.stdout
    detail = json.loads(cli("show", f"cut_short/{stem}", "--json", "--cache-dir", str(cache)).stdout)
    assert [c["state"] for c in detail["configs"]] == ["measured", "failed", "suspect"] and detail["unfinished"]
    missing = cli("show", "feedface", "--cache-dir", str(cache))
    assert missing.returncode == 2 and "no decision called 'feedface'" in missing.stderr


@pytest.mark.timeout(120)
def test_groups_that_are_not_replicas_are_listed_as_tunings_of_their_own(tmp_path):
    """One entry's journals in one folder from three groups cut short: two replicas of one tuning (they agreed the
    attempt's name ``X`` over the replicas; config 1 failed on one) and a group of the same job that is no replica
    of theirs (its own attempt ``Y``; config 1 measured). Its next attempt reads only its own journals and reuses
    config 1's time, so 'list' names two tunings and 'show' shows each. Before, the three were merged as replicas:
    one tuning of '3 groups', config 1 failed."""
    cache = tmp_path / "cache"
    stem = "0123456789abcdef0123"
    groups = {"aaaaaaaaaa": ("X", [0, 1]), "bbbbbbbbbb": ("X", [2, 3]), "cccccccccc": ("Y", [4, 5])}
    for tag, (attempt, ranks) in groups.items():
        for rank in range(2):
            journal = Journal(cache / "fn" / f"{stem}.{tag}.rank{rank}.journal",
                              {"job": "job-1", "group": f"ranks {ranks}", "ranks": ranks})
            journal.attempt = attempt
            journal.record(Outcome(0, "{BLOCK: 64}", "measured", time=1.25, spread=0.01, per_rank=[1.2, 1.25]))
            if tag == "aaaaaaaaaa":
                journal.record(Outcome(1, "{BLOCK: 128}", "failed", error="RuntimeError: out of resources"))
            elif tag == "cccccccccc":
                journal.record(Outcome(1, "{BLOCK: 128}", "measured", time=2.0, spread=0.01, per_rank=[2.0, 2.0]))
            journal.close()

    as_json = json.loads(cli("list", "--json", "--cache-dir", str(cache)).stdout)
    found = {t["name"]: t for t in as_json["unfinished"]}
    assert sorted(found) == [f"fn/{stem}@aaaaaaaaaa", f"fn/{stem}@cccccccccc"], sorted(found)
    replicas, alone = found[f"fn/{stem}@aaaaaaaaaa"], found[f"fn/{stem}@cccccccccc"]
    assert sorted(replicas["groups"]) == ["aaaaaaaaaa", "bbbbbbbbbb"] and list(alone["groups"]) == ["cccccccccc"]
    assert len(replicas["journals"]) == 4 and len(alone["journals"]) == 2
    assert [c["state"] for c in replicas["configs"]] == ["measured", "failed"], replicas["configs"]
    assert [c["state"] for c in alone["configs"]] == ["measured", "measured"], alone["configs"]  # before: failed
    listed = cli("list", "--cache-dir", str(cache)).stdout
    assert "01234567@aaaaaaaaaa" in listed and "01234567@cccccccccc" in listed, listed
    both = cli("show", stem, "--cache-dir", str(cache))
    assert both.returncode == 2 and "names 2 unfinished tunings" in both.stderr, both.stderr
    shown = cli("show", f"fn/{stem}@cccccccccc", "--cache-dir", str(cache))
    assert shown.returncode == 0 and f"{stem}.cccccccccc.rank0.journal" in shown.stdout, shown.stdout
    rows = {text.split()[0]: text.split()[1] for text in shown.stdout.splitlines() if text[:1].isdigit()}
    assert "aaaaaaaaaa" not in shown.stdout and rows == {"0": "measured", "1": "measured"}, shown.stdout


@pytest.mark.timeout(60)
def test_an_unfinished_tunings_attempts_count_each_process_once_by_the_attempt_it_agreed(tmp_path):
    """A process's first records may come before its attempt's name was agreed (no ``attempt`` field): that
    process still counts once. Rank 0's one process (s1: a record without, then one with attempt A) and rank 1's
    two (s2 in attempt A, s3 from before names were written) make 2 attempts, not 3."""
    from triton_dist_tune.faults.unfinished import unfinished

    folder = tmp_path / "cache" / "fn"
    folder.mkdir(parents=True)
    base = {"index": 0, "state": "started", "config": "{a: 1}"}
    files = {0: [{**base, "session": "s1"}, {**base, "session": "s1", "attempt": "A"}],
             1: [{**base, "session": "s2", "attempt": "A"}, {**base, "session": "s3"}]}
    for rank, records in files.items():
        text = "".join(json.dumps(r) + "\n" for r in records)
        (folder / f"0123456789abcdef0123.0123456789.rank{rank}.journal").write_text(text)
    (tuning,) = unfinished(tmp_path / "cache")
    assert (tuning.attempts, tuning.groups, tuning.ranks_text()) == (2, {"0123456789": [0, 1]}, "0,1"), tuning


@pytest.mark.timeout(120)
def test_an_unfinished_tuning_names_the_rank_in_its_journals_file_name_not_its_position(tmp_path):
    """Only group rank 1's journal is in the folder (rank 0's on another host): it hung in config 0, then a
    process of it was inside config 1 when the job ended. 'show' names rank 1 in both. Before: the journals'
    records were merged by their position in the list of journals found, so the only one was called rank 0."""
    cache = tmp_path / "cache"
    stem = "0123456789abcdef0123"
    journal = Journal(cache / "fn" / f"{stem}.0123456789.rank1.journal",
                      {"job": "job-1", "group": "default", "ranks": [0, 1]})
    journal.append(0, "started", config="{v: 0}", phase="warmup")
    journal.append(0, "hung", config="{v: 0}", error="warmup exceeded 3 s")
    journal.close()
    again = Journal(cache / "fn" / f"{stem}.0123456789.rank1.journal", {"job": "job-1"})  # a later process
    again.append(1, "started", config="{v: 1}", phase="warmup")
    again.close()

    shown = cli("show", f"fn/{stem}", "--json", "--cache-dir", str(cache))
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["ranks"] == [1], detail
    errors = {c["index"]: c["error"] for c in detail["configs"]}
    assert "hung on rank 1: warmup exceeded 3 s" in errors[0] and "rank 0" not in errors[0], errors
    assert "ranks [1] were inside this config" in errors[1], errors
    text = cli("show", f"fn/{stem}", "--cache-dir", str(cache))
    assert text.returncode == 0 and "hung on rank 1" in text.stdout and "rank 0" not in text.stdout, text.stdout


# -- export / import -------------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_export_and_import_a_bundle_with_version_checks(tuned, tmp_path):
    bundle = tmp_path / "decisions.json"
    out = cli("export", str(bundle), "--cache-dir", str(tuned["cache"]))
    assert out.returncode == 0 and "exported 2 decision(s)" in out.stdout, out.stderr
    fresh = tmp_path / "elsewhere"
    imported = cli("import", str(bundle), "--cache-dir", str(fresh))
    assert imported.returncode == 0 and "imported 2 decision(s)" in imported.stdout, imported.stderr
    for original in entries_of(tuned["cache"]):
        copy = fresh / original.parent.name / original.name
        assert json.loads(copy.read_text()) == json.loads(original.read_text())
    assert cli("import", str(bundle), "--cache-dir", str(fresh)).returncode == 0  # the same decisions again: fine
    mine = entries_of(fresh)[0]
    data = json.loads(mine.read_text())
    changed = {**data, "index": data["index"] + 1, "config": "another choice"}
    mine.write_text(json.dumps(changed))  # a decision of this cache that the bundle would replace
    kept = cli("import", str(bundle), "--cache-dir", str(fresh))
    assert kept.returncode == 1 and "would replace a different decision" in kept.stderr
    assert json.loads(mine.read_text()) == changed
    assert cli("import", str(bundle), "--force", "--cache-dir", str(fresh)).returncode == 0
    assert json.loads(mine.read_text()) != changed

    # a bundle from a cluster with other versions: refused, unless forced
    data = json.loads(bundle.read_text())
    for item in data["entries"]:
        item["data"]["versions"]["triton"] = "9.9.9"
    other = tmp_path / "other-cluster.json"
    other.write_text(json.dumps(data))
    target = tmp_path / "ci-cache"
    refused = cli("import", str(other), "--cache-dir", str(target))
    assert refused.returncode == 1 and "triton: 9.9.9 here" in refused.stderr and "refused" in refused.stderr
    assert not target.exists()
    forced = cli("import", str(other), "--force", "--json", "--cache-dir", str(target))
    assert forced.returncode == 0, forced.stderr
    report = json.loads(forced.stdout)
    assert len(report["imported"]) == 2 and len(entries_of(target)) == 2
    # the two forced past their mismatch, and every list of the report is named in docs/operations.md (before,
    # ``mismatched`` was not)
    assert sorted(report["mismatched"]) == sorted(item["path"] for item in data["entries"])
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert [name for name in report if f"`{name}`" not in operations] == []
    stale = json.loads(cli("list", "--json", "--stale", "--cache-dir", str(target)).stdout)["entries"]
    assert len(stale) == 2

    not_a_bundle = cli("import", str(entries_of(tuned["cache"])[0]), "--cache-dir", str(target))
    assert not_a_bundle.returncode == 2 and "not a triton-dist-tune bundle" in not_a_bundle.stderr
    data["entries"][0]["path"] = "../../etc/passwd.json"
    other.write_text(json.dumps(data))
    escaping = cli("import", str(other), "--force", "--cache-dir", str(target))
    assert escaping.returncode == 2 and "bad entry path" in escaping.stderr


# -- logs ------------------------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_logs_merge_the_ranks_of_a_job_into_one_timeline(tuned):
    env = {"TRITON_DIST_AUTOTUNE_LOG_DIR": str(tuned["logs"])}
    # one readable and one JSON-lines file per rank, holding both jobs, each starting with a header
    assert sorted(p.name for p in tuned["logs"].iterdir()) == ["rank-0.jsonl", "rank-0.log", "rank-1.jsonl",
                                                              "rank-1.log"]
    headers = [line for line in (tuned["logs"] / "rank-0.log").read_text().splitlines() if line.startswith("====")]
    assert len(headers) == 2 and all(h.startswith("==== triton-dist-tune job ") for h in headers)
    listed = cli("logs", "--list", env=env)
    jobs = [line.split()[0] for line in listed.stdout.splitlines()]
    assert listed.returncode == 0 and len(jobs) == 2 and jobs[0] in headers[0] and jobs[1] in headers[1]
    out = cli("logs", jobs[0], env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()[1:]
    assert any(" rank  0 " in line for line in lines) and any(" rank  1 " in line for line in lines)
    assert sum("decision: config " in line for line in lines) == 4  # 2 keys x 2 ranks
    records = json.loads(cli("logs", jobs[0], "--log-dir", str(tuned["logs"]), "--json").stdout)["records"]
    times = [r["time"] for r in records]
    assert times == sorted(times) and {r["rank"] for r in records} == {0, 1}
    assert {r["job"] for r in records} == {jobs[0]}
    latest = cli("logs", "--rank", "1", env=env)
    assert "cache hit" in latest.stdout and " rank  0 " not in latest.stdout
    assert json.loads(cli("logs", str(tuned["logs"]), "--json").stdout)["job"] == jobs[1]  # a folder: its latest
    none = cli("logs", "--log-dir", str(tuned["root"] / "cache"))
    assert none.returncode == 2 and "no job logs in" in none.stderr


def test_plot_to_a_name_without_a_suffix_prints_the_file_it_wrote(tmp_path, capsys):
    """``plot NAME -o chart`` printed ``chart`` while matplotlib wrote ``chart.png``: a script opening the printed
    path found nothing. The path printed is the file written."""
    pytest.importorskip("matplotlib")
    from triton_dist_tune.cli.commands import main

    cache = tmp_path / "cache"
    format2_entry(cache)
    for function in (False, True):
        out = tmp_path / ("every" if function else "one") / "chart"
        which = ["--function", "drifting"] if function else ["drifting/0123"]
        assert main(["plot", *which, "--cache-dir", str(cache), "-o", str(out)]) == 0
        printed = Path(capsys.readouterr().out.strip())
        assert printed == out.with_name("chart.png") and [p.name for p in out.parent.iterdir()] == ["chart.png"]
        png_ok(printed)


def test_plot_into_a_folder_that_is_a_file_says_so(tmp_path, capsys):
    """``plot NAME -o afile/x.png`` where ``afile`` is a file said only 'afile: File exists' (mkdir's error)."""
    pytest.importorskip("matplotlib")
    from triton_dist_tune.cli.commands import main

    cache = tmp_path / "cache"
    format2_entry(cache)
    (tmp_path / "afile").write_text("not a folder")
    out = tmp_path / "afile" / "sub" / "x.png"
    assert main(["plot", "drifting/0123", "--cache-dir", str(cache), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {out}: {tmp_path / 'afile'} is a file, not a folder" in err, err


def test_plot_into_an_existing_folder_is_refused_not_written_beside_it(tmp_path, capsys):
    """``plot NAME -o FOLDER`` wrote ``FOLDER.png`` beside the folder (a reviewer's), where ``export`` refuses."""
    pytest.importorskip("matplotlib")
    from triton_dist_tune.cli.commands import main

    cache = tmp_path / "cache"
    format2_entry(cache)
    (tmp_path / "pictures").mkdir()
    assert main(["plot", "drifting/0123", "--cache-dir", str(cache), "-o", str(tmp_path / "pictures")]) == 2
    assert "it is a folder" in capsys.readouterr().err and not (tmp_path / "pictures.png").exists()


def test_logs_list_json_prints_the_jobs_as_json(tmp_path, capsys):
    """``logs --list --json`` printed the text listing: a script reading ``--json`` (every command's 'print JSON for
    scripts') got no JSON. Two jobs' records written as the ranks write them; the listing is JSON, oldest first."""
    from triton_dist_tune.cli.commands import main

    folder = tmp_path / "logs"
    folder.mkdir()
    for rank in (0, 1):
        records = [{"time": 1000.0 + 10 * job + rank, "job": f"job{job}", "rank": rank, "host": "h", "level": "INFO",
                    "message": f"job job{job} rank {rank} started"} for job in (1, 2)]
        (folder / f"rank-{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["logs", "--list", "--json", "--log-dir", str(folder)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["folder"] == str(folder)
    assert [(j["job"], j["ranks"], j["first"], j["last"]) for j in listed["jobs"]] == [
        ("job1", [0, 1], 1010.0, 1011.0), ("job2", [0, 1], 1020.0, 1021.0)]


# -- packaging and the quick start -----------------------------------------------------------------------------


def test_console_script_and_plot_extra_are_declared():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module, _, function = project["scripts"]["triton-dist-tune"].partition(":")
    assert module == "triton_dist_tune.cli" and callable(getattr(__import__(module, fromlist=[function]), function))
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"]["plot"])
    usage = subprocess.run([sys.executable, "-m", "triton_dist_tune", "--help"], env=base_env(), capture_output=True,
                           text=True, timeout=120)  # a fresh interpreter, as a user starts it
    assert usage.returncode == 0
    assert all(c in usage.stdout for c in ("list", "show", "plot", "clear", "export", "import", "logs"))


@pytest.mark.timeout(600)
def test_quickstart_prints_one_line_per_rank_and_no_warning(tmp_path):
    env = base_env(tuner_env(tmp_path, timeout=120))  # Python's default warning filters: what a user sees
    for name in ("OMP_NUM_THREADS", "PYTHONWARNINGS"):
        env.pop(name, None)  # launch.sh must set OMP_NUM_THREADS (torchrun prints a banner otherwise)
    proc = subprocess.run(["bash", str(ROOT / "launch.sh"), "--cpu", str(ROOT / "examples" / "quickstart.py")],
                          env=env, capture_output=True, text=True, timeout=500, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("rank ")]
    assert [line.split(":")[0] for line in lines] == ["rank 0/2", "rank 1/2"], output[-4000:]
    assert all(line.count("chose") == 1 for line in lines)
    assert "Warning" not in output and "OMP_NUM_THREADS" not in output, output[-4000:]
    assert "cache file: " in proc.stderr and f"logs: {tmp_path / 'logs'}" in proc.stderr
    assert not (tmp_path / ".autotune_logs").exists()
