"""``triton-dist-tune export --format vllm-moe``: vLLM's / SGLang's fused-MoE config file from cache entries (issue
35 item 7). The entries here are written as the tuner writes them; the example's real campaign and its file are
tested in test_moe_example.py."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from triton_dist_tune.cli.commands import main
from triton_dist_tune.disk import moe_file, vllm_moe
from triton_dist_tune.disk.cache import versions, write_json_atomic

TILE = "{{BLOCK_SIZE_K: {k}, BLOCK_SIZE_M: {m}, BLOCK_SIZE_N: 64, GROUP_SIZE_M: 1, num_stages: 3, num_warps: 4}}"


def entry(cache: Path, function: str, key: str, config: str, gpu: str = "NVIDIA H100 80GB HBM3") -> Path:
    """One decision as the tuners write it (two configs measured, the given one chosen)."""
    data = {"format": 2, "function": function, "key": key, "index": 0, "config": config, "time_ms": 1.0,
            "margin": 0.1, "near_tie": False, "runner_up": 1, "timing": "steady", "rounds": 2, "group_size": 2,
            "group": "default", "created": 0.0, "versions": versions(), "gpu": gpu, "gpu_count": 8, "space": "abc",
            "measurements": []}
    name = hashlib.sha1(repr((function, key, gpu)).encode()).hexdigest()[:20]
    return write_json_atomic(cache / function / f"{name}.json", data)


def vllm_load(folder: Path, experts: int, n: int, device_name: str, dtype: str | None = None) -> dict[int, dict]:
    """What vLLM does: the file name from E, N and the device name (:func:`vllm_file_name`), then int keys."""
    with open(folder / vllm_file_name(experts, n, device_name, dtype)) as f:
        return {int(k): v for k, v in json.load(f).items()}


def test_export_vllm_moe_writes_the_file_vllm_loads(tmp_path, capsys):
    cache = tmp_path / "cache"
    for m, (bm, bk) in {1: (16, 64), 16: (16, 128), 256: (64, 128)}.items():
        entry(cache, "moe", f"({m}, 8, 3584, 4096, 2, 'torch.bfloat16')", TILE.format(m=bm, k=bk))
    entry(cache, "moe", "(64, 16, 3584, 4096, 2, 'torch.bfloat16')", TILE.format(m=32, k=64))  # another problem
    entry(cache, "other", "(64,)", "{algo: ring}")
    out = tmp_path / "configs"
    assert main(["export", str(out), "--format", "vllm-moe", "--cache-dir", str(cache), "--function", "moe",
                 "--experts", "8", "--n", "3584", "--where", "1=8"]) == 0
    said = capsys.readouterr().out
    assert "3 tuned batch size(s) 1, 16, 256" in said and "nearest" in said
    configs = vllm_load(out, 8, 3584, "NVIDIA H100 80GB HBM3")
    assert list(configs) == [1, 16, 256]
    assert configs[256] == {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                            "num_warps": 4, "num_stages": 3}
    assert all(type(v) is int for c in configs.values() for v in c.values())
    assert [p.name for p in out.iterdir()] == ["E=8,N=3584,device_name=NVIDIA_H100_80GB_HBM3.json"]
    assert main(["export", str(out), "--format", "vllm-moe", "--cache-dir", str(cache), "--function", "moe",
                 "--experts", "16", "--n", "3584", "--where", "1=16", "--dtype", "fp8_w8a8", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["batch_sizes"] == [64] and done["file"].endswith("E=16,N=3584,device_name=NVIDIA_H100_80GB_HBM3,"
                                                                   "dtype=fp8_w8a8.json")
    assert list(vllm_load(out, 16, 3584, "NVIDIA H100 80GB HBM3", "fp8_w8a8")) == [64]


def test_export_vllm_moe_says_what_is_wrong(tmp_path, capsys):
    cache = tmp_path / "cache"
    entry(cache, "moe", "(16, 8)", TILE.format(m=16, k=64))
    entry(cache, "moe", "(16, 16)", TILE.format(m=32, k=64))
    entry(cache, "algo", "(16,)", "{algo: ring}")
    entry(cache, "b", "(16,)", TILE.format(m=16, k=64), gpu="NVIDIA A100-SXM4-80GB")
    entry(cache, "b", "(32,)", TILE.format(m=16, k=64))
    base = ["export", str(tmp_path / "out"), "--format", "vllm-moe", "--cache-dir", str(cache)]
    cases = [
        (["--experts", "8", "--n", "64"], "needs --function"),
        (["--function", "moe", "--n", "64"], "needs --experts E and --n N"),
        (["--function", "moe", "--experts", "8", "--n", "64"], "batch size 16 has two different decisions"),
        (["--function", "moe", "--experts", "8", "--n", "64", "--where", "1=99"], "no decision of 'moe' matches"),
        (["--function", "moe", "--experts", "8", "--n", "64", "--where", "x"], "--where wants POS=VALUE"),
        (["--function", "algo", "--experts", "8", "--n", "64"], "has no BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K"),
        (["--function", "b", "--experts", "8", "--n", "64"], "pick one with --gpu"),
        (["--function", "moe", "--experts", "8", "--n", "64", "--batch-index", "5"], "holds no batch size"),
    ]
    for extra, expected in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err
        assert expected in err, (extra, err)
    assert not (tmp_path / "out").exists()
    a100 = ["--function", "b", "--experts", "8", "--n", "64", "--gpu", "NVIDIA A100-SXM4-80GB"]
    assert main(base + a100) == 2 and "needs --dtype" in capsys.readouterr().err  # the keys name no dtype
    assert main(base + a100 + ["--dtype", "bfloat16"]) == 0
    assert list(vllm_load(tmp_path / "out", 8, 64, "NVIDIA A100-SXM4-80GB")) == [16]


@pytest.mark.parametrize("sizes", [["--experts", "0", "--n", "64"], ["--experts", "8", "--n", "-3"],
                                   ["--experts", "eight", "--n", "64"]])
def test_export_vllm_moe_refuses_a_size_under_1(tmp_path, capsys, sizes):
    """Before, ``--experts 0 --n -3`` wrote ``E=0,N=-3,device_name=....json``, a file no MoE has and vLLM never
    looks up, with exit status 0. Now argparse's one-line error and exit status 2, and nothing written."""
    cache = tmp_path / "cache"
    entry(cache, "moe", "(16, 8)", TILE.format(m=16, k=64))
    with pytest.raises(SystemExit) as stopped:
        main(["export", str(tmp_path / "out"), "--format", "vllm-moe", "--cache-dir", str(cache), "--function", "moe",
              *sizes])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "a size is at least 1" in err or "is not a whole number" in err, err
    assert not (tmp_path / "out").exists()


