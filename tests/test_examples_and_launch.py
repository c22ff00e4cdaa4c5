"""The examples and launch.sh as a user runs them: a MoE campaign with a batch size that fails, keys served by the
undecided policy, an example run again (its key served from the cache, said), launch.sh through a symbolic link, a
script's help under launch.sh, a wrong argument said once, a stray MASTER_ADDR.

Every test starts real processes (launch.sh with torchrun or its one-rank form, or the example's ranks forked by the
harness) on CPU ranks with Triton's interpreter, each with its own home, cache and log folders under tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from harness import ROOT, describe, parse_results, run_command, run_ranks, tuner_env

LAUNCH = ROOT / "launch.sh"
#: what a launcher or an earlier job may leave in the environment: none of it is this test's
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
                  "MASTER_PORT", "NNODES", "NODE_RANK", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID")


def user_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user's environment: a fresh home folder, the tuner's cache and logs under ``tmp_path``, no rank variables,
    CPU ranks with Triton's interpreter; ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES and not k.startswith("PYTEST")}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(tuner_env(tmp_path), HOME=str(home), TRITON_INTERPRET="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


# -- examples/moe_gemm.py: a campaign in which one batch size fails ---------------------------------------------------

FAILING_AT_8 = f'''
import sys
sys.path.insert(0, {str(ROOT)!r})
import examples.moe_gemm as mg

real = mg.moe_gemm


def flaky(a, w, routing, out, config, kernel):
    if a.shape[0] == 8:
        raise RuntimeError("simulated: no config runs at M=8")
    return real(a, w, routing, out, config, kernel)


mg.moe_gemm = flaky
sys.exit(mg.main(sys.argv[1:]))
'''


@pytest.mark.timeout(120)
def test_moe_campaign_with_a_failed_batch_size_still_writes_the_vllm_file_then_exits_1(tmp_path: Path) -> None:
    """``moe_gemm.py --tiny --campaign --export-vllm DIR`` where every config fails at M = 8 (of 3, 8, 20). Before,
    the reference checks called the tuned function at M = 8, which tuned it again and raised AllConfigsFailedError:
    every rank died before the vLLM file was written. Now the file is written with the two batch sizes decided, none
    for 8 (as the example's docstring says), and rank 0 ends with exit status 1, naming the batch size; the other rank
    ends with 0 (before, both ended with 1, and under torchrun the first to end had its agent end the other, rank 0
    maybe before it printed its report)."""
    script = tmp_path / "moe_failing_at_8.py"
    script.write_text(FAILING_AT_8)
    out = tmp_path / "vllm"
    ranks = run_ranks(script, 2, ["--tiny", "--campaign", "--export-vllm", str(out)], env=tuner_env(tmp_path),
                      timeout=100)
    output = describe(ranks)
    assert [r.returncode for r in ranks] == [1, 0], output[-6000:]
    assert "AllConfigsFailedError" not in output, output[-6000:]
    result = parse_results(ranks[0].stdout)[-1]
    assert result["failed"] == 1 and result["failed_batches"] == [8], result
    assert sorted(result["choices"]) == ["20", "3"] and max(result["errors"]) <= 1e-4, result
    files = list(out.iterdir())
    assert len(files) == 1 and files[0].name.startswith("E=4,N=12,") and result["vllm_file"] == str(files[0]), files
    assert sorted(int(k) for k in json.loads(files[0].read_text())) == [3, 20]
    assert "the tuning failed at batch size(s) 8" in ranks[0].stderr and "not in the vLLM file" in ranks[0].stderr, \
        ranks[0].stderr[-3000:]
    assert "moe_gemm keys: 2 tuned, 0 served from the cache, 1 failed\n" in ranks[0].stdout, output[-6000:]


@pytest.mark.timeout(120)
def test_moe_campaign_whose_every_batch_size_fails_says_so_not_that_a_policy_served_them(tmp_path: Path) -> None:
    """``moe_gemm.py --tiny --campaign --batches 8`` where every config fails at M = 8: rank 0's line about the keys
    counts the failure. Before: ``moe_gemm keys: 0 tuned, 0 served from the cache (none decided: served without tuning
    by TRITON_DIST_AUTOTUNE_UNDECIDED's policy)``, no policy being set, and the key never served."""
    script = tmp_path / "moe_failing_at_8.py"
    script.write_text(FAILING_AT_8)
    ranks = run_ranks(script, 2, ["--tiny", "--campaign", "--batches", "8"], env=tuner_env(tmp_path), timeout=100)
    output = describe(ranks)
    assert [r.returncode for r in ranks] == [1, 0], output[-6000:]
    said = [line for line in ranks[0].stdout.splitlines() if line.startswith("moe_gemm keys: ")]
    assert said == ["moe_gemm keys: 0 tuned, 0 served from the cache, 1 failed"], output[-6000:]


# -- the examples with TRITON_DIST_AUTOTUNE_UNDECIDED set: a served key is not decided ---------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("example", "args", "policy"), [("quickstart.py", [], "first"),
                                                         ("moe_gemm.py", ["--tiny"], "nearest")])
