"""The command line on ``contextual_autotune``'s decisions, which every contextual function shares one folder for
(``<root>/contextual/``): what ``--function`` selects, and what ``clear --function`` removes, is that function's
decisions only. Real decisions of two contextual functions tuned in one process (Triton's interpreter)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness import run_cli, tune_alone

TWO_FUNCTIONS = '''
import torch, triton, triton.language as tl
import triton_dist_tune as tdt

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def double(x, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def add_one(x, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + o, tl.load(x + o, mask=o < n) + 1, mask=o < n)

@tdt.contextual_autotune(n_repeat=1, n_warmup=1)
def layer(x):
    double[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, x.numel())
    return x

@tdt.contextual_autotune(n_repeat=1, n_warmup=1)
def mlp(x):
    add_one[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, x.numel())
    return x

layer(torch.ones(100))
mlp(torch.ones(100))
'''


@pytest.fixture
def two_functions(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A cache folder holding one decision of ``layer`` and one of ``mlp``, and the environment to read it."""
    cache, env = tune_alone(tmp_path, TWO_FUNCTIONS, timeout=100)
    assert len(list((cache / "contextual").glob("*.json"))) == 2
    return cache, env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_cli(list(args), env, timeout=120)


@pytest.mark.timeout(150)
def test_clear_function_of_a_contextual_function_leaves_the_others_decisions(two_functions):
    """Before: ``clear --function layer`` removed every file of ``contextual/``, ``mlp``'s decision too."""
    cache, env = two_functions
    cleared = cli(env, "clear", "--function", "layer", "--cache-dir", str(cache))
    assert cleared.returncode == 0 and "removed 1 cache file(s)" in cleared.stdout, cleared.stdout + cleared.stderr
    left = cli(env, "list", "--cache-dir", str(cache))
    assert "mlp:add_one" in left.stdout and "layer:" not in left.stdout, left.stdout


@pytest.mark.timeout(150)
def test_the_heading_list_shows_a_contextual_decision_under_selects_it(two_functions):
    """``list`` groups a contextual decision under ``layer:double@<digest>``. Before: ``list --function`` that
    heading listed nothing, ``show <heading>/<name>`` found no decision, and ``clear --function`` of a name it does
    not know offered ``contextual`` (the shared folder: every contextual function's decisions) as a function."""
    cache, env = two_functions
    listed = cli(env, "list", "--cache-dir", str(cache)).stdout
    heading = next(line for line in listed.splitlines() if line.startswith("layer:double@"))
    name = next(line.split()[0] for line in listed.splitlines()[listed.splitlines().index(heading) + 1:])
    assert any(p.stem.startswith(name) for p in (cache / "contextual").glob("*.json"))
    one = cli(env, "list", "--function", heading, "--cache-dir", str(cache))
    assert one.returncode == 0 and heading in one.stdout and "mlp:" not in one.stdout, one.stdout
    for given in (f"{heading}/{name}", f"layer/{name}"):
        shown = cli(env, "show", given, "--cache-dir", str(cache))
        assert shown.returncode == 0 and "kernel __main__.double@" in shown.stdout, (given, shown.stderr)
    unknown = cli(env, "clear", "--function", "nope", "--cache-dir", str(cache))
    assert unknown.returncode == 2 and "contextual" not in unknown.stderr, unknown.stderr
    assert heading in unknown.stderr and "mlp:add_one@" in unknown.stderr, unknown.stderr


@pytest.mark.timeout(150)
def test_show_labels_a_contextual_decisions_rank_times_only_where_some_ranks_alone_met_its_key(two_functions):
    """operations.md: ``show`` prints each rank's time, with ``r1:`` where some ranks alone met a contextual key.
    Before, every contextual decision's times were labelled (``r0:0.0123``: its file names the ranks that met the
    key, here all of them), unlike ``autotune``'s; ranks that alone met a key keep their labels
    (``test_damaged_files.py::test_show_names_the_ranks_of_a_decision_some_ranks_measured``)."""
    cache, env = two_functions
    shown = cli(env, "show", "layer/", "--cache-dir", str(cache))
    assert shown.returncode == 0, shown.stderr
    rows = [line for line in shown.stdout.splitlines() if "Config(" in line]
    assert rows and all(" r0:" not in row for row in rows), shown.stdout


@pytest.mark.timeout(150)
def test_show_counts_a_contextual_decisions_samples_per_config(two_functions):
    """``show``'s samples column holds how many timed samples each config took, for contextual decisions as for
    ``autotune``'s (before: ``-`` in every row of a contextual decision: its file did not record them). Here
    ``n_repeat=1``: one round, one sample per config."""
    cache, env = two_functions
    shown = cli(env, "show", "layer/", "--cache-dir", str(cache))
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines() if line.rstrip().endswith("num_warps: 4})")
            and "measured" in line]
    assert len(rows) == 2 and all(row[row.index("measured") - 1] == "1" for row in rows), shown.stdout
