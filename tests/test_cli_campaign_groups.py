"""The ``campaign`` command's ``--group-size``: a builder that takes a ``group`` keyword is given the group the
command made for this rank, so the function's collectives run on its tensor-parallel group (real gloo ranks).

Before, the builder was called with the key alone: a function collective over groups smaller than the job had no
way to name its group (the command makes the groups itself), and a builder asking for it stopped the campaign.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import describe, run_ranks, tuner_env

#: a rank's ``python -m triton_dist_tune`` (the harness runs scripts, not modules)
RUNNER = "from triton_dist_tune.cli.commands import run\nrun()\n"

#: a function collective over its ``group`` (an all_reduce of ones: the group's size) and a builder that takes the
#: group
MODULE = '''
import os
import torch
import torch.distributed as dist
import triton_dist_tune as tdt


@tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x, group: x.shape[0], n_warmup=0, n_repeat=1,
              timing="cold")
def tp(x, group, *, v):
    y = x.clone()
    dist.all_reduce(y, group=group)
    with open(os.environ["SEEN"] + os.environ["RANK"], "a") as seen:
        seen.write(f"{x.shape[0]} {dist.get_world_size(group)} {y[0].item():.0f}\\n")
    return y + v


def build(n, group):
    return {"x": torch.ones(n), "group": group}
'''


def campaign(tmp_path: Path, world: int, calls: str, *options: str) -> tuple[list, dict[int, list[str]]]:
    """``campaign camp.py:tp --calls camp.py:CALLS --keys 8 16 OPTIONS`` on ``world`` CPU ranks: each rank's result
    and, per rank, the lines its calls wrote (key, the group's size, the all_reduce's value)."""
    module, runner = tmp_path / "camp.py", tmp_path / "runner.py"
    module.write_text(MODULE)
    runner.write_text(RUNNER)
    env = {**tuner_env(tmp_path, 20), "SEEN": str(tmp_path / "seen")}
    ranks = run_ranks(runner, world, ["campaign", f"{module}:tp", "--calls", f"{module}:{calls}", "--keys", "8", "16",
                                      "--json", str(tmp_path / "summary.json"), *options], env=env, timeout=170)
    seen = {r: sorted(set((tmp_path / f"seen{r}").read_text().split("\n")) - {""})
            for r in range(world) if (tmp_path / f"seen{r}").exists()}
    return ranks, seen


@pytest.mark.timeout(200)
def test_a_builder_taking_group_gets_the_rank_s_group_of_group_size(tmp_path):
    """4 ranks, ``--group-size 2``: two groups of 2, one key each. Every call ran its all_reduce on a group of 2
    (the sum of ones is 2, not the job's 4), and both keys were decided."""
    ranks, seen = campaign(tmp_path, 4, "build", "--group-size", "2")
    assert [r.returncode for r in ranks] == [0, 0, 0, 0], describe(ranks)
    rows = json.loads((tmp_path / "summary.json").read_text())["keys"]
    assert sorted((row["key"], row["state"]) for row in rows) == [("16", "tuned"), ("8", "tuned")], rows
    # ranks 0 and 1 (group 0) tuned one key, ranks 2 and 3 (group 1) the other; each call saw a group of 2
    assert seen[0] == seen[1] and seen[2] == seen[3] and seen[0] != seen[2], seen
    assert {line.split(" ", 1)[1] for lines in seen.values() for line in lines} == {"2 2"}, seen


@pytest.mark.timeout(200)
def test_without_group_size_a_builder_taking_group_gets_the_default_group(tmp_path):
    """2 ranks, no ``--group-size``: the builder is given the default group (both ranks tune both keys on it)."""
    ranks, seen = campaign(tmp_path, 2, "build")
    assert [r.returncode for r in ranks] == [0, 0], describe(ranks)
    assert seen[0] == seen[1] == ["16 2 2", "8 2 2"], seen
