"""Superseded decisions: a job that tunes a key again after the function's config space (or code) changed writes a
second decision beside the first. The command line marks the older one (``list``, ``show``), removes it (``clear
--superseded``) and leaves it out of ``export``.

Two real jobs of 2 ranks (tests/scenarios/superseded_cases.py) tune batch sizes 1 and 16 of ``moe`` over two
spaces; the command line runs in this process on copies of their cache."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from harness import describe, run_ranks, tuner_env

from triton_dist_tune.cli.commands import main
from triton_dist_tune.disk import decisions as dec
from triton_dist_tune.disk.cache import versions, write_json_atomic

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "superseded_cases.py"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict:
    """The first job tunes over a space whose first config has BLOCK_SIZE_M 16, the second over one with 32."""
    tmp = tmp_path_factory.mktemp("two-spaces")
    env = tuner_env(tmp, timeout=60)
    runs = []
    for first in (16, 32):
        results = run_ranks(SCENARIO, 2, ["tune"], env={**env, "SUPERSEDED_FIRST": str(first)}, timeout=240)
        assert all(r.returncode == 0 for r in results), describe(results)
        runs.append(results)
        time.sleep(0.05)  # the second job's decisions are the newer ones, whatever the clock's resolution
    files = {json.loads(p.read_text())["space"]: [] for p in (tmp / "cache" / "moe").glob("*.json")}
    for p in sorted((tmp / "cache" / "moe").glob("*.json")):
        files[json.loads(p.read_text())["space"]].append(p)
    old, new = sorted(files.values(), key=lambda paths: json.loads(paths[0].read_text())["created"])
    return {"tmp": tmp, "cache": tmp / "cache", "runs": runs, "old": old, "new": new}


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    """The command line in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    status = main(args)
    out = capsys.readouterr()
    return status, out.out, out.err


def cache_copy(jobs: dict, tmp_path: Path) -> Path:
    return Path(shutil.copytree(jobs["cache"], tmp_path / "cache"))


@pytest.mark.timeout(600)
def test_list_and_show_mark_the_superseded_decisions(jobs, capsys):
    status, out, _ = cli(["list", "--cache-dir", str(jobs["cache"])], capsys)
    assert status == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and "moe" not in line}
    assert all("SUPERSEDED" in rows[p.stem[:8]] for p in jobs["old"])
    assert all("current" in rows[p.stem[:8]] and "SUPERSEDED" not in rows[p.stem[:8]] for p in jobs["new"])
    assert "2 superseded decision(s)" in out and "'clear --superseded' removes them" in out
    for old in jobs["old"]:
        assert f"{old.stem[:8]} (moe, key " in out
    data = json.loads(cli(["list", "--json", "--cache-dir", str(jobs["cache"])], capsys)[1])
    by_file = {e["file"]: e["superseded_by"] for e in data["entries"]}
    assert {f for f, by in by_file.items() if by} == {str(p) for p in jobs["old"]}
    assert {by for by in by_file.values() if by} == {f"moe/{p.name}" for p in jobs["new"]}
    only = json.loads(cli(["list", "--json", "--superseded", "--cache-dir", str(jobs["cache"])], capsys)[1])
    assert sorted(e["file"] for e in only["entries"]) == sorted(map(str, jobs["old"]))
    status, out, _ = cli(["show", f"moe/{jobs['old'][0].stem[:8]}", "--cache-dir", str(jobs["cache"])], capsys)
    assert status == 0 and "superseded: by moe/" in out and "'clear --superseded' removes it" in out
    status, out, _ = cli(["show", f"moe/{jobs['new'][0].stem[:8]}", "--cache-dir", str(jobs["cache"])], capsys)
    assert status == 0 and "superseded" not in out


@pytest.mark.timeout(600)
def test_clear_superseded_removes_only_them(jobs, tmp_path, capsys):
    cache = cache_copy(jobs, tmp_path)
    old = [cache / "moe" / p.name for p in jobs["old"]]
    status, out, _ = cli(["clear", "--superseded", "--dry-run", "--cache-dir", str(cache)], capsys)
    assert status == 0 and all(f"would remove {p}" in out for p in old) and all(p.exists() for p in old)
    assert "would remove 2 cache file(s) and 0 journal(s)" in out
    status, out, _ = cli(["clear", "--superseded", "--cache-dir", str(cache)], capsys)
    assert status == 0 and "removed 2 cache file(s) and 0 journal(s)" in out
    assert sorted(p.name for p in (cache / "moe").glob("*.json")) == sorted(p.name for p in jobs["new"])
    assert "SUPERSEDED" not in cli(["list", "--cache-dir", str(cache)], capsys)[1]


