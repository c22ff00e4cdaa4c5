"""Issue 40 (review six): the cache folder is a boundary, what is read is checked to the limits of what is sent,
only what runs inside the call is tuned, every rank tunes the same kernels. Real files, real command lines (in
process: ``main``), real ranks where the defect needs them."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest
from harness import describe, run_ranks, tuner_env

from triton_dist_tune.cli.commands import main
from triton_dist_tune.disk.bundles import BUNDLE_FORMAT, BUNDLE_KIND
from triton_dist_tune.disk.cache import hardware, versions, write_json_atomic
from triton_dist_tune.faults.journal import Journal

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "edges_cases.py"


def entry(cache: Path, function: str, name: str, index: int = 0, **extra: object) -> Path:
    """One decision as the tuner writes it."""
    hw = hardware()
    data = {"format": 2, "function": function, "key": f"({index},)", "index": index, "config": f"{{BLOCK: {index}}}",
            "time_ms": 1.0, "created": 0.0, "versions": versions(), "gpu": hw["gpu"], "gpu_count": hw["gpu_count"],
            "space": "abc", "measurements": [], **extra}
    return write_json_atomic(cache / function / f"{name}.json", data)


def nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- the cache folder is a boundary ----------------------------------------------------------------------------


def test_clear_and_list_never_follow_a_link_out_of_the_cache_folder(tmp_path, capsys):
    """Defect 7: ``clear --all`` deleted every ``*.json`` of a folder linked into the cache (a settings file, a vLLM
    config), and ``--dry-run`` listed them. A linked folder and a linked file are skipped and named, never read
    nor deleted; the link itself is the user's."""
    cache, outside = tmp_path / "cache", tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "settings.json").write_text('{"keep": true}')
    (outside / "E=8,N=64,device_name=X.json").write_text("{}")
    entry(outside, "fn", "outsider")  # a real decision, outside the cache: not read through the link either
    mine = entry(cache, "fn", "a" * 20)  # named as the tuner names its files: clear removes no other
    (cache / "linked").symlink_to(outside)
    (cache / "fn" / "alias.json").symlink_to(outside / "settings.json")
    (cache / "fn2").symlink_to(outside / "fn")
    before = sorted(p.name for p in outside.rglob("*"))

    code, out, err = run(capsys, "clear", "--all", "--dry-run", "--cache-dir", str(cache))
    assert code == 0 and str(outside) not in out and "settings.json" not in out and "outsider" not in out, out
    assert f"would remove {mine}" in out
    code, out, err = run(capsys, "list", "--cache-dir", str(cache))
    assert code == 1 and "1 decision(s)" in out, out
    assert "a link out of the cache folder" in err and "alias.json" in err and "linked" in err, err
    code, out, err = run(capsys, "clear", "--all", "--cache-dir", str(cache))
    assert code == 0 and "removed 1 cache file(s)" in out, (out, err)
    assert sorted(p.name for p in outside.rglob("*")) == before  # nothing outside was touched
    assert not mine.exists() and (cache / "linked").is_symlink()


