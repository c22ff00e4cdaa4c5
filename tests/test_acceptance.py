"""The GPU acceptance script's plumbing on CPU (benchmarks/gpu/acceptance.py --cpu): real launch.sh runs of the MoE
campaign's CPU form and the command line over what it wrote, the table, and the vLLM file checked as vLLM reads it."""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import pytest
from harness import ROOT, base_env

SCRIPT = ROOT / "benchmarks" / "gpu" / "acceptance.py"


def acceptance():
    spec = importlib.util.spec_from_file_location("acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("acceptance", module)  # its dataclasses look their module up
    spec.loader.exec_module(sys.modules["acceptance"])
    return sys.modules["acceptance"]


@pytest.mark.timeout(200)
def test_the_acceptance_script_runs_the_campaign_and_the_cli_on_cpu_and_writes_its_table(tmp_path):
    from test_newcomer import run_command

    out = tmp_path / "out"
    done = run_command([sys.executable, str(SCRIPT), "--cpu", "--out", str(out), "--work", str(tmp_path / "work"),
                        "--only", "moe_campaign,cli_export_sglang,cli_list,cli_plot_function"], tmp_path, base_env(),
                       timeout=180)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    rows = {r["name"]: r for r in json.loads((out / "acceptance.json").read_text())["rows"]}
    assert list(rows) == ["moe_campaign", "cli_export_sglang", "cli_list", "cli_plot_function"]
    assert all(r["ok"] and r["status"] == 0 and r["seconds"] > 0 for r in rows.values()), rows
    assert rows["moe_campaign"]["figure"].startswith("3 batch sizes in ")
    # the command's seconds outside its keys: before the example's imports, its own steps, and after its RESULT
    said = re.search(r"; besides it: start ([0-9.]+), imports [0-9.]+, setup [0-9.]+, checks [0-9.]+, export [0-9.]+, "
                     r"exit ([0-9.]+) s$", rows["moe_campaign"]["figure"])
    assert said and 0 < float(said[1]) + float(said[2]) < rows["moe_campaign"]["seconds"], rows["moe_campaign"]
    assert any(f.startswith("vLLM file E=4,N=12,device_name=") for f in rows["moe_campaign"]["files"])  # N: w2.shape[2]
    assert rows["cli_export_sglang"]["files"][0].startswith("SGLang file sglang/configs/triton_"), rows
    assert "SGLANG_MOE_CONFIG_DIR=" in rows["cli_export_sglang"]["figure"], rows
    assert rows["cli_list"]["figure"].startswith("3 decision(s) in ")
    assert (out / "function.png").read_bytes()[:4] == b"\x89PNG"
    table = (out / "acceptance.md").read_text()
    assert "| moe_campaign | `bash launch.sh --cpu examples/moe_gemm.py --tiny --campaign --export-vllm " in table
    assert table.count("| OK |") == 4 and (out / "logs" / "moe_campaign.out").is_file()


def test_the_steps_run_launch_sh_with_this_scripts_interpreter_unless_the_caller_names_one(tmp_path, monkeypatch):
    """The ranks run the interpreter that runs the script (``PYTHON``, which launch.sh reads), so the SGLang step's
    folder, named by the Triton the ranks tuned under, is the one the script looks in. Found running the suite from a
    virtual environment (torch 2.14.1, Triton 3.8.0): launch.sh took ``python3`` from PATH (Triton 3.9.0), and the
    step failed (``0 JSON files in .../configs/triton_3_8_0``)."""
    module = acceptance()
    ctx = module.Context(tmp_path / "out", tmp_path / "work", True, 0, [16], False)
    monkeypatch.delenv("PYTHON", raising=False)
    assert module.step_env(ctx, "moe_campaign")["PYTHON"] == sys.executable
    monkeypatch.setenv("PYTHON", "/opt/other/bin/python3")
    assert module.step_env(ctx, "moe_campaign")["PYTHON"] == "/opt/other/bin/python3"


def test_the_vllm_check_reads_the_file_as_vllm_does_and_names_what_is_wrong(tmp_path):
    check = acceptance().vllm_file
    good = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 3}
    folder = tmp_path / "vllm"
    folder.mkdir()
    path = folder / "E=8,N=3584,device_name=NVIDIA_H200.json"
    path.write_text(json.dumps({"16": good, "256": good}))
    assert check(folder, 8, 3584, "NVIDIA H200", [16, 256]) == (path, [])
    path.write_text(json.dumps({"16": good, "256": {**good, "num_warps": "4"}}))
    _, problems = check(folder, 8, 3584, "NVIDIA H100", [16, 256, 512])
    assert len(problems) == 3, problems  # the device in the name, a batch size missing, a value not an int
    path.rename(folder / "moe.json")
    assert "not vLLM's" in check(folder, 8, 3584, "NVIDIA H200", [16, 256])[1][0]


def test_the_acceptance_counts_only_the_gpus_cuda_visible_devices_leaves(tmp_path, monkeypatch):
    """On a 2-GPU host, ``CUDA_VISIBLE_DEVICES=0`` runs the one-GPU steps on one GPU (the other one busy with other
    work): the script counted every GPU nvidia-smi lists, so its table said 2 GPUs and it ran the 2-GPU steps, which
    launch.sh then started on one. nvidia-smi does not run here: a script of that name prints what it prints on such
    a host."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '0, NVIDIA H200, 143771 MiB, 580.159.04'\n"
                    "echo '1, NVIDIA H200, 143771 MiB, 580.159.04'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{base_env()['PATH']}")
    module = acceptance()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert module.visible_gpus() == ["NVIDIA H200, 143771 MiB, 580.159.04"] * 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert module.visible_gpus() == ["NVIDIA H200, 143771 MiB, 580.159.04"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert module.visible_gpus() == []


def test_a_step_that_says_skipped_is_marked_skipped_in_the_table_not_ok(tmp_path):
    """The fla example exits 0 with ``skipped: needs fla-core and a GPU`` where fla-core is missing (every GPU host
    so far): the table said OK there, as if the example had run. Now it says ``skipped``; a failing step and one not
    run read as before."""
    module = acceptance()
    rows = [module.Row("fla", "bash launch.sh examples/fla_contextual.py", 0, 3.6, figure="skipped: needs fla-core "
                       "and a GPU"),
            module.Row("fla_one_process", "python3 examples/fla_contextual.py", 0, 9.0,
                       figure="fla chunk_gla rank 0: first call (tuning) 20.1 s"),
            module.Row("quickstart", "bash launch.sh examples/quickstart.py", 1, 2.0, problems=["exit status 1"]),
            module.Row("ag_gemm", "needs 2 GPUs; this machine has 1", None, 0.0)]
    assert [r.verdict for r in rows] == ["skipped", "OK", "FAIL: exit status 1", "not run"]
    assert [r.ok for r in rows] == [True, True, False, True] and [r.skipped for r in rows] == [True] + [False] * 3
    ctx = module.Context(out=tmp_path, work=tmp_path, cpu=True, gpus=0, batches=[], as_written=False)
    module.write_table(ctx, rows, "test", [])
    table = (tmp_path / "acceptance.md").read_text()
    assert "| skipped: needs fla-core and a GPU | skipped |" in table and table.count("| OK |") == 1, table
