"""Issue 30, on real gloo ranks, real threads and a real store: every phase under a deadline, blame only with
evidence, every protocol input agreed, hostile store values refused clearly."""

from __future__ import annotations

import faulthandler
import json
import math
import time

import pytest
from harness import HERE, base_env, describe, run_python, run_ranks, tuner_env

import triton_dist_tune as tdt
from triton_dist_tune import settings
from triton_dist_tune.errors import BadInputError
from triton_dist_tune.faults.watchdog import BACKSTOP_S, exchange_timeout

CASES = HERE / "scenarios" / "reliability_cases.py"


def run(case, env, n=2, ok=True, timeout=100, **kw):
    results = run_ranks(CASES, n, [case], env=env, timeout=timeout, **kw)
    if ok:
        assert all(r.returncode == 0 for r in results), describe(results)
    return results


# -- case 3: values no clock can hold --------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["1e10", "inf", "nan", "-1", "0"])
def test_a_timeout_no_clock_holds_is_refused_naming_the_variable(value):
    with pytest.raises(BadInputError, match="TRITON_DIST_AUTOTUNE_TIMEOUT"):
        settings.Settings.from_env({"TRITON_DIST_AUTOTUNE_TIMEOUT": value})


@pytest.mark.parametrize("value", [1e10, math.inf, math.nan, settings.MAX_SECONDS * 1.01])
def test_a_timeout_option_no_clock_holds_is_refused_naming_the_option(value):
    with pytest.raises(BadInputError, match="timeout must be"):
        tdt.autotune([{"block": 1}], key_fn=lambda x: 0, timeout=value)(lambda x, *, block: block)


def test_the_cap_is_held_by_every_clock_of_the_watchdog():
    env = settings.Settings.from_env({"TRITON_DIST_AUTOTUNE_TIMEOUT": f"{settings.MAX_SECONDS:g}"})
    assert env.timeout == settings.MAX_SECONDS
    try:  # the GIL-free backstop is armed at the deadline plus BACKSTOP_S
        faulthandler.dump_traceback_later(settings.MAX_SECONDS + BACKSTOP_S, exit=True)
    finally:
        faulthandler.cancel_dump_traceback_later()
    import threading

    # a steady round waits T per sample in it: thousands of configs' worth still fits a thread's wait
    assert exchange_timeout(settings.MAX_SECONDS * 5000) < threading.TIMEOUT_MAX


@pytest.mark.timeout(60)
def test_back_to_back_guarded_phases_move_the_backstop_once_a_second_and_it_is_cancelled_once_idle(monkeypatch):
    """Issue 41: re-arming faulthandler's timer starts and joins a thread, which made each guarded phase (thousands
    per tuning: warm-ups, captures, samples) cost 30-50 times a guard's own work. Counted here, not timed: the
    timer moves about once per SLACK_S of back-to-back phases, never fires before the earliest deadline plus
    BACKSTOP_S nor more than SLACK_S after it, and is cancelled by the monitor once no phase was armed for IDLE_S."""
    import time

    from triton_dist_tune.faults import backstop
    from triton_dist_tune.faults.watchdog import WATCHDOG

    armed: list[float] = []
    real_arm = backstop.faulthandler.dump_traceback_later

    def counted(timeout: float, exit: bool = False) -> None:
        armed.append(timeout)
        real_arm(timeout, exit=exit)

    monkeypatch.setattr(backstop.faulthandler, "dump_traceback_later", counted)
    guard = WATCHDOG.guard()
    try:
        started = time.monotonic()
        for i in range(2000):  # well under a second on an idle machine; each pair checks the window
            guard.arm(30.0, "phase", lambda: None, i, None, "step", 0.0)
            due = guard.deadline + backstop.BACKSTOP_S
            assert due <= WATCHDOG.backstop.at <= due + backstop.SLACK_S + 0.01
            guard.disarm()
        seconds = time.monotonic() - started
        assert 1 <= len(armed) <= seconds / backstop.SLACK_S + 2, (len(armed), seconds)  # was 2000
        guard.arm(2.0, "shorter", lambda: None, 0, None, "step", 0.0)  # an earlier deadline moves it at once
        assert WATCHDOG.backstop.at <= guard.deadline + backstop.BACKSTOP_S + backstop.SLACK_S + 0.01
        guard.disarm()
        waited = time.monotonic()
        while WATCHDOG.backstop.at is not None and time.monotonic() - waited < 10:
            time.sleep(0.05)
        assert WATCHDOG.backstop.at is None  # cancelled by the monitor, about IDLE_S after the last phase
    finally:
        guard.close()


