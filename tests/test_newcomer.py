"""A newcomer's first hour (issue 29, items 5-8 and 10): the documented campaign command through real torchrun,
``launch.sh -m``, what ``launch.sh`` installs, the first error messages, the plots and ``list``, and the README's
own example on 2 CPU ranks.

Every multi-rank test starts real processes (torchrun, or the harness's ranks) under a timeout; nothing is mocked.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from harness import ROOT, base_env, run_cli, run_command, run_process, run_ranks, tuner_env

HERE = Path(__file__).resolve().parent

CAMPAIGN_MODULE = '''
import torch
import triton_dist_tune as tdt


@tdt.autotune([{"v": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=2, timing="cold")
def fn(x, *, v):
    return x + v


def build(n):
    return torch.ones(n)
'''


def campaign_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder holding a small campaign module, and the environment to run it in (own cache and logs)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "camp_mod.py").write_text(CAMPAIGN_MODULE)
    env = base_env(tuner_env(tmp_path))
    env.pop("RANK", None), env.pop("WORLD_SIZE", None)
    return work, env


# -- item 5: the campaign command works as documented ------------------------------------------------------------


def test_campaign_options_are_no_prefix_of_a_torchrun_option():
    """argparse takes any prefix of an option as that option: a campaign option that is a prefix of one of
    torchrun's is read (or rejected as ambiguous) by torchrun, even after the module name."""
    from torch.distributed.run import get_args_parser

    from triton_dist_tune.cli.commands import parser

    theirs = [s for a in get_args_parser()._actions for s in a.option_strings if s.startswith("--")]
    campaign = parser()._subparsers._group_actions[0].choices["campaign"]
    ours = [s for a in campaign._actions for s in a.option_strings
            if s.startswith("--") and a.help != "==SUPPRESS==" and s != "--help"]  # --help: torchrun's own help
    assert "--rank-local" in ours
    assert not [(o, t) for o in ours for t in theirs if t.startswith(o)]


