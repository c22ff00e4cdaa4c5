"""Check the house rules of issue 35 item 9: module and class length, and import circles.

    python3 scripts/check_house.py            # report; exit 1 when a rule is broken

Rules:
  * no module of ``triton_dist_tune`` over ``MAX_MODULE_LINES`` lines;
  * no class over ``MAX_CLASS_LINES`` lines (``class`` line to its last line);
  * no import circle among the modules of one directory: of each (sub)package of
    ``triton_dist_tune``, and of ``benchmarks/`` (whose scripts import each other by plain name).

An import counts when it runs while the module is imported: at module level, in a class body, or
under a module-level ``if``/``try``/``with``. Imports inside functions and under
``if TYPE_CHECKING:`` are not circles and are left out.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 300
ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "triton_dist_tune"


@dataclass
class Report:
    long_modules: list[tuple[str, int]] = field(default_factory=list)  # (path, lines)
    long_classes: list[tuple[str, str, int]] = field(default_factory=list)  # (path, class, lines)
    cycles: dict[str, list[list[str]]] = field(default_factory=dict)  # directory -> circles of module names
    # the same, counting also imports inside functions and under TYPE_CHECKING: reported, not a broken rule
    loose_cycles: dict[str, list[list[str]]] = field(default_factory=dict)

    def broken(self) -> bool:
        return bool(self.long_modules or self.long_classes or any(self.cycles.values()))

    def lines(self) -> list[str]:
        out = [f"module over {MAX_MODULE_LINES} lines: {p} ({n})" for p, n in self.long_modules]
        out += [f"class over {MAX_CLASS_LINES} lines: {p} {c} ({n})" for p, c, n in self.long_classes]
        for where, circles in sorted(self.cycles.items()):
            out += [f"import circle in {where}/: {' -> '.join([*c, c[0]])}" for c in circles]
        out = out or ["house rules hold: no long module, no long class, no import circle"]
        for where, circles in sorted(self.loose_cycles.items()):
            out += [f"note: circle through a deferred or TYPE_CHECKING import in {where}/: {' -> '.join([*c, c[0]])}"
                    for c in circles]
        return out


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, every: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    if every:
        yield from (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
    else:
        yield from _runtime_imports(tree.body)


def _runtime_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported (not in functions, not under TYPE_CHECKING)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _runtime_imports(node.body)
            yield from _runtime_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                yield from _runtime_imports(part)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _runtime_imports(node.body)


def _module_name(path: Path, top: Path) -> str:
    parts = list(path.relative_to(top).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_edges(top: Path, files: list[Path], every: bool = False) -> dict[str, set[str]]:
    """Module -> modules of the package it imports at import time (relative or absolute imports)."""
    names = {_module_name(f, top): f for f in files}
    packages = {n for n, f in names.items() if f.name == "__init__.py"}
    edges: dict[str, set[str]] = {n: set() for n in names}
    for name, path in names.items():
        own_package = name if name in packages else name.rpartition(".")[0]
        tree = _parse(path)
        for node in _imports(tree, every):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif node.level:
                base = own_package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{module}.{a.name}" for a in node.names]
                # ``from . import x`` of a submodule x needs only x: the package is already importing
                own = not node.module and all(s in names for s in subs)
                targets = subs if own else [module, *subs]
            else:
                module = node.module or ""
                targets = [module] + [f"{module}.{a.name}" for a in node.names]
            for target in targets:
                if target in names and target != name:
                    edges[name].add(target)
    return edges


def _flat_edges(files: list[Path], every: bool = False) -> dict[str, set[str]]:
    """Script -> sibling scripts it imports by plain name at import time (``benchmarks/``)."""
    names = {f.stem for f in files}
    edges: dict[str, set[str]] = {f.stem: set() for f in files}
    for path in files:
        for node in _imports(_parse(path), every):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level:
                continue
            edges[path.stem] |= {m.split(".")[0] for m in mods if m.split(".")[0] in names} - {path.stem}
    return edges


def _circles(edges: dict[str, set[str]], members: set[str]) -> list[list[str]]:
    """Strongly connected groups of more than one module among ``members`` (Tarjan), each as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v] & members):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(members):
        if v not in index:
            visit(v)
    return sorted(groups)


def _short(name: str) -> str:
    return name.rpartition(".")[2] or name


def check(root: Path = ROOT) -> Report:
    report = Report()
    files = sorted((root / PACKAGE).rglob("*.py"))
    for path in files:
        text = path.read_text()
        rel = str(path.relative_to(root))
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            report.long_modules.append((rel, n))
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ClassDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_CLASS_LINES:
                    report.long_classes.append((rel, node.name, length))
    bench = sorted((root / "benchmarks").glob("*.py"))
    for every, found in ((False, report.cycles), (True, report.loose_cycles)):
        edges = _package_edges(root, files, every)
        for directory in sorted({p.parent for p in files}):
            members = {_module_name(p, root) for p in files if p.parent == directory}
            rel = str(directory.relative_to(root))
            found[rel] = [[_short(m) if m != rel.replace("/", ".") else "__init__" for m in c]
                          for c in _circles(edges, members)]
        if bench:
            found["benchmarks"] = _circles(_flat_edges(bench, every), {p.stem for p in bench})
    return report


def main() -> int:
    report = check()
    print("\n".join(report.lines()))
    return 1 if report.broken() else 0


if __name__ == "__main__":
    sys.exit(main())
