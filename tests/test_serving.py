"""Keys served by the ``undecided`` policy, and campaigns, on ranks that disagree (2 gloo ranks each): every rank
raises the same error naming the cause, at once, and no rank runs another config than its peers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from harness import describe, run_ranks, tuner_env

CASES = Path(__file__).parent / "scenarios" / "serving_cases.py"


def ranks(tmp_path: Path, case: str) -> list[dict]:
    results = run_ranks(CASES, 2, [case], env=tuner_env(tmp_path, timeout=20), timeout=140)
    assert all(r.returncode == 0 for r in results), describe(results)
    return [r.result for r in results]


@pytest.mark.timeout(150)
def test_serving_by_index_into_spaces_built_in_different_orders_raises_on_every_rank(tmp_path):
    # before: rank 0 ran 'ring', rank 1 'tree' (index 0 of each rank's own space), silently
    for r in ranks(tmp_path, "served_spaces_in_different_orders"):
        assert r["first"].get("error") == "MismatchError", r
        assert "differ in config space" in r["first"]["message"], r


@pytest.mark.timeout(150)
def test_a_key_fn_raising_on_one_rank_under_serving_names_its_error_on_every_rank(tmp_path):
    # before: rank 1 went to the tuning's agreement, rank 0 to the serving's exchange: both raised an ExchangeError
    # blaming "a setting that changes the steps", and the ValueError appeared nowhere
    for r in ranks(tmp_path, "served_key_fn_raising_on_one_rank"):
        assert r["first"].get("error") == "BadInputError", r
        assert "key_fn failed" in r["first"]["message"] and "no key for this input" in r["first"]["message"], r


@pytest.mark.timeout(150)
def test_a_tensor_key_under_serving_is_refused_as_the_tuning_refuses_it(tmp_path):
    # before: served, every call a new key (an exchange and a log line per call, the served table growing)
    for r in ranks(tmp_path, "served_tensor_key"):
        for call in r["calls"]:
            assert call.get("error") == "BadInputError" and "contains a tensor" in call["message"], r


@pytest.mark.timeout(150)
def test_a_local_campaign_over_spaces_built_in_different_orders_raises_on_every_rank(tmp_path):
    # before: the summary said b=3 for both keys, but rank 0 stored {1: 3, 2: 1} and rank 1 {1: 1, 2: 3}
    for r in ranks(tmp_path, "local_campaign_spaces_in_different_orders"):
        assert r["campaign"].get("error") == "BadInputError", r
        assert "config spaces differ" in r["campaign"]["message"], r
        assert r["decided"] == {}, r


@pytest.mark.timeout(150)
def test_a_campaign_key_that_is_a_list_is_refused_at_the_keys_agreement(tmp_path):
    # before: a bare TypeError (unhashable type: 'list') from inside the campaign, past the agreement
    for r in ranks(tmp_path, "campaign_key_that_is_a_list"):
        assert r["campaign"].get("error") == "BadInputError", r
        assert "unhashable" in r["campaign"]["message"], r


def four_ranks(tmp_path: Path, case: str) -> list[dict]:
    results = run_ranks(CASES, 4, [case], env=tuner_env(tmp_path, timeout=40), timeout=140)
    assert all(r.returncode == 0 for r in results), describe(results)
    return [r.result for r in results]


@pytest.mark.timeout(150)
def test_a_prune_fn_raising_on_one_rank_of_a_replica_under_serving_is_an_error_on_every_rank_at_once(tmp_path):
    # 4 ranks, TP groups {0, 1} {2, 3}, replicas {0, 2} {1, 3}; before: ranks 0 and 1 served 'ring', ranks 2 and 3
    # tuned (their prune_fn failed) and waited T (40 s) at the tuning's agreement across replicas for partners that
    # were serving, then raised GroupTimeoutError
    results = four_ranks(tmp_path, "served_across_replicas_prune_fn_raising_on_one_rank")
    for r in results:
        assert r["first"].get("error") == "BadInputError", results
        assert "no pruning on rank 3" in r["first"]["message"], results
        assert r["seconds"] < 10, results


@pytest.mark.timeout(150)
def test_replicas_whose_prune_fn_keeps_different_configs_never_serve_different_configs(tmp_path):
    # before: replica {0, 1} served 'ring', replica {2, 3} 'tree' (each agreed inside its TP group only); now every
    # replica tunes, and the tuning keeps what every replica keeps
    results = four_ranks(tmp_path, "served_across_replicas_pruned_apart")
    assert len({str(r["first"]) for r in results}) == 1, results


@pytest.mark.timeout(200)
def test_a_key_the_cache_holds_is_served_its_decision_under_nearest(tmp_path):
    # 4 ranks, TP groups {0, 1} {2, 3} linked as replicas. A first job tunes key 64 ('b', 8x faster); a second job
    # under undecided="nearest" calls key 56, 64, then 60. Before: 64 and 60 ran 'a' on every rank ("key 64 is not
    # decided: serving the first kept config"), the cache never read; now 64 is a cache hit and 60 is served 64's
    # decision. Key 56, called before this process decided any key, is served the decision of the cache folder's
    # nearest key (64, read by group rank 0, its entry recomputed): before, 'a', the first kept config.
    env = tuner_env(tmp_path, timeout=20)
    tuned = run_ranks(CASES, 4, ["cached_then_served"], env={**env, "TUNE": "1"}, timeout=150)
    assert all(r.returncode == 0 for r in tuned), describe(tuned)
    assert {tuple(r.result["ran"]) for r in tuned} == {("b",)}, describe(tuned)
    assert {tuple(r.result["alone"]) for r in tuned} == {("b",)}, describe(tuned)
    assert {r.result["campaign"] for r in tuned} == {"b"}, describe(tuned)
    served = four_ranks(tmp_path, "cached_then_served")
    assert [r["ran"] for r in served] == [["b", "b", "b"]] * 4, served
    # a rank-local function (sharded=True) reads its own cache entry (and folder) alone, with no exchange: before,
    # it ran 'a' at every key on every rank (its serving read no cache)
    assert [r["alone"] for r in served] == [["b", "b", "b"]] * 4, served
    # so does a function made rank-local by a local=True campaign: before, it served key 32's decision ('c') at 64
    assert [r["campaign"] for r in served] == ["b"] * 4, served


@pytest.mark.timeout(150)
def test_a_key_one_rank_of_a_rank_local_function_read_alone_is_tuned_by_the_whole_group(tmp_path):
    # 2 ranks whose cache folders differ (node-local disks; rank 1's empty). A rank-local function's key 64, tuned
    # by an earlier function object (rank 0's folder holds it), is called under undecided="nearest": rank 0 reads
    # its own entry alone and runs 'b', rank 1 (a miss) serves 'a'. Then under undecided="tune": before, rank 0
    # had put the key among its decisions and ran it, while rank 1 tuned it alone and waited at the tuning's
    # agreement for a partner that never came (GroupTimeoutError after T, or the lost rank 0's error); now the
    # read alone serves without deciding, and both ranks tune the key together (a cache hit: 'b' on both)
    env = tuner_env(tmp_path, timeout=20)
    results = run_ranks(CASES, 2, ["cached_alone_on_one_rank_then_tuned"], env=env, timeout=140,
                        per_rank_env={1: {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "cache_rank1")}})
    assert all(r.returncode == 0 for r in results), describe(results)
    got = [r.result for r in results]
    assert [r["tuned"] for r in got] == ["b", "b"], got
    assert [r["served"] for r in got] == [{"ok": "b"}, {"ok": "a"}], got
    assert [r["again"] for r in got] == [{"ok": "b"}, {"ok": "b"}], got


_OPENED: list[list[str]] = []  # the audit hook's list while one is being filled (hooks stay for the process)


def _audit(event: str, args: tuple) -> None:
    if _OPENED and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED[-1].append(os.fsdecode(args[0]))


@pytest.mark.timeout(60)
def test_nearest_reads_each_unchanged_file_of_the_cache_folder_once(tmp_path, monkeypatch):
    # One process, undecided="nearest": every served key reads the function's cache folder for decided keys
    # (function/cached_keys.py). Before, each served key read every one of up to 256 files again (a folder of
    # thousands: tens of ms per key, on group rank 0 inside the serving's exchange); now a file unchanged since it
    # was read (same inode, size and modification time) is not read again
    import triton_dist_tune as tdt

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_UNDECIDED", raising=False)

    def make():
        @tdt.autotune([{"s": 1}, {"s": 2}], key_fn=lambda n: n, undecided="tune", n_warmup=0, n_repeat=1,
                      name="disk_scan")
        def f(n, *, s):
            return s

        return f

    decided = make()(64)
    folder = tmp_path / "cache" / "disk_scan"
    (original,) = folder.glob("*.json")
    for i in range(40):  # files the scan reads but does not count (their names are no entry of theirs)
        (folder / f"{i:020x}.json").write_bytes(original.read_bytes())
    files = {str(p) for p in folder.glob("*.json")}
    sys.addaudithook(_audit)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_UNDECIDED", "nearest")
    served = make()
    reads = []
    for n in (60, 56, 50):
        _OPENED.append([])
        try:
            assert served(n) == decided  # the folder's key 64 is the nearest
        finally:
            reads.append(sorted(p for p in _OPENED.pop() if p in files))
    assert len(reads[0]) == 41, reads[0]
    assert reads[1:] == [[], []], reads


class _Tokens(int):
    """A key type of the user's own: its text is the number's (``64``), so the cache folder's copy of the key comes
    back as a plain int, which the user's ``distance`` below does not take."""

    @property
    def tokens(self) -> int:
        return int(self)


@pytest.mark.timeout(60)
def test_nearest_leaves_out_a_cached_key_the_users_distance_cannot_take(tmp_path, monkeypatch):
    # One process, undecided="nearest", keys of the user's own type, and a distance that reads their attribute.
    # A key decided by an earlier process comes back from the cache folder as a literal (a plain int), which that
    # distance cannot take: it is not comparable, and the call is served as with no decided key. Before, the
    # distance's AttributeError was a BadInputError for a key this process never met
    import triton_dist_tune as tdt

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_UNDECIDED", raising=False)

    def make(undecided):
        @tdt.autotune([{"s": 1}, {"s": 2}], key_fn=lambda n: _Tokens(n), undecided=undecided, n_warmup=0, n_repeat=1,
                      name="own_key_type", distance=lambda a, b: abs(a.tokens - b.tokens))
        def f(n, *, s):
            return s

        return f

    make("tune")(64)  # decided, in the cache folder
    served = make("nearest")
    assert served(60) == 1  # the first kept config: the folder's key is not comparable
    assert served(64) in (1, 2)  # (the cache holds it: a decision)
    assert served(62) == served(64)  # a key this process decided is comparable