@pytest.mark.timeout(240)
def test_documented_campaign_command_runs_under_launch_sh_and_real_torchrun(tmp_path):
    """``bash launch.sh --cpu -m triton_dist_tune campaign MOD:FN --calls MOD:BUILD --keys ... --rank-local`` on 2 CPU
    ranks: launch.sh runs the module under real torchrun (``torchrun --nproc-per-node 2 -m triton_dist_tune campaign
    ...``, the form docs/campaign.md shows; no --backend: gloo without a GPU). Both keys tuned, one per rank, the
    summary written."""
    work, env = campaign_folder(tmp_path)
    cmd = ["bash", str(ROOT / "launch.sh"), "--cpu", "-m", "triton_dist_tune", "campaign", "camp_mod:fn",
           "--calls", "camp_mod:build", "--keys", "8", "16", "--rank-local", "--json", str(tmp_path / "summary.json")]
    done = run_command(cmd, work, env, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "campaign fn: 2 keys on 2 unit(s)" in done.stdout + done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sorted(k["key"] for k in summary["keys"]) == ["16", "8"]
    assert {k["state"] for k in summary["keys"]} == {"tuned"}


# -- item 7: the campaign command's input errors ---------------------------------------------------------------


@pytest.mark.parametrize("args, says", [
    (["camp_mod:nope", "--calls", "camp_mod:build", "--keys", "8"], "module 'camp_mod' has no 'nope'"),
    (["no_such_mod:fn", "--calls", "camp_mod:build", "--keys", "8"], "no module named 'no_such_mod'"),
    (["camp_mod:fn", "--calls", "camp_mod:build", "--keys", "[256"], "'[256' is not valid JSON"),
    # before, these three were said only once the job's group had started (under launch.sh: after torchrun started
    # the ranks, ending in its traceback); --backend was ignored in one process, and a traceback per rank in several
    (["camp_mod:build", "--calls", "camp_mod:build", "--keys", "8"],
     "'camp_mod:build' is not a function decorated with triton_dist_tune.autotune"),
    (["camp_mod:fn", "--calls", "camp_mod:__name__", "--keys", "8"], "is a str, not a function"),
    (["camp_mod:fn", "--calls", "camp_mod:build", "--keys", "8", "--backend", "glo"],
     "torch.distributed has no backend 'glo'"),
])
def test_campaign_command_input_errors_are_one_line_and_status_2(tmp_path, args, says):
    work, env = campaign_folder(tmp_path)
    done = run_cli(["campaign", *args], env, work, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("triton-dist-tune: ") and says in lines[0], done.stderr


@pytest.mark.timeout(120)
def test_campaign_backend_that_torch_lacks_is_one_line_before_torchrun_starts(tmp_path):
    """``--backend nccl`` on a CPU build of torch (or a name torch does not know) under ``launch.sh``: before, every
    rank's ``init_process_group`` raised torch's error (``Distributed package doesn't have NCCL built in``,
    ``Unknown backend type``) in a traceback, then torchrun's ``ChildFailedError``; now launch.sh's check says it in
    one line, exit status 2, and no rank starts."""
    import torch.distributed as dist

    work, env = campaign_folder(tmp_path)
    backend, says = ("nosuch", "torch.distributed has no backend 'nosuch'") if dist.is_nccl_available() else (
        "nccl", "was built without nccl")
    done = run_command(["bash", str(ROOT / "launch.sh"), "--cpu", "-m", "triton_dist_tune", "campaign", "camp_mod:fn",
                        "--calls", "camp_mod:build", "--keys", "8", "--rank-local", "--backend", backend],
                       work, env, timeout=100)
    assert done.returncode == 2, done.stderr[-3000:]
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "campaign fn:" not in done.stdout + done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("size, says", [("0", "a group holds at least 1 rank"),
                                        ("2", "--group-size 2 does not divide the 1 rank(s) of the job")])
def test_campaign_group_size_that_does_not_divide_the_job_is_one_line_and_status_2(tmp_path, size, says):
    """Before, ``--group-size 0`` was ignored (one group of every rank, as without it), and so was a size larger than
    the job (``--group-size 3`` on 2 ranks tuned on one group of 2); both are refused now, before any group starts."""
    work, env = campaign_folder(tmp_path)
    done = run_cli(["campaign", "camp_mod:fn", "--calls", "camp_mod:build", "--keys", "8", "--group-size", size], env,
                   work, timeout=60)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.timeout(120)
def test_campaign_json_file_in_a_missing_folder_is_said_before_the_campaign(tmp_path):
    """``--json`` into a folder that does not exist, or naming a folder: before, the whole campaign ran (on GPUs,
    minutes to hours), then rank 0 ended on 'No such file or directory' (or 'Is a directory') and the summary was
    lost. Now it is said before any tuning, one line and exit status 2, in one process and under launch.sh (its
    check before torchrun starts the ranks)."""
    work, env = campaign_folder(tmp_path)
    args = ["campaign", "camp_mod:fn", "--calls", "camp_mod:build", "--keys", "8",
            "--json", str(tmp_path / "missing" / "summary.json")]
    for launch in (False, True):
        done = (run_command(["bash", str(ROOT / "launch.sh"), "--cpu", "-m", "triton_dist_tune", *args], work, env,
                            timeout=100) if launch else run_cli(args, env, work, timeout=100))
        assert done.returncode == 2, done.stderr[-3000:]
        assert f"no folder {tmp_path / 'missing'} to write the summary into" in done.stderr, done.stderr[-3000:]
        assert "campaign fn:" not in done.stdout + done.stderr, done.stderr[-3000:]
    done = run_cli([*args[:-1], str(tmp_path)], env, work, timeout=100)
    assert done.returncode == 2 and f"--json {tmp_path}: a folder, not a file" in done.stderr, done.stderr[-3000:]
    assert "campaign fn:" not in done.stdout + done.stderr, done.stderr[-3000:]


def test_campaign_group_size_1_in_one_process_tunes(tmp_path):
    """``--group-size 1`` where no launcher started several ranks is one group of the one process: before, it stopped
    with 'bad value: Default process group has not been initialized'."""
    work, env = campaign_folder(tmp_path)
    done = run_cli(["campaign", "camp_mod:fn", "--calls", "camp_mod:build", "--keys", "8", "--group-size", "1"], env,
                   work, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "campaign fn: 1 keys on 1 unit(s)" in done.stdout + done.stderr, done.stderr


# ``--group-size 3`` on 2 ranks under launch.sh: launch.sh's check refuses it before torchrun starts (one line, exit
# status 2, no rank): test_cli_audit.py's test_campaign_group_size_that_does_not_divide_the_job_ends_before_torchrun_
# under_launch_sh runs that command; under plain torchrun the ranks say it themselves (the test after it there)


# -- item 7: the messages a newcomer meets first ---------------------------------------------------------------

CASES = HERE / "scenarios" / "newcomer_cases.py"


@pytest.mark.timeout(120)
def test_every_config_failing_alike_is_said_once_by_each_rank_with_its_own_number(tmp_path):
    """2 launched ranks, no init_process_group: each tunes alone and every config fails the same way. The error
    says it once, blames the function or environment, and each rank names itself (both said "rank 0")."""
    results = run_ranks(CASES, 2, ["no_init"], env=tuner_env(tmp_path), timeout=100)
    for r in results:
        assert r.result["error"] == "AllConfigsFailedError", r.stderr[-2000:]
        message = r.result["message"]
        assert "same error" in message and "function or its environment" in message, message
        assert message.count("init_process_group") == 1, message
        assert f"rank {r.rank}: ValueError" in message, message


@pytest.mark.timeout(120)
def test_no_gpu_driver_names_triton_interpret_and_launch_sh(tmp_path):
    results = run_ranks(CASES, 1, ["no_driver"], env={**tuner_env(tmp_path), "TRITON_INTERPRET": "0",
                                                     "CUDA_VISIBLE_DEVICES": ""}, timeout=100)
    message = results[0].result["message"]
    assert results[0].result["error"] == "AllConfigsFailedError" and "active drivers" in message, message
    assert "TRITON_INTERPRET=1" in message and "launch.sh" in message, message
    assert message.count("active drivers") == 1, message


@pytest.mark.timeout(120)
def test_tuned_parameter_by_position_and_tuner_keyword_typo_are_named(tmp_path):
    results = run_ranks(CASES, 1, ["by_position", "typo_on_decided_key"], env=tuner_env(tmp_path), timeout=100)
    found = {r["case"]: r for r in results[0].results}
    for how in ("plain", "keyword_only", "by_keyword"):  # by keyword, before: "key_fn failed: TypeError: ..."
        seen = found["by_position"][how]
        assert seen["error"] == "BadInputError" and "['v']" in seen["message"], seen
        assert "key_fn failed" not in seen["message"], seen
    for when in ("decided", "undecided"):
        seen = found["typo_on_decided_key"][when]
        assert seen["error"] == "BadInputError" and "unknown tuner keyword(s) ['autotune_verbos']" in \
            seen["message"], seen


# -- item 8: pictures and tables a person can read -------------------------------------------------------------

LONG = "{gemm_config: Config({BLOCK_K: 32, BLOCK_M: 64, BLOCK_N: 128, GROUP_M: 8, num_ctas: 1, num_stages: 3, "


def write_entry(cache: Path, function: str, key: str, configs: list[str], times: list[float | None], chosen: int,
                kernel: str | None = None, near_tie: bool = False, timeline: bool = True) -> Path:
    """A cache entry as the tuners write them: one config per time (None: failed), rounds recorded or not."""
    from triton_dist_tune.disk.cache import versions, write_json_atomic
    from triton_dist_tune.records import Outcome

    outcomes = []
    for i, (config, t) in enumerate(zip(configs, times, strict=True)):
        if t is None:
            outcomes.append(Outcome(i, config, "failed", error="OutOfResources: shared memory"))
        else:
            rounds = dict(order=[i, i + len(configs)], round_times=[t * 1.01, t * 0.99]) if timeline else {}
            outcomes.append(Outcome(i, config, "measured", time=t, spread=0.01, per_rank=[t, t], samples=2,
                                    **rounds))
    data = {"format": 2, "function": function, "key": key, "index": chosen, "config": configs[chosen],
            "time_ms": times[chosen], "margin": 0.02, "near_tie": near_tie, "runner_up": 1 - chosen,
            "timing": "steady", "rounds": 2, "group_size": 2, "group": "default", "created": 0.0,
            "versions": versions(), "gpu": "NVIDIA H200", "gpu_count": 2, "space": "abc",
            "measurements": [o.to_json() for o in outcomes]}
    if kernel:
        data["kernel"] = kernel
    folder = "contextual" if kernel else function
    name = hashlib.sha1(repr((function, key, kernel)).encode()).hexdigest()[:20]
    return write_json_atomic(cache / folder / f"{name}.json", data)


def test_decision_plot_says_what_a_bar_is_and_keeps_labels_whole(tmp_path):
    pytest.importorskip("matplotlib")
    from triton_dist_tune.cli import plots
    from triton_dist_tune.disk.decisions import read_entry

    configs = [LONG + "num_warps: 4})}", LONG + "num_warps: 8})}", "{gemm_config: 'torch'}"]
    entry = read_entry(write_entry(tmp_path, "ag_gemm", "(4096,)", configs, [1.0, 1.2, None], 0))
    fig = plots.decision_figure(entry)
    bars = fig.axes[0]
    assert "median over samples" in bars.get_xlabel() and "slowest rank" in bars.get_xlabel()
    labels = [t.get_text() for t in bars.get_yticklabels()]
    for config, label in zip(configs, labels, strict=True):  # whole: wrapped onto lines, nothing cut
        assert "…" not in label and label.replace("\n", " ").split(" ", 1)[1] == config
        assert max(len(line) for line in label.splitlines()) <= plots.LABEL_WIDTH + 6
    assert len(fig.axes) == 2  # bars and the recorded timeline


def test_a_plot_of_decisions_timed_by_one_rank_says_its_rank_not_the_slowest_rank(tmp_path):
    """A one-rank group's decision and a rank-local campaign's are timed by one rank: their plots said "the slowest
    rank's time" as for a group's (no max over ranks was taken). They now say whose time it is; a group's still says
    the slowest rank's."""
    pytest.importorskip("matplotlib")
    from triton_dist_tune.cli import plots
    from triton_dist_tune.disk.decisions import read_entry

    configs = ["{BM: 64}", "{BM: 128}"]
    group = write_entry(tmp_path, "f", "(1,)", configs, [1.0, 1.2], 0)
    alone = write_entry(tmp_path, "g", "(2,)", configs, [1.0, 1.2], 0)
    local = write_entry(tmp_path, "h", "(3,)", configs, [1.0, 1.2], 0)
    for path, fields in ((alone, {"group_size": 1}),
                         (local, {"group_size": 1, "rank_local": {"rank": 1, "group_size": 2, "group": "default"}})):
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, **fields}))
    for path, whose in ((group, "slowest rank"), (alone, "one rank"), (local, "one rank")):
        fig = plots.decision_figure(read_entry(path))
        label = fig.axes[0].get_xlabel()
        assert whose in label and ("slowest" in label) == (whose == "slowest rank"), (path.name, label)
        assert whose in fig.axes[1].get_ylabel(), fig.axes[1].get_ylabel()
    assert "slowest" not in plots.function_figure([read_entry(alone), read_entry(local)]).axes[0].get_ylabel()


