"""Issue 35 item 9: no module over 450 lines, no class over 300, no import circle (scripts/check_house.py), and the
checker itself finds what it is there to find (tiny fake packages in a temporary folder)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_house.py"


@pytest.fixture(scope="module")
def house():
    """scripts/check_house.py as a module."""
    spec = importlib.util.spec_from_file_location("check_house", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_house", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(house):
    return house.check()


#: the most bytes of tracked files: the device tool sends the working tree to a GPU machine, up to 64 MiB with the
#: folders a call carries (``arms/fla_site`` is 6 MiB); at 109 MiB (the seventy-ninth session) every GPU ask had to
#: take ``benchmarks/results`` out of git's index first. Old raw records go to git history
#: (``benchmarks/results/ARCHIVED.md``)
MAX_TRACKED_BYTES = 56 * 2**20


def test_the_tracked_tree_fits_what_the_device_tool_sends():
    root = _SCRIPT.parent.parent
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    paths = [root / p for p in listed.stdout.decode().split("\0") if p]
    sizes = {p: p.stat().st_size for p in paths if p.is_file()}
    total = sum(sizes.values())
    largest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert total <= MAX_TRACKED_BYTES, (f"{total / 2**20:.1f} MiB tracked, over {MAX_TRACKED_BYTES / 2**20:.0f} MiB; "
                                        f"largest: {[(str(p.relative_to(root)), sizes[p]) for p in largest]}")


def test_no_module_over_450_lines(report):
    assert not report.long_modules, report.lines()


def test_no_class_over_300_lines(report):
    assert not report.long_classes, report.lines()


def test_no_import_circle_in_contextual_and_function(report):
    for where in ("triton_dist_tune/contextual", "triton_dist_tune/function"):
        assert report.cycles[where] == [], report.lines()


def test_no_import_circle_anywhere(report):
    assert not any(report.cycles.values()), report.lines()
    assert "benchmarks" in report.cycles and "triton_dist_tune/measure" in report.cycles  # both were checked


def test_imports_go_down_the_layers(report):
    # before: group/channel imported measure/breakdown and disk/entries measure/stats (docs/layout.md said neither)
    assert report.against_layers == [] and report.unplaced == [], report.lines()


# -- the checker on fake packages ----------------------------------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_circles_through_annotations_and_deferred_imports(house, tmp_path):
    write(tmp_path, {
        "fake/__init__.py": "from .sub import a\n",
        "fake/sub/__init__.py": "",
        # a -> b at import time, b -> a for an annotation only
        "fake/sub/a.py": "from .b import B\n\n\nclass A:\n    pass\n",
        "fake/sub/b.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .a import A\n\n\nclass B:\n"
                         "    def f(self, a: 'A') -> None:\n        pass\n",
        # c -> d inside a function (deferred), d -> c at import time, absolutely
        "fake/sub/c.py": "def f():\n    from . import d\n\n    return d\n",
        "fake/sub/d.py": "from fake.sub import c\n",
        # one way only: no circle
        "fake/sub/e.py": "from .a import A\nfrom . import d\n",
        # across folders: x/p -> y/q -> x/p
        "fake/x/__init__.py": "",
        "fake/x/p.py": "from ..y.q import Q\n",
        "fake/y/__init__.py": "",
        "fake/y/q.py": "from ..x import p\n\nQ = 1\n",
    })
    found = house.check(tmp_path, "fake", "benchmarks")
    assert found.cycles["fake/sub"] == [["a", "b"], ["c", "d"]], found.lines()
    assert found.cycles[house.ACROSS] == [["x.p", "y.q"]], found.lines()
    assert found.cycles["fake"] == [] and found.cycles["fake/x"] == [] and found.broken()
    assert "import circle in fake/sub/: a -> b -> a" in found.lines()
    assert "import circle across folders of fake: x.p -> y.q -> x.p" in found.lines()


def test_the_checker_shows_a_real_circle_of_a_larger_group(house, tmp_path):
    # a -> b -> c -> a and b -> a: one group of three; the path shown follows real imports
    write(tmp_path, {"fake/__init__.py": "", "fake/a.py": "from . import b\n", "fake/b.py": "from . import a, c\n",
                     "fake/c.py": "from . import a\n"})
    (circle,) = house.check(tmp_path, "fake", "benchmarks").cycles["fake"]
    assert circle == ["a", "b"]  # the shortest circle through a
    write(tmp_path, {"fake/b.py": "from . import c\n"})
    house._parse.cache_clear()
    (circle,) = house.check(tmp_path, "fake", "benchmarks").cycles["fake"]
    assert circle == ["a", "b", "c"]


def test_the_checker_finds_circles_among_scripts(house, tmp_path):
    write(tmp_path, {
        "fake/__init__.py": "",
        "benchmarks/one.py": "import sys\n\n\ndef main():\n    import two\n\n    return two.X\n",
        "benchmarks/two.py": "from benchmarks.one import main\n\nX = 1\n",
        "benchmarks/three.py": "from benchmarks import one\nfrom _helpers import h\n",
        "benchmarks/_helpers.py": "def h():\n    return 1\n",
    })
    found = house.check(tmp_path, "fake", "benchmarks")
    assert found.cycles["benchmarks"] == [["one", "two"]], found.lines()


def test_the_checker_finds_long_modules_and_classes(house, tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(house.MAX_CLASS_LINES - 1))  # with its class line: the most
    write(tmp_path, {
        "fake/__init__.py": "",
        "fake/fits.py": "x = 1\n" * house.MAX_MODULE_LINES,
        "fake/fitting_class.py": "class Fits:\n" + body,
        "fake/long.py": "x = 1\n" * (house.MAX_MODULE_LINES + 1),
        "fake/wide.py": "class Wide:\n" + body + "    y = 0\n",
    })
    found = house.check(tmp_path, "fake", "benchmarks")
    assert found.long_modules == [("fake/long.py", house.MAX_MODULE_LINES + 1)]
    assert found.long_classes == [("fake/wide.py", "Wide", house.MAX_CLASS_LINES + 1)]
    assert found.broken() and not any(found.cycles.values())


def test_the_checker_finds_imports_against_the_layers(house, tmp_path):
    write(tmp_path, {
        "fake/__init__.py": "",
        "fake/group/__init__.py": "",
        "fake/group/channel.py": "from ..measure import breakdown\n",  # up: group is below measure
        "fake/measure/__init__.py": "",
        "fake/measure/breakdown.py": "from ..group import channel\nfrom .. import stats\n",  # down: fine
        "fake/disk/__init__.py": "",
        "fake/disk/cache.py": "def f():\n    from ..faults import journal\n",  # up, deferred
        "fake/faults/__init__.py": "",
        "fake/faults/journal.py": "from ..disk import cache\n",  # down the middle row: fine
        "fake/function/__init__.py": "",
        "fake/function/a.py": "from ..contextual import b\n",  # sideways in one layer
        "fake/contextual/__init__.py": "",
        "fake/contextual/b.py": "",
        "fake/stats.py": "from . import errors\n",  # the shared modules import each other: fine
        "fake/errors.py": "",
        "fake/extra/__init__.py": "",  # a folder with no layer
    })
    found = house.check(tmp_path, "fake", "benchmarks")
    assert found.against_layers == [("disk.cache", "faults"), ("disk.cache", "faults.journal"),
                                    ("function.a", "contextual"), ("function.a", "contextual.b"),
                                    ("group.channel", "measure"), ("group.channel", "measure.breakdown")], found.lines()
    assert found.unplaced == ["extra"] and found.broken()
    assert "import against the layers: group.channel -> measure.breakdown" in found.lines()
    assert "no layer for extra (scripts/check_house.py LAYERS)" in found.lines()


def _resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` names a module, or an attribute of one (down its classes: a dataclass field or an
    attribute set in ``__init__`` counts when the class's source assigns it)."""
    import importlib
    import inspect
    import re

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if hasattr(found, name):
                found = getattr(found, name)
                continue
            try:
                return re.search(rf"\b(self\.)?{name}\s*[:=]", inspect.getsource(found)) is not None
            except (TypeError, OSError):
                return False
        return True
    return False


