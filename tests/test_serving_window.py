"""``undecided="nearest"``'s window of the cache folder (function/cached_keys.py): the newest decisions of the call's
own entry, whatever the folder holds besides. One process, real tunings and files on disk."""

from __future__ import annotations

import os
import sys
import time

import pytest

_OPENED: list[list[str]] = []  # the audit hook's list while one is being filled (hooks stay for the process)


def _audit(event: str, args: tuple) -> None:
    if _OPENED and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED[-1].append(os.fsdecode(args[0]))


def _function(undecided: str, extra: str):
    """A tuned function whose config 2 is the faster by far (config 1 sleeps 20 ms), in the folder ``window``."""
    import triton_dist_tune as tdt

    @tdt.autotune([{"s": 1}, {"s": 2}], key_fn=lambda n: n, undecided=undecided, n_warmup=0, n_repeat=1,
                  name="window", cache_key_extra=extra)
    def f(n, *, s):
        if s == 1 and extra == "":
            time.sleep(0.02)
        return s

    return f


def _folder_behind_others(tmp_path, monkeypatch, others: int):
    """The cache folder holding this build's decision of key 64 (config 2), older than ``others`` decisions of the
    same function built otherwise (another ``cache_key_extra``: another entry for every key)."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_UNDECIDED", "tune")
    assert _function("tune", "")(64) == 2
    other = _function("tune", "another build")
    for n in range(1000, 1000 + others):
        other(n)
    folder = tmp_path / "cache" / "window"
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    assert len(files) == others + 1
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_UNDECIDED", "nearest")
    return {str(p) for p in files}


@pytest.mark.timeout(120)
def test_nearest_finds_the_calls_decision_behind_300_newer_files_of_another_entry(tmp_path, monkeypatch):
    # Before, the window was the folder's 256 newest files whatever their entry: 300 newer decisions of another
    # cache_key_extra hid key 64's, and key 60 was served the first config (1); now the window holds the call's own
    # entries, and 60 is served 64's decision (2)
    _folder_behind_others(tmp_path, monkeypatch, 300)
    served = _function("nearest", "")
    assert served(60) == 2
    assert served(56) == 2


@pytest.mark.timeout(120)
def test_nearest_covers_a_folder_larger_than_one_calls_reads_over_the_calls_that_follow(tmp_path, monkeypatch):
    # At most MAX_READS files not read before are read per served key (here 128, of 301): the first two keys are
    # served the first config, each reading 128 files it had not read; the third reads the 45 left and finds 64's
    # decision; a fourth reads nothing (every file known: another entry's costs a look-up, not a read)
    from triton_dist_tune.function import cached_keys

    files = _folder_behind_others(tmp_path, monkeypatch, 300)
    monkeypatch.setattr(cached_keys, "MAX_READS", 128, raising=False)  # (before: no such bound)
    served = _function("nearest", "")
    sys.addaudithook(_audit)
    got, reads = [], []
    for n in (60, 56, 50, 40):
        _OPENED.append([])
        try:
            got.append(served(n))
        finally:
            reads.append(len({p for p in _OPENED.pop() if p in files}))
    assert got == [1, 1, 2, 2], (got, reads)
    assert reads == [128, 128, 45, 0], reads