@pytest.mark.timeout(600)
def test_vllm_moe_export_uses_the_newer_decisions(jobs, tmp_path, capsys):
    out = tmp_path / "configs"
    status, said, err = cli(["export", str(out), "--format", "vllm-moe", "--function", "moe", "--experts", "8",
                             "--n", "128", "--cache-dir", str(jobs["cache"])], capsys)
    assert status == 0, err
    assert "skipped 2 superseded decision(s)" in said and "2 tuned batch size(s) 1, 16" in said
    (written,) = out.iterdir()
    configs = json.loads(written.read_text())
    for path in jobs["new"]:
        data = json.loads(path.read_text())
        batch = dec.parse_entry(path, data).key.strip("()").split(",")[0]
        assert f"BLOCK_SIZE_M: {configs[batch]['BLOCK_SIZE_M']}," in data["config"]
    bundle = tmp_path / "bundle.json"
    status, said, _ = cli(["export", str(bundle), "--function", "moe", "--cache-dir", str(jobs["cache"])], capsys)
    assert status == 0 and "skipped 2 superseded decision(s)" in said and "exported 2 decision(s)" in said


def decision(cache: Path, name: str, key: str, config: str, space: str, created: float, **extra) -> Path:
    """A decision of ``moe`` as the tuner writes it (the fields that matter here), its file last written then."""
    data = {"format": 2, "function": "moe", "key": key, "index": 0, "config": config, "time_ms": 1.0,
            "timing": "steady", "group_size": 2, "group": "default", "created": created, "versions": versions(),
            "gpu": "cpu", "gpu_count": 0, "space": space, "origin": "/src/prog.py:moe", "measurements": [], **extra}
    path = write_json_atomic(cache / "moe" / f"{name}.json", data)
    os.utime(path, (created, created))
    return path


def test_what_supersedes_what(tmp_path):
    """Another space supersedes; another source only where both record one; decisions told apart by what the files
    do not record (cache_key_extra, tensor devices) do not; other keys, group sizes and timing modes do not; nor
    does a decision of a function defined elsewhere (another program's function of the same name), nor an earlier
    release's file (no origin recorded)."""
    cache, now = tmp_path / "cache", time.time()
    paths = {
        "old_space": decision(cache, "a" * 20, "(1,)", "{x: 1}", "s1", now - 50),
        "no_source": decision(cache, "b" * 20, "(1,)", "{x: 2}", "s1", now - 40, origin=None),  # an earlier release
        "other_program": decision(cache, "i" * 20, "(1,)", "{x: 9}", "s9", now - 45, origin="/other/prog.py:moe"),
        "old_source": decision(cache, "c" * 20, "(1,)", "{x: 3}", "s2", now - 30, source="c1"),
        "extra": decision(cache, "d" * 20, "(1,)", "{x: 4}", "s2", now - 20, source="c2"),
        "newest": decision(cache, "e" * 20, "(1,)", "{x: 5}", "s2", now - 10, source="c2"),
        "other_key": decision(cache, "f" * 20, "(2,)", "{x: 6}", "s1", now - 60),
        "other_group": decision(cache, "g" * 20, "(1,)", "{x: 7}", "s1", now - 60, group_size=4),
        "cold": decision(cache, "h" * 20, "(1,)", "{x: 8}", "s1", now - 60, timing="cold"),
    }
    entries, problems = dec.scan(cache)
    assert not problems
    replaced = dec.superseded(entries)
    assert {p.stem[0] for p in replaced} == {"a", "c"}
    assert {newer.path for newer in replaced.values()} == {paths["newest"]}


