"""The replays read the collective landscapes (``benchmarks/corpus_collective.py``) as the tuned function's configs,
and leave out a landscape whose recorder ran out of time; several recordings pool into one oracle."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness import ROOT, base_env, run_python

sys.path.insert(0, str(ROOT / "benchmarks"))

import replay_search  # noqa: E402


def test_collective_landscapes_load_as_algo_splits_and_tile_and_incomplete_ones_are_left_out(tmp_path):
    ratios = {"chunked-x2-128x64x32-g8-w4-s3": 1.0, "sequential-x1-64x64x64-g8-w8-s4": 1.3,
              "chunked-x1-16x32x32-g8-w4-s3": 2.0}
    corpus = {"H200|ag_gemm_w4|4096x4096x3584|3": {"family": "collective", "ratios": ratios, "complete": True},
              "H200|rs_gemm_w4|1024x8192x8192|3": {"family": "collective", "ratios": ratios, "complete": False}}
    path = tmp_path / "collective.json"
    path.write_text(json.dumps(corpus))
    (land,) = replay_search.load([path])  # before: the incomplete landscape was replayed as if exhaustive
    assert land.family == "collective" and land.name == "ag_gemm_w4|4096x4096x3584|3"
    # before: one opaque string per config ({"config": ...}), whose two patterns the grid cannot split into numbers
    assert {"algo": "chunked", "splits": 2, "gemm_config": "128x64x32-g8-w4-s3"} in land.configs
    assert sorted(land.ratios) == [1.0, 1.3, 2.0]


def test_pooled_oracle_takes_each_configs_median_over_recordings_and_skips_incomplete_ones():
    import _collective_report as report

    key = "H200|ag_gemm_w2|4096x4096x3584|3"
    bimodal, steady, slow = "chunked-x1-128x256x32-g8-w8-s4", "sequential-x1-128x256x32-g8-w8-s4", \
        "sequential-x1-16x32x32-g8-w4-s3"

    def recording(ratios, complete=True):
        return {key: {"family": "collective", "ratios": ratios, "complete": complete,
                      "best": min(ratios, key=ratios.get)}}

    # the chunked config is the best of one process and 1.5-1.9x in the two others: the steady one is the best
    recordings = [recording({bimodal: 1.0, steady: 1.13, slow: 2.0}),
                  recording({bimodal: 1.86, steady: 1.0, slow: 2.1}),
                  recording({bimodal: 1.5, steady: 1.02, slow: 1.9}),
                  recording({bimodal: 1.0, steady: 3.0, slow: 1.1}, complete=False)]  # cut short: left out
    (entry,) = report.pooled(recordings).values()
    assert entry["best"] == steady and entry["recordings"] == 3
    assert entry["ratios"][steady] == 1.0 and abs(entry["ratios"][bimodal] - 1.5 / 1.02) < 1e-9
    # judged against one recording, choosing the steady config reads 1.13; against the pooled oracle, 1.0
    assert abs(report.judge(steady, recordings[0][key])["ratio"] - 1.13) < 1e-9
    assert report.judge(steady, entry)["ratio"] == 1.0


def test_corpus_vs_host_tells_a_choice_the_host_ranks_otherwise_from_a_near_tie_and_from_a_search_miss(tmp_path):
    """``benchmarks/corpus_vs_host.py``: a validation miss (a choice over 1.02 by a corpus recorded on another host)
    is the host's when the tuning screened the corpus's best and measured it slower than its choice."""
    import subprocess

    import corpus_vs_host

    ratios = {"a": 1.0, "b": 1.05, "c": 1.10}
    assert corpus_vs_host.verdict({"choice": "a", "screened": {"a": 1.0}}, ratios, 0.02) == ("a", "chosen", 1.0)
    assert corpus_vs_host.verdict({"choice": "b", "screened": {"a": 1.10, "b": 1.0}}, ratios, 0.02)[1:] == \
        ("slower here", 1.10)
    assert corpus_vs_host.verdict({"choice": "b", "screened": {"a": 1.01, "b": 1.0}}, ratios, 0.02)[1] == \
        "a near tie here"
    assert corpus_vs_host.verdict({"choice": "c", "screened": {"c": 1.0}}, ratios, 0.02)[1:] == \
        ("not screened here", None)
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "gpu0.json").write_text(json.dumps({"H200|moe|16|160": {"ratios": ratios}}))
    rows = [{"m": 16, "tuning": 0, "choice": "b", "ratio": 1.05, "screened": {"a": 1.10, "b": 1.0}, "ratio_here": 1.0},
            {"m": 16, "tuning": 1, "choice": "a", "ratio": 1.0, "screened": {"a": 1.0}, "ratio_here": 1.03},
            {"m": 32, "tuning": 0, "choice": "a", "ratio": 1.0}]  # no landscape for M = 32: left out
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"gpu": "H200", "family": "moe", "rows": rows}))
    out = tmp_path / "table.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "corpus_vs_host.py"), str(run), "--corpus",
                           str(folder), "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    table = out.read_text()
    assert table.count("| run.json |") == 2 and "Choices over 1.02 by the corpus: 1 slower here" in table
    assert "Judged here (--judge-here): 1 of 2 within 1.02, worst 1.030" in table


def test_validate_search_judges_the_choices_on_this_host_beside_the_corpuss_best(tmp_path):
    """``validate_search.py --judge-here N``: after a shape's tunings, the corpus's N best configs and every config
    chosen are timed against each other on this host, and each choice gets its ``ratio_here`` beside the corpus's
    ratio (the corpus was recorded on another host: the twelfth session found hosts that rank its best configs
    otherwise). On CPU: Triton's interpreter, the smoke's tiny space, a corpus written here."""
    import subprocess

    def validate(corpus: Path, out: Path, *extra: str) -> dict:
        # a process of its own, forked from the tests' server (the script sets its own HOME and folders at import)
        done = run_python([ROOT / "benchmarks" / "validate_search.py", "--family", "gemm_k4096_n4096", "--corpus",
                           corpus, "--shapes", "16", "--tunings", "2", "--out", out, "--cpu-smoke", *extra],
                          base_env(), timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(out.read_text())

    empty = tmp_path / "empty"
    empty.mkdir()
    first = validate(empty, tmp_path / "first.json")
    row = first["rows"][0]
    assert row["ratio"] is None and "ratio_here" not in row  # no landscape: nothing judged
    # the round times of the configs raced 4 rounds or more ride along, and benchmarks/race_samples.py reads them
    assert row["rounds"] >= 1 and all(len(times) >= 4 for times in row["raced"].values()), row
    every = sum(len(times) == got["rounds"] for got in first["rows"] for times in got["raced"].values())
    report = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "race_samples.py"), "report",
                             str(tmp_path / "first.json")], capture_output=True, text=True, timeout=60)
    assert f"of {every} configs that ran every round" in report.stdout, report.stdout + report.stderr
    names = sorted(row["screened"])
    ratios = {name: 1.0 + k / 10 for k, name in enumerate(names)}
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "gpu0.json").write_text(json.dumps({row["corpus_key"]: {"ratios": ratios, "best": names[0]}}))
    judged = validate(folder, tmp_path / "judged.json", "--judge-here", "2", "--judge-rounds", "2")
    here = judged["here"]["16"]
    assert here["corpus_best"] == names[0] and set(names[:2]) <= set(here["ratios"])
    assert min(here["ratios"].values()) == 1.0
    for got in judged["rows"]:
        assert got["ratio"] == ratios[got["choice"]] and got["ratio_here"] == here["ratios"][got["choice"]]



def test_validate_search_records_every_probe_and_every_screening_sample_with_its_place(tmp_path):
    """``validate_search.py --record-probes``: every warm-up probe, and every screening sample with its batch, when
    the batch began and its place in the batch's measurement order, so that a run of fast or slow samples (a phase
    of the machine) can be told from a config's own mode (``benchmarks/results/session_h200_25``: nine MoE configs
    read 10% fast in one tuning, and the rows could not say when). On CPU, in a process of its own (importing the
    script sets fresh folders for the process): a 100-config function searched on one rank."""

    script = tmp_path / "record.py"
    script.write_text(f"""
