"""Frictions a new user's audit of the command line found, each with the real command that shows it fixed.

Cache folders are written here as the package's own writers write them (``write_json_atomic``, the records'
``to_json``); every command runs as ``python -m triton_dist_tune ...`` in a process of its own (harness.run_cli).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import ROOT, base_env, describe, run_cli, run_command, run_ranks, tune_alone, tuner_env

from triton_dist_tune.disk.cache import versions, write_json_atomic
from triton_dist_tune.records import Outcome


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    """``python -m triton_dist_tune ARGS`` in a process of its own."""
    return run_cli([str(a) for a in args], base_env(), timeout=120)


def decision(cache: Path, function: str, key: str = "(64,)", kernel: str | None = None, **extra: object) -> Path:
    """A format-2 decision of ``function`` (a ``contextual_autotune`` one under ``contextual/`` when ``kernel`` is
    given), with two measured configs, as the tuner writes it."""
    outcomes = [Outcome(0, "{BLOCK: 64}", "measured", time=1.3, spread=0.02, per_rank=[1.3, 1.2], samples=5),
                Outcome(1, "{BLOCK: 128}", "measured", time=1.0, spread=0.01, per_rank=[1.0, 0.9], samples=5)]
    data = {"format": 2, "function": function, "key": key, "index": 1, "config": "{BLOCK: 128}", "time_ms": 1.0,
            "margin": 0.3, "near_tie": False, "runner_up": 0, "timing": "steady", "rounds": 5, "group_size": 2,
            "group": "default", "created": time.time() - 60, "versions": versions(), "gpu": "cpu", "gpu_count": 0,
            "space": "abc", "measurements": [o.to_json() for o in outcomes], **extra}
    if kernel is not None:
        data["kernel"] = kernel
    folder = "contextual" if kernel is not None else function
    name = hashlib.sha1(repr((function, key, kernel)).encode()).hexdigest()[:20]
    return write_json_atomic(cache / folder / f"{name}.json", data)


# -- show of a noisy race's decision: least samples, not medians ------------------------------------------------------

#: a tuning in one process whose race is noisy: each call sleeps 1 to 5 times its config's own time, at random (cold
#: timing: a sample is one call), and one call in
#: three 50 ms more (a loaded machine adds its own delay to every sleep, which shrank the 1-5x jitter: one CI run
#: read it quiet), so that consecutive samples of a config read far more than 5% apart
NOISY_AUTOTUNE = '''
import random, time, torch, triton_dist_tune as tdt
rng = random.Random(0)

@tdt.autotune([{"v": v} for v in range(3)], key_fn=lambda x: x.numel(), timing="cold", n_warmup=1, n_repeat=6)
def noisy(x, *, v):
    time.sleep(0.001 * (1 + v) * (1 + 4 * rng.random()) + (0.05 if rng.random() < 1 / 3 else 0.0))
    return x

noisy(torch.ones(4))
'''

#: the same for contextual_autotune: each launch's config pre_hook sleeps 2 to 10 ms at random, and one launch in
#: three 60 ms more (Triton's interpreter: a launch takes about 20 ms, 27 under load, and a sample holds several, so
#: the jitter alone read 0.2-2.8% apart on a loaded machine, a quiet race)
NOISY_CONTEXTUAL = '''
import random, time, torch, triton, triton.language as tl
import triton_dist_tune as tdt
rng = random.Random(0)

def jitter(args):
    time.sleep(0.002 * (1 + 4 * rng.random()) + (0.06 if rng.random() < 1 / 3 else 0.0))

@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=jitter) for b in (32, 64)], key=["n"])
@triton.jit
def double(x, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)

@tdt.contextual_autotune(n_repeat=4, n_warmup=1)
def layer(x):
    double[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, x.numel())
    return x

layer(torch.ones(100))
'''


def heading(shown: str) -> list[str]:
    """The header of ``show``'s table of measurements, split at two spaces or more (a column wider than its heading,
    a spread of ``+-102.2%``, leaves three spaces after it: split at pairs, the next heading kept a leading space)."""
    line = next(text for text in shown.splitlines() if text.lstrip().startswith("#  "))
    return re.split(r" {2,}", line.strip())


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", [NOISY_AUTOTUNE, NOISY_CONTEXTUAL], ids=["autotune", "contextual"])
def test_a_noisy_race_records_least_samples_and_show_and_plot_say_so(tmp_path, script):
    """Under a noisy race a config's time is its least sample (the rank's log says 'noisy: times are least
    samples'), but the decision file did not record it and ``show`` headed the column 'median ms' (the plot's axis:
    'median over samples'). Now the decision records ``statistic: least`` (through the tuner's own writer, of
    ``autotune`` and of ``contextual_autotune``), ``show`` heads the column 'least ms' and says why, ``--json``
    carries it, and the plot's axis says 'least'. A file without the field (every file written before) reads as
    medians, as it was.

    The tuner's console summary headed its table "group ms" and ``list`` said nothing: now the summary heads it
    "group least ms" (each rank's own time: "rank median ms") with the note under it (the rank log's decision line
    says it too), and ``list`` marks the decision's time ``*`` and says once what that means (a decision of medians
    unmarked)."""
    cache, _ = tune_alone(tmp_path, script, TRITON_PRINT_AUTOTUNING="1")
    (path,) = cache.glob("*/*.json")
    assert json.loads(path.read_text())["statistic"] == "least", path.read_text()[:2000]
    summary = (tmp_path / "tune_alone.err").read_text()
    assert "group least ms" in summary and "rank median ms" in summary and "group ms" not in summary, summary
    assert "each config's time is its least sample, not its median: the race's samples were noisy" in summary
    logged = "".join(p.read_text() for p in (tmp_path / "logs").rglob("*.log"))  # the rank log's decision too
    assert "decision" in logged and "its least sample, not its median" in logged, logged[-2000:]
    quiet = decision(cache, "quiet")  # medians: no mark
    listed = cli("list", "--cache-dir", cache)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line.startswith("  ")}
    assert f" {json.loads(path.read_text())['time_ms']:.4f}* " in rows[path.stem[:8]], listed.stdout
    assert "*" not in rows[quiet.stem[:8]], listed.stdout
    assert listed.stdout.count("* after ms: each config's time is its least sample, not its median") == 1
    shown = cli("show", path, "--cache-dir", cache)
    assert shown.returncode == 0, shown.stderr
    assert heading(shown.stdout)[:2] == ["#", "least ms"] and "per rank median ms" in heading(shown.stdout)
    assert "each config's time is its least sample, not its median: the race's samples were noisy" in shown.stdout
    assert json.loads(cli("show", path, "--json", "--cache-dir", cache).stdout)["statistic"] == "least"

    data = json.loads(path.read_text())
    del data["statistic"]  # as written before the field was
    old = write_json_atomic(tmp_path / "old" / path.parent.name / path.name, data)
    before = cli("show", old, "--cache-dir", tmp_path / "old")
    assert before.returncode == 0 and heading(before.stdout)[:2] == ["#", "median ms"], before.stdout
    assert "least" not in before.stdout
    assert json.loads(cli("show", old, "--json", "--cache-dir", tmp_path / "old").stdout)["statistic"] == "median"

    pytest.importorskip("matplotlib")
    from triton_dist_tune.cli import plots
    from triton_dist_tune.disk.decisions import read_entry

    noisy, quiet = read_entry(path), read_entry(old)

    def one_rank(axis: str) -> str:  # tuned by one process: its rank's times, not a max over ranks
        return axis.replace(plots.SLOWEST, "its one rank's time")

    assert plots.decision_figure(noisy).axes[0].get_xlabel().startswith(one_rank(plots.LEAST_AXIS))
    assert plots.decision_figure(quiet).axes[0].get_xlabel().startswith(one_rank(plots.TIME_AXIS))
    assert "least of the samples" in plots.LEAST_AXIS and "median" not in plots.LEAST_AXIS
    both = plots.function_figure([noisy, quiet]).axes[0]
    assert both.get_ylabel().replace("\n", " ") == plots.wrap(one_rank(plots.MIXED_AXIS), 32).replace("\n", " ")
    assert sum("noisy" in t.get_text() for t in both.get_xticklabels()) == 1
    drawn = cli("plot", path, "-o", tmp_path / "noisy.png", "--cache-dir", cache)
    assert drawn.returncode == 0 and (tmp_path / "noisy.png").stat().st_size > 10_000, drawn.stderr


# -- list --function of a name that matches nothing ------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_list_of_an_unknown_function_names_the_functions_as_clear_does(tmp_path):
    """``list --function drift`` (a prefix of ``drifting``) printed 'no decisions in ... matching the filters' with
    exit status 0, as if the function had been tuned and its decisions removed; ``clear --function`` of such a name
    says there is no such function and names the functions ``list`` shows, with exit status 2. Now ``list`` (and
    ``export``) say the same, through one check."""
    cache = tmp_path / "cache"
    decision(cache, "drifting")
    decision(cache, "layer", kernel="__main__.gemm_kernel")
    for command in (["list"], ["list", "--json"], ["clear", "--dry-run"], ["export", tmp_path / "b.json"]):
        unknown = cli(*command, "--function", "drift", "--cache-dir", cache)
        assert unknown.returncode == 2 and unknown.stdout == "", (command, unknown.stdout, unknown.stderr)
        assert f"no function 'drift' in {cache} (functions: drifting, layer:gemm_kernel)" in unknown.stderr, \
            (command, unknown.stderr)
    known = cli("list", "--function", "drifting", "--cache-dir", cache)
    assert known.returncode == 0 and "1 decision(s)" in known.stdout, known.stdout + known.stderr
    filtered = cli("list", "--function", "drifting", "--stale", "--cache-dir", cache)  # known, none stale: no error
    assert filtered.returncode == 0 and "matching the filters" in filtered.stdout, filtered.stdout + filtered.stderr
    # a contextual function has no folder of its own: 'clear --function layer --stale' with nothing stale said
    # 'no function' too (the check looked at the decisions the filters kept)
    none_stale = cli("clear", "--function", "layer", "--stale", "--dry-run", "--cache-dir", cache)
    assert none_stale.returncode == 0 and "would remove 0 cache file(s)" in none_stale.stdout, none_stale.stderr


# -- import of a bundle twice ----------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_importing_a_bundle_again_says_what_it_wrote_and_leaves_identical_decisions_alone(tmp_path):
    """Importing one bundle twice said 'imported 2 decision(s)' both times, and rewrote both files (their times
    too, which say which decision a job last wrote). Now an import counts the decisions it wrote new, those it wrote
    over the one there, and those already there, identical, which it leaves as they were; ``--json`` keeps
    ``imported`` (every decision of the bundle, now in the cache) and adds the three lists."""
    here, there = tmp_path / "here", tmp_path / "there"
    decision(here, "drifting")
    decision(here, "layer", kernel="__main__.gemm_kernel")
    bundle = tmp_path / "bundle.json"
    assert cli("export", bundle, "--cache-dir", here).returncode == 0
    first = cli("import", bundle, "--cache-dir", there)
    assert first.returncode == 0, first.stderr
    assert f"imported 2 decision(s) into {there} (2 new; 0 replacing the decision that was there)" in first.stdout, \
        first.stdout
    files = sorted(there.glob("*/*.json"))
    for path in files:
        os.utime(path, (1_000_000, 1_000_000))
    again = cli("import", bundle, "--cache-dir", there)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (f"nothing imported into {there}: the bundle's 2 decision(s) are there already, "
                                    "identical (left as they were)"), again.stdout
    assert [p.stat().st_mtime for p in files] == [1_000_000, 1_000_000]  # not rewritten
    retuned = files[0]
    data = json.loads(retuned.read_text())
    retuned.write_text(json.dumps({**data, "created": data["created"] - 3600}))  # the same choice, tuned earlier
    third = cli("import", bundle, "--json", "--cache-dir", there)
    assert third.returncode == 0, third.stderr
    said = json.loads(third.stdout)
    assert sorted(said["imported"]) == [str(p) for p in files] and said["mismatched"] == []
    assert said["new"] == [] and said["replaced"] == [str(retuned)] and said["unchanged"] == [str(files[1])], said
    assert json.loads(retuned.read_text()) == data and files[1].stat().st_mtime == 1_000_000
    text = cli("import", bundle, "--cache-dir", there)
    assert "nothing imported" in text.stdout and "2 decision(s) are there already" in text.stdout, text.stdout


# -- the campaign command's --group-size against the job, under launch.sh and plain torchrun --------------------------

# the campaign module (test_newcomer's): a rank-local function of two configs and the builder of its calls (cold
# timing: a race of single-call samples, which never has settled rounds)
from test_newcomer import CAMPAIGN_MODULE  # noqa: E402

#: what every rank, and now launch.sh's check, says of --group-size 3 on a job of 2 ranks
NOT_DIVIDING = "triton-dist-tune: --group-size 3 does not divide the 2 rank(s) of the job"


def campaign_work(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder holding :data:`CAMPAIGN_MODULE` as ``camp_mod.py``, and the environment to run a job in (its own
    cache and logs under ``tmp_path``; no rank variables of the test's own process)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "camp_mod.py").write_text(CAMPAIGN_MODULE)
    env = base_env(tuner_env(tmp_path))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_ERROR_FILE"):
        env.pop(name, None)
    return work, env


@pytest.mark.timeout(240)
def test_campaign_group_size_that_does_not_divide_the_job_ends_before_torchrun_under_launch_sh(tmp_path):
    """``bash launch.sh --cpu -m triton_dist_tune campaign ... --group-size 3`` on 2 CPU ranks: before, each rank
    said the one line, then torchrun's agent printed its traceback and ChildFailedError report, exit status 1 (the
    check launch.sh runs before torchrun did not know the job's size). Now that check refuses it: the one line, exit
    status 2, no rank started."""
    work, env = campaign_work(tmp_path)
    done = run_command(["bash", str(ROOT / "launch.sh"), "--cpu", "-m", "triton_dist_tune", "campaign", "camp_mod:fn",
                        "--calls", "camp_mod:build", "--keys", "8", "16", "--group-size", "3"], work, env, timeout=200)
    said = [line for line in done.stderr.splitlines() if not line.startswith("launch.sh:")]  # (its NOTE on copies)
    assert done.returncode == 2 and said == [NOT_DIVIDING], (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr and "ChildFailedError" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "logs").exists()  # no rank ran
    fits = run_command(["bash", str(ROOT / "launch.sh"), "--cpu", "-m", "triton_dist_tune", "campaign", "camp_mod:fn",
                        "--calls", "camp_mod:build", "--keys", "8", "16", "--group-size", "2"], work, env, timeout=200)
    assert fits.returncode == 0 and "campaign fn: 2 keys on 1 unit(s)" in fits.stdout + fits.stderr, \
        fits.stderr[-3000:]


@pytest.mark.timeout(240)
def test_campaign_group_size_error_under_plain_torchrun_is_the_root_cause_torchrun_reports(tmp_path):
    """Started by torchrun itself, a rank that exits non-zero is reported by torchrun's agent with its own traceback
    and exit status 1, whatever the rank's status. Before, that report's root cause read 'traceback : To enable
    traceback see: https://pytorch.org/docs/stable/elastic/errors.html'; now each rank leaves its line in torchrun's
    error file, and the report shows it."""
    work, env = campaign_work(tmp_path)
    done = run_command([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
                        "triton_dist_tune", "campaign", "camp_mod:fn", "--calls", "camp_mod:build", "--keys", "8",
                        "16", "--group-size", "3"], work, env, timeout=200)
    assert done.returncode != 0, done.stderr[-3000:]
    cause = done.stderr[done.stderr.index("Root Cause"):]
    assert f"traceback : {NOT_DIVIDING}" in cause, done.stderr[-3000:]
    assert "To enable traceback see" not in done.stderr, done.stderr[-3000:]


#: a rank-local function whose every config fails at key 16 (a failed row; key 8 is tuned)
FAILING_MODULE = '''
import torch
import triton_dist_tune as tdt


@tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=0, n_repeat=1, timing="cold")
def fn(x, *, v):
    if x.shape[0] == 16:
        raise ValueError("no kernel for 16 rows")
    return x + v


def build(n):
    return torch.ones(n)
'''


def _read_fifo(path: Path, seconds: float) -> str:
    """What a writer writes into the FIFO ``path`` before it closes it (empty: none came within ``seconds``)."""
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never blocks: a writer that never comes ends the wait
    data, deadline = b"", time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            select.select([fd], [], [], 0.2)
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # a writer holds it open, nothing written yet
                continue
            if chunk:
                data += chunk
            elif data:  # the writer closed it
                break
    finally:
        os.close(fd)
    return data.decode()


def _live_children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc; zombies left out: they have ended)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[1]) == pid:  # state, ppid
                found.append(int(entry))
    return found


#: how long torchrun is given to act on a worker's end (its --monitor-interval is 0.1 s: 30 of them)
TORCHRUN_ACTS_S = 3.0


def _wait_for_a_worker_to_end(torchrun: subprocess.Popen, seconds: float) -> None:
    """Until one of ``torchrun``'s two workers (its child processes) has ended and :data:`TORCHRUN_ACTS_S` more
    have passed (its agent would have SIGTERMed the other by then, were it to), or torchrun has ended, or
    ``seconds`` have passed."""
    deadline, both_seen = time.monotonic() + seconds, False
    while time.monotonic() < deadline and torchrun.poll() is None:
        workers = len(_live_children(torchrun.pid))
        if workers >= 2:
            both_seen = True
        elif both_seen:
            time.sleep(TORCHRUN_ACTS_S)
            return
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_a_campaign_with_a_failed_key_under_torchrun_ends_after_rank_0_wrote_its_summary(tmp_path):
    """A key failed: every rank exited 1, and the first to exit had torchrun's agent SIGTERM the others, rank 0
    among them, whether or not it had written ``--json`` yet (a slow disk: here a FIFO nobody reads yet, so rank
    0's write waits); the report showed each rank failed, with a SIGTERM or torchrun's hint on tracebacks. Now
    rank 0 alone exits 1, after the write, saying which keys failed in one line (in torchrun's error file too, so
    the report's root cause shows it), and the other ranks exit 0: torchrun ends no rank early."""
    work, env = campaign_work(tmp_path)
    (work / "fail_mod.py").write_text(FAILING_MODULE)
    fifo = tmp_path / "summary.json"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                             "--monitor-interval", "0.1", "-m", "triton_dist_tune", "campaign", "fail_mod:fn",
                             "--calls", "fail_mod:build", "--keys", "8", "16", "--rank-local", "--json", str(fifo)],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        # rank 1 ends within seconds of the campaign; rank 0 waits for a reader of the FIFO. (60 s: torchrun starts two
        # fresh interpreters that import torch; with the suite's 8 workers on 2 cores, 15 s for that, the campaign and
        # rank 1's exit was once too little: the FIFO was read first, and rank 0's exit had rank 1 SIGTERMed)
        _wait_for_a_worker_to_end(proc, 60)
        written = _read_fifo(fifo, 60)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.communicate()
    assert written, f"torchrun ended rank 0 before it wrote --json (rc={proc.returncode}):\n{err[-4000:]}"
    assert {k["key"]: k["state"] for k in json.loads(written)["keys"]} == {"8": "tuned", "16": "failed"}, written
    assert proc.returncode == 1, err[-4000:]
    line = "triton-dist-tune: campaign fn: 1 of 2 key(s) failed: 16 (the summary holds each error)"
    assert line in out + err, err[-4000:]
    cause = err[err.index("Root Cause"):]
    assert f"traceback : {line}" in cause and "rank      : 0 " in cause, err[-4000:]
    assert "SIGTERM" not in err and "To enable traceback see" not in err, err[-4000:]


# -- a rank-local campaign's decisions in list, show and plot --------------------------------------------------------


@pytest.mark.timeout(300)
def test_rank_local_campaign_decisions_are_listed_as_local_and_show_names_the_rank_that_tuned_them(tmp_path):
    """A rank-local campaign (``--rank-local``) on 2 CPU ranks: rank 0 tunes key 8 alone, rank 1 key 16, each stored
    where plain calls of the 2-rank default group look. Before, ``list`` showed them as tuned by 1 rank and ``show``
    said '1 rank(s) of group 'this process alone'', as if no call of the group would find them. Now ``list`` shows
    ``local`` (and says what it means under the table), ``show`` names the rank and the group served, ``--json``
    adds ``rank_local`` (``group_size`` unchanged) and ``plot`` says ``rank-local``."""
    from triton_dist_tune.cli import plots
    from triton_dist_tune.disk.decisions import scan

    work, env = campaign_work(tmp_path)
    # the job: 2 ranks of ``python -m triton_dist_tune campaign`` (forks of the tests' server, torchrun's variables);
    # test_newcomer.py runs this command under launch.sh and real torchrun
    ranks = run_ranks("-m", 2, ["triton_dist_tune", "campaign", "camp_mod:fn", "--calls", "camp_mod:build", "--keys",
                                "8", "16", "--rank-local"], env=env, timeout=240, cwd=work)
    assert all(r.returncode == 0 for r in ranks), describe(ranks)
    cache = tmp_path / "cache"
    listed = cli("list", "--cache-dir", cache)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines() if line.startswith("  ") and "cpu" in line]
    assert [(row[1], row[-4]) for row in rows] == [("8", "local"), ("16", "local")], listed.stdout
    assert "ranks 'local': tuned by one rank alone (a rank-local campaign)" in listed.stdout, listed.stdout
    data = json.loads(cli("list", "--json", "--cache-dir", cache).stdout)
    by_key = {e["key"]: e for e in data["entries"]}
    for key, rank in (("8", 0), ("16", 1)):
        entry = by_key[key]
        assert entry["rank_local"] == {"rank": rank, "group_size": 2, "group": "default"}, entry
        assert entry["group_size"] == 1 and entry["group"] == "this process alone", entry  # as before
        shown = cli("show", entry["file"], "--cache-dir", cache)
        assert (f"group: rank-local: tuned by rank {rank} alone (a rank-local campaign), served to the 2 rank(s) of "
                "group 'default'") in shown.stdout, shown.stdout
        assert json.loads(cli("show", entry["file"], "--json").stdout)["rank_local"]["rank"] == rank
    fig = plots.function_figure(scan(cache)[0])
    assert "rank-local (1 rank alone)" in fig._suptitle.get_text(), fig._suptitle.get_text()