@pytest.mark.timeout(600)
def test_a_decision_served_again_is_current_again(tmp_path, capsys):
    """Issue 41 review: a job that goes back to the first space serves its decisions from the cache again. Before,
    the decisions of the space it left (written later) stayed current and the ones it serves were SUPERSEDED:
    ``clear --superseded`` would have removed the decisions in use and ``export`` shipped the others. Three real jobs
    of 2 ranks: spaces 16, 32, then 16 again."""
    env = tuner_env(tmp_path, timeout=60)
    for first in (16, 32, 16):
        results = run_ranks(SCENARIO, 2, ["tune"], env={**env, "SUPERSEDED_FIRST": str(first)}, timeout=240)
        assert all(r.returncode == 0 for r in results), describe(results)
        time.sleep(0.05)  # each job's files are the newer ones, whatever the clock's resolution
    folder = tmp_path / "cache" / "moe"
    by_space: dict[str, list[str]] = {}
    for p in sorted(folder.glob("*.json")):
        by_space.setdefault(json.loads(p.read_text())["space"], []).append(str(p))
    assert len(by_space) == 2 and all(len(paths) == 2 for paths in by_space.values())  # the third job wrote none
    data = json.loads(cli(["list", "--json", "--superseded", "--cache-dir", str(tmp_path / "cache")], capsys)[1])
    left = sorted(e["file"] for e in data["entries"])
    first_job = sorted(min(by_space.values(), key=lambda paths: json.loads(Path(paths[0]).read_text())["created"]))
    second_job = sorted(p for paths in by_space.values() for p in paths if p not in first_job)
    assert left == second_job, (left, first_job)


def test_vllm_moe_conflict_names_both_files_and_their_ages(tmp_path, capsys):
    cache, now = tmp_path / "cache", time.time()
    tile = "{{BLOCK_SIZE_K: 32, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 2, num_warps: 4}}"
    one = decision(cache, "a" * 20, "(1, 'torch.bfloat16', 'x')", tile.format(m=16), "s1", now - 7200)
    two = decision(cache, "b" * 20, "(1, 'torch.bfloat16', 'y')", tile.format(m=32), "s1", now - 60)
    status, _, err = cli(["export", str(tmp_path / "out"), "--format", "vllm-moe", "--function", "moe", "--experts",
                          "8", "--n", "128", "--cache-dir", str(cache)], capsys)
    assert status == 2
    assert f"{one} (tuned 2h ago" in err and f"{two} (tuned 1m ago" in err and "batch size 1" in err
    assert "--where POS=VALUE picks keys" in err  # two keys: --where tells them apart


def test_vllm_moe_conflict_of_one_key_says_to_delete_a_file(tmp_path, capsys):
    """Two decisions of one key with one space and code (rank-local campaigns on 3 and then 4 ranks write two
    entries whose keys are equal): --where cannot pick one, so the error says what differs and to delete a file
    (before: it pointed to --where)."""
    cache, now = tmp_path / "cache", time.time()
    tile = "{{BLOCK_SIZE_K: 32, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 2, num_warps: 4}}"
    one = decision(cache, "a" * 20, "(8, 'torch.bfloat16')", tile.format(m=16), "s1", now - 7200, group_size=1)
    two = decision(cache, "b" * 20, "(8, 'torch.bfloat16')", tile.format(m=32), "s1", now - 60, group_size=1)
    status, _, err = cli(["export", str(tmp_path / "out"), "--format", "vllm-moe", "--function", "moe", "--experts",
                          "8", "--n", "128", "--cache-dir", str(cache)], capsys)
    assert status == 2 and f"{one} (tuned 2h ago" in err and f"{two} (tuned 1m ago" in err
    assert "for one key" in err and "delete the file not wanted" in err and "--where" not in err


def test_vllm_moe_conflict_of_one_key_names_the_group_sizes_the_files_record(tmp_path, capsys):
    """Rank-local campaigns of the MoE example on 2 and then 4 CPU ranks: two decisions per batch size, each
    serving calls on its job's number of ranks, which the files record (``rank_local.group_size``; ``list`` and
    ``show`` say it). The export said they differ 'in what the files do not record (..., the number of ranks a
    rank-local campaign ran on)'; now it names each file's group size."""
    cache, now = tmp_path / "cache", time.time()
    tile = "{{BLOCK_SIZE_K: 32, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 2, num_warps: 4}}"
    on = {size: {"rank": 0, "group_size": size, "group": "default"} for size in (2, 4)}
    one = decision(cache, "a" * 20, "(8, 'torch.bfloat16')", tile.format(m=16), "s1", now - 7200, group_size=1,
                   group="this process alone", rank_local=on[2])
    two = decision(cache, "b" * 20, "(8, 'torch.bfloat16')", tile.format(m=32), "s1", now - 60, group_size=1,
                   group="this process alone", rank_local=on[4])
    status, _, err = cli(["export", str(tmp_path / "out"), "--format", "vllm-moe", "--function", "moe", "--experts",
                          "8", "--n", "128", "--cache-dir", str(cache)], capsys)
    assert status == 2 and f"{one} (tuned 2h ago" in err and f"{two} (tuned 1m ago" in err
    assert "do not record" not in err and "serving calls on 2 and 4 ranks" in err, err
    assert "delete the file not wanted" in err, err


