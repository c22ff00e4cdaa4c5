"""``python -u fork_rank.py SCRIPT ARGS`` (or ``-m MODULE ARGS``): a worker of a real torchrun, or a rank of a real
mpiexec, that is ``python SCRIPT ARGS`` forked from the tests' server (tests/forkserver.py), which has imported torch
already; torchrun and mpiexec start this script in its place (``harness.torchrun_command``, ``harness.run_mpiexec``).
It imports no torch: it connects to the server whose address is in ``TDT_TEST_FORKSERVER_ADDRESS``, hands over its
stdout and stderr with its argv, environment and working folder, passes on every signal its launcher sends it to the
rank, and ends with the rank's exit status (by the same signal where the rank died of one). Where the server refuses
the environment (a variable read when torch starts differs from the server's) or cannot be reached, it becomes
``python -u SCRIPT ARGS``."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from forkserver import ADDRESS_VAR, frame, recv_message  # no torch: the server side imports it

#: what torchrun's agent sends its workers (SIGTERM, then SIGKILL, which reaches only this process: the server then
#: kills the rank), and what a user's terminal would
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _fresh(script: str, args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-u", script, *args])


def main() -> None:
    script, args = sys.argv[1], sys.argv[2:]
    if script != "-m":  # ``-m MODULE ARGS`` as on Python's command line (mpiexec's ``python -m mpi4py SCRIPT``)
        script = os.path.abspath(script)
    address = os.environ.get(ADDRESS_VAR)
    if not address:
        _fresh(script, args)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("\0" + address)  # a name in Linux's abstract namespace
        request = json.dumps({"script": script, "args": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(sock, [frame(request)], [1, 2])
        answer = recv_message(sock)
    except OSError:
        answer = None
    if answer is None or "pid" not in answer:
        sock.close()
        _fresh(script, args)
    pid = answer["pid"]

    def pass_on(sig: int, _frame: object) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    for sig in PASSED_ON:
        signal.signal(sig, pass_on)
    message = recv_message(sock)  # the rank's end (a signal passed on meanwhile resumes the wait)
    status = 1 if message is None else message["status"]  # the server gone: the rank with it
    if status < 0:  # died of a signal: so does this process (SIGKILL's and SIGSTOP's disposition is fixed)
        if -status not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status & 0xFF)


if __name__ == "__main__":
    main()
