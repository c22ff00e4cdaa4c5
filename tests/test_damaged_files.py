"""Cache files, journals and logs damaged, edited by hand or written elsewhere, and a disk that fills up: the command
line names or skips what it cannot use (never a traceback, never gigabytes of memory, never a file through a link
out of the cache folder), and a full disk is said once, not once per record. In this process, no ranks."""

from __future__ import annotations

import json
import logging
import os
import time
import tracemalloc
from pathlib import Path

import pytest


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    """The command line in this process: (exit status, stdout, stderr)."""
    from triton_dist_tune.cli.commands import main

    capsys.readouterr()
    status = main(args)
    out = capsys.readouterr()
    return status, out.out, out.err


def write_entry(cache: Path, **fields) -> Path:
    """A format-2 decision of function ``f``, with ``fields`` set over the usual ones."""
    from triton_dist_tune.disk.cache import versions
    from triton_dist_tune.records import Outcome

    outcome = Outcome(0, "{BLOCK: 64}", "measured", time=1.0, spread=0.01, per_rank=[1.0, 1.0], samples=1,
                      order=[0], round_times=[1.0])
    data = {"format": 2, "function": "f", "key": "(8,)", "index": 0, "config": "{BLOCK: 64}", "time_ms": 1.0,
            "group_size": 2, "gpu": "cpu", "gpu_count": 0, "versions": versions(), "created": time.time(),
            "measurements": [outcome.to_json()], **fields}
    path = cache / "f" / "0123456789abcdef0123.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("fields", [{"kernel": 5}, {"kernel": ["a", "b"]}, {"created": 1e300},
                                    {"created": -1e300}, {"group": {"a": [1]}, "timing": 7},
                                    {"created": 10**400, "time_ms": 10**400},  # no float holds them (isfinite raised)
                                    {"measurements": [{"index": 0, "config": "{BLOCK: 64}", "state": "measured",
                                                       "time": 10**400, "drift_free": 10**400}]}])
def test_list_and_show_read_a_decision_whose_fields_hold_odd_values(tmp_path, capsys, fields):
    write_entry(tmp_path, **fields)
    for args in (["list"], ["show", "0123456789"], ["list", "--json"]):
        status, out, err = cli([*args, "--cache-dir", str(tmp_path)], capsys)
        assert status == 0, (args, out, err)
        assert "{BLOCK: 64}" in out and "Traceback" not in err


def test_show_names_the_ranks_of_a_decision_some_ranks_measured(tmp_path, capsys):
    # a contextual key met by ranks 1 and 3: their times were shown as a bare list, as if of ranks 0 and 1
    write_entry(tmp_path, measurements=[{"index": 0, "config": "{BLOCK: 64}", "state": "measured", "time": 1.0,
                                         "per_rank": [0.5, 1.0], "per_rank_of": [1, 3], "samples": 2}])
    status, out, err = cli(["show", "0123456789", "--cache-dir", str(tmp_path)], capsys)
    assert status == 0 and "r1:0.5000 r3:1.0000" in out, (out, err)


def _log_folder(tmp_path: Path, extra: str) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    good = {"time": time.time(), "job": "J", "rank": 0, "level": "INFO", "message": "a good record"}
    (folder / "rank-0.jsonl").write_text(json.dumps(good) + "\n" + extra + "\n")
    return folder


@pytest.mark.parametrize("extra", ['{"time": 1e300, "message": "x", "job": "J"}',
                                   '{"time": NaN, "message": "x", "job": "J"}',
                                   '{"time": 1.0, "message": "x", "rank": {"a": 1}, "job": "J"}',
                                   '{"time": 1.0, "message": "x", "rank": "r", "job": "J"}\n'
                                   '{"time": 1.0, "message": "y", "rank": 3, "job": "J"}',
                                   "[" * 100_000,
                                   '{"time": 1' + "0" * 400 + ', "message": "x", "job": "J"}'],
                         ids=["time-out-of-range", "time-nan", "rank-object", "ranks-int-and-text", "nested-deep",
                              "time-no-float-holds"])
