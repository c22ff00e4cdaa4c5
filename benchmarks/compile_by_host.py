"""Whether the README's MoE campaign's time follows the host's compile speed: for every recorded campaign-alone run
(``results/session_h200_*/*/camp36.tgz``, one H200 host per call), the campaign's seconds, its compile part, and
the median wall time of one kernel's compile in its rank log (``compile of config N: S s``), one line per run, then
the correlation of campaign seconds with the compile median over all runs.

Usage: python benchmarks/compile_by_host.py [RESULTS_DIR]   (prints; reads the archives, writes nothing)
"""

from __future__ import annotations

import gzip
import re
import statistics
import sys
import tarfile
from pathlib import Path

COMPILE = re.compile(rb"compile of config \d+: ([0-9.]+) s")
CAMPAIGN = re.compile(rb"campaign moe_gemm: 16 keys on \d+ unit\(s\) in ([0-9.]+) s")
PART = re.compile(rb"time: [0-9.]+ s: compile ([0-9.]+)")


def runs(archive: Path) -> list[tuple[str, float, float, float]]:
    """(run, campaign seconds, compile part, median compile of one kernel) of each run in one camp36.tgz."""
    found = []
    with tarfile.open(archive) as tar:
        logs = {m.name: m for m in tar.getmembers()}
        for name, member in sorted(logs.items()):
            if not name.endswith("campaign_rank.log.gz"):
                continue
            text = gzip.decompress(tar.extractfile(member).read())
            times = [float(t) for t in COMPILE.findall(text)]
            total = CAMPAIGN.search(text)
            if not times or total is None:
                continue
            part = sum(float(t) for t in PART.findall(text))
            found.append((name.split("/")[-2], float(total.group(1)), part, statistics.median(times)))
    return found


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results")
    rows = []
    for archive in sorted(root.glob("session_h200_*/*/camp36.tgz")):
        for run, seconds, part, median in runs(archive):
            rows.append((seconds, median))
            print(f"{archive.parent.relative_to(root)} {run}: campaign {seconds:.1f} s, compile part {part:.1f} s, "
                  f"one kernel's compile (median) {median:.2f} s")
    if len(rows) > 2:
        xs, ys = [m for _, m in rows], [s for s, _ in rows]
        print(f"{len(rows)} runs: correlation of campaign seconds with the compile median "
              f"{statistics.correlation(xs, ys):.2f}")


if __name__ == "__main__":
    main()
