"""Issue 35 items 3, 4 and 6: messages that said something else than what happened, plots whose labels left the
picture, and launch.sh naming the copy of the package in use. Each test asserts the new text and failed before.
Real files, real ranks (tests/scenarios/message_cases.py), real Triton kernels in the interpreter."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from harness import HERE, ROOT, base_env, describe, run_process, run_ranks, tuner_env

CASES = HERE / "scenarios" / "message_cases.py"


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    """The command line in this process: (exit status, stdout, stderr)."""
    from triton_dist_tune.cli.commands import main

    capsys.readouterr()
    status = main(args)
    out = capsys.readouterr()
    return status, out.out, out.err


def write_entry(cache: Path, margin: float, near_tie: bool, times: tuple[float, float],
                spreads: tuple[float, float], group_size: int = 2, key: str = "(8,)", name: str = "f",
                stem: str = "0123456789abcdef0123") -> Path:
    """A format-2 cache entry: config 1 chosen over config 0 (the runner-up)."""
    from triton_dist_tune.disk.cache import versions, write_json_atomic
    from triton_dist_tune.records import Outcome

    outcomes = [Outcome(0, "{BLOCK: 64}", "measured", time=times[0], spread=spreads[0], per_rank=[times[0]] * 2,
                        samples=1, order=[0], round_times=[times[0]]),
                Outcome(1, "{BLOCK: 128}", "measured", time=times[1], spread=spreads[1], per_rank=[times[1]] * 2,
                        samples=1, order=[1], round_times=[times[1]])]
    data = {"format": 2, "function": name, "key": key, "index": 1, "config": "{BLOCK: 128}", "time_ms": times[1],
            "margin": margin, "near_tie": near_tie, "runner_up": 0, "timing": "cold", "rounds": 1,
            "group_size": group_size, "group": "default", "created": time.time(), "versions": versions(),
            "gpu": "cpu", "gpu_count": 0, "space": "abc", "measurements": [o.to_json() for o in outcomes]}
    return write_json_atomic(cache / name / f"{stem}.json", data)


# -- near ties and margins ---------------------------------------------------------------------------------------


def test_a_near_tie_is_only_called_so_within_the_spread():
    """One round each, 152 ms against 36 ms: the race cannot yet call the runner-up clearly slower, which was
    recorded and shown as "a near tie: within the measurement's spread" beside +322% (both spreads 0)."""
    from triton_dist_tune.disk.logs import margin_text
    from triton_dist_tune.function.decide import decide
    from triton_dist_tune.measure.race import Race, RacePlan

    def raced(times: list[float]):
        race = Race([0, 1], RacePlan(max_rounds=1, seed="s"))
        for i in race.order():
            race.record(i, [times[i], times[i]])
        race.end_round()
        return decide([race.outcome(i, f"{{v: {i}}}", 0) for i in (0, 1)], race, "cold")

    far = raced([152.0, 36.0])
    assert far.index == 1 and far.margin == pytest.approx(152 / 36 - 1) and not far.near_tie
    assert margin_text(far) == " (4.2x faster than config 0 (76% less time))"
    close = raced([10.05, 10.0])  # 0.5% apart: within the indifference margin, a near tie whatever the spread
    assert close.near_tie and margin_text(close).endswith(", a near tie: within the measured noise)")


def test_show_and_list_call_a_recorded_near_tie_so_only_within_the_spread(tmp_path, capsys):
    cache = tmp_path / "cache"
    write_entry(cache, 3.22, True, (152.0, 36.0), (0.0, 0.0))  # as written before: flagged at +322%
    status, out, _ = cli(["show", "f", "--cache-dir", str(cache)], capsys)
    assert status == 0
    assert "margin: +322.0% over config 0: chosen config 4.2x faster (76% less time)" in out, out
    assert "near tie" not in out
    status, out, _ = cli(["list", "--cache-dir", str(cache)], capsys)
    assert "+322.0%" in out and "~+322.0%" not in out and "near tie" not in out, out
    write_entry(cache, 0.02, True, (1.02, 1.0), (0.02, 0.01), stem="fedcba98765432100000")  # 2% within ±3%
    status, out, _ = cli(["show", "fedcba", "--cache-dir", str(cache)], capsys)
    assert "margin: +2.0% over config 0: chosen config 2.0% less time (a near tie: within the measurement's " \
           "spread)" in out, out


def test_a_margin_is_said_as_times_faster_and_less_time():
    from triton_dist_tune.disk.logs import margin_text
    from triton_dist_tune.records import Decision

    # 77 ms against 152 ms was "(97.0% ahead of config 0)"
    assert margin_text(Decision(1, "{v: 1}", 77.0, 152 / 77 - 1, False, 0, [], "steady", 3)) == \
        " (2.0x faster than config 0 (49% less time))"
    assert margin_text(Decision(1, "{v: 1}", 1.0, 0.05, False, 0, [], "steady", 3)) == \
        " (4.8% less time than config 0)"


# -- the caller's mistakes ---------------------------------------------------------------------------------------


@pytest.fixture
def tuner_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_LOG_DIR", str(tmp_path / "logs"))


def test_an_autotune_typo_is_bad_input_on_a_decided_key_too(tuner_dirs):
    """Before: on a decided key the typo reached the function (a plain TypeError), or passed silently into one
    that takes **kwargs."""
    import triton_dist_tune as tdt
    from triton_dist_tune.errors import BadInputError

    @tdt.autotune([{"block": 1}, {"block": 2}], key_fn=lambda n, **kw: n, n_warmup=0, n_repeat=1, name="strict")
    def strict(n, *, block):
        return block

    @tdt.autotune([{"block": 1}, {"block": 2}], key_fn=lambda n, **kw: n, n_warmup=0, n_repeat=1, name="loose")
    def loose(n, *, block, **kwargs):
        return block

    for f in (strict, loose):
        with pytest.raises(BadInputError, match=r"got unknown tuner keyword\(s\) \['autotune_verbos'\]"):
            f(3, autotune_verbos=True)  # tuning path: undecided key
        assert f(8) in (1, 2)  # decided
        with pytest.raises(BadInputError, match=r"got unknown tuner keyword\(s\) \['autotune_verbos'\]"):
            f(8, autotune_verbos=True)  # the hot path
        with pytest.raises(BadInputError, match="autotune_pgg"):
            f(8, scale=2, autotune_pgg=None) if f is loose else f(8, autotune_pgg=None)
    assert loose(8, scale=2) in (1, 2) and loose(8, scale=2) == loose(8)  # other keywords still pass


def test_autotune_without_its_arguments_says_so():
    import triton_dist_tune as tdt
    from triton_dist_tune.errors import BadInputError

    with pytest.raises(BadInputError, match=r"@autotune was applied to '.*kernel' without its arguments: call it "
                                            r"with them, @autotune\(config_space, key_fn=...\)"):
        @tdt.autotune
        def kernel(x, *, block):
            return x


def test_to_hashable_of_a_list_says_what_it_takes():
    import torch

    import triton_dist_tune as tdt
    from triton_dist_tune.errors import BadInputError

    assert tdt.to_hashable(torch.ones(2, 3)) == ((2, 3), (3, 1), torch.float32)
    with pytest.raises(BadInputError, match=r"to_hashable takes one tensor .* not a list: for a list of tensors, "
                                            r"use tuple\(to_hashable\(t\) for t in the list\)"):
        tdt.to_hashable([torch.ones(2), torch.ones(3)])


def test_show_of_a_missing_file_says_no_such_file(tmp_path, capsys):
    cache = tmp_path / "cache"
    write_entry(cache, 0.3, False, (1.3, 1.0), (0.0, 0.0))
    status, _, err = cli(["show", str(tmp_path / "missing.json"), "--cache-dir", str(cache)], capsys)
    assert status == 2 and f"{tmp_path / 'missing.json'}: no such file" in err, err
    status, out, _ = cli(["show", "f/0123456789abcdef0123.json", "--cache-dir", str(cache)], capsys)
    assert status == 0 and "key: (8,)" in out  # a name from 'list' that ends in .json still names the entry


# -- multi-rank messages -----------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_config_space_mismatch_names_the_first_entry_that_differs(tmp_path):
    """Before: the first 15 configs of each rank (identical), cut off mid-dict, and never the one that differs."""
    results = run_ranks(CASES, 2, ["space_mismatch"], env=tuner_env(tmp_path), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert r.result.get("error") == "MismatchError", describe(results)
        message = r.result["message"]
        assert "differ in config space: ranks [0]: entry 137 of 200 (the first that differs): {block: 16, " \
               "name: 'cfg137', stage: 137}; ranks [1]: entry 137 of 200 (the first that differs): {block: 32, " \
               "name: 'cfg137', stage: 137}" in message, message
        assert "cfg000" not in message and len(message) < 1500, message


@pytest.mark.timeout(150)
def test_an_error_on_a_subgroup_says_which_global_rank_its_rank_is(tmp_path):
    """On the group of global ranks [1, 2], global rank 2's failure read "rank 1: key_fn failed ..." and "rank 1:
    ValueError ...": on a tensor-parallel group, the wrong process. Now the message says which global rank each
    group rank is (the default group's messages are unchanged: test_messages' other cases)."""
    results = run_ranks(CASES, 3, ["subgroup_rank_fails"], env=tuner_env(tmp_path), timeout=130)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert results[0].results == [], describe(results)
    mapping = "The ranks named are ranks of group 'ranks [1, 2]': group rank 0 is global rank 1, 1 is 2"
    for r in results[1:]:
        key, run = r.result["key"], r.result["run"]
        assert key["error"] == "BadInputError" and "rank 1: key_fn failed: IndexError" in key["message"], key
        assert key["message"].endswith(mapping), key
        assert run["error"] == "AllConfigsFailedError" and "rank 1: ValueError" in run["message"], run
        assert run["message"].endswith(mapping), run


@pytest.mark.timeout(120)
def test_a_prune_fn_that_keeps_no_common_config_says_what_each_rank_kept(tmp_path):
    """Before: "prune_fn left no config that every rank keeps (of 4)", and nothing of why: each rank had kept
    some, but not the same ones."""
    results = run_ranks(CASES, 2, ["prune_apart"], env=tuner_env(tmp_path), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        assert r.result.get("error") == "BadInputError", describe(results)
        assert r.result["message"].endswith("prune_fn left no config that every rank keeps (of 4): "
                                            "rank 0: keeps configs [0, 2]; rank 1: keeps config [1]"), r.result


@pytest.mark.timeout(120)
def test_the_docs_name_the_error_of_a_served_key_that_prune_fn_keeps_nothing_for(tmp_path):
    """campaign.md and fault-tolerance.md said "Triton's pruning error" (an ``AutotunerError``); ``autotune``
    raises its own ``BadInputError``, which an ``except AutotunerError`` does not catch."""
    results = run_ranks(CASES, 2, ["nearest_keeps_none"], env=tuner_env(tmp_path), timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    said = "prune_fn left no config that every rank keeps"
    for r in results:
        assert r.result.get("error") == "BadInputError" and said in r.result["message"], describe(results)
    for page in ("campaign.md", "fault-tolerance.md"):
        text = " ".join((ROOT / "docs" / page).read_text().split())
        assert "Triton's pruning error" not in text and "`BadInputError` on every rank" in text \
            and f"`{said}`" in text, page


@pytest.mark.timeout(150)
def test_rank_local_policy_speaks_once_and_logs_of_a_missing_rank_fail(tmp_path, capsys):
    """A rank-local campaign: the ``nearest`` policy's warning on rank 0 only (before: once per rank; each rank's
    log still has it). Then ``logs --rank 7`` of that 2-rank job: exit 2 naming ranks 0 and 1 (before: exit 0
    and "0 record(s) from rank(s) []")."""
    results = run_ranks(CASES, 2, ["local_nearest"], env=tuner_env(tmp_path), timeout=130)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [r.result["served"] for r in results] == [0, 0]
    said = "key 10 is not decided: serving the decision of the nearest decided key 8"
    assert said in results[0].stderr, results[0].stderr[-2000:]
    assert said not in results[1].stderr, results[1].stderr[-2000:]
    assert all(said in (tmp_path / "logs" / f"rank-{r}.log").read_text() for r in (0, 1))
    status, _, err = cli(["logs", "--log-dir", str(tmp_path / "logs"), "--rank", "7"], capsys)
    assert status == 2 and "has no records of rank 7: its ranks are 0, 1" in err, err
    status, out, _ = cli(["logs", "--log-dir", str(tmp_path / "logs"), "--rank", "1"], capsys)
    assert status == 0 and "from rank(s) [1]" in out, out


@pytest.mark.timeout(150)
def test_a_contextual_disk_cache_hit_prints_under_triton_print_autotuning(tmp_path):
    """``contextual_autotune`` alone (no torch.distributed), run twice with one cache: the second run's hits say
    the config and the file (before: nothing)."""
    script = HERE / "scenarios" / "contextual_cases.py"
    env = {**tuner_env(tmp_path, 60), "TRITON_PRINT_AUTOTUNING": "1"}
    runs = [run_process(script, ["single"], env, timeout=120) for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), runs[-1].stderr[-3000:]
    assert "cache hit" not in runs[0].stderr and "finished after" in runs[0].stderr
    second = runs[1].stderr
    cache_files = sorted(str(p) for p in (tmp_path / "cache").rglob("*.json"))
    assert "Triton autotuning for function add_kernel,\nwith key as (64, 'torch.float32', 'torch.float32', " \
           "'torch.float32'): cache hit on 1 rank(s) of group 'this process alone',\nconfig: Config({BLOCK: 128, " \
           in second, \
        second[-3000:]
    assert "Triton autotuning for function scale_kernel," in second
    assert sum(f"cache file: {f}" in second for f in cache_files) == 2, (cache_files, second[-3000:])
    assert "finished after" not in second


# -- launch.sh ---------------------------------------------------------------------------------------------------


def launch(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "launch.sh"), "--cpu", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.timeout(150)
def test_launch_sh_campaign_with_a_bad_module_ends_on_its_message(tmp_path):
    """Before: the message from each rank, then about 40 lines of torchrun's ChildFailedError traceback."""
    done = launch(["-m", "triton_dist_tune", "campaign", "no_such_mod:fn", "--calls", "no_such_mod:build",
                   "--keys", "8"], tmp_path, base_env())
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("triton-dist-tune: 'no_such_mod:fn': no module named 'no_such_mod'"), done.stderr
    assert done.stderr.count("no module named") == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "ChildFailedError" not in done.stderr + done.stdout