def test_contextual_plot_has_no_empty_panel_and_function_plot_names_configs_in_key_order(tmp_path):
    pytest.importorskip("matplotlib")
    from triton_dist_tune.cli import plots
    from triton_dist_tune.disk.decisions import read_entry

    configs = ["Config({BLOCK: 16, num_warps: 4})", "Config({BLOCK: 32, num_warps: 4})"]
    entries = [read_entry(write_entry(tmp_path, "layer", f"({n}, 'torch.float32')", configs, [2.0, 1.0], 1,
                                      kernel="__main__.add_one", timeline=False)) for n in (1024, 64, 128)]
    one = plots.decision_figure(entries[0])
    assert len([ax for ax in one.axes if ax.get_visible()]) == 1  # no timeline recorded: no timeline panel
    across = plots.function_figure(entries)
    assert len(across.axes) == 1
    ax = across.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["(64, 'torch.float32')", "(128, 'torch.float32')",
                                                              "(1024, 'torch.float32')"]
    legend = [t.get_text().replace("\n", " ") for t in ax.get_legend().get_texts()]
    assert "#0: BLOCK: 16" in legend and "#1: BLOCK: 32" in legend, legend
    assert "num_warps: 4" in ax.get_legend().get_title().get_text()
    assert "median over samples" in ax.get_ylabel().replace("\n", " ")


