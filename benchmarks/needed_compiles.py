"""Which compiles each key of the README's MoE campaign waited for, and how many of them were configs newly kept at
that batch size (kept by none of the keys before it, so no earlier key could have screened them), from the rank
logs' compile lines (``compile of config N: S s (needed)``).

Launch: ``python benchmarks/needed_compiles.py LOG [LOG ...]`` (each a ``campaign_rank.log.gz`` or ``.log`` of the
campaign as ``benchmarks/gpu/_campaign.sh`` leaves it). One line per log.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from moe_kernels import moe_config_space, moe_prune_for  # noqa: E402

#: the README's campaign: its batch sizes in the order met, and its problem (top-k 2 of 8 experts, bf16)
BATCHES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 6144, 8192)
TOP_K, EXPERTS, DTYPE_SIZE = 2, 8, 2
NEEDED = re.compile(r"key=\((\d+), .*compile of config (\d+): [0-9.]+ s \(needed\)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("logs", type=Path, nargs="+")
    args = p.parse_args()
    space = moe_config_space()
    kept = {b: {i for i, c in enumerate(space) if moe_prune_for(c, b, TOP_K, EXPERTS, DTYPE_SIZE)} for b in BATCHES}
    for log in args.logs:
        needed: dict[int, list[int]] = {}
        with (gzip.open if log.suffix == ".gz" else open)(log, "rt", errors="replace") as f:
            for line in f:
                if (found := NEEDED.search(line)) is not None:
                    needed.setdefault(int(found.group(1)), []).append(int(found.group(2)))
        parts = []
        for k, batch in enumerate(BATCHES[1:], 1):
            before = set().union(*(kept[b] for b in BATCHES[:k]))
            waited = needed.get(batch, [])
            if waited:
                parts.append(f"{batch}: {len(waited)} ({sum(c not in before for c in waited)} newly kept)")
        print(f"{log}: compiles waited for, by key after the first: {'; '.join(parts) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
