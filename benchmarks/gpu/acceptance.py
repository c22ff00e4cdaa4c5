"""Every GPU command the README and the examples' docstrings name, run by one script, with a table of what each did.

On one GPU (or more): the quick start (``bash launch.sh examples/quickstart.py``); the MoE example alone and as the
README's campaign with ``--export-vllm DIR`` (16 batch sizes, as written; the same run stands for the docstring's
``--campaign`` without the export); the flash-linear-attention example through ``launch.sh`` and as one process (it
prints ``skipped: ...`` where fla-core is missing: the table says ``skipped``, not OK; the GPU hosts reach no
package index, so fla-core and einops travel with the tree, unpacked into a folder on ``PYTHONPATH``); and the
command line's SGLang export (docs/campaign.md's command: the file where ``SGLANG_MOE_CONFIG_DIR`` points SGLang,
the vLLM file's configs), ``list``, ``show`` and ``plot`` over what they wrote. On 2 GPUs or more also
``ag_gemm``, ``gemm_rs`` and ``tp_mlp`` (``--nproc 4`` as the README writes it on 4 GPUs or more, one rank per GPU
on 2-3). ``--cpu`` runs the CPU forms of the same commands (gloo ranks, Triton's interpreter, the MoE example's
``--tiny``, ``launch.sh --cpu``): this script's plumbing, tested on CPU.

For each command: its exit status, the files it must write (the decision cache's new entries, rank 0's log, the vLLM
file opened as vLLM's ``get_moe_configs`` opens it and looked up as its ``try_get_optimal_moe_config`` does, the
PNGs), its wall time and one line of the figure it prints. Every command runs from the checkout, as the README's do,
with a fresh HOME (so a fresh decision cache and Triton cache), no ``TRITON_DIST_AUTOTUNE_*`` variable of the
caller's and its own log folder. Written into ``--out``: ``acceptance.md`` (the table; rewritten after every command,
so a run cut short still leaves one), ``acceptance.json``, each command's output (``logs/``), the vLLM file, the
PNGs, and every command's rank logs (``logs/<step>.ranks/``: each key's time breakdown). Exit status 0 when every
command that ran is OK or skipped.

One H200, under the device tool's 600 s limit (about 5 minutes; ``--budget`` stops starting commands after that
many seconds and marks the rest not run)::

    python3 benchmarks/gpu/acceptance.py --out "$OUT" --budget 480

Options: ``--only a,b`` runs those steps only (names in the table), ``--moe-batches 16,256,4096`` a smaller MoE
campaign than the README's (the README's command is then not run as written: the table says so).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VLLM_KEYS = {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"}


@dataclass
class Row:
    """What one command did."""

    name: str
    command: str
    status: int | None  # None: not run
    seconds: float
    files: list[str] = field(default_factory=list)  # what it wrote that was checked
    problems: list[str] = field(default_factory=list)
    figure: str = ""

    @property
    def ok(self) -> bool:
        return self.status is None or (self.status == 0 and not self.problems)

    @property
    def skipped(self) -> bool:
        """Exited 0 without doing its work here (the fla example without fla-core or a GPU): not a failure, and not
        a pass either."""
        return self.status == 0 and not self.problems and self.figure.startswith("skipped:")

    @property
    def verdict(self) -> str:
        """The table's verdict: ``not run``, ``FAIL: <problems>``, ``skipped`` or ``OK``."""
        if self.status is None:
            return "not run"
        if not self.ok:
            return "FAIL: " + "; ".join(self.problems)
        return "skipped" if self.skipped else "OK"


