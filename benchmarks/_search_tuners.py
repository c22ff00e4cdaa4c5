"""Ours' tunings in ``bench_search.py``: one fresh tuning (empty decision cache) and what the tuner said about it,
and the kernels compiled in memory before the tunings are timed."""

from __future__ import annotations

import os
import re
import tempfile
import time
from typing import Any

from _search_common import State, sync
from _search_env import BASE
from _search_oracles import compile_all


def decision_info(tuned: Any, name: str) -> dict[str, Any]:
    """What the tuner says about its decision: the Decision's plain fields (``timing``, ``rounds``, ``margin``,
    and whatever the search stage adds), and its rank log's lines about timing or search."""
    info: dict[str, Any] = {}
    decisions = list(getattr(tuned.tuner, "decisions", {}).values())
    if decisions:
        d = decisions[-1]
        fields = vars(d) if hasattr(d, "__dict__") else {}
        info = {k: v for k, v in fields.items() if isinstance(v, (str, int, float, bool, type(None)))}
        if getattr(d, "breakdown", None) is not None:  # where the tuning's seconds went
            info["breakdown"] = d.breakdown.text()
    try:
        from triton_dist_tune.disk import logs

        lines = [line for path in logs.log_folder().rglob("rank-*.log")
                 for line in path.read_text(errors="replace").splitlines()
                 if name in line and re.search(r"timing|timed|graph|device|search|warm-up:|race:", line)]
        info["log"] = [line[-300:] for line in lines[-6:]]
    except Exception as exc:  # the log is a nicety
        info["log"] = [f"unreadable: {exc}"]
    return info


def ours_tuning(space: Any, kernel: Any, st: State, name: str, search: str | None) -> dict[str, Any]:
    """One fresh tuning by ours (empty decision cache): choice, seconds, what the tuner said."""
    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="decisions_", dir=BASE)
    tuned = space.ours(kernel, name, search)
    sync()
    t0 = time.perf_counter()
    tuned(*st.args)
    sync()
    seconds = time.perf_counter() - t0
    decided = {**tuned.tuner.decided, **tuned.tuner.decided_in}
    choice = space.text(space.chosen(next(iter(decided.values()))))
    return {"choice": choice, "seconds": seconds, "decision": decision_info(tuned, name)}


def precompile(space: Any, kernel: Any, st: State) -> float:
    """Compile every kept config of ``st``'s shape on ``kernel`` (:func:`compile_all`); seconds taken."""
    t0 = time.perf_counter()
    compile_all(space, kernel, st, space.kept(st.m))
    return time.perf_counter() - t0
