"""The README's MoE campaign's choices by the H200 corpus: for each batch size the corpus recorded, the chosen
config's time over the corpus's best (its ``ratios``); ``-`` where the corpus has no landscape of that batch size.

Launch: ``python benchmarks/campaign_vs_corpus.py CAMPAIGN.txt [...] [--corpus benchmarks/results/corpus]``, where
each file is the example's output (its ``RESULT {...}`` line, as ``benchmarks/gpu/_campaign.sh`` leaves it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_search import landscapes  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parent / "results" / "corpus")
    args = p.parse_args()
    corpus = landscapes(args.corpus)
    for run in args.runs:
        found = re.search(r"^RESULT (\{.*\})$", run.read_text(), re.MULTILINE)
        if found is None:
            print(f"{run}: no RESULT line")
            continue
        result = json.loads(found.group(1))
        cells, over = [], 0
        for m, desc in result["choices"].items():
            key = next((k for k in sorted(corpus) if k.split("|")[1:3] == ["moe", m]), None)
            ratio = corpus[key]["ratios"].get(desc) if key else None
            cells.append(f"{m}: {ratio:.3f}" if ratio is not None else f"{m}: -")
            over += ratio is not None and ratio > 1.02
        print(f"{run}: {result['campaign_s']:.1f} s; {', '.join(cells)}; over 1.02: {over}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
