"""What the command line refuses, and where it writes: defects a review found, each with the real command that showed
it (before the fix) and shows it fixed.

Cache folders are written as the package's own writers write them (``write_json_atomic``); every command runs as
``python -m triton_dist_tune ...`` in a process of its own (harness.run_cli). Nothing here writes outside the
test's temporary folder: the FIFOs and links are made there.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path

from harness import base_env, run_cli, run_python

from triton_dist_tune.disk.bundles import BUNDLE_FORMAT, BUNDLE_KIND, MAX_BUNDLE_BYTES
from triton_dist_tune.disk.cache import hardware, versions, write_json_atomic
from triton_dist_tune.faults.journal import Journal

TILE = "{{BLOCK_SIZE_K: 64, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 3, num_warps: 4}}"
VLLM = ["--format", "vllm-moe", "--function", "moe", "--experts", "8", "--n", "64", "--dtype", "bfloat16"]


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    """``python -m triton_dist_tune ARGS`` in a process of its own."""
    return run_cli([str(a) for a in args], base_env(), timeout=120)


def one_line(done: subprocess.CompletedProcess, status: int = 2) -> str:
    """The command's stderr, checked to be one line (no traceback) with exit status ``status``."""
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def decision(cache: Path, function: str = "moe", key: str = "(16,)", config: str = TILE.format(m=16),
             **extra: object) -> Path:
    """A format-2 decision as the tuner writes it, named as the tuner names its files (20 hex digits)."""
    hw = hardware()
    data = {"format": 2, "function": function, "key": key, "index": 0, "config": config, "time_ms": 1.0,
            "margin": 0.1, "near_tie": False, "runner_up": 1, "timing": "steady", "rounds": 2, "group_size": 2,
            "group": "default", "created": time.time() - 60, "versions": versions(), "gpu": hw["gpu"],
            "gpu_count": hw["gpu_count"], "space": "abc", "measurements": [], **extra}
    name = hashlib.sha1(repr((function, key)).encode()).hexdigest()[:20]
    return write_json_atomic(cache / function / f"{name}.json", data)


def bundle_of(tmp_path: Path, entries: list[tuple[str, dict]]) -> Path:
    """A bundle file holding ``entries`` ((path, data) each), as ``export`` writes one."""
    return write_json_atomic(tmp_path / "bundle.json", {"kind": BUNDLE_KIND, "format": BUNDLE_FORMAT, "created": 0.0,
                                                       "versions": versions(),
                                                       "entries": [{"path": p, "data": d} for p, d in entries]})


# -- 1: the vLLM file stays in the folder it is given --------------------------------------------------------------


def test_vllm_export_writes_only_into_the_folder_given_whatever_the_device_or_dtype_text(tmp_path):
    """Before: ``--device-name 'H100/../../x'`` (or a cache file's ``gpu`` field, the default) wrote
    ``E=8,N=64,device_name=H100/../../x.json`` outside the folder. Now ``/`` becomes ``_`` as a space does."""
    cache, out = tmp_path / "cache", tmp_path / "a" / "b" / "configs"
    decision(cache, gpu="H100/../../../gpu_escaped")
    done = cli("export", out, *VLLM, "--cache-dir", cache)
    assert done.returncode == 0, done.stderr
    for extra in (["--device-name", "H100/../../../name_escaped"], ["--dtype", "../../../dtype_escaped"],
                  ["--device-name", "..", "--dtype", ".."]):
        done = cli("export", out, *VLLM, *extra, "--cache-dir", cache)
        assert done.returncode == 0, (extra, done.stderr)
    assert not list(tmp_path.glob("*.json")) and not list((tmp_path / "a").glob("*.json"))
    assert sorted(p.name for p in out.iterdir()) == sorted([
        "E=8,N=64,device_name=H100_.._.._.._gpu_escaped.json", "E=8,N=64,device_name=H100_.._.._.._name_escaped.json",
        "E=8,N=64,device_name=H100_.._.._.._gpu_escaped,dtype=.._.._.._dtype_escaped.json",
        "E=8,N=64,device_name=..,dtype=...json"])
    refused = one_line(cli("export", out, *VLLM, "--device-name", " ", "--cache-dir", cache))
    assert "--device-name" in refused and "empty" in refused, refused