def test_examples_report_a_config_served_by_the_undecided_policy(tmp_path: Path, example, args, policy) -> None:
    """``TRITON_DIST_AUTOTUNE_UNDECIDED=first bash launch.sh --nproc 1 examples/quickstart.py`` (and the MoE
    example's single call under ``nearest``): the variable wins over the decorator, so the key is served a config
    without tuning and is not in ``tuner.decided``. Before, the examples read ``tuner.decided[key]``: KeyError. Now
    they run, and say that what ran was served, not decided."""
    env = user_env(tmp_path, TRITON_DIST_AUTOTUNE_UNDECIDED=policy)
    done = run_command(["bash", LAUNCH, "--cpu", "--nproc", "1", ROOT / "examples" / example, *args], tmp_path, env,
                       timeout=80)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "KeyError" not in done.stderr
    said = f"served without tuning (the key is not decided: TRITON_DIST_AUTOTUNE_UNDECIDED={policy})"
    assert said in done.stdout, done.stdout[-3000:]
    if example == "moe_gemm.py":
        result = parse_results(done.stdout)[-1]
        assert said in result["choices"]["20"] and result["max_error"] <= 1e-4, result
        assert "moe_gemm keys: 0 tuned, 0 served from the cache (none decided: served without tuning" in done.stdout
    else:
        assert "rank 0/1: ran a config served without tuning" in done.stdout, done.stdout[-3000:]


# -- an example run again: its key served from the cache, and rank 0 says so -------------------------------------------


@pytest.mark.timeout(300)
def test_tp_mlp_four_ranks_two_groups_tuned_as_one_said_after_every_ranks_line(tmp_path: Path) -> None:
    """``bash launch.sh --cpu --nproc 4 examples/tp_mlp.py``: two TP groups of 2, replicas of each other, tuned as one
    (``autotune_replicas=``): every rank runs the same configs, and the tuner never warns that the groups chose
    differently for one shared cache entry. Tuned as one, each function's key has two races on every rank
    (docs/scale.md: the replicas share the first pass, then the leaders race again on every replica); two TP groups
    tuning apart have one each. The ranks share the terminal, each writing its own line; rank 0's line saying how
    the keys were decided comes after all four. Before, rank 0 printed it right after its own line, and the other
    ranks' lines came after it (seen in 2 runs of 2 on 4 ranks, 1 of 2 on 3)."""
    # (T 60 s: four ranks on two cores beside the suite's other workers; a healthy run never waits it)
    done = run_command(["bash", LAUNCH, "--cpu", "--nproc", "4", ROOT / "examples" / "tp_mlp.py"], tmp_path,
                       user_env(tmp_path, TRITON_DIST_AUTOTUNE_TIMEOUT="60"), timeout=250)
    output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, output
    lines = [line for line in done.stdout.splitlines() if line.startswith("tp_mlp ")]
    ranks = [line for line in lines if line.startswith("tp_mlp rank ")]
    assert len(lines) == 5 and len(ranks) == 4 and all(": OK " in line for line in ranks), lines
    assert {line.split(" group ")[1][0] for line in ranks} == {"0", "1"}  # two TP groups
    assert all("'algo'" in line for line in ranks)  # each rank reports the configs it runs
    assert len({line.split("; ", 1)[1] for line in ranks}) == 1, "\n".join(ranks)  # one choice everywhere
    assert lines[-1] == ("tp_mlp keys: ag_gemm 1 tuned, 0 served from the cache; gemm_rs 1 tuned, 0 served from the "
                         "cache"), lines
    assert "share one cache entry" not in done.stdout + done.stderr, output
    cache, log_dir = tmp_path / "cache", tmp_path / "logs"
    assert sorted(p.parent.name for p in cache.rglob("*.json")) == ["ag_gemm", "gemm_rs"]
    for rank in range(4):
        messages = [json.loads(line)["message"] for line in (log_dir / f"rank-{rank}.jsonl").read_text().splitlines()]
        for name in ("ag_gemm", "gemm_rs"):
            races = [m for m in messages if m.startswith(f"[{name} key=") and "] race: " in m]
            assert len(races) == 2, (rank, name, races)