@pytest.mark.timeout(60)
def test_launch_sh_names_a_script_that_is_not_there_and_starts_nothing(tmp_path):
    """Before: ensure_env, then torchrun started two ranks, each printed python's "can't open file", and torchrun
    ended on about 40 lines of its ChildFailedError traceback. Now one line and exit status 2; a folder is named."""
    done = launch(["no_such_script.py", "--flag"], tmp_path, base_env())
    assert (done.returncode, done.stdout) == (2, ""), done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [f"launch.sh: no script at 'no_such_script.py' (from {tmp_path}; -m "
                                                "runs a module)"], done.stderr[-3000:]
    (tmp_path / "folder").mkdir()
    done = launch(["folder"], tmp_path, base_env())
    assert done.returncode == 2 and "no script at 'folder' (not a file)" in done.stderr, done.stderr[-3000:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("variables", "said"), [
    ({"NNODES": "2", "NODE_RANK": "2"}, "NODE_RANK='2' is not a node of NNODES=2 (0 to 1, another on each node)"),
    ({"NNODES": "two"}, "NNODES='two' is not a number of nodes (N, or MIN:MAX for an elastic job)"),
    ({"NNODES": "1", "MASTER_PORT": "295OO"}, "MASTER_PORT='295OO' is not a port: a whole number from 1 to 65535"),
], ids=["node-rank-outside", "nnodes", "master-port"])
def test_launch_sh_names_a_multi_node_variable_that_cannot_start_the_job(tmp_path, variables, said):
    """``NNODES`` set (a multi-node run) with a variable torchrun cannot start from: one line naming it, exit status
    2, nothing started. Before: ``NODE_RANK=2`` of ``NNODES=2`` waited, silent, for nodes that never come (torchrun's
    rendezvous: past this test's 30 s); a malformed ``NNODES`` or ``MASTER_PORT`` ended in torchrun's traceback or
    its usage text."""
    (tmp_path / "script.py").write_text("print('started')\n")
    env = base_env({"NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", **variables})
    done = launch(["script.py"], tmp_path, env, timeout=30)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [f"launch.sh: {said}"], done.stderr[-3000:]


