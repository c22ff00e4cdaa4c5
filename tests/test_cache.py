"""The disk cache: atomic standard-JSON files, version handling, damaged files."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from triton_dist_tune.disk import cache
from triton_dist_tune.disk.cache import DiskCache, entry_id, write_json_atomic

SPACE = "{a: 1}\n{a: 2}"


def decision(index=1):
    return {"index": index, "config": f"{{a: {index + 1}}}", "key": "(4,)", "time_ms": 1.5,
            "measurements": [{"index": 0, "time": None, "state": "failed"}]}


def test_store_then_load_round_trips(tmp_path):
    store = DiskCache("fn", tmp_path)
    path = store.store("e1", decision(), SPACE)
    assert path == tmp_path / "fn" / "e1.json"
    loaded = store.load("e1", SPACE)
    assert loaded["index"] == 1 and loaded["versions"] == cache.versions() and loaded["gpu"] == "cpu"
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c))


def test_non_finite_numbers_are_refused_rather_than_written_as_non_standard_json(tmp_path):
    with pytest.raises(ValueError):
        write_json_atomic(tmp_path / "x.json", {"t": float("inf")})
    assert list(tmp_path.iterdir()) == []  # no half-written or temporary file left behind


@pytest.mark.parametrize("damage", ["", "{", "[]", '{"format": 1}', "\x00\x01"])
def test_damaged_files_are_a_warning_and_a_miss(tmp_path, damage, caplog):
    store = DiskCache("fn", tmp_path)
    store.path("e1").parent.mkdir(parents=True)
    store.path("e1").write_text(damage)
    with caplog.at_level(logging.WARNING, logger="triton_dist_tune"):
        assert store.load("e1", SPACE) is None
    assert "tuning again" in caplog.text


def test_a_file_for_another_space_is_a_miss(tmp_path):
    store = DiskCache("fn", tmp_path)
    store.store("e1", decision(), SPACE)
    assert store.load("e1", SPACE + "\n{a: 3}") is None


def test_other_versions_warn_or_retune(tmp_path, monkeypatch, caplog):
    store = DiskCache("fn", tmp_path)
    path = store.store("e1", decision(), SPACE)
    data = json.loads(path.read_text())
    data["versions"]["triton"] = "0.0.1"
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="triton_dist_tune"):
        assert store.load("e1", SPACE)["index"] == 1
    assert "other versions" in caplog.text
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_VERSION_CHECK", "1")
    assert store.load("e1", SPACE) is None


def test_entry_ids_depend_on_source_key_space_and_group_size():
    base = entry_id("def f(): pass", "(4,)", SPACE, 2)
    assert base == entry_id("def f(): pass", "(4,)", SPACE, 2)
    others = {entry_id("def g(): pass", "(4,)", SPACE, 2), entry_id("def f(): pass", "(8,)", SPACE, 2),
              entry_id("def f(): pass", "(4,)", SPACE + "x", 2), entry_id("def f(): pass", "(4,)", SPACE, 4)}
    assert base not in others and len(others) == 4


def test_many_concurrent_writers_leave_one_valid_file(tmp_path):
    store = DiskCache("fn", tmp_path)

    def write(i):
        for _ in range(20):
            store.store("e1", decision(i % 2), SPACE)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.load("e1", SPACE)["index"] in (0, 1)
    assert [p.name for p in (tmp_path / "fn").iterdir()] == ["e1.json"]


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path))
    assert cache.cache_root() == tmp_path
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_CACHE_DIR")
    assert cache.cache_root().parts[-2:] == (".triton_dist", "autotune")


def _gpu_visible(monkeypatch, visible: bool) -> None:
    """This process sees a GPU, or none (``CUDA_VISIBLE_DEVICES=""``, a login node), as far as the tuner can ask."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: visible)
    cache.versions.cache_clear()


def test_the_versions_a_decision_records_do_not_depend_on_whether_a_gpu_is_visible(tmp_path, monkeypatch, capsys):
    """NCCL's version is a constant of torch's build, read without a device. It was read only where a GPU was
    visible ("None" elsewhere), so a decision tuned on a GPU host read as tuned under other versions wherever none
    was (a login node sharing the cache folder, ``CUDA_VISIBLE_DEVICES=""``): ``list`` marked it STALE, and
    ``clear --stale`` deleted it."""
    from triton_dist_tune.cli.commands import main

    _gpu_visible(monkeypatch, True)
    tuned_on_gpu = cache.versions()
    path = DiskCache("fn", tmp_path).store("e1", {**decision(), "function": "fn", "created": 0.0}, SPACE)
    _gpu_visible(monkeypatch, False)
    try:
        assert cache.versions() == tuned_on_gpu
        assert main(["clear", "--stale", "--cache-dir", str(tmp_path)]) == 0
        assert path.exists(), capsys.readouterr()
    finally:
        cache.versions.cache_clear()