def test_plot_tells_a_decision_of_replicas_tuned_as_one_from_a_tp_groups_own(tmp_path):
    """``examples/tp_mlp.py`` on 4 ranks writes ag_gemm's key tuned by two TP groups of 2 as one (``list``: ``2x2``);
    ``examples/ag_gemm.py`` on 2 ranks the same key tuned by one group of 2 (``list``: ``2``). Before, ``plot`` drew
    both as ``2 rank(s)``: two ticks of one function's figure read alike. Now the replicas' decision says so."""
    from triton_dist_tune.cli import plots
    from triton_dist_tune.disk.decisions import scan

    cache = tmp_path / "cache"
    decision(cache, "ag_gemm", "(8, 32)", replicas=2, group="ranks [0, 1]")
    decision(cache, "ag_gemm", "(8, 16)")
    entries = sorted(scan(cache)[0], key=lambda e: e.key)
    assert [e.ranks_text for e in entries] == ["2", "2x2"], [e.ranks_text for e in entries]  # as list shows them
    ticks = [t.get_text() for t in plots.function_figure(entries).axes[0].get_xticklabels()]
    assert ticks[0].endswith("\n2 rank(s)") and ticks[1].endswith("\n2 rank(s) x 2 replicas (tuned as one)"), ticks
    title = plots.decision_figure(entries[1])._suptitle.get_text().replace("\n", " ")
    assert "2 rank(s) x 2 replicas (tuned as one)" in title, title