@pytest.mark.timeout(60)
def test_launch_sh_names_a_module_that_is_not_there_and_starts_nothing(tmp_path):
    """``bash launch.sh -m no_such_module``: before, torchrun started two ranks, each printed python's "No module
    named", and torchrun ended on about 40 lines of its ChildFailedError traceback, exit status 1. Now one line and
    exit status 2 before torchrun starts, looked up as the ranks' ``python -m`` does (the current folder, then the
    checkout): a missing parent package is named, and so is a package without ``__main__``; one that is there runs."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "here.py").write_text("print('RAN', __name__)\n")
    env = base_env()
    tail = f" (from {tmp_path}, with this checkout on PYTHONPATH; a script is named without -m)"
    for module, said in [("no_such_module", "no module named 'no_such_module'"),
                         ("no_such_pkg.mod", "no module named 'no_such_pkg' (for 'no_such_pkg.mod')"),
                         ("pkg.not_here", "no module named 'pkg.not_here'"),
                         ("pkg", "'pkg' is a package without a __main__ module: python -m cannot run it")]:
        done = launch(["-m", module, "--flag"], tmp_path, env)
        assert (done.returncode, done.stdout) == (2, ""), done.stderr[-3000:]
        lines = done.stderr.strip().splitlines()  # (before it, at most launch.sh's NOTE on another installed copy)
        assert lines[-1] == f"launch.sh: {said}{tail}", done.stderr[-3000:]
        assert all(line.startswith("launch.sh: ") for line in lines), done.stderr[-3000:]
    done = launch(["--nproc", "1", "-m", "pkg.here"], tmp_path, env)  # (one rank: no torchrun, a second or so)
    assert done.returncode == 0 and "RAN __main__" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


def fake_install(where: Path, project: Path) -> Path:
    """A folder that, on PYTHONPATH, looks like triton-dist-tune installed editable from ``project``: pip's
    metadata (with its direct_url.json) and a package of that name."""
    info = where / "triton_dist_tune-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: triton-dist-tune\nVersion: 0.1.0\n")
    (info / "direct_url.json").write_text(json.dumps({"url": project.as_uri(), "dir_info": {"editable": True}}))
    (where / "triton_dist_tune").mkdir()
    (where / "triton_dist_tune" / "__init__.py").write_text("")
    return where


@pytest.mark.timeout(150)
def test_launch_sh_names_another_installed_copy_and_runs_this_checkout(tmp_path):
    """Before: an editable install of another checkout was accepted in silence (and plain torchrun runs it)."""
    other = tmp_path / "other-checkout"
    script = tmp_path / "where.py"
    script.write_text("import importlib.util\nprint('RUNS', importlib.util.find_spec('triton_dist_tune').origin)\n")
    env = base_env({"PYTHONPATH": str(fake_install(tmp_path / "site", other))})
    done = launch(["--nproc", "1", str(script)], tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"launch.sh: NOTE: this checkout is {ROOT}, but the triton-dist-tune package is installed (pip) from " \
           f"{other} (editable); a plain python imports triton_dist_tune from {tmp_path / 'site'}." in done.stderr, \
        done.stderr
    assert f"pip install -e '{ROOT}[test,mpi,plot]'" in done.stderr
    assert f"RUNS {ROOT / 'triton_dist_tune' / '__init__.py'}" in done.stdout, done.stdout  # this checkout's code


@pytest.mark.timeout(150)
def test_launch_sh_says_nothing_of_copies_when_this_checkout_is_installed(tmp_path):
    script = tmp_path / "where.py"
    script.write_text("print('RAN')\n")
    same = base_env({"PYTHONPATH": f"{ROOT}:{fake_install(tmp_path / 'mine', ROOT)}"})
    done = launch(["--nproc", "1", str(script)], tmp_path, same)
    assert done.returncode == 0 and "NOTE" not in done.stderr, done.stderr[-3000:]


# -- plots (item 4) ----------------------------------------------------------------------------------------------


def plot_entry(cache: Path, times: list[float | None], name: str = "plotted", key: str = "(8,)",
               group_size: int = 2, stem: str = "0123456789abcdef0123", stopped: tuple[int, ...] = ()) -> Path:
    """A format-2 entry over len(times) configs with long descriptions; None: a config that failed."""
    from triton_dist_tune.disk.cache import versions, write_json_atomic
    from triton_dist_tune.records import Outcome

    outcomes = []
    for i, t in enumerate(times):
        config = f"{{BLOCK_SIZE_M: {16 << i}, BLOCK_SIZE_N: 64, BLOCK_SIZE_K: 32, GROUP_SIZE_M: 8, num_warps: 4}}"
        if t is None:
            outcomes.append(Outcome(i, config, "failed", error="OutOfResources: out of resource: shared memory, "
                                    "Required: 262144, Hardware limit: 232448. Reducing block sizes or num_stages "
                                    "may help."))
        else:
            outcomes.append(Outcome(i, config, "stopped" if i in stopped else "measured", time=t, spread=0.12,
                                    per_rank=[t] * group_size, samples=3, order=[i, i + 10, i + 20],
                                    round_times=[t, t * 1.01, t * 0.99]))
    best = min(range(len(times)), key=lambda i: times[i] if times[i] is not None else float("inf"))
    data = {"format": 2, "function": name, "key": key, "index": best, "config": outcomes[best].config,
            "time_ms": times[best], "margin": 0.3, "near_tie": False, "runner_up": 0, "timing": "steady",
            "rounds": 3, "group_size": group_size, "group": "default", "created": time.time(),
            "versions": versions(), "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": group_size, "space": "abc",
            "measurements": [o.to_json() for o in outcomes]}
    return write_json_atomic(cache / name / f"{stem}.json", data)


def texts_inside(fig) -> list[str]:
    """The texts of ``fig`` (drawn) that reach outside it: empty when every label is whole."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    out = []
    axes = [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]
    ticks = {id(t.label1) for a in axes for t in (*a.majorTicks, *a.minorTicks)} | \
        {id(t.label2) for a in axes for t in (*a.majorTicks, *a.minorTicks)}
    drawn = [(t.label1, t.label2) for a in axes for t in a._update_ticks()]  # the ticks drawn: those in view
    for text in [t for t in fig.findobj(Text) if id(t) not in ticks] + [t for labels in drawn for t in labels]:
        if not text.get_visible() or not text.get_text().strip():
            continue
        box = text.get_window_extent(renderer)
        if box.x0 < frame.x0 - 1 or box.x1 > frame.x1 + 1 or box.y0 < frame.y0 - 1 or box.y1 > frame.y1 + 1:
            out.append(f"{text.get_text()!r} at {box} outside {frame}")
    return out


