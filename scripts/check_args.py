"""launch.sh's check of a script's arguments: once, in one process, before torchrun starts the ranks.

    python3 scripts/check_args.py SCRIPT [ARGS...]       # a script, by its file
    python3 scripts/check_args.py -m MODULE [ARGS...]    # a module, as ``python -m`` names it

Where the script (or module) defines, at its top level, a function ``parse_arguments(argv)`` (found by reading its
source, not by running it), it is imported under a name other than ``__main__`` (its ``if __name__ == "__main__":``
part does not run) and that function is called with ARGS, as each rank's ``main`` would call it: an argparse error
is the script's usage and message, printed once here, and the exit status is argparse's (2). Exit status 0 where the
arguments parse, where there is no such function, and where this check cannot tell (the source cannot be read or
parsed, importing it fails, the function raises something else): the ranks then show what they show.

Before, a wrong argument (``bash launch.sh examples/moe_gemm.py --no-such-flag``) was the usage error once per rank,
then torchrun's ``ChildFailedError`` traceback, exit status 1.
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


def defines_parser(source: Path) -> bool:
    """Whether ``source`` defines :data:`FUNCTION` at its top level (read, not run)."""
    try:
        tree = ast.parse(source.read_bytes(), str(source))
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == FUNCTION for node in tree.body)


def load_parser(target: str, as_module: bool) -> Callable[[list[str]], object] | None:
    """The script's (or module's) :data:`FUNCTION`, imported as the ranks' python would find it (``sys.path[0]``:
    the script's folder, or the current folder for a module; ``sys.argv[0]``: its file, argparse's ``prog``); None
    where it defines none."""
    if as_module:
        found = module_file(target)
        if found is None:
            return None
        name, source = found
        sys.path[0] = os.getcwd()
    else:
        name, source = "__launch_checked_script__", Path(target)  # a name no real module has
        sys.path[0] = str(source.resolve().parent)
    if not defines_parser(source):
        return None
    sys.argv[0] = str(source.resolve())
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
        parse = load_parser(target, as_module)
    except Exception:  # its import failed: the ranks show why
        return 0
    if parse is None:
        return 0
    try:
        parse(args)
    except SystemExit as done:  # argparse's error (its usage and message are printed): 2
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except Exception:  # an error of the function's own: the ranks show it
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