@pytest.mark.timeout(60)
def test_a_watchdog_whose_last_act_hangs_holding_the_gil_is_still_ended_by_the_backstop():
    """The watchdog holds the backstop as it fires (faults/backstop.py Backstop.hold: its last acts, a look at the
    beats of 3.5 s, are not cut short by a timer due just after the deadline), a whole window past that moment: a
    last act that never returns, holding the GIL, still ends there (exit 1, every stack), in a real process."""

    script = (
        "import ctypes, time\n"
        "from triton_dist_tune.faults.watchdog import WATCHDOG\n"
        "guard = WATCHDOG.guard()\n"
        "guard.arm(0.5, 'phase', lambda: ctypes.PyDLL(None).sleep(3600))\n"
        "time.sleep(3600)\n")
    started = time.monotonic()
    proc = run_python(["-c", script], base_env(), timeout=50)
    seconds = time.monotonic() - started
    assert proc.returncode == 1 and "Timeout (0:00:" in proc.stderr, proc.stderr[-3000:]
    assert "in <lambda>" in proc.stderr and "in _fire" in proc.stderr, proc.stderr[-3000:]  # inside the last act
    assert 0.5 + BACKSTOP_S <= seconds < 40, seconds  # held a window past the fire: never sooner than the deadline's


@pytest.mark.timeout(60)
def test_restarting_a_phase_moves_its_deadline_and_backstop_without_waking_the_watchdog():
    """Each run of a warm-up restarts the phase's deadline. Waking the watchdog's thread for it (a later deadline
    needs no wake: the thread reads the deadlines again when it wakes at the earlier one) cost the tuner's thread
    the GIL once per run on a host whose CPUs compile: counted here as the condition's notifications."""
    import threading

    from triton_dist_tune.faults import backstop
    from triton_dist_tune.faults.watchdog import Watchdog

    class Counting(threading.Condition):
        notified = 0

        def notify(self, n: int = 1) -> None:
            Counting.notified += 1
            super().notify(n)

    dog = Watchdog()
    dog.cond = Counting()
    guard = dog.guard()
    try:
        guard.arm(30.0, "phase", lambda: None, 0, None, "step", 0.0)
        first, woken = guard.deadline, Counting.notified
        for _ in range(200):
            guard.restart()
        assert Counting.notified == woken and guard.deadline > first  # was 200 wakes
        assert guard.deadline + backstop.BACKSTOP_S <= dog.backstop.at <= guard.deadline + backstop.BACKSTOP_S + \
            backstop.SLACK_S + 0.01
        guard.disarm()
        guard.restart()  # nothing armed: nothing to restart
        assert guard.deadline is None
    finally:
        guard.close()
        dog.stop()