def test_a_rank_local_decision_and_a_one_process_decision_of_the_key_supersede_neither(tmp_path):
    """A one-process decision and a rank-local campaign's decision for 2 ranks (both record 1 rank: each was tuned
    by one process) of the same function and key serve different groups: two cache entries, both live. Before,
    'superseded' compared the ranks the records name, so when their spaces differed the older was marked
    SUPERSEDED ('never served again'), though calls of its own group still served it. A rank-local decision
    counts the ranks of the group it serves."""
    cache = tmp_path / "cache"
    now = time.time()
    alone = decision(cache, "fn", "(8,)", origin="/work/m.py:fn", source="s", space="one", group_size=1,
                     group="this process alone", created=now - 3600, served=now - 3600)
    alone.rename(alone.with_name("0" * 20 + ".json"))  # its own entry (the helper names a file by function and key)
    decision(cache, "fn", "(8,)", origin="/work/m.py:fn", source="s", space="two", group_size=1,
             group="this process alone", created=now - 60, served=now - 60,
             rank_local={"rank": 1, "group_size": 2, "group": "default"})
    assert len(list((cache / "fn").glob("*.json"))) == 2
    listed = cli("list", "--superseded", "--cache-dir", cache)
    assert listed.returncode == 0 and "no decisions" in listed.stdout and "matching the filters" in listed.stdout, \
        listed.stdout + listed.stderr


