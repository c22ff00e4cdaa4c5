"""Compiling ahead: between runs, the configs of newly met (kernel, key)s are compiled in a thread pool (GPUs
only, never under Triton's interpreter), so that a config that does not compile here is never launched and is
reported at the next exchange as failed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..measure.precompile import compiles_here
from . import intercept

if TYPE_CHECKING:
    from .session import Session


def compiles() -> bool:
    """Whether kernels are compiled here (a GPU, and not Triton's interpreter), so precompiling is worth it."""
    return compiles_here()


def precompile_new(session: Session) -> None:
    """Compile the configs of the session's newly met tracks in parallel, and drop the arguments kept for it."""
    for tid, local in session.local.items():
        track = session.tracks.get(tid)
        if local.sample is None or track is None:
            continue
        args, kwargs = local.sample
        local.sample = None  # the arguments of the first launch are not kept longer than this
        if track.done or not session.tuner.options.precompile or not compiles():
            continue
        todo = [i for i in track.order if i not in local.used and i not in track.failed and i not in track.times]
        failures = intercept.precompile(local.autotuners[0], todo, args, kwargs)
        local.errors.update(failures)
        local.unreported.update(failures)
        for index, error in failures.items():
            session.log.info("%s %s config=%d does not compile here: %s", session.label, track.label, index, error)