@pytest.mark.timeout(60)
def test_a_process_forked_while_a_phase_is_guarded_can_use_faulthandler_and_exit():
    """A fork copies faulthandler's armed timer without its thread, and cancelling it in the child then waits
    forever (a child that exits through atexit runs the watchdog's stop, which cancels it). The backstop is
    cancelled around every fork and armed again in the parent."""
    import os
    import time

    from triton_dist_tune.faults.watchdog import WATCHDOG

    guard = WATCHDOG.guard()
    guard.arm(30.0, "phase", lambda: None, 0, None, "step", 0.0)
    try:
        at = WATCHDOG.backstop.at
        pid = os.fork()
        if pid == 0:  # the child: cancel faulthandler's timer, as an exit through atexit does
            import faulthandler

            faulthandler.cancel_dump_traceback_later()
            os._exit(7)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung cancelling faulthandler's timer")
        assert os.waitstatus_to_exitcode(status) == 7
        assert WATCHDOG.backstop.at is not None and abs(WATCHDOG.backstop.at - at) < 0.01  # armed again
    finally:
        guard.disarm()
        guard.close()


# -- case 6: the tuner's own error blames no config ------------------------------------------------------------------

@pytest.mark.timeout(240)
def test_the_tuners_own_error_after_started_blames_no_config(tmp_path):
    env = tuner_env(tmp_path, 20)
    for _ in range(2):  # two attempts ended inside config 0 by the tuner's own error
        failed = run("tuner_bug_blames_no_config", {**env, "INJECT": "1"})
        for r in failed:
            assert r.result["result"]["error"] == "OverflowError", describe(failed)
    fixed = run("tuner_bug_blames_no_config", env)
    for r in fixed:
        assert r.result["result"] == {"ok": 16}, describe(fixed)  # config 0 was not left out as crashed
        assert r.result["states"][0] == "measured", r.result


# -- case 1: a compile that never returns ------------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_a_precompile_fn_that_never_returns_fails_its_config_and_the_ranks_still_exit(tmp_path):
    t0 = time.monotonic()
    results = run("precompile_never_returns", tuner_env(tmp_path, 4), timeout=90)
    job_s = time.monotonic() - t0
    # one of the configs that ran, the same on every rank: 32 (80 ms) is the faster, but a 1.5x gap measured once
    # under load can swap (it chose 64 once beside the rest of the suite)
    assert results[0].result["result"] in ({"ok": 32}, {"ok": 64}), describe(results)
    for r in results:
        result = r.result
        assert result["result"] == results[0].result["result"], describe(results)
        assert result["states"][0] == "failed" and "did not finish within 4 s" in result["errors"][0], result
        assert result["states"][1:] == ["measured", "measured"], result
        print(f"rank {r.rank}: tuning ended after {result['tuned_s']:.1f} s, process ran "
              f"{result['since_start_s']:.1f} s to its exit call; job {job_s:.1f} s")
    # the stuck thread is still there at exit on the rank that compiled config 0: a daemon, so the process exited
    assert any(any(name.startswith("tdt-compile") for name in r.result["threads"]) for r in results)


# -- case 4: an exception in the compile pass blames nothing -------------------------------------------------------

@pytest.mark.timeout(120)
def test_an_exception_in_the_compile_pass_blames_no_config_and_ends_no_rank(tmp_path):
    results = run("compile_pass_raises", {**tuner_env(tmp_path, 4), "TRITON_INTERPRET": "0"}, ok=False)
    assert [r.returncode for r in results] == [0, 0], describe(results)  # no rank ended (exit 87)
    for r in results:
        assert r.result["result"] == {"ok": 16}, describe(results)
        assert r.result["states"] == ["measured"] * 3, r.result
        assert r.result["again"] == {"ok": 16}
        assert "ending this rank" not in r.stderr