def test_vllm_file_names_and_configs():
    assert vllm_moe.file_name(8, 14336, "NVIDIA H200") == "E=8,N=14336,device_name=NVIDIA_H200.json"
    assert vllm_moe.file_name(8, 64, "AMD EPYC 7B13", "float32") == \
        "E=8,N=64,device_name=AMD_EPYC_7B13,dtype=float32.json"
    assert moe_file.dtype_selector("torch.float32") == "float32" and moe_file.dtype_selector("torch.bfloat16") is None
    assert moe_file.batch_of(7) == 7 and moe_file.batch_of("(64, 8, 'x')") == 64
    with pytest.raises(ValueError, match="num_warps"):
        moe_file.tile_config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 16, "GROUP_SIZE_M": 1,
                              "num_warps": "four", "num_stages": 2})
    assert " " not in vllm_moe.device_name("cpu") and vllm_moe.device_name("cpu")


def test_export_names_the_file_as_the_example_and_honours_the_umask(tmp_path, capsys):
    """Issue 40 items 9 and 10: decisions tuned on CPU ranks for float32 are written to the file the example writes
    (this CPU's model, ``dtype=float32``: one function names it), not ``device_name=cpu`` with no dtype (vLLM would
    take float32 configs for its bf16 file); and the file is readable as the umask allows (mkstemp made it 0600)."""
    import os

    cache = tmp_path / "cache"
    for m in (16, 32):
        entry(cache, "moe", f"({m}, 8, 64, 32, 2, 'torch.float32')", TILE.format(m=16, k=32), gpu="cpu")
    old = os.umask(0o022)
    try:
        assert main(["export", str(tmp_path / "out"), "--format", "vllm-moe", "--cache-dir", str(cache),
                     "--function", "moe", "--experts", "8", "--n", "64"]) == 0
    finally:
        os.umask(old)
    capsys.readouterr()
    expected = vllm_moe.config_file(tmp_path / "out", 8, 64, None, "torch.float32")  # as examples/moe_gemm.py
    assert expected.name == f"E=8,N=64,device_name={vllm_moe.device_name('cpu')},dtype=float32.json"
    assert [p.name for p in (tmp_path / "out").iterdir()] == [expected.name]
    assert list(vllm_load(tmp_path / "out", 8, 64, moe_file.cpu_name(), "float32")) == [16, 32]
    assert expected.stat().st_mode & 0o777 == 0o644


