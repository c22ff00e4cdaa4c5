"""The examples' tensor-parallel layers (AG-GEMM, GEMM-RS, the TP MLP) tuned under ``torchrun --max-restarts`` with a
rank hung inside a config, run by tests/test_tp_restarts.py.

Usage: ``python tp_restart_cases.py CASE`` as a torchrun worker (``init_distributed`` as the docs say). Every call
of a tuned GEMM appends ``<attempt> <function> <config index>`` to ``calls.rank<r>`` in ``FAULT_DIR``
(``<attempt>``: ``TORCHELASTIC_RESTART_COUNT``). ``STOP`` holds comma-separated ``function:index@rank/attempt``
items: that rank's call of that config in that attempt hangs (its watchdog ends it).
``ENV_ATTEMPT_<n>`` (``NAME=VALUE`` items, space-separated) sets those variables in attempt ``n`` before it tunes:
what a user changes between two runs of a job. Each rank prints ``RESULT {json}`` with the configs each layer ran
last.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _cases import case, emit, main

import triton_dist_tune as tdt
from examples._dist_common import LAST_CONFIG, make_tuned
from examples.ag_gemm import ag_gemm, ag_gemm_config_space, ag_gemm_prune
from examples.gemm_rs import gemm_rs, gemm_rs_config_space, gemm_rs_prune
from examples.tp_mlp import TPMLP

QUICK = {"n_warmup": 1, "n_repeat": 3}


def _attempt() -> str:
    return os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")


def _stops() -> set[tuple[str, int, int, str]]:
    found = set()
    for item in filter(None, os.environ.get("STOP", "").split(",")):
        where, who = item.split("@")
        name, index = where.split(":")
        rank, attempt = who.split("/")
        found.add((name, int(index), int(rank), attempt))
    return found


def _watched(fn, space: list[dict]):
    """``fn`` logging each call's config index, and stopping where ``STOP`` says."""
    stops, folder = _stops(), Path(os.environ["FAULT_DIR"])
    name = fn.__name__

    @functools.wraps(fn)
    def watched(*args, **kwargs):
        if "splits" not in kwargs:  # the check's reference (``ref_prog``: algo="torch" alone), not a config
            return fn(*args, **kwargs)
        config = {k: kwargs[k] for k in ("algo", "splits", "gemm_config")}
        index = space.index(config)
        rank = dist.get_rank()
        with open(folder / f"calls.rank{rank}", "a") as f:
            f.write(f"{_attempt()} {name} {index}\n")
        if (name, index, rank, _attempt()) in stops:
            time.sleep(3600)  # inside the config: a hang, which the rank's watchdog ends after T
        return fn(*args, **kwargs)

    return watched


def tuned_pair():
    """The examples' tuned AG-GEMM and GEMM-RS (their spaces, prunes and checks), watched."""
    ag_space, rs_space = ag_gemm_config_space("cpu"), gemm_rs_config_space("cpu")
    return (make_tuned(_watched(ag_gemm, ag_space), ag_space, ag_gemm_prune, **QUICK),
            make_tuned(_watched(gemm_rs, rs_space), rs_space, gemm_rs_prune, **QUICK))


def _layout():
    for item in os.environ.get(f"ENV_ATTEMPT_{_attempt()}", "").split():
        name, value = item.split("=", 1)
        os.environ[name] = value
    tdt.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = 2
    groups = [dist.new_group(list(range(g, g + tp))) for g in range(0, world, tp)]
    across = [dist.new_group(list(range(r, world, tp))) for r in range(tp)]
    return rank, world, tp, groups[rank // tp], (across[rank % tp] if world // tp > 1 else None)


@case
def mlp() -> None:
    """The TP MLP of examples/tp_mlp.py (TP groups of 2, replicas tuned as one on 4 ranks), forward twice."""
    rank, world, tp, group, replicas = _layout()
    gen = torch.Generator().manual_seed(100 + rank // tp)
    hidden, ffn, m_local = 32, 64, 8
    w_up = torch.randn(hidden, ffn, generator=gen) / hidden**0.5
    w_down = torch.randn(ffn, hidden, generator=gen) / ffn**0.5
    x = torch.randn(tp * m_local, hidden, generator=gen)
    ag, rs = tuned_pair()
    layer = TPMLP.from_dense(w_up, w_down, group, ag_gemm_fn=ag, gemm_rs_fn=rs, replicas=replicas)
    tp_rank = dist.get_rank(group)
    with torch.no_grad():
        layer(x[tp_rank * m_local:(tp_rank + 1) * m_local])
    emit(rank=rank, attempt=_attempt(), ag_gemm=LAST_CONFIG["ag_gemm"], gemm_rs=LAST_CONFIG["gemm_rs"])
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
