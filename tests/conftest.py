import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slow_first import pytest_collection_modifyitems  # noqa: E402,F401  (the known-slow tests first on each worker)

# rank logs of tests that name no log folder go to a temporary one, never into the checkout or the home folder
os.environ.setdefault("TRITON_DIST_AUTOTUNE_LOG_DIR", tempfile.mkdtemp(prefix="triton-dist-tune-test-logs-"))
