"""A MoE-like tuned function whose config space a job changes (``SUPERSEDED_FIRST``: the first config's
BLOCK_SIZE_M), for tests/test_superseded.py: the second job tunes its keys again and supersedes the first's decisions.

Usage: python superseded_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}`` lines.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt


def tile(m: int) -> dict[str, int]:
    return {"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 2}


@case
def tune():
    """Batch sizes 1 and 16 of ``moe``, over the space ``SUPERSEDED_FIRST`` names (verbose: rank 0's summary)."""
    first = int(os.environ["SUPERSEDED_FIRST"])

    @tdt.autotune([tile(first), tile(64)], key_fn=lambda x: (x.shape[0], str(x.dtype)), n_warmup=1, n_repeat=2)
    def moe(x, **config):
        time.sleep(config["BLOCK_SIZE_M"] / 16000)
        dist.all_reduce(x.clone())
        return x

    tdt.init_distributed()
    for m in (1, 16):
        moe(torch.ones(m, 4, dtype=torch.bfloat16), autotune_verbose=True)
    emit(decided={str(k): v["BLOCK_SIZE_M"] for k, v in moe.tuner.decided.items()})


if __name__ == "__main__":
    main()
