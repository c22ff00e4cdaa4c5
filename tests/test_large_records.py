"""A decision of a very large config space (almost every config pruned): the tuner must write a record that its own
next read accepts (a reader refuses a cache file over ``MAX_ENTRY_BYTES`` unread)."""

from __future__ import annotations

import json

import pytest
from harness import HERE, ROOT, parse_results, run_python, tune_alone

SCRIPT = f"""
import sys
sys.path.insert(0, {str(HERE / "scenarios")!r})
from other_tuners_cases import RUNS, axpy_reduced, inputs
import triton_dist_tune as tdt
import json, os
n, tag = int(os.environ["CONFIGS"]), int(os.environ["TAG"])
space = [{{"BLOCK": 128 if i % 2 == 0 else 64, "CLAMP": False, "ID": i, "TAG": "t" * tag}} for i in range(n)]
def f(x, y, alpha, *, BLOCK, CLAMP, ID, TAG):
    return axpy_reduced(x, y, alpha, BLOCK=BLOCK, CLAMP=CLAMP)
tuned = tdt.autotune(space, key_fn=lambda x, y, alpha: x.numel(), prune_fn=lambda c, x, y, alpha: c["ID"] < 2,
                     name="big")(f)
x, y = inputs(negative=False)
tuned(x, y, 2.0)
print("RESULT " + json.dumps({{"runs": len(RUNS)}}))
"""


@pytest.mark.triton_dependent
@pytest.mark.timeout(300)
@pytest.mark.parametrize("configs,tag,left_out", [(12_000, 5_340, False), (12_000, 6_000, True)])
def test_a_decision_of_a_space_too_large_to_record_whole_is_read_back_by_the_next_job(tmp_path, configs, tag,
                                                                                      left_out):
    """A space almost all pruned (all but 2 configs) whose record of every outcome is over the 64 MiB a reader
    takes: found with 200,000 short configs (78 MB); here 12,000 configs of 5,340 characters, 68.8 MB written whole
    and 65.4 MB compact (a pruned outcome written whole takes some 280 bytes more than compact: the same claim at
    6% of the outcomes, more than ``cache.SIZED_ABOVE``). The next job's read refused it ('TooLarge ... tuning
    again') and every job tuned the key again. Now the pruned outcomes are written compact (index, config, state),
    and where even that is too large (12,000 configs of 6,000 characters: 73.3 MB compact) left out and counted: the
    next job's call is a cache hit (one run of the function)."""
    cache, env = tune_alone(tmp_path, SCRIPT, timeout=250, CONFIGS=str(configs), TAG=str(tag))
    [path] = list((cache / "big").glob("*.json"))
    from triton_dist_tune.disk.entries import MAX_ENTRY_BYTES

    assert path.stat().st_size <= MAX_ENTRY_BYTES, path.stat().st_size
    record = json.loads(path.read_text())
    assert (record.get("pruned_left_out") == configs - 2) == left_out, record.get("pruned_left_out")
    pruned = [o for o in record["measurements"] if o.get("state") == "pruned"]
    # written compact, not whole: where the whole record fits after all, this test no longer tests the compact form
    assert len(pruned) == (0 if left_out else configs - 2), len(pruned)
    assert all(set(o) <= {"index", "config", "state", "error"} for o in pruned), sorted(pruned[0])
    again = run_python([tmp_path / "tune_alone.py"], env, ROOT, 250)  # the next job: served from the cache
    assert again.returncode == 0, again.stderr[-3000:]
    assert "tuning again" not in again.stderr and parse_results(again.stdout)[-1]["runs"] == 1, again.stderr[-2000:]
