"""Rank processes forked from a server that has already imported torch, triton and this package.

A rank started as ``python SCRIPT`` spends about 3 CPU-seconds importing torch and Triton before it runs a line of
the scenario; the suite starts several hundred ranks. A server imports them once; each rank is then a fork of it,
in which the environment, working directory, ``sys.argv``, ``sys.path[0]``, stdin/stdout/stderr and ``__main__``
are set as ``python SCRIPT ARGS`` would set them, and the script runs to a normal interpreter exit (thread joins,
atexit handlers, flushed output, the exit status of ``sys.exit`` or of an uncaught exception, death by a signal)
without the interpreter's teardown: the objects still alive then (the server's imports among them) are not
collected, so their destructors do not run (a file left open and unflushed in a global loses what it buffers; the
tuner's files are flushed and closed by their own code). That teardown cost each fork about 0.7 CPU-s (a job of 2
ranks that only starts its group: 1.58 CPU-s with it, 0.19 without).

One server for every rank of a job: its ranks share their parent process, as they do under torchrun (the log
folder's job name is taken from the parent's start time). What a fork cannot give: each rank its own hash seed
(``PYTHONHASHSEED``); every forked rank has the server's.

:func:`start` returns ``None`` where a fork cannot stand for a fresh process: an environment that differs from the
server's in a variable read when torch, Triton or Python start (``TORCH*``, ``PYTHON*``, ``OMP_*``, ...), another
Python, or ``TDT_TEST_FORKSERVER=0``; the caller then starts a fresh process as before. A variable of
:data:`KEYED` that differs gets a server of its own, started with that value.

The server is ``python -c "... forkserver.main(FD, ADDRESS)"``, reading requests on the socket FD from the test
process and on connections to the listening socket ADDRESS from the launchers' stand-ins (tests/fork_rank.py).

Workers of a real torchrun and ranks of a real mpiexec (:func:`stand_in_address`, ``harness.torchrun_command``,
``harness.run_mpiexec``): the launcher starts ``python -u fork_rank.py SCRIPT ARGS`` for each, a stand-in that
imports no torch. It connects to the server's listening socket (its address in :data:`ADDRESS_VAR`; only processes
of the server's own user are answered), hands over its stdout and stderr, and the server forks the rank from there,
checking its environment as :func:`start` does (torchrun sets some variables of its own; mpiexec, MPI's and a
library folder). The stand-in passes on the signals its launcher sends it (torchrun signals its workers' process
groups, which the rank is not in), ends with the rank's exit status (by the same signal where the rank died of one),
and where it is killed itself the server kills the rank. An MPI rank that ends calls MPI's finalize as mpi4py's exit
handler would (:func:`_end`). Where the server refuses, the stand-in becomes ``python -u SCRIPT ARGS`` (exec).
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

#: a variable whose value differs from the server's forces a fresh process where its name starts with one of these
#: (read when Python, torch, Triton or an OpenMP runtime start), unless it starts with one of LAZY. MPI's own
#: (``OMPI_*``, ``PMIX_*``, ...) are not among them: a rank reads them when it starts MPI (mpi4py's import), after the
#: fork, as the server loads no MPI library (mpi4py is not in PRELOAD; torch's wheels have no MPI backend)
AT_START = ("PYTHON", "TORCH", "PYTORCH", "TRITON_", "CUDA", "NCCL", "GLOO", "NVSHMEM", "OMP_", "MKL", "KMP_",
            "LD_", "KINETO", "HIP", "ROCM", "XLA", "TF_", "MALLOC", "GLIBC",
            # folders a module may have resolved when the server imported it (the home folder, the temporary one)
            "HOME", "USER", "XDG_", "TMP", "TEMP")
#: read each time they are used (the tuner's settings; Triton's knobs are read on access)
LAZY = ("TRITON_DIST_AUTOTUNE_", "TRITON_PRINT_AUTOTUNING", "TRITON_CACHE_DIR", "TORCHELASTIC_")
#: variables read at start for which a test asks for whole jobs of ranks with another value (the compile-pass tests
#: run with TRITON_INTERPRET=0; mpiexec gives its ranks an LD_LIBRARY_PATH that names Open MPI's library folder): a
#: second server started with that value forks them, instead of a fresh process each
KEYED = ("TRITON_INTERPRET", "LD_LIBRARY_PATH")
#: what the server imports before it forks; the last two are what a rank's first kernel launch imports (triton 3.6
#: and 3.9): 0.05-0.1 s per rank alone, 47 CPU-s of the suite's forked ranks under its load (py-spy)
PRELOAD = ("torch", "torch.distributed", "triton", "triton.language", "numpy", "triton_dist_tune",
           "triton.compiler.code_generator", "triton.experimental.gluon")
#: set by torchrun for each worker and read only when an NCCL process group starts (never on CPU ranks)
TORCHRUN_SETS = ("TORCH_NCCL_ASYNC_ERROR_HANDLING",)
#: the variable that gives tests/fork_rank.py the address of the server to fork its rank from
ADDRESS_VAR = "TDT_TEST_FORKSERVER_ADDRESS"


def frame(data: bytes) -> bytes:
    """A message as it goes on a socket: its length (4 bytes), then its bytes."""
    return struct.pack("!I", len(data)) + data


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_message(sock: socket.socket) -> dict | None:
    """One JSON message of the server's (as :func:`frame` puts it); None where the peer is gone."""
    header = _recv_exact(sock, 4)
    body = None if header is None else _recv_exact(sock, struct.unpack("!I", header)[0])
    return None if body is None else json.loads(body)


