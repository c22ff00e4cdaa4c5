"""A grouped (MoE) GEMM in the style of vLLM / SGLang ``fused_moe``, tuned over a vLLM-sized config space.

The kernel, its config space and pruning, and the routing and problem builders are in ``examples/moe_kernels.py``;
this file is the runnable example: the tuned function, the campaign and the vLLM and SGLang exports (how the kernel
works: its module docstring).

The config space is the one vLLM's ``benchmark_moe.py`` sweeps (BLOCK_SIZE_M x BLOCK_SIZE_N x BLOCK_SIZE_K x
GROUP_SIZE_M x num_warps x num_stages: 1,920 configs), pruned per key by shared memory and by the shape
(:func:`moe_prune`). Each config is a flat dict of those six keywords, so the tuner's search sees each one as an
axis of its grid. The key is the number of tokens M (with the problem's fixed sizes beside it).

Run::

    bash launch.sh examples/moe_gemm.py                        # GPUs: the full space, M = 256
    bash launch.sh examples/moe_gemm.py --campaign             # GPUs: 16 batch sizes, spread over the ranks
    TRITON_INTERPRET=1 bash launch.sh --cpu --nproc 2 examples/moe_gemm.py --tiny   # CPU ranks, tiny space
    TRITON_INTERPRET=1 bash launch.sh --cpu --nproc 2 examples/moe_gemm.py --tiny --campaign
    bash launch.sh examples/moe_gemm.py --campaign --export-vllm configs/   # and vLLM's config file

``--export-vllm DIR`` (with ``--campaign``) writes the campaign's decisions as the fused-MoE config file vLLM
reads, ``DIR/E=<E>,N=<N>,device_name=<GPU>[,dtype=float32].json`` (N: the intermediate size, half the out
features of this GEMM's fused gate and up weight, as vLLM and SGLang name their files: N=1792 on GPUs; the device
the cache records: on CPU ranks the CPU model's), named as ``triton-dist-tune export --format vllm-moe`` names it by
default (vLLM's newest rules);
``--export-sglang DIR`` writes SGLang's, ``DIR/configs/triton_<X_Y_Z>/E=...json`` (this Triton's version; SGLang
reads it with ``SGLANG_MOE_CONFIG_DIR=DIR``), named as ``--format sglang-moe`` names it (docs/campaign.md). Either
holds one entry per batch size tuned (or found in the cache), none for a batch size that failed (rank 0 then
names each batch size that failed and ends with exit status 1; the other ranks end with 0, so that a launcher that
ends the job when a rank fails, as torchrun does, never ends rank 0 before its report is printed).

Rank 0 prints one line per rank with the config it chose and its error against the torch reference, then how its
keys were decided (``moe_gemm keys: 1 tuned, 0 served from the cache``; a campaign counts every key, as its table
does, those whose tuning failed at its end, ``..., 1 failed``; run again, the keys are served from the disk cache),
then ``RESULT {json}`` (what the tests read; for a campaign, ``phases`` holds rank 0's seconds in each step: the
imports, the setup before the tuning, the tuning, the reference checks and the export; ``clock`` holds rank 0's wall
clock, in seconds since the epoch, when its imports began and when it printed ``RESULT``: what comes before and
after them in a caller's wall time is the interpreter's start and the process's end). The reference is computed
expert by expert (:func:`moe_reference`): the check of the largest campaign batch on a GPU (8,192 tokens) needs
about 0.7 GB besides the problem's tensors (before: 224 GiB, and the campaign died before its vLLM file was
written).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

IMPORTED_FROM = time.perf_counter()  # before torch and Triton: the imports are the first of RESULT's phases
IMPORTED_AT = time.time()  # the same instant on the wall clock (RESULT's ``clock``)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import triton  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from examples._dist_common import cache_line, decided_counts  # noqa: E402
from examples.moe_kernels import (  # noqa: E402
    CPU_PROBLEM,
    GPU_PROBLEM,
    H100_SHARED_MEMORY_BYTES,
    Routing,
    config_file_n,
    config_text,
    interpreter_enabled,
    make_problem,
    make_weights,
    moe_config_space,
    moe_gemm,
    moe_prune_for,
    moe_reference,
    relative_error,
)

#: the batch sizes of a campaign (16 of them, most small: decode), and of a CPU campaign
CAMPAIGN_BATCHES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 6144, 8192)
CPU_CAMPAIGN_BATCHES = (3, 8, 20)
#: the values of ``--search`` (the tuner's ``search=``)
SEARCH_CHOICES = ("auto", "search", "exhaustive")


# -- the tuned function -------------------------------------------------------------------------------------------


def moe_key(a: torch.Tensor, w: torch.Tensor, routing: Routing) -> tuple:
    """The tuning key: the number of tokens M first (the only part a model's calls vary), then the fixed sizes
    (experts, N, K, top_k) and the dtype, so that one decision never serves another problem."""
    return (int(a.shape[0]), int(w.shape[0]), int(w.shape[1]), int(w.shape[2]), routing.top_k, str(a.dtype))


@functools.cache
def shared_memory_limit(device_index: int) -> int:
    """Opt-in shared memory per block of CUDA device ``device_index`` (read once)."""
    return int(triton.runtime.driver.active.utils.get_device_properties(device_index)["max_shared_mem"])


def moe_prune(config: dict[str, Any], a: torch.Tensor, w: torch.Tensor, routing: Routing) -> bool:
    """``prune_fn`` of the tuned function (``config`` holds the six tile keywords): :func:`moe_prune_for` at this
    call's sizes."""
    limit = H100_SHARED_MEMORY_BYTES
    if a.device.type == "cuda" and not interpreter_enabled():
        limit = shared_memory_limit(a.device.index or 0)
    return moe_prune_for(config, a.shape[0], routing.top_k, w.shape[0], a.element_size(), limit)


def make_tuned_moe(space: Sequence[dict[str, int]], name: str = "moe_gemm", search: str | None = None,
                   kernel: Any = None, **options: Any) -> Callable[..., torch.Tensor]:
    """``moe(a, w, routing)`` tuned by ``triton_dist_tune.autotune`` over ``space`` (key: :func:`moe_key`,
    prune: :func:`moe_prune`). ``search``: the tuner's ``search=`` (None: ``"auto"``);
    ``kernel`` is the Triton kernel to launch (default :func:`fused_moe_kernel`); ``options`` go to the decorator."""

    @tdt.autotune([dict(c) for c in space], key_fn=moe_key, prune_fn=moe_prune, name=name,
                  search=search or "auto", **options)
    def moe(a: torch.Tensor, w: torch.Tensor, routing: Routing, *, BLOCK_SIZE_M: int, BLOCK_SIZE_N: int,
            BLOCK_SIZE_K: int, GROUP_SIZE_M: int, num_warps: int, num_stages: int) -> torch.Tensor:
        """The MoE grouped GEMM at one config: a new ``[M, top_k, N]`` output (allocated per call, as vLLM's
        ``fused_experts`` allocates its intermediate cache, so no argument is written in place)."""
        config = {"BLOCK_SIZE_M": BLOCK_SIZE_M, "BLOCK_SIZE_N": BLOCK_SIZE_N, "BLOCK_SIZE_K": BLOCK_SIZE_K,
                  "GROUP_SIZE_M": GROUP_SIZE_M, "num_warps": num_warps, "num_stages": num_stages}
        return moe_gemm(a, w, routing, None, config, kernel)

    return moe

# -- the script ---------------------------------------------------------------------------------------------------


def export_moe(engine: str, folder: Path, moe: Any, w: torch.Tensor, problem: dict[str, int],
               batches: Sequence[int]) -> Path:
    """Write the campaign's decisions as ``engine``'s (``vllm`` or ``sglang``) fused-MoE config file into
    ``folder``; returns its path. Every batch size the campaign tuned or found in the cache is in it; one that
    failed is not."""
    from triton_dist_tune.disk import moe_file, sglang_moe, vllm_moe

    decided = []
    for m in batches:  # a batch size whose tuning failed has no decision
        p = make_problem(m, w, problem["top_k"])
        key = moe_key(p.a, p.w, p.routing)
        if key in moe.tuner.decided:
            decided.append((m, moe.tuner.decided[key]))
    # named as `triton-dist-tune export --format vllm-moe | sglang-moe` names it: the device this process tunes on,
    # the dtype, and for SGLang the Triton it tunes with
    sizes = (folder, problem["experts"], config_file_n(problem), None, w.dtype)
    path = (sglang_moe.config_file(*sizes, triton.__version__) if engine == "sglang" else
            vllm_moe.config_file(*sizes))
    return moe_file.write(path, moe_file.table(decided))


def served_text() -> str:
    """What ran at a key that is not decided: a config served by the undecided policy (the variable
    ``TRITON_DIST_AUTOTUNE_UNDECIDED``, which wins over the decorator's ``undecided=``), with no tuning."""
    policy = os.environ.get("TRITON_DIST_AUTOTUNE_UNDECIDED")
    return "a config served without tuning (the key is not decided: " + (
        f"TRITON_DIST_AUTOTUNE_UNDECIDED={policy})" if policy else "the decorator's undecided=)")


def batch_size(text: str) -> int:
    """``--tokens``' and ``--batches``' type: a number of tokens, at least 1 (vLLM's file and ``triton-dist-tune
    export --format vllm-moe`` hold positive batch sizes only)."""
    try:
        tokens = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens") from None
    if tokens < 1:
        raise argparse.ArgumentTypeError(f"{tokens} tokens: a batch size is at least 1")
    return tokens


def export_folder(text: str) -> Path:
    """``--export-vllm``'s and ``--export-sglang``'s type: the folder to write the file into; it may not exist yet
    (it is created), but the first part of it that exists must be a folder, checked before the campaign rather than
    at its end."""
    folder = Path(text)
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{existing} is not a folder: the config file is written into the folder "
                                         "--export-vllm or --export-sglang names")
    return folder


