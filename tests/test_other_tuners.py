"""Code ported from TileLang's ``autotune`` and Helion's autotuner by a kernel author used to them: their option names
are refused saying what to write here (decorator checks, in this process), and the usages they tune (a check
against a reference, a time budget, a config pinned for production) run as documented on real gloo ranks in
Triton's interpreter (tests/scenarios/other_tuners_cases.py)."""

from __future__ import annotations

import json
import os

import pytest
from harness import HERE, base_env, describe, run_cli, run_ranks, tuner_env

os.environ.setdefault("TRITON_INTERPRET", "1")

CASES = HERE / "scenarios" / "other_tuners_cases.py"

#: option -> what the refusal must say (a piece of its text)
EXPECTED = {
    "skip_check": "(TileLang's; here: leave out ref_prog",
    "max_mismatched_ratio": "(TileLang's; here: none: ref_prog's check is torch.testing.assert_close",
    "manual_check_prog": "(TileLang's; here: none: ref_prog=... with rtol/atol",
    "supply_type": "(TileLang's; here: none: the configs run on the call's own arguments",
    "cache_input_tensors": "(TileLang's; here: none:",
    "target": "(TileLang's; here: none:",
    "autotune_effort": "(Helion's; here: 'none': call with autotune=False",
    "config": "(Helion's; here: a config pinned for production: a config_space of that one entry",
    "autotune_baseline_fn": "(Helion's; here: ref_prog, called with the call's own arguments; not on by default",
    "autotune_baseline_atol": "(Helion's; here: atol (with rtol",
    "autotune_baseline_rtol": "(Helion's; here: rtol (with atol",
    "autotune_accuracy_check": "(Helion's; here: none: configs are checked only against a ref_prog you give",
    "autotune_precompile": "(Helion's; here: precompile_fn, a function that compiles one config",
    "autotune_compile_timeout": "(Helion's; here: timeout= (seconds)",
    "autotune_random_seed": "(Helion's; here: none:",
    "autotune_max_generations": "(Helion's; here: none: search=",
    "autotuner": "(Helion's; here: search=",
    "autotune_log_level": "(Helion's; here: each call's autotune_verbose=True",
    "static_shapes": "(Helion's; here: none: key_fn's return value is the key",
}


@pytest.mark.parametrize("option", sorted(EXPECTED))
def test_tilelang_and_helion_option_names_say_what_to_write_instead(option):
    """``autotune(..., skip_check=True)``, ``autotune(..., autotune_effort='quick')``, ``config=...``,
    ``autotune_baseline_fn=...``: before, "unknown option(s) 'autotune_effort'" and the list of options alone, and
    Helion's ``autotune_precompile='spawn'`` was asked "did you mean 'precompile_fn'?", a function of another
    meaning. Each now says whose name it is and what this package does in its place (or that nothing does)."""
    import triton_dist_tune as tdt

    def scaled(x, *, BLOCK):
        return x

    with pytest.raises(tdt.BadInputError) as caught:
        tdt.autotune([{"BLOCK": 64}, {"BLOCK": 128}], key_fn=lambda x: x.numel(), **{option: None})(scaled)
    text = str(caught.value)
    assert f"unknown option(s) {option!r} {EXPECTED[option]}" in text, text
    assert "did you mean" not in text, text