def test_export_vllm_moe_leaves_out_provisional_decisions(tmp_path, capsys):
    """A decision cut short by the time budget is provisional: the tuner tunes it again at its next call. vLLM's file
    has no such mark and would serve it for good: the export leaves it out and says so (before: exported)."""
    cache = tmp_path / "cache"
    entry(cache, "moe", "(1, 8, 3584, 4096, 2, 'torch.bfloat16')", TILE.format(m=16, k=64))
    cut = entry(cache, "moe", "(16, 8, 3584, 4096, 2, 'torch.bfloat16')", TILE.format(m=16, k=128))
    write_json_atomic(cut, {**json.loads(cut.read_text()), "provisional": True})
    out = tmp_path / "configs"
    args = ["export", str(out), "--format", "vllm-moe", "--cache-dir", str(cache), "--function", "moe",
            "--experts", "8", "--n", "3584"]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "skipped 1 provisional decision(s) (cut short by the time budget" in said, said
    assert list(vllm_load(out, 8, 3584, "NVIDIA H100 80GB HBM3")) == [1]
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["provisional_skipped"] == [f"moe/{cut.name}"]
    assert main([*args, "--where", "0=16"]) == 2
    assert "no decision of 'moe' matches --where 0=16 but 1 provisional one(s)" in capsys.readouterr().err


# -- the file names of vLLM's releases (read from each release's wheel: fused_moe.py's get_config_file_name, and from
# -- 0.26.0 vllm/utils/platform_utils.py's get_device_name_as_file_name)


def vllm_file_name(experts: int, n: int, device: str, dtype: str | None = None,
                   block: tuple[int, int] | None = None) -> str:
    """The name vLLM 0.26.0 to 0.34.0 opens, from its rules (not from ours): each run of whitespace and '/' in the
    device name is one '_'; a name with the word H200 is NVIDIA_H200; the block shape without a space."""
    name = re.sub(r"[\s/]+", "_", device)
    name = "NVIDIA_H200" if "H200" in name.split("_") else name
    return (f"E={experts},N={n},device_name={name}" + (f",dtype={dtype}" if dtype else "")
            + (f",block_shape=[{block[0]},{block[1]}]" if block else "") + ".json")


def export_names(tmp_path: Path, capsys, gpu: str, *extra: str) -> tuple[int, list[str], str]:
    """Export one decision tuned on ``gpu`` (a fresh cache and folder each call): exit status, the names written,
    what it said (stdout and stderr)."""
    call = len(list(tmp_path.glob("cache*")))
    cache, out = tmp_path / f"cache{call}", tmp_path / f"out{call}"
    entry(cache, "moe", "(16, 8)", TILE.format(m=16, k=64), gpu=gpu)
    status = main(["export", str(out), "--format", "vllm-moe", "--cache-dir", str(cache), "--function", "moe",
                   "--experts", "8", "--n", "64", *extra])
    said = capsys.readouterr()
    return status, sorted(p.name for p in out.iterdir()) if out.exists() else [], said.out + said.err


def test_block_shape_is_named_without_its_space_as_vllm_0_7_2_on_looks_it_up(tmp_path, capsys):
    """A reviewer's: vLLM 0.7.2 to 0.34.0 open ``...,block_shape=[128,128].json`` (the list's text with its spaces
    taken out); the export wrote ``[128, 128]``, which only vLLM 0.7.1 opens. Before 0.7.1 vLLM names no file by
    its block shape: ``--vllm-version 0.7.0 --block-shape`` is refused."""
    fp8 = ("--dtype", "fp8_w8a8", "--block-shape", "128", "128")
    status, names, err = export_names(tmp_path, capsys, "NVIDIA H100 80GB HBM3", *fp8)
    assert status == 0 and names == [vllm_file_name(8, 64, "NVIDIA H100 80GB HBM3", "fp8_w8a8", (128, 128))], err
    assert names == ["E=8,N=64,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json"]
    status, names, err = export_names(tmp_path, capsys, "NVIDIA H100 80GB HBM3", *fp8, "--vllm-version", "0.7.1")
    assert status == 0 and names == ["E=8,N=64,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,"
                                     "block_shape=[128, 128].json"], err
    status, names, err = export_names(tmp_path, capsys, "NVIDIA H100 80GB HBM3", *fp8, "--vllm-version", "0.7.0")
    assert status == 2 and names == [] and "0.7.1" in err and "--block-shape" in err, err


