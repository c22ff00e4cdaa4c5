"""The host cost of a decided ``contextual_autotune`` call of a kernel-less function alone (``is_dist=False``): 50,000
calls, 7 times; prints the minimum and median microseconds per call and the library it ran (its folder's parent).
Compare two libraries with PYTHONPATH (e.g. ``arms/s41`` = ``git archive 74e3658 triton_dist_tune``).

Usage: PYTHONPATH=DIR python3 benchmarks/bench_contextual_decided_cpu.py
"""

import os
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "1"
os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp()
import torch  # noqa: E402

import triton_dist_tune  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402


@contextual_autotune(is_dist=False)
def layer(x):
    return x


x = torch.ones(1)
layer(x)
best = []
for _ in range(7):
    t = time.perf_counter()
    for _ in range(50000):
        layer(x)
    best.append((time.perf_counter() - t) / 50000 * 1e6)
library = triton_dist_tune.__file__.split("/")[-3]
print(f"{library}: min {min(best):.2f} us, median {sorted(best)[3]:.2f} us per decided call")