@dataclass
class Context:
    """The run's folders, machine and settings, shared by the steps."""

    out: Path
    work: Path
    cpu: bool
    gpus: int
    batches: list[int]
    as_written: bool  # the MoE campaign is the README's
    current: str = ""  # the step running now
    #: the wall clock (epoch seconds) when the step running now (or last run) was started, and when it ended
    launched: float = 0.0
    ended: float = 0.0
    extra_env: dict[str, str] = field(default_factory=dict)  # --env: set for every step (an arm of an A/B run)

    @property
    def home(self) -> Path:
        return self.work / "home"

    @property
    def cache(self) -> Path:
        return self.home / ".triton_dist" / "autotune"

    @property
    def cli(self) -> list[str]:
        """The command line as the README writes it (``triton-dist-tune``: on PATH, or beside this python, where
        launch.sh installed it), else ``python -m triton_dist_tune`` (this checkout, where nothing installed it)."""
        beside = Path(sys.executable).parent / "triton-dist-tune"
        console = shutil.which("triton-dist-tune") or (str(beside) if beside.is_file() else None)
        return [console] if console else [sys.executable, "-m", "triton_dist_tune"]

    def entries(self) -> set[Path]:
        """The decision cache's entries (one JSON file per decision)."""
        return set(self.cache.glob("*/*.json")) if self.cache.is_dir() else set()


@dataclass
class Step:
    """One command: how to build it, how many GPUs it needs, and what it must have written and printed."""

    name: str
    command: Callable[[Context], list[str]]
    check: Callable[[Context, str, set[Path]], tuple[list[str], list[str], str]]  # (files, problems, figure)
    gpus: int = 1
    timeout: float = 300.0


# -- checks ------------------------------------------------------------------------------------------------------------


def line_of(stdout: str, pattern: str) -> str:
    """The first line of ``stdout`` that matches ``pattern`` (empty: none)."""
    return next((line.strip() for line in stdout.splitlines() if re.search(pattern, line)), "")


def result_of(stdout: str) -> dict:
    """The MoE example's ``RESULT {json}`` line (empty: none)."""
    line = line_of(stdout, r"^RESULT \{")
    return json.loads(line[len("RESULT "):]) if line else {}


def tuned(function: str | None, at_least: int, pattern: str):
    """A check: at least ``at_least`` new decision-cache entries (of ``function``, where named), rank 0's log in the
    step's log folder, and the figure: the first printed line matching ``pattern``."""

    def check(ctx: Context, stdout: str, new: set[Path]) -> tuple[list[str], list[str], str]:
        mine = sorted(p for p in new if function is None or p.parent.name == function)
        functions = ", ".join(sorted({p.parent.name for p in mine}))
        files = [f"{len(mine)} cache entr{'y' if len(mine) == 1 else 'ies'} ({functions})"]
        problems = [] if len(mine) >= at_least else [f"{len(mine)} new cache entries of {function or 'any'}, "
                                                     f"expected {at_least} or more"]
        rank0 = ctx.work / "logs" / ctx.current / "rank-0.log"
        if rank0.is_file():
            files.append("rank-0.log")
        else:
            problems.append(f"no {rank0}")
        figure = line_of(stdout, pattern)
        if not figure:
            problems.append(f"no line matching {pattern!r} printed")
        return files, problems, figure

    return check


def moe_alone(ctx: Context, stdout: str, new: set[Path]) -> tuple[list[str], list[str], str]:
    """A decision and rank 0's log; the figure from the example's ``RESULT`` line."""
    files, problems, _ = tuned("moe_gemm", 1, r"^RESULT ")(ctx, stdout, new)
    r = result_of(stdout)
    if not r.get("same_on_every_rank"):
        problems.append("not the same choice on every rank")
    figure = (f"M={r['tokens']}: {r['kept']} of {r['space']} configs kept, tuned in {r['tuning_s']:.1f} s, chose "
              f"{r['choices'][str(r['tokens'])]}, max rel err {r['max_error']:.1e}") if r else ""
    return files, problems, figure