@pytest.mark.timeout(240)
def test_a_compile_pass_that_ends_an_attempt_is_not_taken_again_by_the_rerun(tmp_path):
    """Rank 1 alone raises in config 0's compile pass before the function's all_reduce, where rank 0 waits: the
    attempt ends, blaming nothing. Before, every rerun took the same pass and ended the same way (the tuning never
    finished); now the rerun warms config 0 up without its pass and completes."""
    env = {**tuner_env(tmp_path, 4), "TRITON_INTERPRET": "0"}
    first = run("compile_pass_raises_on_one_rank", env, ok=False)
    # rank 0 leaves the all_reduce by ending (exit 87); rank 1 then fails at its next exchange (RankFailedError, or
    # GroupTimeoutError when, as here without torchrun, rank 0 hosted the store)
    assert first[0].returncode == 87, describe(first)
    assert first[1].result["result"]["error"] in ("RankFailedError", "GroupTimeoutError"), describe(first)
    journals = [[json.loads(line) for line in path.read_text().splitlines() if line.strip()]
                for path in sorted((tmp_path / "cache").rglob("*.journal"))]
    records = [r for journal in journals for r in journal]
    assert not [r for r in records if r["state"] in ("failed", "hung", "local_failure", "measured")], records
    second = run("compile_pass_raises_on_one_rank", env, ok=False)
    for r in second:
        assert r.returncode == 0 and r.result["result"] == {"ok": 16}, describe(second)  # the fastest
        assert r.result["states"] == ["measured"] * 3 and not any(r.result["resumed"]), r.result
        assert r.result["in_pass"] == {"32": 1, "64": 1}, r.result  # config 0's pass is not taken again
        assert set(r.result["ran"]) == {"16", "32", "64"}, r.result
    assert "Config 0 is journaled as interrupted: no config is blamed" in first[0].stderr, describe(first)
    # the evidence, on both ranks: the first attempt's last record is in config 0's compile pass, interrupted there
    # (rank 0 by rank 1's report; rank 1 when its next exchange failed: before, its started record stayed last)
    assert len(journals) == 2 and all((j[-1]["index"], j[-1]["phase"]) == (0, "compile pass") for j in journals)
    assert [j[-1]["state"] for j in journals] == ["interrupted", "interrupted"], journals


# -- case 5: a failure after the collective in a steady round blames only its own config -----------------------------

@pytest.mark.timeout(150)
def test_a_failure_after_the_collective_in_a_round_blames_only_its_config(tmp_path):
    env = tuner_env(tmp_path, 4)
    t0 = time.monotonic()
    first = run("fails_after_collective_in_a_round", env, ok=False)
    first_s = time.monotonic() - t0
    print(f"first attempt: rank return codes {[r.returncode for r in first]}, job {first_s:.1f} s")
    records = "\n".join(r.stderr for r in first)
    assert "HUNG" not in records and "exit status 86" not in records, describe(first)
    # rank 0, stuck in the all_reduce of config 2 (block 64) that rank 1 never joins, ends after the board's grace
    assert first[0].returncode == 87, describe(first)
    assert "rank 1 failed in config 1" in first[0].stderr
    assert first[1].result["result"]["error"] == "RankFailedError", describe(first)
    again = run("fails_after_collective_in_a_round", env)
    for r in again:
        assert r.result["result"] == {"ok": 64}, describe(again)  # the innocent config was measured again, chosen
        assert r.result["states"][1] == "failed" and r.result["states"][2] == "measured", r.result


# -- case 8: every setting that changes the protocol's steps is agreed; every exchange carries its step -----------

@pytest.mark.timeout(120)
def test_a_timing_mode_that_differs_between_ranks_is_a_clear_error_on_every_rank(tmp_path):
    per_rank = {0: {"TRITON_DIST_AUTOTUNE_TIMING": "steady"}, 1: {"TRITON_DIST_AUTOTUNE_TIMING": "cold"}}
    results = run("timing_differs", tuner_env(tmp_path, 20), per_rank_env=per_rank)
    for r in results:
        result = r.result
        assert result["result"]["error"] == "MismatchError", describe(results)
        assert "TRITON_DIST_AUTOTUNE_TIMING" in result["result"]["message"]
        assert "ranks [0]: steady" in result["result"]["message"] and "ranks [1]: cold" in result["result"]["message"]
        assert result["seconds"] < 5  # at the first agreement (the deadline is 20 s)
        print(f"rank {r.rank}: MismatchError after {result['seconds']:.2f} s")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variable, value", [("TIMING", "bogus"), ("TIMEOUT", "abc"), ("UNDECIDED", "x")])
