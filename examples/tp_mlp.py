"""A tensor-parallel MLP block built from the tuned AG-GEMM and GEMM-RS examples (inference only).

The input is sequence-parallel: each rank of the TP group holds ``x_local`` ``[M_local, hidden]``.
The up projection is column-parallel (AG-GEMM: gather the rows, multiply by this rank's column shard
of ``W_up``), then the activation, then the row-parallel down projection (GEMM-RS: multiply by this
rank's row shard of ``W_down`` and reduce-scatter the partial sums by rows). The output is again
sequence-parallel, ``[M_local, hidden]``. Both GEMMs are tuned over the TP group (``autotune_pg``).

The TP group is repeated across the data-parallel dimension (replicas). The replicas are tuned as one
(``autotune_replicas=`` the group linking the same TP rank of every replica): they split the first pass of
the race between them and end on one config, the one that is fastest at the slowest replica, so every
replica runs the same configs and one cache entry holds the layout's choice (tuned alone, each TP group
could choose differently, and the last one to write the shared cache entry would win).

Demo: ``bash launch.sh --nproc 4 examples/tp_mlp.py`` (or ``torchrun --nproc-per-node 4 ...``): the
4 ranks form two TP groups of 2 (two replicas), tuned as one, check against a dense reference and print
one line per rank with the configs it runs: the same on every rank. Rank 0 then prints, after every rank's line,
whether its TP group's keys were tuned or served from the disk cache: ``tp_mlp keys: ag_gemm 1 tuned, 0 served from
the cache; gemm_rs 1 tuned, 0 served from the cache`` (run again: ``0 tuned, 1 served`` each). On an even number
of ranks the TP groups are of 2 ranks; on an odd number each rank is a TP group of its own (TP size 1, printed as
``tp rank 0/1``), and every rank a replica.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples._dist_common import LAST_CONFIG, cache_line, decided_counts  # noqa: E402

GemmFn = Callable[..., torch.Tensor]


class TPMLP(nn.Module):
    """``down(act(up(x)))`` with ``up`` column-parallel (AG-GEMM) and ``down`` row-parallel (GEMM-RS).

    Args:
        w_up: this rank's column shard of the up projection, ``[hidden, ffn / tp]``.
        w_down: this rank's row shard of the down projection, ``[ffn / tp, hidden]``.
        group: the tensor-parallel process group; also the group the GEMMs are tuned over.
        replicas: the group linking this rank's position in every replica of ``group`` (None: ``group`` is not
            replicated, or its replicas tune apart); passed as ``autotune_replicas``.
        ag_gemm_fn / gemm_rs_fn: the tuned functions (default: ``tuned_ag_gemm`` / ``tuned_gemm_rs``).
    """

    def __init__(
        self,
        w_up: torch.Tensor,
        w_down: torch.Tensor,
        group: dist.ProcessGroup,
        ag_gemm_fn: GemmFn | None = None,
        gemm_rs_fn: GemmFn | None = None,
        replicas: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__()
        if w_up.shape[1] != w_down.shape[0] or w_up.shape[0] != w_down.shape[1]:
            raise ValueError(f"TPMLP: w_up {tuple(w_up.shape)} and w_down {tuple(w_down.shape)} do not chain")
        self.w_up = nn.Parameter(w_up, requires_grad=False)
        self.w_down = nn.Parameter(w_down, requires_grad=False)
        self.group = group
        self.tuning = {"autotune_pg": group} if replicas is None else {"autotune_pg": group,
                                                                        "autotune_replicas": replicas}
        if ag_gemm_fn is None:
            from examples.ag_gemm import tuned_ag_gemm as ag_gemm_fn
        if gemm_rs_fn is None:
            from examples.gemm_rs import tuned_gemm_rs as gemm_rs_fn
        self.ag_gemm_fn, self.gemm_rs_fn = ag_gemm_fn, gemm_rs_fn

    @classmethod
    def from_dense(cls, w_up: torch.Tensor, w_down: torch.Tensor, group: dist.ProcessGroup, **kw) -> TPMLP:
        """Build this rank's shard from the full ``[hidden, ffn]`` and ``[ffn, hidden]`` weights."""
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if w_up.shape[1] % world:
            raise ValueError(f"TPMLP: ffn={w_up.shape[1]} is not divisible by the TP size {world}")
        cols = w_up.shape[1] // world
        shard = slice(rank * cols, (rank + 1) * cols)
        return cls(w_up[:, shard].contiguous(), w_down[shard].contiguous(), group, **kw)

    def forward(self, x_local: torch.Tensor) -> torch.Tensor:
        """``[M_local, hidden]`` in, ``[M_local, hidden]`` out (this rank's rows of the block's output)."""
        h = self.ag_gemm_fn(x_local, self.w_up, group=self.group, **self.tuning)
        h = F.gelu(h, approximate="tanh")
        return self.gemm_rs_fn(h, self.w_down, group=self.group, **self.tuning)


