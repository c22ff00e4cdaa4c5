"""``python -m triton_dist_tune ARGS`` in a process of its own, forked from one that has already imported torch.

A fresh interpreter spends about 2.5 s of CPU importing torch (the command line reads its version) before it runs a
command; tests/test_cli.py runs about 60 commands. This script is started once per pytest worker, imports torch, Triton
and matplotlib (nothing of triton_dist_tune: every command imports it fresh, and reads its variables then), and for each
request forks a child that takes the command's environment, working folder and ``sys.argv``, sends its stdout and
stderr to files, and runs ``triton_dist_tune`` as ``__main__`` as ``python -m`` does. The child's exit status is the
command's: ``sys.exit``'s code, or 1 with the traceback on stderr for an uncaught exception.

Protocol: one JSON request a line on stdin (``args``, ``env``, ``cwd``, ``stdout``, ``stderr``, ``timeout``); one
JSON reply a line on stdout (``rc``, ``timed_out``). :func:`run_cli` is the client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _child(request: dict) -> None:
    import runpy
    import traceback

    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.argv = ["triton_dist_tune", *request["args"]]
        sys.path[0] = os.getcwd()  # as python -m: the working folder first
        runpy.run_module("triton_dist_tune", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    import torch  # noqa: F401  (the imports every command makes first: the versions a decision depends on)
    import triton  # noqa: F401

    try:  # what every ``plot`` command imports first (1 s of CPU each): the package's own backend choice
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        pass

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        deadline = time.monotonic() + request["timeout"]
        timed_out = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                os.kill(pid, 9)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.005)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "timed_out": timed_out}), flush=True)


_server: subprocess.Popen | None = None
_lock = threading.Lock()
_folder: Path | None = None


def run_cli(args: list[str], env: dict[str, str], cwd: Path | str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run one command in a forked child, in environment ``env`` (the whole of it) and folder ``cwd``. Raises
    TimeoutExpired past ``timeout``, as subprocess.run would."""
    global _server, _folder
    with _lock:
        if _server is None or _server.poll() is not None:
            _server = subprocess.Popen([sys.executable, __file__], env=env, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
        if _folder is None:  # the children's output files
            _folder = Path(tempfile.mkdtemp(prefix="triton-dist-tune-cli-"))
        stem = _folder / f"cli-{time.monotonic_ns()}"
        out, err = Path(f"{stem}.out"), Path(f"{stem}.err")
        request = {"args": [str(a) for a in args], "env": env, "cwd": str(cwd or os.getcwd()), "stdout": str(out),
                   "stderr": str(err), "timeout": timeout}
        _server.stdin.write(json.dumps(request) + "\n")
        _server.stdin.flush()
        reply = _server.stdout.readline()
        assert reply, "the forking server of tests/cli_fork.py ended"
        reply = json.loads(reply)
        argv = [sys.executable, "-m", "triton_dist_tune", *args]
        stdout, stderr = out.read_text(), err.read_text()
        out.unlink()
        err.unlink()
        if reply["timed_out"]:
            raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
        return subprocess.CompletedProcess(argv, reply["rc"], stdout, stderr)


if __name__ == "__main__":
    serve()
