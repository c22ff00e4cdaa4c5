"""How a campaign's tuning of each batch size treated the corpus's best config, read from its rank log: the chosen
config and its ratio by the H200 corpus, then every outcome the log records for the chosen config and for the
corpus's best (screening outcomes of one sample each; a race's outcome over several samples, from the settled block
when over 3). It answers "did the search screen the best config, how did it read it, and did it reach the settled
block?", which the campaign's table alone cannot (the fourteenth session's M = 512 finding was read this way).

Launch: ``python benchmarks/campaign_trace.py RANK.log[.gz] [--m 512,1024] [--corpus benchmarks/results/corpus]``
(the MoE example's campaign: ``benchmarks/gpu/_campaign.sh`` leaves ``campaign_rank.log.gz``).
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_search import landscapes  # noqa: E402

KEY = re.compile(r"\[moe_gemm key=\((\d+),")
#: a config's outcome on this rank: in the rank log's words before they said what each time is (``own``,
#: ``group``), and after (``group time ...; this rank's own time ...``)
OUTCOME = re.compile(r"config (\d+) (measured|stopped): "
                     r"(?:own ([0-9.]+) ms, group [0-9.]+ ms \S+ over (\d+) sample\(s\)|"
                     r"group time [0-9.]+ ms \S+ over (\d+) sample\(s\) .*?; this rank's own time ([0-9.]+) ms "
                     r"\([^)]*\)): (\{.*\})")
DECISION = re.compile(r"decision: config (\d+) \((\{.*?\})\)")
FIELDS = (("M", "BLOCK_SIZE_M"), ("N", "BLOCK_SIZE_N"), ("K", "BLOCK_SIZE_K"), ("G", "GROUP_SIZE_M"),
          ("w", "num_warps"), ("s", "num_stages"))


def text(config: str) -> str:
    """The corpus's name of a config as the rank log prints it (``{BLOCK_SIZE_K: 64, ...}``)."""
    values = dict(re.findall(r"(\w+): (\d+)", config))
    return "-".join(f"{short}{values.get(name, '?')}" for short, name in FIELDS)


def read(path: Path) -> dict[int, dict]:
    """Per batch size: its outcomes (config name -> [(ms, samples, state)]) and its decision's config name."""
    keys: dict[int, dict] = {}
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", errors="replace") as f:
        for line in f:
            key = KEY.search(line)
            if key is None:
                continue
            entry = keys.setdefault(int(key.group(1)), {"outcomes": {}, "chosen": None})
            if (found := OUTCOME.search(line)) is not None:
                _, state, old_ms, old_samples, samples, ms, config = found.groups()
                ms, samples = ms or old_ms, samples or old_samples
                entry["outcomes"].setdefault(text(config), []).append((float(ms), int(samples), state))
            elif (found := DECISION.search(line)) is not None:
                entry["chosen"] = text(found.group(2))
    return keys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log", type=Path)
    p.add_argument("--m", type=lambda t: [int(m) for m in t.split(",")], default=None, help="these batch sizes only")
    p.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parent / "results" / "corpus")
    args = p.parse_args()
    corpus = landscapes(args.corpus)
    for m, entry in sorted(read(args.log).items()):
        if args.m is not None and m not in args.m:
            continue
        land = next((v for k, v in sorted(corpus.items()) if k.split("|")[1:3] == ["moe", str(m)]), None)
        chosen = entry["chosen"]
        if land is None:
            print(f"M = {m}: chose {chosen} (no corpus landscape)")
            continue
        ratios, best = land["ratios"], land["best"]
        ratio = ratios.get(chosen)
        print(f"M = {m}: chose {chosen} ({'-' if ratio is None else f'{ratio:.3f}'} by the corpus); corpus best {best}")
        for name, label in ((chosen, "chosen"), (best, "corpus best"))[: 1 if chosen == best else 2]:
            seen = entry["outcomes"].get(name, [])
            shown = ", ".join(f"{ms:.4f}" + (f" over {n} (settled)" if n > 3 else "") for ms, n, _ in seen)
            print(f"  {label} {name}: {shown or 'not screened'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
