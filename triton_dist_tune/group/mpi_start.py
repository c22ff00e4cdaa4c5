"""MPI's start (``MPI_Init``, at the first import of ``mpi4py.MPI``) bounded by ``init_distributed``'s init timeout.

Under ``mpiexec ... python -m mpi4py`` with ``MASTER_PORT`` unset, ``init_distributed`` agrees the store's port
through MPI (:mod:`.rendezvous`), and so starts MPI by importing ``mpi4py.MPI``. Open MPI's start waits for every rank
of the job to start MPI too, inside one C call that holds the GIL: no Python thread or timer runs meanwhile. A rank
that came 20 s late held the others 20 s past an init timeout of 5 s, silently; one that crashed or hung before its
``init_distributed`` would have held them for ever.

So the import runs watched by a small process of its own (:func:`started`): it waits for this process to say the
import ended (its end of a pipe closed: the process's own end, or its death, closes it), and past the init timeout it
writes one line on stderr naming what the rank waited for, then ends this process (SIGTERM, then SIGKILL two
seconds later: a process inside MPI's start runs no Python signal handler), and mpiexec ends the job. ``mpi4py``'s own
``MPI.Init_thread`` holds the GIL as well, so no in-process bound exists (measured with Open MPI 5 and mpi4py 4.1).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

#: the watcher: waits on its stdin for ``seconds``; at EOF (the import ended, or the process died) it ends quietly,
#: else it writes ``text`` and ends the process ``pid``
_WATCHER = """
import os, select, signal, sys, time
pid, seconds, text = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ready, _, _ = select.select([sys.stdin], [], [], seconds)
if not ready:
    sys.stderr.write(text + "\\n")
    sys.stderr.flush()
    for sig, pause in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 0.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        time.sleep(pause)
"""


def started(rank: int, seconds: float, longer: str) -> Any:
    """``mpi4py.MPI``, imported (MPI started) within ``seconds``; past them, this process is ended, the watcher's line
    on stderr (see the module docstring). ``longer``: how to wait longer, as the line's last words."""
    import os

    text = (f"triton_dist_tune: init_distributed: rank {rank} waited {seconds:g} s in MPI's start (MPI_Init, at the "
            f"first import of mpi4py.MPI, with MASTER_PORT unset: the store's port is agreed through MPI), which "
            f"waits for every rank of the job to start MPI too: a rank never came (it crashed, hangs, or was started "
            f"late, before its init_distributed); this rank ends {longer}")
    try:
        watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, str(os.getpid()), f"{seconds:g}", text],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True)
    except OSError:  # no process to spare: the start goes unwatched, as before
        watcher = None
    try:
        from mpi4py import MPI
    finally:
        if watcher is not None:
            watcher.stdin.close()  # type: ignore[union-attr]
            try:
                watcher.wait(timeout=5)
            except subprocess.TimeoutExpired:
                watcher.kill()
    return MPI