# -- 2: export writes a regular file, outside the cache folder ------------------------------------------------------


def test_export_refuses_a_target_that_is_no_regular_file_or_is_inside_the_cache_folder(tmp_path):
    """Before: ``export`` replaced a FIFO (a device file, as root) or a link by a regular file and said it exported;
    ``export`` into the cache folder replaced a decision by the bundle. Now each is refused, saying what it is."""
    cache = tmp_path / "cache"
    mine = decision(cache)
    held = mine.read_bytes()
    fifo, real, link = tmp_path / "fifo", tmp_path / "real.json", tmp_path / "link.json"
    os.mkfifo(fifo)
    real.write_text("{}")
    link.symlink_to(real)
    for target, says in ((fifo, "is a FIFO"), (link, "is a symbolic link"), (mine, "inside the cache folder"),
                         (cache / "b.json", "inside the cache folder")):
        said = one_line(cli("export", target, "--cache-dir", cache))
        assert str(target) in said and says in said, said
    assert fifo.is_fifo() and link.is_symlink() and real.read_text() == "{}" and mine.read_bytes() == held
    assert not (cache / "b.json").exists()
    said = one_line(cli("export", cache / "moe", *VLLM, "--cache-dir", cache))
    assert "inside the cache folder" in said, said
    out = tmp_path / "configs"
    out.mkdir()
    os.mkfifo(out / "E=8,N=64,device_name=NVIDIA_H200.json")
    said = one_line(cli("export", out, *VLLM, "--device-name", "NVIDIA H200", "--cache-dir", cache))
    assert "is a FIFO" in said, said
    assert cli("export", tmp_path / "fine.json", "--cache-dir", cache).returncode == 0


# -- 3: import keeps a newer or finished decision unless forced ------------------------------------------------------


def test_import_keeps_a_newer_or_finished_decision_of_the_same_choice(tmp_path):
    """Before: a bundle's older decision, or a provisional one (cut short by the budget), of the same choice replaced
    the newer, finished one in the cache with exit status 0. Then (a reviewer's) the first mend refused the whole
    bundle, its new decisions too. Now the cache's record is kept and the others are imported; ``--force`` replaces
    it; a finished one replaces a provisional one."""
    cache = tmp_path / "cache"
    mine = decision(cache, created=time.time())
    data = json.loads(mine.read_text())
    rel = f"moe/{mine.name}"
    other = decision(tmp_path / "elsewhere", key="(32,)")
    fresh = (f"moe/{other.name}", json.loads(other.read_text()))
    for theirs in ({**data, "created": data["created"] - 3600}, {**data, "provisional": True,
                                                                  "created": data["created"] + 60}):
        done = cli("import", bundle_of(tmp_path, [(rel, theirs), fresh]), "--cache-dir", cache)
        assert done.returncode == 0 and "1 of the same choice left as they were" in done.stdout, done
        assert json.loads(mine.read_text()) == data and (cache / fresh[0]).exists()
    listed = json.loads(cli("import", tmp_path / "bundle.json", "--json", "--cache-dir", cache).stdout)
    assert listed["kept"] == [rel] and rel not in " ".join(listed["imported"] + listed["unchanged"]), listed
    assert cli("import", tmp_path / "bundle.json", "--force", "--cache-dir", cache).returncode == 0
    assert json.loads(mine.read_text())["provisional"] is True
    finished = {**data, "created": data["created"] - 7200}  # older, but finished where the cache's is provisional
    assert cli("import", bundle_of(tmp_path, [(rel, finished)]), "--cache-dir", cache).returncode == 0
    assert json.loads(mine.read_text()) == finished
    changed = {**data, "index": 1, "config": TILE.format(m=32)}  # another choice: refused without --force
    said = one_line(cli("import", bundle_of(tmp_path, [(rel, changed)]), "--cache-dir", cache), 1)
    assert "refused" in said and "different" in said and rel in said, said


