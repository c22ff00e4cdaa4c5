"""The docs and the code agree on names and defaults: every environment variable the package or the shell scripts
read is named in the README or docs/, the table of variables gives each tuner variable's default as ``Settings``
holds it, and docs/layout.md places every part of the package where scripts/check_house.py's ``LAYERS`` does.

Each test reads the real files; none starts a process."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from harness import ROOT

PACKAGE = ROOT / "triton_dist_tune"
SCRIPTS = [ROOT / "launch.sh", ROOT / "scripts" / "ensure_env.sh", ROOT / "tests" / "run.sh"]
#: what every shell has, which no doc needs to name
SHELL_OWN = {"HOME", "PATH", "PWD", "BASH_SOURCE", "IFS"}


def docs_text() -> str:
    return "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def package_variables() -> dict[str, str]:
    """Every environment variable the package reads, by name, with the file that reads it: literal names read
    through ``os.environ`` or an ``env`` mapping (``.get``, ``[...]``, not assigned), the tuner's own
    (``PREFIX + "..."``), and the launcher's tuples of names in settings.py and disk/versions.py."""
    from triton_dist_tune import settings
    from triton_dist_tune.disk import versions

    found: dict[str, str] = {}
    read = re.compile(r'(?:environ|env)(?:\.get\(|\[)\s*(PREFIX\s*\+\s*)?"([A-Z][A-Z0-9_]*)"(\s*\]\s*=(?!=))?')
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        for found_read in read.finditer(text):
            if not found_read.group(3):  # ``os.environ["X"] = ...`` sets it for a child: no read
                name = (settings.PREFIX if found_read.group(1) else "") + found_read.group(2)
                found.setdefault(name, path.name)
        for name in re.findall(r'PREFIX\s*\+\s*"([A-Z][A-Z0-9_]*)"', text):
            found.setdefault(settings.PREFIX + name, path.name)
    for group in (settings.RANK_VARIABLES, settings.SIZE_VARIABLES, settings.LOCAL_RANK_VARIABLES,
                  settings.JOB_VARIABLES):
        found.update(dict.fromkeys(group, "settings.py"))
    found.update(dict.fromkeys(versions.LIBRARY_VARIABLES, "versions.py"))
    return found


def script_variables(path: Path) -> set[str]:
    """The variables a shell script reads from its environment: those it reads with a default or a test of being
    set (``${X:-...}``, ``${X-...}``, ``${X+...}``, ``${X:+...}``, ``${X:?...}``), and those it reads and never
    assigns."""
    text = "\n".join(line.split(" #")[0] for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
    defaulted = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-+?])", text))
    used = set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", text))
    assigned = set(re.findall(r"(?:^|[\s;(])(?:export\s+|local\s+)?([A-Z][A-Z0-9_]*)=", text, re.M))
    return (defaulted | (used - assigned)) - SHELL_OWN


