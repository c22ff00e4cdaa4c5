"""What ``ref_prog``'s check costs a process: making the reference and the first comparison, then a later one,
with ``torch.testing.assert_close`` (the library before 5a4819f) and with
:class:`triton_dist_tune.measure.reference.Reference` (after), each in a fresh interpreter, arms alternating.

    python3 benchmarks/ref_check_cost.py --out DIR [--device cuda] [--repeats 3] [--shape 4096x4096]

Prints a table and writes ``DIR/ref_check_cost.json``. The outputs are bf16 on a GPU (float32 on the CPU), with the
examples' tolerances (rtol = atol = 2e-2) and a result within them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ONE_PROCESS = r"""
import json, sys, time
import torch
import triton_dist_tune  # noqa: F401  (what a tuning process has imported)
from triton_dist_tune.measure.reference import Reference

arm, device, rows, cols = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dtype = torch.bfloat16 if device == "cuda" else torch.float32
torch.manual_seed(0)
expected = torch.randn(rows, cols, device=device, dtype=dtype)
actual = expected * (1 + 1e-3)
if device == "cuda":
    torch.cuda.synchronize()


def make():  # the reference as the tuning makes it (a copy, compared with itself once)
    if arm == "assert_close":  # the library before 5a4819f
        kept = expected.detach().clone()
        torch.testing.assert_close((kept,), (kept,), rtol=2e-2, atol=2e-2, check_device=False)
        return kept
    return Reference((expected,), 2e-2, 2e-2)


def check(reference):  # a config's first run compared with it
    if arm == "assert_close":
        torch.testing.assert_close((actual,), (reference,), rtol=2e-2, atol=2e-2, check_device=False)
    else:
        assert reference.mismatch((actual,)) is None


def timed(step):
    began = time.perf_counter()
    out = step()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - began


reference, made_s = timed(make)
_, first_s = timed(lambda: check(reference))
_, second_s = timed(lambda: check(reference))
seconds = [made_s + first_s, second_s]
print(json.dumps({"arm": arm, "first_s": seconds[0], "second_s": seconds[1],
                  "sympy_imported": "sympy" in sys.modules}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shape", default="4096x4096")
    args = parser.parse_args()
    rows, cols = (int(x) for x in args.shape.split("x"))
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for repeat in range(args.repeats):
        arms = ["assert_close", "reference"] if repeat % 2 == 0 else ["reference", "assert_close"]
        for arm in arms:
            done = subprocess.run([sys.executable, "-c", ONE_PROCESS, arm, args.device, str(rows), str(cols)],
                                  cwd=ROOT, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                sys.exit(f"{arm} failed:\n{done.stderr[-3000:]}")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(runs[-1], flush=True)
    print(f"\n| check | first, s (median of {args.repeats}) | later, ms | sympy imported |\n| --- | --- | --- | --- |")
    for arm in ("assert_close", "reference"):
        mine = [r for r in runs if r["arm"] == arm]
        firsts = ", ".join(f"{r['first_s']:.3f}" for r in mine)
        print(f"| {arm} | {statistics.median(r['first_s'] for r in mine):.3f} ({firsts}) | "
              f"{statistics.median(r['second_s'] for r in mine) * 1e3:.2f} | {mine[0]['sympy_imported']} |")
    (args.out / "ref_check_cost.json").write_text(json.dumps({"device": args.device, "shape": [rows, cols],
                                                              "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