@pytest.mark.parametrize(("option", "expected"), [
    ("autotune_effort", "(Helion's; here: none in contextual_autotune (autotune's budget= bounds"),
    ("budget", "(autotune's; here: none in contextual_autotune (autotune's budget= bounds"),
    ("autotune_baseline_fn", "(Helion's; here: none in contextual_autotune: it checks no config's result"),
    ("ref_prog", "(autotune's; here: none in contextual_autotune: it checks no config's result"),
    ("rtol", "(autotune's; here: none in contextual_autotune: it checks no config's result"),
    ("skip_check", "(TileLang's; here: none in contextual_autotune: it checks no config's result"),
    ("config", "(Helion's; here: a kernel pinned for production: its @triton.autotune(configs=[that one config]"),
])
def test_contextual_autotune_says_it_has_no_reference_check_nor_budget(option, expected):
    """``contextual_autotune(autotune_effort='quick')``, ``(budget=...)``, ``(ref_prog=...)``: a Helion user looks for
    an effort bound and an accuracy check; before, "unknown option(s)" and the list alone, which left open whether
    the kernels' configs were checked at all. Each now says that there is none, and what comes nearest."""
    import triton_dist_tune as tdt

    with pytest.raises(tdt.BadInputError) as caught:
        tdt.contextual_autotune(**{option: None})
    text = str(caught.value)
    assert f"unknown option(s) {option!r} {expected}" in text, text


