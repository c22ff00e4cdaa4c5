import atexit
import gc
import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slow_first import pytest_collection_modifyitems  # noqa: E402,F401  (the known-slow tests first on each worker)

# rank logs of tests that name no log folder go to a temporary one, never into the checkout or the home folder
os.environ.setdefault("TRITON_DIST_AUTOTUNE_LOG_DIR", tempfile.mkdtemp(prefix="triton-dist-tune-test-logs-"))
# no collector while the test modules (and torch, Triton, matplotlib) are imported: nearly all they make lives until
# the end, and each full collection walked it again (6 of them in the suite's collection, 0.49 CPU-s of a worker's
# 3.9); it is enabled again once collection is over (pytest_collection)
gc.disable()


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """What collection left alive (torch, Triton, matplotlib and every test module: about 270,000 objects in a
    worker that collects the whole suite) is moved out of the collector's walks (``gc.freeze``), and the collector
    is enabled again (also in pytest-xdist's controller, which collects nothing). Each full collection walked it all
    again, about 0.08 CPU-s each (5 files' tests run after collecting the suite: full collections 1.6 CPU-s, 0.55
    frozen, 0.49 of which during collection, before the freeze). The objects a test makes are collected as before;
    the frozen ones are given back (``gc.unfreeze``) at exit, before the interpreter's last collection."""
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


atexit.register(gc.unfreeze)