def vllm_file(folder: Path, experts: int, n: int, device: str, batches: list[int]) -> tuple[Path | None, list[str]]:
    """The one file in ``folder``, checked as vLLM reads it: its name from E, N and the device name
    (``get_config_file_name`` of vLLM 0.26.0 to 0.34.0: each run of whitespace and '/' one underscore, NVIDIA_H200 for
    a name with the word H200, ``,dtype=...`` where not bf16/fp16), read with int keys
    (``get_moe_configs``), one entry per batch size with the six tile keywords as ints, and the nearest batch size's
    entry found for any M (``try_get_optimal_moe_config``)."""
    found = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if len(found) != 1:
        return None, [f"{len(found)} JSON files in {folder}, expected 1"]
    path, problems = found[0], []
    part = re.sub(r"[\s/]+", "_", device)
    part = "NVIDIA_H200" if "H200" in part.split("_") else part
    expected = rf"E={experts},N={n},device_name={re.escape(part)}(,dtype=\w+)?\.json"
    if not re.fullmatch(expected, path.name):
        problems.append(f"file name {path.name!r} is not vLLM's for E={experts}, N={n}, {device!r}")
    with open(path) as f:
        configs = {int(key): value for key, value in json.load(f).items()}
    if sorted(configs) != sorted(batches):
        problems.append(f"batch sizes {sorted(configs)}, expected {sorted(batches)}")
    for batch, config in configs.items():
        if set(config) != VLLM_KEYS or not all(type(v) is int and v > 0 for v in config.values()):
            problems.append(f"entry {batch}: {config} is not the six tile keywords as positive ints")
    for m in (1, 300, 10**6):  # vLLM's lookup: the entry of the nearest batch size
        if configs and set(configs[min(configs, key=lambda x: abs(x - m))]) != VLLM_KEYS:
            problems.append(f"no usable entry for M={m}")
    return path, problems


def device_name(cpu: bool) -> str:
    """The device name vLLM names the file after: the GPU's (as nvidia-smi and torch say it), or the CPU model's
    from /proc/cpuinfo, as the example names it on CPU ranks."""
    if not cpu:
        return run_text(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"]).strip()
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if line.startswith("model name")]
    import platform

    return names[0] if names and names[0] else platform.processor() or platform.machine()


def moe_campaign(ctx: Context, stdout: str, new: set[Path]) -> tuple[list[str], list[str], str]:
    """Every batch size decided on every rank alike, and the vLLM file (:func:`vllm_file`), copied into OUT."""
    # the batch size of the single run (M = 256; 20 on CPU) is found in the cache, not tuned again
    files, problems, _ = tuned("moe_gemm", len(ctx.batches) - 1, r"^RESULT ")(ctx, stdout, new)
    sys.path.insert(0, str(ROOT))
    from examples.moe_kernels import CPU_PROBLEM, GPU_PROBLEM, config_file_n

    problem = CPU_PROBLEM if ctx.cpu else GPU_PROBLEM
    path, found = vllm_file(ctx.work / "vllm", problem["experts"], config_file_n(problem), device_name(ctx.cpu),
                            ctx.batches)
    problems += found
    if path is not None:
        shutil.copy(path, ctx.out / path.name)
        files.append(f"vLLM file {path.name}")
    r = result_of(stdout)
    if r and (r["keys"] != len(ctx.batches) or r["failed"] or not r["same_on_every_rank"]):
        problems.append(f"{r['keys']} keys, {r['failed']} failed, same on every rank: {r['same_on_every_rank']}")
    figure = (f"{r['keys']} batch sizes in {r['campaign_s']:.1f} s ({r['failed']} failed), max rel err "
              f"{r['max_error']:.1e}" + ("" if ctx.as_written else " (--batches: not the README's 16)")
              + phases_text(r.get("phases"), outside(ctx, r.get("clock")))) if r else ""
    return files, problems, figure


def sglang_export(ctx: Context, stdout: str, new: set[Path]) -> tuple[list[str], list[str], str]:
    """docs/campaign.md's SGLang command after the campaign: one file, where SGLang looks with
    ``SGLANG_MOE_CONFIG_DIR`` set to the folder (``configs/triton_<X_Y_Z>/``, this Triton's version), named as SGLang
    names it (each space one underscore, no H200 rule), holding the vLLM file's configs."""
    import triton

    where = ctx.work / "sglang" / "configs" / ("triton_" + triton.__version__.replace(".", "_"))
    found = sorted(where.glob("*.json")) if where.is_dir() else []
    if len(found) != 1:
        return [], [f"{len(found)} JSON files in {where}, expected 1"], ""
    path, problems = found[0], []
    if f",device_name={device_name(ctx.cpu).replace(' ', '_')}" not in path.name:
        problems.append(f"file name {path.name!r} does not hold SGLang's device name")
    vllm = sorted((ctx.work / "vllm").glob("*.json"))
    if len(vllm) != 1 or json.loads(vllm[0].read_text()) != json.loads(path.read_text()):
        problems.append("its configs are not the vLLM file's")
    shutil.copy(path, ctx.out / ("sglang_" + path.name))
    return [f"SGLang file {path.relative_to(ctx.work)}"], problems, line_of(stdout, r"SGLANG_MOE_CONFIG_DIR")


