"""A rank forked by tests/forkserver.py is what ``python SCRIPT ARGS`` would be: its argv, environment, working
directory, ``sys.path[0]``, ``__main__``, exit status (``sys.exit``, an uncaught exception, a signal), output,
exit handlers and a parent shared by the ranks of a job; ``python -c CODE`` and ``python -m MODULE`` forked are what
a fresh process gives; and the environment that must start a fresh process does;
and under a real torchrun (tests/fork_rank.py standing in for each worker) the same, torchrun's signals and exit
statuses included; and under a real mpiexec, MPI's finalize at exit and its abort included."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import forkserver
import pytest
from harness import HERE, base_env, parse_results, run_mpiexec, run_python, run_ranks, torchrun_command

SCRIPT = '''
import atexit, json, os, sys, time
import __main__
# each line in one write: two ranks under torchrun share one pipe, and print's two writes (the text, then the
# newline: PYTHONUNBUFFERED) interleaved there ("...}EXIT-HANDLER")
atexit.register(lambda: os.write(1, b"EXIT-HANDLER\\n"))
os.write(1, ("RESULT " + json.dumps({"argv": sys.argv[1:], "path0": sys.path[0], "file": __file__,
         "main": __main__.__file__, "name": __name__, "rank": os.environ["RANK"], "cwd": os.getcwd(),
         "only_here": os.environ.get("ONLY_HERE"), "parent": os.getppid()}) + "\\n").encode())
how = sys.argv[1]
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise ValueError("raised at top level")
if how == "kill":
    os.kill(os.getpid(), 9)
if how == "sleep":  # until a signal ends it
    with open(os.environ["PID_FILE"] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.environ["PID_FILE"] + ".tmp", os.environ["PID_FILE"])
    time.sleep(60)
'''


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "sub" / "script.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how, code", [("ok", 0), ("exit", 3), ("raise", 1), ("kill", -signal.SIGKILL)])
def test_a_forked_rank_is_what_python_script_would_be(script, how, code):
    results = run_ranks(script, 2, [how], env={"ONLY_HERE": "yes"}, timeout=100)
    assert [r.returncode for r in results] == [code, code], [r.stderr for r in results]
    for r in results:
        res = r.result
        assert res["argv"] == [how] and res["path0"] == str(script.parent) and res["file"] == str(script)
        assert res["main"] == str(script) and res["name"] == "__main__" and res["rank"] == str(r.rank)
        assert res["only_here"] == "yes"
        assert ("EXIT-HANDLER" in r.stdout) == (how != "kill")
    if how == "raise":
        assert "ValueError: raised at top level" in results[0].stderr
        assert "forkserver.py" not in results[0].stderr  # the traceback is the script's own
    assert results[0].result["parent"] == results[1].result["parent"]  # one parent, as under torchrun


CODE = ("import json, os, sys; print(json.dumps([sys.argv, sys.path[0], __name__, os.getcwd(), "
        "globals().get('__file__'), sorted(k for k in globals() if k != '__builtins__')])); sys.exit(sys.argv[-1])")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [["-c", CODE, "a", "5"], ["-c", "raise ValueError('at top level')"],
                                     ["-m", "json.tool", "--sort-keys", "in.json"], ["-m", "no_such_module_here"]],
                         ids=["code", "code raising", "module", "missing module"])
def test_python_c_and_python_m_forked_are_what_a_fresh_process_gives(command, tmp_path):
    """run_python forks ``python -c CODE ARGS`` and ``python -m MODULE ARGS`` too (the tests' short scripts and
    module runs: each fresh one imports torch again, about 1.2 s of CPU): argv, ``sys.path[0]``, ``__main__``'s
    names, the working folder, the output and the exit status are a fresh process's."""
    (tmp_path / "in.json").write_text('{"b": 1, "a": 2}')
    forked = run_python(command, base_env(), cwd=tmp_path, timeout=100)
    fresh = subprocess.run([sys.executable, *command], env=base_env(), cwd=tmp_path, capture_output=True, text=True,
                           timeout=100)
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout), (forked, fresh)
    assert forked.stderr.replace(os.path.basename(sys.executable), "python") == \
        fresh.stderr.replace(os.path.basename(sys.executable), "python"), (forked.stderr, fresh.stderr)
    assert forkserver._SERVERS, "no server forked it"