# -- the test process's side ---------------------------------------------------------------------------------------


class Server:
    """One forking server process and the socket to it."""

    def __init__(self, env: dict[str, str]):
        self.env = dict(env)
        # where torchrun's stand-in workers connect (tests/fork_rank.py): a name in Linux's abstract namespace
        # (the socket's address is this name after a NUL byte), which no file backs and which goes with the server
        self.address = f"triton-dist-tune-forkserver-{os.getpid()}-{id(self)}"
        ours, theirs = socket.socketpair()
        code = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); import forkserver; "
                f"del sys.path[0]; forkserver.main({theirs.fileno()}, {self.address!r})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], env=self.env,
                                     pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        # one thread reads every message; the callers wait on the condition (several threads of one test may
        # start and wait for ranks at once: none may hold the socket while it waits)
        self.cond = threading.Condition()
        self.send_lock = threading.Lock()
        self.pids: list[int] = []
        self.exits: dict[int, int] = {}
        self.dead = False
        self.listening = threading.Event()  # set once the stand-ins' socket is bound (tests/fork_rank.py)
        threading.Thread(target=self._read, name="forkserver-reader", daemon=True).start()

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def discard(self) -> None:
        """Kill the server, wait for it and close the socket to it (left to the collector, an unclosed socket or a
        process not waited for warns in the test that happens to run then)."""
        self.proc.kill()
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _read(self) -> None:
        try:
            while (msg := recv_message(self.sock)) is not None:
                with self.cond:
                    if "listening" in msg:
                        self.listening.set()
                    elif "pid" in msg:
                        # the word of an earlier rank's exit that no one waited for, whose pid the kernel gave again
                        # (it came before this: the server reaps a rank, says so, and only then forks the next)
                        self.exits.pop(msg["pid"], None)
                        self.pids.append(msg["pid"])
                    elif "exit" in msg:
                        self.exits[msg["exit"]] = msg["status"]
                    self.cond.notify_all()
        except OSError:
            pass
        with self.cond:
            self.dead = True
            self.cond.notify_all()
        self.listening.set()  # whoever waits for it learns the server is gone (alive() says so)

    def fork(self, script: str, args: list[str], env: dict[str, str], out_w: int, err_w: int,
             cwd: str | None = None) -> int:
        request = json.dumps({"script": script, "args": args, "env": env, "cwd": cwd or os.getcwd()}).encode()
        with self.send_lock:  # the server answers requests in order: one request in flight
            socket.send_fds(self.sock, [frame(request)], [out_w, err_w])
            with self.cond:
                if not self.cond.wait_for(lambda: self.pids or self.dead, 60) or not self.pids:
                    raise ConnectionError("fork server did not answer")
                return self.pids.pop(0)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self.cond:
            self.cond.wait_for(lambda: pid in self.exits or self.dead, timeout)
            return self.exits.pop(pid, None)


