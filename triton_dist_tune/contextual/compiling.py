"""Compiling ahead, once per node: between runs, the configs of the (kernel, key)s met in the last run are compiled
(GPUs only, never under Triton's interpreter) in a thread pool, each by one rank of each node, so that a config
that does not compile is never launched, on any rank.

After the exchange that ends a run (every rank in lock step, with the same data), for each track that some rank met
first in that run and that the group has not decided:

1. the configs to compile are the same list on every rank: the track's configs not failed and not measured, in
   its config order, less those some rank launched in the run (their kernels are compiled already); for a track
   whose space is searched, only its current stage's configs, and again at each new stage (the ranks that met it
   keep the arguments of its first launch until its finalists' stage);
2. the ranks of this node (same host name and Triton cache folder,
   :func:`~triton_dist_tune.measure.precompile.node_ranks`) that met the track in the run split them: the k-th is
   compiled by the (k mod n)-th of those n ranks (:func:`~triton_dist_tune.measure.precompile.my_share`), with the
   arguments of its first launch, into the node's shared Triton cache. A rank that did not meet the track has no
   arguments to compile with and compiles none of it;
   Each rank's compiles run in daemon threads, each config under its own deadline (:func:`compile_share`): a
   config whose compile has not ended ``T`` s after a thread started it counts as failed, its thread left behind
   (it never keeps the process from exiting) and replaced, so the configs queued after it still compile; a track's
   share ends within ``T`` times its waves (ceil(configs / compile threads));
3. one allgather of every rank's failures (:func:`~triton_dist_tune.measure.precompile.agree_failures`, for every
   track at once), which is also the barrier after which the others find the kernels in Triton's cache: a config
   that failed on some rank is failed on every rank ("rank r: compile: error") before the next run, so no rank
   launches it.

Whether this happens at all is decided from data every rank has: the tracks and launches of the exchange, and each
rank's word in it that it compiles ahead (:func:`compiles_ahead`); compiling happens only when every rank says so.
The node is found the first time (one allgather) and kept per tuner and group. Exchanges happen only in calls
that every rank of the group tunes (a hot call that meets a new key exchanges only when every rank settled it
"now", :mod:`~.newkeys`), so these collectives are issued on every rank alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..measure.daemon_pool import DaemonPool, wait_within
from ..measure.precompile import (
    agree_failures,
    compiles_here,
    current_cuda_device,
    default_workers,
    my_share,
    node_ranks,
    on_device,
    version_key,
)
from . import intercept
from .decisions import record_decision
from .state import CallState, Exchanged
from .tracks import TrackId


def compiles() -> bool:
    """Whether kernels are compiled here (a GPU, and not Triton's interpreter), so precompiling is worth it."""
    return compiles_here()


def compiles_ahead(session: CallState) -> bool:
    """This rank's word in each exchange: whether it compiles ahead (``precompile`` on, and :func:`compiles`)."""
    return session.tuner.options.precompile and compiles()


@dataclass(frozen=True)
class Plan:
    """One track's configs to compile ahead, the same on every rank, and where its failures are numbered."""

    tid: TrackId
    #: the configs to compile, in the track's config order
    todo: list[int]
    #: the ranks of this node that met the track in the run (they split ``todo``)
    holders: list[int]
    #: the track's configs are numbered from here in the one exchange of failures
    base: int


def precompile_new(session: CallState, exchanged: Exchanged) -> None:
    """Compile this rank's node share of the configs of the tracks first met in the last run, then agree on the
    failures with the group (see the module docstring); drop the arguments kept for it."""
    try:
        if exchanged.compiles:
            plans = _plans(session, exchanged)
            if plans:  # decided from shared data: every rank compiles (its share) and agrees, or none does
                _compile_and_agree(session, plans)
    finally:
        for tid, local in session.local.items():
            track = session.tracks.get(tid)
            if track is None or track.done or track.stages.search is None or track.stages.final:
                local.sample = None  # the arguments of the first launch are not kept longer than this (a search
                # keeps them until its finalists: each stage compiles its own configs ahead)


def _plans(session: CallState, exchanged: Exchanged) -> list[Plan]:
    """The tracks to compile ahead, in track order; the node is found (once per tuner and group) when some are."""
    todos: list[tuple[TrackId, list[int], list[int]]] = []
    for tid in sorted(session.tracks):
        track = session.tracks[tid]
        stage = track.stages.stage()
        if track.done or (tid not in exchanged.met and stage == track.stages.compiled):
            continue  # met before, and no new stage of its search since its last compile
        track.stages.compiled = stage
        met = sorted(exchanged.met[tid]) if tid in exchanged.met else list(track.holders)
        launched = exchanged.launched.get(tid, set())
        todo = [i for i in track.stages.batch if i not in track.failed and i not in track.times and i not in launched]
        if todo:
            todos.append((tid, todo, met))
    if not todos:
        return []
    node = _node(session)
    plans, base = [], 0
    for tid, todo, met in todos:
        plans.append(Plan(tid, todo, [r for r in node if r in met], base))
        base += len(session.tracks[tid].descriptions)
    return plans


def _node(session: CallState) -> list[int]:
    """The group ranks on this rank's node: found by one allgather the first time, kept per tuner and group."""
    nodes = session.tuner.nodes
    identity = session.group.identity
    if identity not in nodes:
        nodes[identity] = node_ranks(session.group, session.label, session.timeout)
    return nodes[identity]


def _compile_and_agree(session: CallState, plans: list[Plan]) -> None:
    """Compile this rank's share of each plan; one allgather of the failures; fail them on every rank. The
    allgather waits ``T`` times the sum over plans of ceil(configs to compile / compile threads): no rank's shares
    take longer (:func:`compile_share`)."""
    rank, mine = session.group.rank, {}
    for plan in plans:
        local = session.local.get(plan.tid)
        if rank not in plan.holders or local is None or local.sample is None:
            continue
        share = my_share(plan.todo, plan.holders.index(rank), len(plan.holders))
        args, kwargs = local.sample
        failures = compile_share(local.autotuners[0], share, args, kwargs, session.timeout)
        mine.update({plan.base + index: error for index, error in failures.items()})
    # every rank waits for the slowest: the timeout for each wave of each plan's compiles (each share ends within
    # T x its waves, :func:`compile_share`), as if one rank compiled every plan's configs
    waves = sum(-(-len(plan.todo) // default_workers()) for plan in plans)
    agreed = agree_failures(session.group, session.label, mine, session.timeout * waves)
    for plan in plans:
        track = session.tracks[plan.tid]
        for index in plan.todo:
            error = agreed.get(plan.base + index)
            if error is not None:
                session.log.info("%s %s config=%d does not compile: %s", session.label, track.label, index, error)
                track.fail(index, error)
        if track.done:
            record_decision(session, track)


def compile_share(autotuner: Any, indices: list[int], args: tuple, kwargs: dict[str, Any],
                  timeout: float) -> dict[int, str]:
    """Compile the kernel of each config of ``indices`` (``fn.warmup(..., grid=...)``, which compiles without
    launching) in daemon threads, each thread first on the caller's CUDA device; returns {index: error} of the
    configs that failed to compile or did not end in time.

    Each config has its own deadline: ``timeout`` s from when a thread started its compile. A compile still running
    then fails its config (and no other), its thread is left behind (a daemon: it never keeps the process from
    exiting) and replaced (:meth:`~triton_dist_tune.measure.daemon_pool.DaemonPool.abandon`), so the configs queued
    after it still compile. The configs are waited for in the order they are queued, so when a config's turn comes
    every config before it has ended or been left behind, and it has started or starts at once on a free thread.
    Each thread is so held at most ``timeout`` s by each config it takes, and the share ends within ``timeout``
    times its waves (ceil(configs / threads)), the bound :func:`_compile_and_agree`'s exchange of failures counts
    on."""
    import time

    if not indices:
        return {}
    version_key()  # once, here, not in every compile thread at once
    launch_kwargs = {k: v for k, v in kwargs.items() if k != "warmup"}
    device = current_cuda_device()
    pool = DaemonPool(max(1, min(default_workers(), len(indices))), "tdt-precompile")
    started: dict[int, float] = {}  # when a thread started each config's compile

    def compile_one(index: int) -> None:
        started[index] = time.monotonic()
        on_device(device)
        cut_args, cut_kwargs = intercept.without_config_names(autotuner, args, launch_kwargs)
        autotuner.fn.warmup(*cut_args, **cut_kwargs, **autotuner.configs[index].all_kwargs())

    futures = {index: pool.submit(lambda i=index: compile_one(i)) for index in indices}
    failures: dict[int, str] = {}
    try:
        for index, future in futures.items():
            begun = started.get(index, time.monotonic())  # not yet: a free thread is taking it now
            error = wait_within([future], max(0.0, begun + timeout - time.monotonic()), pool)
            if error is not None:
                failures[index] = error.removeprefix("compile: ")
                if error.startswith("compile: did not finish"):
                    failures[index] = f"did not finish within {timeout:g} s (the timeout) of its own start; " \
                                      "its thread is left behind"
    finally:
        pool.shutdown()
    return failures
