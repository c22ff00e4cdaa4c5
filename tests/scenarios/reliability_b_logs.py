"""A process of a job that writes its rank log, for tests/test_reliability_b.py (no torch: starts in a blink).

Usage: ``python reliability_b_logs.py MARKER [READY GO]`` with ``TORCHELASTIC_RUN_ID`` (the job), ``RANK`` and
``TRITON_DIST_AUTOTUNE_LOG_DIR`` set. Logs ``MARKER first``; with READY and GO, creates READY, waits (at most 60 s)
until GO exists, then logs ``MARKER second``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from triton_dist_tune.disk import logs

marker = sys.argv[1]
logs.rank_log().info("%s first", marker)
if len(sys.argv) > 3:
    Path(sys.argv[2]).touch()
    deadline = time.monotonic() + 60
    while not Path(sys.argv[3]).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    logs.rank_log().info("%s second", marker)
