"""Where a campaign's seconds went, from its rank log: each key's ``time:`` line (compile waits, captures, warm-ups,
screening, the race, host time, restores, the model, the rest, and the device floor) summed over the keys, the
campaign's wall time from the example's output beside it, the configs the keys' searches screened (and how many of
their first looks earlier keys had screened), what the compile workers did (the kernels the
needed compiles' workers and the guesses' workers compiled, and the seconds they spent; the guesses a stage needed
while their workers compiled them, and how many of those ran again), each key's first warm-up (its first stage's,
which waits for that stage's compiles) summed over the keys after the first, and the stages' waits that
warmed up nothing: a grace for a straggler's compile spent in vain (``measure/warm_order.py``), or a wait for a
stage's compiles that ended with nothing ready.

Launch: ``python benchmarks/campaign_parts.py DIR [DIR ...]``, each DIR holding ``campaign_rank.log.gz`` (or
``campaign_rank.log``) and ``campaign.txt``, as ``benchmarks/gpu/_campaign.sh`` leaves them. One line per DIR.
"""

from __future__ import annotations

import argparse
import gzip
import re
from pathlib import Path

TIME = re.compile(r"\] time: ([0-9.]+) s: (.*); device floor ([0-9.]+) s")
PART = re.compile(r"([a-z][a-z -]*?) ([0-9.]+)(?: \([^)]*\))?(?:, |$)")
WORKERS = re.compile(r"compile workers .*?: (\d+) kernel\(s\) compiled there in ([0-9.]+) s")
GUESSES = re.compile(r"guesses: (\d+) kernel\(s\) compiled in ([0-9.]+) s")
NEEDED = re.compile(r"this tuning needed (\d+) guess\(es\) while their workers compiled them, (raised|(\d+) run again)")
NEEDED_ENDED = re.compile(r"they ended ([0-9.]+) s \(median\) after")
CAMPAIGN = re.compile(r'"campaign_s": ([0-9.]+)')
IDLE_WAIT = re.compile(r"warm-up: 0 config\(s\) in ([0-9.]+) s")
#: a key's search line (not its decision line, which repeats it): configs screened, and how many of its first look
#: earlier keys had screened
SEARCH = re.compile(r"\] search: (\d+) of (\d+) configs screened(?:, (\d+) of the first look's (\d+) screened by "
                    r"earlier keys)?")
WARM_UP = re.compile(r"key=\((.*?)\)\] warm-up: \d+ config\(s\) in ([0-9.]+) s")
#: a warm-up of nothing this long waited for compiles (a straggler's grace is 0.25 s)
IDLE_WAIT_S = 0.2


def parts(log: Path) -> tuple[dict[str, float], str]:
    """The keys' parts summed (with ``keys``: their seconds, ``floor``: the device floor), and as text the last
    compile workers' totals and the waits that warmed up nothing."""
    opener = gzip.open if log.suffix == ".gz" else open
    summed: dict[str, float] = {}
    workers = "no compile workers"
    waits: list[float] = []
    firsts: dict[str, float] = {}  # each key's first warm-up (its first stage's, which waits for its compiles)
    needed = [0, 0]  # guesses needed while their workers compiled them, and those of them run again
    screened = [0, 0, 0, 0]  # configs screened, kept, first-look configs screened before, first-look configs
    medians: list[float] = []
    with opener(log, "rt", errors="replace") as f:
        for line in f:
            if (found := TIME.search(line)) is not None:
                summed["keys"] = summed.get("keys", 0.0) + float(found.group(1))
                for name, seconds in PART.findall(found.group(2)):
                    summed[name.strip()] = summed.get(name.strip(), 0.0) + float(seconds)
                summed["floor"] = summed.get("floor", 0.0) + float(found.group(3))
            elif (found := WORKERS.search(line)) is not None:
                workers = f"needed {found.group(1)} kernels in {float(found.group(2)):.0f} s"
                if (guess := GUESSES.search(line)) is not None:
                    workers += f", guesses {guess.group(1)} kernels in {float(guess.group(2)):.0f} s"
                if (need := NEEDED.search(line)) is not None:
                    needed[0] += int(need.group(1))
                    needed[1] += int(need.group(3) or 0)
                if (ended := NEEDED_ENDED.search(line)) is not None:
                    medians.append(float(ended.group(1)))
            elif (found := IDLE_WAIT.search(line)) is not None and float(found.group(1)) >= IDLE_WAIT_S:
                waits.append(float(found.group(1)))
            if (found := SEARCH.search(line)) is not None:
                for k, value in enumerate(found.groups()):
                    screened[k] += int(value or 0)
            if (found := WARM_UP.search(line)) is not None:
                firsts.setdefault(found.group(1), float(found.group(2)))
    spread = f", keys' medians {min(medians):.2f}-{max(medians):.2f} s" if medians else ""
    later = list(firsts.values())[1:]
    first = f" (first looks: {screened[2]} of {screened[3]} screened by earlier keys)" if screened[3] else ""
    searched = f"screened {screened[0]} of {screened[1]}{first}" if screened[1] else "no key searched"
    return summed, (f"{searched}; "
                    f"{workers}; {len(waits)} waits that warmed up nothing ({sum(waits):.2f} s); guesses needed while "
                    f"compiling: {needed[0]} ({needed[1]} run again){spread}; first warm-ups of the keys after the "
                    f"first: {sum(later):.2f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", type=Path, nargs="+")
    args = p.parse_args()
    for folder in args.dirs:
        log = next((folder / name for name in ("campaign_rank.log.gz", "campaign_rank.log")
                    if (folder / name).exists()), None)
        if log is None:
            print(f"{folder}: no campaign_rank.log(.gz)")
            continue
        summed, workers = parts(log)
        output = folder / "campaign.txt"
        found = CAMPAIGN.search(output.read_text(errors="replace")) if output.exists() else None
        wall = f"{float(found.group(1)):.1f} s" if found else "-"
        shown = " ".join(f"{name} {seconds:.1f}" for name, seconds in summed.items() if name != "exchanges")
        print(f"{folder}: campaign {wall}; {shown}; {workers}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
