"""Users' mistakes and long-lived jobs, on real gloo ranks: caller's errors, replayed failures, group identity,
in-place arguments, agreed preparation, canonical keys, cache invalidation, and the smaller points of issue 11."""

from __future__ import annotations

import json

import pytest
from harness import HERE, base_env, describe, parse_results, run_cases, run_process, run_python, run_ranks, tuner_env

CASES = HERE / "scenarios" / "hardening_cases.py"


@pytest.fixture
def env(tmp_path):
    return tuner_env(tmp_path, 30)


def run(case, env, n=2, ok=True, **kw):
    results = run_ranks(CASES, n, [case], env=env, timeout=kw.pop("timeout", 100), **kw)
    if ok:
        assert all(r.returncode == 0 for r in results), describe(results)
    return results


#: scenarios of 2 ranks whose tests read only their RESULT lines (not the job's stderr), run one after another in
#: one job: each tunes functions of its own names, and the groups it creates it also uses alone
SHARED_CASES = ["callers_errors", "group_recreated", "not_a_member", "threads_share_a_group"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """case -> each rank's results; the job runs once per module (once per pytest-xdist worker that runs these)."""
    return run_cases(CASES, 2, SHARED_CASES, env=tuner_env(tmp_path_factory.mktemp("hardening"), 30), timeout=100)


@pytest.mark.timeout(120)
def test_callers_errors_are_bad_input_on_every_rank(shared):
    for r in shared["callers_errors"]:
        seen = r.result["seen"]
        assert seen["positional"]["error"] == "BadInputError", seen
        assert "['block'] were passed by position" in seen["positional"]["message"]
        assert seen["typo"]["error"] == "BadInputError" and "scale() got unknown tuner keyword(s) " \
            "['autotune_verbos']" in seen["typo"]["message"]
        assert seen["unknown_key"]["error"] == "BadInputError" and "['blk']" in seen["unknown_key"]["message"]
        assert seen["string_names"]["error"] == "BadInputError" and "not the string 'x'" in \
            seen["string_names"]["message"]
        assert seen["fine"]["ok"] in (64.0, 128.0, 256.0)  # 4 * block: the group still works
        assert r.result["calls"] == 3 + 1  # only the last call ran the function: 3 configs and the call itself


@pytest.mark.timeout(120)
def test_a_call_flag_that_is_not_a_bool_on_one_rank_is_bad_input_on_every_rank(env):
    """``autotune=1``, ``autotune_allow_arg_overwrite="no"``, ``autotune_verbose="loud"`` on rank 1 only (an
    undecided key): the same BadInputError on both ranks, at the agreement, as docs/api.md promises for the caller's
    mistakes. Before, ``autotune=1`` raised at once on rank 1 while rank 0 waited at the agreement for the timeout
    (30 s) and raised GroupTimeoutError; the other two were taken by their truth ("no" let the caller's value win)."""
    results = run("autotune_flag_on_one_rank", env)
    for flag, value in (("autotune", 1), ("autotune_allow_arg_overwrite", "no"), ("autotune_verbose", "loud")):
        for r in results:
            assert r.result["seen"][flag].get("error") == "BadInputError", describe(results)
        messages = {r.result["seen"][flag]["message"] for r in results}
        assert messages == {f"flag_one_rank: rank 1: {flag}= must be True or False, not {value!r}"}, messages
    for r in results:
        assert r.result["seconds"] < 15 and r.result["calls"] == 0, r.result


@pytest.mark.timeout(180)
def test_a_tuning_where_every_config_failed_is_not_replayed(env):
    first = run("all_fail_then_fixed", env)
    for r in first:
        assert r.result["result"]["error"] == "AllConfigsFailedError", describe(first)
        assert r.result["journals"] == []  # the tuning ended: nothing left to replay
    again = run("all_fail_then_fixed", {**env, "FIXED": "1"})
    for r in again:
        assert r.result["result"] == {"ok": 16}, describe(again)


@pytest.mark.timeout(180)
def test_ref_prog_failing_on_one_rank_blames_no_config(env):
    first = run("ref_prog_fails_on_one_rank", {**env, "REF_FAILS": "1"})
    for r in first:
        result = r.result
        assert result["result"]["error"] == "BadInputError", describe(first)
        assert "rank 1: ref_prog raised ValueError: reference needs more memory" in result["result"]["message"]
        assert result["calls"] == {} and result["seconds"] < 20  # at once: nobody waited for a watchdog
        assert not any("hung" in j or "failed" in j for j in result["journals"]), result["journals"]
    again = run("ref_prog_fails_on_one_rank", env)
    for r in again:
        assert r.result["result"] == {"ok": [2.0] * 4}, describe(again)
        assert r.result["states"] == ["measured"] * 3  # config 0 was not left out


@pytest.mark.timeout(120)
def test_an_argument_changed_in_place_by_a_collective_is_restored(env):
    results = run("in_place_collective", env)
    for r in results:
        assert r.result == {"total": 9.0, "x": [3.0] * 3}, describe(results)  # one all_reduce of 1s and 2s
        assert "changed its argument 'x' in place" in r.stderr and "restore_value=['x']" in r.stderr


@pytest.mark.timeout(120)
def test_keys_are_canonical_and_tensors_are_refused(env):
    seeds = {0: {"PYTHONHASHSEED": "1"}, 1: {"PYTHONHASHSEED": "2"}}
    results = run("keys_in_canonical_form", env, per_rank_env=seeds)
    assert results[0].result["order"] != results[1].result["order"]  # the two ranks iterate the set differently
    for r in results:
        assert r.result["seen"]["set"] == {"ok": 16}, describe(results)
        tensor = r.result["seen"]["tensor"]
        assert tensor["error"] == "BadInputError" and "to_hashable(t)" in tensor["message"]
    assert len(results[0].result["files"]) == 1


@pytest.mark.timeout(150)
def test_a_group_created_again_is_tuned_on_its_own_channel(shared):
    for r in shared["group_recreated"]:
        assert r.result["outs"] == [[32.0, 32.0]] * 3
        assert r.result["tunings"] == [1, 1, 1]
        assert len({tuple(i) for i in r.result["identities"]}) == 3


@pytest.mark.timeout(120)
def test_a_rank_outside_the_group_gets_a_clear_message(shared):
    results = shared["not_a_member"]
    assert results[0].result["result"] == {"ok": 16}
    assert results[1].result["result"]["error"] == "BadInputError"
    assert "not a member" in results[1].result["result"]["message"]


@pytest.mark.timeout(120)
def test_a_waiting_rank_says_whom_it_waits_for(env):
    results = run("waiting_rank_reports", {**env, "TRITON_DIST_AUTOTUNE_PROGRESS_S": "1", "LATE_S": "4"})
    assert all(r.result["result"] == {"ok": 16} for r in results), describe(results)
    assert "has waited" in results[0].stderr and "for group ranks [1] (global [1])" in results[0].stderr


@pytest.mark.timeout(120)
def test_two_threads_share_one_tuning(shared):
    for r in shared["threads_share_a_group"]:
        assert r.result["results"] == [{"ok": 16}, {"ok": 16}]
        assert r.result["runs"] == 3 * 2 + 2  # one tuning (2 runs per config), then each thread's call


@pytest.mark.timeout(120)
def test_caller_value_wins_with_allow_arg_overwrite(env):
    for r in run("overwrite_and_fn", env):
        res = r.result
        assert res["tuned"] == 16 and res["caller_wins"] == 99 and res["fn"] == 7
        assert res["clash"]["error"] == "BadInputError" and "autotune_allow_arg_overwrite" in res["clash"]["message"]
        for clash in [*res["clash_decided"], res["clash_decided_slow"]]:  # a decided key: the same error
            assert clash["error"] == "BadInputError", clash
            assert "config keys ['block'] clash" in clash["message"], clash
            assert "autotune_allow_arg_overwrite" in clash["message"], clash
        assert res["to_hashable"] == [[2, 3], [3, 1], "torch.float32"]
        assert "the caller's block=99 overrides" in r.stderr


def _single(env, tmp_path, **extra):
    proc = run_process(CASES, ["kernel_cache"], {**env, **extra}, timeout=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return parse_results(proc.stdout)[-1]


KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n){extra}, mask=offs < n)
'''


@pytest.mark.timeout(300)
def test_the_cache_sees_kernel_edits_and_user_state(env, tmp_path):
    kernel = tmp_path / "user_kernels.py"
    kernel.write_text(KERNEL.format(extra=""))
    env = {**env, "KERNEL_FILE": str(kernel)}
    first = _single(env, tmp_path)
    assert first["ok"] and first["runs"] == 3 + 1  # tuned
    assert _single(env, tmp_path)["runs"] == 1  # a cache hit: the call alone
    kernel.write_text(KERNEL.format(extra=" * 1"))  # an edit of the kernel: the decision is stale
    assert _single(env, tmp_path)["runs"] == 3 + 1
    assert _single(env, tmp_path, EXTRA="v2")["runs"] == 3 + 1  # cache_key_extra changed
    last = _single(env, tmp_path, EXTRA="v2")
    assert last["runs"] == 1 and len(last["files"]) == 3
    assert set(last["modes"]) == {"0o644"}  # readable by others, as the umask (022 here) allows


@pytest.mark.timeout(60)
def test_world_size_without_a_process_group_warns(env, tmp_path):
    proc = run_python(["-c", "import triton_dist_tune as t; f = t.autotune([{'b': 1}], "
                             "key_fn=lambda: 0, n_repeat=1)(lambda *, b: b); print(f())"],
                      base_env({**env, "WORLD_SIZE": "2"}), timeout=50)
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr
    assert "WORLD_SIZE is 2 but torch.distributed is not initialized" in proc.stderr


def test_settings_are_read_in_one_place(monkeypatch, tmp_path):
    from triton_dist_tune import BadInputError, settings

    values = settings.Settings.from_env({"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path), "TORCHELASTIC_RUN_ID": "j1",
                                         "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "yes", "WORLD_SIZE": "4"})
    assert (values.cache_dir, values.job_id, values.always_tune, values.world_size) == (tmp_path, "j1", True, 4)
    with pytest.raises(BadInputError, match="PROGRESS_S"):
        settings.Settings.from_env({"TRITON_DIST_AUTOTUNE_PROGRESS_S": "0"})
    assert json.dumps(str(settings.Settings().cache_dir)).endswith('autotune"')


def test_triton_interpret_is_read_as_triton_reads_it(monkeypatch):
    """Whether Triton's interpreter runs the kernels is Triton's reading of ``TRITON_INTERPRET`` (its ``getenv_bool``:
    1, true, on, yes or y, in any case, nothing around them). Before, the settings read it as a switch of the
    tuner's own (on for any text but empty, 0, false, no and off): ``TRITON_INTERPRET=2`` left Triton compiling for a
    GPU while the tuner timed on the host clock, on one compile thread, precompiling nothing; and the hint on
    "0 active drivers" took only 1, true and on (``yes`` got the hint for a machine without the variable)."""
    from triton_dist_tune import errors, settings

    for text, on in (("1", True), ("TRUE", True), ("On", True), ("yes", True), ("Y", True), ("2", False),
                     (" 1", False), ("enabled", False), ("0", False), ("off", False), ("", False)):
        assert settings.Settings.from_env({"TRITON_INTERPRET": text}).interpret is on, text
        monkeypatch.setenv("TRITON_INTERPRET", text)
        assert errors._interpreting() is on, text
        try:
            from triton._C.libtriton import getenv_bool  # Triton's own reader, where this Triton has it
        except ImportError:
            continue
        assert getenv_bool("TRITON_INTERPRET", False) is on, text


def test_triton_print_autotuning_is_read_as_triton_reads_it(monkeypatch):
    """``TRITON_PRINT_AUTOTUNING`` is Triton's switch too (``triton.knobs.autotuning.print``, which stock autotuned
    kernels read): the tuner prints its summaries where Triton prints its own. Before, the settings read it as a
    switch of the tuner's own (any text but empty, 0, false, no and off): ``TRITON_PRINT_AUTOTUNING=2`` printed the
    tuner's tables while Triton printed nothing, and ``=1`` with spaces around it alike."""
    import triton

    from triton_dist_tune import settings

    for text, on in (("1", True), ("TRUE", True), ("On", True), ("yes", True), ("Y", True), ("2", False),
                     (" 1", False), ("enabled", False), ("0", False), ("off", False), ("", False)):
        assert settings.Settings.from_env({"TRITON_PRINT_AUTOTUNING": text}).print_autotuning is on, text
        knobs = getattr(triton, "knobs", None)  # Triton 3.4 and newer: Triton's own reading of the variable
        if knobs is not None and hasattr(knobs, "autotuning"):
            monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", text)
            assert bool(knobs.autotuning.print) is on, text


def test_the_default_cache_folder_follows_home_as_it_is_now(monkeypatch, tmp_path):
    """The default cache folder is under ``HOME`` as the environment names it at the call, not at the package's
    import (before, a process that set ``HOME`` after importing it, or a rank forked from one that imported it
    under another ``HOME``, kept the old folder)."""
    from triton_dist_tune import settings
    from triton_dist_tune.disk.cache import cache_root

    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = tmp_path / ".triton_dist" / "autotune"
    assert (settings.current().cache_dir, settings.Settings().cache_dir, cache_root()) == (expected,) * 3


def test_the_settings_and_the_launcher_read_a_padded_world_size_alike():
    """``WORLD_SIZE`` is read by the settings (``Settings.world_size``, which says whether this process is one rank
    of several) and by the launcher's view (``Launcher.world_size``, which ``init_distributed`` starts the group
    with). Before, two readers did it: the settings' stripped the text, the launcher's did not, so ``" 2"`` was 2
    ranks for one and no launcher for the other (torch itself reads it with ``int()``, which strips)."""
    from triton_dist_tune import settings

    for text, expected in ((" 2", 2), ("2\n", 2), ("2", 2), ("two", None), ("", None)):
        env = {"WORLD_SIZE": text, "RANK": " 1 "}
        assert settings.Settings.from_env(env).world_size == expected, text
        assert settings.Launcher.from_env(env).world_size == expected, text
        assert settings.Launcher.from_env(env).rank == 1


def test_the_tuners_variables_that_take_any_text_are_the_ones_the_docs_name():
    """docs/operations.md said that every malformed number of the tuner's variables is a ``BadInputError``, but the
    compile counts (``COMPILE_THREADS=many``) fall back to their default, and the switches and folders take any text.
    Every variable of its table is tried with text that is no number, no mode and no path: those that do not raise are
    exactly those the paragraph above the table names as never failing."""
    import re

    from triton_dist_tune import BadInputError, settings

    text = (HERE.parent / "docs" / "operations.md").read_text()
    section = text.split("## Environment variables", 1)[1]
    paragraph, table = section.split("| variable |", 1)
    names = set(re.findall(r"^\| `(TRITON_DIST_AUTOTUNE_\w+)` \|", table.split("\n\n", 1)[0], re.M))
    said = set(re.findall(r"`(TRITON_DIST_AUTOTUNE_\w+)`", paragraph))
    accepted = set()
    for name in names:
        try:
            settings.Settings.from_env({name: "-many"})
        except BadInputError as exc:
            assert name in str(exc), exc
        else:
            accepted.add(name)
    assert len(names) >= 16 and accepted == said, (sorted(accepted - said), sorted(said - accepted))
