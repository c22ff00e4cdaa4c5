"""Replay recorded GPU tunings' races on CPU under this tree's race rules, and judge their choices by the oracle.

``session46_sift.sh`` keeps each tuning's decision file (every config's group samples by round, in
``round_times``) and bench_fidelity's oracle (each config's sustained time against the best). Each config ran
rounds 0, 1, ... until it left its race, so its samples fill those rounds; a Race with the default steady plan
(``TuneOptions().plan``) is fed them round by round, and its choice judged by the oracle, beside the recorded one,
the sift's training family (:data:`TRAINING`) apart from the held-out ones. (The oracle times only the configs some
tuning chose, so no random pick can be judged here: ``benchmarks/sift_noise.py`` has that baseline.)
The samples are those the recorded rules took (which leaders were settled, for how long): a replay can only change
what the race decides from them, and reproduces the recorded choice where the rules decide alike.

Usage: ``python benchmarks/sift_replay.py [--tgz FID.tgz ...] [--variant ours]`` (default: the sifted tunings of
sessions 46-48, :data:`DEFAULT_ARCHIVES`).
``--kept 3 4`` (the default) also says, per tuning, whether a sift of one settled round keeping that many leaders
keeps a config within 1.01 of the best: the question a sift keeping 4 would answer.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from triton_dist_tune.function.options import TuneOptions
from triton_dist_tune.measure.race import Race
from triton_dist_tune.stats import median

HERE = Path(__file__).resolve().parent
#: the family whose tunings the sift's rules were chosen on (the others are held out)
TRAINING = "4096,14336"
FIELDS = r"(BLOCK_M|BLOCK_N|BLOCK_K|GROUP_M|num_warps|num_stages): (\d+)"


#: the recorded sifted tunings replayed by default (sessions 46-48, one H200)
DEFAULT_ARCHIVES = ("session_h200_46/call2_sift_second/fid.tgz", "session_h200_47/call1_sift_ab/fid.tgz",
                    "session_h200_47/call2_final/fid_held.tgz", "session_h200_47/call3_heldout/fid_held2.tgz",
                    "session_h200_48/call1_keep4/fid.tgz")


def spec(config: str) -> str:
    """bench_fidelity's name of a config from its description in a decision file."""
    g = {k: int(v) for k, v in re.findall(FIELDS, config)}
    return f"{g['BLOCK_M']}x{g['BLOCK_N']}x{g['BLOCK_K']}-g{g['GROUP_M']}-w{g['num_warps']}-s{g['num_stages']}"


#: plan changes of bench_fidelity's variants that change the sift, as they were recorded: ``ours`` kept 3 leaders
#: at the sift in every archive of :data:`DEFAULT_ARCHIVES` (4 is the default since the forty-eighth session, whose
#: call 1 recorded ``ours`` with 3 beside ``ours_keep4``; its calls 2 and 4 recorded ``ours`` keeping 4: replay those
#: archives with ``--variant ours`` and this entry set to 4, or read their ``ours`` as ``ours_keep4``)
VARIANT_PLANS = {"ours": {"sift_top": 3}, "ours_keep3": {"sift_top": 3}, "ours_keep4": {"sift_top": 4},
                 "ours_sift27": {"sift_rounds": 2, "heavy_rounds": 7, "sift_top": 3}}
#: what every archive of :data:`DEFAULT_ARCHIVES` recorded and the defaults no longer do: the sift after 2 screening
#: rounds (1 since the fiftieth session; a replay of these samples under 1 would read their second screening round as
#: the sift's settled one)
RECORDED_PLAN = {"sift_after": 2}


def replayed(decision: dict, variant: str = "ours") -> Race:
    """The race of ``decision``'s samples under this tree's default steady plan, with what the archives recorded
    (:data:`RECORDED_PLAN`) and ``variant``'s changes."""
    plan = replace(TuneOptions().plan(60.0, "steady", decision["key"]).race, max_rounds=decision["rounds"],
                   **RECORDED_PLAN, **VARIANT_PLANS.get(variant, {}))
    samples = {o["index"]: o["round_times"] for o in decision["measurements"] if o.get("round_times")}
    race, r = Race(sorted(samples), plan), 0
    while not race.finished(0.0):
        for _ in range(race.block()):
            for i in race.running:
                if r < len(samples[i]):
                    race.record(i, [samples[i][r]])
            race.end_round()
            r += 1
    return race