def test_the_count_of_skipped_files_says_clear_removes_only_the_unreadable_ones(tmp_path, capsys):
    """The line under the skipped files said of every one, links out of the cache folder too, that 'clear
    --older-than AGE' removes it; ``clear`` never deletes through such a link (above). The unreadable file and the
    link are now counted apart, each with what removes it, and ``clear --older-than`` indeed keeps the link."""
    cache, outside = tmp_path / "cache", tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "settings.json").write_text('{"keep": true}')
    entry(cache, "fn", "good")
    (cache / "fn" / "torn.json").write_text('{"format": 2, "key"')
    (cache / "fn" / ("0" * 20 + ".json")).write_text('{"format": 2, "key"')  # named as the tuner names its files
    (cache / "fn" / "alias.json").symlink_to(outside / "settings.json")
    old = time.time() - 3600
    for torn in ("torn.json", "0" * 20 + ".json"):
        os.utime(cache / "fn" / torn, (old, old))
    code, out, err = run(capsys, "list", "--cache-dir", str(cache))
    assert code == 1 and "1 decision(s)" in out, (out, err)
    # torn.json is no name of the tuner's: clear leaves it, which the line said it removed (before: "2 unreadable")
    assert err.splitlines()[-1] == ("triton-dist-tune: 3 file(s) skipped: 1 unreadable ('clear --all', 'clear "
                                    "--function fn' (their folder), 'clear --older-than AGE' past their age, or "
                                    "deleting them removes them); 1 unreadable and not named as this library's files "
                                    "(clear never removes such a file: delete it yourself if it is no other "
                                    "program's); 1 link(s) out of the cache folder (never followed nor deleted by the "
                                    "command line: remove a link yourself)"), err
    code, out, err = run(capsys, "clear", "--older-than", "1s", "--cache-dir", str(cache))
    assert (cache / "fn" / "alias.json").is_symlink() and (outside / "settings.json").exists(), (out, err)
    assert (cache / "fn" / "torn.json").exists() and not (cache / "fn" / ("0" * 20 + ".json")).exists(), (out, err)


def test_a_file_that_is_not_utf8_is_skipped_and_named_by_every_command(tmp_path, capsys):
    """Defect 8: one non-UTF-8 file made ``list``, ``show`` of another decision, ``export`` and ``clear`` exit 2 with
    "bad value: 'utf-8' codec can't decode byte 0xff", naming no file."""
    cache = tmp_path / "cache"
    good = entry(cache, "fn", "b" * 20)  # named as the tuner names its files: clear removes no other
    bad = cache / "fn" / f"{'c' * 20}.json"
    bad.write_bytes(b'{"format": 2, "key": "\xff\xfe"}')
    code, out, err = run(capsys, "list", "--cache-dir", str(cache))
    assert code == 1 and "1 decision(s)" in out and f"skipped {bad}: corrupt cache file (not UTF-8" in err, err
    assert run(capsys, "show", "b" * 20, "--cache-dir", str(cache))[0] == 0
    code, out, err = run(capsys, "export", str(tmp_path / "b.json"), "--cache-dir", str(cache))
    assert code == 1 and "exported 1 decision(s)" in out and str(bad) in err
    code, out, err = run(capsys, "clear", "--stale", "--cache-dir", str(cache))
    assert code == 0 and str(bad) in err and bad.exists()  # not stale, not readable: named, kept
    code, out, err = run(capsys, "clear", "--all", "--cache-dir", str(cache))
    assert code == 0 and "removed 2 cache file(s)" in out and not bad.exists() and not good.exists(), (out, err)


def _as_another_user(fn) -> tuple[int, str]:
    """Run ``fn()`` (returning an exit status) in a child process that cannot write what root can (root ignores a
    folder's mode: the child drops to ``nobody``); returns its status and its stderr."""
    import torch  # noqa: F401  (imported here: the other user may not read the environment's packages)

    err = tempfile.NamedTemporaryFile(delete=False)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.dup2(err.fileno(), 2)
            sys.stderr = os.fdopen(2, "w", closefd=False)
            import logging

            logging.getLogger().handlers.clear()  # as in a process of its own (pytest's capture is no handler there)
            logs = sys.modules.get("triton_dist_tune.disk.logs")
            if logs is not None:  # opened by a test before this one in the same pytest worker, in its own folder
                for logger in logs._file_loggers.values():
                    logger.handlers.clear()
                logs._file_loggers.clear()
                logs._unwritable.clear()
                logs._folder = None  # (the earlier test's folder, kept for its process: not this one's)
                if logs._console is not None:  # its handler writes to the stderr pytest gave the earlier test
                    logs._console.handlers.clear()
                    logs._console = None
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            code = fn()
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    text = Path(err.name).read_text()
    os.unlink(err.name)
    return os.waitstatus_to_exitcode(status), text