# -- launch.sh --------------------------------------------------------------------------------------------------------

SHOW_ENV = '''
import os, sys
os.write(1, (" ".join(["RANK", os.environ["RANK"], "WORLD_SIZE", os.environ["WORLD_SIZE"], "MASTER_ADDR",
                        os.environ["MASTER_ADDR"], "PYTHONPATH", os.environ["PYTHONPATH"].split(os.pathsep)[0],
                        "ARGS", " ".join(sys.argv[1:])]) + "\\n").encode())  # one write: ranks' lines never mix
'''

ALL_REDUCE = '''
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
# one write of the whole line (print writes the text and its end apart, unbuffered: two ranks' lines interleaved)
os.write(1, f"RANK {dist.get_rank()} OF {dist.get_world_size()} SUM {t.item():.0f} MASTER_ADDR "
            f"{os.environ['MASTER_ADDR']}\\n".encode())
dist.destroy_process_group()
'''

#: a readlink without -f (as on older macOS): -f fails, anything else is the real one's
READLINK_WITHOUT_F = '''#!/usr/bin/env bash
for arg in "$@"; do [[ "$arg" == -f ]] && { echo "readlink: illegal option -- f" >&2; exit 1; }; done
exec {real} "$@"
'''


@pytest.mark.timeout(60)
@pytest.mark.parametrize("readlink", ["readlink -f", "no readlink -f"])
def test_launch_sh_run_through_a_symbolic_link_finds_its_checkout(tmp_path: Path, readlink: str) -> None:
    """``~/bin/launch.sh -> checkout/launch.sh`` (a link to a link, the inner one relative), run from another folder.
    Before, launch.sh looked for ``scripts/ensure_env.sh`` beside the link: exit status 127. Now it resolves the link
    (``readlink -f``, or, where readlink has no -f, link by link) and runs the ranks from the checkout."""
    links = tmp_path / "links"
    links.mkdir()
    (links / "inner.sh").symlink_to(os.path.relpath(LAUNCH, links))
    outer = tmp_path / "bin" / "launch.sh"
    outer.parent.mkdir()
    outer.symlink_to(links / "inner.sh")
    script = tmp_path / "show_env.py"
    script.write_text(SHOW_ENV)
    env = user_env(tmp_path)
    if readlink == "no readlink -f":
        shadow = tmp_path / "shadow"
        shadow.mkdir()
        real = subprocess.run(["bash", "-c", "command -v readlink"], capture_output=True, text=True).stdout.strip()
        (shadow / "readlink").write_text(READLINK_WITHOUT_F.replace("{real}", real))
        (shadow / "readlink").chmod(0o755)
        env["PATH"] = f"{shadow}{os.pathsep}{env['PATH']}"
    done = run_command(["bash", outer, "--cpu", "--nproc", "1", script, "a b"], tmp_path, env, timeout=50)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"RANK 0 WORLD_SIZE 1 MASTER_ADDR 127.0.0.1 PYTHONPATH {ROOT} ARGS a b" in done.stdout, done.stdout


@pytest.mark.timeout(90)
@pytest.mark.parametrize("target", [["-m", "triton_dist_tune", "campaign", "--help"],
                                    ["examples/moe_gemm.py", "-h"]])
def test_launch_sh_prints_a_scripts_help_once(tmp_path: Path, target: list[str]) -> None:
    """``bash launch.sh -m triton_dist_tune campaign --help`` on 2 CPU ranks printed the help three times (the
    campaign's check before torchrun, then each rank) and a script's ``-h`` once per rank. Now arguments that ask
    for help run the script or module once, as one process: the help once, exit status 0."""
    done = run_command(["bash", LAUNCH, "--cpu", "--nproc", "2", *target], ROOT, user_env(tmp_path), timeout=80)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = done.stdout + done.stderr
    assert text.count("usage:") == 1, text[-6000:]


