"""What a run from the tuner's NaN fill does on a GPU, where the README's example of a function that reads an argument
it updates in place (a temperature applied to logits, then ``torch.multinomial``) raises from NaN: whether CUDA's
multinomial raises a plain error or a device-side assert (which leaves the process's context unusable), and what a
one-rank tuning of such a function then does, twice in a row (a fresh process each, one cache folder: the second is
the next attempt). Prints one line per step; exit 0 unless a step could not run.

Launch (on a GPU host): ``python3 benchmarks/gpu/nan_fill_cuda.py``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

PROBE = r"""
import torch
logits = torch.full((4, 32), float("nan"), device="cuda")
try:
    torch.multinomial(logits.softmax(-1), 1)
    torch.cuda.synchronize()
    print("multinomial from NaN: no error")
except Exception as exc:
    print("multinomial from NaN:", type(exc).__name__, str(exc).splitlines()[0][:200])
try:
    (torch.ones(4, device="cuda") * 2).sum().item()
    print("the next CUDA op: ran")
except Exception as exc:
    print("the next CUDA op:", type(exc).__name__, str(exc).splitlines()[0][:200])
"""

TUNE = r"""
import json, torch
import triton_dist_tune as tdt

@tdt.autotune([{"b": b} for b in range(4)], key_fn=lambda logits: tuple(logits.shape), n_warmup=1, n_repeat=2,
              name="nan_fill_cuda")
def sample_(logits, *, b):
    logits.div_(0.7)
    return torch.multinomial(logits.softmax(-1), 1)

logits = torch.randn(64, 512, device="cuda")
try:
    sample_(logits)
    torch.cuda.synchronize()
    (decision,) = sample_.tuner.decisions.values()
    print("RESULT", json.dumps({"states": [o.state for o in decision.outcomes],
                                "errors": [(o.error or "")[:160] for o in decision.outcomes]}))
except BaseException as exc:
    print("RESULT", json.dumps({"raised": type(exc).__name__, "message": str(exc)[:400]}))
"""


def main() -> int:
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    print(probe.stdout.strip() or probe.stderr[-800:])
    folder = tempfile.mkdtemp()
    env = {**os.environ, "TRITON_DIST_AUTOTUNE_CACHE_DIR": folder, "TRITON_DIST_AUTOTUNE_LOG_DIR": f"{folder}/logs"}
    for attempt in (1, 2):
        run = subprocess.run([sys.executable, "-c", TUNE], capture_output=True, text=True, timeout=240, env=env)
        lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
        result = json.loads(lines[-1][7:]) if lines else {"stderr": run.stderr[-600:]}
        print(f"one-rank tuning, attempt {attempt}: exit {run.returncode}: {json.dumps(result)}")
    log = os.path.join(folder, "logs", "rank-0.log")
    if os.path.exists(log):
        text = open(log).read()
        print("the log says none filled:", "none filled" in text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