def outside(ctx: Context, clock: dict[str, float] | None) -> dict[str, float]:
    """The command's seconds before the example's imports began (launch.sh, the interpreter's start: ``start_s``)
    and after it printed ``RESULT`` (the process group's end, the compiles waited for at exit, the interpreter's
    end: ``exit_s``), from RESULT's ``clock`` and the step's own wall clock (one host: one clock)."""
    if not clock or not ctx.ended:
        return {}
    return {"start_s": clock["imports_began"] - ctx.launched, "exit_s": ctx.ended - clock["result_printed"]}


def phases_text(phases: dict[str, float] | None, around: dict[str, float] | None = None) -> str:
    """The command's steps outside its tuning (RESULT's ``phases``, and :func:`outside`'s), for the figure: what its
    wall time holds besides the keys."""
    steps = {**(around or {}), **(phases or {})}
    named = [("start", "start_s"), ("imports", "imports_s"), ("setup", "setup_s"), ("checks", "checks_s"),
             ("export", "export_s"), ("exit", "exit_s")]
    said = [f"{name} {steps[key]:.1f}" for name, key in named if key in steps]
    return "; besides it: " + ", ".join(said) + " s" if said else ""


def fla(ctx: Context, stdout: str, new: set[Path]) -> tuple[list[str], list[str], str]:
    """``skipped: ...`` (no fla-core, or no GPU) or rank 0's figure, with its line of keys tuned and served."""
    figure = line_of(stdout, r"^skipped: |^fla chunk_gla rank 0")
    problems = [] if figure else ["neither 'skipped: ...' nor rank 0's figure printed"]
    keys = line_of(stdout, r"^fla chunk_gla keys: ")
    if figure and not figure.startswith("skipped") and not keys:
        problems.append("no line of the keys tuned and served from the cache")
    figure = f"{figure}; {keys}" if keys else figure
    return [f"{len(new)} cache entries"], problems, figure


def cli_check(pattern: str, png: str | None = None):
    """A check of a command-line step: the figure is the first line matching ``pattern``; ``png``: the PNG it must
    have written into OUT."""

    def check(ctx: Context, stdout: str, new: set[Path]) -> tuple[list[str], list[str], str]:
        files, problems = [], []
        if png:
            path = ctx.out / png
            if path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n":
                files.append(f"{png} ({path.stat().st_size // 1024} KiB)")
            else:
                problems.append(f"no PNG at {path}")
        figure = line_of(stdout, pattern)
        return files, problems + ([] if figure else [f"no line matching {pattern!r} printed"]), figure

    return check


# -- the steps ---------------------------------------------------------------------------------------------------------


def newest_decision(ctx: Context) -> str:
    """The newest decision as ``list`` names it: ``<function>/<the start of its file name>``."""
    entries = sorted(ctx.entries(), key=lambda p: (p.stat().st_mtime, str(p)))
    return f"{entries[-1].parent.name}/{entries[-1].stem[:8]}" if entries else "none"


def busiest_function(ctx: Context) -> str:
    """The function with the most decisions (the MoE campaign's, where it ran)."""
    counts: dict[str, int] = {}
    for path in ctx.entries():
        counts[path.parent.name] = counts.get(path.parent.name, 0) + 1
    return max(sorted(counts), key=counts.__getitem__) if counts else "none"


