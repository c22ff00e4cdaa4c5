"""Which key-value store is this job's, where global rank 0 hosts it: its port, and the job's token in it.

Without torchrun's agent (mpiexec, Slurm, a launch by hand) global rank 0 hosts the job's store at
``MASTER_ADDR:MASTER_PORT`` and every other rank connects there. Two such jobs on one host with one port (both with
``MASTER_PORT`` unset: 29500): the second job's rank 0 could not bind it (a long line of torch's), and the second
job's other ranks connected to the first job's store; one that came while the first job named its attempt took part
in the naming: a process of each job then formed one group and all-reduced each other's tensors, and the first
job's own rank 1 was left out (``tests/test_init_distributed.py``). Now:

- rank 0 writes the job's token (:func:`token`: the launcher's job variables and the world size) as soon as its
  store listens (:func:`publish`), and every other rank reads it before it writes anything there (:func:`check`):
  another job's store (another token), or another program's (no token within the wait), ends the rank with one
  line naming ``MASTER_PORT`` and what to do; the same job's token with another world size says that the job's
  ranks disagree on its size (a launch script's mistake, which another port would not mend);
- a port in use ends rank 0 with one such line (:func:`port_in_use`);
- ``MASTER_PORT`` unset under ``python -m mpi4py`` (mpiexec's ranks; or MPI initialized by the program): rank 0
  starts the store on a port the kernel picks and hands it, and a random token, to every rank through MPI
  (:func:`plan`): two such jobs on one host simply work. MPI's start, which waits for every rank holding the GIL,
  is bounded by the init timeout from another process (:mod:`.mpi_start`). Elsewhere MPI is not initialized for
  it: at exit Open MPI's finalize waits for every rank, so a rank that raised would not end (nor mpiexec end the
  job) until all had; ``python -m mpi4py`` aborts the job on an unhandled exception instead;
- ``MASTER_PORT`` unset in a job of one rank (no torchrun agent): its store is on a port the kernel picks, which
  no other rank needs to know (two such processes on one host each start; before, the second's port was in use);
- ``MASTER_PORT`` unset otherwise, and the launcher names no job (none of :data:`IDENTITY_VARIABLES`): nothing
  could tell this job's store on the default port from another job's, so :func:`plan` raises a
  :class:`~triton_dist_tune.BadInputError` asking for a ``MASTER_PORT`` (as torch's own ``env://`` start does).
"""

from __future__ import annotations

import os
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .. import settings
from ..errors import AutotuneError, BadInputError, GroupTimeoutError, describe_error
from . import epoch, mpi_start, store_silence

#: the port of the store where ``MASTER_PORT`` is unset (torch's and torchrun's default)
DEFAULT_PORT = 29500
#: the key of the job's token in its store (:func:`publish`)
TOKEN_KEY = "triton_dist_tune/job_token"
#: how often a rank that found this job's token with another world size reads it again (s): :func:`check`
STALE_LOOK_S = 0.1
#: the launcher's variables that name a job (the same on each of its ranks, another in each job), in the token
IDENTITY_VARIABLES = (*settings.JOB_VARIABLES, "SLURM_STEP_ID")
#: what every message of a store that is not this job's ends with
ADVICE = ("two jobs on one host use one port: give each job its own MASTER_PORT, the same on all of its ranks (under "
          "mpiexec, `python -m mpi4py` picks a free one where MASTER_PORT is unset)")
#: this process's meeting agreed through MPI: a later ``init_distributed`` (after ``destroy_process_group``) meets
#: on the same store, which rank 0 still hosts
_by_mpi: list[Meeting] = []
#: MPI requests given up on at their deadline, kept with their buffers (MPI may still write into them)
_abandoned: list[Any] = []


@dataclass(frozen=True)
class Meeting:
    """Where this rank meets its job's store and how it knows the store is its job's."""

    port: int
    #: the job's token: every rank of the job has the same, another job another (:func:`token`)
    token: str
    #: how the port was chosen, as the messages say it (``MASTER_PORT=29501``, ``MASTER_PORT unset: ...``)
    said: str
    #: the store rank 0 started already, on the port agreed through MPI (None: not started here)
    store: Any = None


def parse_port(text: str | None) -> int:
    """``MASTER_PORT`` as a port number (:data:`DEFAULT_PORT` when unset), or a BadInputError naming it."""
    if text is None:
        return DEFAULT_PORT
    port = int(text) if text.strip().isdigit() else -1
    if not 1 <= port <= 65535:
        raise BadInputError(f"MASTER_PORT={text!r} is not a port: a whole number from 1 to 65535")
    return port