# -- the versions record: ``list`` and ``show`` without importing torch --------------------------------------------

#: runs the command line in a fresh interpreter, once per command (separated by ``--then``), then says on stderr
#: whether torch was imported
CLI_THEN_TORCH = """
import runpy, sys
args, commands = sys.argv[1:], [[]]
for arg in args:
    commands.append([]) if arg == "--then" else commands[-1].append(arg)
for command in commands:
    sys.argv = ["triton-dist-tune", *command]
    try:
        runpy.run_module("triton_dist_tune", run_name="__main__")
    except SystemExit as exc:
        assert not exc.code, exc.code
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
"""


def test_list_and_show_read_the_versions_from_the_cache_folders_record_and_import_no_torch(tmp_path, capsys):
    """``list`` and ``show`` imported torch for the versions column: about 6 s on an H200 host to print a few lines.
    A stored decision records the versions beside it, named by the installed software; a display reads that record;
    what deletes (``clear --stale``) still reads the versions exactly."""
    import subprocess
    import sys

    from triton_dist_tune.cli.commands import main
    from triton_dist_tune.disk import versions as vs

    path = DiskCache("fn", tmp_path).store("e1", {**decision(), "function": "fn", "created": 0.0}, SPACE)
    record = vs.record_path(tmp_path, vs.installed())
    assert [p.name for p in tmp_path.glob(".versions-*")] == [record.name]
    # the cache folder's JSON files are its decisions (what scripts, and tests, count): the record is not one
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json")] == ["fn/e1.json"]
    assert json.loads(record.read_text())["versions"] == cache.versions()

    # a fresh interpreter: list and show, and no torch imported
    done = subprocess.run([sys.executable, "-c", CLI_THEN_TORCH, "list", "--cache-dir", str(tmp_path), "--then",
                           "show", "--cache-dir", str(tmp_path), "fn/e1.json"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "torch imported: False" in done.stderr, done.stderr
    assert " current " in done.stdout and "versions: current" in done.stdout.splitlines(), done.stdout

    # no record (a cache folder the tuner never wrote to): read exactly, then recorded for the next display
    record.unlink()
    assert vs.recorded_versions(tmp_path) == cache.versions()
    assert json.loads(record.read_text())["versions"] == cache.versions()
    # a record that cannot be read: read exactly, and recorded again
    record.write_bytes(b"\x00{")
    assert vs.recorded_versions(tmp_path) == cache.versions()
    assert json.loads(record.read_text())["versions"] == cache.versions()

    # a display shows what the record says; deleting reads exactly and keeps the decision
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "versions": {**data["versions"], "torch": "0.0"}}))
    capsys.readouterr()
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    assert "STALE" in capsys.readouterr().out
    assert main(["clear", "--stale", "--cache-dir", str(tmp_path)]) == 0
    assert path.exists()


def test_the_installed_softwares_fingerprint_changes_when_a_packages_library_is_rewritten(tmp_path, monkeypatch):
    """A record is read only under the software it was written under: rewriting a package's compiled library (an
    upgrade, a reinstall) names another record."""
    from triton_dist_tune.disk import versions as vs

    package = tmp_path / "site" / "tdt_fingerprint_pkg"
    (package / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "lib" / "libthing.so").write_bytes(b"one")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    before = vs.installed(("tdt_fingerprint_pkg", "tdt_no_such_package"))
    assert "libthing.so" in before and "tdt_no_such_package: not found" in before
    assert vs.installed(("tdt_fingerprint_pkg", "tdt_no_such_package")) == before
    replaced = package / "lib" / "libthing.so.new"
    replaced.write_bytes(b"two, longer")
    replaced.replace(package / "lib" / "libthing.so")
    after = vs.installed(("tdt_fingerprint_pkg", "tdt_no_such_package"))
    assert after != before and vs.record_path(tmp_path, after) != vs.record_path(tmp_path, before)