def test_readme_image_is_readable_at_its_shown_size():
    """docs/tuning.png is shown about 1000 pixels wide: it is drawn at that width (its text at its own size), not a
    1210x3920 strip of 92 configs scaled down to a third."""
    from PIL import Image

    width, height = Image.open(ROOT / "docs" / "tuning.png").size
    assert width <= 1000 and height <= 1400, (width, height)
    assert "docs/tuning.png" in (ROOT / "README.md").read_text()


def test_list_fits_120_columns_sorts_by_function_and_key_and_explains_near_ties(tmp_path, capsys):
    from triton_dist_tune.cli.commands import NEAR_TIE_NOTE, main

    configs = [LONG + "num_warps: 4})}", LONG + "num_warps: 8})}"]
    for n in (1024, 64, 128):
        write_entry(tmp_path, "zeta_gemm_with_a_long_function_name", f"(({n}, 8192), 'torch.bfloat16', (8192, 1))",
                    configs, [1.0, 1.01], 0, near_tie=True)
    write_entry(tmp_path, "alpha", "(8,)", configs, [1.0, 1.5], 1)
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if str(tmp_path) not in line]  # the line naming the folder: its path
    assert max(len(line) for line in lines) <= 120, "\n".join(line for line in lines if len(line) > 120)
    assert out.index("alpha") < out.index("zeta_gemm")
    assert out.index("((64, 8192)") < out.index("((128, 8192)") < out.index("((1024, 8192)")
    assert "tie" not in out.replace(NEAR_TIE_NOTE, "") and NEAR_TIE_NOTE in out and "~+2.0%" in out


# -- item 6: launch.sh installs what the README says -------------------------------------------------------------


def python_without_the_package(tmp_path: Path, pip: bool = False) -> Path:
    """An interpreter (a venv) that sees this one's packages (torch, triton, setuptools, ...) through links, except an
    installed triton-dist-tune and (unless ``pip``) pip: a machine where the package was never installed."""
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    site = next((venv / "lib").glob("python*/site-packages"))
    for item in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if "triton_dist_tune" not in item.name and (pip or not item.name.startswith("pip")):
            (site / item.name).symlink_to(item)
    return venv / "bin" / "python"


@pytest.mark.timeout(150)
def test_launch_sh_runs_the_checkout_where_torch_and_triton_are_installed_and_pip_cannot_install_it(tmp_path):
    """launch.sh puts the checkout on PYTHONPATH for the ranks; its check of what is installed must not count
    that, or the package (its console script) is never installed although the README says so. Here pip is absent:
    the ranks need nothing more than torch and triton, so launch.sh says they run this checkout, and starts them
    (before issue 41 it stopped: nothing started for want of an install the ranks did not need)."""
    python = python_without_the_package(tmp_path)
    script = tmp_path / "hello.py"
    script.write_text("print('RANK RAN')\n")
    env = base_env({"PYTHON": str(python), "TMPDIR": str(tmp_path)})
    done = run_command(["bash", str(ROOT / "launch.sh"), "--cpu", "--nproc", "1", str(script)], tmp_path, env,
                       timeout=130)
    assert done.returncode == 0 and "RANK RAN" in done.stdout, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "ensure_env" in line or "launch.sh" in line]
    assert len(said) == 1 and re.fullmatch(
        "ensure_env: torch and triton are installed; triton-dist-tune is not, and pip could not install it without a "
        rf"download \(pip's output: {re.escape(str(tmp_path))}/triton-dist-tune-ensure-env\.log\.\w{{6}}\): the "
        r"ranks run this checkout \(PYTHONPATH\)", said[0]), done.stderr[-3000:]