def test_a_variable_malformed_on_one_rank_is_the_same_bad_input_error_on_every_rank_at_once(tmp_path, variable,
                                                                                               value):
    # before: rank 1 raised alone (when decorating, or before the first exchange) and rank 0 waited its whole
    # deadline for it, then raised a GroupTimeoutError saying rank 1 crashed or hung
    name = f"TRITON_DIST_AUTOTUNE_{variable}"
    results = run("malformed_on_one_rank", tuner_env(tmp_path, 20), per_rank_env={1: {name: value}})
    for r in results:
        assert [x["case"] for x in r.results] == ["tuned", "served", "campaign"], describe(results)
        for result in r.results:  # at the first exchange of the tuning, of the serving, of the campaign
            assert result["result"]["error"] == "BadInputError", (result, describe(results))
            assert f"rank 1: {name}" in result["result"]["message"] and repr(value) in result["result"]["message"]
            assert result["seconds"] < 5  # the deadline is 20 s


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variable, value", [("TIMEOUT", "abc"), ("MAX_RUNS", "many")])
def test_a_variable_malformed_on_one_rank_fails_a_contextual_tuning_on_every_rank_at_once(tmp_path, variable, value):
    # before: rank 1 raised alone when decorating (or at its first read of the variable) and rank 0 waited for it at
    # the journal exchange to its deadline (GroupTimeoutError, 11 s with T = 10)
    name = f"TRITON_DIST_AUTOTUNE_{variable}"
    results = run("malformed_on_one_rank_contextual", tuner_env(tmp_path, 20), per_rank_env={1: {name: value}})
    for r in results:
        (result,) = r.results
        assert result["result"]["error"] == "BadInputError", (result, describe(results))
        assert f"rank 1: {name}" in result["result"]["message"] and repr(value) in result["result"]["message"]
        assert result["seconds"] < 5, result  # the deadline is 20 s


@pytest.mark.timeout(120)
def test_ranks_at_different_steps_get_a_clear_error_naming_both(tmp_path):
    """The error comes at once, not at the deadline (40 s): bounded by 10 s, which a new store connection's
    occasional 5 s stall (docs/operations.md) and a loaded machine stay under (before: 20 s against 5 s, failed once
    at 5.02 s in a loaded CI run)."""
    results = run("steps_differ", tuner_env(tmp_path, 40))
    for r in results:
        result = r.result
        assert result["result"]["error"] == "ExchangeError", describe(results)
        message = result["result"]["message"]
        # every rank names its own step and rank 0's, and the rank at another step
        assert f"'config 0 warmup {r.rank + 1}'" in message and "which is at 'config 0 warmup 1'" in message, message
        assert "group rank(s) [1] are at another step" in message and "different steps" in message
        assert result["seconds"] < 10
        assert result["after"] == {"ok": [0, 1]}


# -- case 12: hostile values in the store ---------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_a_forged_message_pre_written_for_a_rank_is_detected_on_every_rank(tmp_path):
    results = run("forged_prune_message", tuner_env(tmp_path, 40))
    for r in results:
        result = r.result
        assert result["result"]["error"] == "ExchangeError", describe(results)
        assert "already written" in result["result"]["message"], result
        assert "prune" in result["result"]["message"]
        assert result["cached"] == []  # no choice was made, let alone cached
        assert result["seconds"] < 20  # at once (about 0.02 s), not after a deadline (40 s)
        print(f"rank {r.rank}: ExchangeError after {result['seconds']:.2f} s")


@pytest.mark.timeout(120)
def test_a_forged_message_is_detected_on_every_rank_when_the_forged_rank_reads_late(tmp_path):
    # rank 0 passes the prune exchange on the forged message while rank 1 has yet to read the agreement's result:
    # that result must still be there for rank 1 (before: rank 0 deleted it, and rank 1 waited its whole deadline)
    results = run("forged_prune_message", {**tuner_env(tmp_path, 40), "SLOW_READER": "1"})
    for r in results:
        assert r.result["result"]["error"] == "ExchangeError", describe(results)
        assert r.result["seconds"] < 20 and r.result["cached"] == []  # rank 1's late read is 1.5 s; deadline 40 s


