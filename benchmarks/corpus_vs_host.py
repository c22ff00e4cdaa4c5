"""Is a validation miss the search's, or the host's? For each fresh tuning of a ``validate_search.py`` run: the
choice's ratio by the corpus (recorded on another host), and how the tuning itself screened the corpus's best
config on this host against its choice (its one screening sample each, the tuner's timing regime).

- the corpus's best screened here and slower than the choice (beyond ``--noise``): this host ranks them the other
  way; the corpus's judgement of that tuning says more of the two hosts than of the search;
- screened here and within the noise: a near tie;
- not screened: the search did not look at it (a search miss, if the corpus's best is also this host's).

Launch: ``python benchmarks/corpus_vs_host.py RUN.json [RUN.json ...] [--corpus benchmarks/results/corpus]
[--noise 0.02] [--out FILE.md]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_search import landscapes  # noqa: E402


def verdict(row: dict, ratios: dict[str, float], noise: float) -> tuple[str, str, float | None]:
    """(the corpus's best config, what this host's screening says of it, its screened time over the choice's)."""
    best = min(ratios, key=ratios.__getitem__)
    screened = row.get("screened") or {}
    if row["choice"] == best:
        return best, "chosen", 1.0
    if best not in screened or row["choice"] not in screened:
        return best, "not screened here", None
    over = screened[best] / screened[row["choice"]]
    return best, ("slower here" if over > 1 + noise else "a near tie here"), over


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parent / "results" / "corpus")
    p.add_argument("--noise", type=float, default=0.02, help="screened gaps within this share are near ties")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    corpus = landscapes(args.corpus)
    lines = ["| run | shape | tuning | choice | corpus ratio | corpus best | here | best / choice here | judged here |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    counts: dict[str, int] = {}
    judged: list[float] = []
    halves: list[list[float]] = []  # a judged choice's ratio in the judge's even and odd rounds
    heavy: list[float] = []  # a judged choice's ratio among heavy layers (validate_search.py on a GPU)
    for path in args.runs:
        run = json.loads(path.read_text())
        for row in run["rows"]:
            # the corpus's key: GPU|family|M|space size (the GPU validate_search.py read: --corpus-gpu, or the run's)
            shape = f"{run.get('corpus_gpu') or run['gpu']}|{run['family']}|{row['m']}|"
            land = next((v for k, v in sorted(corpus.items()) if k.startswith(shape)), None)
            if land is None or row.get("ratio") is None:
                continue
            best, here, over = verdict(row, land["ratios"], args.noise)
            if row["ratio"] > 1.02:
                counts[here] = counts.get(here, 0) + 1
            local = row.get("ratio_here")  # validate_search.py --judge-here
            if local is not None:
                judged.append(local)
            if row.get("ratio_here_halves"):
                halves.append(row["ratio_here_halves"])
            if row.get("ratio_among_heavy") is not None:
                heavy.append(row["ratio_among_heavy"])
            lines.append(f"| {path.name} | {row['m']} | {row['tuning']} | {row['choice']} | {row['ratio']:.3f} | "
                         f"{best} | {here} | {'-' if over is None else f'{over:.3f}'} | "
                         f"{'-' if local is None else f'{local:.3f}'} |")
    lines += ["", "Choices over 1.02 by the corpus: " + (", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
                                                         or "none")]
    if judged:
        lines.append(f"Judged here (--judge-here): {sum(r <= 1.02 for r in judged)} of {len(judged)} within 1.02, "
                     f"worst {max(judged):.3f}")
    if halves:  # over 1.02 in both halves of the judge's rounds: a miss the judge repeats
        lines.append(f"Over 1.02 in both halves of the judge's rounds: {sum(min(h) > 1.02 for h in halves)} of "
                     f"{len(halves)}; in one half only: {sum(min(h) <= 1.02 < max(h) for h in halves)}")
    if heavy:
        lines.append(f"Judged among heavy layers: {sum(r <= 1.02 for r in heavy)} of {len(heavy)} within 1.02, "
                     f"worst {max(heavy):.3f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