@pytest.mark.parametrize("times", [
    [0.2, 0.9, 1.03, 0.95, None],  # linear axis: the slowest bars' notes, "(left early)", at the right edge
    [0.01, 0.02, 5.0, 4.0, None],  # a log axis (500x)
])
def test_decision_plot_keeps_every_label_inside_and_beside_its_bar(tmp_path, times):
    """Before: right-edge notes were cut off ("(left ear") or pushed far from their bar."""
    from triton_dist_tune.cli import plots
    from triton_dist_tune.disk.decisions import read_entry

    entry = read_entry(plot_entry(tmp_path / "cache", times, stopped=(2, 3)))
    fig = plots.decision_figure(entry)
    assert texts_inside(fig) == []
    bars = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    box = bars.get_window_extent(renderer)
    notes = [t for t in bars.texts if " ms" in t.get_text()]
    assert len(notes) == 4 and any("(left early)" in t.get_text() for t in notes)
    for note in notes:
        extent = note.get_window_extent(renderer)
        assert extent.x1 <= box.x1, note.get_text()  # inside the axes
        row = round(note.get_position()[1])
        o = entry.measurements[row]
        end = bars.transData.transform(((o.time * (1 + o.spread)), row))[0]  # the bar's end with its error bar
        assert -box.width * 0.6 < extent.x0 - end < 40, (note.get_text(), extent.x0, end)  # beside it or on it