@pytest.mark.timeout(120)
def test_the_same_job_without_the_forgery_chooses_the_fastest(tmp_path):
    results = run("forged_prune_message", {**tuner_env(tmp_path, 10), "FORGE": "0"})
    assert all(r.result["result"] == {"ok": 16} for r in results), describe(results)


@pytest.mark.timeout(120)
def test_a_deeply_nested_value_on_the_failure_board_is_refused_clearly(tmp_path):
    results = run("deep_json_on_the_board", tuner_env(tmp_path, 10))
    for r in results:
        assert r.result["result"] == {"ok": 16}, describe(results)
        assert r.result["states"] == ["measured"] * 3
        assert "lost the key-value store" not in r.stderr
    assert "refused the failure board entry" in results[0].stderr and "RecursionError" in results[0].stderr


def test_a_stuck_compile_thread_is_abandoned_and_the_queue_goes_on():
    """The pool under both compile paths (autotune's and contextual_autotune's compile_share): a real thread stuck
    for good fails its config at the deadline; the next task still runs (a thread replaces the stuck one); the
    stuck thread is a daemon (the interpreter does not join it at exit)."""
    import threading

    from triton_dist_tune.measure.daemon_pool import DaemonPool, wait_within

    stuck = threading.Event()
    pool = DaemonPool(1, "tdt-test")
    try:
        blocked = pool.submit(stuck.wait)
        after = pool.submit(lambda: 7)
        t0 = time.monotonic()
        error = wait_within([blocked], 0.5, pool)
        assert error is not None and "did not finish within 0.5 s" in error
        assert time.monotonic() - t0 < 5
        assert wait_within([after], 5, pool) is None and after.result() == 7
        assert all(t.daemon for t in threading.enumerate() if t.name.startswith("tdt-test"))
    finally:
        pool.shutdown()
        stuck.set()


def test_compiles_submitted_later_run_after_the_others_unless_promoted_and_each_runs_once():
    """The configs compiled ahead of their stage (``AHEAD``) must not delay a stage's own compiles, nor those for a
    campaign's next key (``NEXT_KEY``) the key's own; one that its stage then needs goes first (promoted) and still
    runs once."""
    import threading

    from triton_dist_tune.measure.daemon_pool import AHEAD, NEXT_KEY, DaemonPool

    gate, order = threading.Event(), []
    pool = DaemonPool(1, "tdt-order")
    try:
        pool.submit(gate.wait)  # holds the one thread while the rest is queued
        following = pool.submit(lambda: order.append("next key"), rank=NEXT_KEY)
        guesses = [pool.submit(lambda n=n: order.append(f"ahead {n}"), rank=AHEAD) for n in range(3)]
        needed = pool.submit(lambda: order.append("needed"))
        pool.promote(guesses[2])  # its stage came: before the other guesses
        gate.set()
        for future in [needed, *guesses, following]:
            future.result(timeout=10)
        assert order == ["needed", "ahead 2", "ahead 0", "ahead 1", "next key"]
        pool.promote(guesses[0])  # already run: nothing
        pool.shutdown()
        assert pool.submit(lambda: None).cancelled()
    finally:
        gate.set()
        pool.shutdown()


