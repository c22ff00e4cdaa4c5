"""``triton-dist-tune export --format sglang-moe``: SGLang's fused-MoE config file from cache entries, written into
``DIR/configs/triton_<X_Y_Z>/`` and found and read there as SGLang's ``get_moe_configs`` finds and reads it with
``SGLANG_MOE_CONFIG_DIR=DIR`` (its rules are written out below from SGLang's releases, not from this package's).
The entries are written as the tuner writes them; the example's campaign and its file: test_moe_example.py."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from harness import base_env, run_cli

from triton_dist_tune.cli.commands import main
from triton_dist_tune.disk import sglang_moe
from triton_dist_tune.disk.cache import versions, write_json_atomic

TILE = "{{BLOCK_SIZE_K: {k}, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 3, num_warps: 4}}"
#: the Triton this process runs, which the entries below record (as the tuner's do)
TRITON = versions()["triton"]
H200_NVL = "NVIDIA H200 NVL"


def decision(cache: Path, key: str, config: str, gpu: str = H200_NVL, function: str = "moe",
             created: float | None = None, **extra: object) -> Path:
    """One decision as the tuners write it (the given config chosen), its file last written at ``created``."""
    created = time.time() - 60 if created is None else created
    data = {"format": 2, "function": function, "key": key, "index": 0, "config": config, "time_ms": 1.0,
            "margin": 0.1, "near_tie": False, "runner_up": 1, "timing": "steady", "rounds": 2, "group_size": 2,
            "group": "default", "created": created, "versions": versions(), "gpu": gpu, "gpu_count": 8,
            "space": "abc", "origin": "/src/prog.py:moe", "measurements": [], **extra}
    name = hashlib.sha1(repr((function, key, gpu, sorted(extra.items(), key=str))).encode()).hexdigest()[:20]
    path = write_json_atomic(cache / function / f"{name}.json", data)
    os.utime(path, (created, created))
    return path


def sglang_file_name(experts: int, n: int, device: str, dtype: str | None = None,
                     block: tuple[int, int] | None = None, per_channel: bool = False, down: bool = False) -> str:
    """The name SGLang 0.5.5 to 0.5.23 look up (``get_config_file_name``), from its rules: the device's name with
    each space one '_' and nothing else; the block shape as a Python list's text; then the per-channel and _down
    parts."""
    return (f"E={experts},N={n},device_name={device.replace(' ', '_')}" + (f",dtype={dtype}" if dtype else "")
            + (f",block_shape={[block[0], block[1]]}" if block else "")
            + (",per_channel_quant=True" if per_channel else "") + ("_down" if down else "") + ".json")


def sglang_load(config_dir: Path, triton: str, name: str) -> dict[int, dict]:
    """What SGLang 0.5.3 on does with ``SGLANG_MOE_CONFIG_DIR=config_dir`` running Triton ``triton``: open
    ``<config_dir>/configs/triton_<triton, '.' as '_'>/<name>``, then int keys."""
    path = os.path.join(config_dir, "configs", f"triton_{triton.replace('.', '_')}", name)
    with open(path) as f:
        return {int(k): v for k, v in json.load(f).items()}


def files_under(folder: Path) -> list[str]:
    """Every file under ``folder``, as paths relative to it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def export(cache: Path, out: Path, *extra: str) -> int:
    """``export OUT --format sglang-moe`` of function ``moe`` for E=8, N=3584, through the command line's main."""
    return main(["export", str(out), "--format", "sglang-moe", "--cache-dir", str(cache), "--function", "moe",
                 "--experts", "8", "--n", "3584", *extra])


def test_export_sglang_moe_writes_the_file_sglang_loads(tmp_path, capsys):
    cache, out = tmp_path / "cache", tmp_path / "sglang"
    for m, (bm, bk) in {1: (16, 64), 16: (16, 128), 256: (64, 128)}.items():
        decision(cache, f"({m}, 8, 3584, 4096, 2, 'torch.bfloat16')", TILE.format(m=bm, k=bk))
    decision(cache, "(64, 16, 3584, 4096, 2, 'torch.bfloat16')", TILE.format(m=32, k=64))  # another problem
    assert export(cache, out, "--where", "1=8") == 0
    said = capsys.readouterr().out
    assert "3 tuned batch size(s) 1, 16, 256" in said and "SGLang serves any other batch size" in said, said
    # one line says what to set and which Triton, with the folder as an absolute path
    assert f"SGLang reads it with SGLANG_MOE_CONFIG_DIR={out.absolute()} when it runs Triton {TRITON}" in said, said
    # SGLang never renames an H200 NVL (vLLM 0.11.1 on do: NVIDIA_H200)
    name = sglang_file_name(8, 3584, H200_NVL)
    assert name == "E=8,N=3584,device_name=NVIDIA_H200_NVL.json"
    assert files_under(out) == [f"configs/triton_{TRITON.replace('.', '_')}/{name}"]
    configs = sglang_load(out, TRITON, name)
    assert list(configs) == [1, 16, 256]
    assert configs[256] == {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                            "num_warps": 4, "num_stages": 3}
    assert all(type(v) is int for c in configs.values() for v in c.values())
    # the same decisions for vLLM: another name, in DIR itself
    vllm = tmp_path / "vllm"
    assert main(["export", str(vllm), "--format", "vllm-moe", "--cache-dir", str(cache), "--function", "moe",
                 "--experts", "8", "--n", "3584", "--where", "1=8"]) == 0
    capsys.readouterr()
    assert files_under(vllm) == ["E=8,N=3584,device_name=NVIDIA_H200.json"]
    assert (vllm / "E=8,N=3584,device_name=NVIDIA_H200.json").read_text() == \
        (out / f"configs/triton_{TRITON.replace('.', '_')}" / name).read_text()