def test_function_plot_fits_and_counts_the_ranks_each_record_says(tmp_path, capsys):
    """Before: the title said "1 rank(s)" (the first key's record) where 'list' showed 2 for the other keys."""
    from triton_dist_tune.cli import plots
    from triton_dist_tune.disk.decisions import scan

    cache = tmp_path / "cache"
    plot_entry(cache, [0.2, 0.3, 0.5], name="moe", key="(1, 2048, 'bf16')", group_size=1, stem="a" * 20)
    plot_entry(cache, [0.4, 0.3, 0.6], name="moe", key="(64, 2048, 'bf16')", group_size=2, stem="b" * 20)
    _, out, _ = cli(["list", "--cache-dir", str(cache)], capsys)
    rows = [line for line in out.splitlines() if line.startswith(("  aaaa", "  bbbb"))]
    assert "+30.0%  1  " in rows[0] and "+30.0%  2  " in rows[1], out  # the ranks column
    fig = plots.function_figure(scan(cache)[0])
    assert "1-2 rank(s) (per key, under its name)" in fig._suptitle.get_text()
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["(1, 2048, 'bf16')\n1 rank(s)", "(64, 2048, 'bf16')\n2 rank(s)"], ticks
    assert texts_inside(fig) == []
    plot_entry(cache, [0.4, 0.3, 0.6], name="moe", key="(64, 2048, 'bf16')", group_size=1, stem="b" * 20)
    fig = plots.function_figure(scan(cache)[0])
    assert fig._suptitle.get_text().endswith("2 decision(s) across keys; 1 rank(s), NVIDIA H100 80GB HBM3 x1")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case", ["interrupted_and_caught", "interrupted_and_caught_contextual"])