def test_clear_on_a_read_only_folder_is_one_line(capsys):
    """Defect 10: ``clear --all`` on a read-only folder ended in a raw OSError traceback."""
    top = Path(tempfile.mkdtemp())  # not under pytest's 0700 folder: the other user must reach it
    try:
        cache = top / "cache"
        entry(cache, "fn", "d" * 20)
        for folder in (top, cache):
            folder.chmod(0o755)
        (cache / "fn").chmod(0o555)
        code, err = _as_another_user(lambda: main(["clear", "--all", "--cache-dir", str(cache)]))
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert "could not remove 1 of 1 file(s)" in err and "read-only" in err, err
        assert (cache / "fn" / f"{'d' * 20}.json").exists()
    finally:
        (top / "cache" / "fn").chmod(0o755)
        import shutil

        shutil.rmtree(top)


# -- what is read is checked to the limits of what is sent ------------------------------------------------------


def test_a_bundle_or_file_nested_deeper_than_the_exchanges_carry_is_refused_where_it_is_read(tmp_path, capsys):
    """Defect 2 (the file side; the ranks' side is the next test): ``import`` accepted an entry with a field 100
    levels deep, which then broke every call at its key. It is refused, nothing imported; a cache file or a journal
    line that deep is skipped and named."""
    hw = hardware()
    data = {"format": 2, "function": "fn", "key": "(4,)", "index": 0, "config": "{BLOCK: 0}", "versions": versions(),
            "gpu": hw["gpu"], "gpu_count": hw["gpu_count"], "deep": nested(100)}
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps({"kind": BUNDLE_KIND, "format": BUNDLE_FORMAT, "created": 0.0, "versions": versions(),
                                  "entries": [{"path": "fn/" + "d" * 20 + ".json", "data": data}]}))
    code, out, err = run(capsys, "import", str(bundle), "--cache-dir", str(tmp_path / "cache"))
    assert code == 2 and "nested 101 levels deep" in err and "nothing imported" in err, err
    assert not (tmp_path / "cache").exists()
    write_json_atomic(tmp_path / "cache" / "fn" / "deep.json", data)
    code, out, err = run(capsys, "list", "--cache-dir", str(tmp_path / "cache"))
    assert code == 1 and "deep.json: corrupt cache file (nested 101 levels deep" in err, err
    journal = tmp_path / "j.journal"
    good = {"index": 0, "state": "started", "config": "{BLOCK: 0}"}
    journal.write_text(json.dumps({**good, "error": nested(100)}) + "\n" + json.dumps(good) + "\n")
    assert [r["index"] for r in Journal(journal, create=False).read()] == [0]  # the deep line skipped