import json, sys, time
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import validate_search
import torch
import triton_dist_tune as tdt
validate_search.record_probes()

@tdt.autotune([{{"a": a, "b": b}} for a in range(10) for b in range(10)], key_fn=lambda x: x.numel())
def spin(x, *, a, b):  # a bowl: 10 us at (3, 6), 10 us more per step away
    began = time.perf_counter()
    while time.perf_counter() - began < 1e-5 * (1 + abs(a - 3) + abs(b - 6)):
        pass
    return x

spin(torch.ones(4))
decision = next(iter(spin.tuner.decisions.values()))
print(json.dumps({{"search": decision.search, "probes": validate_search.PROBES, "samples": validate_search.SAMPLES,
                  "screened": [o.index for o in decision.outcomes if o.state != "pruned"]}}))
""")
    done = run_python([script], base_env(), timeout=240)  # a fork of the tests' server: a process of its own
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["search"].startswith("search: ") and " of 100 configs screened" in got["search"], got["search"]
    screened = set(got["screened"])
    assert {i for i, *_ in got["probes"]} == screened  # every config screened was warmed up once
    samples = got["samples"]
    assert {i for i, *_ in samples} == screened and all(ms > 0 for _, ms, *_ in samples)
    batches: dict[int, list[int]] = {}
    for _, _, batch, _, place in samples:
        batches.setdefault(batch, []).append(place)
    assert len(batches) >= 2 and all(sorted(places) == list(range(len(places))) for places in batches.values())
    starts = {batch: at for _, _, batch, at, _ in samples}
    assert starts[min(starts)] == 0.0 and [starts[b] for b in sorted(starts)] == sorted(starts.values())


def test_probe_report_tells_a_batch_read_apart_from_single_samples_read_apart():
    """``probe_report.py``'s reading of the recorded screening samples: a whole batch 10% fast is a phase of the
    machine and is named; one config read 10% fast in a batch of usual reads is not."""
    import probe_report

    device = {f"c{i}": 1.0 + 0.1 * i for i in range(12)}
    samples = [[f"c{i}", device[f"c{i}"] * (0.9 if i == 5 else 1.0), 0, 0.0, i] for i in range(8)]  # one fast
    samples += [[f"c{i}", device[f"c{i}"] * 0.9, 1, 0.2, i - 8] for i in range(8, 12)]  # a fast batch
    samples += [[f"c{i}", device[f"c{i}"], 2, 0.3, i] for i in range(4)]
    got = probe_report.batch_phases(samples, device, 0.05)
    assert got["median"] == 1.0 and [(b, round(r, 3), n) for b, r, n in got["off"]] == [(1, 0.9, 4)]
    assert probe_report.batch_phases([], device, 0.05) == {}


def test_judge_regimes_times_the_configs_named_and_refuses_a_config_the_shape_does_not_keep(tmp_path):
    """``judge_regimes.py`` (the twenty-sixth session: a validation's judge read configs that the tuner's race read
    as ties 1.016-1.061, and among heavy layers they read within 1%): on CPU, the graph20 regime on the wall clock,
    each named config's ratio and its two halves in the report; a name the shape does not keep is refused before
    anything is timed. In processes of their own (importing the script sets fresh folders for the process)."""

    script = ROOT / "benchmarks" / "judge_regimes.py"
    env = base_env()  # forks of the tests' server (the script sets its own HOME and folders at import)
    names = ["M16-N32-K16-G1-w4-s2", "M16-N32-K32-G16-w4-s2"]
    out = tmp_path / "moe.json"
    done = run_python([script, "--family", "moe", "--shape", "32", "--configs", ",".join(names), "--rounds", "2",
                       "--out", out, "--cpu-smoke"], env, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(out.read_text())
    assert sorted(got["graph20"]["ratios"]) == names and min(got["graph20"]["ratios"].values()) == 1.0
    assert all(len(got["graph20"]["halves"][n]) == 2 for n in names)
    assert all(n in done.stdout for n in names)
    refused = run_python([script, "--family", "moe", "--shape", "32", "--configs", f"{names[0]},M999-nope", "--out",
                          tmp_path / "no.json", "--cpu-smoke"], env, timeout=240)
    assert refused.returncode == 2 and "M999-nope" in refused.stderr and not (tmp_path / "no.json").exists()
    typo = run_python([script, "--family", "moe", "--shape", "32", "--configs", ",".join(names), "--preludes",
                       "flush,heavvy5", "--out", tmp_path / "no.json", "--cpu-smoke"], env, timeout=240)
    assert typo.returncode == 2 and "heavvy5" in typo.stderr and not (tmp_path / "no.json").exists()


def test_campaign_replay_rules_change_the_neighbourhoods_they_name_and_the_random_baseline_screens_as_many():
    """``replay_campaign.py``'s rules (the thirty-sixth session: its override was still named ``_neighbours`` after
    the search's method became ``neighbours``, so "rings 2" and the "compiled only" rules replayed the default).
    A leader's third ring (the rest of its lines) is left out under "rings 2", and the 7th leader's uncompiled
    neighbours under "leaders 7-8 compiled only"; the random baseline screens as many configs per key as the
    default search would from the same seeds, one sample each."""
    import replay_campaign as rc

    space = [{"BLOCK_M": m, "BLOCK_N": n, "w": w} for m in (16, 32, 64, 128, 256) for n in (16, 32, 64, 128, 256)
             for w in (1, 2, 4, 8)]
    kept = list(range(len(space)))
    plan = rc.SearchPlan(seed="s")
    rules = {r.name: r for r in rc.RULES}
    leaders = [kept[50 + 7 * k] for k in range(8)]
    default = rules["default"].search(space, kept, plan, [leaders[0]], set()).neighbours(leaders, {})
    rings2 = rules["rings 2 (no whole lines)"].search(space, kept, plan, [leaders[0]], set()).neighbours(leaders, {})
    third = {i for leader in leaders for i in rc.PatternSearch(space, kept, plan).grid.rings(leader)[2]}
    assert third & set(default) and not third & set(rings2) - {i for leader in leaders for ring in
                                                              rc.PatternSearch(space, kept, plan).grid.rings(leader)[:2]
                                                              for i in ring}
    only = rules["leaders 7-8 compiled only"].search(space, kept, plan, [leaders[0]], set()).neighbours(leaders, {})
    seventh = set(rc.PatternSearch(space, kept, plan).grid.rings(leaders[6])[0])
    earlier = {i for leader in leaders[:6] for ring in rc.PatternSearch(space, kept, plan).grid.rings(leader)
               for i in ring}
    assert seventh - earlier and not (seventh - earlier) & set(only)
    baseline = next(r for r in rc.RULES if r.random_baseline)
    problem = rc.Problem("fam", "p", space, [(1,), (2,)], {(1,): kept, (2,): kept},
                         {(1,): {i: 1.0 + i / 100 for i in kept}, (2,): {i: 1.0 + (99 - i) / 100 for i in kept}})
    noise = rc.NOISE_MODELS["gauss2"]
    searched = rc.campaign(rules["default"], problem, "ascending", noise, 0)
    drawn = rc.campaign(baseline, problem, "ascending", noise, 0)
    # the first key has no seeds in either: the same count; later keys, the count of the default search started
    # from the baseline's own seeds; one sample per config drawn
    assert drawn.keys[0].screened == searched.keys[0].screened and all(k.samples == k.screened for k in drawn.keys)