def identity(env: dict[str, str] | None = None) -> str:
    """The launcher's names of this job (``VAR=value`` of each of :data:`IDENTITY_VARIABLES` set; torchrun's run id
    ``none`` does not count), joined; empty where it names none."""
    env = dict(os.environ) if env is None else env
    named = ((name, env.get(name, "").strip()) for name in IDENTITY_VARIABLES)
    return " ".join(f"{name}={value}" for name, value in named
                    if value and not (name == "TORCHELASTIC_RUN_ID" and value.lower() == "none"))


def token(world: int) -> str:
    """This job's token from the launcher: its names (:func:`identity`) and its number of ranks."""
    return f"{identity() or '(no job variable)'} world={world}"


def plan(job: settings.Launcher, rank: int, world: int, join_s: float, start: Callable[[int], Any]) -> Meeting:
    """Where this rank meets its job's store (see the module docstring). ``start(port)``: rank 0 starts the store
    (on a port the kernel picks for port 0) and returns it; called where the port is agreed through MPI. Raises a
    BadInputError where ``MASTER_PORT`` is unset, several ranks meet on a store rank 0 hosts, MPI is not initialized
    and the launcher names no job."""
    if job.master_port is not None:
        port = parse_port(job.master_port)
        return Meeting(port, token(world), f"MASTER_PORT={port}")
    unset = Meeting(DEFAULT_PORT, token(world), f"MASTER_PORT unset: the default {DEFAULT_PORT}")
    if job.agent_store:
        return unset
    if world == 1:  # a store nobody else joins: on a port the kernel picks (two such processes on one host)
        return Meeting(0, token(world), "MASTER_PORT unset, one rank: a free port")
    if _by_mpi and _by_mpi[0].token.endswith(f" world={world}"):
        return Meeting(_by_mpi[0].port, _by_mpi[0].token, _by_mpi[0].said)
    comm = _mpi_world(rank, world, join_s)
    if comm is not None:
        meeting = _through_mpi(comm, rank, world, join_s, start)
        _by_mpi[:] = [meeting]
        return meeting
    if not identity():
        raise BadInputError(
            f"init_distributed: MASTER_PORT is unset and the launcher names no job (none of "
            f"{', '.join(IDENTITY_VARIABLES)} is set): on the default port {DEFAULT_PORT} the {world} ranks could "
            f"not tell this job's key-value store from another job's on the same host; set MASTER_PORT to a free "
            f"port of this job's own, the same on every rank (torchrun and launch.sh set one)")
    return unset


def _mpi_world(rank: int, world: int, join_s: float) -> Any:
    """mpi4py's ``COMM_WORLD`` where MPI is initialized in this process (not finalized) and it holds the launcher's
    rank and world size, else None. MPI is initialized for it (importing ``mpi4py.MPI``) only under ``python -m
    mpi4py``, whose unhandled exception aborts the whole job: elsewhere a rank that raised would wait at its exit,
    in Open MPI's finalize, for every other rank to end, instead of ending (and mpiexec ending the job). That start
    waits for every rank, holding the GIL: it is bounded by ``join_s`` from another process
    (:func:`.mpi_start.started`)."""
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is None and "mpi4py.run" in sys.modules:
            mpi = mpi_start.started(rank, join_s, epoch.LONGER)
        if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
            return None
        comm = mpi.COMM_WORLD
        return comm if (comm.Get_rank(), comm.Get_size()) == (rank, world) else None
    except Exception:  # a broken MPI library: the launcher's variables decide
        return None