def test_a_variable_read_when_torch_starts_asks_for_a_fresh_process(script):
    base = base_env()
    assert forkserver.start(str(script), ["ok"], {**base, "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, base) is None
    assert forkserver.start(str(script), ["ok"], {**base, "HOME": "/elsewhere"}, base) is None
    proc = forkserver.start(str(script), ["ok"], {**base, "RANK": "0", "TRITON_DIST_AUTOTUNE_TIMEOUT": "7"}, base)
    assert proc is not None
    out, _ = proc.communicate(timeout=100)
    assert proc.returncode == 0 and json.loads(out.split("RESULT ", 1)[1].splitlines()[0])["rank"] == "0"


def test_one_server_serves_test_after_test(script, monkeypatch):
    """The server is kept while only variables nobody reads at start change (pytest's PYTEST_CURRENT_TEST changes
    with every test): before, it was started again for every test, 4-5 s of CPU importing torch each time."""
    first = forkserver.start(str(script), ["ok"], {**base_env(), "RANK": "0"}, base_env())
    assert first is not None
    first.communicate(timeout=100)
    server = first.server
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/elsewhere.py::test_next (call)")
    second = forkserver.start(str(script), ["ok"], {**base_env(), "RANK": "0"}, base_env())
    assert second is not None
    second.communicate(timeout=100)
    assert second.server is server and server.alive() and second.returncode == 0


def test_ranks_with_another_triton_interpret_are_forked_from_a_server_started_with_it(script):
    """TRITON_INTERPRET is read when Triton starts: ranks that set it otherwise (the compile-pass tests' ``0``) come
    from a second server started with that value, and the first keeps serving the rest; another start-time
    variable beside it still asks for a fresh process."""
    base = base_env()
    interpreted = forkserver.start(str(script), ["ok"], {**base, "RANK": "0"}, base)
    compiled = [forkserver.start(str(script), ["ok"], {**base, "RANK": str(r), "TRITON_INTERPRET": "0"}, base)
                for r in (0, 1)]
    assert interpreted is not None and None not in compiled
    assert compiled[0].server is compiled[1].server is not interpreted.server
    assert compiled[0].server.env["TRITON_INTERPRET"] == "0" and interpreted.server.env["TRITON_INTERPRET"] == "1"
    parents = []
    for proc in (interpreted, *compiled):
        out, _ = proc.communicate(timeout=100)
        assert proc.returncode == 0, out
        parents.append(json.loads(out.split("RESULT ", 1)[1].splitlines()[0])["parent"])
    assert parents[1] == parents[2] == compiled[0].server.proc.pid
    assert forkserver.start(str(script), ["ok"], {**base, "TRITON_INTERPRET": "0", "HOME": "/elsewhere"}, base) is None


# -- torchrun's workers: tests/fork_rank.py stands in for ``python SCRIPT`` ------------------------------------------


@pytest.mark.timeout(120)
def test_torchruns_workers_are_forked_and_see_what_python_script_would(script):
    """Under a real torchrun each worker is a fork of the server (its parent: the server, not torchrun's stand-in)
    and sees what ``python SCRIPT`` would."""
    cmd, env = torchrun_command(["--standalone", "--nproc-per-node", "2", "--max-restarts", "0",
                                 "--monitor-interval", "0.1"], script, ["ok"], {"ONLY_HERE": "yes"})
    assert cmd[cmd.index(str(script)) - 1] == str(HERE / "fork_rank.py")
    job = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=100)
    assert job.returncode == 0, job.stderr[-3000:]
    results = sorted(parse_results(job.stdout), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == ["0", "1"], job.stderr[-3000:]
    server = next(s for s in forkserver._SERVERS.values() if s.address == env[forkserver.ADDRESS_VAR])
    for r in results:
        assert r["argv"] == ["ok"] and r["file"] == str(script) and r["name"] == "__main__"
        assert r["only_here"] == "yes" and r["parent"] == server.proc.pid
    assert job.stdout.count("EXIT-HANDLER") == 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how, code", [("exit", 3), ("raise", 1), ("kill", -signal.SIGKILL)])
def test_a_stand_in_ends_with_its_ranks_exit_status(script, how, code):
    """What torchrun reads of a worker, the stand-in's exit status, is the forked rank's: a code, or death by the
    same signal (before: a rank killed by SIGKILL left its stand-in exiting 1)."""
    _, env = torchrun_command([], script, [], {"RANK": "0"})
    done = subprocess.run([sys.executable, "-u", str(HERE / "fork_rank.py"), str(script), how], env=env,
                          capture_output=True, text=True, timeout=100)
    (result,) = parse_results(done.stdout)
    assert done.returncode == code and result["argv"] == [how] and result["parent"] != os.getpid(), done.stderr
    assert ("ValueError: raised at top level" in done.stderr) == (how == "raise")


MPI_SCRIPT = '''
import json, os, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
print("RESULT " + json.dumps({"rank": comm.Get_rank(), "total": total, "parent": os.getppid()}), flush=True)
if sys.argv[1] == "abort":
    if comm.Get_rank() == 1:
        comm.Abort(5)
    comm.Barrier()  # rank 0: waits for the rank that aborted, until mpiexec ends it
'''


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["ends", "abort"])
def test_mpiexecs_ranks_are_forked_finalize_at_their_exit_and_abort_the_job(tmp_path, how):
    """Under a real mpiexec each rank is a fork of the server (tests/fork_rank.py stands in for ``python SCRIPT``):
    a rank that ends calls MPI's finalize as mpi4py's exit handler does in a fresh process (before: the fork's exit
    skipped it, and mpiexec failed the job: a process ended without finalizing); ``MPI_Abort`` ends every rank and
    mpiexec with its code."""
    pytest.importorskip("mpi4py")
    path = tmp_path / "mpi_script.py"
    path.write_text(MPI_SCRIPT)
    job = run_mpiexec(path, 2, [how], {}, timeout=90)
    results = sorted(parse_results(job.stdout), key=lambda r: r["rank"])
    assert [r["total"] for r in results] == [3, 3], job.stderr[-3000:]
    servers = {s.proc.pid for s in forkserver._SERVERS.values()}
    assert all(r["parent"] in servers for r in results), (results, servers)
    if how == "ends":
        assert job.returncode == 0 and "finalize" not in job.stderr.lower(), job.stderr[-3000:]
    else:
        assert job.returncode == 5 and "MPI_ABORT" in job.stderr, (job.returncode, job.stderr[-3000:])


LAST_PID = "/proc/sys/kernel/ns_last_pid"


def ended_rank() -> forkserver.ForkedProcess:
    """A forked rank that has ended, its exit told by the server and not yet read (``poll`` and ``wait`` read it);
    skips the test where the kernel cannot be asked for a pid (:func:`given_its_pid`: root only)."""
    if os.geteuid() != 0 or not os.access(LAST_PID, os.W_OK):
        pytest.skip("asking the kernel for a pid needs root")
    env = base_env()
    ended = forkserver.start("-c", ["pass"], env, env)
    assert ended is not None
    with ended.server.cond:
        assert ended.server.cond.wait_for(lambda: ended.pid in ended.server.exits, 60)
    return ended


def given_its_pid(pid: int, start: Callable[[], Any]) -> Any:
    """What ``start()`` starts, as the process the kernel gave ``pid`` (asked through ``ns_last_pid``, then set back
    to where it was); another process of the machine may take it first, so it is asked again, 20 times at most (then
    the test is skipped)."""
    for _ in range(20):
        with open(LAST_PID) as f:
            last = int(f.read())
        with open(LAST_PID, "w") as f:
            f.write(str(pid - 1))
        proc = start()
        with open(LAST_PID, "r+") as f:  # the machine's next pids go on from where they were: the pids given since
            if int(f.read()) < last:  # ``pid`` (other tests' ranks, some ended moments ago) are not given again now
                f.seek(0)
                f.write(str(last))
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.communicate(timeout=30)
    pytest.skip("the kernel gave the pid asked for to other processes 20 times")


@pytest.mark.timeout(120)
def test_a_rank_given_the_pid_of_an_earlier_one_is_not_read_ended_by_that_ones_exit():
    """The kernel gives pids again (``pid_max`` is 32,768 here, and a run of the suite starts thousands of processes
    and threads). A rank forked with the pid of an earlier rank that no one waited for is running, not ended with
    that one's exit status (before: the server's word of the first one's exit stayed in the test process's table,
    and ``poll()`` of the second read it at once)."""
    first = ended_rank()
    env = base_env()
    second = given_its_pid(first.pid, lambda: forkserver.start("-c", ["import time; time.sleep(60)"], env, env))
    try:
        assert second.poll() is None
    finally:
        second.kill()
        second.communicate(timeout=30)
    assert second.returncode == -signal.SIGKILL


@pytest.mark.timeout(120)
def test_killing_an_ended_rank_signals_no_process_that_was_given_its_pid():
    """As ``Popen.send_signal``: a rank that has ended (its exit told, not yet read) is not signalled, for its pid
    may be another process's by now (before: ``kill()`` sent SIGKILL to whatever process the kernel had given the
    pid)."""
    ended = ended_rank()
    other = given_its_pid(ended.pid, lambda: subprocess.Popen(["sleep", "60"]))
    try:
        ended.kill()
        time.sleep(0.2)
        assert other.poll() is None
        assert ended.returncode == 0
    finally:
        other.kill()
        other.wait()


def stand_in(script, tmp_path, **extra: str) -> tuple[subprocess.Popen, int]:
    """tests/fork_rank.py started as torchrun starts a worker, its rank sleeping; and the rank's pid."""
    _, env = torchrun_command([], script, [], {"PID_FILE": str(tmp_path / "pid"), "RANK": "0", **extra})
    proc = subprocess.Popen([sys.executable, "-u", str(HERE / "fork_rank.py"), str(script), "sleep"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    rank = int((tmp_path / "pid").read_text())
    assert rank != proc.pid  # a fork, not the stand-in become python SCRIPT
    return proc, rank


def gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.timeout(120)
def test_a_stand_in_passes_on_torchruns_sigterm_and_ends_by_it(script, tmp_path):
    """torchrun ends its workers by signalling their process groups, which a forked rank is not in: the stand-in
    passes the signal on, and ends by it as the rank did."""
    proc, rank = stand_in(script, tmp_path)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM and gone(rank, 10)


@pytest.mark.timeout(120)
def test_a_stand_in_killed_takes_its_rank_with_it(script, tmp_path):
    """SIGKILL (torchrun's last word to a worker) reaches only the stand-in: the server then kills its rank."""
    proc, rank = stand_in(script, tmp_path)
    proc.kill()
    proc.communicate(timeout=30)
    assert gone(rank, 10)


@pytest.mark.timeout(120)
def test_a_stand_in_whose_environment_the_server_refuses_runs_python_script(script, tmp_path):
    """torchrun's workers with a variable read when torch starts that the server does not share run as a fresh
    ``python SCRIPT`` (the stand-in execs it)."""
    _, env = torchrun_command([], script, [], {"RANK": "0"})
    assert env.get(forkserver.ADDRESS_VAR)  # a server is there to ask
    env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"  # as if torchrun had set it
    done = subprocess.run([sys.executable, "-u", str(HERE / "fork_rank.py"), str(script), "exit"], env=env,
                          capture_output=True, text=True, timeout=100)
    (result,) = parse_results(done.stdout)
    assert done.returncode == 3 and result["argv"] == ["exit"] and result["file"] == str(script)
    assert result["parent"] == os.getpid()  # the stand-in's own process, which became python SCRIPT


@pytest.mark.timeout(120)
def test_the_server_answers_no_stand_in_of_another_user(script, tmp_path):
    """The listening socket's name is open to every local user: a process of another user that connects and asks
    for a rank gets no answer and no rank (the connection is closed); one of the server's own user gets its rank."""
    if os.getuid() != 0:
        pytest.skip("another user's process needs root to start here")
    _, env = torchrun_command([], script, [], {"RANK": "0", "PID_FILE": str(tmp_path / "pid")})
    request = forkserver.frame(json.dumps({"script": str(script), "args": ["ok"], "env": env,
                                           "cwd": str(tmp_path)}).encode())

    def ask(uid: int | None) -> int:
        """In a child process (as user ``uid``): 0 where the server closed the connection, 1 where it answered."""
        child = os.fork()
        if child == 0:
            code = 2
            try:
                if uid is not None:
                    os.setgid(uid)
                    os.setuid(uid)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(60)
                    sock.connect("\0" + env[forkserver.ADDRESS_VAR])
                    null = os.open(os.devnull, os.O_WRONLY)
                    try:
                        socket.send_fds(sock, [request], [null, null])
                        code = 0 if forkserver.recv_message(sock) is None else 1
                    except (BrokenPipeError, ConnectionResetError):  # closed by the server while it was sent
                        code = 0
            except BaseException as exc:
                print(f"ask({uid}): {exc!r}", file=sys.stderr)
            finally:
                os._exit(code)
        return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])

    assert ask(65534) == 0  # nobody: no answer, no rank
    assert ask(None) == 1  # the server's own user


def test_a_jobs_port_is_outside_the_kernels_ephemeral_range_and_free(monkeypatch):
    """A port found by binding port 0 comes from the range outgoing connections take theirs from, and one was taken
    that way before a job's store listened on it (EADDRINUSE beside the suite): the jobs' ports lie below it, in
    the worker's slice, and nothing listens there. Every worker has a slice of its own, however many there are
    (before, with 2,000 ports each, the workers past the tenth had none: 16 workers failed this test)."""
    from ports import PORTS_FROM, ephemeral_ports, free_port, port_slice

    low = ephemeral_ports()[0]
    assert low > PORTS_FROM + 17 * 200, "this machine's ephemeral range starts too low for the test"
    first, end = port_slice()
    assert PORTS_FROM <= first and end <= low and end - first >= 200, (first, end, low)
    ports = {free_port() for _ in range(20)}
    assert all(first <= p < end for p in ports), (ports, first, end)
    for count in (1, 6, 16):
        slices = []
        for k in range(count):
            monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{k}")
            monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
            slices.append(port_slice())
        monkeypatch.delenv("PYTEST_XDIST_WORKER")
        slices.append(port_slice())  # slot 0: a pass run beside the workers
        assert all(b - a >= 200 and PORTS_FROM <= a and b <= low for a, b in slices), (count, slices)
        assert all(b1 <= a2 or b2 <= a1 for i, (a1, b1) in enumerate(slices) for a2, b2 in slices[i + 1:]), slices
    assert len(ports) > 1  # picked at random in the slice, not one fixed port that two jobs could share
    port = ports.pop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
