"""``export --format vllm-moe | sglang-moe --group-size N``: a cache folder that holds one MoE function's decisions
tuned at several world sizes (or TP group sizes) exports those of one size.

Before, the export refused such a folder and its message said to delete a file (or, for keys that hold the world
size, to pick keys with ``--where``); no option picked a group size. Cache folders are written as the package's own
writer writes them (``write_json_atomic``), each command runs as ``python -m triton_dist_tune ...`` in a process of
its own (harness.run_cli).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from harness import base_env, run_cli

from triton_dist_tune.disk.cache import hardware, versions, write_json_atomic

TILE = "{{BLOCK_SIZE_K: 64, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 3, num_warps: 4}}"
VLLM = ["--format", "vllm-moe", "--function", "moe", "--experts", "8", "--n", "64", "--dtype", "bfloat16"]


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    """``python -m triton_dist_tune ARGS`` in a process of its own."""
    return run_cli([str(a) for a in args], base_env(), timeout=120)


def refused(done: subprocess.CompletedProcess) -> str:
    """The command's stderr, checked to be one line (no traceback) with exit status 2."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def decision(cache: Path, key: str, m: int, group_size: int, name: str, **extra: Any) -> Path:
    """A format-2 decision of ``moe`` as the tuner writes it (its config's BLOCK_SIZE_M ``m``), tuned by a group of
    ``group_size`` ranks, in a file named as the tuner names its files (20 hex digits)."""
    hw = hardware()
    data = {"format": 2, "function": "moe", "key": key, "index": 0, "config": TILE.format(m=m), "time_ms": 1.0,
            "margin": 0.1, "near_tie": False, "runner_up": 1, "timing": "steady", "rounds": 2,
            "group_size": group_size, "group": "default", "created": time.time() - 60, "versions": versions(),
            "gpu": hw["gpu"], "gpu_count": hw["gpu_count"], "space": "abc", "measurements": [], **extra}
    return write_json_atomic(cache / "moe" / f"{hashlib.sha1(name.encode()).hexdigest()[:20]}.json", data)


def exported(out: Path) -> dict[str, int]:
    """The one file ``out`` holds: batch size -> BLOCK_SIZE_M."""
    (path,) = [p for p in out.rglob("*.json")]
    return {k: v["BLOCK_SIZE_M"] for k, v in json.loads(path.read_text()).items()}


