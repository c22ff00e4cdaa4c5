"""The ``campaign`` command's ending on an error of the library's own, on real CPU ranks (gloo), each rank's stderr
read apart: one line, never a Python traceback per rank.

An error the campaign raises on every rank alike (keys that differ between ranks, a call one rank cannot build) is
said by rank 0 alone, which exits 1; the other ranks print nothing and exit 0 (as for failed keys: no rank makes
torchrun end rank 0 before it has spoken). An error of one rank's own (a unit lost, a rank whose config failed while
the others were inside a collective) is one line on each rank that raised it, exit status 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import describe, run_ranks, tuner_env

#: a rank's ``python -m triton_dist_tune`` (the harness runs scripts, not modules)
RUNNER = "from triton_dist_tune.cli.commands import run\nrun()\n"

#: functions whose campaign stops: keys that differ between the ranks, a call rank 1 cannot build, a unit that dies,
#: and a collective function whose config 0 raises on rank 1 while rank 0 is inside its all_reduce
MODULE = '''
import os
import torch
import torch.distributed as dist
import triton_dist_tune as tdt


@tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=0, n_repeat=1, timing="cold")
def fn(x, *, v):
    return x + v


def differ(n):
    return torch.ones(n + int(os.environ["RANK"]))


def unbuildable(n):
    if os.environ["RANK"] == "1":
        raise RuntimeError("no memory for the call on this rank")
    return torch.ones(n)


def build(n):
    return torch.ones(n)


@tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=0, n_repeat=1, timing="cold")
def dies(x, *, v):
    if os.environ["RANK"] == "1":
        os._exit(5)
    return x + v


@tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=0, n_repeat=1, timing="cold")
def coll(x, *, v):
    if v == 0 and dist.get_rank() == 1:
        raise RuntimeError("config 0 breaks on rank 1")
    dist.all_reduce(x)
    return x
'''


def campaign_ranks(tmp_path: Path, function: str, calls: str, *options: str, timeout: float = 20) -> list:
    """``triton-dist-tune campaign camp.py:FUNCTION --calls camp.py:CALLS --keys 8 16 OPTIONS`` on 2 CPU ranks (own
    cache and logs under ``tmp_path``; ``timeout``: the tuner's); each rank's result."""
    module, runner = tmp_path / "camp.py", tmp_path / "runner.py"
    module.write_text(MODULE)
    runner.write_text(RUNNER)
    return run_ranks(runner, 2, ["campaign", f"{module}:{function}", "--calls", f"{module}:{calls}", "--keys", "8",
                                 "16", *options], env=tuner_env(tmp_path, timeout), timeout=150)


def said(stderr: str) -> list[str]:
    """The lines of a rank's stderr other than torch's own C++ warnings (``[rank1]:[W... socket.cpp...]``, printed
    by its store client when the process hosting the store has ended, and the stack lines that follow them)."""
    lines, skipping = [], False
    for line in stderr.splitlines():
        if line.startswith("[rank") and ":[W" in line[:12]:
            skipping = True
        elif line.startswith("triton-dist-tune:") or line.startswith("[rank") or line.startswith("Traceback"):
            skipping = False
        if not skipping and line.strip():
            lines.append(line)
    return lines


@pytest.mark.timeout(200)
@pytest.mark.parametrize("calls, error", [
    ("differ", "the ranks' keys differ: ranks [0]: key entry 0 of 2 (the first that differs): 8; ranks [1]: key "
               "entry 0 of 2 (the first that differs): 9"),
    ("unbuildable", "rank 1: building call 0 or its key raised RuntimeError: no memory for the call on this rank"),
])
def test_an_error_every_rank_raises_is_one_line_on_rank_0_alone(tmp_path, calls, error):
    """Before, every rank printed ``triton-dist-tune: bad value: campaign fn: ...`` (BadInputError is a ValueError,
    taken for a bad command-line value) and exited 2: under torchrun the first rank to exit had the agent end the
    others. Now rank 0 says it once, as the campaign's error, and exits 1; rank 1, which raised the same error,
    prints nothing and exits 0."""
    ranks = campaign_ranks(tmp_path, "fn", calls, "--rank-local")
    assert [r.returncode for r in ranks] == [1, 0], describe(ranks)
    assert said(ranks[0].stderr) == [f"triton-dist-tune: campaign fn stopped: BadInputError: {error} (every rank "
                                     "stopped here: fix it and run the campaign again)"], describe(ranks)
    assert said(ranks[1].stderr) == [], describe(ranks)


@pytest.mark.timeout(200)
def test_a_lost_unit_is_one_line_on_the_rank_that_waited_for_it(tmp_path):
    """Rank 1's process ends inside its key's tuning (a rank-local campaign): rank 0, waiting for it at the round's
    exchange, raised GroupTimeoutError out of the command, a Python traceback (28 lines). Now it is one line naming the
    lost unit and what to do, exit status 1."""
    ranks = campaign_ranks(tmp_path, "dies", "build", "--rank-local", timeout=6)
    assert [r.returncode for r in ranks] == [1, 5], describe(ranks)
    lines = said(ranks[0].stderr)
    assert len(lines) == 1 and lines[0].startswith("triton-dist-tune: campaign dies stopped on rank 0: "
                                                   "GroupTimeoutError: rank 0 of group 'default' waited "), lines
    assert "unit(s) [1] (global ranks [1]) showed no sign of life" in lines[0], lines
    assert lines[0].endswith("Rerun the campaign: the keys decided so far are in the cache"), lines


@pytest.mark.timeout(200)
def test_a_rank_failed_error_is_one_line_on_the_rank_that_raised_it(tmp_path):
    """A collective function (``--group-size 2``) whose config 0 raises on rank 1 while rank 0 is inside its
    all_reduce: rank 0 ends itself (exit status 87, its own line), and rank 1 raised RankFailedError out of the
    command, a traceback with two chained causes. Now rank 1 says it in one line, with what to do, exit status 1."""
    ranks = campaign_ranks(tmp_path, "coll", "build", "--group-size", "2")
    assert [r.returncode for r in ranks] == [87, 1], describe(ranks)
    assert not any("Traceback" in r.stderr for r in ranks), describe(ranks)
    lines = said(ranks[1].stderr)
    assert len(lines) == 1, describe(ranks)
    assert lines[0].startswith("triton-dist-tune: campaign coll stopped on rank 1: RankFailedError: rank 1 failed "
                               "in config 0 ({v: 0}): RuntimeError: config 0 breaks on rank 1"), lines
    assert lines[0].endswith("(rerun the campaign: the keys decided so far are in the cache)"), lines


#: the runner of a job one of whose ranks reads rank 0's word on who joined late (``READ_LATE`` s): rank 0, which
#: ends next, must not end its store before that rank has read it
LATE_READER = """import os, time
from triton_dist_tune.group import epoch
real = epoch._joined
def late(*args, **kwargs):
    time.sleep(float(os.environ.get("READ_LATE", "0")))
    return real(*args, **kwargs)
epoch._joined = late
from triton_dist_tune.cli.commands import run
run()
"""

#: the ranks started of a job whose other ranks never start: (started ranks' rank variables, the world size, what
#: each started rank's line says is missing)
NEVER_JOINED = {
    "rank 0 alone of 2": ([0], 2, {0: "waited 3 s for ranks [1] of the job's 2 to join"}),
    "rank 1 alone of 2": ([1], 2, {1: "could not reach the job's key-value store 127.0.0.1:{port}"}),
    "ranks 0 and 1 of 3": ([0, 1], 3, {0: "waited 3 s for ranks [2] of the job's 3 to join",
                                       1: "rank 0 waited 3 s for ranks [2] of the job's 3 to join"}),
}


@pytest.mark.timeout(200)
@pytest.mark.parametrize("case", list(NEVER_JOINED))
def test_a_rank_that_never_joins_ends_the_ranks_that_did_in_one_line_each_within_the_init_timeout(tmp_path, case):
    """Ranks whose job has a rank that never starts (``TRITON_DIST_AUTOTUNE_INIT_TIMEOUT=3``): every started rank
    ends within the bound, with one line naming the store's address and the ranks missing, exit status 1. Before,
    ``init_distributed`` waited its 600 s whatever the environment said (no variable set it; the command has no
    option for it), then the command ended in a Python traceback (rank 0: ``GroupTimeoutError``; a rank other than
    0 that found no store: torch's ``DistNetworkError`` after two connect tries and about 40 lines of torch's C++
    warnings; a rank that joined while another never did: torch's own timeout in ``init_process_group``). A rank
    other than 0 that joined reads rank 0's word 4 s late, after rank 0 has written it: before rank 0 waited for its
    read (at most 5 s), it met the store ended (16 lines of torch's C++ warnings; seen once under load with no
    delay)."""
    from harness import free_port

    started, world, says = NEVER_JOINED[case]
    port = free_port()
    module, runner = tmp_path / "camp.py", tmp_path / "runner.py"
    module.write_text(MODULE)
    runner.write_text(LATE_READER)
    per_rank = {i: {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_PORT": str(port),
                    "READ_LATE": "4" if rank else "0"} for i, rank in enumerate(started)}
    ranks = run_ranks(runner, len(started), ["campaign", f"{module}:fn", "--calls", f"{module}:build", "--keys", "8",
                                             "--rank-local"],
                      env=tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT="3"), timeout=60,
                      per_rank_env=per_rank)
    assert [r.returncode for r in ranks] == [1] * len(started), describe(ranks)
    assert not any("Traceback" in r.stderr for r in ranks), describe(ranks)
    for result, rank in zip(ranks, started, strict=True):
        lines = said(result.stderr)
        assert len(lines) == 1, describe(ranks)
        assert lines[0].startswith(f"triton-dist-tune: campaign fn could not start on rank {rank}: GroupTimeoutError: "
                                   f"init_distributed: "), lines
        assert says[rank].format(port=port) in lines[0] and f"127.0.0.1:{port}" in lines[0], lines
        assert lines[0].endswith("(set TRITON_DIST_AUTOTUNE_INIT_TIMEOUT to wait longer)"), lines


@pytest.mark.timeout(200)
def test_a_campaign_that_started_the_jobs_group_destroys_it_before_the_command_returns(tmp_path):
    """The command starts the job's group itself (``init_distributed``): it destroys it too, once the campaign has
    ended alike on every rank. A process that exits with a gloo group alive can end in ``terminate called without an
    active exception`` (SIGABRT, torch's gloo threads at the interpreter's end: pytorch/pytorch#190489; seen once in
    80 jobs of ``benchmarks/chaos.py``). Before, the group was still initialized after ``main()`` returned."""
    module, runner = tmp_path / "camp.py", tmp_path / "runner.py"
    module.write_text(MODULE)
    runner.write_text("import torch.distributed as dist\nfrom triton_dist_tune.cli.commands import main\n"
                      "rc = main()\nprint('GROUP_ALIVE', dist.is_initialized(), flush=True)\nraise SystemExit(rc)\n")
    ranks = run_ranks(runner, 2, ["campaign", f"{module}:fn", "--calls", f"{module}:build", "--keys", "8", "16"],
                      env=tuner_env(tmp_path, 20), timeout=150)
    assert [r.returncode for r in ranks] == [0, 0], describe(ranks)
    for r in ranks:
        assert "GROUP_ALIVE False" in r.stdout, describe(ranks)
