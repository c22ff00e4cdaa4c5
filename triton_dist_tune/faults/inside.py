"""Whether a thread waits inside a collective of ``torch.distributed`` now, read from its Python stack: a blocking
collective (gloo's, a barrier, a ``wait`` on a collective's work) leaves its thread in the C call made from the
collective's own function, so the innermost Python frame is that function, in ``distributed_c10d.py`` (or the
functional collectives' module). A thread computing, sleeping or waiting for the device elsewhere is not inside one.

The watchdog asks this of a ``contextual_autotune`` run after a peer posted that its run raised
(:meth:`~triton_dist_tune.faults.watchdog.Guard.arm`'s ``waiting``): a rank inside a collective then waits for a
peer that will never come, and is ended after the grace; one doing anything else goes on to the end of its run.
"""

from __future__ import annotations

import sys

#: the modules whose functions a thread waits in while it is inside a collective
COLLECTIVE_MODULES = ("distributed_c10d.py", "_functional_collectives.py")


def in_collective(thread: int) -> bool:
    """Whether the thread ``thread`` (its ``threading.get_ident()``) is inside a collective of torch.distributed
    now (False for a thread that has ended)."""
    frame = sys._current_frames().get(thread)
    if frame is None:
        return False
    path = frame.f_code.co_filename.replace("\\", "/")
    return "/torch/distributed/" in path and path.rpartition("/")[2] in COLLECTIVE_MODULES