def test_logs_skips_the_lines_it_cannot_show(tmp_path, capsys, extra):
    folder = _log_folder(tmp_path, extra)
    for args in (["logs", "--log-dir", str(folder)], ["logs", "--list", "--log-dir", str(folder)]):
        status, out, err = cli(args, capsys)
        assert status == 0, (args, out, err)
        assert "J" in out and "Traceback" not in err
    assert "a good record" in cli(["logs", "J", "--log-dir", str(folder)], capsys)[1]


def _journal(folder: Path, *records: dict) -> Path:
    path = folder / "abcdef0123456789abcd.0123456789.rank0.journal"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_journal_record_with_a_huge_index_is_shown_without_a_list_that_long(tmp_path, capsys):
    from triton_dist_tune.faults.unfinished import unfinished

    _journal(tmp_path / "f", {"index": 0, "state": "measured", "config": "{BLOCK: 64}", "time": 0.3},
             {"index": 10_000_000, "state": "started", "config": "damaged"})
    tracemalloc.start()
    try:
        (tuning,) = unfinished(tmp_path)
        configs = tuning.configs()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [c.index for c in configs] == [0, 10_000_000]
    assert peak < 10 << 20, f"{peak} bytes for two journal records"
    status, out, err = cli(["list", "--cache-dir", str(tmp_path)], capsys)
    assert status == 0 and "abcdef01" in out, (out, err)


def test_a_journal_through_a_link_out_of_the_cache_folder_is_not_read(tmp_path, capsys):
    outside = tmp_path / "outside"
    journal = _journal(outside / "fn", {"index": 0, "state": "measured", "config": "SECRET", "time": 0.3})
    cache = tmp_path / "cache"
    (cache / "f").mkdir(parents=True)
    (cache / "linked").symlink_to(outside / "fn")  # a linked function folder
    (cache / "f" / "1111111111.0123456789.rank0.journal").symlink_to(journal)  # a linked journal
    status, out, err = cli(["list", "--cache-dir", str(cache)], capsys)
    assert status == 0, err
    assert "linked" not in out and "11111111" not in out and "tunings never finished" not in out, out
    status, out, err = cli(["show", "abcdef", "--cache-dir", str(cache)], capsys)
    assert status == 2 and "SECRET" not in out, (out, err)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_log_file_on_a_full_disk_is_said_once_not_a_traceback_per_record(tmp_path, capsys, caplog):
    from triton_dist_tune.disk import logs

    handler = logs._open_locked(Path("/dev/full"), time.monotonic() + 5)  # every write: no space left on device
    assert handler is not None
    logger = logging.getLogger("triton_dist_tune.test_full_disk")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        with caplog.at_level(logging.WARNING, logger="triton_dist_tune"):
            for n in range(5):
                logger.warning("record %d", n)
    finally:
        logger.removeHandler(handler)
        handler.close()
    err = capsys.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err, err
    said = [r.getMessage() for r in caplog.records if "cannot write the rank log" in r.getMessage()]
    assert len(said) <= 1 and all("/dev/full" in s for s in said), said


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_journal_on_a_full_disk_is_said_once_not_once_per_record(tmp_path, caplog):
    from triton_dist_tune.faults.journal import Journal

    path = tmp_path / "f" / "abcdef0123456789abcd.0123456789.rank0.journal"
    path.parent.mkdir()
    path.symlink_to("/dev/full")  # every write: no space left on device
    journal = Journal(path)
    with caplog.at_level(logging.WARNING, logger="triton_dist_tune"):
        for index in range(6):
            journal.append(index, "started", config=f"{{BLOCK: {index}}}")
    journal.close()
    said = [r.getMessage() for r in caplog.records if "cannot write the journal" in r.getMessage()]
    assert len(said) == 1, said


