"""The replays read the collective landscapes (``benchmarks/corpus_collective.py``) as the tuned function's configs,
and leave out a landscape whose recorder ran out of time."""

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