def _through_mpi(comm: Any, rank: int, world: int, join_s: float, start: Callable[[int], Any]) -> Meeting:
    """Rank 0 starts the store on a port the kernel picks and broadcasts it with a random token over ``comm``; every
    rank returns the meeting. Rank 0 broadcasts whatever happened (port 0: its start failed), so no rank waits on
    it for ever; the wait is bounded by ``join_s`` (a non-blocking broadcast, tested until then)."""
    mpi = sys.modules["mpi4py.MPI"]
    buffer, store, failed = bytearray(24), None, None
    if rank == 0:
        try:
            store = start(0)
            struct.pack_into("!I16s", buffer, 0, int(store.port), os.urandom(8).hex().encode())
        except Exception as exc:  # (broadcast below all the same)
            failed = exc
    request = comm.Ibcast([buffer, mpi.BYTE], root=0)
    deadline, pause = time.monotonic() + join_s, 0.001
    while not request.Test():
        if time.monotonic() >= deadline:
            _abandoned.append((request, buffer))
            raise GroupTimeoutError(f"init_distributed: rank {rank} waited {join_s:g} s for rank 0's port of the "
                                    f"job's key-value store through MPI (MASTER_PORT unset): rank 0 never sent it "
                                    f"{epoch.LONGER}")
        time.sleep(pause)
        pause = min(0.05, pause * 2)
    port, drawn = struct.unpack_from("!I16s", buffer, 0)
    if failed is not None:
        raise AutotuneError(f"init_distributed: rank 0 could not start the job's key-value store on a free port "
                            f"(MASTER_PORT unset, agreed through MPI): {describe_error(failed)}") from None
    if port == 0:
        raise AutotuneError(f"init_distributed: rank {rank}: rank 0 could not start the job's key-value store on a "
                            f"free port (MASTER_PORT unset, agreed through MPI): rank 0's error says why")
    return Meeting(port, f"mpi={drawn.decode()} world={world}", f"MASTER_PORT unset: port {port} agreed through MPI",
                   store)


def publish(store: Any, meeting: Meeting) -> None:
    """Rank 0, as soon as its store listens: write the job's token, which every other rank reads (:func:`check`)."""
    store.set(TOKEN_KEY, meeting.token)


def check(store: Any, meeting: Meeting, rank: int, where: str, seconds: float) -> None:
    """A rank other than the store's host, just connected: return where the store holds this job's token (rank 0
    writes it as soon as the store listens), else raise one line naming ``MASTER_PORT``: another job's token, or
    none within ``seconds`` (another program's store, or a job of an earlier version of this package). This job's
    token with another world size is waited for to change, up to ``seconds``: rank 0 keeps its store when the job
    starts again in the same processes with fewer ranks (after ``destroy_process_group``), and writes the new size
    only when its own ``init_distributed`` comes, which a rank of the new start may reach first."""
    deadline, theirs = time.monotonic() + seconds, ""
    try:
        store.set_timeout(timedelta(seconds=seconds))
        theirs = bytes(store.get(TOKEN_KEY)).decode(errors="replace")
        while _resized(theirs, meeting.token) and time.monotonic() < deadline:
            time.sleep(STALE_LOOK_S)
            theirs = bytes(store.get(TOKEN_KEY)).decode(errors="replace")
    except Exception as exc:
        if store_silence.was_cut():
            raise
        if not _resized(theirs, meeting.token):  # (else rank 0 ended meanwhile, its size still another: said below)
            raise AutotuneError(f"init_distributed: rank {rank} found no job's token at {where} within {seconds:g} s "
                                f"({meeting.said}; {describe_error(exc)}): another program's store listens there; "
                                f"{ADVICE}") from None
    if _resized(theirs, meeting.token):  # one job, two sizes: not a port's
        world, own = theirs.rpartition(" world=")[2], meeting.token.rpartition(" world=")[2]
        raise AutotuneError(f"init_distributed: rank {rank}: the job's ranks disagree on its size: rank 0, which "
                            f"hosts {where}, has a world size of {world[:20]}, this rank {own} (the launcher's "
                            f"{', '.join(settings.SIZE_VARIABLES)}; rank 0's did not change while this rank waited): "
                            "give every rank of the job the same"
                            + ("" if identity() else f"; or, the launcher naming no job, another job's store listens "
                               f"there ({meeting.said}): {ADVICE}"))
    if theirs != meeting.token:
        raise AutotuneError(f"init_distributed: rank {rank}: {where} is another job's ({meeting.said}): its job is "
                            f"'{theirs[:200]}', this rank's '{meeting.token}'; {ADVICE}")


def _resized(theirs: str, ours: str) -> bool:
    """Whether the token ``theirs`` is this job's (``ours``) with another world size (not an mpi4py-agreed one)."""
    (job, _, _), (mine, _, _) = theirs.rpartition(" world="), ours.rpartition(" world=")
    return theirs != ours and job == mine and not mine.startswith("mpi=")


def port_in_use(exc: BaseException) -> bool:
    """Whether a store's failed start says its port is in use."""
    text = str(exc)
    return "EADDRINUSE" in text or "address already in use" in text.lower()


def in_use_message(meeting: Meeting, where: str) -> str:
    """Rank 0's one line for a port in use (:func:`port_in_use`)."""
    return (f"init_distributed: rank 0 could not start {where}: port {meeting.port} is in use ({meeting.said}; "
            f"another job's store, or another program, listens there; or a process of this job also started as "
            f"global rank 0 hosts it: start each rank once); {ADVICE}")