def test_export_into_a_folder_names_the_folder_not_a_hidden_temporary_file(tmp_path, capsys):
    """``export DIR`` with DIR a folder said ``/tmp/.tmp.XXXX.u4u_e98g.tmp: Is a directory``."""
    from triton_dist_tune.cli.commands import main

    write_entry(tmp_path / "cache")
    (tmp_path / "out").mkdir()
    capsys.readouterr()
    status = main(["export", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert status == 2, err
    assert f"{tmp_path / 'out'} is a folder: name the bundle file to write" in err and ".tmp" not in err, err


def test_a_cache_file_from_a_newer_format_is_named_as_such_not_as_malformed(tmp_path, caplog):
    """A decision written by a newer version (format 3) was 'ignoring malformed cache file'."""
    from triton_dist_tune.disk.cache import DiskCache

    path = write_entry(tmp_path, format=3)
    with caplog.at_level(logging.WARNING):
        assert DiskCache("f", tmp_path).load(path.stem, "any space") is None
    assert "written by a newer triton-dist-tune (cache format 3; this one reads formats 1, 2)" in caplog.text
    assert "malformed" not in caplog.text


def test_a_decision_whose_index_is_true_is_a_retune_not_an_error_on_every_rank(tmp_path, caplog):
    """``"index": true`` (JSON's true, which Python reads as 1) with config 1's text: group rank 0 served it, and
    every rank's lookup then refused the index it broadcast (``ExchangeError: ... another process wrote under the
    tuner's keys of the key-value store``, the job ended, on 2 gloo ranks). Now a malformed file: a re-tune."""
    from triton_dist_tune.disk.cache import DiskCache
    from triton_dist_tune.space import fingerprint

    path = write_entry(tmp_path, index=1, config="{BLOCK: 128}", space=fingerprint("s"))
    assert DiskCache("f", tmp_path).load(path.stem, "s", quiet=True)["index"] == 1  # the control: served
    path = write_entry(tmp_path, index=True, config="{BLOCK: 128}", space=fingerprint("s"))
    with caplog.at_level(logging.WARNING):
        assert DiskCache("f", tmp_path).load(path.stem, "s") is None
    assert "ignoring malformed cache file" in caplog.text


def test_a_decision_that_cannot_be_written_names_its_file(tmp_path):
    """A full disk's error ('[Errno 28] No space left on device') named no file in the tuner's warning."""
    from triton_dist_tune.disk.cache import DiskCache

    cache = DiskCache("f", tmp_path / "a-file")
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(OSError, match=f"writing {tmp_path / 'a-file' / 'f' / 'e.json'}"):
        cache.store("e", {"index": 0, "config": "{}"}, "space")


def test_clear_of_a_function_that_does_not_exist_and_show_of_an_empty_name_are_errors(tmp_path, capsys):
    """``clear --function all_reduce`` (a prefix or a typo) said 'removed 0 ...' with exit 0; ``show ''`` said that
    it matched every decision."""
    write_entry(tmp_path)
    status, _, err = cli(["clear", "--function", "all_reduce", "--cache-dir", str(tmp_path)], capsys)
    assert status == 2 and "no function 'all_reduce'" in err and "(functions: f)" in err, err
    status, _, err = cli(["show", "", "--cache-dir", str(tmp_path)], capsys)
    assert status == 2 and "no decision called ''" in err, err
    assert cli(["clear", "--function", "f", "--dry-run", "--cache-dir", str(tmp_path)], capsys)[0] == 0


@pytest.mark.parametrize("index", [1, 7])
def test_a_cache_file_whose_choice_is_not_that_config_of_the_space_is_said_and_tuned_again(tmp_path, monkeypatch,
                                                                                          caplog, index):
    """A decision whose index is out of the space, or names another config than the space holds there (a file
    edited by hand), was tuned again without a word."""
    import triton_dist_tune as tdt

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))

    @tdt.autotune([{"a": 1}, {"a": 2}], key_fn=lambda n: n, n_repeat=1)
    def scaled(n, *, a):
        return n * a

    scaled(3)
    (path,) = (tmp_path / "cache" / "scaled").glob("*.json")
    data = json.loads(path.read_text())
    data.update(index=index, config="{a: 1}")
    path.write_text(json.dumps(data))
    scaled.tuner.decided.clear()
    with caplog.at_level(logging.WARNING):
        scaled(3)
    assert f"ignoring cache file {path}: its choice (config {index}, {{a: 1}}) is not that config" in caplog.text


