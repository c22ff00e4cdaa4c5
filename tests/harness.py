"""Start real ranks as separate processes and collect what they print.

``run_ranks`` starts ``n`` Python processes of one script with the variables torchrun would give them
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), waits at most ``timeout`` seconds, kills every rank on
a timeout, and returns each rank's exit status, output and the ``RESULT {json}`` lines it printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import forkserver
from ports import PORTS_FROM as PORTS_FROM
from ports import free_port as free_port
from ports import port_slice as port_slice

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass
class RankResult:
    rank: int
    returncode: int | None
    stdout: str
    stderr: str
    results: list[Any] = field(default_factory=list)

    @property
    def result(self) -> Any:
        assert self.results, f"rank {self.rank} printed no RESULT (rc={self.returncode}):\n{self.stderr[-3000:]}"
        return self.results[-1]


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONPATH": f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}", "PYTHONUNBUFFERED": "1",
                "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"})
    env.pop("TORCHELASTIC_RESTART_COUNT", None)
    env.update(extra or {})
    return env


def tune_alone(tmp_path: Path, script: str, timeout: float = 200, **extra: str) -> tuple[Path, dict[str, str]]:
    """Run ``script`` as one process (no rank variables; Triton's interpreter) with its own cache and logs under
    ``tmp_path`` (``extra``: more variables); returns the cache folder and the environment it ran in (to read the
    cache with the CLI). Its stderr (the tuner's console summaries) is kept in ``tmp_path / "tune_alone.err"``."""
    env = base_env(tuner_env(tmp_path, **extra))
    env.pop("RANK", None), env.pop("WORLD_SIZE", None)
    path = tmp_path / "tune_alone.py"
    path.write_text(script)
    done = run_python([path], env, ROOT, timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    (tmp_path / "tune_alone.err").write_text(done.stderr)
    return Path(env["TRITON_DIST_AUTOTUNE_CACHE_DIR"]), env


def tuner_env(tmp_path: Path, timeout: float = 20, **extra: str) -> dict[str, str]:
    """The tuner's variables for one test: its own cache and log folders under ``tmp_path``, and a timeout."""
    return {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"),
            "TRITON_DIST_AUTOTUNE_LOG_DIR": str(tmp_path / "logs"), "TRITON_DIST_AUTOTUNE_TIMEOUT": str(timeout),
            **extra}


def parse_results(stdout: str) -> list[Any]:
    return [json.loads(line[len("RESULT "):]) for line in stdout.splitlines() if line.startswith("RESULT ")]


def spawn(script: str | Path, args: list[str], env: dict[str, str], wrap: Sequence[str] = (),
          cwd: str | Path | None = None) -> Any:
    """``python SCRIPT ARGS`` in environment ``env`` and folder ``cwd`` (this process's where None): a fork of a
    server that has imported torch and Triton already (tests/forkserver.py), or, where the environment asks for a
    fresh process, a fresh one (both Popen-like, with text pipes for stdout and stderr). ``wrap``: a command that
    runs ``python SCRIPT ARGS`` (its arguments follow it), always a fresh process (e.g. ``unshare --pid --fork``: a
    rank in a pid namespace of its own)."""
    proc = None if wrap else forkserver.start(str(script), list(args), env, base_env(), cwd)
    if proc is None:
        proc = subprocess.Popen([*wrap, sys.executable, str(script), *args], env=env, cwd=cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc


def run_python(command: Sequence[str | Path], env: dict[str, str] | None = None, cwd: str | Path | None = None,
               timeout: float = 100.0) -> subprocess.CompletedProcess:
    """What ``subprocess.run([sys.executable, *command], env=env, cwd=cwd, capture_output=True, text=True,
    timeout=timeout)`` gives (``command``: ``SCRIPT ARGS``, ``-c CODE ARGS`` or ``-m MODULE ARGS``; ``env`` the
    whole environment, this process's where None), in a fork of the server that has imported torch
    (tests/forkserver.py) where the environment lets a fork stand for a fresh process, else in a fresh one."""
    command = [str(c) for c in command]
    proc = spawn(command[0], command[1:], dict(os.environ if env is None else env), cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess([sys.executable, *command], proc.returncode, out, err)


def run_cli(args: Sequence[str | Path], env: dict[str, str], cwd: str | Path | None = None,
            timeout: float = 120.0) -> subprocess.CompletedProcess:
    """``python -m triton_dist_tune ARGS`` in environment ``env`` (the whole of it) and folder ``cwd``, as
    :func:`run_python` runs it (the test of the console script starts a fresh one)."""
    return run_python(["-m", "triton_dist_tune", *args], env, cwd, timeout)


def run_process(script: str | Path, args: list[str] | None = None, env: dict[str, str] | None = None,
                timeout: float = 100.0) -> subprocess.CompletedProcess:
    """``python SCRIPT ARGS`` in an environment of ``base_env(env)`` (no rank of a group unless ``env`` says so), as
    :func:`run_python` runs it."""
    return run_python([script, *(args or [])], base_env(env), timeout=timeout)


def ended_result(proc: Any, timeout: float) -> dict:
    """The last ``RESULT`` of a process from :func:`spawn` once it has ended (killed after ``timeout`` seconds);
    asserts that it exited 0 and printed one."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except Exception:
        proc.kill()
        out, err = proc.communicate()
    results = parse_results(out)
    assert proc.returncode == 0 and results, (proc.returncode, out[-2000:], err[-3000:])
    return results[-1]


def run_ranks(script: str | Path, n: int, args: list[str] | None = None, env: dict[str, str] | None = None,
              timeout: float = 120.0, per_rank_env: dict[int, dict[str, str]] | None = None,
              stuck: Sequence[int] = (), wrap: dict[int, Sequence[str]] | None = None,
              cwd: str | Path | None = None) -> list[RankResult]:
    """Run ``n`` ranks of ``script`` (``-m`` with ``args`` beginning with a module's name: ``python -m``) in folder
    ``cwd`` (this process's where None); raise TimeoutError (after killing them) if they outlive ``timeout``.
    The ranks in ``stuck`` are expected never to end: once every other rank has ended they are SIGKILLed (not
    waited for; their return code is then -9). ``wrap``: rank -> a command that runs that rank (:func:`spawn`)."""
    port = free_port()
    procs = []
    for rank in range(n):
        rank_env = base_env(env)
        rank_env.update({"RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
                         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        rank_env.update((per_rank_env or {}).get(rank, {}))
        procs.append(spawn(script, list(args or []), rank_env, (wrap or {}).get(rank, ()), cwd))
    deadline = time.monotonic() + timeout
    outputs = []
    timed_out = False
    for rank, proc in sorted(enumerate(procs), key=lambda item: item[0] in stuck):  # the stuck ranks last
        if rank in stuck and not timed_out:
            proc.kill()
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            for p in procs:
                p.kill()
            out, err = proc.communicate()
        outputs.append((rank, proc.returncode, out, err))
    outputs = [output[1:] for output in sorted(outputs)]
    if timed_out:
        logs = Path(base_env(env).get("TRITON_DIST_AUTOTUNE_LOG_DIR", "/nonexistent"))

        def log_tail(rank: int) -> str:  # the folder is gone with the test's: its last lines say where each rank was
            path = logs / f"rank-{rank}.log"
            return path.read_text(errors="replace")[-1500:] if path.is_file() else "(none)"

        detail = "\n".join(f"--- rank {r} rc={rc}\nstdout: {out[-1000:]}\nstderr: {err[-2000:]}\nlog: {log_tail(r)}"
                           for r, (rc, out, err) in enumerate(outputs))
        raise TimeoutError(f"{script} did not finish within {timeout} s\n{detail}")
    return [RankResult(r, rc, out, err, parse_results(out)) for r, (rc, out, err) in enumerate(outputs)]


def torchrun_command(torchrun_args: Sequence[str], script: str | Path, args: Sequence[str],
                     env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``python -m torch.distributed.run TORCHRUN_ARGS SCRIPT ARGS`` and its environment (``base_env(env)``): a real
    torchrun, whose workers are forks of a server that has imported torch (tests/fork_rank.py stands in for
    ``python SCRIPT`` and passes on torchrun's signals and the rank's exit status), or fresh ``python SCRIPT``
    processes where the environment asks for them (as :func:`spawn`)."""
    full = base_env(env)
    entry = [str(script)]
    address = forkserver.stand_in_address(full, base_env())
    if address:
        full[forkserver.ADDRESS_VAR] = address
        entry.insert(0, str(HERE / "fork_rank.py"))
    return [sys.executable, "-m", "torch.distributed.run", *torchrun_args, *entry, *args], full


#: a launch of mpiexec that failed in less than this many seconds with nothing on stdout, its launcher saying of no
#: process that it exited, failed in Open MPI's own launcher (a rank's failure is said: "... exited ..."). The bound
#: only keeps a long job from running again: the launcher's failure takes 0.07 s alone here and 0.28 s beside 4 busy
#: loops, and once took more than the 1 s this was under the suite's load (the launch-failure test saw no warning)
LAUNCHER_FAILED_WITHIN_S = 10.0
#: how many times :func:`run_mpiexec` starts a job whose launcher failed so
MPIEXEC_LAUNCHES = 3


def run_mpiexec(script: str | Path, n: int, args: list[str], env: dict[str, str],
                timeout: float = 100, python_args: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """Run ``n`` ranks of ``script`` under ``mpiexec`` (skips the test where there is none). Past ``timeout`` every
    process of the job is killed (:func:`kill_session`) and subprocess.TimeoutExpired raised, as subprocess.run
    does. ``python_args``: the interpreter's own, before the script (``-m mpi4py``).

    A launch that failed before any rank could run (a nonzero exit within :data:`LAUNCHER_FAILED_WITHIN_S`, nothing
    printed on stdout, no process said to have exited) is Open MPI's launcher failing, not the job: it is started
    again, at most :data:`MPIEXEC_LAUNCHES` times in all, each failure's stderr given as a warning (seen once in CI:
    exit 213 after 0.06 s, the launcher's own help text on stderr, the exit a failed session-directory setup gives).
    A job that fails so every time is returned as the last launch ended; one whose ranks ran is never started
    again."""
    import shutil
    import warnings

    import pytest

    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("mpiexec not installed")
    full = base_env({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **env})
    entry = [*python_args, str(script)]
    # the ranks' environment as mpiexec gives it: Open MPI's library folder (its prefix's lib) first in
    # LD_LIBRARY_PATH, which the loader reads at start; where this guess is wrong the server refuses the ranks, and
    # each becomes a fresh ``python SCRIPT``
    ranks_env = {**full, "LD_LIBRARY_PATH": ":".join(filter(None, [str(Path(mpiexec).resolve().parent.parent / "lib"),
                                                                   full.get("LD_LIBRARY_PATH")]))}
    address = None
    if tuple(python_args) in ((), ("-m", "mpi4py")):
        address = forkserver.stand_in_address(ranks_env, base_env())
    if address:  # each rank a fork of the tests' server (tests/fork_rank.py stands in for ``python SCRIPT``)
        full[forkserver.ADDRESS_VAR] = address
        entry = ["-u", str(HERE / "fork_rank.py"), *entry]
    cmd = [mpiexec, "-n", str(n), "--oversubscribe", sys.executable, *entry, *args]
    for launch in range(1, MPIEXEC_LAUNCHES + 1):
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_session(proc.pid)
            proc.communicate()
            raise
        seconds = time.monotonic() - t0
        launcher_failed = (proc.returncode != 0 and not out and seconds < LAUNCHER_FAILED_WITHIN_S
                           and "exited" not in err)
        if not launcher_failed or launch == MPIEXEC_LAUNCHES:
            return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
        warnings.warn(f"mpiexec's launcher failed (launch {launch} of {MPIEXEC_LAUNCHES}, exit {proc.returncode} "
                      f"after {seconds:.2f} s), starting the job again; its stderr:\n{err}", stacklevel=2)
    raise AssertionError("unreachable")


def stopping_at(marker: Path, resume_after: float, until: Callable[[], bool] | None = None,
                after: float = 1.0) -> threading.Thread:
    """A started thread that freezes the process whose pid is written at ``marker`` (SIGSTOP) as soon as the file
    appears (within 90 s), and continues it (SIGCONT) ``resume_after`` seconds later; or, given ``until``, as soon
    as ``until()`` holds (looked at every 0.1 s) and ``after`` s more have passed, if that comes first (a stop that
    needs to last only until a peer has acted on it)."""

    def stop_and_continue() -> None:
        deadline = time.monotonic() + 90
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        if marker.exists():
            pid = int(marker.read_text())
            os.kill(pid, signal.SIGSTOP)
            resume = time.monotonic() + resume_after
            while until is not None and time.monotonic() < resume and not until():
                time.sleep(0.1)
            time.sleep(max(0.0, min(after if until is not None else resume_after, resume - time.monotonic())))
            os.kill(pid, signal.SIGCONT)

    stopper = threading.Thread(target=stop_and_continue, daemon=True)
    stopper.start()
    return stopper


def journaled(folder: Path, rank: int, states: Sequence[str] = ("interrupted", "hung")) -> bool:
    """Whether a journal of ``rank`` under ``folder`` holds a record of one of ``states`` (its watchdog gave up: it
    exits next). Read without the journal's lock, as text: a reader holding the lock would send a rank opening its
    journal then to another slot."""
    said = [f'"state": "{state}"' for state in states]
    for path in folder.rglob(f"*.rank{rank}*journal"):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if any(s in text for s in said):
            return True
    return False


def stopping_together(markers: list[Path], resume_after: float, stagger: float = 0.0,
                      lead: float = 0.0) -> threading.Thread:
    """A started thread that, once every one of ``markers`` holds a pid (within 90 s), freezes those processes
    together (SIGSTOP: a machine paused, a debugger holding every rank; the last marker's ``lead`` s before the
    others) and continues them ``resume_after`` s later, in the order of ``markers``, ``stagger`` s apart."""

    def stop_and_continue() -> None:
        deadline = time.monotonic() + 90
        while not all(m.exists() for m in markers) and time.monotonic() < deadline:
            time.sleep(0.02)
        pids = [int(m.read_text()) for m in markers if m.exists()]
        for n, pid in enumerate(reversed(pids)):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(lead if n == 0 else 0.0)
        time.sleep(resume_after)
        for n, pid in enumerate(pids):
            time.sleep(stagger if n else 0.0)
            os.kill(pid, signal.SIGCONT)

    stopper = threading.Thread(target=stop_and_continue, daemon=True)
    stopper.start()
    return stopper


def kill_session(session: int) -> None:
    """SIGKILL every process of session ``session`` (a launcher started with ``start_new_session``), until none is
    left. Open MPI's launcher (``prterun``) puts each rank in a process group of its own, so killing the launcher
    or its process group leaves the ranks running, reparented to init; they stay in its session."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        members = [pid for pid in _session_members(session) if pid != os.getpid()]
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # gone meanwhile
                pass
        time.sleep(0.05)


def _session_members(session: int) -> list[int]:
    """The live processes of session ``session`` (from /proc; zombies left out: they are dead already)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == session:  # state, ppid, pgrp, session
            members.append(int(entry))
    return members


def run_cases(script: str | Path, n: int, cases: list[str], env: dict[str, str] | None = None,
              timeout: float = 120.0) -> dict[str, list[RankResult]]:
    """Run several cases of one scenario script one after another in one job of ``n`` ranks (one rank start
    instead of one per case); every rank must exit 0. Returns, for each case, one RankResult per rank holding
    that case's RESULT lines (without their ``case`` field); exit status and output are the whole job's."""
    results = run_ranks(script, n, cases, env=env, timeout=timeout)
    assert all(r.returncode == 0 for r in results), describe(results)
    return {case: [RankResult(r.rank, r.returncode, r.stdout, r.stderr,
                              [{k: v for k, v in x.items() if k != "case"} for x in r.results
                               if isinstance(x, dict) and x.get("case") == case]) for r in results]
            for case in cases}


def describe(results: list[RankResult]) -> str:
    return "\n".join(f"--- rank {r.rank} rc={r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}" for r in results)


def run_command(cmd: list, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; past ``timeout`` kill the whole group (torchrun's workers too) and fail."""
    proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{cmd} outlived {timeout} s:\n{out[-2000:]}\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def assert_calls_after_a_late_result_agree(said: dict, n: int, then: str, rank_log: Path, applied: bool,
                                           prompt_s: float) -> None:
    """The calls after a contextual rank's interruption, in the scenarios of passover_cases.py's
    ``contextual_interrupted_waiting_for_its_result`` (``said``: its ``RESULT`` lines by (rank, what)): the call again
    (``again``) and a new one (``new``) end alike on every rank within ``prompt_s``, with one config per key (the
    group's, config 0 for key 64), the key not tuned again where ``then`` is ``same``; the ranks' decisions agree and
    no journal is left; the interrupted rank's log (``rank_log``) says the late result was ``applied`` or not."""
    for what in ("again", "new"):
        each = [said[(r, what)] for r in range(n)]
        assert all(e["error"] is None and e["seconds"] < prompt_s for e in each), each
        assert len({str(e["configs"]) for e in each}) == 1, each  # one config per key on every rank
    assert said[(0, "again")]["configs"]["64"] == 64, said[(0, "again")]  # the group's choice (config 0)
    if then == "same":
        assert all(said[(r, "again")]["runs"] == 1 for r in range(n)), said  # not tuned again
    decided = [said[(r, "decided")] for r in range(n)]
    assert all(d["keys"] == decided[0]["keys"] and d["journals"] == [] for d in decided), decided
    log = rank_log.read_text()
    assert ("which an interruption ended this rank's wait for, read at this rank's next call on the group: applied"
            in log) is applied, log[-3000:]

