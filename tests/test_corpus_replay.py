"""The replays read the collective landscapes (``benchmarks/corpus_collective.py``) as the tuned function's configs,
and leave out a landscape whose recorder ran out of time; several recordings pool into one oracle."""

from __future__ import annotations

import json
import sys

from harness import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import replay_search  # noqa: E402


def test_collective_landscapes_load_as_algo_splits_and_tile_and_incomplete_ones_are_left_out(tmp_path):
    ratios = {"chunked-x2-128x64x32-g8-w4-s3": 1.0, "sequential-x1-64x64x64-g8-w8-s4": 1.3,
              "chunked-x1-16x32x32-g8-w4-s3": 2.0}
    corpus = {"H200|ag_gemm_w4|4096x4096x3584|3": {"family": "collective", "ratios": ratios, "complete": True},
              "H200|rs_gemm_w4|1024x8192x8192|3": {"family": "collective", "ratios": ratios, "complete": False}}
    path = tmp_path / "collective.json"
    path.write_text(json.dumps(corpus))
    (land,) = replay_search.load([path])  # before: the incomplete landscape was replayed as if exhaustive
    assert land.family == "collective" and land.name == "ag_gemm_w4|4096x4096x3584|3"
    # before: one opaque string per config ({"config": ...}), whose two patterns the grid cannot split into numbers
    assert {"algo": "chunked", "splits": 2, "gemm_config": "128x64x32-g8-w4-s3"} in land.configs
    assert sorted(land.ratios) == [1.0, 1.3, 2.0]


def test_pooled_oracle_takes_each_configs_median_over_recordings_and_skips_incomplete_ones():
    import _collective_report as report

    key = "H200|ag_gemm_w2|4096x4096x3584|3"
    bimodal, steady, slow = "chunked-x1-128x256x32-g8-w8-s4", "sequential-x1-128x256x32-g8-w8-s4", \
        "sequential-x1-16x32x32-g8-w4-s3"

    def recording(ratios, complete=True):
        return {key: {"family": "collective", "ratios": ratios, "complete": complete,
                      "best": min(ratios, key=ratios.get)}}

    # the chunked config is the best of one process and 1.5-1.9x in the two others: the steady one is the best
    recordings = [recording({bimodal: 1.0, steady: 1.13, slow: 2.0}),
                  recording({bimodal: 1.86, steady: 1.0, slow: 2.1}),
                  recording({bimodal: 1.5, steady: 1.02, slow: 1.9}),
                  recording({bimodal: 1.0, steady: 3.0, slow: 1.1}, complete=False)]  # cut short: left out
    (entry,) = report.pooled(recordings).values()
    assert entry["best"] == steady and entry["recordings"] == 3
    assert entry["ratios"][steady] == 1.0 and abs(entry["ratios"][bimodal] - 1.5 / 1.02) < 1e-9
    # judged against one recording, choosing the steady config reads 1.13; against the pooled oracle, 1.0
    assert abs(report.judge(steady, recordings[0][key])["ratio"] - 1.13) < 1e-9
    assert report.judge(steady, entry)["ratio"] == 1.0