TUNE_ONCE = """
import torch, triton_dist_tune as tdt

@tdt.autotune([{"v": 0}, {"v": 1}], key_fn=lambda x: x.numel(), n_repeat=1, timing="cold", name="f")
def f(x, *, v):
    return x * (v + 1)

f(torch.ones(4))
(d,) = f.tuner.decisions.values()
print("DECIDED", d.index, d.cached)
"""


def _tune_once(tmp_path: Path) -> str:
    from harness import run_python

    env = {**os.environ, "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"),
           "TRITON_DIST_AUTOTUNE_LOG_DIR": str(tmp_path / "logs")}
    proc = run_python(["-c", TUNE_ONCE], env, timeout=100)
    assert proc.returncode == 0 and "DECIDED" in proc.stdout, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("field", ["time_ms", "margin"])
def test_a_cache_hit_whose_record_holds_a_number_no_float_holds_is_served(tmp_path, field):
    # a 400-digit integer in the record: float() raised OverflowError building the served decision, on every rank
    _tune_once(tmp_path)
    (path,) = (tmp_path / "cache").rglob("*.json")
    path.write_text(path.read_text().replace(f'"{field}": ', f'"{field}": 1{"0" * 400}, "was": ', 1))
    assert "True" in _tune_once(tmp_path).split("DECIDED", 1)[1]  # served from the cache


@pytest.mark.timeout(120)
def test_a_log_header_with_a_time_no_float_holds_does_not_stop_the_tuning(tmp_path):
    # the log folder's rotation read an earlier job's header time with float(): OverflowError at the tuning's first
    # log line, on the ranks that share the folder
    folder = tmp_path / "logs"
    folder.mkdir()
    header = {"job": "OLD", "header": True, "rank": 0, "level": "INFO", "message": "started"}
    (folder / "rank-0.jsonl").write_text(json.dumps(header).replace('{"job"', '{"time": 1' + "0" * 400 + ', "job"')
                                         + "\n")
    _tune_once(tmp_path)


@pytest.mark.parametrize("field", [{"probed": float("nan")}, {"resumed": float("inf")}, {"error": float("nan")},
                                   {"error": {"a": float("nan")}}])
def test_list_and_show_json_read_a_measurement_whose_flag_or_error_holds_nan(tmp_path, capsys, field):
    """One measurement's ``"probed": NaN`` (or an error that is no text) was kept as read, and ``list --json`` and
    ``show --json`` then failed whole: 'bad value: Out of range float values are not JSON compliant: nan', exit 2
    (a NaN flag also read as true: a bound, never sampled again). Now the damaged field is left out."""
    row = {"index": 0, "config": "{BLOCK: 64}", "state": "measured", "time": 1.0, "samples": 1, **field}
    write_entry(tmp_path, measurements=[row])
    for args in (["list", "--json"], ["show", "0123456789", "--json"]):
        status, out, err = cli([*args, "--cache-dir", str(tmp_path)], capsys)
        assert status == 0 and "{BLOCK: 64}" in out, (args, err)
        assert "NaN" not in out and "Infinity" not in out