@pytest.mark.timeout(60)
def test_a_needed_compile_starts_while_every_speculative_thread_is_busy_and_a_promoted_guess_runs_as_needed():
    """In the README's MoE campaign on one H200 the compile workers were busy 40-60% of each key while the key waited
    for its compiles: a guess, once started, held its thread, and a stage's own compiles queued behind it. Guesses
    now run on threads of their own. Before: one class of threads, and the needed compile below waited for the
    guess (the gate) to end."""
    import threading

    from triton_dist_tune.measure.daemon_pool import AHEAD, NEXT_KEY, DaemonPool, speculating

    gate, started = threading.Event(), threading.Event()
    pool = DaemonPool(1, "tdt-guess", speculative=1)

    def guess() -> bool:
        started.set()
        gate.wait()
        return speculating()

    try:
        running = pool.submit(guess, rank=AHEAD)
        assert started.wait(10)  # the one speculative thread is busy with it
        queued = pool.submit(speculating, rank=NEXT_KEY)
        needed = pool.submit(speculating)
        assert needed.result(timeout=10) is False  # at once, on a thread for the needed compiles
        promoted = pool.submit(speculating, rank=AHEAD)
        pool.promote(promoted)  # its stage came before a speculative thread was free
        assert promoted.result(timeout=10) is False
        assert not queued.done() and not running.done()
        gate.set()
        assert running.result(timeout=10) is True and queued.result(timeout=10) is True
        assert speculating() is False
    finally:
        gate.set()
        pool.shutdown()
    threads = [t for t in threading.enumerate() if t.name.startswith("tdt-guess")]
    for thread in threads:
        thread.join(timeout=10)
    assert not any(t.is_alive() for t in threads)  # shutdown ends the threads of both classes


#: a process whose pool holds a compile still running when the program ends, and one left behind stuck for good
EXIT_SCRIPT = """
import sys, threading, time
from pathlib import Path
from triton_dist_tune.measure.daemon_pool import DaemonPool, wait_within
done = Path(sys.argv[1])
pool = DaemonPool(2, "tdt-exit")
stuck = pool.submit(threading.Event().wait)
assert wait_within([stuck], 0.2, pool) is not None  # left behind: not waited for at exit
def compile_one():
    time.sleep(1.0)
    done.write_text("compiled")
pool.submit(compile_one)
time.sleep(0.1)  # the compile has started; the program ends
"""


@pytest.mark.timeout(60)
def test_compiles_still_running_at_exit_are_waited_for_and_threads_left_behind_are_not(tmp_path):
    """Bench_breakdown on a GPU aborted at exit after its budget pass (``terminate called after throwing an instance
    of ''``): compiles the cut left running were still inside Triton's compiler when the interpreter finalized. At
    exit the pool now waits for the compiles still running (the file is written), but not for a thread left behind
    stuck for good (the process still exits, long before the 30 s the wait allows)."""
    import os
    import subprocess
    import sys

    done = tmp_path / "done"
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(done)], capture_output=True, text=True, timeout=25,
                          env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    assert proc.returncode == 0, proc.stderr
    assert done.exists() and done.read_text() == "compiled", proc.stderr


@pytest.mark.timeout(60)
def test_each_contextual_compile_has_its_own_deadline_and_the_share_ends_within_its_waves(monkeypatch):
    """compile_share with 2 threads, ``T`` = 0.5 s: stuck compiles (None) fail, each after ``T`` s of its own, and
    only they; the compiles queued behind them run on the threads that replace them; the share ends within
    ``T`` x ceil(configs / threads) (the bound the exchange of failures counts on), here 4 waves (2 s; asserted
    within 4x that, which a loaded host keeps)."""
    import threading
    from types import SimpleNamespace

    from triton_dist_tune.contextual import compiling, intercept

    stuck = threading.Event()
    seconds = [0.4, None, 0.3, None, None, 0.2, 0.05]

    def warmup(*, index):
        if seconds[index] is None:
            stuck.wait()
        else:
            time.sleep(seconds[index])

    configs = [SimpleNamespace(all_kwargs=lambda i=i: {"index": i}) for i in range(len(seconds))]
    autotuner = SimpleNamespace(fn=SimpleNamespace(warmup=warmup), configs=configs)
    monkeypatch.setattr(compiling, "default_workers", lambda: 2)
    monkeypatch.setattr(intercept, "without_config_names", lambda _, args, kwargs: (args, kwargs))
    compiling.current_cuda_device()  # imports torch once, here: not the compiles' time
    try:
        t0 = time.monotonic()
        failures = compiling.compile_share(autotuner, list(range(len(seconds))), (), {}, 0.5)
        elapsed = time.monotonic() - t0
    finally:
        stuck.set()
    assert sorted(failures) == [1, 3, 4], failures
    assert all("did not finish within 0.5 s (the timeout) of its own start" in e for e in failures.values())
    # ends, within 4x the 4 waves' bound (2 s): a fresh-clone CI run on the loaded 2-core machine took 2.52 s,
    # past the 0.5 s of slack this allowed before; each compile's own deadline is what the messages above check
    assert elapsed < 4 * (0.5 * 4), elapsed
    print(f"the share ended after {elapsed:.2f} s")