#: a user's script that opts in to launch.sh's check (``LAUNCH_CHECKS_ARGUMENTS = True``, ``parse_arguments(argv)``);
#: each rank says it ran
CHECKED_TOOL = '''
import argparse, os, sys

LAUNCH_CHECKS_ARGUMENTS = True

def parse_arguments(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1)
    args = parser.parse_args(argv)
    if args.size < 1:
        parser.error("--size is at least 1")
    return args


if __name__ == "__main__":
    args = parse_arguments()
    os.write(1, f"RANK {os.environ['RANK']} SIZE {args.size}\\n".encode())
'''


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("target", "said"), [
    (["examples/moe_gemm.py", "--no-such-flag"], "moe_gemm.py: error: unrecognized arguments: --no-such-flag"),
    (["examples/moe_gemm.py", "--tokens", "0"], "argument --tokens: 0 tokens: a batch size is at least 1"),
    (["examples/moe_gemm.py", "--batches", "4,8"], "moe_gemm.py: error: --batches needs --campaign"),
    (["-m", "examples.quickstart", "--bogus"], "quickstart.py: error: unrecognized arguments: --bogus"),
    (["{tool}", "--size", "0"], "error: --size is at least 1"),
])
def test_launch_sh_says_a_wrong_argument_once(tmp_path: Path, target: list[str], said: str) -> None:
    """``bash launch.sh examples/moe_gemm.py --no-such-flag`` on 2 CPU ranks printed the usage error once per rank,
    then torchrun's ``ChildFailedError`` traceback, exit status 1. Now launch.sh checks the arguments once before
    torchrun starts, with the script's ``parse_arguments`` (the examples', a user's script's): the usage and the
    error once, argparse's exit status 2, no traceback, no rank started."""
    tool = tmp_path / "tool.py"
    tool.write_text(CHECKED_TOOL)
    target = [str(tool) if t == "{tool}" else t for t in target]
    done = run_command(["bash", LAUNCH, "--cpu", "--nproc", "2", *target], ROOT, user_env(tmp_path), timeout=80)
    text = done.stdout + done.stderr
    assert done.returncode == 2, text[-6000:]
    assert text.count(said) == 1 and text.count("usage:") == 1, text[-6000:]
    assert "Traceback" not in text and "ChildFailedError" not in text, text[-6000:]


@pytest.mark.timeout(90)
def test_launch_sh_starts_the_ranks_of_arguments_that_parse(tmp_path: Path) -> None:
    """The check lets right arguments through: a user's script with ``parse_arguments`` runs on both ranks with
    them; a script without one is not checked (nor imported) and gets any argument."""
    tool = tmp_path / "tool.py"
    tool.write_text(CHECKED_TOOL)
    done = run_command(["bash", LAUNCH, "--cpu", "--nproc", "2", tool, "--size", "3"], tmp_path, user_env(tmp_path),
                       timeout=80)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("RANK ")) == [
        "RANK 0 SIZE 3", "RANK 1 SIZE 3"], done.stdout
    plain = tmp_path / "plain.py"
    plain.write_text(SHOW_ENV)
    done = run_command(["bash", LAUNCH, "--cpu", "--nproc", "2", plain, "--anything"], tmp_path, user_env(tmp_path),
                       timeout=80)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("ARGS --anything") == 2, done.stdout


#: scripts the ranks run as they are, each with a top-level ``parse_arguments``: launch.sh's check must not refuse
#: them nor change what they do. Each rank writes "RANK <rank> STEPS <steps>" (one write: the ranks share stdout);
#: sideeffect's import writes a line to imported.log.
UNCHECKED_SCRIPTS = {
    # no __main__ guard: its arguments are parsed at import, from sys.argv[1:]
    "unguarded": """
import argparse, os, sys
def parse_arguments(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    return parser.parse_args(argv)
args = parse_arguments(sys.argv[1:])
os.write(1, f"RANK {os.environ.get('RANK')} STEPS {args.steps}\\n".encode())
""",
    # outside torchrun (no RANK) it exits at import
    "exits_at_import": """
import argparse, os, sys
def parse_arguments(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    return parser.parse_args(argv)
if "RANK" not in os.environ:
    sys.exit("start me with torchrun")
os.write(1, f"RANK {os.environ['RANK']} STEPS {parse_arguments(sys.argv[1:]).steps}\\n".encode())
""",
    # parse_arguments takes the whole argv, program name first
    "full_argv": """
import argparse, os, sys
def parse_arguments(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    return parser.parse_args(argv[1:])
if __name__ == "__main__":
    os.write(1, f"RANK {os.environ.get('RANK')} STEPS {parse_arguments(sys.argv).steps}\\n".encode())
""",
    # its import has a side effect: a line in imported.log, once per rank and no more
    "sideeffect": """
import argparse, os, sys
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "imported.log"), "a") as log:
    log.write(f"RANK {os.environ.get('RANK')}\\n")
def parse_arguments(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    return parser.parse_args(argv)
if __name__ == "__main__":
    os.write(1, f"RANK {os.environ.get('RANK')} STEPS {parse_arguments(sys.argv[1:]).steps}\\n".encode())
""",
}
#: an opted-in script whose import exits outside torchrun: the check cannot tell, so the ranks run
UNCHECKED_SCRIPTS["opted_in_exits_at_import"] = UNCHECKED_SCRIPTS["exits_at_import"].replace(
    "import argparse, os, sys\n", "import argparse, os, sys\nLAUNCH_CHECKS_ARGUMENTS = True\n", 1)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", sorted(UNCHECKED_SCRIPTS))
