"""A process with no home folder (``HOME`` unset, and its real user id not in the password database: a container run
as an arbitrary user) and ``TRITON_DIST_AUTOTUNE_CACHE_DIR`` unset: ``Path.home()`` raises there, so the default cache
folder names nothing. Real ranks (gloo) and real processes; the user id is really changed, so these need root."""

from __future__ import annotations

import os

import pytest
from harness import HERE, base_env, describe, run_python, run_ranks, tuner_env

CASES = HERE / "scenarios" / "no_home_cases.py"
#: the exchanges' deadline (s), and the most seconds a rank may take to be told (the deadline is 4x that)
T, PROMPT_S = 60, 15

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing the real user id needs root")


@needs_root
@pytest.mark.timeout(200)
@pytest.mark.parametrize(("case", "homeless"), [("tune_without_home", "1"), ("tune_without_home", "0,1"),
                                                ("contextual_without_home", "1")])
def test_ranks_without_a_home_folder_are_told_at_once_on_every_rank(tmp_path, case, homeless):
    """The ranks in ``homeless`` have no home folder. Every rank raises the same ``BadInputError`` at the first
    exchange, at once, naming the variable to set: in an ``autotune`` tuning, and in a ``contextual_autotune`` layer
    (at its call's journal exchange). Before, a rank without one raised ``RuntimeError: Could not determine home
    directory.`` alone (from reading its settings) while the others waited for it at the first exchange to their
    deadline (``GroupTimeoutError`` after T); and where the function was decorated in such a process, the
    decoration itself raised it."""
    env = {**tuner_env(tmp_path, T), "TRITON_DIST_AUTOTUNE_CACHE_DIR": "", "HOME": str(tmp_path / "home"),
           "NO_HOME": homeless}
    results = run_ranks(CASES, 2, [case], env=env, timeout=180)
    said = {r["rank"]: r for result in results for r in result.results}
    assert sorted(said) == [0, 1], describe(results)
    for rank in (0, 1):
        assert said[rank]["error"] == "BadInputError", describe(results)
        assert "TRITON_DIST_AUTOTUNE_CACHE_DIR is unset" in said[rank]["message"], describe(results)
        assert said[rank]["seconds"] < PROMPT_S, describe(results)
    if case == "tune_without_home":
        assert not (tmp_path / "home").exists(), "nothing is tuned, nor written into rank 0's home folder"


@needs_root
@pytest.mark.timeout(120)
def test_the_command_line_without_a_home_folder_is_one_line_naming_what_to_set(tmp_path):
    """``triton-dist-tune list`` in a process with no home folder and no ``--cache-dir``: one line, exit status 2,
    naming ``TRITON_DIST_AUTOTUNE_CACHE_DIR`` and ``--cache-dir``. Before: a ``RuntimeError`` traceback."""
    env = base_env({"TRITON_DIST_AUTOTUNE_CACHE_DIR": ""})
    code = ("import os, sys; sys.path.insert(0, os.path.join(os.environ['TDT_TESTS'], 'scenarios')); "
            "from no_home_cases import lose_home; lose_home(); "
            "from triton_dist_tune.cli.commands import main; raise SystemExit(main(['list']))")
    done = run_python(["-c", code], {**env, "TDT_TESTS": str(HERE)}, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "TRITON_DIST_AUTOTUNE_CACHE_DIR is unset" in lines[0] and "--cache-dir" in lines[0], \
        done.stderr[-3000:]


def test_a_malformed_tuner_variable_does_not_stop_the_command_line_from_finding_its_folder(tmp_path):
    """The command line's folder is ``--cache-dir`` or ``TRITON_DIST_AUTOTUNE_CACHE_DIR``; another tuner variable
    that is malformed (``TRITON_DIST_AUTOTUNE_TIMEOUT=abc``: the tuner's, read at a tuning) does not stop ``list``.
    Before, without ``--cache-dir``, ``list`` read every variable of the tuner and ended ``bad value:
    TRITON_DIST_AUTOTUNE_TIMEOUT must be a positive number of seconds, not 'abc'``, exit 2."""
    (tmp_path / "cache").mkdir()
    env = base_env({"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"), "TRITON_DIST_AUTOTUNE_TIMEOUT": "abc"})
    done = run_python(["-m", "triton_dist_tune", "list"], env, cwd=tmp_path)
    assert "TIMEOUT" not in done.stderr and done.returncode == 0, done.stderr[-3000:]
    assert "no decisions in" in done.stdout, done.stdout


def test_a_functions_cache_folder_is_the_one_the_environment_names_at_the_tuning(tmp_path, monkeypatch):
    """A tuned function's cache folder is read when it is used, not when the function is decorated (docs: every
    variable is read afresh at each tuning). Before, ``DiskCache`` fixed it at decoration: a process that set
    ``TRITON_DIST_AUTOTUNE_CACHE_DIR`` after importing its tuned functions wrote into the folder of before."""
    from triton_dist_tune.disk.cache import DiskCache

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "a"))
    cache = DiskCache("fn")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "b"))
    assert cache.folder == tmp_path / "b" / "fn"
    assert DiskCache("fn", tmp_path / "given").folder == tmp_path / "given" / "fn"