def test_a_rank_interrupted_and_caught_is_said_to_have_left_not_ended_its_process(tmp_path, case):
    """Rank 1 is interrupted (KeyboardInterrupt) in a tuned function with no collective; its caller catches it and
    the process lives on. Rank 0's RankFailedError said "group rank(s) [1] ended their process to leave a collective
    of the function": neither had happened. It says that rank 1 left the tuning; nothing else changes (no config is
    blamed)."""
    results = run_ranks(CASES, 2, [case], env=tuner_env(tmp_path, 60), timeout=130, stuck=[1])
    assert results[1].result["error"] == "KeyboardInterrupt", describe(results)
    first = results[0].result
    assert results[0].returncode == 0 and first["error"] == "RankFailedError", describe(results)
    message = first["message"]
    assert "interrupted (KeyboardInterrupt)" in message and "group rank(s) [1] left the tuning" in message, message
    assert "ended their process" not in message and "collective" not in message, message
    assert "No config is blamed (an interruption" in message, message


def test_the_arg_overwrite_notice_is_a_warning_said_once_per_function_and_parameter(tuner_dirs, capfd):
    """``autotune_allow_arg_overwrite=True`` with a tuned parameter the caller passes: the notice went straight to
    stderr (the package logger), so ``warnings.catch_warnings`` and ``-W ignore`` could not filter it
    (Triton-distributed says it with ``warnings.warn``). Now a ``UserWarning`` that points at the caller's line,
    once per function and parameter as before, and a line in the rank's log."""
    import logging
    import warnings

    import triton_dist_tune as tdt
    from triton_dist_tune.disk import logs

    def tuned(name: str):
        @tdt.autotune([{"c": 1}, {"c": 2}], key_fn=lambda x, **kw: x, n_warmup=0, n_repeat=1, name=name)
        def f(x, *, c):
            return x * c
        return f

    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())
    logs.rank_log().addHandler(handler)
    try:
        f, g = tuned("overwritten"), tuned("silenced")
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert f(4, c=3, autotune_allow_arg_overwrite=True) == 12  # tuned, then run with the caller's c
            assert f(4, c=3, autotune_allow_arg_overwrite=True) == 12  # decided: said already
            assert f(5, c=3, autotune_allow_arg_overwrite=True) == 15  # another key: said already
        said = [w for w in caught if "overrides the tuned config's value" in str(w.message)]
        assert len(said) == 1 and issubclass(said[0].category, UserWarning), [str(w.message) for w in caught]
        assert "overwritten: the caller's c=3 overrides" in str(said[0].message), str(said[0].message)
        assert said[0].filename == __file__, said[0].filename  # the caller's line, as -W ...:module filters need
        assert "overrides" not in capfd.readouterr().err  # recorded by catch_warnings, not printed
        assert sum("overwritten: the caller's c=3 overrides" in m for m in logged) == 1, logged
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert g(4, c=3, autotune_allow_arg_overwrite=True) == 12
        assert "overrides" not in capfd.readouterr().err  # filtered out
    finally:
        logs.rank_log().removeHandler(handler)


def test_a_subgroups_ranks_text_is_added_only_to_errors_that_name_its_ranks_bare():
    """Every tuning's turn on a group adds which global rank each of its ranks is, to an error naming a rank. An
    error that names global ranks already (an exchange's timeout: "group ranks [0] (global [1])"), or a replica,
    comes from another group (the replicas group, whose turn is outside the tuning group's): before, it got the
    inner group's mapping too, which sent the user to the wrong process."""
    from triton_dist_tune.errors import GroupTimeoutError
    from triton_dist_tune.group.rank_names import add_ranks_text

    bare = GroupTimeoutError("f: rank 1: key_fn failed")
    add_ranks_text(bare, "tp", [4, 5])
    assert str(bare).endswith("The ranks named are ranks of group 'tp': group rank 0 is global rank 4, 1 is 5"), bare
    ended = GroupTimeoutError("f: rank 1 hung.")  # a sentence's own period: not doubled
    add_ranks_text(ended, "tp", [4, 5])
    assert str(ended).startswith("f: rank 1 hung. The ranks named are"), ended
    for text in ("waited 66 s at 'journals across replicas' for group ranks [0] (global [1]), which never arrived",
                 "rank 0 (world rank 1) of MPI group 'mpi:comm' (world ranks [1, 0]) waited 2 s at 'x' for ranks "
                 "that never arrived: they crashed, hung, or called with another group.",
                 "replica 1: rank 0: ValueError: x"):
        other = GroupTimeoutError(text)
        add_ranks_text(other, "tp", [4, 5])
        assert str(other) == text, other