def test_list_reads_an_unfinished_tunings_journal_whose_index_no_length_holds(tmp_path, capsys):
    """A journal line of index 2**63 (a config index no space has): ``list`` ended in a traceback (OverflowError:
    cannot fit 'int' into an index-sized integer, from the space the journals describe)."""
    folder = tmp_path / "f"
    folder.mkdir()
    lines = [{"index": 0, "state": "started", "config": "{BLOCK: 64}", "session": "s"},
             {"index": 2**63, "state": "started", "config": "x", "session": "s"}]
    (folder / "0123456789abcdef0123.0123456789.rank0.journal").write_text("".join(json.dumps(r) + "\n" for r in lines))
    for args in (["list"], ["show", "0123456789"], ["list", "--json"]):
        status, out, err = cli([*args, "--cache-dir", str(tmp_path)], capsys)
        assert status == 0 and "Traceback" not in err, (args, err)


def test_a_rank_log_record_quoting_a_lone_surrogate_from_a_journal_is_written_not_lost_as_a_full_disk(tmp_path):
    """A journal's error ``"\\ud800"`` (valid JSON, read back as a lone surrogate) quoted in the rank log's text file:
    the record was lost ('cannot write the rank log ... (UnicodeEncodeError ...; is the disk full?)', seen on 2 gloo
    ranks), and a later full disk was never said. Now written, the surrogate escaped."""
    from triton_dist_tune.disk import logs

    handler = logs._open_locked(tmp_path / "rank-0.log", time.monotonic() + 5)
    lost = logs._lost_records
    try:
        handler.emit(logging.LogRecord("t", logging.INFO, __file__, 1, "config 2 failed: \ud800 then", None, None))
    finally:
        handler.close()
    assert logs._lost_records == lost
    assert "config 2 failed: \\ud800 then" in (tmp_path / "rank-0.log").read_text()