def reference(x_full: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """The dense block in float32."""
    return F.gelu(x_full.float() @ w_up.float(), approximate="tanh") @ w_down.float()


#: ``bash launch.sh`` checks this script's arguments once, with parse_arguments, before it starts the ranks
LAUNCH_CHECKS_ARGUMENTS = True


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options: none but ``--help`` (another: the usage, its message and exit status 2). ``bash
    launch.sh`` calls it once before it starts the ranks (scripts/check_args.py), so that a mistake is said once."""
    return argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """4 ranks, two TP groups of 2 tuned as one: tune, check against the dense block, print one line per rank."""
    parse_arguments(argv)
    import triton_dist_tune
    from examples.ag_gemm import make_tuned_ag_gemm
    from examples.gemm_rs import make_tuned_gemm_rs

    triton_dist_tune.init_distributed()  # NCCL and one GPU per rank with CUDA, else gloo
    cuda = torch.cuda.is_available()
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = 2 if world % 2 == 0 else 1
    groups = [dist.new_group(list(range(g, g + tp))) for g in range(0, world, tp)]  # every rank creates all
    # the replicas: rank r of every TP group together (every rank creates all of them too)
    across = [dist.new_group(list(range(r, world, tp))) for r in range(tp)]
    index, group = rank // tp, groups[rank // tp]
    replicas = across[rank % tp] if world // tp > 1 else None
    tp_rank = dist.get_rank(group)
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype, tol = (torch.bfloat16, 2e-2) if cuda else (torch.float32, 1e-4)
    m_local, hidden, ffn = (512, 1024, 4096) if cuda else (8, 32, 64)

    # The same weights and input on every rank of a TP group; each group gets its own.
    gen = torch.Generator().manual_seed(100 + index)
    w_up = (torch.randn(hidden, ffn, generator=gen) / hidden**0.5).to(device, dtype)
    w_down = (torch.randn(ffn, hidden, generator=gen) / ffn**0.5).to(device, dtype)
    x_full = torch.randn(tp * m_local, hidden, generator=gen).to(device, dtype)
    rows = slice(tp_rank * m_local, (tp_rank + 1) * m_local)

    quick = {} if cuda else {"n_warmup": 1, "n_repeat": 3}  # the interpreter is slow
    ag_gemm, gemm_rs = make_tuned_ag_gemm(**quick), make_tuned_gemm_rs(**quick)
    mlp = TPMLP.from_dense(w_up, w_down, group, ag_gemm_fn=ag_gemm, gemm_rs_fn=gemm_rs, replicas=replicas)
    with torch.no_grad():
        y = mlp(x_full[rows])
        ag_config, rs_config = LAST_CONFIG.get("ag_gemm"), LAST_CONFIG.get("gemm_rs")
        y = mlp(x_full[rows])  # a second call takes the decided configs (no tuning)
    ref = reference(x_full, w_up, w_down)[rows]
    err = ((y.float() - ref).norm() / ref.norm()).item()
    ok = err <= tol
    status = "OK" if ok else "FAIL"
    sys.stdout.write(  # one write per line: the ranks share the terminal
        f"tp_mlp rank {rank} group {index} (tp rank {tp_rank}/{tp}): {status} rel err {err:.2e}; "
        f"ag_gemm {ag_config}; gemm_rs {rs_config}\n"
    )
    sys.stdout.flush()
    bad = torch.tensor([0 if ok else 1], device=device)
    dist.all_reduce(bad)  # (every rank has written its line: rank 0's next one comes after them all)
    if rank == 0:  # its TP group's keys: tuned, or served from the cache (every group decides alike)
        print(cache_line("tp_mlp", {"ag_gemm": decided_counts(ag_gemm), "gemm_rs": decided_counts(gemm_rs)}),
              flush=True)
    dist.destroy_process_group()
    return int(bad.item() > 0)


if __name__ == "__main__":
    sys.exit(main())
