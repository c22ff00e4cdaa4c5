"""The options a user puts before the command (``triton-dist-tune --cache-dir X list``): the same as after it. The
real command line (``python -m triton_dist_tune``) in a process of its own, on a real cache folder."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

from harness import base_env, run_cli

from triton_dist_tune.disk.cache import hardware, versions, write_json_atomic


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    """``python -m triton_dist_tune ARGS`` in a process of its own."""
    return run_cli([str(a) for a in args], base_env(), timeout=120)


def decision(cache: Path, function: str, key: str) -> Path:
    """A format-2 decision as the tuner writes it, named as the tuner names its files (20 hex digits)."""
    hw = hardware()
    data = {"format": 2, "function": function, "key": key, "index": 0, "config": "{v: 1}", "time_ms": 1.0,
            "margin": 0.1, "near_tie": False, "runner_up": 1, "timing": "steady", "rounds": 2, "group_size": 2,
            "group": "default", "created": time.time() - 60, "versions": versions(), "gpu": hw["gpu"],
            "gpu_count": hw["gpu_count"], "space": "abc", "measurements": []}
    name = hashlib.sha1(repr((function, key)).encode()).hexdigest()[:20]
    return write_json_atomic(cache / function / f"{name}.json", data)


def test_cache_dir_and_json_before_the_command_mean_what_they_mean_after_it(tmp_path):
    """Before: ``triton-dist-tune --cache-dir X list`` was argparse's ``invalid choice: 'X'`` (exit 2); only
    ``list --cache-dir X`` worked. Now both spellings list the same folder, ``--json`` too, and given on both sides
    the one after the command wins."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    decision(mine, "gemm", "(4,)")
    decision(other, "moe", "(8,)")
    after = cli("list", "--cache-dir", mine)
    before = cli("--cache-dir", mine, "list")
    assert before.returncode == 0 and "invalid choice" not in before.stderr, before.stderr
    assert before.stdout == after.stdout and "gemm" in before.stdout, (before.stdout, after.stdout)
    both = cli("--cache-dir", other, "list", "--cache-dir", mine)
    assert both.returncode == 0 and both.stdout == after.stdout, (both.stdout, both.stderr)
    as_json = cli("--json", "--cache-dir", mine, "list")
    assert as_json.returncode == 0, as_json.stderr
    listed = json.loads(as_json.stdout)
    assert listed["cache"] == str(mine) and [e["function"] for e in listed["entries"]] == ["gemm"], listed
    shown = cli("--cache-dir", mine, "show", "gemm/")
    assert shown.returncode == 0 and "(4,)" in shown.stdout, shown.stderr
    cleared = cli("--cache-dir", other, "clear", "--all")
    assert cleared.returncode == 0 and not list(other.rglob("*.json")) and list(mine.rglob("*.json")), cleared


def test_an_option_before_a_command_that_does_not_take_it_is_refused_by_name(tmp_path):
    """``logs`` reads no cache folder, and ``campaign --json`` names a file: given before them, each is one line
    naming the option and the command (exit 2), never taken for something else."""
    for args, said in ((["--cache-dir", tmp_path, "logs"], "--cache-dir before the command is not an option of "
                        "'logs'"),
                       (["--json", "campaign", "m:f", "--calls", "m:g", "--keys", "1"],
                        "'campaign --json' means another thing: give it after the command")):
        done = cli(*args)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