@pytest.mark.timeout(300)
def test_ranks_serve_a_cache_file_nested_too_deep_as_a_re_tune(tmp_path):
    """Defect 2 on real ranks: a cache entry with a field 100 levels deep made every call at its key raise on
    every rank (the lookup's broadcast refuses more than 64 levels). Now rank 0 warns and the key is tuned again."""
    results = run_ranks(SCENARIO, 2, ["deep_cache"], env=tuner_env(tmp_path, timeout=60), timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    assert [r.result["chosen"] for r in results] == [1, 1], describe(results)
    assert "ignoring unreadable cache file" in results[0].stderr and "nested 103 levels deep" in results[0].stderr


# -- every rank tunes the same kernels ---------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_kernel_whose_configs_differ_between_ranks_is_a_mismatch_on_every_rank(tmp_path):
    """Defect 4: a ``triton.autotune`` kernel whose config list depends on the rank was tuned separately on each
    rank (rank 0 chose BLOCK=128, rank 1 BLOCK=64), with no error. Now every rank raises MismatchError naming the
    kernel and the first differing entry, before a config is chosen."""
    results = run_ranks(SCENARIO, 2, ["rank_configs"], env=tuner_env(tmp_path, timeout=60), timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        error = r.result
        assert error["type"] == "MismatchError", describe(results)
        assert "rank_scaled" in error["message"] and "entry 1 of 2 (the first that differs)" in error["message"]
        assert "BLOCK: 256" in error["message"] and "BLOCK: 512" in error["message"], error
        assert error["decided"] == 0


def test_a_read_only_cache_and_log_folder_are_said_not_named_as_written():
    """Defect 10: a read-only cache printed ``cache file: <path>`` for a file it could not write, and an unwritable
    log folder was silent (the summary still named it; ``logs`` later found nothing). A tuning in a process that
    cannot write either folder: one warning for each, and the summary says that nothing was written."""
    top = Path(tempfile.mkdtemp())
    top.chmod(0o555)  # read-only to the other user: neither folder can be made in it

    def tune() -> int:
        os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = str(top / "cache")
        os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"] = str(top / "logs")
        import triton_dist_tune as tdt

        @tdt.autotune([{"scale": 1}, {"scale": 2}], key_fn=lambda x, **_: x, n_warmup=0, n_repeat=1)
        def read_only_fn(x, *, scale):
            return x * scale

        read_only_fn(3, autotune_verbose=True)
        read_only_fn(4, autotune_verbose=True)
        return 0

    try:
        code, err = _as_another_user(tune)
    finally:
        top.chmod(0o755)
        top.rmdir()
    assert code == 0, err
    assert err.count("cannot write the rank logs into") == 1, err  # said once, not per record
    assert "cache file: none written (PermissionError" in err and "cache file: /" not in err, err
    assert "logs: none written (" in err and err.count("could not write the cache") == 2, err


# -- tune only what runs inside the call -------------------------------------------------------------------------


def test_generator_and_async_functions_are_refused_when_decorating():
    """Defect 3: ``contextual_autotune`` on a generator function or an ``async def`` tuned nothing (the kernels
    launched while the caller iterated, outside the interception: each rank tuned alone and the ranks diverged), and
    ``autotune`` on a generator function timed only the generator's creation. Both refuse them when decorating,
    saying what to decorate instead; a misspelt option names the nearest one (defect 10)."""
    import triton_dist_tune as tdt
    from triton_dist_tune.contextual import contextual_autotune

    def layer_steps(x, *, scale=1):
        yield x * scale

    async def layer_async(x, *, scale=1):
        return x * scale

    async def layer_stream(x, *, scale=1):
        yield x * scale

    decorators = {"autotune": tdt.autotune([{"scale": 1}, {"scale": 2}], key_fn=lambda x, **_: 0),
                  "contextual_autotune": contextual_autotune(is_dist=False)}
    for fn, kind, instead in ((layer_steps, "a generator function", "iterate over that"),
                              (layer_async, "a coroutine function", "call it from the coroutine"),
                              (layer_stream, "an async generator function", "call it from the async generator")):
        for name, decorate in decorators.items():
            with pytest.raises(tdt.BadInputError) as caught:
                decorate(fn)
            text = str(caught.value)
            assert f"{name} cannot tune" in text and fn.__name__ in text and kind in text and instead in text, text
    with pytest.raises(tdt.BadInputError, match="'restore_valu' \\(did you mean 'restore_value'\\?\\)"):
        tdt.autotune([{"scale": 1}], key_fn=lambda x, **_: 0, restore_valu=["x"])
    with pytest.raises(tdt.BadInputError, match="'n_repat' \\(did you mean 'n_repeat'\\?\\)"):
        contextual_autotune(n_repat=3)


def test_triton_autotunes_option_names_say_what_to_write_instead():
    """Code ported from triton.autotune: ``autotune(configs=..., key=...)`` failed with Python's "missing 1 required
    positional argument: 'config_space'", and ``rep=`` / ``prune_configs_by=`` / ``do_bench=`` named no
    counterpart (``warmup=`` only by its spelling). Each now says what to write instead."""
    import triton_dist_tune as tdt
    from triton_dist_tune import contextual_autotune

    with pytest.raises(tdt.BadInputError) as caught:
        tdt.autotune(configs=[{"BLOCK": 64}], key=["n"])
    text = str(caught.value)
    assert "'configs' (triton.autotune's; here: autotune's config_space" in text, text
    assert "'key' (triton.autotune's; here: autotune's key_fn" in text, text
    with pytest.raises(tdt.BadInputError) as caught:
        tdt.autotune([{"scale": 1}], key_fn=lambda x, **_: 0, rep=100, warmup=25, prune_configs_by={}, do_bench=None)
    text = str(caught.value)
    for name, instead in (("rep", "n_repeat"), ("warmup", "n_warmup"), ("prune_configs_by", "prune_fn"),
                          ("do_bench", "the tuner times the calls itself")):
        assert f"'{name}' (triton.autotune's; here: " in text and instead in text, (name, text)
    with pytest.raises(tdt.BadInputError) as caught:
        contextual_autotune(configs=[], use_cuda_graph=True)
    text = str(caught.value)
    assert "their own configs, key and prune_configs_by" in text and "replays CUDA graphs by itself" in text, text
    with pytest.raises(tdt.BadInputError, match="autotune needs a config_space"):
        tdt.autotune(key_fn=lambda x: 0)

def test_options_that_belong_to_the_call_or_the_other_decorator_say_where_they_go():
    """Triton-distributed's group and verbosity are keywords of each call (``ag_gemm(a, b, autotune_pg=tp)``), and
    ``contextual_autotune`` takes its group as ``is_dist``: given to the wrong place when porting, each was refused
    as an unknown option with no word of where it goes, and so was ``triton.autotune``'s ``cache_results=``. Each
    now says where it goes."""
    import triton_dist_tune as tdt
    from triton_dist_tune import contextual_autotune

    def fn(x, *, c=0):
        return x

    with pytest.raises(tdt.BadInputError) as caught:
        tdt.autotune([{"c": 1}], key_fn=lambda x: 0, autotune_pg=None, autotune_verbose=True)(fn)
    text = str(caught.value)
    for name in ("autotune_pg", "autotune_verbose"):
        assert f"'{name}' (a keyword of each call, not of the decorator: f(..., {name}=...))" in text, text
    with pytest.raises(tdt.BadInputError) as caught:
        tdt.autotune([{"c": 1}], key_fn=lambda x: 0, is_dist=True, cache_results=True)(fn)
    text = str(caught.value)
    assert "'is_dist' (contextual_autotune's; here: each call's autotune_pg=" in text, text
    assert "'cache_results' (triton.autotune's; here: none: decisions are cached on disk by default" in text, text
    with pytest.raises(tdt.BadInputError) as caught:
        contextual_autotune(autotune_pg=None, cache_results=False)
    text = str(caught.value)
    assert "'autotune_pg' (autotune's call keyword; here: is_dist=" in text, text
    assert "'cache_results' (triton.autotune's; here: none" in text, text


def test_campaign_and_nearest_tell_apart_configs_that_compare_equal(tmp_path, monkeypatch):
    """Defect 10: the campaign and the ``nearest`` policy found a config with ``space.index(config)``, which takes
    ``{"s": 1.0}`` for ``{"s": 1}`` (they compare equal): the campaign reported config 0, and ``nearest`` served
    the int config for a key whose decision is the float one."""
    import time

    import triton_dist_tune as tdt

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    seen: list[object] = []

    @tdt.autotune([{"s": 1}, {"s": 1.0}], key_fn=lambda n, **_: n, undecided="nearest", n_warmup=0, n_repeat=3)
    def equal_configs(n, *, s):
        seen.append(s)
        time.sleep(0.02 if type(s) is int else 0.002)  # the float config is 10x faster
        return n

    summary = tdt.campaign(equal_configs, [8], progress=False)
    assert [(r.index, r.config) for r in summary.rows] == [(1, "{s: 1.0}")], summary.rows
    seen.clear()
    equal_configs(9)  # undecided: served the nearest decided key's choice, the float config
    assert [type(s) for s in seen] == [float], seen