def fid_files(archives: list[str]) -> list[Path]:
    """bench_fidelity's result files of each archive (``fid.tgz``), extracted to a folder of its own."""
    found = []
    for archive in archives:
        folder = Path(tempfile.mkdtemp(prefix="sift_replay_"))
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
        found += sorted(folder.glob("fid/fid*.json"))
    return found


def recorded_tunings(archives: list[str]) -> Iterator[tuple[str, str, str, dict[str, float], dict]]:
    """(N,K, M, bench_fidelity's variant, the sustained oracle's ratios at that M, the decision) of every decision
    file of ``archives`` whose M the oracle judged, in the order of the archives, then of the files' paths."""
    for fid_path in fid_files(archives):
        folder = fid_path.parent.parent
        tune = json.loads(fid_path.read_text())["tune"]
        ratios = {shape.split(",")[0].strip("( "): row["oracle"]["ratios"] for shape, row in tune.items()}
        nk = ",".join(next(iter(tune)).strip("()").split(",")[1:3]).replace(" ", "")
        decisions = f"decisions_{nk}" if (folder / "fid" / f"decisions_{nk}").is_dir() else "decisions"
        for path in sorted(folder.glob(f"fid/{decisions}/tdt_fid_*/*/*.json")):
            parts = path.parent.parent.name[len("tdt_fid_"):].split("_")
            at = next(k for k, part in enumerate(parts) if part.isdigit())
            variant, m = "_".join(parts[:at]), parts[at]
            if m in ratios:
                yield nk, m, variant, ratios[m], json.loads(path.read_text())


def sift_keeps_best(decision: dict, race: Race, ratios: dict[str, float], names: dict[int, str], kept: int) -> bool:
    """Whether the ``kept`` leaders ranked best by the first settled round's samples alone (each over that round's
    median leader sample: the sift's ranking) hold a config within 1.01 of the sustained best (by ``ratios``, which
    time only configs some tuning chose)."""
    first = race.settled_from
    samples = {o["index"]: o["round_times"] for o in decision["measurements"] if o.get("round_times")}
    leaders = [i for i, times in samples.items() if first is not None and len(times) > first]
    if not leaders:
        return False
    middle = median([samples[i][first] for i in leaders])
    best = sorted(leaders, key=lambda i: (samples[i][first] / middle, i))[:kept]
    return any(ratios.get(names[i], math.inf) <= 1.01 for i in best)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tgz", nargs="+", default=[str(HERE / f"results/{name}") for name in DEFAULT_ARCHIVES])
    parser.add_argument("--variant", default="ours", help="the tunings replayed: bench_fidelity's variant name")
    parser.add_argument("--kept", type=int, nargs="*", default=[3, 4],
                        help="how many leaders a sift of one settled round would keep (judged per tuning)")
    args = parser.parse_args()
    recorded, again, held_out, keeps = [], [], [], {k: [] for k in args.kept}
    for nk, m, variant, ratios, decision in recorded_tunings(args.tgz):
        if variant != args.variant:
            continue
        race = replayed(decision, args.variant)
        names = {o["index"]: spec(o["config"]) for o in decision["measurements"]}
        before, now = ratios[names[decision["index"]]], ratios[names[race.winner()]]
        recorded.append(before)
        again.append(now)
        held_out.append(nk != TRAINING)
        for k, got in keeps.items():
            got.append(sift_keeps_best(decision, race, ratios, names, k))
        print(f"N,K = {nk}, M = {m}: recorded config {decision['index']} ({before:.4f}), replayed config "
              f"{race.winner()} ({now:.4f}), statistic {race.location().__name__}, sifted {race.sifted}")
    for part, keep in (("training (N,K = " + TRAINING + ")", False), ("held out", True)):
        for name, got in (("recorded", recorded), ("replayed", again)):
            mine = [x for x, h in zip(got, held_out, strict=True) if h == keep]
            if mine:
                print(f"{part}, {name}: {sum(x <= 1.01 for x in mine)} of {len(mine)} within 1.01 of the sustained "
                      f"best, worst {max(mine):.4f}")
    for k, got in keeps.items():
        print(f"a sift keeping {k} by its first settled round keeps a config within 1.01 in {sum(got)} of {len(got)}")


if __name__ == "__main__":
    main()