#: ``bash launch.sh`` checks this script's arguments once, with parse_arguments, before it starts the ranks
LAUNCH_CHECKS_ARGUMENTS = True


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's options, checked (a wrong one: the usage, its message and exit status 2). ``bash launch.sh``
    calls it once before it starts the ranks (scripts/check_args.py), so that a mistake is said once."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny space and problem (CPU ranks, interpreter)")
    parser.add_argument("--campaign", action="store_true", help="tune 16 batch sizes as a campaign (3 with --tiny)")
    parser.add_argument("--tokens", type=batch_size, default=None, help="M of the single call (default 256; 20 "
                        "--tiny)")
    parser.add_argument("--batches", type=lambda text: [batch_size(m) for m in text.split(",")], default=None,
                        metavar="M,M,...", help="campaign: these batch sizes instead of the 16 (3 with --tiny)")
    parser.add_argument("--search", default=None, choices=SEARCH_CHOICES, help="search= of the tuner")
    parser.add_argument("--lockstep", action="store_true",
                        help="campaign: the whole group tunes every key together (default: the kernel is rank-local, "
                             "so every rank tunes its share of the keys alone, spread over the job)")
    parser.add_argument("--export-vllm", metavar="DIR", type=export_folder, help="campaign: write vLLM's "
                        "fused-MoE config file of the decisions into DIR (rank 0)")
    parser.add_argument("--export-sglang", metavar="DIR", type=export_folder, help="campaign: write SGLang's "
                        "fused-MoE config file of the decisions into DIR/configs/triton_X_Y_Z/ (rank 0; SGLang reads "
                        "it with SGLANG_MOE_CONFIG_DIR=DIR)")
    args = parser.parse_args(argv)
    if args.batches and not args.campaign:
        parser.error("--batches needs --campaign")
    for flag, given in (("--export-vllm", args.export_vllm), ("--export-sglang", args.export_sglang)):
        if given and not args.campaign:
            parser.error(f"{flag} needs --campaign (the file holds one config per batch size)")
    if args.export_sglang:  # SGLang's folder is named by this Triton's version: one it can read, or no campaign
        from triton_dist_tune.disk import sglang_moe

        try:
            sglang_moe.triton_folder(triton.__version__)
        except ValueError as exc:
            parser.error(f"--export-sglang: this Triton is {triton.__version__}: {exc} to 'triton-dist-tune export "
                         "--format sglang-moe' after the campaign")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    entered = time.perf_counter()
    tdt.init_distributed()
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = torch.cuda.is_available() and not interpreter_enabled()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype, tol = (torch.bfloat16, 2e-2) if cuda else (torch.float32, 1e-4)
    tiny = args.tiny or not cuda
    problem = CPU_PROBLEM if tiny else GPU_PROBLEM
    space = moe_config_space(tiny=tiny)
    quick = {} if cuda else {"n_warmup": 1, "n_repeat": 3}  # the interpreter is slow
    moe = make_tuned_moe(space, search=args.search, **quick)
    w = make_weights(problem, device, dtype)
    result: dict[str, Any] = {"world": world, "space": len(space)}

    if args.campaign:
        batches = args.batches or (CPU_CAMPAIGN_BATCHES if tiny else CAMPAIGN_BATCHES)
        started = time.perf_counter()
        summary = tdt.campaign(moe, lambda m: make_problem(m, w, problem["top_k"]).call(), list(batches),
                               local=not args.lockstep)
        seconds = time.perf_counter() - started
        # a batch size whose tuning failed has no decision: it is neither checked (a call would tune it again and
        # raise) nor exported, and the script ends with exit status 1, naming it
        failed = sorted({batches[row.position] for row in summary.failed})
        states = [row.state for row in summary.rows]  # how each key was decided: tuned, cached or failed
        how, failures = (states.count("tuned"), states.count("cached")), states.count("failed")
        result.update(campaign_s=seconds, failed=len(summary.failed), keys=len(summary.rows), failed_batches=failed)
        checked_from = time.perf_counter()
        checks = {}
        for m in (m for m in batches if m not in failed):  # every key decided: each call is the hot path
            p = make_problem(m, w, problem["top_k"])
            out = moe(p.a, p.w, p.routing)
            checks[m] = (config_text(moe.tuner.decided[moe_key(p.a, p.w, p.routing)]),
                         relative_error(out, moe_reference(p.a, p.w, p.routing)))
        result["choices"] = {str(m): c for m, (c, _) in checks.items()}
        result["max_error"] = max((e for _, e in checks.values()), default=0.0)
        exported_from = time.perf_counter()
        for engine, folder in (("vllm", args.export_vllm), ("sglang", args.export_sglang)):
            if folder and rank == 0:
                result[f"{engine}_file"] = str(export_moe(engine, folder, moe, w, problem, batches))
        result["phases"] = {"imports_s": entered - IMPORTED_FROM, "setup_s": started - entered, "tuning_s": seconds,
                            "checks_s": exported_from - checked_from,
                            "export_s": time.perf_counter() - exported_from}
    else:
        tokens = args.tokens or (20 if tiny else 256)
        p = make_problem(tokens, w, problem["top_k"])
        kept = sum(moe_prune(c, p.a, p.w, p.routing) for c in space)
        started = time.perf_counter()
        out = moe(p.a, p.w, p.routing, autotune_verbose=not tiny)
        seconds = time.perf_counter() - started
        decided = moe.tuner.decided.get(moe_key(p.a, p.w, p.routing))  # None: served by an undecided= policy
        choice = config_text(decided) if decided is not None else served_text()
        error = relative_error(out, moe_reference(p.a, p.w, p.routing))
        how, failures = decided_counts(moe), 0
        result.update(tokens=tokens, kept=kept, tuning_s=seconds, choices={str(tokens): choice}, max_error=error)
    lines: list[Any] = [None] * world
    dist.all_gather_object(lines, result)
    if rank == 0:
        for r, row in enumerate(lines):
            print(f"moe_gemm rank {r}/{world}: chose {row['choices']}, max relative error {row['max_error']:.2e}",
                  flush=True)
        print(cache_line("moe_gemm", {"moe_gemm": how}, failures), flush=True)  # tuned, from the cache, failed
        same = all(row["choices"] == lines[0]["choices"] for row in lines)
        for engine, name in (("vllm", "vLLM"), ("sglang", "SGLang")):
            if f"{engine}_file" in result:
                where = (f"; SGLang reads it with SGLANG_MOE_CONFIG_DIR={args.export_sglang.absolute()}"
                         if engine == "sglang" else "")
                print(f"{name} fused-MoE config file: {result[f'{engine}_file']} (batch sizes "
                      f"{', '.join(result['choices'])}{where})", flush=True)
        clock = {"imports_began": IMPORTED_AT, "result_printed": time.time()}
        print("RESULT " + json.dumps({**result, "same_on_every_rank": same, "clock": clock,
                                      "errors": [row["max_error"] for row in lines]}), flush=True)
        if result.get("failed_batches"):
            print(f"moe_gemm: the tuning failed at batch size(s) {', '.join(map(str, result['failed_batches']))} "
                  "(the campaign's table above says why): not checked" + "".join(
                      f", and not in the {name} file" for name in ("vLLM", "SGLang")
                      if f"{name.lower()}_file" in result), file=sys.stderr, flush=True)
    dist.destroy_process_group()
    if rank != 0:  # rank 0 judges every rank's check (``lines``) and alone says how the run ended: see the docstring
        return 0
    return 0 if max(row["max_error"] for row in lines) <= tol and not result.get("failed_batches") else 1


if __name__ == "__main__":
    sys.exit(main())