_SERVERS: dict[tuple[tuple[str, str | None], ...], Server] = {}  # by what their environment changes of KEYED


@atexit.register
def _stop_servers() -> None:
    """Close every server (it kills what ranks it still has) and wait for it."""
    for server in _SERVERS.values():
        server.sock.close()
    for server in _SERVERS.values():
        try:
            server.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
    _SERVERS.clear()


def _searched(value: str | None) -> tuple[str, ...] | None:
    """The folders a search path (``LD_LIBRARY_PATH``) names, each once, in order: what the loader searches (mpiexec
    names its own library folder three times before the caller's)."""
    return None if value is None else tuple(dict.fromkeys(value.split(":")))


def _differs(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return [k for k in set(a) | set(b)
            if k.startswith(AT_START) and not k.startswith(LAZY)
            and (_searched(a.get(k)) != _searched(b.get(k)) if k == "LD_LIBRARY_PATH" else a.get(k) != b.get(k))]


class ForkedProcess:
    """What ``subprocess.Popen(..., stdout=PIPE, stderr=PIPE, text=True)`` gives, for a forked rank."""

    def __init__(self, server: Server, script: str, args: list[str], env: dict[str, str], cwd: str | None = None):
        self.server = server
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self.pid = server.fork(script, args, env, out_w, err_w, cwd)
        finally:
            os.close(out_w)
            os.close(err_w)
        self.returncode: int | None = None
        self._bufs = {out_r: bytearray(), err_r: bytearray()}
        self._open = [out_r, err_r]
        self._out, self._err = out_r, err_r

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.wait_exit(self.pid, 0.0)
        return self.returncode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: an ended rank's pid may be another process's by now
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def _drain(self, deadline: float | None) -> bool:
        """Read both pipes until both are closed (True) or the deadline passes (False)."""
        with selectors.DefaultSelector() as sel:
            for fd in self._open:
                sel.register(fd, selectors.EVENT_READ)
            while self._open:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        self._bufs[key.fd] += data
                    else:
                        sel.unregister(key.fd)
                        os.close(key.fd)
                        self._open.remove(key.fd)
        return True

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.wait_exit(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.pid, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._drain(deadline):
            raise subprocess.TimeoutExpired(self.pid, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

        def text(fd: int) -> str:
            return self._bufs[fd].decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")

        return text(self._out), text(self._err)


def _server_for(env: dict[str, str], base: dict[str, str]) -> Server | None:
    """The server started with ``base`` (the environment every test's ranks start from), or with ``base`` and
    ``env``'s values of :data:`KEYED` where they differ (started if need be); None where no fork can stand for a
    fresh process of environment ``env``."""
    differing = sorted(_differs(env, base))
    if os.environ.get("TDT_TEST_FORKSERVER", "1") == "0" or any(k not in KEYED for k in differing):
        return None
    slot = tuple((k, env.get(k)) for k in differing)
    wanted = {k: v for k, v in base.items() if k not in differing}
    wanted.update((k, v) for k, v in slot if v is not None)
    server = _SERVERS.get(slot)
    # a server is started again only where a variable read at start differs: comparing whole environments
    # restarted it for every test (pytest sets PYTEST_CURRENT_TEST per test), 4-5 s of CPU each time
    if server is None or not server.alive() or _differs(server.env, wanted):
        if server is not None:
            server.discard()
        server = _SERVERS[slot] = Server(wanted)
    return server


def start(script: str, args: list[str], env: dict[str, str], base: dict[str, str],
          cwd: str | None = None) -> ForkedProcess | None:
    """``python SCRIPT ARGS`` forked from the server :func:`_server_for` names, in folder ``cwd`` (this process's
    where None); None where no fork can stand for a fresh process. ``script`` may be ``-c`` or ``-m`` as on
    Python's command line: ``args`` then begins with the code or the module's name."""
    server = _server_for(env, base)
    if server is None:
        return None
    try:
        where = script if script in ("-c", "-m") else os.path.abspath(script)
        return ForkedProcess(server, where, [str(a) for a in args], env, None if cwd is None else str(cwd))
    except (ConnectionError, OSError):  # the server died (it failed to import, or was killed): a fresh process
        server.discard()
        for slot in [k for k, v in _SERVERS.items() if v is server]:
            del _SERVERS[slot]
        return None


def stand_in_address(env: dict[str, str], base: dict[str, str]) -> str | None:
    """The address of the server that forks the ranks a launcher (torchrun, mpiexec) starts in environment ``env``
    (their stand-ins, tests/fork_rank.py, connect to it), or None where no fork can stand for them."""
    server = _server_for(env, base)
    if server is None or not server.listening.wait(60) or not server.alive():
        return None
    return server.address


# -- the server's side -------------------------------------------------------------------------------------------


def _send(sock: socket.socket, msg: dict) -> None:
    sock.sendall(frame(json.dumps(msg).encode()))


def _receive(sock: socket.socket) -> tuple[dict, list[int]] | None:
    """One request and the descriptors sent with it (the rank's stdout and stderr); None where the peer is gone."""
    try:
        header, fds, _, _ = socket.recv_fds(sock, 4, 2)
    except OSError:
        return None
    if not header:
        return None
    try:
        rest = _recv_exact(sock, 4 - len(header)) if len(header) < 4 else b""
        body = None if rest is None else _recv_exact(sock, struct.unpack("!I", header + rest)[0])
    except OSError:
        body = None
    if body is None:
        for f in fds:
            os.close(f)
        return None
    return json.loads(body), fds


def _serve(fd: int, address: str) -> dict | None:
    """Answer requests until the test process goes; in a forked child, return its request (to run it).

    Requests come from the test process (socket ``fd``) and from torchrun's stand-in workers, each on a connection
    of its own to the socket listening at ``address``; each rank's pid and exit status go back to whoever asked."""
    import importlib

    # listening before the imports, and saying so: the test process hands out the address only then, and a stand-in
    # that comes while the imports run waits in the backlog (refused, it would start a fresh process instead)
    test = socket.socket(fileno=fd)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + address)
    listener.listen(64)
    _send(test, {"listening": True})
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if os.environ.get("TRITON_INTERPRET") != "1":
        # Triton's version key (a hash of its files and C library; cached per process, so a fork inherits it):
        # every rank with compiles computes it first, 0.6 s alone and 34 CPU-s of the suite's ranks under load
        try:
            from triton.runtime.cache import triton_key

            triton_key()
        except Exception:
            pass
    import gc

    gc.collect()
    gc.freeze()  # the imported modules' objects: a rank's collections never walk (and so never copy) them
    env = dict(os.environ)
    sel = selectors.DefaultSelector()
    sel.register(test, selectors.EVENT_READ)
    sel.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # rank -> where its exit status goes
    running = True
    while running:
        try:
            events = sel.select(0.05 if children else None)
        except InterruptedError:
            continue
        for key, _ in events:
            sock = key.fileobj
            if sock is listener:
                conn, _ = listener.accept()
                if _peer_uid(conn) == os.getuid():  # any local user may connect to the name: only ours are served
                    sel.register(conn, selectors.EVENT_READ)
                else:
                    conn.close()
                continue
            got = _receive(sock)
            if got is None:
                sel.unregister(sock)
                if sock is test:  # the test process is gone
                    running = False
                    break
                for pid in [p for p, c in children.items() if c is sock]:  # a stand-in killed: so is its rank
                    _kill(pid)
                sock.close()
                continue
            request, fds = got
            if sock is not test and (refused := _differs({k: v for k, v in request["env"].items()
                                                           if k not in TORCHRUN_SETS}, env)):
                for f in fds:
                    os.close(f)
                _tell(sock, {"refused": sorted(refused)})
                continue
            pid = os.fork()
            if pid == 0:  # the rank: none of the server's sockets
                for other in [k.fileobj for k in sel.get_map().values()]:
                    other.close()
                sel.close()
                request["fds"] = fds
                return request
            for f in fds:
                os.close(f)
            children[pid] = sock
            running = _tell(sock, {"pid": pid}) or sock is not test
        while running and children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            to = children.pop(pid)
            told = to.fileno() < 0 or _tell(to, {"exit": pid, "status": os.waitstatus_to_exitcode(status)})
            running = told or to is not test
    for pid in children:  # the test process is gone: so are its ranks
        _kill(pid)
    return None


def _peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (Linux's SO_PEERCRED: pid, uid, gid)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _tell(sock: socket.socket, msg: dict) -> bool:
    """Send ``msg``; False where the peer is gone."""
    try:
        _send(sock, msg)
        return True
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _become(request: dict) -> None:
    """In the forked child: be ``python SCRIPT ARGS`` (``python -c CODE ARGS``, ``python -m MODULE ARGS``) with the
    request's environment, and run the script (the code, the module as ``__main__``)."""
    import atexit
    import builtins
    import gc
    import importlib.machinery

    out_fd, err_fd = request["fds"]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    for f in (null, out_fd, err_fd):
        os.close(f)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    if "numpy.random" in sys.modules:  # a fresh process seeds numpy's global generator from the OS
        sys.modules["numpy.random"].seed()
    script, args = request["script"], request["args"]
    main = sys.modules["__main__"]
    main.__dict__.clear()
    main.__dict__.update(__name__="__main__", __builtins__=builtins, __doc__=None, __package__=None, __spec__=None,
                         __annotations__={})
    # the server froze its objects (out of the collector's walks); the last exit handler gives them back, so that
    # where the interpreter's teardown still runs (a KeyboardInterrupt that ends the child: see main) its final
    # collection frees them as in a fresh process (nanobind counts what is left as leaked)
    atexit.register(gc.unfreeze)
    if script == "-m":  # as ``python -m``: the working folder first; runpy makes the module's file argv[0]
        import runpy

        sys.path[0] = os.getcwd()
        sys.argv = ["-m", *args[1:]]
        runpy._run_module_as_main(args[0], alter_argv=True)
        return
    if script == "-c":
        sys.argv, sys.path[0] = ["-c", *args[1:]], ""
        main.__dict__["__loader__"] = importlib.machinery.BuiltinImporter
        code = compile(args[0], "<string>", "exec")
    else:
        sys.argv, sys.path[0] = [script, *args], os.path.dirname(script)
        main.__dict__.update(__file__=script, __cached__=None,
                             __loader__=importlib.machinery.SourceFileLoader("__main__", script))
        with open(script, "rb") as f:
            code = compile(f.read(), script, "exec")
    try:
        exec(code, main.__dict__)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as e:  # as an uncaught exception: the hook prints it (without this file's frames)
        e = e.with_traceback(e.__traceback__.tb_next)
        # kept where CPython keeps an uncaught exception, for the exit handlers to read (the tuner's count-out)
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, e.__traceback__
        if sys.version_info >= (3, 12):
            sys.last_exc = e
        sys.excepthook(type(e), e, e.__traceback__)
        raise SystemExit(1) from None


def _end(status: int) -> None:
    """End a forked child as the interpreter ends a process, without its teardown: wait for its threads that are
    not daemons, run its exit handlers, flush its output, then exit with ``status``. The teardown (the modules'
    and the last collection of every object the server imported, torch's and Triton's) took about 0.7 CPU-s per
    child, more than the rest of a short script's run; a fresh process pays it too, after 3 CPU-s of imports."""
    import atexit
    import threading

    threading._shutdown()  # what the interpreter's exit waits for first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader gone: as at an interpreter's exit, nothing more
            pass
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and sys.modules["mpi4py"].rc.finalize is not False and mpi.Is_initialized() \
            and not mpi.Is_finalized():
        mpi.Finalize()  # what mpi4py's own exit handler does last at an interpreter's exit (C's Py_AtExit)
    os._exit(status)


def _status(code: object) -> int:
    """The exit status of ``SystemExit(code)``, as the interpreter makes it (a code that is no number is printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def main(fd: int, address: str) -> None:
    """The server (``python -c ... main(FD, ADDRESS)``): a forked child returns here from :func:`_serve` to become
    its rank, and ends at :func:`_end` (a ``KeyboardInterrupt`` that ends it goes on to the interpreter, which
    ends the process by that signal)."""
    request = _serve(fd, address)
    if request is not None:
        try:
            _become(request)
            status = 0
        except SystemExit as exc:
            status = _status(exc.code)
        _end(status)