# -- 4: import writes only files named as the tuner names them --------------------------------------------------------


def test_import_refuses_entries_not_named_as_the_tuner_names_them(tmp_path):
    """Before: ``import`` wrote ``moe/mine.json``, which the tuner never reads and ``clear`` never removes."""
    cache = tmp_path / "cache"
    data = json.loads(decision(tmp_path / "here").read_text())
    said = one_line(cli("import", bundle_of(tmp_path, [("moe/mine.json", data)]), "--cache-dir", cache))
    assert "moe/mine.json" in said and "20 hex digits" in said, said
    assert not cache.exists()


# -- 5: show of an ambiguous name ---------------------------------------------------------------------------------


def test_show_of_a_name_of_several_decisions_names_them_not_an_unfinished_tuning(tmp_path):
    """Before: ``show moe`` (two decisions) printed an unrelated unfinished tuning of that folder, exit status 0."""
    cache = tmp_path / "cache"
    first, second = decision(cache, key="(16,)"), decision(cache, key="(32,)")
    journal = Journal(cache / "moe" / "feedfacefeedfacefeed.0123456789.rank0.journal")
    journal.append(0, "started", config="{v: 0}")
    journal.close()
    said = one_line(cli("show", "moe", "--cache-dir", cache))
    assert "names 2 decisions" in said and first.name in said and second.name in said, said
    assert cli("show", "moe/feedface", "--cache-dir", cache).returncode == 0  # the journal's own name still shows it


# -- 6: a value standard JSON has no --------------------------------------------------------------------------------


def test_export_skips_and_names_a_decision_holding_nan(tmp_path):
    """Before: one cache file holding NaN stopped the whole export with ``bad value: Out of range float values``,
    naming no file. Now it is skipped and named (exit status 1), the others exported."""
    cache = tmp_path / "cache"
    good = decision(cache, key="(16,)")
    bad = decision(cache, key="(32,)")
    bad.write_text(bad.read_text().replace('"time_ms": 1.0', '"time_ms": NaN'))
    done = cli("export", tmp_path / "b.json", "--cache-dir", cache)
    assert done.returncode == 1 and str(bad) in done.stderr and "NaN" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "exported 1 decision(s)" in done.stdout, done.stdout
    held = json.loads((tmp_path / "b.json").read_text())["entries"]
    assert [e["path"] for e in held] == [f"moe/{good.name}"]


# -- 7: a config of several kernels is not one tile ---------------------------------------------------------------


def test_vllm_export_refuses_a_config_that_names_a_tile_entry_twice(tmp_path):
    """Before: ``{a: {BLOCK_SIZE_M: 16, ...}, b: {BLOCK_SIZE_M: 128, ...}}`` exported b's tile alone, silently."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    decision(cache, config="{a: " + TILE.format(m=16) + ", b: " + TILE.format(m=128) + "}")
    said = one_line(cli("export", out, *VLLM, "--cache-dir", cache))
    assert "BLOCK_SIZE_M" in said and "more than once" in said, said
    assert not out.exists()


# -- 8: clear and a folder named as a cache file --------------------------------------------------------------------


def test_clear_leaves_a_folder_named_as_a_cache_file_and_says_why(tmp_path):
    """Before: the dry run listed the folder ``moe/<hex>.json/`` as to be removed, and the real run failed with exit
    status 2 and a false reason ('is the folder read-only?'). Now it is left out, named, and the rest removed."""
    cache = tmp_path / "cache"
    mine = decision(cache)
    folder = cache / "moe" / ("f" * 20 + ".json")
    folder.mkdir()
    dry = cli("clear", "--all", "--dry-run", "--cache-dir", cache)
    assert dry.returncode == 0 and str(folder) not in dry.stdout and f"would remove {mine}" in dry.stdout, dry.stdout
    assert f"{folder}: a folder" in dry.stderr, dry.stderr
    done = cli("clear", "--all", "--cache-dir", cache)
    assert done.returncode == 0 and "read-only" not in done.stderr, done.stderr
    assert not mine.exists() and folder.is_dir() and f"{folder}: a folder" in done.stderr, done.stderr


# -- 9: --gpu as list shows it ---------------------------------------------------------------------------------------


def test_vllm_export_gpu_takes_the_name_list_shows(tmp_path):
    """Before: ``--gpu 'H200 x8'`` or ``--gpu H200`` (what ``list`` shows) matched no decision of an NVIDIA H200."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    decision(cache, gpu="NVIDIA H200", gpu_count=8)
    for gpu in ("H200 x8", "H200", "NVIDIA H200"):
        done = cli("export", out, *VLLM, "--gpu", gpu, "--cache-dir", cache)
        assert done.returncode == 0, (gpu, done.stderr)
    said = one_line(cli("export", out, *VLLM, "--gpu", "A100", "--cache-dir", cache))
    assert "NVIDIA H200" in said and "H200 x8" in said, said