def test_sglang_names_the_block_shape_with_its_space_then_per_channel_quant_then_down(tmp_path, capsys):
    """SGLang's name: ``,block_shape=[128, 128]`` (the list's text: vLLM 0.7.2 on take the space out), then
    ``,per_channel_quant=True``, then ``_down`` before ``.json``; a run of spaces in the device's name is one '_' per
    space; ``--triton-version`` names the folder."""
    cache, out = tmp_path / "cache", tmp_path / "sglang"
    decision(cache, "(16, 8)", TILE.format(m=16, k=64), gpu="NVIDIA  A100-SXM4-80GB")
    assert export(cache, out, "--dtype", "fp8_w8a8", "--block-shape", "128", "128", "--per-channel-quant", "--down",
                  "--triton-version", "3.4.0", "--json") == 0
    done = json.loads(capsys.readouterr().out)
    name = sglang_file_name(8, 3584, "NVIDIA  A100-SXM4-80GB", "fp8_w8a8", (128, 128), per_channel=True, down=True)
    assert name == ("E=8,N=3584,device_name=NVIDIA__A100-SXM4-80GB,dtype=fp8_w8a8,block_shape=[128, 128],"
                    "per_channel_quant=True_down.json")
    assert done["file"] == str(out / "configs" / "triton_3_4_0" / name) and done["batch_sizes"] == [16], done
    assert done["triton_version"] == "3.4.0" and done["config_dir"] == str(out.absolute()) and done["down"], done
    assert list(sglang_load(out, "3.4.0", name)) == [16]
    assert files_under(out) == [f"configs/triton_3_4_0/{name}"]
    assert export(cache, out, "--dtype", "int8_w8a8", "--triton-version", "3.4.0", "--down") == 0
    said = capsys.readouterr().out
    assert "tiles the down projection's GEMM with this _down file's entries" in said, said
    assert list(sglang_load(out, "3.4.0", sglang_file_name(8, 3584, "NVIDIA  A100-SXM4-80GB", "int8_w8a8",
                                                           down=True))) == [16]


def test_the_triton_folder_is_the_decisions_triton_or_the_one_given(tmp_path, capsys):
    """The folder is named by the Triton the decisions record (SGLang looks first in its own Triton's); where they
    record none, or several, or a version that is not numbers alone (SGLang 0.5.12 on read every folder's name as
    numbers, and ``triton_3_5_0+git1`` would stop its lookup), the export asks for ``--triton-version``: exit status
    2, one line, nothing written."""
    for name, records, says in (("none", [{}], "the decisions record none"),
                                ("several", [{"triton": "3.4.0"}, {"triton": "3.5.0"}], "several (3.4.0, 3.5.0)"),
                                ("local", [{"triton": "3.5.0+git1"}], "'3.5.0+git1' is no Triton version")):
        cache, out = tmp_path / name, tmp_path / f"{name}_out"
        for m, recorded in zip((1, 16), records * 2, strict=False):
            others = {k: v for k, v in versions().items() if k != "triton"}
            decision(cache, f"({m}, 8)", TILE.format(m=16, k=64), versions={**others, **recorded})
        assert export(cache, out, "--dtype", "bfloat16") == 2, name
        err = capsys.readouterr().err
        assert "--triton-version" in err and says in err and len(err.strip().splitlines()) == 1, (name, err)
        assert not out.exists(), name
        assert export(cache, out, "--dtype", "bfloat16", "--triton-version", "3.5.0") == 0, name
        assert files_under(out) == ["configs/triton_3_5_0/E=8,N=3584,device_name=NVIDIA_H200_NVL.json"], name
        assert list(sglang_load(out, "3.5.0", sglang_file_name(8, 3584, H200_NVL))) == [1, 16], name
        capsys.readouterr()
    for bad in ("3.5.0+git1", "latest", ""):
        with pytest.raises(SystemExit) as stopped:
            export(tmp_path / "none", tmp_path / "bad", "--dtype", "bfloat16", "--triton-version", bad)
        assert stopped.value.code == 2 and "--triton-version" in capsys.readouterr().err, bad
    assert not (tmp_path / "bad").exists()
    assert sglang_moe.triton_folder(" 3.4.0 ") == "triton_3_4_0"


