"""launch.sh's check of a script's arguments: once, in one process, before torchrun starts the ranks.

    python3 scripts/check_args.py SCRIPT [ARGS...]       # a script, by its file
    python3 scripts/check_args.py -m MODULE [ARGS...]    # a module, as ``python -m`` names it

Only a script (or module) that opts in is checked: its source sets, at its top level, ``LAUNCH_CHECKS_ARGUMENTS =
True`` and defines a function ``parse_arguments(argv)`` that takes the arguments after the script's name (as every
script of ``examples/`` does). That is read from the source, not run: any other script is neither imported nor
checked, and its ranks start as they would without this check. An opted-in script is imported under a name other
than ``__main__`` (its ``if __name__ == "__main__":`` part does not run), with ``sys.argv`` as a rank has it
(``[script, *ARGS]``), and ``parse_arguments(ARGS)`` is called: an argparse error is the script's usage and message,
printed once here, and the exit status is argparse's (2). Exit status 0 where the arguments parse, and where this
check cannot tell: the source cannot be read or parsed, the import fails or exits (``SystemExit`` of any code
included), the function raises or exits with anything but an int status. The ranks then show what they show.

Before, a wrong argument (``bash launch.sh examples/moe_gemm.py --no-such-flag``) was the usage error once per rank,
then torchrun's ``ChildFailedError`` traceback, exit status 1. Before the opt-in (a top-level ``parse_arguments``
alone made a script checked), scripts the ranks run were refused or changed: one that parses ``sys.argv[1:]`` at
import, one whose ``parse_arguments`` takes the whole ``argv``, one that exits at import outside torchrun, and one
whose import has a side effect, which ran once more here.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

#: the function a script defines to have its arguments checked by launch.sh before its ranks start
FUNCTION = "parse_arguments"
#: the top-level name a script sets to True to opt in to the check
OPT_IN = "LAUNCH_CHECKS_ARGUMENTS"


def module_file(name: str) -> tuple[str, Path] | None:
    """The module ``python -m name`` runs (a package's ``__main__``) and its source file, found folder by folder
    without importing anything; None where that finds no source file."""
    path: list[str] | None = None
    spec = None
    for part in name.split("."):
        if not part.isidentifier() or (path is not None and not path):
            return None
        spec = importlib.machinery.PathFinder.find_spec(part, path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    if spec is not None and spec.submodule_search_locations is not None:  # a package: python -m runs its __main__
        spec = importlib.machinery.PathFinder.find_spec("__main__", list(spec.submodule_search_locations))
        name += ".__main__"
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return name, Path(spec.origin)


def _sets_opt_in(node: ast.stmt) -> bool:
    """Whether ``node`` is ``OPT_IN = True`` (or ``OPT_IN: bool = True``)."""
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets, value = [node.target], node.value
    else:
        return False
    named = any(isinstance(t, ast.Name) and t.id == OPT_IN for t in targets)
    return named and isinstance(value, ast.Constant) and value.value is True


def opts_in(source: Path) -> bool:
    """Whether ``source`` sets :data:`OPT_IN` to True and defines :data:`FUNCTION`, both at its top level (read,
    not run)."""
    try:
        tree = ast.parse(source.read_bytes(), str(source))
    except (OSError, SyntaxError, ValueError):
        return False
    defines = any(isinstance(node, ast.FunctionDef) and node.name == FUNCTION for node in tree.body)
    return defines and any(_sets_opt_in(node) for node in tree.body)


def load_parser(target: str, as_module: bool, args: list[str]) -> Callable[[list[str]], object] | None:
    """The script's (or module's) :data:`FUNCTION`, imported as the ranks' python would find it (``sys.path[0]``:
    the script's folder, or the current folder for a module; ``sys.argv``: its file, then ``args``, as a rank has
    it); None where it does not opt in (:func:`opts_in`)."""
    if as_module:
        found = module_file(target)
        if found is None:
            return None
        name, source = found
        sys.path[0] = os.getcwd()
    else:
        name, source = "__launch_checked_script__", Path(target)  # a name no real module has
        sys.path[0] = str(source.resolve().parent)
    if not opts_in(source):
        return None
    sys.argv[:] = [str(source.resolve()), *args]
    if as_module:
        module = importlib.import_module(name)
    else:
        spec = importlib.util.spec_from_file_location(name, source)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # (a dataclass of the script looks its module up there)
        spec.loader.exec_module(module)
    return getattr(module, FUNCTION, None)


def main(argv: list[str]) -> int:
    """Check ``argv`` (``[-m] target args...``); the exit status launch.sh goes by (see the module docstring)."""
    as_module = bool(argv) and argv[0] == "-m"
    if as_module:
        argv = argv[1:]
    if not argv:
        print("usage: check_args.py [-m] SCRIPT_OR_MODULE [ARGS...]", file=sys.stderr)
        return 2
    target, args = argv[0], argv[1:]
    try:
        parse = load_parser(target, as_module, list(args))
    except (Exception, SystemExit):  # its import failed or exited (any status): cannot tell, the ranks show it
        return 0
    if not callable(parse):
        return 0
    try:
        parse(list(args))
    except SystemExit as done:  # argparse's error (its usage and message are printed): 2
        return done.code if isinstance(done.code, int) else 0  # (a message, not a status: cannot tell)
    except Exception:  # an error of the function's own: the ranks show it
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