def test_every_cross_reference_in_the_package_docstrings_resolves():
    """A docstring's ``:func:``/``:class:``/``:meth:``/``:data:``/``:mod:``/``:attr:``/``:exc:`` reference names
    something that exists: a full path, a path relative to the module's package (``~.x.y``, ``~..x.y``), or a name of
    the module or of one of its classes; names of other packages (the standard library, torch, Triton) are not
    checked. Eight had gone stale (a module moved, a test merged, a name never imported where it was cited)."""
    import importlib
    import inspect
    import re

    root = Path(__file__).resolve().parent.parent
    reference = re.compile(r":(?:func|class|meth|data|mod|attr|exc):`~?([\w.]+)`")
    stale = []
    for path in sorted((root / "triton_dist_tune").rglob("*.py")):
        if path.name == "__main__.py":  # importing it runs the command line
            continue
        module_name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        package = module_name if path.name == "__init__.py" else module_name.rpartition(".")[0]
        module = importlib.import_module(module_name)
        classes = [c.__name__ for c in vars(module).values() if inspect.isclass(c) and c.__module__ == module_name]
        for found in reference.finditer(path.read_text()):
            ref = found.group(1)
            if ref.startswith("."):
                dots = len(ref) - len(ref.lstrip("."))
                base = package.rsplit(".", dots - 1)[0] if dots > 1 else package
                ok = _resolves(f"{base}.{ref.lstrip('.')}")
            elif ref.startswith("triton_dist_tune"):
                ok = _resolves(ref)
            elif importlib.util.find_spec(ref.split(".")[0]) is not None and ref.split(".")[0] not in vars(module):
                ok = True  # another package's name (faulthandler, contextvars.ContextVar)
            else:
                ok = _resolves(f"{module_name}.{ref}") or any(_resolves(f"{module_name}.{c}.{ref}") for c in classes)
            if not ok:
                stale.append(f"{path.relative_to(root)}: {ref}")
    assert not stale, stale


