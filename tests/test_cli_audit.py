"""Frictions a new user's audit of the command line found, each with the real command that shows it fixed.

Cache folders are written here as the package's own writers write them (``write_json_atomic``, the records'
``to_json``); every command runs as ``python -m triton_dist_tune ...`` in a process of its own (tests/cli_fork.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from cli_fork import run_cli
from harness import base_env

from triton_dist_tune.disk.cache import versions, write_json_atomic
from triton_dist_tune.records import Outcome


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    """``python -m triton_dist_tune ARGS`` in a process of its own."""
    return run_cli([str(a) for a in args], base_env(), timeout=120)


def decision(cache: Path, function: str, key: str = "(64,)", kernel: str | None = None, **extra: object) -> Path:
    """A format-2 decision of ``function`` (a ``contextual_autotune`` one under ``contextual/`` when ``kernel`` is
    given), with two measured configs, as the tuner writes it."""
    outcomes = [Outcome(0, "{BLOCK: 64}", "measured", time=1.3, spread=0.02, per_rank=[1.3, 1.2], samples=5),
                Outcome(1, "{BLOCK: 128}", "measured", time=1.0, spread=0.01, per_rank=[1.0, 0.9], samples=5)]
    data = {"format": 2, "function": function, "key": key, "index": 1, "config": "{BLOCK: 128}", "time_ms": 1.0,
            "margin": 0.3, "near_tie": False, "runner_up": 0, "timing": "steady", "rounds": 5, "group_size": 2,
            "group": "default", "created": time.time() - 60, "versions": versions(), "gpu": "cpu", "gpu_count": 0,
            "space": "abc", "measurements": [o.to_json() for o in outcomes], **extra}
    if kernel is not None:
        data["kernel"] = kernel
    folder = "contextual" if kernel is not None else function
    name = hashlib.sha1(repr((function, key, kernel)).encode()).hexdigest()[:20]
    return write_json_atomic(cache / folder / f"{name}.json", data)


# -- list --function of a name that matches nothing ------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_list_of_an_unknown_function_names_the_functions_as_clear_does(tmp_path):
    """``list --function drift`` (a prefix of ``drifting``) printed 'no decisions in ... matching the filters' with
    exit status 0, as if the function had been tuned and its decisions removed; ``clear --function`` of such a name
    says there is no such function and names the functions ``list`` shows, with exit status 2. Now ``list`` (and
    ``export``) say the same, through one check."""
    cache = tmp_path / "cache"
    decision(cache, "drifting")
    decision(cache, "layer", kernel="__main__.gemm_kernel")
    for command in (["list"], ["list", "--json"], ["clear", "--dry-run"], ["export", tmp_path / "b.json"]):
        unknown = cli(*command, "--function", "drift", "--cache-dir", cache)
        assert unknown.returncode == 2 and unknown.stdout == "", (command, unknown.stdout, unknown.stderr)
        assert f"no function 'drift' in {cache} (functions: drifting, layer:gemm_kernel)" in unknown.stderr, \
            (command, unknown.stderr)
    known = cli("list", "--function", "drifting", "--cache-dir", cache)
    assert known.returncode == 0 and "1 decision(s)" in known.stdout, known.stdout + known.stderr
    filtered = cli("list", "--function", "drifting", "--stale", "--cache-dir", cache)  # known, none stale: no error
    assert filtered.returncode == 0 and "matching the filters" in filtered.stdout, filtered.stdout + filtered.stderr
    # a contextual function has no folder of its own: 'clear --function layer --stale' with nothing stale said
    # 'no function' too (the check looked at the decisions the filters kept)
    none_stale = cli("clear", "--function", "layer", "--stale", "--dry-run", "--cache-dir", cache)
    assert none_stale.returncode == 0 and "would remove 0 cache file(s)" in none_stale.stdout, none_stale.stderr


# -- import of a bundle twice ----------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_importing_a_bundle_again_says_what_it_wrote_and_leaves_identical_decisions_alone(tmp_path):
    """Importing one bundle twice said 'imported 2 decision(s)' both times, and rewrote both files (their times
    too, which say which decision a job last wrote). Now an import counts the decisions it wrote new, those it wrote
    over the one there, and those already there, identical, which it leaves as they were; ``--json`` keeps
    ``imported`` (every decision of the bundle, now in the cache) and adds the three lists."""
    here, there = tmp_path / "here", tmp_path / "there"
    decision(here, "drifting")
    decision(here, "layer", kernel="__main__.gemm_kernel")
    bundle = tmp_path / "bundle.json"
    assert cli("export", bundle, "--cache-dir", here).returncode == 0
    first = cli("import", bundle, "--cache-dir", there)
    assert first.returncode == 0, first.stderr
    assert f"imported 2 decision(s) into {there} (2 new; 0 replacing the decision that was there)" in first.stdout, \
        first.stdout
    files = sorted(there.glob("*/*.json"))
    for path in files:
        os.utime(path, (1_000_000, 1_000_000))
    again = cli("import", bundle, "--cache-dir", there)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (f"nothing imported into {there}: the bundle's 2 decision(s) are there already, "
                                    "identical (left as they were)"), again.stdout
    assert [p.stat().st_mtime for p in files] == [1_000_000, 1_000_000]  # not rewritten
    retuned = files[0]
    data = json.loads(retuned.read_text())
    retuned.write_text(json.dumps({**data, "created": data["created"] - 3600}))  # the same choice, tuned earlier
    third = cli("import", bundle, "--json", "--cache-dir", there)
    assert third.returncode == 0, third.stderr
    said = json.loads(third.stdout)
    assert sorted(said["imported"]) == [str(p) for p in files] and said["mismatched"] == []
    assert said["new"] == [] and said["replaced"] == [str(retuned)] and said["unchanged"] == [str(files[1])], said
    assert json.loads(retuned.read_text()) == data and files[1].stat().st_mtime == 1_000_000
    text = cli("import", bundle, "--cache-dir", there)
    assert "nothing imported" in text.stdout and "2 decision(s) are there already" in text.stdout, text.stdout