def test_vllm_moe_conflict_of_one_key_on_one_group_size_does_not_say_the_size_is_unrecorded(tmp_path, capsys):
    """Two decisions of one key from rank-local campaigns on 4 ranks both times (the files record it): the export
    listed 'the number of ranks a rank-local campaign ran on' among what the files do not record; now it says both
    serve calls on 4 ranks. Older files without ``rank_local`` (one rank's group) still leave that unrecorded."""
    cache, now = tmp_path / "cache", time.time()
    tile = "{{BLOCK_SIZE_K: 32, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 2, num_warps: 4}}"
    on = {"rank": 0, "group_size": 4, "group": "default"}
    decision(cache, "a" * 20, "(8, 'torch.bfloat16')", tile.format(m=16), "s1", now - 7200, group_size=1,
             group="this process alone", rank_local=on)
    two = decision(cache, "b" * 20, "(8, 'torch.bfloat16')", tile.format(m=32), "s1", now - 60, group_size=1,
                   group="this process alone", rank_local=on)
    export = ["export", str(tmp_path / "out"), "--format", "vllm-moe", "--function", "moe", "--experts", "8", "--n",
              "128", "--cache-dir", str(cache)]
    status, _, err = cli(export, capsys)
    assert status == 2 and "for one key" in err, err
    assert ("They differ in what the files do not record (cache_key_extra, the devices of the call's tensors); "
            "both serve calls on 4 ranks: delete the file not wanted") in err, err
    for name, m, age in (("a", 16, 7200), ("b", 32, 60)):  # as an older tuner wrote them: no rank_local
        decision(cache, name * 20, "(8, 'torch.bfloat16')", tile.format(m=m), "s1", now - age, group_size=1)
    status, _, err = cli(export, capsys)
    assert status == 2 and f"{two} (tuned 1m ago" in err and "the number of ranks a rank-local campaign ran on)" in err


def test_vllm_moe_conflict_of_one_key_with_an_older_file_does_not_give_it_a_number_of_ranks(tmp_path, capsys):
    """One key's decisions: a rank-local campaign's on 4 ranks (the file records it) and an older tuner's file
    without ``rank_local``, tuned on one rank (one process's, or an older rank-local campaign's on any number of
    ranks). The export said they serve calls 'on 4 and 1 ranks', though the older file records no number of ranks;
    now it says that file does not record it, and names the other's."""
    cache, now = tmp_path / "cache", time.time()
    tile = "{{BLOCK_SIZE_K: 32, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 2, num_warps: 4}}"
    on = {"rank": 0, "group_size": 4, "group": "default"}
    recorded = decision(cache, "a" * 20, "(8, 'torch.bfloat16')", tile.format(m=16), "s1", now - 7200, group_size=1,
                        group="this process alone", rank_local=on)
    older = decision(cache, "b" * 20, "(8, 'torch.bfloat16')", tile.format(m=32), "s1", now - 60, group_size=1)
    status, _, err = cli(["export", str(tmp_path / "out"), "--format", "vllm-moe", "--function", "moe", "--experts",
                          "8", "--n", "128", "--cache-dir", str(cache)], capsys)
    assert status == 2 and f"{recorded} (tuned 2h ago" in err and f"{older} (tuned 1m ago" in err, err
    assert "1 ranks" not in err, err
    assert (f"; {recorded.name} serves calls on 4 ranks; {older.name} does not record on how many (it has no "
            "rank_local field: one process's tuning, or an older rank-local campaign's on any number of ranks): one "
            "file holds one config per batch size") in err, err
    assert "delete the file not wanted" in err and "--where" not in err, err