def test_vllm_export_names_the_gpu_counts_of_two_decisions_that_conflict(tmp_path):
    """A reviewer's: two decisions of one batch size tuned on 8 and on 4 H200s were said to differ 'in what the files
    do not record (... the number of ranks ...)': the files record the count, and ``--gpu 'H200 x4'`` picks one. The
    error names both and says so; ``--gpu`` also takes a name without its maker's first word (AMD's too)."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    decision(cache, gpu="NVIDIA H200", gpu_count=8)
    decision(cache, function="moe", key="(16, 'x4')", gpu="NVIDIA H200", gpu_count=4, config=TILE.format(m=32))
    said = one_line(cli("export", out, *VLLM, "--batch-index", "0", "--cache-dir", cache))
    assert "'H200 x4' and 'H200 x8'" in said and "--gpu 'H200 x4'" in said, said
    assert cli("export", out, *VLLM, "--batch-index", "0", "--gpu", "H200 x4", "--cache-dir", cache).returncode == 0
    amd = tmp_path / "amd"
    decision(amd, gpu="AMD Instinct MI300X", gpu_count=8)
    assert cli("export", out, *VLLM, "--gpu", "Instinct MI300X", "--cache-dir", amd).returncode == 0


# -- 10: --function takes a function's plain name ----------------------------------------------------------------


def test_function_option_refuses_what_is_no_plain_folder_name(tmp_path):
    """Before: ``list --function ''`` (or ``moe/``, ``..``, ``.``) passed the unknown-function check (the path was a
    folder) and said 'no decisions'. Now each is an unknown function, naming those there."""
    cache = tmp_path / "cache"
    decision(cache)
    for name in ("", "moe/", "..", ".", "moe/.."):
        said = one_line(cli("list", "--function", name, "--cache-dir", cache))
        assert f"no function {name!r}" in said and "(functions: moe)" in said, said
    assert cli("list", "--function", "moe", "--cache-dir", cache).returncode == 0


# -- 11: a bundle file too large ------------------------------------------------------------------------------------


def test_import_refuses_a_stream_larger_than_the_cap_without_reading_it_all(tmp_path):
    """Before: ``import`` read any file whole (``/dev/zero``: until the OOM killer ended it). Now a stream (a FIFO
    here, fed the cap and 1 MiB more, then closed) is read to the cap and one byte more, then refused naming the
    cap."""
    fifo = tmp_path / "stream.json"
    os.mkfifo(fifo)
    feeder = threading.Thread(target=feed, args=(fifo, MAX_BUNDLE_BYTES + (1 << 20)), daemon=True)
    feeder.start()
    said = one_line(cli("import", fifo, "--cache-dir", tmp_path / "cache"))
    feeder.join(timeout=60)
    assert str(fifo) in said and "more than 256 MiB" in said, said
    assert not (tmp_path / "cache").exists()


def test_a_regular_bundle_file_over_the_streams_cap_is_read_whole(tmp_path, monkeypatch):
    """A reviewer's: the first cap refused regular files over 256 MiB too, which ``export`` writes (301 decisions of
    the README's MoE space: 310 MB), with 'more than a bundle holds'. The cap is for streams alone (here made
    smaller than the bundle, in this process)."""
    from triton_dist_tune.disk import bundles

    entry = decision(tmp_path / "elsewhere")
    path = bundle_of(tmp_path, [(f"moe/{entry.name}", json.loads(entry.read_text()))])
    monkeypatch.setattr(bundles, "MAX_BUNDLE_BYTES", path.stat().st_size // 2)
    (incoming,) = bundles.read_bundle(path)
    assert incoming.path == f"moe/{entry.name}"


def feed(fifo: Path, size: int) -> None:
    """Write ``size`` zero bytes into ``fifo`` (until its reader closes it), then close it."""
    chunk = bytes(1 << 20)
    try:
        with open(fifo, "wb") as f:
            for _ in range(size // len(chunk)):
                f.write(chunk)
    except BrokenPipeError:
        pass


def test_a_fifo_named_as_a_cache_file_is_refused_not_waited_on(tmp_path):
    """A reviewer's: a FIFO named like a cache file held ``list`` and ``clear`` for ever (reading it waited for a
    writer), and the tuner's own read of the entry too (group rank 0, before the broadcast the others wait on). Now
    it is refused at once by its type, as an unreadable file is."""
    from triton_dist_tune.disk.cache import DiskCache

    cache = tmp_path / "cache"
    decision(cache)
    fifo = cache / "moe" / ("a" * 20 + ".json")
    os.mkfifo(fifo)
    done = cli("list", "--cache-dir", cache)
    assert done.returncode == 1 and "a FIFO, not a regular file" in done.stderr and "1 decision" in done.stdout, done
    done = cli("clear", "--all", "--dry-run", "--cache-dir", cache)
    assert "Traceback" not in done.stderr and str(fifo.name) in done.stdout + done.stderr, done
    assert DiskCache("moe", cache).load("a" * 20, "abc", quiet=True) is None


def test_vllm_file_names_replace_each_space_as_vllm_does():
    """A reviewer's: vLLM before 0.26.0 names its files ``device_name.replace(' ', '_')``, one underscore per space;
    the export collapsed runs of spaces and stripped them, naming a file those releases never open. Real names are
    unchanged. From 0.26.0 vLLM itself makes each run of whitespace one ``_`` (the default rules here; the releases'
    rules: test_vllm_export.py::test_device_names_as_each_vllm_release_writes_them)."""
    from triton_dist_tune.disk.vllm_moe import file_name

    for device, expected in (("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3"),
                             ("NVIDIA A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB"), ("NVIDIA  H200", "NVIDIA__H200"),
                             ("AMD Instinct MI300X", "AMD_Instinct_MI300X")):
        assert file_name(8, 64, device, vllm=(0, 11, 0)) == f"E=8,N=64,device_name={expected}.json"
    assert file_name(8, 64, "NVIDIA  H200") == "E=8,N=64,device_name=NVIDIA_H200.json"
    assert file_name(8, 64, "NVIDIA H200", "fp8_w8a8") == "E=8,N=64,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"


def test_a_fifo_in_the_cache_holds_neither_import_nor_the_tuners_write(tmp_path):
    """A reviewer's: after the first FIFO mend, ``import`` (its look at the decision there, and its rollback copy)
    and the tuner's look at the entry before writing it (group rank 0: whether another group chose otherwise) still
    waited for ever on a FIFO named like the entry."""
    cache = tmp_path / "cache"
    entry = decision(tmp_path / "elsewhere")
    rel = f"moe/{entry.name}"
    (cache / "moe").mkdir(parents=True)
    os.mkfifo(cache / rel)
    bundle = bundle_of(tmp_path, [(rel, json.loads(entry.read_text()))])
    said = one_line(cli("import", bundle, "--cache-dir", cache), 1)
    assert "refused" in said and rel in said, said
    done = cli("import", bundle, "--force", "--cache-dir", cache)
    assert done.returncode != 0 and "nothing was imported" in done.stderr and "Traceback" not in done.stderr, done
    script = tmp_path / "tune_over_fifo.py"
    script.write_text(TUNE_OVER_FIFO)
    done = run_python([script], {**base_env(), "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "tuned")}, timeout=120)
    assert done.returncode == 0 and "decided again" in done.stdout, (done.stdout, done.stderr[-2000:])


#: tune once, replace the decision's file by a FIFO, tune again: the second decision is written over it
TUNE_OVER_FIFO = """
import os, pathlib
import triton_dist_tune as tdt