def test_a_configs_log_line_says_what_the_group_time_and_this_ranks_own_time_are():
    """A rank log's line for a config said ``own 0.0623 ms, group 0.0289 ms +-4.1% over 5 sample(s)``: a group
    time less than this rank's own read as a contradiction until a later line said the race's times were least
    samples. Each time is now said with what it is, in every way the tuner makes it (the 2-rank job's log:
    test_tune_dist.py::test_ranks_agree_where_each_alone_would_differ)."""
    from triton_dist_tune.measure.guarding import final_text
    from triton_dist_tune.records import Outcome

    def outcome(**fields) -> Outcome:
        return Outcome(3, "{v: 3}", "measured", time=0.0289, spread=0.041, samples=5, own=0.0623, **fields)

    round_samples = "group time 0.0289 ms +-4.1% over 5 sample(s) (each sample the slowest rank's time in its round; "
    own = "; this rank's own time 0.0623 ms (the median of its own samples)"
    assert final_text(outcome(), least=True) == (
        round_samples + "the group time is the least of them, the race's samples being noisy)" + own)
    assert final_text(outcome()) == round_samples + "the group time is their median)" + own
    assert final_text(outcome(drift_free=0.0289)) == (
        round_samples + "the group time is drift-free: its median ratio, over its settled rounds, to the round's "
        "median leader, scaled by the leaders' median sample)" + own)
    assert final_text(outcome(drift_free=0.03), least=True).endswith("the least of them, the race's samples being "
                                                                      "noisy)" + own)  # not the time it has
    alone = Outcome(3, "{v: 3}", "measured", time=0.0623, spread=0.041, samples=5, own=0.0623)
    assert final_text(alone, share=True) == (
        "group time 0.0623 ms +-4.1% over 5 sample(s) (timed by this rank alone, its share of a sharded tuning: the "
        "median of its samples); this rank's own time 0.0623 ms (the same)")
    probed = Outcome(3, "{v: 3}", "measured", time=0.5, samples=1, own=0.5, probed=True)
    assert final_text(probed) == (
        "group time 0.5000 ms +-0.0% over 1 sample(s) (its warm-up probe standing in for a sample, on this rank: far "
        "behind the fastest probe); this rank's own time 0.5000 ms (the same)")


@pytest.mark.timeout(120)
def test_a_rank_interrupted_in_its_callable_and_called_again_stays_in_step_with_the_others(tmp_path):
    """A KeyboardInterrupt in rank 1's ``prune_fn`` (before the failure board opens), then a SystemExit in rank 0's
    measured run (rank 0 gathers the exchanges), each caught by its caller, which calls again as the other rank's
    does. The interrupted rank's peer raises RankFailedError naming it and the interruption at once, and the second
    calls tune together, to the same config. Before: the peer raised an ExchangeError about ranks at different
    steps (``prune_fn``; or RankFailedError from the board, the run), and its call again waited the whole timeout
    (60 s here) for the interrupted rank, whose call again had met the peer's abandoned exchange: one exchange
    apart, for good."""
    results = run_ranks(CASES, 2, ["interrupted_then_called_again"], env=tuner_env(tmp_path, 60), timeout=100)
    said = {(r["rank"], r["fn"], r["call"]): r for result in results for r in result.results}
    assert all(result.returncode == 0 for result in results) and len(said) == 12, describe(results)
    for fn, rank, kind in (("pruned", 1, "KeyboardInterrupt"), ("ran", 0, "SystemExit")):
        assert said[(rank, fn, 1)]["error"] == kind, said
        peer = said[(1 - rank, fn, 1)]
        assert peer["error"] == "RankFailedError", peer
        message = peer["message"]
        assert f"group rank(s) [{rank}] left the tuning (global rank {rank} " in message and kind in message, peer
        assert peer["seconds"] < 15, peer  # told at once, not at the timeout (60 s)
        again = [said[(r, fn, 2)] for r in (0, 1)]
        assert all(a["error"] is None for a in again) and again[0]["value"] == again[1]["value"], again
    # an interruption in a call that made no exchange (a rank-local function's serving) tells nobody: the next
    # tuning on the group tunes on both ranks (before this rule, rank 0's raised RankFailedError: rank 1 "left")
    assert said[(1, "alone", 1)]["error"] == "KeyboardInterrupt" and said[(0, "alone", 1)]["error"] is None, said
    after = [said[(r, "after", 1)] for r in (0, 1)]
    assert all(a["error"] is None for a in after) and after[0]["value"] == after[1]["value"], after


