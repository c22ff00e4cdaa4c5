"""The chaos drivers as their user runs them (``benchmarks/chaos.py``, and its interruption mode
``benchmarks/_chaos_interrupt.py``): their ``--help``, ``--faults``' hand-over, and a job of each driver whose
``contextual_autotune`` function runs the Triton kernel both share (``benchmarks/_chaos_kernel.py``).

Real processes: the drivers start real gloo ranks (CPU, Triton's interpreter), their folders under ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from harness import ROOT, run_command

CHAOS = ROOT / "benchmarks" / "chaos.py"
INTERRUPT = ROOT / "benchmarks" / "_chaos_interrupt.py"


def driver_env(tmp_path: Path) -> dict[str, str]:
    """The drivers' own environment: their run folders under ``tmp_path`` (``TMPDIR``), this checkout imported, a
    help wide enough for each option's text to stay on one line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(TMPDIR=str(tmp_path), COLUMNS="400",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    return env


@pytest.mark.timeout(60)
def test_chaos_help_lists_faults_and_faults_hands_over(tmp_path: Path) -> None:
    """``python3 benchmarks/chaos.py --help`` did not list ``--faults`` (the script handed ``--faults`` over to
    ``_chaos_interrupt.py`` before building its parser). Now it lists it with its one value, and where to find that
    mode's own options; ``--faults interrupt --help`` is the interruption driver's help (``--slack``, ``--plan``),
    an abbreviation ``--fault`` hands over too, and a value it does not know is argparse's error, exit status 2."""
    env = driver_env(tmp_path)
    done = run_command([sys.executable, CHAOS, "--help"], tmp_path, env, timeout=50)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--faults {interrupt}" in done.stdout and "--slack and --plan" in done.stdout, done.stdout
    assert "--launcher" in done.stdout, done.stdout
    for faults in (["--faults", "interrupt"], ["--fault=interrupt"]):
        done = run_command([sys.executable, CHAOS, *faults, "--help"], tmp_path, env, timeout=50)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.startswith("usage: _chaos_interrupt.py"), done.stdout
        assert all(option in done.stdout for option in ("--faults", "--slack", "--plan", "--jobs")), done.stdout
    done = run_command([sys.executable, CHAOS, "--faults", "kill"], tmp_path, env, timeout=50)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "chaos.py: error: argument --faults: invalid choice: 'kill'" in done.stderr, done.stderr


#: chaos.py's job of seed 51: 2 ranks, ``contextual_autotune`` with the collective, a RuntimeError injected on rank
#: 1 at the 4th call of config 2 (by the kernel's pre_hook); the job of seed 143: the same without a fault
CONTEXTUAL_SEEDS = ("51", "143")
#: the interruption driver's plan: 2 ranks, the contextual function's two keys, no leaver (a control)
CONTEXTUAL_PLAN = {"seed": 1, "ranks": 2, "shape": "ctx", "configs": 3, "sync_every": None, "leavers": [],
                   "steps": [["ctx", 64], ["ctx", 128], ["ctx", 64]]}