def test_a_misspelt_option_still_gets_the_nearest_name():
    """The other tuners' names take nothing from the nearest-name hint of a plain misspelling."""
    import triton_dist_tune as tdt

    with pytest.raises(tdt.BadInputError, match=r"'ref_prg' \(did you mean 'ref_prog'\?\)"):
        tdt.autotune([{"BLOCK": 64}], key_fn=lambda x: 0, ref_prg=None)


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_kernel_checked_against_a_reference_leaves_out_the_configs_wrong_on_any_rank(tmp_path, ranks):
    """TileLang's ``ref_prog`` / Helion's baseline: an axpy kernel with a fast path (``CLAMP``) wrong for negative
    values, which only the last rank's shard holds, tuned with ``ref_prog`` and an all-reduce after it: the wrong
    configs are left out on every rank (each run once, in its checked first run), and every rank chooses the same
    right config."""
    results = run_ranks(CASES, ranks, ["accuracy"], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    decided = {str(r.result["decided"]) for r in results}
    assert len(decided) == 1, describe(results)
    for r in results:
        res = r.result
        assert res["decided"]["CLAMP"] is False and res["right"], res
        assert res["failed"] == ["{BLOCK: 128, CLAMP: True}", "{BLOCK: 256, CLAMP: True}",
                                 "{BLOCK: 64, CLAMP: True}"], res
        assert res["clamp_runs"] == 3, res  # each wrong config ran once: its checked run


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_every_config_wrong_against_the_reference_raises_alike_on_every_rank(tmp_path):
    """Every config differs from ``ref_prog``'s result (Helion: "all configs failed"): the same error on every
    rank, naming the ranks' differences."""
    results = run_ranks(CASES, 2, ["accuracy_all_wrong"], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert results[0].result == results[1].result, describe(results)
    res = results[0].result
    assert res["raised"] == "AllConfigsFailedError" and "wrong result" in res["text"], res


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_a_time_budget_bounds_the_tuning_of_a_key_on_every_rank(tmp_path):
    """Helion's ``autotune_effort='quick'``, as ``budget=1.5`` seconds over 9 configs of 50 ms calls with
    ``n_repeat=50``: the tuning is cut and both ranks choose alike, within 4x the budget. Without the budget the
    key's race takes 11 rounds and about 6 s here (its warm-ups' sleeps alone about 1.2 s, its first round's 0.45 s,
    whatever the load): at ``budget=2`` over 20 ms calls (about 2.8 s unbounded)
    a loaded CI run once ended its race unbounded at 2.25 s, not cut."""
    results = run_ranks(CASES, 2, ["budget"], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert results[0].result["decided"] == results[1].result["decided"], describe(results)
    for r in results:
        assert r.result["cut"] == "True" and r.result["seconds"] < 6, r.result


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_config_pinned_for_production_runs_as_the_hint_says(tmp_path, ranks):
    """Helion's ``config=`` as the refusal says: a space of one entry is decided at its key's first call with no
    timing (one checked run, then the call's own run: two runs); ``autotune=False`` runs the first config once,
    decides nothing."""
    results = run_ranks(CASES, ranks, ["pinned"], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        res = r.result
        assert res["runs_one"] == 2 and res["decided_one"] == {"300": {"BLOCK": 128, "CLAMP": False}}, res
        assert res["runs_off"] == 1 and res["off_config"] == {"BLOCK": 64, "CLAMP": False}, res
        assert res["decided_off"] == {}, res


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_a_key_of_one_config_after_pruning_is_decided_without_timing_on_every_rank(tmp_path):
    """``triton.autotune`` launches a lone config without benchmarking. Before, a space of one config (or one
    ``prune_fn`` pruned to one) was warmed up, probed and raced: 7 runs of the function on each of 2 ranks. Now the
    config runs once in lock-step, untimed, and the call runs it: 2 runs; the cache records no time or margin
    (``untimed``), and neither ``show`` nor the summary prints one. Pruning is agreed (each rank keeps two configs,
    one in common), and a lone config that raises or differs from ``ref_prog`` still fails on every rank after its
    one run, nothing cached."""
    env = tuner_env(tmp_path, 30)
    results = run_ranks(CASES, 2, ["one_config"], env=env, timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    chosen = {"BLOCK": 128, "CLAMP": False}
    for r in results:
        res = r.result
        assert res["runs_one"] == 2 and res["right"] and res["decided_one"] == {"300": chosen}, res
        assert res["untimed"] and [(o["state"], o["time"], o["untimed"]) for o in res["outcomes"]] == [
            ("measured", None, True)], res
        assert res["runs_pruned"] == [chosen, chosen] and res["decided_pruned"] == {"300": chosen}, res
        assert "rank 0: ZeroDivisionError" in res["raises"] and "rank 1: ZeroDivisionError" in res["raises"], res
        assert "rank 0: wrong result" in res["wrong"] and "rank 1: wrong result" in res["wrong"], res
        for label in ("raises", "wrong"):
            assert res[f"{label}_runs"] == 1 and res[f"{label}_decided"] == {}, res
    summary = results[0].stderr
    assert "(not timed: one config, run once)" in summary, summary
    assert "the only config of the key's space after pruning: run once, not timed" in summary, summary
    cache = tmp_path / "cache"
    assert not list((cache / "raises").glob("*.json")) and not list((cache / "wrong").glob("*.json"))
    [path] = list((cache / "one").glob("*.json"))
    record = json.loads(path.read_text())
    assert record["untimed"] is True and record["time_ms"] is None and record["margin"] is None, record
    shown = run_cli(["show", str(path), "--cache-dir", str(cache)], base_env(env))
    assert shown.returncode == 0, shown.stderr
    assert "time: not timed: the only config of the key's space after pruning, run once" in shown.stdout, shown.stdout
    assert " ms" not in shown.stdout.split("time:", 1)[1].splitlines()[0], shown.stdout


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_config_checked_before_any_writer_of_an_undeclared_output_fails_once_one_writes_it(tmp_path, ranks):
    """The config that launches no program (``BLOCK=512``, ``n = 256``) checked first, before any config wrote the
    undeclared output ``y``. Before, it passed its check (``y`` was compared only for configs checked after a
    writer), and launching nothing it was the fastest: chosen. Now, once config 1's run writes ``y``, the earlier
    config's ``y`` (the caller's values, kept already) is compared with ``ref_prog``'s: it fails on every rank with
    the same error, though on 2 ranks only rank 1 could see it (rank 0's ``ref_prog`` leaves ``y`` as it was)."""
    results = run_ranks(CASES, ranks, ["unwritten_first"], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    errors = []
    for r in results:
        failed = r.result["failed"]
        assert list(failed) == ["{BLOCK: 512}"], r.result
        assert r.result["chosen"] != "{BLOCK: 512}" and r.result["right"], r.result
        errors.append(failed["{BLOCK: 512}"])
    assert len(set(errors)) == 1, errors
    assert f"rank {ranks - 1}: wrong result: the result['y']: 256 of 256 elements differ" in errors[0], errors
    assert "found when config 1, checked later, wrote it" in errors[0], errors



@pytest.mark.timeout(200)
def test_a_sharded_tuning_fails_a_config_that_left_an_output_another_ranks_config_wrote(tmp_path):
    """``sharded=True`` on 2 ranks: the config that launches no program is checked on rank 0, the one that writes the
    undeclared output ``y`` on rank 1. Before, rank 0 saw no writer, its config passed, and launching nothing it was
    chosen on both ranks with ``y`` left unwritten (the closing review's reproduction). Now the ranks' reports,
    exchanged with the sharded results, fail it on every rank with the same error."""
    results = run_ranks(CASES, 2, ["unwritten_sharded"], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    errors = []
    for r in results:
        assert list(r.result["failed"]) == ["{BLOCK: 512}"], r.result
        assert r.result["chosen"] == "{BLOCK: 64}" and r.result["right"], r.result
        errors.append(r.result["failed"]["{BLOCK: 512}"])
    assert len(set(errors)) == 1, errors
    assert errors[0].startswith("rank 0: wrong result") and "measured on another rank wrote it" in errors[0], errors

@pytest.mark.triton_dependent
@pytest.mark.timeout(240)
def test_replicas_decide_a_key_of_one_config_without_timing_and_fail_it_on_every_replica(tmp_path):
    """:func:`test_a_key_of_one_config_after_pruning_is_decided_without_timing_on_every_rank` under
    ``autotune_replicas=`` (2 replicas of 2 gloo ranks). Before, the replicas warmed up, probed and raced a lone
    config: replica 0 in its share, then every replica as the leaders' race (29 runs of the function on each rank of
    replica 0, 23 on replica 1's). Now every replica runs it once, untimed, the replicas agree on its outcome, and
    the call runs it: 2 runs on every rank; the record keeps its replica count. A lone config that raises on one
    rank of replica 1 alone fails on every rank of every replica after its one run (before: 28 runs on replica 0's
    ranks, its share's race, then 1 in the leaders' race), nothing cached."""
    env = tuner_env(tmp_path, 30)
    results = run_ranks(CASES, 4, ["one_config_replicas"], env=env, timeout=200)
    assert all(r.returncode == 0 for r in results), describe(results)
    chosen = {"BLOCK": 128, "CLAMP": False}
    runs = [(r.result["runs_one"], len(r.result["runs_pruned"]), r.result["raises_runs"]) for r in results]
    assert runs == [(2, 2, 1)] * 4, runs
    for r in results:
        res = r.result
        assert res["right"] and res["decided_one"] == chosen and res["untimed"] is True, res
        assert [(o["state"], o["time"], o["untimed"]) for o in res["outcomes"]] == [("measured", None, True)], res
        assert res["runs_pruned"] == [chosen, chosen] and res["decided_pruned"] == chosen, res
        assert "replica 1: rank 1: RuntimeError: the lone config fails on rank 3" in res["raises"], res
        assert res["raises_decided"] is None, res
    cache = tmp_path / "cache"
    assert not list((cache / "raises").glob("*.json"))
    for name in ("one", "pruned"):
        [path] = list((cache / name).glob("*.json"))
        record = json.loads(path.read_text())
        assert record["untimed"] is True and record["time_ms"] is None and record["replicas"] == 2, record


@pytest.mark.timeout(200)
def test_a_tuner_variable_it_does_not_read_is_said_once_with_what_to_set(tmp_path):
    """Helion's ``HELION_FORCE_AUTOTUNE=1`` carried over with this package's prefix, and a misspelt ``ALWAYS_TUNE``
    without its underscore: before, both were ignored with no word (the job used its cached decisions as if they
    were unset). Each rank now warns once per variable, at its first tuning, naming what to set. (The names are
    made from the prefix: tests/test_house.py refuses a variable name the package does not read, written whole.)"""
    prefix = "TRITON_DIST_AUTOTUNE_"
    env = tuner_env(tmp_path, 30, **{prefix + "FORCE_AUTOTUNE": "1", prefix + "ALWAYSTUNE": "1"})
    results = run_ranks(CASES, 2, ["unknown_variable"], env=env, timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        first, second = r.result["said"]
        assert len(first) == 2 and second == [], r.result
        always, force = sorted(first)
        assert always.startswith(f"triton_dist_tune reads no variable {prefix}ALWAYSTUNE (set to '1'), so it "
                                 f"changes nothing: did you mean {prefix}ALWAYS_TUNE?"), always
        assert f"{prefix}FORCE_AUTOTUNE" in force, force
        assert f"{prefix}ALWAYS_TUNE=1 tunes again a key the disk cache holds" in force, force


def test_the_variables_the_warning_knows_are_the_documented_ones():
    """``settings.KNOWN_VARIABLES`` (what :func:`say_unknown` does not warn of) is docs/operations.md's table."""
    from test_docs_agree import variable_table

    from triton_dist_tune import settings

    documented = {name for name in variable_table() if name.startswith(settings.PREFIX)}
    assert {settings.PREFIX + name for name in settings.KNOWN_VARIABLES} == documented


def _unknown_said(calls: int = 1) -> list[str]:
    """The RuntimeWarnings of ``calls`` calls of ``settings.current()`` in this process."""
    import warnings

    from triton_dist_tune import settings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(calls):
            settings.current()
    return [str(w.message) for w in caught if w.category is RuntimeWarning and "reads no variable" in str(w.message)]


def test_an_unread_variable_set_after_the_first_scan_is_still_said_once(monkeypatch):
    """``settings.current()`` scans the environment for unread variables of the prefix only where its names changed
    since its last scan (before, it scanned at every call). A variable set later in the process, or one set where
    another was removed (as many names as before), is still said, once. (This passed before the change too, which
    scanned at every call: it pins the behaviour the cheaper scan keeps.)"""
    import uuid

    from triton_dist_tune import settings

    tag = uuid.uuid4().hex[:8].upper()  # names no earlier test in this process set (each is said once a process)
    _unknown_said()  # the first scan, of the environment as it is
    monkeypatch.setenv(f"{settings.PREFIX}LATE_{tag}", "1")
    late = _unknown_said(3)
    assert len(late) == 1 and f"{settings.PREFIX}LATE_{tag} (set to '1')" in late[0], late
    monkeypatch.setenv(f"TDT_SCAN_TEST_{tag}", "x")  # a name of no concern, then swapped for an unread one
    assert _unknown_said() == []
    monkeypatch.delenv(f"TDT_SCAN_TEST_{tag}")
    monkeypatch.setenv(f"{settings.PREFIX}SWAPPED_{tag}", "2")
    swapped = _unknown_said(3)
    assert len(swapped) == 1 and f"{settings.PREFIX}SWAPPED_{tag} (set to '2')" in swapped[0], swapped
    monkeypatch.setenv(f"{settings.PREFIX}LATE_{tag}", "3")  # a new value of a name said already: said no more
    assert _unknown_said() == []


def test_current_scans_the_environment_again_only_where_its_names_changed(monkeypatch):
    """Before, every ``settings.current()`` (the tuner calls it on every call of a tuned function) scanned the whole
    environment for unread variables, about 8 us of its time: 200 calls were 200 scans. Now an unchanged
    environment is not scanned again; a name set, of any prefix, is scanned at the next call. (Counted through
    the module's own ``say_unknown``, which still runs.)"""
    from triton_dist_tune import settings

    scans = []
    real = settings.say_unknown
    monkeypatch.setattr(settings, "say_unknown", lambda env: (scans.append(1), real(env)))
    _unknown_said(200)
    assert len(scans) <= 1, len(scans)  # the first call scans where another test changed the environment since
    import uuid

    monkeypatch.setenv(f"TDT_SCAN_COUNT_{uuid.uuid4().hex[:8].upper()}", "0")  # a new name, of no concern
    scans.clear()
    _unknown_said(200)
    assert len(scans) == 1, len(scans)


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_a_kernel_builder_tuned_as_tilelang_tunes_one_is_said_once_at_the_callers_line(tmp_path):
    """A port of TileLang's ``@autotune`` over ``@tilelang.jit`` (a function that builds the kernel for a config and
    returns it): ``autotune`` times each run of the decorated function, so it chose the config that built fastest,
    with no word. Now a ``UserWarning`` at the caller's line, once per function, on every rank, says what was timed
    and what to decorate instead; a function that runs the kernel gets none."""
    results = run_ranks(CASES, 2, ["builder"], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        said = r.result["said"]
        assert said["runs"] == [], said
        assert len(said["builds"]) == 1, said
        message, category, where = said["builds"][0]
        assert category == "UserWarning" and where == "other_tuners_cases.py", said
        assert message.startswith("builder.<locals>.build returned a callable (builder.<locals>.build.<locals>.run) "
                                  "from a tuned call: autotune times each run of"), message
        assert "Decorate a function that runs the kernel" in message, message


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_config_that_leaves_an_undeclared_output_unwritten_fails_its_reference_check(tmp_path, ranks):
    """An in-place kernel returning nothing, its output undeclared, its grid ``n // BLOCK``: the ``BLOCK=512`` config
    launches no program for ``n = 256``. Before, an undeclared argument ``ref_prog`` wrote was compared only for a
    config whose own run wrote it, so that config passed the check (and could be chosen); now one an earlier
    config wrote is compared for every later config: it fails on every rank, naming ``y``."""
    results = run_ranks(CASES, ranks, ["unwritten_output"], env=tuner_env(tmp_path, 30), timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        failed = r.result["failed"]
        assert list(failed) == ["{BLOCK: 512}"], failed
        assert "wrong result: the result['y']" in failed["{BLOCK: 512}"], failed
        assert r.result["right"], r.result


@pytest.mark.triton_dependent
@pytest.mark.timeout(200)
def test_show_and_plot_of_a_one_config_decision_say_it_was_not_timed(tmp_path):
    """A key of one config is decided untimed (no time, no margin). Before, ``show``'s table gave its state as
    ``measured`` with no time (the summary's table says ``untimed``), and its plot drew a stub bar noted
    ``measured`` under a title saying ``no runner-up``: a config measured with no time to show. Both now say it was
    not timed."""
    pytest.importorskip("matplotlib")
    from harness import tune_alone

    from triton_dist_tune.cli import plots
    from triton_dist_tune.disk.decisions import read_entry

    cache, env = tune_alone(tmp_path, f"""
import sys
sys.path.insert(0, {str(HERE / "scenarios")!r})
from other_tuners_cases import axpy_reduced, inputs
import triton_dist_tune as tdt
x, y = inputs(negative=False)
one = tdt.autotune([{{"BLOCK": 128, "CLAMP": False}}], key_fn=lambda x, y, alpha: x.numel(), name="one")
one(axpy_reduced)(x, y, 2.0)
""")
    [path] = list((cache / "one").glob("*.json"))
    shown = run_cli(["show", str(path), "--cache-dir", str(cache)], base_env(env))
    assert shown.returncode == 0, shown.stderr
    [row] = [line for line in shown.stdout.splitlines() if line.startswith("->")]
    assert row.split()[6] == "untimed", shown.stdout  # the state column (-> 0 - - - - untimed {BLOCK: ...})
    fig = plots.decision_figure(read_entry(path))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any(text.startswith("not timed") and "(chosen)" in text for text in texts), texts
    assert not any("measured" in text for text in texts), texts
    title = fig.axes[0].get_title() + (fig._suptitle.get_text() if fig._suptitle is not None else "")
    assert "not timed" in title and "no runner-up" not in title, title