# -- the docs name what the code reads -----------------------------------------------------------------------------


def test_every_tuner_variable_is_documented_and_every_documented_one_is_read():
    """Every ``TRITON_DIST_AUTOTUNE_*`` variable settings.py reads is in docs/operations.md's table, and every such
    name the package, its docs, examples, scripts and tests write is one settings.py reads (a renamed or dropped
    variable left in a message or a page is a setting that does nothing)."""
    import re

    root = Path(__file__).resolve().parent.parent
    read = set(re.findall(r'PREFIX \+ "(\w+)"', (root / "triton_dist_tune" / "settings.py").read_text()))
    assert len(read) >= 17, read  # the pattern still finds them
    table = (root / "docs" / "operations.md").read_text()
    assert not [v for v in sorted(read) if f"| `TRITON_DIST_AUTOTUNE_{v}` |" not in table]
    files = [root / "README.md", root / "launch.sh", *(root / "docs").glob("*.md")]
    for folder in ("triton_dist_tune", "examples", "scripts", "tests"):
        files += [p for p in (root / folder).rglob("*") if p.suffix in (".py", ".sh", ".md")]
    unread = sorted({f"{p.relative_to(root)}: TRITON_DIST_AUTOTUNE_{name}" for p in files
                     for name in re.findall(r"TRITON_DIST_AUTOTUNE_([A-Z_]*[A-Z])", p.read_text()) if name not in read})
    assert not unread, unread


def test_every_autotune_option_is_in_its_page():
    """docs/autotune.md lists every option (README.md sends readers there for "every option"), and docs/api.md's
    list names each too."""
    import inspect

    from triton_dist_tune import autotune

    root = Path(__file__).resolve().parent.parent
    options = [n for n, p in inspect.signature(autotune).parameters.items() if p.kind is p.KEYWORD_ONLY]
    assert "budget" in options and "search" in options
    for page in ("autotune.md", "api.md"):
        text = (root / "docs" / page).read_text()
        assert not [o for o in options if f"`{o}`" not in text], page