def steps() -> list[Step]:
    launch = ["bash", "launch.sh"]

    def on(ctx: Context, *args: str) -> list[str]:
        """``bash launch.sh ARGS`` as the README writes it, or its CPU form."""
        return [*launch, "--cpu", *args] if ctx.cpu else [*launch, *args]

    def tp_mlp(ctx: Context) -> list[str]:
        if ctx.cpu or ctx.gpus >= 4:
            return [*launch, *(["--cpu"] if ctx.cpu else []), "--nproc", "4", "examples/tp_mlp.py"]
        return [*launch, "examples/tp_mlp.py"]  # one rank per GPU: one TP group of 2 on 2-3 GPUs

    def campaign(ctx: Context) -> list[str]:
        tiny = ["--tiny"] if ctx.cpu else []
        batches = [] if ctx.as_written else ["--batches", ",".join(map(str, ctx.batches))]
        return on(ctx, "examples/moe_gemm.py", *tiny, "--campaign", "--export-vllm", str(ctx.work / "vllm"), *batches)

    def sglang_command(ctx: Context) -> list[str]:
        sys.path.insert(0, str(ROOT))
        from examples.moe_kernels import CPU_PROBLEM, GPU_PROBLEM, config_file_n

        problem = CPU_PROBLEM if ctx.cpu else GPU_PROBLEM
        return [*ctx.cli, "export", str(ctx.work / "sglang"), "--format", "sglang-moe", "--function", "moe_gemm",
                "--experts", str(problem["experts"]), "--n", str(config_file_n(problem)),
                "--where", f"1={problem['experts']}"]

    return [
        Step("quickstart", lambda c: on(c, "examples/quickstart.py"),
             tuned("all_gather_gemm", 1, r"^rank 0/\d+: chose"), timeout=240),
        Step("fla", lambda c: on(c, "examples/fla_contextual.py"), fla, timeout=240),
        Step("fla_one_process", lambda c: [sys.executable, "examples/fla_contextual.py"], fla, timeout=240),
        Step("moe_alone", lambda c: on(c, "examples/moe_gemm.py", *(["--tiny"] if c.cpu else [])), moe_alone,
             timeout=240),
        Step("moe_campaign", campaign, moe_campaign, timeout=420),
        Step("cli_export_sglang", sglang_command, sglang_export),
        Step("cli_list", lambda c: [*c.cli, "list"], cli_check(r"decision\(s\) in ")),
        Step("cli_show", lambda c: [*c.cli, "show", newest_decision(c)], cli_check(r"^->")),
        Step("cli_plot", lambda c: [*c.cli, "plot", newest_decision(c), "-o", str(c.out / "decision.png")],
             cli_check(r"\.png", "decision.png")),
        Step("cli_plot_function", lambda c: [*c.cli, "plot", "--function", busiest_function(c), "-o",
                                             str(c.out / "function.png")], cli_check(r"\.png", "function.png")),
        Step("ag_gemm", lambda c: on(c, "examples/ag_gemm.py"), tuned(None, 1, r"^ag_gemm rank 0/\d+: OK"), gpus=2),
        Step("gemm_rs", lambda c: on(c, "examples/gemm_rs.py"), tuned(None, 1, r"^gemm_rs rank 0/\d+: OK"), gpus=2),
        Step("tp_mlp", tp_mlp, tuned(None, 1, r"^tp_mlp rank 0 .*: OK"), gpus=2),
    ]


# -- running them ------------------------------------------------------------------------------------------------------