@tdt.autotune([{"a": 1}, {"a": 2}], key_fn=lambda n: n, n_repeat=1, name="over_fifo")
def f(n, *, a):
    return n * a

f(3)
(path,) = pathlib.Path(os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"], "over_fifo").glob("*.json")
path.unlink()
os.mkfifo(path)
f.tuner.decided.clear()
f(3)
assert path.is_file()
print("decided again")
"""


def test_vllm_export_names_a_block_quantized_file_as_vllm_looks_it_up(tmp_path):
    """A reviewer's: vLLM looks up a block-quantized fp8 MoE's file by its block shape; the export had no way to
    name it. ``--block-shape 128 128`` writes it: ``...,dtype=fp8_w8a8,block_shape=[128,128].json``, as vLLM 0.7.2
    to 0.34.0 look it up (the list's text with its spaces taken out; the ``[128, 128]`` first written here is vLLM
    0.7.1's alone: test_vllm_export.py::test_block_shape_is_named_without_its_space_as_vllm_0_7_2_on_looks_it_up)."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    decision(cache, gpu="NVIDIA H200", gpu_count=8)
    args = [a if a != "bfloat16" else "fp8_w8a8" for a in VLLM]
    done = cli("export", out, *args, "--block-shape", "128", "128", "--cache-dir", cache)
    assert done.returncode == 0, done.stderr
    (written,) = out.iterdir()
    assert written.name == "E=8,N=64,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    refused = cli("export", out, *args, "--block-shape", "128", "0", "--cache-dir", cache)
    assert refused.returncode == 2 and "--block-shape" in refused.stderr, refused



# -- what removes unreadable cache files, as list says it ---------------------------------------------------------


def test_the_hint_for_unreadable_files_names_every_clear_that_removes_them_and_each_does(tmp_path):
    """Before, ``list`` said only that 'clear --older-than AGE' or deleting them removes unreadable cache files,
    though ``clear --all`` and ``clear --function F`` of their folder remove them too (and ``--stale`` does not).
    Now the line names each, with their folders; each command it names indeed removes them."""
    cache = tmp_path / "cache"
    good = decision(cache, "moe")
    torn = [cache / folder / f"{'0' * 19}{n}.json" for n, folder in enumerate(("gemm", "moe"))]
    for path in torn:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"format": 2, "key"')
    listed = cli("list", "--cache-dir", cache)
    assert listed.returncode == 1, (listed.stdout, listed.stderr)
    hint = listed.stderr.splitlines()[-1]
    assert hint == ("triton-dist-tune: 2 file(s) skipped: 2 unreadable ('clear --all', 'clear --function F' of their "
                    "folder (gemm, moe), 'clear --older-than AGE' past their age, or deleting them removes them)"), hint
    stale = cli("clear", "--stale", "--cache-dir", cache)  # named nowhere in the line: it removes neither
    assert stale.returncode == 0 and all(p.exists() for p in torn), (stale.stdout, stale.stderr)
    gemm = cli("clear", "--function", "gemm", "--cache-dir", cache)
    assert gemm.returncode == 0 and not torn[0].exists() and torn[1].exists() and good.exists(), gemm.stdout
    hint = gemm.stderr.splitlines()[-1]  # the one left, named as clear skips it
    assert "1 unreadable ('clear --all', 'clear --function moe' (their folder), 'clear --older-than AGE'" in hint, hint
    done = cli("clear", "--all", "--cache-dir", cache)
    assert done.returncode == 0 and not torn[1].exists() and not good.exists(), (done.stdout, done.stderr)
