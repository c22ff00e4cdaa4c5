"""A rank forked by tests/forkserver.py is what ``python SCRIPT ARGS`` would be: its argv, environment, working
directory, ``sys.path[0]``, ``__main__``, exit status (``sys.exit``, an uncaught exception, a signal), output,
exit handlers and a parent shared by the ranks of a job; and the environment that must start a fresh process does."""

from __future__ import annotations

import json
import signal

import forkserver
import pytest
from harness import base_env, run_ranks

SCRIPT = '''
import atexit, json, os, sys
import __main__
atexit.register(lambda: print("EXIT-HANDLER", flush=True))
print("RESULT " + json.dumps({"argv": sys.argv[1:], "path0": sys.path[0], "file": __file__,
      "main": __main__.__file__, "name": __name__, "rank": os.environ["RANK"], "cwd": os.getcwd(),
      "only_here": os.environ.get("ONLY_HERE"), "parent": os.getppid()}))
how = sys.argv[1]
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise ValueError("raised at top level")
if how == "kill":
    os.kill(os.getpid(), 9)
'''


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "sub" / "script.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how, code", [("ok", 0), ("exit", 3), ("raise", 1), ("kill", -signal.SIGKILL)])
def test_a_forked_rank_is_what_python_script_would_be(script, how, code):
    results = run_ranks(script, 2, [how], env={"ONLY_HERE": "yes"}, timeout=100)
    assert [r.returncode for r in results] == [code, code], [r.stderr for r in results]
    for r in results:
        res = r.result
        assert res["argv"] == [how] and res["path0"] == str(script.parent) and res["file"] == str(script)
        assert res["main"] == str(script) and res["name"] == "__main__" and res["rank"] == str(r.rank)
        assert res["only_here"] == "yes"
        assert ("EXIT-HANDLER" in r.stdout) == (how != "kill")
    if how == "raise":
        assert "ValueError: raised at top level" in results[0].stderr
        assert "forkserver.py" not in results[0].stderr  # the traceback is the script's own
    assert results[0].result["parent"] == results[1].result["parent"]  # one parent, as under torchrun


def test_a_variable_read_when_torch_starts_asks_for_a_fresh_process(script):
    base = base_env()
    assert forkserver.start(str(script), ["ok"], {**base, "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, base) is None
    assert forkserver.start(str(script), ["ok"], {**base, "HOME": "/elsewhere"}, base) is None
    proc = forkserver.start(str(script), ["ok"], {**base, "RANK": "0", "TRITON_DIST_AUTOTUNE_TIMEOUT": "7"}, base)
    assert proc is not None
    out, _ = proc.communicate(timeout=100)
    assert proc.returncode == 0 and json.loads(out.split("RESULT ", 1)[1].splitlines()[0])["rank"] == "0"


def test_one_server_serves_test_after_test(script, monkeypatch):
    """The server is kept while only variables nobody reads at start change (pytest's PYTEST_CURRENT_TEST changes
    with every test): before, it was started again for every test, 4-5 s of CPU importing torch each time."""
    first = forkserver.start(str(script), ["ok"], {**base_env(), "RANK": "0"}, base_env())
    assert first is not None
    first.communicate(timeout=100)
    server = first.server
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/elsewhere.py::test_next (call)")
    second = forkserver.start(str(script), ["ok"], {**base_env(), "RANK": "0"}, base_env())
    assert second is not None
    second.communicate(timeout=100)
    assert second.server is server and server.alive() and second.returncode == 0


def test_ranks_with_another_triton_interpret_are_forked_from_a_server_started_with_it(script):
    """TRITON_INTERPRET is read when Triton starts: ranks that set it otherwise (the compile-pass tests' ``0``) come
    from a second server started with that value, and the first keeps serving the rest; another start-time
    variable beside it still asks for a fresh process."""
    base = base_env()
    interpreted = forkserver.start(str(script), ["ok"], {**base, "RANK": "0"}, base)
    compiled = [forkserver.start(str(script), ["ok"], {**base, "RANK": str(r), "TRITON_INTERPRET": "0"}, base)
                for r in (0, 1)]
    assert interpreted is not None and None not in compiled
    assert compiled[0].server is compiled[1].server is not interpreted.server
    assert compiled[0].server.env["TRITON_INTERPRET"] == "0" and interpreted.server.env["TRITON_INTERPRET"] == "1"
    parents = []
    for proc in (interpreted, *compiled):
        out, _ = proc.communicate(timeout=100)
        assert proc.returncode == 0, out
        parents.append(json.loads(out.split("RESULT ", 1)[1].splitlines()[0])["parent"])
    assert parents[1] == parents[2] == compiled[0].server.proc.pid
    assert forkserver.start(str(script), ["ok"], {**base, "TRITON_INTERPRET": "0", "HOME": "/elsewhere"}, base) is None