def ensure_env_runs(python: Path, tmp: Path, form: list[str]) -> list[subprocess.CompletedProcess]:
    """Two runs of ``scripts/ensure_env.sh FORM`` at once, with ``python`` and TMPDIR ``tmp``."""
    from concurrent.futures import ThreadPoolExecutor

    env = base_env({"PYTHON": str(python), "TMPDIR": str(tmp)})
    command = ["bash", str(ROOT / "scripts" / "ensure_env.sh"), *form]
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda _: run_command(command, tmp, env, timeout=100), range(2)))


@pytest.mark.timeout(240)
def test_two_ensure_env_runs_at_once_write_pip_output_to_logs_of_their_own(tmp_path):
    """Before: every run appended pip's output to one fixed file, ``$TMPDIR/triton-dist-tune-ensure-env.log``, so
    two runs at once mixed their output there (and the end shown on failure was partly the other's), and a run of a
    user who could not write another's file lost it (here the path is a folder: no run can write it). Now each run
    makes its own (mktemp), names it, and shows its end on failure; where nothing needs pip, it makes none. Both
    forms, on an interpreter that sees torch and triton but has neither the package nor pip (pip fails at once)."""
    python = python_without_the_package(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp / "triton-dist-tune-ensure-env.log").mkdir()  # the old fixed path, which a run cannot write
    named = re.compile(rf"pip's output: ({re.escape(str(tmp))}/triton-dist-tune-ensure-env\.log\.\w{{6}})\)")
    logs: list[str] = []
    for form, status in (["--launch"], 0), ([], 1):
        for done in ensure_env_runs(python, tmp, form):
            assert done.returncode == status, done.stderr[-3000:]
            log = named.findall(done.stderr)
            assert len(log) == 1, done.stderr[-3000:]
            logs += log
            # one pip run's output, its own: pip is missing from this interpreter
            assert Path(log[0]).read_text().count("No module named pip") == 1, Path(log[0]).read_text()
            if form == []:  # installing failed: the end of the run's own log is shown
                assert f"failed; the end of {log[0]}:" in done.stderr and "No module named pip" in done.stderr
    assert len(set(logs)) == 4
    assert not any((tmp / "triton-dist-tune-ensure-env.log").iterdir())
    # where everything is installed (this interpreter), the full form runs no pip and makes no log (one run: with
    # no pip run there is no log for a second run at once to share; 3.2 CPU-s a run, its imports of torch and MPI).
    # pip may reach no index and no folder of wheels here: an interpreter that lacks an extra (matplotlib in a
    # developer's virtual environment) fails this test, naming it, and is left as it was. Before, the full form
    # installed the package's extras with their dependencies into the interpreter running the tests, while other
    # tests ran on it (seen: pip's cap on this machine replaced torch 2.15.0 with 2.14.1 mid-suite)
    env = base_env({"PYTHON": sys.executable, "TMPDIR": str(tmp), "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull})
    env.pop("PIP_FIND_LINKS", None)
    done = run_command(["bash", str(ROOT / "scripts" / "ensure_env.sh")], tmp, env, timeout=100)
    assert done.returncode == 0 and done.stderr == "", (
        f"this interpreter ({sys.executable}) lacks something the full form installs; install the extras "
        f"(pip install -e '{ROOT}[test,mpi,plot]') and run again: " + done.stderr[-3000:])
    assert sorted(p.name for p in tmp.iterdir() if "ensure-env" in p.name) == sorted(
        ["triton-dist-tune-ensure-env.log", *(Path(log).name for log in logs)])


@pytest.mark.timeout(60)
def test_launch_sh_names_a_python_that_is_not_there_and_installs_nothing(tmp_path):
    """``PYTHON=/no/such/python bash launch.sh x.py``: before, ensure_env took the missing interpreter for a missing
    torch, said 'installing torch 2.13.0 (pip's default build ...)', failed, and showed the end of a pip log that
    held other runs' lines. Now one line names the variable and the path, with exit status 2."""
    script = tmp_path / "hello.py"
    script.write_text("print('RANK RAN')\n")
    missing = tmp_path / "no" / "python"
    env = base_env({"PYTHON": str(missing), "TMPDIR": str(tmp_path)})
    done = run_command(["bash", str(ROOT / "launch.sh"), "--cpu", "--nproc", "1", str(script)], tmp_path, env,
                       timeout=50)
    assert done.returncode == 2 and "RANK RAN" not in done.stdout, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [f"ensure_env: PYTHON={missing}: no such interpreter (PYTHON picks "
                                                "the Python to run; default python3)"], done.stderr[-3000:]


@pytest.mark.timeout(200)
def test_launch_sh_installs_the_package_without_a_package_index_where_torch_and_triton_are_installed(tmp_path):
    """A GPU host with torch and triton and no package index (issue 41): launch.sh installed the package with build
    isolation, which fetched setuptools, and stopped before any rank. Now pip installs it from the checkout with no
    index, no build isolation and no dependencies, says so in one line, and the rank runs; the console script is
    there. pip is pointed at an empty index and told to use none, so any download would fail."""
    python = python_without_the_package(tmp_path, pip=True)
    script = tmp_path / "hello.py"
    script.write_text("print('RANK RAN')\n")
    empty = tmp_path / "empty-index"
    empty.mkdir()
    env = base_env({"PYTHON": str(python), "TMPDIR": str(tmp_path), "PIP_INDEX_URL": empty.as_uri(),
                    "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    done = run_command(["bash", str(ROOT / "launch.sh"), "--cpu", "--nproc", "1", str(script)], tmp_path, env,
                       timeout=180)
    assert done.returncode == 0 and "RANK RAN" in done.stdout, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "ensure_env" in line or "launch.sh" in line]
    assert said == [f"ensure_env: torch and triton are installed, so triton-dist-tune was installed from {ROOT} "
                    "without build isolation, dependencies or a download (pip --no-index --no-build-isolation "
                    "--no-deps -e)"], done.stderr[-3000:]
    assert (python.parent / "triton-dist-tune").exists()


ONE_RANK = """
import os, sys
import torch
import torch.distributed as dist
import triton_dist_tune as tdt

tdt.init_distributed()
total = torch.ones(1)
dist.all_reduce(total)
parent = open(f"/proc/{os.getppid()}/cmdline").read().replace(chr(0), " ")
print("RANK", dist.get_rank(), "OF", dist.get_world_size(), "LOCAL", os.environ["LOCAL_RANK"], "SUM", total.item())
print("AGENT" if "torch.distributed.run" in parent or "torchrun" in parent else "NO AGENT")
dist.destroy_process_group()
sys.exit(int(sys.argv[-1]))
"""


@pytest.mark.timeout(150)
@pytest.mark.parametrize("as_module", [False, True], ids=["script", "module"])
def test_launch_sh_starts_one_rank_without_torchrun_and_passes_its_exit_status(tmp_path, as_module):
    """One rank on one node (the README's one-GPU commands; ``--nproc 1``) ran under torchrun's agent, a second
    Python that imports torch: about 4.6 s of every one-GPU command on an H200 host (issue 41: the campaign's
    command took 61.6 s for a 49 s campaign). It now runs the script (or module) itself, with torchrun's variables
    for rank 0 of 1: ``init_distributed`` and a collective work, and the script's exit status is launch.sh's."""
    (tmp_path / "one_rank.py").write_text(ONE_RANK)
    target = ["-m", "one_rank"] if as_module else [str(tmp_path / "one_rank.py")]
    env = base_env(tuner_env(tmp_path))
    env.pop("RANK", None), env.pop("WORLD_SIZE", None)
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    done = run_command(["bash", str(ROOT / "launch.sh"), "--cpu", "--nproc", "1", *target, "3"], tmp_path, env,
                       timeout=130)
    assert done.returncode == 3, done.stderr[-3000:]
    assert "RANK 0 OF 1 LOCAL 0 SUM 1.0" in done.stdout and "NO AGENT" in done.stdout, done.stdout + done.stderr[-2000:]


# -- item 10: the README is a user's front page ------------------------------------------------------------------

README = ROOT / "README.md"


def readme_block(heading: str) -> str:
    """The first fenced code block under the README's section ``heading``."""
    text = README.read_text()
    section = text[text.index(heading):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```", start)]


@pytest.mark.timeout(150)
def test_readme_example_runs_on_two_cpu_ranks_and_both_choose_alike(tmp_path):
    code = readme_block("## Your own function on CPU ranks")
    assert len(code.strip().splitlines()) <= 10
    script = tmp_path / "my_tuned.py"
    script.write_text(code)
    results = run_ranks(script, 2, env=tuner_env(tmp_path), timeout=130)
    lines = []
    for r in results:
        assert r.returncode == 0, r.stderr[-3000:]
        found = re.search(rf"^rank {r.rank}: \{{1048576: (\{{chunks: \d+\}})\}}, y\[0\] = 2\.0$", r.stdout, re.M)
        assert found, r.stdout + r.stderr[-2000:]
        lines.append(found.group(1))
    assert lines[0] == lines[1]


def relative_links(page: Path) -> list[Path]:
    """The files a markdown page links to by relative path, outside its code blocks (which hold no links, only
    indexing like ``k[grid](x)``)."""
    prose = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [page.parent / link for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", prose)]


def test_readme_is_a_front_page():
    """Issue 35 item 1: at most 180 lines; what and why, an install line, the two commands, an example, every
    example file with its command, links to docs/ for the rest (moved there whole), no hidden .ci folder; every
    relative link of the README and of the pages that took its sections leads to a file."""
    text = README.read_text()
    assert len(text.splitlines()) <= 180, len(text.splitlines())
    quick = text[text.index("## Quick start"):text.index("## Your own function")]
    commands = quick[quick.index("```bash\n") + 8:quick.index("```", quick.index("```bash\n") + 8)].strip()
    assert [c.split("#")[0].strip() for c in commands.splitlines()] == ["bash launch.sh examples/quickstart.py",
                                                                         "bash tests/run.sh"]
    assert re.search(r"^pip install ", text, re.M)
    assert re.search(r"The test command takes about \d+ minutes on an idle 2-core machine and downloads about \d+ MB",
                     text)
    assert ".ci" not in text
    examples = text[text.index("## Examples"):text.index("## In brief")]
    for path in sorted((ROOT / "examples").glob("*.py")):
        assert f"examples/{path.name}" in examples, path.name
    for heading in ("## Install", "## Quick start", "## Your own function on CPU ranks", "## Examples",
                    "## Documentation"):
        assert heading in text, heading
    for gone in ("### The agreement protocol", "## Layout", "min 29 s", "24 fresh steady tunings", "22.4 s",
                 "| `TRITON_DIST_AUTOTUNE_CACHE_DIR` |", "| caller passes a meta-parameter"):
        assert gone not in text, gone
    for page, holds in (("docs/protocol.md", "## The agreement protocol"), ("docs/layout.md", "| `tests/` |"),
                        ("benchmarks/HISTORY.md", "min 29 s"), ("benchmarks/RESULTS.md", "bench_fidelity.py"),
                        ("docs/autotune.md", "**Arguments changed in place.**"),
                        ("docs/api.md", "## Where this differs from Triton and Triton-distributed, on purpose"),
                        ("docs/api.md", "## Large config spaces: the search\n\nA space of more than 64 configs"),
                        ("docs/operations.md", "| `TRITON_DIST_AUTOTUNE_CACHE_DIR` |"),
                        ("docs/operations.md", "The folder keeps the last 5 jobs"),
                        ("docs/operations.md", "## Starting the job: `init_distributed` and `launch.sh`")):
        assert holds in (ROOT / page).read_text(), page
    for page in (README, ROOT / "docs" / "api.md", ROOT / "docs" / "operations.md"):
        for link in relative_links(page):
            assert link.exists(), (page.name, link)
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert "--rank-local" in operations and " --local\n" not in operations


def test_every_option_of_the_command_line_is_in_the_docs():
    """A user learns the command line from docs/operations.md and docs/campaign.md: every option of every command
    (one of its spellings, ``-o`` or ``--output``) is named there. ``export --gpu`` and ``campaign --backend`` were
    not (only ``--help`` told of them)."""
    import argparse

    from triton_dist_tune.cli.commands import parser

    docs = "\n".join((ROOT / "docs" / page).read_text() for page in ("operations.md", "campaign.md"))
    commands = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    missing = [(name, action.option_strings) for name, command in commands.items() for action in command._actions
               if action.option_strings and action.help != argparse.SUPPRESS and "--help" not in action.option_strings
               and not any(re.search(re.escape(s) + r"(?![\w-])", docs) for s in action.option_strings)]
    assert not missing, missing


def test_every_option_of_contextual_autotune_is_on_its_page_with_its_default():
    """docs/contextual.md's example gives ``n_repeat=5, n_warmup=3`` and the page never said what a decorator
    without them gets (nor ``timeout``'s or ``search``'s default). Each option of ``contextual_autotune`` but
    ``is_dist`` (described apart) is named there in backquotes, then a parenthesis that says ``default VALUE``:
    VALUE read from the signature (``on``/``off`` for a switch, a text in quotes and backquotes), or, for an option
    whose default comes from the environment (None in the signature), its variable in backquotes, ``or`` and the
    fallback of ``Settings``."""
    import inspect

    from triton_dist_tune.contextual import contextual_autotune
    from triton_dist_tune.settings import Settings

    page = " ".join((ROOT / "docs" / "contextual.md").read_text().split())
    missing = []
    for name, parameter in inspect.signature(contextual_autotune).parameters.items():
        if parameter.kind is parameter.VAR_KEYWORD or name == "is_dist":
            continue
        value = parameter.default
        if isinstance(value, bool):
            said = "on" if value else "off"
        elif isinstance(value, str):
            said = f'`"{value}"`'
        elif value is None:
            fallback = getattr(Settings(), name, None)
            said = "" if fallback is None else f"`TRITON_DIST_AUTOTUNE_{name.upper()}` or {fallback:g}"
        else:
            said = str(value)
        if not re.search(rf"`{name}` \((?:[^()]|\([^()]*\))*?default {re.escape(said)}", page):
            missing.append((name, said))
    assert not missing, missing


def test_every_test_the_docs_cite_exists():
    """The docs prove their claims by naming tests (``test_file.py::test_name`` or the bare name); a test renamed or
    merged leaves a citation that proves nothing (docs/scale.md named two tests that had been merged into one). Every
    name ``test_...`` in the README, docs/ and benchmarks/RESULTS.md is a test function of tests/, and every
    ``test_file.py::test_name`` names one of that file."""
    defined: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("*.py"):
        defined[path.name] = set(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M))
    every = set().union(*defined.values())
    files = {name for name in defined if name.startswith("test_")}
    pages = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "RESULTS.md"]
    missing = []
    for page in pages:
        text = re.sub(r"::\s*\n\s*", "::", page.read_text())  # a citation wrapped after its ``::``
        for found in re.finditer(r"\b(test_\w+\.py)::(test_\w+)", text):
            if found.group(2) not in defined.get(found.group(1), set()):
                missing.append((page.name, f"{found.group(1)}::{found.group(2)}"))
        for found in re.finditer(r"\b(test_\w+)\b", text):
            name = found.group(1)
            if f"{name}.py" not in files and name not in every:
                missing.append((page.name, name))
    assert not missing, missing


def test_docs_and_examples_show_the_collectives_torch_does_not_deprecate():
    """Issue 35 item 5: torch 2.13 warns that ``all_gather_into_tensor`` and ``reduce_scatter_tensor`` are deprecated
    in favour of ``all_gather_single`` and ``reduce_scatter_single``; the README, docs/, the package's docstrings and
    the examples show the new names (examples/_dist_common.py falls back to the old ones on a torch without them)."""
    import torch.distributed as dist

    assert hasattr(dist, "all_gather_single") and hasattr(dist, "reduce_scatter_single")
    pages = [README, *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*.py"),
             *(ROOT / "triton_dist_tune").rglob("*.py")]
    for page in pages:
        for line in page.read_text().splitlines():
            if "all_gather_into_tensor" in line or "reduce_scatter_tensor" in line:
                assert "deprecate" in line or "or dist." in line or "``all_gather_into_tensor`` for it" in line, \
                    (page.relative_to(ROOT), line)
            # the new names exist from torch 2.13 on only: a call shown for copying says what an older torch, which
            # the package supports too, calls instead (there the new name is an AttributeError)
            if "dist.all_gather_single(" in line or "dist.reduce_scatter_single(" in line:
                assert "torch 2.13+" in line and "or dist." in line, (page.relative_to(ROOT), line)


def test_near_tie_is_explained_where_the_tuner_prints_it():
    from triton_dist_tune.disk.logs import margin_text
    from triton_dist_tune.records import Decision

    decision = Decision(1, "{v: 1}", 1.0, 0.021, True, 0, [], "steady", 2)
    assert margin_text(decision) == " (2.1% less time than config 0, a near tie: within the measured noise)"


def test_a_decided_key_called_with_a_tuned_parameter_by_position_names_it(tmp_path, monkeypatch):
    # before: the decided (hot) path called the function with both, and Python's TypeError "got multiple values
    # for argument 'block'" came out of the user's function
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_LOG_DIR", str(tmp_path / "logs"))
    import triton_dist_tune as tdt
    from triton_dist_tune.errors import BadInputError

    @tdt.autotune([{"block": b} for b in (1, 2)], key_fn=lambda x, *rest: x, name="by_position")
    def f(x, block=1):
        return x * block

    assert f(3) in (3, 6)  # tuned, then decided
    with pytest.raises(BadInputError, match=r"\['block'\] were passed by position"):
        f(3, 2)
    assert f(3) in (3, 6)  # the decided key still serves


CAMPAIGN_SAMPLE = """
import pathlib, re, sys
text = pathlib.Path(sys.argv[1]).read_text()
block = re.search(r"## 1\\. Describe the calls\\n\\n```python\\n(.*?)```", text, re.S).group(1)
block = re.sub(r"BATCHES = \\[.*\\]", "BATCHES = [1, 16]", block.replace('"cuda"', '"cpu"').replace("4096", "64"))
sys.path.insert(0, sys.argv[2])
exec(compile(block, "campaign.md", "exec"))
summary = tdt.campaign(gemm_fn, build, BATCHES, local=True)
print("SAMPLE", len(summary.failed))
"""


def test_the_campaign_pages_sample_runs_without_a_warning_per_key(tmp_path):
    """docs/campaign.md's first sample, on CPU (its device and sizes made small): it tunes both keys, and no key
    warns that the function changed ``out`` in place (before: one warning per key, as the sample did not declare
    the output it writes)."""
    script = tmp_path / "sample.py"
    script.write_text(CAMPAIGN_SAMPLE)
    done = run_process(script, [str(ROOT / "docs" / "campaign.md"), str(ROOT)], env=tuner_env(tmp_path), timeout=300)
    assert done.returncode == 0 and "SAMPLE 0" in done.stdout, done.stderr[-2000:]
    assert "changed its argument" not in done.stderr, done.stderr[-2000:]


def test_every_tuner_error_the_docs_name_is_importable_from_the_package():
    """The docs tell users to catch ``RankFailedError``, ``CrossedTurnsError``, ``ExchangeError`` ...; before,
    ``except tdt.RankFailedError`` was an AttributeError (they lived in ``triton_dist_tune.errors`` and
    ``.group.channel`` only). Every :class:`AutotuneError` class a doc or the README names is in ``tdt``."""
    import importlib
    import pkgutil

    import triton_dist_tune as tdt

    for module in pkgutil.walk_packages(tdt.__path__, "triton_dist_tune."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    classes, stack = {}, [tdt.AutotuneError]
    while stack:
        for sub in stack.pop().__subclasses__():
            classes[sub.__name__] = sub
            stack.append(sub)
    texts = [p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
    named = {name for name in classes if any(f"`{name}`" in text for text in texts)}
    assert {"RankFailedError", "CrossedTurnsError", "ExchangeError", "GroupTimeoutError"} <= named, named
    assert {name for name in named if getattr(tdt, name, None) is not classes[name]} == set()
    assert named <= set(tdt.__all__)