def test_launch_sh_runs_the_ranks_of_a_script_its_check_cannot_judge(tmp_path: Path, name: str) -> None:
    """Before, any script with a top-level ``parse_arguments`` was imported and checked by launch.sh: one that parses
    its arguments at import exited 2 (``unrecognized arguments``: only ``sys.argv[0]`` was the rank's), one whose
    ``parse_arguments`` takes the whole argv exited 2, one that exits at import outside torchrun made the launch exit
    1, one whose import has a side effect had it once more. Now only a script that opts in
    (``LAUNCH_CHECKS_ARGUMENTS = True``) is checked, and an import that fails or exits is "cannot tell": each runs on
    both ranks with its arguments, exit status 0, its import once per rank only."""
    script = tmp_path / f"{name}.py"
    script.write_text(UNCHECKED_SCRIPTS[name])
    done = run_command(["bash", LAUNCH, "--cpu", "--nproc", "2", script, "--steps", "3"], tmp_path,
                       user_env(tmp_path), timeout=80)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("RANK ")) == [
        "RANK 0 STEPS 3", "RANK 1 STEPS 3"], done.stdout[-3000:] + done.stderr[-3000:]
    log = tmp_path / "imported.log"
    if name == "sideeffect":
        assert sorted(log.read_text().splitlines()) == ["RANK 0", "RANK 1"], log.read_text()


@pytest.mark.timeout(120)
def test_a_one_rank_job_gets_a_store_port_outside_the_kernels_ephemeral_range(tmp_path: Path) -> None:
    """launch.sh's one-rank form picks the port rank 0's store binds seconds later (after importing torch). A port
    the kernel handed out (bind to 0) is one any outgoing connection may take meanwhile: a suite run beside other
    jobs met EADDRINUSE. The port is now free and outside ``ip_local_port_range``."""
    range_file = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if not range_file.exists():
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range")
    low, high = (int(x) for x in range_file.read_text().split()[:2])
    script = tmp_path / "port.py"
    script.write_text("import os\nprint('PORT', os.environ['MASTER_PORT'])\n")
    ports = []
    for _ in range(3):
        done = run_command(["bash", LAUNCH, "--cpu", "--nproc", "1", script], tmp_path, user_env(tmp_path), timeout=60)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        ports += [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("PORT ")]
    assert len(ports) == 3 and all(not low <= p <= high for p in ports), (ports, low, high)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("nproc", [1, 2])
def test_a_stray_master_addr_still_starts_a_standalone_job(tmp_path: Path, nproc: int) -> None:
    """A ``MASTER_ADDR`` and ``MASTER_PORT`` left in the environment by another tool, no ``NNODES``: one node, as the
    usage text and docs/operations.md say. Before, MASTER_ADDR alone made launch.sh start torchrun's static
    rendezvous on that address (and skip the one-rank form): the job hung. Now it is ``--standalone`` (or the
    one-rank form), and its ranks meet on this host."""
    script = tmp_path / "all_reduce.py"
    script.write_text(ALL_REDUCE)
    stray = "192.0.2.1"  # TEST-NET-1: an address no host answers at
    env = user_env(tmp_path, MASTER_ADDR=stray, MASTER_PORT="29577")
    done = run_command(["bash", LAUNCH, "--cpu", "--nproc", str(nproc), script], tmp_path, env, timeout=60)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = sorted(line for line in done.stdout.splitlines() if line.startswith("RANK "))
    assert [line.split(" MASTER_ADDR ")[0] for line in lines] == [f"RANK {r} OF {nproc} SUM {nproc}"
                                                                 for r in range(nproc)], done.stdout
    assert all(not line.endswith(stray) for line in lines), lines
