"""What every scenario script shares: a registry of named cases, ``RESULT {json}`` lines, and a clean exit.

A scenario script is run by real ranks as ``python SCRIPT CASE``; it registers its cases with :func:`case` and ends
with :func:`main`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

CASES: dict[str, Callable[[], None]] = {}


def case(fn: Callable[[], None]) -> Callable[[], None]:
    """Register ``fn`` under its name."""
    CASES[fn.__name__] = fn
    return fn


#: the case running, when one process runs several (``python SCRIPT CASE CASE ...``): its RESULT lines name it
RUNNING: list[str] = []


def emit(**fields: object) -> None:
    """One ``RESULT {json}`` line, written with one ``write`` so that the lines of ranks sharing a pipe (torchrun,
    mpiexec) never interleave. Where the process runs several cases, the line says which (``"case"``)."""
    if RUNNING:
        fields = {"case": RUNNING[0], **fields}
    sys.stdout.flush()
    os.write(1, ("RESULT " + json.dumps(fields) + "\n").encode())


def outcome(fn, *args, **kwargs) -> dict:
    """Call ``fn`` and describe what happened: its result or the exception's type and message."""
    try:
        value = fn(*args, **kwargs)
        return {"ok": value if isinstance(value, (int, float, str, list)) else repr(value)}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def before_each_compile(kernel, hook: Callable[[object, dict], None]) -> None:
    """Call ``hook(jit_function, launch_kwargs)`` before every ``warmup`` (the compile a tuner runs ahead) of
    ``kernel``'s class of jitted functions; an exception from ``hook`` is that compile's error."""
    real = type(kernel.fn).warmup

    def warmup(self, *args, grid, **kwargs):
        hook(self, kwargs)
        return real(self, *args, grid=grid, **kwargs)

    type(kernel.fn).warmup = warmup


def main(mpi: bool | None = None) -> None:
    """Run the case named by ``sys.argv[1]`` (or the cases named by ``sys.argv[1:]``, one after another, in this
    one process: every case must leave the process group as it found it), then leave cleanly: MPI ranks exit
    normally (to finalize); torch ranks wait for each other (rank 0 may host the store) and skip the slow
    interpreter teardown."""
    name, cases = sys.argv[1], sys.argv[1:]
    for each in cases:
        RUNNING[:] = [each] if len(cases) > 1 else []
        CASES[each]()
    RUNNING.clear()
    sys.stdout.flush()
    sys.stderr.flush()
    if mpi if mpi is not None else name.startswith("mpi"):
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    os._exit(0)
