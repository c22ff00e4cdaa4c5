"""Issue 30 cases 2, 7, 9, 10, 11 and issue 29 item 9, with real processes: campaign rounds under a deadline tied
to progress, served decisions that ``prune_fn`` keeps, contextual keys met off the agreement points, log files
kept per job, and ``import`` all or nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import base_env

from triton_dist_tune.disk.cache import hardware, versions
from triton_dist_tune.disk.decisions import BUNDLE_FORMAT, BUNDLE_KIND


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m triton_dist_tune ARGS`` in a process of its own."""
    return subprocess.run([sys.executable, "-m", "triton_dist_tune", *args], env=base_env(), capture_output=True,
                          text=True, timeout=timeout)


# -- case 11: import checks the whole bundle, refuses duplicates, writes all or nothing --------------------------


def entry_data(index: int, **extra: object) -> dict:
    hw = hardware()
    return {"format": 2, "function": "fn", "key": str(index), "index": index, "config": f"{{BLOCK: {index}}}",
            "time_ms": 1.0, "versions": versions(), "gpu": hw["gpu"], "gpu_count": hw["gpu_count"], **extra}


def bundle(tmp_path: Path, entries: list[tuple[str, dict]], name: str = "bundle.json") -> Path:
    path = tmp_path / name
    text = json.dumps({"kind": BUNDLE_KIND, "format": BUNDLE_FORMAT, "created": 0.0, "versions": versions(),
                       "entries": [{"path": p, "data": d} for p, d in entries]})
    path.write_text(text.replace('"time_ms": "NaN"', '"time_ms": NaN'))  # JSON's reader takes NaN, its writer not
    return path


def files_under(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.timeout(120)
def test_import_refuses_duplicates_and_is_all_or_nothing(tmp_path):
    """Case 11: a bundle with two entries for one file is refused (before: both written, the last won); a bundle
    whose second entry cannot be written as JSON (NaN) or whose place is taken writes nothing (before: the first
    was written, then exit 2); a replaced file keeps its content when a later entry fails; a good bundle imports."""
    target = tmp_path / "cache"
    dup = bundle(tmp_path, [("fn/a.json", entry_data(0)), ("fn/b.json", entry_data(1)),
                            ("fn//a.json", entry_data(2))], "dup.json")
    out = cli("import", str(dup), "--cache-dir", str(target))
    assert out.returncode == 2 and "entries 1 and 3" in out.stderr and "fn/a.json" in out.stderr, out.stderr
    assert not target.exists(), files_under(target)

    nan = bundle(tmp_path, [("fn/a.json", entry_data(0)), ("fn/b.json", entry_data(1, time_ms="NaN"))], "nan.json")
    out = cli("import", str(nan), "--cache-dir", str(target))
    assert out.returncode == 2 and "entry 2 (fn/b.json)" in out.stderr, out.stderr
    assert not target.exists(), files_under(target)

    (target / "fn").mkdir(parents=True)
    (target / "fn" / "a.json").write_text(json.dumps(entry_data(5)))
    before = files_under(target)
    (target / "fn" / "b.json").mkdir()  # a folder where the second entry goes
    blocked = bundle(tmp_path, [("fn/a.json", entry_data(0)), ("fn/b.json", entry_data(1))], "blocked.json")
    out = cli("import", str(blocked), "--force", "--cache-dir", str(target))
    assert out.returncode == 2 and "nothing" in out.stderr, out.stderr
    assert files_under(target) == before
    assert not [p for p in (target / "fn").iterdir() if p.name.startswith(".")], "a staged file was left behind"

    (target / "fn" / "b.json").rmdir()
    out = cli("import", str(blocked), "--force", "--json", "--cache-dir", str(target))
    assert out.returncode == 0, out.stderr
    assert sorted(Path(p).name for p in json.loads(out.stdout)["imported"]) == ["a.json", "b.json"]
    assert json.loads((target / "fn" / "a.json").read_text())["index"] == 0