def run_text(argv: list[str], timeout: float = 60) -> str:
    """A short command's stdout (empty where it cannot run)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def visible_gpus() -> list[str]:
    """One line per GPU the commands see: nvidia-smi's, narrowed to ``CUDA_VISIBLE_DEVICES`` (indices) where set, as
    launch.sh counts them (one GPU of a 2-GPU host runs the one-GPU steps alone, beside other work)."""
    rows = run_text(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"])
    found = {line.split(",", 1)[0].strip(): line.split(",", 1)[1].strip() for line in rows.strip().splitlines()
             if "," in line}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(found.values())
    return [found[i] for i in (v.strip() for v in visible.split(",")) if i in found]


def machine(cpu: bool) -> str:
    """One line: the GPUs (or the CPU), cores, python, torch and triton (as this python imports them: the one the
    commands run under)."""
    gpus = visible_gpus()
    where = (f"{len(gpus)} x {', '.join(sorted(set(gpus)))}" if gpus and not cpu
             else f"CPU ranks ({device_name(True)})")
    import torch
    import triton

    return (f"{where}; {os.cpu_count()} CPU cores; python {sys.version.split()[0]}, torch {torch.__version__}, "
            f"triton {triton.__version__}")


def step_env(ctx: Context, name: str) -> dict[str, str]:
    """The caller's environment without the tuner's variables, with a fresh HOME (decision and Triton caches in it),
    the step's own log folder, NVLink multicast off and ``PYTHON`` (launch.sh's interpreter) this script's own unless
    the caller named one: the ranks then run the torch and Triton this script reads (the SGLang step's folder is named
    by the Triton the ranks tuned under; before, launch.sh took ``python3`` from PATH, and a run from a virtual
    environment with another Triton failed that step); on CPU, no GPU and Triton's interpreter."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRITON_DIST_AUTOTUNE_") and k not in ("TRITON_CACHE_DIR", "TRITON_HOME")}
    env.update(HOME=str(ctx.home), XDG_CACHE_HOME=str(ctx.home / ".cache"), TMPDIR=str(ctx.work / "tmp"),
               TRITON_DIST_AUTOTUNE_LOG_DIR=str(ctx.work / "logs" / name), PYTHONUNBUFFERED="1",
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    env.setdefault("PYTHON", sys.executable)
    if ctx.cpu:
        env.update(CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1")
    env.update(ctx.extra_env)
    return env


def run_step(ctx: Context, step: Step, timeout: float) -> tuple[Row, str]:
    """Run one step from the checkout; its output goes to OUT/logs/<name>.out and .err. Returns its row and its
    stderr's lines from launch.sh and ensure_env (what was installed, which copy runs)."""
    ctx.current = step.name
    argv = step.command(ctx)
    command = " ".join(a if re.fullmatch(r"[\w./=,:-]+", a) else repr(a) for a in argv)
    before = ctx.entries()
    started = time.perf_counter()
    ctx.launched, ctx.ended = time.time(), 0.0
    proc = subprocess.Popen(argv, cwd=ROOT, env=step_env(ctx, step.name), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun's ranks too
        stdout, stderr = proc.communicate()
        status = 124
    seconds = time.perf_counter() - started
    ctx.ended = time.time()
    (ctx.out / "logs" / f"{step.name}.out").write_text(stdout)
    (ctx.out / "logs" / f"{step.name}.err").write_text(stderr)
    try:
        files, problems, figure = step.check(ctx, stdout, ctx.entries() - before)
    except Exception as error:  # a check that cannot read what it checks is a problem of the step, not the end
        files, problems, figure = [], [f"check failed: {type(error).__name__}: {error}"], ""
    if status == 124:
        problems.insert(0, f"killed after {timeout:.0f} s")
    row = Row(step.name, command, status, seconds, files, problems, figure)
    if (ctx.work / "logs" / step.name).is_dir():  # every step's: its keys' breakdowns, and a failure's story
        shutil.copytree(ctx.work / "logs" / step.name, ctx.out / "logs" / f"{step.name}.ranks", dirs_exist_ok=True)
    said = [line for line in stderr.splitlines() if line.startswith(("ensure_env:", "launch.sh: NOTE"))]
    return row, "\n".join(said)


def cell(text: str, width: int = 160) -> str:
    """``text`` as one markdown table cell, cut at ``width`` characters."""
    text = text if len(text) <= width else text[:width - 1] + "…"
    return text.replace("|", "\\|").replace("\n", " ")


def write_table(ctx: Context, rows: list[Row], header: str, notes: list[str]) -> None:
    """OUT/acceptance.md (the table) and OUT/acceptance.json."""
    lines = [f"# Acceptance run: {header}", "",
             "| step | command | exit | wall s | files written (checked) | figure | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.name} | `{cell(r.command, 200)}` | {'-' if r.status is None else r.status} | "
                     f"{r.seconds:.1f} | {cell(', '.join(r.files))} | {cell(r.figure)} | {cell(r.verdict, 300)} |")
    lines += ["", *[f"- {note}" for note in notes if note]]
    (ctx.out / "acceptance.md").write_text("\n".join(lines) + "\n")
    (ctx.out / "acceptance.json").write_text(json.dumps({"machine": header, "notes": notes,
                                                         "rows": [{**asdict(r), "ok": r.ok} for r in rows]}, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the table, outputs and files go")
    parser.add_argument("--work", type=Path, default=None, help="the fresh HOME, caches and logs (default: a new "
                        "folder under TMPDIR; never reused: a fresh one each run)")
    parser.add_argument("--cpu", action="store_true", help="the CPU forms (gloo ranks, interpreter, --tiny)")
    parser.add_argument("--only", type=lambda t: t.split(","), default=None, help="these steps only (a,b,...)")
    parser.add_argument("--budget", type=float, default=0, help="start no step after this many seconds (0: none)")
    parser.add_argument("--moe-batches", type=lambda t: [int(m) for m in t.split(",")], default=None,
                        help="a smaller MoE campaign (the README's command is then not run as written)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set for every step, after the tuner's own variables are cleared (an arm of an A/B run)")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.env):
        parser.error("--env takes NAME=VALUE")
    known = [s.name for s in steps()]
    if args.only and set(args.only) - set(known):
        parser.error(f"unknown step(s) {sorted(set(args.only) - set(known))}; the steps: {', '.join(known)}")
    gpus = 0 if args.cpu else len(visible_gpus())
    if not args.cpu and gpus == 0:
        parser.error("no GPU found (nvidia-smi, CUDA_VISIBLE_DEVICES): pass --cpu for the CPU forms")
    sys.path.insert(0, str(ROOT))
    from examples.moe_gemm import CAMPAIGN_BATCHES, CPU_CAMPAIGN_BATCHES

    work = args.work or Path(tempfile.mkdtemp(prefix="tdt-acceptance-"))
    if work.exists() and any(work.iterdir()):
        parser.error(f"--work {work} is not empty: each run starts from a fresh HOME")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "logs").mkdir(exist_ok=True)
    for sub in ("home", "tmp", "logs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    ctx = Context(args.out, work, args.cpu, gpus, args.moe_batches or list(CPU_CAMPAIGN_BATCHES if args.cpu else
                  CAMPAIGN_BATCHES), args.moe_batches is None, extra_env=dict(i.split("=", 1) for i in args.env))
    header = machine(args.cpu)
    notes = [f"checkout {ROOT}; fresh HOME {ctx.home}"] + [f"every step ran with {i}" for i in args.env]
    print(f"acceptance: {header}", flush=True)
    rows: list[Row] = []
    started = time.perf_counter()
    for step in steps():
        if args.only and step.name not in args.only:
            continue
        left = args.budget - (time.perf_counter() - started) if args.budget else step.timeout
        if step.gpus > max(gpus, 1) and not args.cpu:
            row, said = Row(step.name, f"needs {step.gpus} GPUs; this machine has {gpus}", None, 0.0), ""
        elif left < 10:
            row, said = Row(step.name, "budget spent", None, 0.0), ""
        else:
            row, said = run_step(ctx, step, min(step.timeout, left))
        rows.append(row)
        if said and not any(note.endswith(said) for note in notes):  # once, at the first step that said it
            notes.append(f"{step.name}: {said}")
        print(f"acceptance: {row.name}: {row.verdict.split(':')[0]} ({row.seconds:.1f} s) {row.figure} "
              f"{'; '.join(row.problems)}", flush=True)
        write_table(ctx, rows, header, notes)
    ran = [r for r in rows if r.status is not None]
    skipped = sum(r.skipped for r in ran)
    print(f"acceptance: {sum(r.ok and not r.skipped for r in ran)} of {len(ran)} OK"
          f"{f', {skipped} skipped' if skipped else ''}; the table: {args.out / 'acceptance.md'}", flush=True)
    return 0 if ran and all(r.ok for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