def test_the_collector_finds_what_it_is_there_to_find():
    # the regular expressions, on the forms the package and the scripts use (so that a change of form is noticed)
    names = package_variables()
    for name in ("TRITON_DIST_AUTOTUNE_TIMEOUT", "TRITON_INTERPRET", "TORCHELASTIC_ERROR_FILE", "MASTER_PORT",
                 "PMIX_RANK", "LD_PRELOAD"):
        assert name in names, name
    assert "CUDA_VISIBLE_DEVICES" not in names  # only set for a worker process (measure/forked_worker.py)
    launch = script_variables(ROOT / "launch.sh")
    assert {"PYTHON", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"} <= launch, launch
    assert "OMP_NUM_THREADS" in launch  # exported as its own default: read too
    assert not {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST"} & launch  # exported, never read
    assert {"TORCH_INDEX_URL", "TMPDIR"} <= script_variables(ROOT / "scripts" / "ensure_env.sh")
    assert {"TDT_TEST_WORKERS", "TRITON36_DIR", "XDG_CACHE_HOME"} <= script_variables(ROOT / "tests" / "run.sh")


def test_every_environment_variable_the_code_reads_is_named_in_the_docs():
    """A user learns the variables from the docs (docs/operations.md's tables for the package's). Before:
    ``PYTHON`` (the interpreter of launch.sh, scripts/ensure_env.sh and tests/run.sh), ``CUDA_VISIBLE_DEVICES``
    (how launch.sh counts GPUs) and ``TORCHELASTIC_ERROR_FILE`` (where a campaign's rank writes its error for
    torchrun) were read and named nowhere in the README or docs/."""
    docs = docs_text()
    named = lambda name: re.search(rf"(?<![\w$]){re.escape(name)}(?!\w)", docs) is not None  # noqa: E731
    missing = sorted(f"{name} (triton_dist_tune/.../{where})" for name, where in package_variables().items()
                     if not named(name))
    missing += sorted(f"{name} ({path.relative_to(ROOT)})" for path in SCRIPTS for name in script_variables(path)
                      if not named(name))
    assert not missing, missing


def variable_table() -> dict[str, str]:
    """docs/operations.md's table of the tuner's variables: name -> its default column."""
    text = (ROOT / "docs" / "operations.md").read_text()
    table = text[text.index("| variable | default | meaning |"):]
    table = table[:table.index("\n\n")]
    return {row.group(1): row.group(2).strip() for row in re.finditer(r"^\| `([A-Z_]+)` \| ([^|]*) \|", table, re.M)}


def test_the_table_of_variables_has_a_row_with_the_default_of_every_variable_of_the_tuner():
    """Every ``TRITON_DIST_AUTOTUNE_*`` variable the package reads, ``TRITON_PRINT_AUTOTUNING`` and
    ``TRITON_INTERPRET`` have a row in docs/operations.md's table, and no row names a variable the package does not
    read; a default written as a number in backquotes is ``Settings``'s (a switch's ``0``/``1``: off/on)."""
    from triton_dist_tune import settings

    rows = variable_table()
    read = {name for name in package_variables() if name.startswith(settings.PREFIX)}
    assert read | {"TRITON_PRINT_AUTOTUNING", "TRITON_INTERPRET"} == set(rows), sorted(set(rows) ^ read)
    defaults = settings.Settings()
    fields = {"TRITON_PRINT_AUTOTUNING": "print_autotuning", "TRITON_INTERPRET": "interpret"}
    checked, wrong = 0, []
    for name, default in rows.items():
        number = re.fullmatch(r"`(\d+(?:\.\d+)?)`", default)
        if number is None:
            continue
        field = fields.get(name, name.removeprefix(settings.PREFIX).lower())
        held = getattr(defaults, field)
        said = float(number.group(1))
        if (bool(said) if isinstance(held, bool) else said) != held:
            wrong.append((name, default, held))
        checked += 1
    assert not wrong, wrong
    assert checked >= 10  # the timeout, the seconds, the counts and the switches


def layers() -> tuple[tuple[str, ...], ...]:
    """scripts/check_house.py's ``LAYERS``."""
    spec = importlib.util.spec_from_file_location("check_house_layers", ROOT / "scripts" / "check_house.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_house_layers", module)
    spec.loader.exec_module(module)
    return module.LAYERS


def test_layout_places_every_part_of_the_package_in_its_table_and_its_layers():
    """docs/layout.md's table names every folder and module of the package (before, ``checks.py``, ``capture.py``
    and ``autotuner.py`` were in no row), and its sentence of layers (``a`` → ``b`` → ...) lists exactly the parts
    of each of check_house's ``LAYERS``, in order (before, ``_version.py`` was in none)."""
    text = (ROOT / "docs" / "layout.md").read_text()
    table = "\n".join(line.split(" | ")[0] for line in text.splitlines() if line.startswith("| `"))
    parts = sorted([p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
                   + [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")])
    assert [part for part in parts if f"`{part}" not in table and f"/{part}" not in table] == []
    sentence = " ".join(text[text.index("Imports go one way"):].split(". In the")[0].split())
    written = []
    for step in sentence.split("→"):
        names = re.findall(r"`([\w.]+?)(?:\.py|/)?`", step)
        written.append(tuple(sorted("" if name == "__init__" else name for name in names)))
    assert written == [tuple(sorted(layer)) for layer in layers()], written


def documented_cli_commands() -> list[tuple[str, str]]:
    """Every ``triton-dist-tune SUBCOMMAND ...`` the README and docs/ give, in a bash block or in backquotes (the
    command part, before a ``#`` comment; a ``\\``-continued line joined), and each ``-m triton_dist_tune campaign``
    line's part after the module: (subcommand, its arguments)."""
    docs = docs_text()
    found: list[tuple[str, str]] = []
    for block in re.findall(r"```bash\n(.*?)```", docs, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split(" #")[0]
            hit = re.search(r"(?:^|\s)(?:triton-dist-tune|-m triton_dist_tune) ([a-z]+)((?:\s+\S+)*)", command)
            if hit:
                found.append((hit.group(1), hit.group(2)))
    for span in re.findall(r"`triton-dist-tune ([a-z]+)([^`]*)`", docs):
        found.append(span)
    return found


def test_every_option_the_docs_give_a_command_line_subcommand_is_one_of_its_options():
    """A user copies the docs' command lines (docs/operations.md's block, docs/campaign.md's): every ``--option``
    they give a subcommand is one its parser takes (checked by running each on CPU ranks, task H8; this keeps it
    so), and every subcommand they name exists."""
    from triton_dist_tune.cli.commands import parser

    subparsers = next(a for a in parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices
    commands = documented_cli_commands()
    wrong = []
    for name, args in commands:
        if name not in subparsers:
            wrong.append((name, "no such subcommand"))
            continue
        options = set(subparsers[name]._option_string_actions)
        wrong += [(name, option) for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", args)
                  if option not in options]
    assert not wrong, wrong
    assert {"list", "show", "plot", "clear", "export", "import", "logs", "campaign"} <= {n for n, _ in commands}


def test_the_campaign_docs_name_every_field_of_the_summarys_json():
    """``summary.to_json()`` and ``--json FILE`` hold the rows under ``keys``: docs/campaign.md names each
    top-level field (before, it said "the same table as data" and a script writer had to guess ``rows``, the
    attribute's name, which the JSON does not have)."""
    from triton_dist_tune.function.summary import Summary

    fields = Summary(function="f", rows=[], seconds=0.0, units=1).to_json()
    text = (ROOT / "docs" / "campaign.md").read_text()
    said = text[text.index("`summary.to_json()`"):][:400]
    assert all(f"`{field}`" in said for field in fields), (sorted(fields), said)


def test_every_autotune_option_with_a_default_says_it_on_its_page(monkeypatch):
    """docs/autotune.md's paragraph of decorator options gives the default of each ``autotune`` option that has one
    (as ``contextual_autotune``'s page does, test_newcomer.py): a number right after the option's parenthesis opens
    (``n_warmup`` (1; ...)) or as ``default N``, a switch as ``default on``/``off``, a text as ``"text"`, the
    default`` or ``default `"text"` ``; ``timing`` and ``undecided`` (None in the signature) the mode the tuner
    falls back to; ``timeout`` and ``compile_threads`` their variable. Before, ``refine_top`` (0: no limit),
    ``sharded`` (off) and ``compile_threads`` had none there."""
    import inspect

    from triton_dist_tune import autotune, settings
    from triton_dist_tune.function.policy import Undecided
    from triton_dist_tune.measure.timing import timing_mode

    for variable in ("TIMING", "UNDECIDED"):  # the decorator's fallbacks, not a job's
        monkeypatch.delenv(settings.PREFIX + variable, raising=False)
    text = (ROOT / "docs" / "autotune.md").read_text()
    paragraph = " ".join(text[text.index("Decorator options:"):].split("\n\n")[0].split())
    named_none = {"timing": timing_mode(None), "undecided": Undecided("f", None, None).current(),
                  "timeout": f"`{settings.PREFIX}TIMEOUT` or {settings.DEFAULT_TIMEOUT_S:g}",
                  "compile_threads": f"`{settings.PREFIX}COMPILE_THREADS`"}
    missing, checked = [], 0
    for name, parameter in inspect.signature(autotune).parameters.items():
        value = parameter.default
        if parameter.kind is not parameter.KEYWORD_ONLY or value in ((), None) and name not in named_none:
            continue
        value = named_none.get(name, value)
        opening = rf"`{name}`(?: / `\w+`)? \("
        if isinstance(value, bool):
            said = rf"{opening}(?:[^()]|\([^()]*\))*?default {'on' if value else 'off'}\b"
        elif isinstance(value, int):
            said = rf"{opening}(?:{value}[;:]|(?:[^()]|\([^()]*\))*?default {value}\b)"
        elif name in ("timeout", "compile_threads"):
            said = rf"{opening}(?:[^()]|\([^()]*\))*?default {re.escape(value)}"
        else:
            said = rf'{opening}(?:[^()]|\([^()]*\))*?(?:`"{value}"`, the default|default `"{value}"`)'
        checked += 1
        if not re.search(said, paragraph):
            missing.append((name, value))
    assert not missing, missing
    assert checked >= 9  # n_warmup, n_repeat, timeout, sharded, compile_threads, refine_top, timing, undecided, search


def launch_options() -> set[str]:
    """The options launch.sh's argument loop takes (the patterns of its ``case "$1" in``, before the script)."""
    text = (ROOT / "launch.sh").read_text()
    loop = text[text.index('case "$1" in'):text.index("esac", text.index('case "$1" in'))]
    patterns = re.findall(r"^\s*([^\s()]+)\)", loop, re.M)
    return {option.split("=")[0] for pattern in patterns for option in pattern.split("|")
            if option.startswith("-") and option not in ("--", "-*")}


def test_every_launch_sh_option_is_in_the_docs_and_every_documented_one_exists():
    """``bash launch.sh [--nproc N] [--cpu] [-m]``: each option its loop takes (but ``-h``/``--help``) is named in
    docs/operations.md, and every option a ``bash launch.sh ...`` line of the README, docs/ or an example's docstring
    gives launch.sh itself (before the script) is one it takes (an unknown one stops it with exit status 2)."""
    options = launch_options()
    assert {"--nproc", "--cpu", "-m", "-h", "--help"} <= options, options
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert [o for o in sorted(options - {"-h", "--help"}) if not re.search(rf"`{o}[` ]", operations)] == []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*.py"))]
    given = {(page.name, option) for page in pages
             for line in re.findall(r"bash launch\.sh((?: +-[-a-z]+(?:[ =][0-9N]+)?)*)", page.read_text())
             for option in re.findall(r"(?<!\S)(-[-a-z]+)", line)}
    assert {option for _, option in given} >= {"--cpu", "--nproc", "-m"}, given
    assert [(page, option) for page, option in sorted(given) if option not in options] == []


def test_a_sketch_that_tunes_on_a_tp_group_runs_the_functions_collectives_on_it_too():
    """docs/api.md's sketch called ``ag_gemm(a_local, b, autotune_pg=tp_group)`` on a function whose all-gather
    took no group: copied into a job of two TP groups, each group tunes apart while every all-gather spans the job,
    and gloo aborts with a collective mismatch (as ``examples/ag_gemm.py`` did when called so: 4 CPU ranks). Every
    sketched call that names a group as ``autotune_pg=`` names it to the function as ``group=`` too."""
    calls = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S):
            for line in block.splitlines():
                code = line.split("#")[0]
                found = re.search(r"autotune_pg=(tp_group|tp)\b", code)
                if found:
                    calls.append((page.name, code.strip(), found.group(1)))
    assert calls, "the collector found no sketched call with autotune_pg="
    for page, code, group in calls:
        assert f"group={group}," in code.replace(f"autotune_pg={group},", ""), (page, code)