@pytest.mark.timeout(120)
def test_a_rank_that_called_with_autotune_false_is_among_the_causes_its_peer_is_told(tmp_path):
    """Rank 1 calls with ``autotune=False`` (it says nothing to the group) where rank 0 tunes: rank 0's
    GroupTimeoutError names that call among the causes. Before, it named a crash, a hang, another autotune_pg or
    key: not the likeliest cause of a rank that is alive and went on."""
    results = run_ranks(CASES, 2, ["autotune_false_on_one_rank"], env=tuner_env(tmp_path, 3), timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    first, second = (r.result for r in results)
    assert first["error"] == "GroupTimeoutError" and "which never arrived" in first["message"], first
    assert "or with autotune=False" in first["message"], first
    assert second == {"ok": 8}, second  # config_space[0], m = 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("tuner", "causes", "not_said"), [
    ("autotune", ["called the tuned function with another autotune_pg, autotune_replicas or key, or with "
                  "autotune=False"],
     ["contextual_autotune", "is_dist"]),
    ("contextual", ["did not make this call of the contextual_autotune function: they called it fewer times than "
                    "this rank (or never), or on another group (its is_dist= another group, or False, on those "
                    "ranks)"], ["autotune_pg", "autotune=False"]),
])
def test_a_rank_that_never_calls_is_told_with_the_causes_of_the_tuner_that_waited(tmp_path, tuner, causes, not_said):
    """Rank 1 never calls the tuned function rank 0 tunes on the default group (T = 4 s): rank 0's
    GroupTimeoutError names rank 1 and the causes of the tuner whose call waited. Before, a contextual_autotune
    function's wait named autotune's (another autotune_pg or key, autotune=False: options it does not have) and not
    its own (a rank that called it fewer times, or on another group by is_dist=)."""
    results = run_ranks(CASES, 2, [f"{tuner}_never_called_on_rank_1"], env=tuner_env(tmp_path, 4), timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    said = results[0].result
    assert said["error"] == "GroupTimeoutError", said
    assert "for group ranks [1] (global [1]), which never arrived: they crashed, hung, or " in said["message"], said
    assert all(cause in said["message"] for cause in causes), said
    assert not any(word in said["message"] for word in not_said), said
    assert results[1].results == [], results[1].results  # (rank 1 never called it)


def test_the_causes_a_wait_names_are_the_innermost_tuners_and_restored_as_its_call_ends():
    """An ``autotune`` call inside a contextual function's run marks its exchanges as autotune's, and the run's own
    exchanges after it are the contextual function's again (``said_as``, one thread)."""
    from triton_dist_tune.group.store_texts import LATE_CAUSES, late_causes, said_as

    assert late_causes() == LATE_CAUSES["autotune"]  # outside any call: autotune's, as before the marks
    with said_as("contextual"):
        assert late_causes() == LATE_CAUSES["contextual"]
        with said_as("autotune"):
            assert late_causes() == LATE_CAUSES["autotune"]
        assert late_causes() == LATE_CAUSES["contextual"]
    assert late_causes() == LATE_CAUSES["autotune"]


@pytest.mark.timeout(200)
def test_a_rank_interrupted_after_its_tunings_last_exchange_leaves_the_next_tuning_alone(tmp_path):
    """A rank is interrupted after the last exchange of its tuning, inside the group's turn (its rank log's handler
    raises KeyboardInterrupt at the decision's line: rank 1, ``autotune``; at the line ending the tuning call: rank
    0, ``contextual_autotune``), and its caller catches it; no peer waits in that tuning any more. Then both ranks
    tune an ``autotune`` key on the group: both calls tune it together, at once. Before: the rank wrote its "left
    the tuning" record as its part of the next exchange, the first of the peer's next tuning, whose call raised
    RankFailedError naming the rank (spurious: the rank's own call joined that tuning); only a call again tuned it."""
    results = run_ranks(CASES, 2, ["interrupted_after_the_last_exchange"], timeout=170,
                        env={**tuner_env(tmp_path, 120), "PASSOVER_GRACE_S": "25"})  # (a grace a loaded host keeps)
    said = {(r["rank"], r["n"], r["call"]): r for result in results for r in result.results}
    assert all(result.returncode == 0 for result in results), describe(results)
    for rank, n in ((1, 8), (0, 64)):
        assert said[(rank, n, 1)]["error"] == "KeyboardInterrupt" and said[(1 - rank, n, 1)]["error"] is None, said
    assert not [k for k in said if k[2] == 2], said  # no call again was needed
    for n in (16, 32):
        calls = [said[(r, n, 1)] for r in (0, 1)]
        assert all(c["error"] is None for c in calls) and calls[0]["value"] == calls[1]["value"], calls
        assert all(c["seconds"] < 60 for c in calls), calls  # not a wait for the deadline (120 s)


@pytest.mark.timeout(200)
def test_a_rank_interrupted_waiting_for_its_turns_last_result_tells_only_a_peer_still_in_that_turn(tmp_path):
    """Rank 1 writes its message of an exchange B and is interrupted (SIGINT) while it waits for B's result, which
    rank 0 makes only later: rank 1 cannot know whether rank 0 has an exchange left in the turn. Where B was the
    turn's last (``past``), rank 0's next turn's exchange C, where rank 1's "left" record lies, tunes on as if
    nothing had been written (before: it raised RankFailedError naming rank 1, whose own C then waited for a call
    again); where rank 0's turn goes on (``inside``), its exchange B2 raises RankFailedError naming rank 1 at once.
    Either way both ranks' C then pair up. Rank 0's grace for rank 1's next call is 25 s here, and the deadline 120
    s: rank 1 calls again at once, which a loaded CI host once took more than the default grace of 5 s to do (rank
    0's C raised, and the ranks' later exchanges, a step apart by the scenario's design, waited out the deadlines)."""
    results = run_ranks(CASES, 2, ["interrupted_in_the_last_exchanges_wait"],
                        env={**tuner_env(tmp_path, 120), "PASSOVER_GRACE_S": "25",  # (the wait's first slice,
                             "TRITON_DIST_AUTOTUNE_PROGRESS_S": "1"}, timeout=170)  # blocking in C: short)
    said = {(r["rank"], r["variant"], r["what"]): r for result in results for r in result.results}
    assert all(result.returncode == 0 for result in results), describe(results)
    for variant in ("past", "inside"):
        assert said[(1, variant, "B")]["error"] == "KeyboardInterrupt" and said[(0, variant, "B")]["error"] is None
        both = [said[(r, variant, "C")] for r in (0, 1)]
        assert all(c["error"] is None and c["value"] == [0, 1] for c in both), both
        assert all(c["seconds"] < 60 for c in both), both  # not a wait for the deadline (120 s)
    told = said[(0, "inside", "B2")]
    assert told["error"] == "RankFailedError" and "group rank(s) [1] left the tuning" in told["message"], told
    assert told["seconds"] < 60, told