def test_an_h200_of_any_kind_is_named_nvidia_h200_as_vllm_0_11_1_on_looks_it_up(tmp_path, capsys):
    """A reviewer's: vLLM 0.11.1 to 0.34.0 look up the file of any GPU whose name has the word H200 (``NVIDIA H200
    NVL``) as ``device_name=NVIDIA_H200``; the export wrote ``NVIDIA_H200_NVL``, which only vLLM 0.11.0 and before
    open. A GH200 is no H200 (the word is GH200)."""
    status, names, err = export_names(tmp_path, capsys, "NVIDIA H200 NVL", "--dtype", "bfloat16")
    assert status == 0 and names == [vllm_file_name(8, 64, "NVIDIA H200 NVL")] == ["E=8,N=64,device_name=NVIDIA_H200"
                                                                                   ".json"], err
    assert "look up every H200 (NVIDIA H200 NVL here) as NVIDIA_H200" in err, err
    status, names, err = export_names(tmp_path, capsys, "NVIDIA H200 NVL", "--dtype", "bfloat16",
                                      "--vllm-version", "0.11.0")
    assert status == 0 and names == ["E=8,N=64,device_name=NVIDIA_H200_NVL.json"] and "every H200" not in err, err
    status, names, err = export_names(tmp_path, capsys, "NVIDIA H100", "--dtype", "bfloat16",
                                      "--device-name", "NVIDIA GH200 480GB")
    assert status == 0 and names == ["E=8,N=64,device_name=NVIDIA_GH200_480GB.json"], err
    assert vllm_moe.file_name(8, 64, "NVIDIA_H200_NVL") == "E=8,N=64,device_name=NVIDIA_H200.json"


def test_device_names_as_each_vllm_release_writes_them():
    """A reviewer's: vLLM 0.26.0 on make each run of whitespace and '/' one '_' (before: each space one '_', and a '/'
    made the name a path into a folder, no file of the folder). ``--vllm-version`` picks the release's rules."""
    for device, newest, older in (("NVIDIA  A100", "NVIDIA_A100", "NVIDIA__A100"),
                                  ("NVIDIA A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB"),
                                  ("AMD Instinct MI300X", "AMD_Instinct_MI300X", "AMD_Instinct_MI300X"),
                                  ("NVIDIA\tL4 ", "NVIDIA_L4_", "NVIDIA_L4_")):
        expected = f"E=8,N=64,device_name={newest}.json"
        assert vllm_moe.file_name(8, 64, device) == vllm_file_name(8, 64, device) == expected
        assert vllm_moe.file_name(8, 64, device, vllm=(0, 25, 1)) == f"E=8,N=64,device_name={older}.json"
    assert vllm_moe.file_name(8, 64, "GPU / X") == "E=8,N=64,device_name=GPU_X.json"
    with pytest.raises(ValueError, match="0.26.0"):
        vllm_moe.file_name(8, 64, "GPU / X", vllm=(0, 25, 0))


@pytest.mark.parametrize("text", ["latest", "0", "0.x", "1.2.3.4x y", ""])
def test_vllm_version_refuses_what_is_no_release(tmp_path, capsys, text):
    """``--vllm-version`` takes a release (0.11.1, v0.10.1.1, 0.8.5.post1, 0.7); anything else is argparse's one-line
    error, exit status 2, nothing written."""
    with pytest.raises(SystemExit) as stopped:
        export_names(tmp_path, capsys, "NVIDIA H200", "--dtype", "bfloat16", "--vllm-version", text)
    assert stopped.value.code == 2 and "--vllm-version" in capsys.readouterr().err
    assert [vllm_moe.release(t) for t in ("0.11.1", "v0.10.1.1", "0.8.5.post1", "0.7", "0.11.1+cu128")] == [
        (0, 11, 1), (0, 10, 1), (0, 8, 5), (0, 7, 0), (0, 11, 1)]