def test_sglang_export_leaves_out_provisional_and_superseded_decisions(tmp_path, capsys):
    """As the vLLM export: a decision cut short by the time budget, and one superseded by a newer decision of the
    same key tuned for another config space, stay out of the file, and the command says so."""
    cache, out, now = tmp_path / "cache", tmp_path / "out", time.time()
    decision(cache, "(1, 'torch.bfloat16')", TILE.format(m=16, k=64), created=now - 100, space="old")
    decision(cache, "(1, 'torch.bfloat16')", TILE.format(m=32, k=64), created=now - 50, space="new")
    decision(cache, "(16, 'torch.bfloat16')", TILE.format(m=16, k=128), provisional=True)
    assert export(cache, out) == 0
    said = capsys.readouterr().out
    assert "skipped 1 superseded decision(s)" in said and "skipped 1 provisional decision(s)" in said, said
    configs = sglang_load(out, TRITON, sglang_file_name(8, 3584, H200_NVL))
    assert list(configs) == [1] and configs[1]["BLOCK_SIZE_M"] == 32, configs


def test_options_of_one_format_are_refused_with_the_other(tmp_path, capsys):
    """``--vllm-version`` names vLLM's rules, ``--triton-version``, ``--per-channel-quant`` and ``--down`` SGLang's
    folder and name parts: given with the other format, each is refused (exit status 2, one line naming the format
    it is for), nothing written."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    decision(cache, "(16, 'torch.bfloat16')", TILE.format(m=16, k=64))
    base = ["export", str(out), "--cache-dir", str(cache), "--function", "moe", "--experts", "8", "--n", "64"]
    for fmt, extra, flags, other in (
            ("sglang-moe", ["--vllm-version", "0.11.0"], "--vllm-version is", "vllm-moe"),
            ("vllm-moe", ["--per-channel-quant"], "--per-channel-quant is", "sglang-moe"),
            ("vllm-moe", ["--triton-version", "3.4.0", "--down"], "--triton-version, --down are", "sglang-moe")):
        assert main([*base, "--format", fmt, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert f"{flags} for --format {other} alone" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    assert main([*base, "--format", "vllm-moe", "--vllm-version", "0.11.0"]) == 0
    assert main([*base, "--format", "sglang-moe", "--down"]) == 0
    capsys.readouterr()
    assert len(files_under(out)) == 2


@pytest.mark.timeout(120)
def test_sglang_export_writes_only_into_its_folders_and_says_what_is_wrong_in_one_line(tmp_path):
    """The real command (``python -m triton_dist_tune``): a device name with '/' (SGLang reads a folder there) and
    an empty one are refused; a file where ``configs/`` or the Triton folder must be, a FIFO where the file must be,
    and a target inside the cache folder are refused; each in one line with exit status 2, nothing written."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    decision(cache, "(16, 'torch.bfloat16')", TILE.format(m=16, k=64), gpu="H100/../../escaped")
    args = ["--format", "sglang-moe", "--function", "moe", "--experts", "8", "--n", "64", "--triton-version",
            "3.4.0", "--cache-dir", str(cache)]

    def refused(target: Path, *extra: str) -> str:
        done = run_cli(["export", str(target), *args, *extra], base_env(), timeout=100)
        assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        return done.stderr

    said = refused(out)
    assert "holds '/'" in said and "SGLang reads as a folder" in said and "--device-name" in said, said
    assert "empty" in refused(out, "--device-name", " ")
    assert "inside the cache folder" in refused(cache / "moe", "--device-name", "NVIDIA H100")
    assert not out.exists() and not list(tmp_path.rglob("*escaped*"))
    out.mkdir()
    (out / "configs").write_text("")
    assert f"{out / 'configs'} is not a folder" in refused(out, "--device-name", "NVIDIA H100")
    (out / "configs").unlink()
    (out / "configs").mkdir()
    os.mkfifo(out / "configs" / "triton_3_4_0")
    assert "triton_3_4_0 is not a folder" in refused(out, "--device-name", "NVIDIA H100")
    (out / "configs" / "triton_3_4_0").unlink()
    (out / "configs" / "triton_3_4_0").mkdir()
    os.mkfifo(out / "configs" / "triton_3_4_0" / "E=8,N=64,device_name=NVIDIA_H100.json")
    assert "is a FIFO" in refused(out, "--device-name", "NVIDIA H100")
    (out / "configs" / "triton_3_4_0" / "E=8,N=64,device_name=NVIDIA_H100.json").unlink()
    done = run_cli(["export", str(out), *args, "--device-name", "NVIDIA H100"], base_env(), timeout=100)
    assert done.returncode == 0, done.stderr
    assert files_under(out) == ["configs/triton_3_4_0/E=8,N=64,device_name=NVIDIA_H100.json"]
