"""Where a command's last seconds go, after its last line: runs a script (``runpy``, as ``python SCRIPT ARGS``)
and prints ``EXIT_PROBE {json}`` as the interpreter's last exit handler, with the wall clock (epoch seconds) when the
script's ``main`` returned (``returned``) and when the exit handlers were done (``handlers_done``), and the seconds of
``torch.distributed.destroy_process_group`` (``destroy_s``). The caller, reading its own wall clock when the process
has ended, gets the rest: the interpreter's end (modules, CUDA's context). ``EXIT_PROBE_FREEZE=1``: the last
handler freezes the garbage collector's objects (``gc.freeze``), so that the interpreter's end no longer walks them
(on this project's 2-core CPU machine, ``import torch`` alone then ends in 0.6-1.0 s, not 2.0-2.7 s).

Usage: python3 benchmarks/exit_probe.py SCRIPT [ARGS...]   (one rank: RANK, WORLD_SIZE, MASTER_* set by the caller)
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import runpy
import sys
import time

marks: dict[str, float] = {}


def _last() -> None:
    marks["handlers_done"] = time.time()
    print("EXIT_PROBE " + json.dumps(marks), flush=True)
    if os.environ.get("EXIT_PROBE_FREEZE") == "1":  # what the interpreter's end costs without walking the objects
        gc.freeze()


atexit.register(_last)  # the first registered: the last to run

import torch.distributed as dist  # noqa: E402

_destroy = dist.destroy_process_group


def _timed_destroy(*args: object, **kwargs: object) -> None:
    began = time.time()
    _destroy(*args, **kwargs)
    marks["destroy_s"] = time.time() - began


dist.destroy_process_group = _timed_destroy  # type: ignore[assignment]


def main() -> int:
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    code: object = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
    marks["returned"] = time.time()
    return int(code or 0) if isinstance(code, int) or code is None else 1


if __name__ == "__main__":
    sys.exit(main())
