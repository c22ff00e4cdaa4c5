"""What the keys of the README's MoE campaign after the first compiled, and who compiled it: for every config a key
screened that no earlier key had screened, whether it was newly kept at that batch size (kept by none of the keys
before it, so no earlier key could have screened it), and which compile made it (the rank log's
``compile of config N: S s (LABEL)`` lines: ``next key``, the guess the key before it compiled ahead; ``guess``, a
stage's guess of the next stage; ``needed``, a compile a stage waited for).

Launch: ``python benchmarks/needed_compiles.py LOG [LOG ...]`` (each a ``campaign_rank.log.gz`` or ``.log`` of the
campaign as ``benchmarks/gpu/_campaign.sh`` leaves it). One line per log, then the logs' sum.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from moe_kernels import moe_config_space, moe_prune_for  # noqa: E402

#: the README's campaign: its batch sizes in the order met, and its problem (top-k 2 of 8 experts, bf16)
BATCHES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 6144, 8192)
TOP_K, EXPERTS, DTYPE_SIZE = 2, 8, 2
COMPILE = re.compile(r"compile of config (\d+): [0-9.]+ s \(([a-z ]+)\)")
MEASURED = re.compile(r"key=\((\d+), .*\] config (\d+) measured")


def tally(log: Path, kept: dict[int, set[int]]) -> dict[str, Counter]:
    """For ``log``: per kind (``newly kept``, ``kept before``), the compile labels of the configs first screened
    at a key after the first."""
    label: dict[int, str] = {}
    screened: dict[int, set[int]] = {}
    with (gzip.open if log.suffix == ".gz" else open)(log, "rt", errors="replace") as f:
        for line in f:
            if (found := COMPILE.search(line)) is not None:
                label.setdefault(int(found.group(1)), found.group(2))
            if (found := MEASURED.search(line)) is not None:
                screened.setdefault(int(found.group(1)), set()).add(int(found.group(2)))
    counts: dict[str, Counter] = {"newly kept": Counter(), "kept before": Counter()}
    for k, batch in enumerate(BATCHES[1:], 1):
        before = set().union(*(kept[b] for b in BATCHES[:k]))
        earlier = set().union(*(screened.get(b, set()) for b in BATCHES[:k]))
        for config in screened.get(batch, set()) - earlier:
            counts["kept before" if config in before else "newly kept"][label.get(config, "no compile line")] += 1
    return counts


def text(counts: dict[str, Counter]) -> str:
    parts = []
    for kind, by_label in counts.items():
        total = sum(by_label.values())
        shares = ", ".join(f"{name} {n} ({100 * n / total:.0f}%)" for name, n in sorted(by_label.items()))
        parts.append(f"{kind} {total}" + (f" ({shares})" if total else ""))
    return "; ".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("logs", type=Path, nargs="+")
    args = p.parse_args()
    space = moe_config_space()
    kept = {b: {i for i, c in enumerate(space) if moe_prune_for(c, b, TOP_K, EXPERTS, DTYPE_SIZE)} for b in BATCHES}
    summed: dict[str, Counter] = {"newly kept": Counter(), "kept before": Counter()}
    for log in args.logs:
        counts = tally(log, kept)
        for kind, by_label in counts.items():
            summed[kind].update(by_label)
        print(f"{log}: first screened after the first key: {text(counts)}")
    if len(args.logs) > 1:
        print(f"all {len(args.logs)} logs: {text(summed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