@pytest.mark.timeout(240)
def test_each_drivers_contextual_job_runs_the_shared_kernel(tmp_path: Path) -> None:
    """Both rank programs tune a ``contextual_autotune`` function around the same ``triton.autotune`` copy kernel,
    each config's pre_hook calling the rank's own hook (chaos: the fault's injection; interrupt: the record of what
    ran) and sleeping its time. A job of each runs to OK: the injected fault fired, the tuning call ran every
    config and later calls of a decided key ran one."""
    env = driver_env(tmp_path)
    out = tmp_path / "chaos.json"
    seeds = [arg for s in CONTEXTUAL_SEEDS for arg in ("--job-seed", s)]
    done = run_command([sys.executable, CHAOS, *seeds, "--timeout", "4", "--out", out], tmp_path, env, timeout=200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    jobs = json.loads(out.read_text())["jobs"]
    assert [j["plan"]["mode"] for j in jobs] == ["contextual", "contextual"], jobs
    assert jobs[0]["fault_at"] is not None and jobs[1]["fault_at"] is None, done.stdout
    assert all(not j["violations"] and [r["outcome"] for r in j["ranks"]] == ["ok", "ok"] for j in jobs), done.stdout

    out = tmp_path / "interrupt.json"
    done = run_command([sys.executable, CHAOS, "--faults", "interrupt", "--timeout", "4", "--out", out,
                        "--plan", json.dumps(CONTEXTUAL_PLAN)], tmp_path, env, timeout=200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (job,) = json.loads(out.read_text())["jobs"]
    assert not job["violations"], done.stdout
    for rank in job["ranks"]:
        calls = rank["calls"]
        assert [c["outcome"] for c in calls] == ["ok", "ok", "ok"], calls
        assert sorted(set(calls[0]["ran"])) == [0, 1, 2] and len(set(calls[2]["ran"])) == 1, calls


@pytest.mark.timeout(120)
def test_a_planned_interruption_is_raised_only_inside_the_librarys_call() -> None:
    """The interruption driver's ranks raise their planned interruption where the main thread runs the library's
    call (a user callable it calls included), never in the program's own line around the call. Before, a SIGTERM
    handled as that line began (``functions[fn](torch.ones(n))``, before the library was entered) raised there:
    the rank skipped that call of its own doing, one contextual call behind its peers for good, and the job was
    counted a violation (``--faults interrupt --seed 9292``, job seed 628587258: its peer's agreement waited ``T``).
    Here the rank program's handler is installed for SIGTERM on this process: raised in this test's own line it is
    dropped (counted handled, to be sent again); raised in the body of a one-process ``autotune`` function it
    raises ``SystemExit`` through the library."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _chaos_interrupt_rank as rank

    import triton_dist_tune as tdt

    @tdt.autotune(config_space=[{"v": 0}, {"v": 1}], key_fn=lambda n: (n,), n_warmup=1, n_repeat=1)
    def work(n: int, *, v: int) -> int:
        signal.raise_signal(signal.SIGTERM)
        return n + v

    previous = signal.signal(signal.SIGTERM, rank.on_signal)
    try:
        rank.STATE.update(in_call=True, call=0, handled=0, raised_in=None)
        signal.raise_signal(signal.SIGTERM)
        assert rank.STATE["handled"] == 1 and rank.STATE["raised_in"] is None, rank.STATE
        with pytest.raises(SystemExit) as raised:
            work(3)
        assert raised.value.code == 128 + signal.SIGTERM
        assert rank.STATE["handled"] == 2 and rank.STATE["raised_in"] == 0, rank.STATE
    finally:
        signal.signal(signal.SIGTERM, previous)
        rank.STATE.update(in_call=False, call=-1, handled=0, raised_in=None)


@pytest.mark.timeout(200)
def test_a_killed_rank_is_named_where_a_peers_collective_broke_first(tmp_path: Path) -> None:
    """The classic chaos job of seed 1826462843: 4 gloo ranks tune a ``contextual_autotune`` function, and rank 3 is
    SIGKILLed after config 1 of call 2. Ranks 0 and 2 find their collective broken (gloo's ``Connection reset by
    peer``), rank 1 is ended by the peer watch, and the failure board's report of rank 1 ends the others' wait
    before rank 3's beat reads silent. Promised: the error on ranks 0 and 2 also names rank 3, whose process on this
    host is gone (``exits.gone_besides``). Before, it named rank 0's broken collective and rank 1 only: the job's
    ``UNNAMED`` violation (4 of 4 runs, and on 713e19c7)."""
    out = tmp_path / "chaos.json"
    done = run_command([sys.executable, CHAOS, "--job-seed", "1826462843", "--timeout", "4", "--launcher", "torch",
                        "--out", out], tmp_path, driver_env(tmp_path), timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (job,) = json.loads(out.read_text())["jobs"]
    assert job["fault_at"] is not None, done.stdout
    # (the driver's own check, by every library error's text; its timing bounds are left to the chaos runs: a loaded
    # machine may take another path, rank 3's beat read silent first, which names it too)
    assert not [v for v in job["violations"] if v.startswith(("UNNAMED", "NOT A LIBRARY END"))], done.stdout


#: 2 gloo ranks tune ``autotune`` on one key with one config and the function's all_reduce; rank 1 SIGKILLs itself at
#: its ``k``-th call of that config, before the all_reduce: the 3rd is the chosen config's run after the tuning (one
#: warm-up call and one race round before it), the 2nd the race's measured run
FINAL_RUN_KILL = {"seed": 1, "launcher": "torch", "ranks": 2, "mode": "autotune", "configs": 1, "keys": [4],
                  "collective": True, "prune": False,
                  "fault": {"kind": "kill", "rank": 1, "config": 0, "k": 2, "where": "before", "trigger": "call",
                            "delay": 0.0}}


@pytest.mark.timeout(200)
def test_a_survivors_error_from_its_own_call_after_the_decision_is_the_users_where_the_driver_timed_the_kill(
        tmp_path: Path) -> None:
    """The classic chaos job of seed 1918885402 (4 gloo ranks, ``autotune`` with a collective, rank 2 SIGKILLed by the
    driver 0.16 s in): where the kill lands in the run of the decided config after the tuning (``Tuner._run``, the
    user's own call), the survivors' own all_reduce raises gloo's ``RuntimeError``, which the library passes on
    unchanged, as it would be with no tuner. The driver, which timed the kill, cannot say where it landed: it counted
    the job ``NOT A LIBRARY END`` (here, with the delay moved to 0.3, 0.4, 0.5 and 0.6 s: at 0.3 and 0.6 s; at 0.16 s
    none of 3 reruns on an idle machine reached that run). Now each rank says whether the error that ended it is the
    one its function raised in a call of a key decided on it (``RESULT``'s ``user_call``), and only such a survivor's
    end is the user's. Here the victim kills itself at that run and the job is judged as the driver's timed kill
    leaves it (no word of the fault's place: ``after_decision`` False); the same survivor without the rank's word is
    still a violation, and a kill in the measured run still ends the survivor with the library's error naming the
    victim, its rank saying nothing of a user call."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import chaos

    jobs = {}
    for k in (2, 1):  # a one-config key: its one untimed run, then the final run
        plan = json.loads(json.dumps(FINAL_RUN_KILL))
        plan["fault"]["k"] = k
        job = chaos.Job(plan["seed"], plan)
        folder = tmp_path / f"k{k}"
        job.folder = str(folder)
        chaos.drive(job, folder, 4.0)
        said = json.loads((folder / "fault.json").read_text())
        assert said["decided"] is (k == 2), said  # the kill came where it was planned: the final run, or measured
        job.after_decision = False  # as a kill the driver timed leaves it
        jobs[k] = job
    survivor = jobs[2].ranks[0]
    assert survivor.rc == 4 and survivor.result["error"] == "RuntimeError" and survivor.result["user_call"], survivor
    told = json.loads(json.dumps(survivor.result))
    chaos.judge(jobs[2], 4.0)
    assert not jobs[2].violations and [r.outcome for r in jobs[2].ranks] == ["user:rc=4:RuntimeError", "killed"], (
        chaos.line(0, jobs[2]))
    untold = chaos.Job(jobs[2].seed, jobs[2].plan, fault_at=jobs[2].fault_at,
                       ranks=[chaos.Rank(0, 4, survivor.ended, result={**told, "user_call": False}), jobs[2].ranks[1]])
    chaos.judge(untold, 4.0)
    assert any(v.startswith("NOT A LIBRARY END") for v in untold.violations), chaos.line(0, untold)
    chaos.judge(jobs[1], 4.0)
    measured = jobs[1].ranks[0]
    assert not jobs[1].violations and measured.outcome.startswith("lib:"), chaos.line(0, jobs[1])
    assert "user_call" not in measured.result and 1 in chaos.named_ranks(measured.result["message"]), measured
