"""Starting torch.distributed so that a restarted job never reads the previous attempt's addresses.

Under ``torchrun --max-restarts=N`` the agent's key-value store outlives a failed attempt; a restarted worker's
plain ``init_process_group`` can read the dead attempt's keys and fail (``connectFullMesh ... Connection refused``)
or hang. :func:`init_distributed` gives every attempt its own key prefix, named alike on every node
(:mod:`~triton_dist_tune.group.epoch`).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .. import settings
from ..errors import AutotuneError, BadInputError, GroupTimeoutError, describe_error
from . import claims, epoch, exits, rendezvous, store_silence

#: the store this process hosts (global rank 0 without torchrun's agent), by its address: a later call after
#: ``destroy_process_group`` starts again on it, since its port stays bound (:mod:`.exits` keeps it for the wait at
#: exit; before, rank 0's new store met EADDRINUSE and the job could not start again)
_hosted: dict[tuple[str, int], Any] = {}


def _required(value: int | None, names: tuple[str, ...]) -> int:
    if value is None:
        for name in names:  # set, but not to a number: say so (the launcher reads only numbers)
            if os.environ.get(name, "") != "":
                raise BadInputError(f"{name}={os.environ[name]!r} is not a whole number of 0 or more (a rank or a "
                                    f"count of ranks)")
        raise BadInputError(f"none of {list(names)} is set: start the job with torchrun, launch.sh or mpiexec")
    return value


def backend_problem(name: str | None) -> str | None:
    """What is wrong with ``name`` as a ``torch.distributed`` backend (one, or one per device as
    ``cpu:gloo,cuda:nccl``): a backend torch does not know, or one this build of torch lacks (``nccl`` in a CPU
    build); None where nothing is, or ``name`` is None (the default)."""
    if name is None:
        return None
    import torch
    import torch.distributed as dist

    known = [b for b in dist.Backend.backend_list if b != "undefined"]  # those a plugin registered too
    for part in name.split(","):
        backend = part.rpartition(":")[2].strip().lower()
        if backend not in known:
            return (f"{name!r}: torch.distributed has no backend {backend!r} (it knows {', '.join(known)}; default: "
                    "nccl with CUDA, else gloo)")
        available = getattr(dist, f"is_{backend}_available", None)
        if available is not None and not available():
            return (f"{name!r}: this torch ({torch.__version__}) was built without {backend}"
                    f"{' (CPU ranks: gloo, the default without CUDA)' if backend == 'nccl' else ''}")
    return None


def init_distributed(backend: str | None = None, timeout_s: float = 600.0) -> Any:
    """Initialize the default process group, restart-safe, and return it.

    Reads the rank and world size from torchrun's variables (or Open MPI's / PMI's), connects to the store at
    ``MASTER_ADDR:MASTER_PORT`` (torchrun's agent hosts it; otherwise rank 0 does), and prefixes every key with
    ``attempt<name>/``, where ``<name>`` is this attempt's, agreed through the store by every rank
    (:func:`~triton_dist_tune.group.epoch.agree`; torchrun's restart count is each node's own). The backend
    defaults to NCCL when CUDA is available, else gloo; with CUDA, each process uses GPU ``LOCAL_RANK``. Does
    nothing but return the group when already initialized.

    Where global rank 0 hosts the store (no torchrun agent), it writes the job's token there and every other rank
    checks it before it writes anything, so that a rank never joins another job that uses the same port; each other
    rank then claims its number in this start, so that two processes started with one rank end the start at once,
    saying so (:mod:`~triton_dist_tune.group.claims`); with ``MASTER_PORT`` unset the port is agreed through MPI
    under ``python -m mpi4py``, else it is 29500 where the launcher names the job, else a
    :class:`~triton_dist_tune.BadInputError` asks for one (:mod:`~triton_dist_tune.group.rendezvous`).

    ``timeout_s`` is the store's and the process group's timeout. The wait for the ranks to join (a rank's connect
    to the store, the naming, rank 0's word that every rank took part) is bounded by ``..._INIT_TIMEOUT`` where it
    is set (:func:`~triton_dist_tune.settings.init_timeout`), else by ``timeout_s`` too: a rank that never starts
    ends each rank that did with a :class:`~triton_dist_tune.GroupTimeoutError` naming the store's address and the
    ranks missing (before, no variable bounded it: a rank whose store never started raised torch's
    ``DistNetworkError`` after two connect tries of ``timeout_s`` each, and a rank that joined while another never
    did waited in torch's ``init_process_group``; tests/test_cli_campaign_errors.py).
    """
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.group.WORLD
    job = settings.launcher()
    rank = _required(job.rank, settings.RANK_VARIABLES)
    world = _required(job.world_size, settings.SIZE_VARIABLES)
    if not 0 <= rank < world:  # else rank 0 never starts the store, or a client waits timeout_s for a store
        raise BadInputError(f"rank {rank} is not below the world size {world}: the launcher's "
                            f"{list(settings.RANK_VARIABLES)} and {list(settings.SIZE_VARIABLES)} disagree")
    rendezvous.parse_port(job.master_port)  # (a malformed one named before anything starts)
    if not job.master_addr:  # (torch's env:// start refuses it too; before, each rank waited to resolve '')
        raise BadInputError(f"MASTER_ADDR={os.environ.get('MASTER_ADDR', '')!r} names no host: set it to the "
                            f"address of global rank 0's node (the store's host), or unset it for this host")
    if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s <= settings.MAX_SECONDS):  # (not the variable's)
        raise BadInputError(f"init_distributed: timeout_s must be a positive number of seconds, at most "
                            f"{settings.MAX_SECONDS:g}, not {timeout_s!r}")
    problem = backend_problem(backend)
    if problem is not None:  # (before: torch's AssertionError or RuntimeError from init_process_group, on every rank)
        raise BadInputError(f"init_distributed: backend {problem}")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device((job.local_rank or 0) % torch.cuda.device_count())
    join_s = settings.init_timeout(timeout_s)
    hosts = rank == 0 and not job.agent_store
    if hosts:  # its own client connects there: a name that never resolves is one line, within join_s
        _resolve(job.master_addr, join_s)

    def start(port: int) -> Any:  # rank 0's store on the port agreed through MPI (0: the kernel picks it)
        store = dist.TCPStore(job.master_addr, port, world, is_master=True, timeout=timedelta(seconds=join_s),
                              wait_for_workers=False)
        _hosted[(job.master_addr, int(store.port))] = store
        return store

    meeting = rendezvous.plan(job, rank, world, join_s, start)  # the port, and the job's token in its store
    port = meeting.port
    host = "this rank hosts it" if hosts else f"hosted by {settings.store_host()}"
    where = f"the job's key-value store {job.master_addr}:{port} ({host})"
    if not hosts:
        _reach(job.master_addr, port, join_s, rank, where)
    # the section's T: the tuner's, or the wait bound where that is shorter (a program on the port that is no store
    # and never answers, like a frozen host, ends this within the init timeout, not the tuner's T + T/10: 330 s)
    tuner_t = min(store_silence.tuner_timeout(), max(join_s, settings.MIN_TIMEOUT_S))
    # a host that listens (reached: one not started yet was waited for there) but never answers (frozen: its kernel
    # accepts the connection) is cut by the section; torch's connect reads its reply without a limit and, after each
    # cut, tries again on a new connection until its timeout: the window, not join_s (before: it ended only there;
    # test_frozen_host.py::test_init_distributed_ends_when_the_store_host_freezes_naming_its_address[connect])
    connect_s = join_s if hosts else min(join_s, store_silence.window_of(tuner_t))
    checked = hosts or job.agent_store  # whether the store is known to be the job's (a rank that checked its token)
    try:  # a host that stops answering (frozen) ends this within T + max(1, T/10) s
        with store_silence.answering((job.master_addr, port) if world > 1 else None, tuner_t):
            try:
                store = _hosted.get((job.master_addr, port)) if hosts else None
                if store is None:
                    store = dist.TCPStore(job.master_addr, port, world, is_master=hosts,
                                          timeout=timedelta(seconds=connect_s), wait_for_workers=False)
                if hosts:
                    _hosted[(job.master_addr, port)] = store
            except dist.DistError as exc:  # a port taken, or a store gone since it was reached: one line
                if store_silence.was_cut():
                    raise
                if hosts and rendezvous.port_in_use(exc):
                    raise AutotuneError(rendezvous.in_use_message(meeting, where)) from None
                raise AutotuneError(f"init_distributed: rank {rank} could not {'start' if hosts else 'connect to'} "
                                    f"{where}: {describe_error(exc)}") from None
            if hosts:  # the job's token, read by every other rank before it writes anything into the store
                rendezvous.publish(store, meeting)
            elif not job.agent_store:  # (torchrun's agent: a store of the job's own rendezvous)
                rendezvous.check(store, meeting, rank, where, join_s)
                checked = True
            store.set_timeout(timedelta(seconds=join_s))
            base = "triton_dist_tune/attempt/"  # (torchrun's agent numbers its ranks itself: nothing to claim)
            gate = None if job.agent_store else claims.Claims(store, base, rank, world, where, join_s)
            attempt = epoch.agree(store, base, rank, world, join_s, where=where, gate=gate)
            store.set_timeout(timedelta(seconds=timeout_s))
            # the job's name: its first attempt's, kept by the store that outlives them (the launcher may name none)
            settings.name_job(store.compare_set("triton_dist_tune/job", "", attempt).decode(errors="replace")[:40])
            dist.init_process_group(backend, store=dist.PrefixStore(f"attempt{attempt}/", store), rank=rank,
                                    world_size=world, timeout=timedelta(seconds=timeout_s))
            if world > 1 and not job.agent_store:  # rank 0's process hosts the store: it lingers at exit (.exits)
                exits.register(store, f"attempt{attempt}/triton_dist_tune/", rank, world, host=rank == 0)
    except Exception as exc:
        if not store_silence.was_cut():
            raise
        other = "" if checked else f"; or a program that is no key-value store listens there ({meeting.said})"
        raise GroupTimeoutError(f"triton_dist_tune: init_distributed (global rank {rank}): {where} "
                                f"{store_silence.lost_reason()}{other}") from exc
    return dist.group.WORLD


def _reach(host: str, port: int, seconds: float, rank: int, where: str) -> None:
    """Return once something listens at ``host:port``, trying for ``seconds``; else a
    :class:`~triton_dist_tune.GroupTimeoutError` naming ``where``. Torch's own client, given no store, tried twice
    for its timeout each and printed about 40 lines of C++ warnings before its ``DistNetworkError``; a plain
    connect, closed at once, leaves a store that does listen none the worse (its host prints nothing)."""

    def connect(left: float) -> None:
        with socket.create_connection((host, port), timeout=max(0.1, min(2.0, left))):
            pass

    _retried(seconds, connect, lambda exc: (
        f"init_distributed: rank {rank} could not reach {where} within {seconds:g} s ({describe_error(exc)}): not "
        f"started, ended, or at another address (MASTER_ADDR, MASTER_PORT) {epoch.LONGER}"))


def _resolve(host: str, seconds: float) -> None:
    """Global rank 0, which hosts the store: return once ``host`` (``MASTER_ADDR``) resolves, trying for ``seconds``
    (a cluster's name service may know a node's name only once the node is up); else a
    :class:`~triton_dist_tune.GroupTimeoutError` naming it. Torch's own client, on a name that does not resolve,
    tried twice for the timeout each and printed about 40 lines of C++ warnings before its ``DistNetworkError``."""
    _retried(seconds, lambda left: socket.getaddrinfo(host, None, type=socket.SOCK_STREAM), lambda exc: (
        f"init_distributed: rank 0 could not resolve MASTER_ADDR={host!r}, where it hosts the job's key-value store, "
        f"within {seconds:g} s ({describe_error(exc)}): set MASTER_ADDR to this node's name or address, the same on "
        f"every rank {epoch.LONGER}"))


def _retried(seconds: float, attempt: Callable[[float], Any], failed: Callable[[OSError], str]) -> None:
    """Call ``attempt`` (given the seconds left) until it raises no ``OSError``, pausing 0.05 s between tries, then
    longer, up to 0.5 s; past ``seconds`` a :class:`~triton_dist_tune.GroupTimeoutError` saying ``failed(error)``."""
    deadline, pause = time.monotonic() + seconds, 0.05
    while True:
        try:
            attempt(deadline - time.monotonic())
            return
        except OSError as exc:
            if time.monotonic() + pause >= deadline:
                raise GroupTimeoutError(failed(exc)) from None
        time.sleep(pause)
        pause = min(0.5, pause * 1.5)