@pytest.mark.timeout(300)
def test_group_size_picks_the_decisions_of_one_world_size_and_the_refusal_names_it(tmp_path):
    """One key, tuned by the whole job on 2 and then on 4 ranks (``group_size`` 2 and 4): the export refused with
    'delete the file not wanted' alone. Now the refusal names ``--group-size``, which exports either size's."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    for size, m in ((2, 16), (4, 32)):
        decision(cache, "(16, 'torch.bfloat16')", m, size, f"world{size}")
    said = refused(cli("export", out, *VLLM, "--cache-dir", cache))
    assert "serving calls on 2 and 4 ranks" in said and "pick one with --group-size 2 (or 4)" in said, said
    assert "delete the file not wanted" in said, said
    for size, m in ((2, 16), (4, 32)):
        done = cli("export", out / str(size), *VLLM, "--group-size", size, "--cache-dir", cache)
        assert done.returncode == 0, done.stderr
        assert exported(out / str(size)) == {"16": m}
    said = refused(cli("export", out / "8", *VLLM, "--group-size", "8", "--cache-dir", cache))
    assert "matches --group-size 8" in said and "the group sizes its decisions serve: 2, 4" in said, said
    for bad, why in (("0", "a group holds at least 1 rank"), ("two", "'two' is not a whole number of ranks")):
        done = cli("export", out / "bad", *VLLM, "--group-size", bad, "--cache-dir", cache)
        assert done.returncode == 2 and why in done.stderr, done.stderr
    assert not (out / "8").exists() and not (out / "bad").exists()


@pytest.mark.timeout(300)
def test_group_size_picks_keys_that_hold_the_world_size_and_rank_local_and_tp_decisions(tmp_path):
    """Keys that hold the world size (as the examples' ``tuning_key``) are two keys per batch size: the refusal
    pointed to ``--where`` alone; it names ``--group-size`` too, which picks them. A rank-local campaign's decision
    (``group_size`` 1, ``rank_local.group_size`` 4) serves calls on 4 ranks, and a TP group's of 2 tuned as replicas
    on 2 ranks: ``--group-size`` takes the size of the group whose calls each serves, SGLang's format too."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    decision(cache, "(8, 'torch.bfloat16', 2)", 16, 2, "keyed2")
    decision(cache, "(8, 'torch.bfloat16', 4)", 32, 4, "keyed4")
    said = refused(cli("export", out, *VLLM, "--cache-dir", cache))
    assert "--where POS=VALUE picks keys" in said and "--group-size N picks the decisions that serve calls on N " \
        "ranks: here 2 and 4" in said, said
    assert cli("export", out / "2", *VLLM, "--group-size", "2", "--cache-dir", cache).returncode == 0
    assert exported(out / "2") == {"8": 16}

    local, tp = tmp_path / "local", tmp_path / "tp"
    decision(local, "(8, 'torch.bfloat16')", 16, 1, "local4", group="this process alone",
             rank_local={"rank": 0, "group_size": 4, "group": "default"})
    decision(local, "(8, 'torch.bfloat16')", 32, 2, "whole2")
    said = refused(cli("export", out, *VLLM, "--cache-dir", local))
    assert "pick one with --group-size 2 (or 4)" in said, said
    assert cli("export", out / "local", *VLLM, "--group-size", "4", "--cache-dir", local).returncode == 0
    assert exported(out / "local") == {"8": 16}
    decision(tp, "(8, 'torch.bfloat16')", 64, 2, "tp2", replicas=2)
    decision(tp, "(8, 'torch.bfloat16')", 128, 4, "world4")
    sglang = ["--format", "sglang-moe", *VLLM[2:], "--triton-version", "3.4.0", "--cache-dir", tp]
    assert "pick one with --group-size 2 (or 4)" in refused(cli("export", out, *sglang))
    done = cli("export", out / "tp", *sglang, "--group-size", "2")
    assert done.returncode == 0, done.stderr
    assert exported(out / "tp") == {"8": 64}


@pytest.mark.timeout(200)
def test_group_size_names_the_older_files_group_of_one(tmp_path):
    """One key's decisions: a rank-local campaign's on 4 ranks and an older file without ``rank_local`` tuned on one
    rank: the refusal says the older file does not record how many ranks it serves, and that ``--group-size 4`` or
    ``--group-size 1`` picks one."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    on4 = decision(cache, "(8, 'torch.bfloat16')", 16, 1, "on4", group="this process alone",
                   rank_local={"rank": 0, "group_size": 4, "group": "default"})
    older = decision(cache, "(8, 'torch.bfloat16')", 32, 1, "older")
    said = refused(cli("export", out, *VLLM, "--cache-dir", cache))
    assert f"{older.name} does not record on how many" in said, said
    assert (f"pick one with --group-size 4 ({on4.name}) or --group-size 1 ({older.name}: the one rank that tuned it)"
            ", or delete the file not wanted") in said, said
    assert cli("export", out / "1", *VLLM, "--group-size", "1", "--cache-dir", cache).returncode == 0
    assert exported(out / "1") == {"8": 32}


@pytest.mark.timeout(200)
def test_the_moe_formats_options_are_refused_with_a_bundle_not_ignored(tmp_path):
    """``--group-size`` (as ``--where``, ``--gpu`` and the other options of the MoE files) selects nothing for
    ``--format bundle``, which writes every selected decision. Before, ``export b.json --group-size 2`` exported the
    decisions of both sizes, exit status 0, without a word; now it is one line naming the options and the formats
    they are for, and no bundle is written."""
    cache = tmp_path / "cache"
    for size, m in ((2, 16), (4, 32)):
        decision(cache, "(16, 'torch.bfloat16')", m, size, f"world{size}")
    for given, named in ((["--group-size", "2"], "--group-size is for --format vllm-moe or sglang-moe"),
                         (["--gpu", "H200", "--where", "0=16"], "--where, --gpu are for --format vllm-moe or sglang"),
                         (["--vllm-version", "0.11.0"], "--vllm-version is for --format vllm-moe alone")):
        bundle = tmp_path / "b.json"
        said = refused(cli("export", bundle, *given, "--cache-dir", cache))
        assert named in said and "not --format bundle" in said, said
        assert not bundle.exists()
    done = cli("export", tmp_path / "all.json", "--cache-dir", cache)  # (no such option: every decision)
    assert done.returncode == 0 and "exported 2 decision(s)" in done.stdout, done.stderr


@pytest.mark.timeout(200)
def test_a_rank_local_and_a_whole_groups_decision_of_one_size_are_said_apart(tmp_path):
    """One key decided for groups of 4 ranks twice: by a job of 4 ranks tuning together and by a rank-local campaign on
    4 ranks (``list``: ranks ``4`` and ``local``). ``--group-size 4`` keeps both; the refusal said they differ in what
    the files do not record (cache_key_extra, the devices), which they may not: the files record that one was tuned
    rank-locally. Now it says so, naming the rank-local one."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    decision(cache, "(8, 'torch.bfloat16')", 64, 4, "world4")
    local = decision(cache, "(8, 'torch.bfloat16')", 16, 1, "local4", group="this process alone",
                     rank_local={"rank": 0, "group_size": 4, "group": "default"})
    said = refused(cli("export", out, *VLLM, "--group-size", "4", "--cache-dir", cache))
    assert "do not record" not in said, said
    assert (f"both serve calls on 4 ranks; {local.name} was tuned by one rank alone (a rank-local campaign, 'local' "
            "in 'list'), the other by its whole group") in said and "delete the file not wanted" in said, said