def test_list_and_show_print_a_decision_whose_key_holds_a_lone_surrogate(tmp_path):
    """A key ``"(8,\\ud800)"`` (valid JSON, read back as a lone surrogate): printing it to a UTF-8 stdout failed
    'list' and 'show' whole ("bad value: 'utf-8' codec can't encode character '\\ud800'", exit 2), every other
    decision unlisted; so did 'logs' for such a message. Now it is shown escaped."""

    from harness import ROOT, base_env, run_python

    write_entry(tmp_path, key="(8,\ud800)")
    env = {**base_env(), "PYTHONIOENCODING": "utf-8"}
    for args in (["list"], ["show", "0123456789"]):
        done = run_python(["-m", "triton_dist_tune", *args, "--cache-dir", tmp_path], env, ROOT, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "(8,\\ud800)" in done.stdout


def test_clear_and_list_name_a_journal_or_decision_that_is_a_loop_of_links(tmp_path, capsys):
    """A journal that is a link to itself: 'clear --all' ended in a traceback (RuntimeError: Symlink loop, from the
    message that names where a link out of the folder leads). Now it is named as a loop and skipped."""
    write_entry(tmp_path)
    (tmp_path / "f" / "0123456789abcdef0123.0123456789.rank0.journal").symlink_to(
        "0123456789abcdef0123.0123456789.rank0.journal")
    (tmp_path / "f" / "fedcba98765432100000.json").symlink_to("fedcba98765432100000.json")
    for args in (["clear", "--all", "--dry-run"], ["list"]):
        status, out, err = cli([*args, "--cache-dir", str(tmp_path)], capsys)
        assert "Traceback" not in err and status in (0, 1), (args, status, err)


@pytest.mark.timeout(60)
def test_logs_skips_a_fifo_named_like_a_rank_log(tmp_path, capsys):
    """A FIFO named ``rank-1.jsonl`` in the log folder held 'logs' for ever (opened for reading, waiting for a
    writer); now it is skipped at once and the other ranks' records are shown."""
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    record = {"time": time.time(), "job": "j1", "rank": 0, "host": "h", "level": "INFO", "message": "hello"}
    (logs_dir / "rank-0.jsonl").write_text(json.dumps(record) + "\n")
    os.mkfifo(logs_dir / "rank-1.jsonl")
    status, out, err = cli(["logs", "--log-dir", str(logs_dir)], capsys)
    assert status == 0 and "hello" in out, err


def test_list_counts_the_attempts_of_an_unfinished_tuning_whose_record_names_a_damaged_attempt(tmp_path, capsys):
    """A journal record whose ``attempt`` is a list (kept as evidence, its attempt ignored, as the merge does):
    'list' ended in a traceback (TypeError: unhashable type: 'list') counting the unfinished tuning's attempts."""
    folder = tmp_path / "f"
    folder.mkdir()
    lines = [{"index": 0, "state": "started", "config": "{BLOCK: 64}", "session": "s", "attempt": ["A"]}]
    (folder / "0123456789abcdef0123.0123456789.rank0.journal").write_text("".join(json.dumps(r) + "\n" for r in lines))
    for args in (["list"], ["show", "0123456789"]):
        status, out, err = cli([*args, "--cache-dir", str(tmp_path)], capsys)
        assert status == 0 and "Traceback" not in err, (args, err)


def test_show_by_name_of_a_damaged_file_says_why_it_is_no_decision(tmp_path, capsys):
    """``show NAME``, NAME the name ``list`` would give the file (``f/<file>``, its stem, a prefix of it), where the
    file is corrupt (a truncated JSON, an edit by hand): one line saying why (``corrupt cache file (not JSON ...)``,
    ``malformed cache entry``), exit 2. Before, it said ``no decision called 'f/0123...'``, as if the file were not
    there; only its full path was said to be corrupt. A name of no file is still ``no decision called``."""
    path = write_entry(tmp_path)
    path.write_text(path.read_text()[:40])
    for name in ("f/0123456789abcdef0123", "0123456789abcdef0123.json", "01234567"):
        status, _, err = cli(["show", name, "--cache-dir", str(tmp_path)], capsys)
        assert status == 2 and f"{path}: corrupt cache file (not JSON" in err, (name, err)
    path.write_text(json.dumps({"format": 2, "index": "0"}))
    status, _, err = cli(["show", "0123", "--cache-dir", str(tmp_path)], capsys)
    assert status == 2 and f"{path}: malformed cache entry" in err, err
    status, _, err = cli(["show", "fedc", "--cache-dir", str(tmp_path)], capsys)
    assert status == 2 and "no decision called 'fedc'" in err, err


def test_a_cache_file_larger_than_any_decision_is_refused_unread(tmp_path, caplog, capsys):
    """A cache file over ``MAX_ENTRY_BYTES`` (64 MiB; a decision is kilobytes): group rank 0 ignores it unread, with a
    warning naming its size, and the group tunes again; ``list`` skips and names it, exit 1. Before, it was read and
    parsed whole: a 300 MB one (a decision padded with a list of numbers) took rank 0 194 s and 12 GB while the other
    ranks waited for its lookup, past their deadline; one padded with spaces, as here, was served."""
    from triton_dist_tune.disk.cache import DiskCache
    from triton_dist_tune.space import fingerprint

    path = write_entry(tmp_path, space=fingerprint("s"))
    assert DiskCache("f", tmp_path).load(path.stem, "s", quiet=True)["index"] == 0  # the control: served
    with path.open("a") as f:
        f.write(" " * ((64 << 20) + 1 - path.stat().st_size))
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING):
            assert DiskCache("f", tmp_path).load(path.stem, "s") is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "more than a decision holds (a cache file is read up to 64 MiB)" in caplog.text and peak < 8 << 20, \
        (caplog.text, peak)
    status, _, err = cli(["list", "--cache-dir", str(tmp_path)], capsys)
    assert status == 1 and f"skipped {path}: cannot read (64.0 MiB, more than a decision holds" in err, err