def run_one(case: str, env: dict[str, str]) -> tuple[dict, float]:
    """Run ``case`` in one process (no group), which must exit normally: (its result, the process's seconds)."""
    from harness import run_process

    t0 = time.monotonic()
    proc = run_process(CASES, [case], env, timeout=90)
    process_s = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[0][len("RESULT "):]), process_s


@pytest.mark.timeout(120)
def test_a_contextual_compile_that_never_returns_fails_its_config_and_the_process_exits(tmp_path):
    result, process_s = run_one("contextual_compile_never_returns", tuner_env(tmp_path, 3))
    assert result["ok"]
    assert result["states"][1] == "failed", result
    assert "did not finish within 3 s (the timeout) of its own start; its thread is left behind" \
        in result["errors"][1], result
    assert [s.replace("stopped", "measured") for i, s in enumerate(result["states"]) if i != 1] == ["measured"] * 2
    assert any(name.startswith("tdt-precompile") for name in result["threads"])  # left behind, still stuck
    print(f"tuning ended after {result['tuned_s']:.1f} s; the process exited after {process_s:.1f} s")


@pytest.mark.timeout(120)
def test_contextual_compiles_queued_behind_a_stuck_one_get_their_own_deadline_and_are_measured(tmp_path):
    """One compile thread (the interpreter), ``T`` = 3 s: config 1's compile never returns, configs 2 and 3 are
    queued behind it (0.3 s each). Before, the share had one deadline (T x 3 waves) that the stuck compile used up,
    and 2 and 3 were failed as "did not finish" with 0 s left although they compile."""
    result, process_s = run_one("contextual_compiles_queued_behind_a_stuck_one", tuner_env(tmp_path, 3))
    assert result["ok"]
    assert {i: e for i, e in enumerate(result["errors"]) if i != 1} == {0: None, 2: None, 3: None}, result
    assert [s.replace("stopped", "measured") for i, s in enumerate(result["states"]) if i != 1] == ["measured"] * 3
    assert result["chosen"] == result["fastest"] == 2, result
    assert result["states"][1] == "failed", result
    assert "did not finish within 3 s (the timeout) of its own start; its thread is left behind" \
        in result["errors"][1], result
    print(f"tuning ended after {result['tuned_s']:.1f} s; the process exited after {process_s:.1f} s")


@pytest.mark.timeout(120)
def test_the_reference_check_is_set_up_before_any_config_runs(tmp_path):
    """A config is charged only for its own run: the first comparison with ``ref_prog``'s result imports what
    torch.testing needs (DTensor and sympy, 1.6 s of CPU) inside the first config's warm-up deadline, and on a loaded
    CI machine that took more than the 4 s deadline: the config was recorded as hung. Now the comparison is set up
    when the reference is taken, before any config runs: nothing is imported while the configs run."""
    result, _ = run_one("ref_check_set_up_before_the_deadlines", tuner_env(tmp_path, 30))
    assert result["ok"]
    assert result["imported"] == [], result["imported"][:20]
