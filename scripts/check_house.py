"""Check the house rules of issue 35 item 9: module and class length, and import circles.

    python3 scripts/check_house.py            # report; exit 1 when a rule is broken

Rules:
  * no module of ``triton_dist_tune`` over ``MAX_MODULE_LINES`` lines;
  * no class of ``triton_dist_tune`` over ``MAX_CLASS_LINES`` lines (``class`` line to its last line);
  * no import circle among the modules of ``triton_dist_tune`` (within one folder or across folders), nor among
    the scripts of ``benchmarks/`` (which import each other by plain name, or through ``benchmarks.``);
  * imports go down the layers of ``LAYERS`` (docs/layout.md): never to a higher layer, nor to another part of the
    same layer (the shared modules of the last layer excepted), and every part of the package has its layer.

Every import counts, wherever it is: at module level, inside a function (a deferred import) or under
``if TYPE_CHECKING:`` (an annotation). Deferring an import, or keeping it for annotations, hides a circle from
Python's import machinery, not from the reader: two modules that need each other are one job split in two, and
the fix is a lower module that owns what both need.
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
SCRIPTS = "benchmarks"
#: the key of :attr:`Report.cycles` for circles whose modules are in more than one folder of the package
ACROSS = "(across folders)"
#: the package's layers, top first, each a tuple of parts (a folder, a top-level module; "" is the package's
#: ``__init__``): a module imports from its own part or from a lower layer (docs/layout.md, "which way imports go")
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli",),
    ("",),
    ("tune", "autotuner"),
    ("contextual", "function"),
    ("measure",),
    ("faults",),
    ("disk",),
    ("group",),
    ("capture", "checks", "ported", "settings", "space", "stats", "records", "errors", "_version"),
)


@dataclass
class Report:
    """What :func:`check` found: each broken rule, and the folders it checked for circles."""

    long_modules: list[tuple[str, int]] = field(default_factory=list)  # (path, lines)
    long_classes: list[tuple[str, str, int]] = field(default_factory=list)  # (path, class, lines)
    #: folder (or ``ACROSS``) -> the circles found there: each a path of modules, the first imports the second ...
    #: the last imports the first; every folder checked has an entry, empty when it has no circle
    cycles: dict[str, list[list[str]]] = field(default_factory=dict)
    #: (importer, imported) for each import against :data:`LAYERS`, and the parts that have no layer
    against_layers: list[tuple[str, str]] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    package: str = PACKAGE

    def broken(self) -> bool:
        """Whether some rule is broken."""
        return bool(self.long_modules or self.long_classes or any(self.cycles.values()) or self.against_layers
                    or self.unplaced)

    def lines(self) -> list[str]:
        """One line per broken rule, or one saying that the rules hold."""
        out = [f"module over {MAX_MODULE_LINES} lines: {p} ({n})" for p, n in self.long_modules]
        out += [f"class over {MAX_CLASS_LINES} lines: {p} {c} ({n})" for p, c, n in self.long_classes]
        for where, circles in sorted(self.cycles.items()):
            out += [f"import circle {'across folders of ' + self.package if where == ACROSS else 'in ' + where + '/'}: "
                    f"{' -> '.join([*c, c[0]])}" for c in circles]
        out += [f"import against the layers: {a} -> {b}" for a, b in self.against_layers]
        out += [f"no layer for {part or '__init__'} (scripts/check_house.py LAYERS)" for part in self.unplaced]
        return out or ["house rules hold: no long module, no long class, no import circle, no import against the "
                       "layers"]


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import of a module, wherever it is (module level, functions, ``if TYPE_CHECKING:``)."""
    yield from (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def _module_name(path: Path, top: Path) -> str:
    parts = list(path.relative_to(top).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_edges(top: Path, files: list[Path]) -> dict[str, set[str]]:
    """Module -> modules of the package it imports (relative or absolute imports)."""
    names = {_module_name(f, top): f for f in files}
    packages = {n for n, f in names.items() if f.name == "__init__.py"}
    edges: dict[str, set[str]] = {n: set() for n in names}
    for name, path in names.items():
        own_package = name if name in packages else name.rpartition(".")[0]
        tree = _parse(path)
        for node in _imports(tree):
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
                subs = [f"{module}.{a.name}" for a in node.names]
                targets = subs if all(s in names for s in subs) else [module, *subs]  # as ``from . import x``
            for target in targets:
                if target in names and target != name:
                    edges[name].add(target)
    return edges


def _flat_edges(folder: str, files: list[Path]) -> dict[str, set[str]]:
    """Script -> sibling scripts it imports, by plain name (``import corpus``, the folder on ``sys.path``) or through
    the folder (``from benchmarks import corpus``, ``from benchmarks._oracle import scores``)."""
    names = {f.stem for f in files}
    edges: dict[str, set[str]] = {f.stem: set() for f in files}
    for path in files:
        for node in _imports(_parse(path)):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif node.level:
                continue
            elif node.module == folder:
                mods = [a.name for a in node.names]
            else:
                mods = [node.module or ""]
            for mod in mods:
                parts = mod.split(".")
                name = parts[1] if parts[0] == folder and len(parts) > 1 else parts[0]
                if name in names and name != path.stem:
                    edges[path.stem].add(name)
    return edges


def _groups(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan): each module of a group reaches every other
    through imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(groups)


def _circle(edges: dict[str, set[str]], group: list[str]) -> list[str]:
    """A shortest circle through the first module of ``group`` (a strongly connected group), as a path."""
    start, members = group[0], set(group)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return path[::-1]
                if w not in previous:
                    previous[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"not a strongly connected group: {group}")


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of modules, each as a path (every module of a group lies on some
    circle; the path shown is a shortest one through the group's first module)."""
    return [_circle(edges, group) for group in _groups(edges)]


def _short(name: str) -> str:
    return name.rpartition(".")[2] or name


def _part(module: str, package: str) -> str:
    """The part of the package ``module`` belongs to: its folder, or itself for a top-level module."""
    return module.removeprefix(package).removeprefix(".").split(".")[0]


def _against_layers(edges: dict[str, set[str]], package: str, report: Report) -> None:
    """Record in ``report`` each import against :data:`LAYERS` and each part of the package with no layer."""
    layer = {part: i for i, parts in enumerate(LAYERS) for part in parts}
    shared = len(LAYERS) - 1
    report.unplaced = sorted({_part(m, package) for m in edges} - set(layer))
    for importer in sorted(edges):
        for imported in sorted(edges[importer]):
            a, b = _part(importer, package), _part(imported, package)
            if a == b or a not in layer or b not in layer:
                continue
            if layer[b] < layer[a] or (layer[b] == layer[a] != shared):
                report.against_layers.append((importer.removeprefix(package + "."),
                                              imported.removeprefix(package + ".")))


def check(root: Path = ROOT, package: str = PACKAGE, scripts: str = SCRIPTS) -> Report:
    """The house rules over ``root / package`` (lengths, circles, layers) and ``root / scripts`` (circles)."""
    report = Report(package=package)
    files = sorted((root / package).rglob("*.py"))
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
    folder = {_module_name(p, root): str(p.parent.relative_to(root)) for p in files}
    report.cycles = {f: [] for f in sorted(set(folder.values()))}
    edges = _package_edges(root, files)
    _against_layers(edges, package, report)
    for circle in _circles(edges):
        where = {folder[m] for m in circle}
        if len(where) == 1:
            (home,) = where
            own = home.replace("/", ".")
            report.cycles[home].append([_short(m) if m != own else "__init__" for m in circle])
        else:
            report.cycles.setdefault(ACROSS, []).append([m.removeprefix(package + ".") for m in circle])
    flat = sorted((root / scripts).glob("*.py"))
    if flat:
        report.cycles[scripts] = _circles(_flat_edges(scripts, flat))
    return report


def main() -> int:
    report = check()
    print("\n".join(report.lines()))
    return 1 if report.broken() else 0


if __name__ == "__main__":
    sys.exit(main())
