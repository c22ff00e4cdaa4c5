"""What a compile costs the rank's own process once a worker has compiled the kernel: Triton's ``compile`` of the
example's MoE kernel for an H100/H200 target (sm90), cold, then found in Triton's cache (what the rank does after a
compile worker, ``measure/compile_workers.py``), on this machine's CPU. No GPU needed.

Launch: ``python benchmarks/kernel_cache_load.py [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tdt_cache_load_")  # an empty cache: the first is cold
os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from examples.moe_kernels import fused_moe_kernel  # noqa: E402

SIGNATURE = {**{name: "*bf16" for name in ("a_ptr", "b_ptr", "c_ptr")},
             **{name: "*i32" for name in ("sorted_token_ids_ptr", "expert_ids_ptr", "num_tokens_post_padded_ptr")},
             **{name: "i32" for name in ("N", "K", "EM", "num_valid_tokens", "stride_am", "stride_ak", "stride_be",
                                         "stride_bn", "stride_bk", "stride_cm", "stride_cn")},
             **{name: "constexpr" for name in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M",
                                               "top_k")}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    target, options = GPUTarget("cuda", 90, 32), {"num_warps": 4, "num_stages": 3}
    print(f"triton {triton.__version__}, {os.cpu_count()} CPUs")
    for bm, bn in ((32, 64), (64, 128), (128, 128)):
        constexprs = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "top_k": 2}
        times = []
        for _ in range(1 + args.repeat):
            started = time.perf_counter()
            triton.compile(ASTSource(fused_moe_kernel, SIGNATURE, constexprs, {}), target=target, options=options)
            times.append(time.perf_counter() - started)
        print(f"BLOCK_SIZE_M {bm}, BLOCK_SIZE_N {bn}: cold {1e3 * times[0]:.0f} ms, from the cache "
              f"{1e3 * min(times[1:]):.1f}-{1e3 * max(times[1:]):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