# -- logs: a file or a folder without logs as its argument; a race that never settled -------------------------------


@pytest.mark.timeout(300)
def test_logs_of_a_rank_log_file_or_a_folder_without_logs_says_so_and_names_the_folder(tmp_path):
    """``logs .autotune_logs/rank-0.jsonl`` was looked up as a job's name in the default folder, and the error named
    only that folder ('no job logs in ./.autotune_logs'), not the file given. Now a file, or a folder without rank
    logs, is one line saying so, naming a rank log's folder, which ``logs`` takes."""
    tune_alone(tmp_path, CAMPAIGN_MODULE + "\nfn(build(8))\n")
    folder = tmp_path / "logs"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**base_env(), "TRITON_DIST_AUTOTUNE_LOG_DIR": str(elsewhere)}  # the default folder: no logs there
    for given, says in ((folder / "rank-0.jsonl", f"{folder / 'rank-0.jsonl'}: a file, not a job's name or a log "
                         f"folder (give a log folder, which holds rank-*.jsonl files, or a job's name from 'logs "
                         f"--list': 'logs {folder}' for its folder's latest job)"),
                        (elsewhere, f"{elsewhere}: no job logs in this folder")):
        refused = run_cli(["logs", str(given)], env, timeout=120)
        assert refused.returncode == 2 and refused.stderr.startswith(f"triton-dist-tune: {says}"), refused.stderr
    merged = run_cli(["logs", str(folder)], env, timeout=120)
    assert merged.returncode == 0 and "[fn key=8] decision: config" in merged.stdout, merged.stdout + merged.stderr

@pytest.mark.timeout(300)
def test_a_race_that_never_settled_logs_no_settled_rounds_not_settled_from_none(tmp_path):
    """A race that never reached settled rounds (cold timing has none) logged 'race: 2 round(s) (settled from None)',
    which ``logs`` showed as is; it logs '(no settled rounds)' now."""
    tune_alone(tmp_path, CAMPAIGN_MODULE + "\nfn(build(8))\n")
    merged = run_cli(["logs", str(tmp_path / "logs")], base_env(), timeout=120)
    assert merged.returncode == 0 and "[fn key=8] race: 2 round(s) (no settled rounds)" in merged.stdout, \
        merged.stdout + merged.stderr
    assert "settled from None" not in merged.stdout
