"""Fresh HOME / Triton / tuner folders for ``bench_search.py`` and the scripts built on it, set at import, before
Triton is imported (import this module first)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def _fresh_environment() -> Path:
    """Fresh HOME / Triton / tuner folders, before Triton is imported. Ranks of one torchrun job share one folder
    (named after the job's run id), so that the node's ranks share compiled kernels as they would in a job."""
    if "--cpu-smoke" in sys.argv:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        base = Path(tempfile.gettempdir()) / f"tdt_bench_search_{run_id}"
        base.mkdir(exist_ok=True)
    else:
        base = Path(tempfile.mkdtemp(prefix="tdt_bench_search_"))
    for var, sub in (("HOME", "home"), ("TRITON_CACHE_DIR", "triton"), ("TRITON_DIST_AUTOTUNE_CACHE_DIR", "decisions"),
                     ("TRITON_DIST_AUTOTUNE_LOG_DIR", "logs")):
        (base / sub).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(base / sub)
    return base


BASE = _fresh_environment()
