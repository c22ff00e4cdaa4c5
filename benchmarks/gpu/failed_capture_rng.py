"""After a capture that fails (the function reads a value on the host), does the process's next ``torch.randn`` on the
GPU still work? Once through ``torch.cuda.graph`` (how the library captured before the sixteenth session) and once
through :class:`triton_dist_tune.measure.graphs.Graphs` (``capture_begin`` / ``capture_end``, then one capture that
ends normally, which ends the generators' capture state), each in a process of its own. Prints one line per path.
Launch: ``PYTHONPATH=$PWD python3 benchmarks/gpu/failed_capture_rng.py``."""

from __future__ import annotations

import subprocess
import sys

CASE = """
import sys, torch
a = torch.full((256, 256), 0.5, device="cuda")
def reads():
    return float((a @ a).sum().item())
if sys.argv[1] == "torch.cuda.graph":
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            reads()
    except Exception as exc:
        print("capture failed:", type(exc).__name__)
else:
    from triton_dist_tune.measure.graphs import Graphs
    g = Graphs(calls=1)
    print("capture failed:", not g.capture(0, reads))
try:
    torch.randn(4, device="cuda"); torch.cuda.synchronize()
    print("randn after it: ok")
except Exception as exc:
    print("randn after it:", str(exc).splitlines()[0])
"""

for path in ("torch.cuda.graph", "Graphs"):
    done = subprocess.run([sys.executable, "-c", CASE, path], capture_output=True, text=True, timeout=120)
    print(f"{path}: exit {done.returncode}: {' | '.join(done.stdout.split(chr(10)))} {done.stderr[-200:]}")
