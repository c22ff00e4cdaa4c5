"""Tuned calls inside a CUDA-graph capture, as docs/cuda-graphs.md promises them (README row "a call inside a
CUDA-graph capture"): a decided call of either tuner makes no exchange, store or file access; a call that would tune
raises ``CaptureError`` naming the key and how to tune ahead, with nothing run and nothing written, or follows the
``undecided=`` policy; ``contextual_autotune``'s agreement that falls due inside a capture is made at the next call
outside one, at the same call on every rank.

No GPU runs here, so no real capture can: the scenarios (tests/scenarios/capture_cases.py) patch the one predicate
the package asks, ``torch.cuda.is_current_stream_capturing`` (with ``triton_dist_tune.capture._cuda``, its cached
``torch.cuda.is_available()``, set to True as on a GPU machine), to say whether the scenario is inside a "capture".
Everything else is real: the tuners, Triton's interpreter, gloo ranks, cache and log folders; the other hooks only
count (the predicate's asks, the group's exchanges, fetches of the job's store, file events under the cache and log
folders). The same promises on a GPU, with real captures and replays: benchmarks/check_cuda_graphs.py.
"""

from __future__ import annotations

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "capture_cases.py"
TIMEOUT_S = 20


def run(tmp_path, case: str, ranks: int = 1) -> list[dict]:
    """``case`` in one job of ``ranks`` processes (every rank must exit 0): each rank's RESULT."""
    env = tuner_env(tmp_path, TIMEOUT_S, TRITON_DIST_AUTOTUNE_NEW_KEY_GRACE="0.3")
    results = run_ranks(CASES, ranks, [case], env=env, timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    return [r.result for r in results]


def untouched(seen: dict) -> bool:
    """Nothing reached the store, the group or the cache and log folders while the "capture" was on."""
    return (seen["store"] == 0 and seen["exchanges"] == [] and seen["files"] == [] and not seen["cache_changed"]
            and not seen["logs_changed"])


@pytest.mark.timeout(120)
def test_autotune_an_undecided_key_inside_a_capture_raises_capture_error_and_tunes_after_it(tmp_path):
    (r,) = run(tmp_path, "autotune_undecided_raises")
    inside = r["inside"]
    assert inside.get("error") == "CaptureError", inside
    message = inside["message"]
    for part in ("cap_raise: key 64 is not decided", "inside a CUDA graph capture", "before capturing",
                 "run a campaign", "triton_dist_tune.campaign", "undecided='first' or 'nearest'",
                 "Nothing was launched"):
        assert part in message, (part, message)
    assert inside["asks"] >= 1, inside  # the error came from the capture check
    assert r["runs_inside"] == [] and r["cache_files_inside"] == [], r  # nothing ran, nothing tuned or written
    assert untouched(inside), inside
    # after the capture, the same call tunes as usual: every config run, key 64 decided and cached, right output
    assert r["runs_after"] > 0 and r["decided"] == [64] and r["ok_after"], r
    assert len(r["cache_files_after"]) == 1 and r["cache_files_after"][0].startswith("cap_raise/"), r


@pytest.mark.timeout(120)
def test_autotune_undecided_policies_and_autotune_false_serve_inside_a_capture_without_tuning(tmp_path):
    # prune_fn keeps BLOCK 64 and 128 for key 65 (never 32); for key 64 only 128, which a campaign decides ahead
    (r,) = run(tmp_path, "autotune_served_alone")
    for policy, block in (("first", 64), ("nearest", 128), ("env", 64), ("off", 64)):
        served = r[policy]
        assert "error" not in served and served["ok"], (policy, served)
        assert served["runs"] == [block], (policy, served)  # one run, with the served config: nothing measured
        assert served["store"] == 0 and served["exchanges"] == [] and not served["cache_changed"], (policy, served)
        assert served["asks"] == 0, (policy, served)  # a served call never asks whether it is captured
    assert r["nearest"]["decided_64"] == {"BLOCK": 128}, r["nearest"]
    # a served key is not a decision: nothing decided or cached but the campaign's key 64
    assert r["first"]["decided"] == r["env"]["decided"] == r["off"]["decided"] == [], r
    assert r["nearest"]["decided"] == [64], r["nearest"]
    assert [f.split("/")[0] for f in r["cache_files"]] == ["cap_nearest"], r["cache_files"]


@pytest.fixture(scope="module")
def served_on_two_ranks(tmp_path_factory) -> list[dict]:
    return run(tmp_path_factory.mktemp("served"), "autotune_served_on_two_ranks", ranks=2)


@pytest.mark.timeout(120)
def test_autotune_undecided_first_on_two_ranks_serves_one_config_inside_a_capture(served_on_two_ranks):
    for r in served_on_two_ranks:
        for which in ("collective", "sharded", "collective_again"):
            served = r[which]
            assert "error" not in served and served["ok"] and served["runs"] == [64], (which, served)
            assert served["asks"] == 0 and not served["cache_changed"], (which, served)
        # a rank-local function (sharded=True) serves alone: it reads its own cache entry (one open, of a file that
        # is not there) and makes no exchange; a key served before is served again with no exchange
        sharded = r["sharded"]  # (serving logs the served key once to the rank's log: not checked here)
        assert sharded["store"] == 0 and sharded["exchanges"] == [], sharded
        assert [f.split("/cache/")[-1].split("/")[0] for f in sharded["files"]] == ["cap_first_sharded"], sharded
        assert all(f.startswith("open ") and f.endswith(".json") for f in sharded["files"]), sharded
        assert untouched(r["collective_again"]), r["collective_again"]
        assert r["decided"] == [] and r["cache_files"] == [], r


@pytest.mark.timeout(120)
def test_autotune_undecided_first_on_two_ranks_agrees_once_through_the_store_inside_a_capture(served_on_two_ranks):
    # docs/cuda-graphs.md: on a group, the first served call of a key looks the key up in the disk cache (the
    # tuning's agreement, pruning and lookup) and agrees on what to serve in one exchange, all through the job's store
    # (no device work); the served key's next call makes none (asserted above)
    for r in served_on_two_ranks:
        assert r["collective"]["exchanges"] == [
            "[cap_first_group] agree on key and config space", "[cap_first_group key=65] prune",
            "[cap_first_group key=65] cache lookup", "[cap_first_group] serve an undecided key (first)",
        ], r["collective"]


@pytest.mark.timeout(120)
def test_autotune_a_decided_key_inside_a_capture_runs_its_config_with_no_store_group_or_file_access(tmp_path):
    """And with ``autotune_replicas=`` beside ``autotune_pg=`` (a DP x TP layer's call): before, the capture check
    looked in the default group's table for any call that named ``autotune_pg`` or a layout, and raised
    ``CaptureError`` ("key 64 is not decided") for a key decided for that layout."""
    results = run(tmp_path, "autotune_decided_on_two_ranks", ranks=2)
    for decided in ("decided", "decided_pg", "decided_layout"):
        assert results[0][decided] == results[1][decided], (decided, results)
    for r in results:
        for which, decided in (("inside", r["decided"]), ("inside_pg", r["decided_pg"]),  # default group, a group,
                               ("inside_layout", r["decided_layout"])):  # a group and its replicas'

            seen = r[which]
            assert "error" not in seen and seen["ok"] and seen["runs"] == [decided], (which, seen)
            assert untouched(seen), (which, seen)
            assert seen["asks"] == 0, (which, seen)  # a decided call never asks whether it is captured
        slow = r["slow_layout"]  # ``autotune_allow_arg_overwrite=True``: the slow path, which asks, and runs
        assert "error" not in slow and slow["ok"] and slow["runs"] == [r["decided_layout"]], slow
        assert untouched(slow) and slow["asks"] >= 1, slow
        fresh = r["fresh_group"]  # a group no call used: undecided there, and its channel not made inside the
        # capture (before, it was: for an mpi4py communicator, an ``Idup`` on this rank alone)
        assert fresh.get("error") == "CaptureError" and fresh["runs"] == [] and untouched(fresh), fresh
        assert fresh["set_up"] is False, fresh


@pytest.mark.timeout(120)
def test_contextual_calls_that_would_tune_inside_a_capture_raise_and_a_decided_call_runs(tmp_path):
    (r,) = run(tmp_path, "contextual_alone")
    first = r["first_inside"]  # the function's first call: every key it meets would be tuned
    assert first.get("error") == "CaptureError" and first["message"].startswith("cap_ctx: "), first
    assert "first call" in first["message"] and "before capturing" in first["message"], first
    assert first["launches"] == [] and first["chosen"] == {} and untouched(first), first
    tuned = r["tunes"]  # outside: tunes key 64
    assert tuned["ok"] and len(tuned["chosen"]) == 1, tuned
    ((key_64, config_64),) = tuned["chosen"].items()
    block_64 = int(config_64.split("BLOCK: ")[1].split(",")[0])
    decided = r["decided_inside"]  # one launch, with the decided config, and nothing else
    assert decided["ok"] and decided["launches"] == [[64, block_64]] and decided["asks"] == 0, decided
    assert untouched(decided), decided
    new = r["new_key_inside"]  # a later call meeting a new (kernel, key)
    assert new.get("error") == "CaptureError", new
    assert new["message"].startswith("cap_ctx: kernel copy_kernel: key (200, 'torch.float32'"), new["message"]
    assert "before capturing" in new["message"] and "Nothing was launched" in new["message"], new
    assert new["launches"] == [] and new["chosen"] == {key_64: config_64} and untouched(new), new
    after = r["new_key_after"]  # the same call outside: tunes key 200
    assert after["ok"] and len(after["chosen"]) == 2 and after["chosen"][key_64] == config_64, after
    assert {n for n, _ in after["launches"]} == {200}, after
    assert len(r["cache_files"]) == 2, r["cache_files"]


@pytest.mark.timeout(150)
def test_contextual_agreement_due_inside_a_capture_is_made_at_the_next_call_outside_on_every_rank(tmp_path):
    # sync_every=4: agreements would be at calls 4 and 8; both fall inside a "capture" and are made at 5 and 9
    results = run(tmp_path, "contextual_deferred_agreement", ranks=2)
    for r in results:
        calls = {c["call"]: c for c in r["calls"]}
        assert [c for c in calls if calls[c]["inside"]] == [3, 4, 6, 7, 8], calls
        for number in (3, 4, 6, 8):  # decided calls inside: one launch each, nothing exchanged, stored or written
            assert calls[number]["ok"] and len(calls[number]["launches"]) == 1, calls[number]
            assert untouched(calls[number]), calls[number]
        for number in (3, 6):  # not an agreement point (nor a deferred one): the capture is not even asked about
            assert calls[number]["asks"] == 0, calls[number]
        new = calls[7]  # a new key inside the capture
        assert new.get("error") == "CaptureError" and "kernel copy_kernel: key (200, " in new["message"], new
        assert new["launches"] == [] and untouched(new), new
        assert [call for call, _ in r["agreements"]] == [5, 9], r["agreements"]  # never at 4 or 8
        assert r["agreed_calls"] == [5], r  # the agreement at 5 found rank 1's pending key 96: call 5 tuned it
        assert all(c["ok"] for n, c in calls.items() if n != 7), calls
    rank1 = {c["call"]: c for c in results[1]["calls"]}
    assert any("(96, " in p for p in rank1[2]["pending"]) and any("(96, " in p for p in rank1[4]["pending"]), rank1
    # both ranks end in the same state: the same agreements and the same decisions, key 96 among them
    assert results[0]["agreements"] == results[1]["agreements"], results
    assert results[0]["chosen"] == results[1]["chosen"] and len(results[0]["chosen"]) == 2, results
    assert any(key.startswith("(96, ") for key in results[0]["chosen"]), results[0]["chosen"]
