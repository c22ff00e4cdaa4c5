"""A process of a job whose log rotation stops itself half-way, for tests/test_reliability_b.py (no torch).

Usage: ``python reliability_b_stalled_rotator.py MARKER READY`` with ``TORCHELASTIC_RUN_ID`` (the job), ``RANK`` and
``TRITON_DIST_AUTOTUNE_LOG_DIR`` set. Its rotation of the folder, about to rewrite its first file (holding the
folder's rotation lock and the files' exclusive locks), creates READY and stops the process (``SIGSTOP``): the test
continues it (``SIGCONT``: a slow rotation) or kills it (a rotator stopped for good). It then logs ``MARKER first``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from triton_dist_tune.disk import logs

marker, ready = sys.argv[1], Path(sys.argv[2])
rewrite = logs._LogFile.rewrite


def stalled(self: logs._LogFile, drop: set[str | None]) -> None:
    if not ready.exists():
        ready.touch()
        os.kill(os.getpid(), signal.SIGSTOP)
    rewrite(self, drop)


logs._LogFile.rewrite = stalled  # type: ignore[method-assign]
logs.rank_log().info("%s first", marker)
