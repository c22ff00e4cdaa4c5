"""A tuning campaign of the examples' GEMM on one GPU: time per key, and the campaign against calling the function
once per shape.

Launch: ``python benchmarks/bench_campaign.py --out DIR`` (one GPU; no launcher needed). Each mode runs in a process
of its own with fresh Triton and decision caches (so no mode profits from another's compilations):

- ``calls``: the function called once per shape, in order (each call tunes its key: today's way);
- ``campaign``: ``tdt.campaign(gemm_fn, build, shapes)`` (one unit: a single GPU);
- ``rerun``: the same campaign again on ``campaign``'s caches (every key a cache hit: a restart, or a serving job's
  start), then calls at shapes never tuned with ``TRITON_DIST_AUTOTUNE_UNDECIDED=nearest`` (first call each).

Writes DIR/campaign.json, DIR/campaign.md and DIR/campaign.png. The regime is burst: each key is tuned once, on a
GPU that was idle between processes; the GEMM is timed by the tuner's default (steady) timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

N = K = 4096
SHAPES = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]  # M: decode to prefill
UNSEEN = [24, 100, 700, 3000, 6000]


def make_function():
    import torch

    import triton_dist_tune as tdt
    from examples.gemm_kernels import gemm, gemm_config_specs, tile_usable

    def prune(config, a, b, out):
        return tile_usable(config["config"], a, a.shape[0])

    @tdt.autotune([{"config": s} for s in gemm_config_specs("cuda")], key_fn=lambda a, b, out: tuple(a.shape),
                  prune_fn=prune, name="campaign_gemm")
    def gemm_fn(a, b, out, *, config):
        return gemm(a, b, out, config)

    def build(m):
        a = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        return tdt.Call(a, b, torch.empty(m, N, device="cuda", dtype=torch.bfloat16))

    return gemm_fn, build


def run_mode(mode: str) -> dict:
    import torch

    import triton_dist_tune as tdt

    gemm_fn, build = make_function()
    torch.cuda.synchronize()
    per_key, t0 = {}, time.perf_counter()
    if mode == "calls":
        for m in SHAPES:
            call = build(m)
            start = time.perf_counter()
            gemm_fn(*call.args)
            torch.cuda.synchronize()
            per_key[m] = time.perf_counter() - start
        return {"mode": mode, "total_s": time.perf_counter() - t0, "per_key_s": per_key}
    summary = tdt.campaign(gemm_fn, build, SHAPES)
    total = time.perf_counter() - t0
    out = {"mode": mode, "total_s": total, "summary": summary.to_json(),
           "per_key_s": {row.key: row.seconds for row in summary.rows}}
    if mode == "rerun":
        os.environ["TRITON_DIST_AUTOTUNE_UNDECIDED"] = "nearest"
        served = {}
        for m in UNSEEN:
            call = build(m)
            torch.cuda.synchronize()
            start = time.perf_counter()
            gemm_fn(*call.args)
            torch.cuda.synchronize()
            served[m] = time.perf_counter() - start
        out["nearest_first_call_s"] = served
    return out


def child(mode: str, folder: Path, triton_cache: Path) -> dict:
    env = {**os.environ, "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(folder / "decisions"),
           "TRITON_DIST_AUTOTUNE_LOG_DIR": str(folder / "logs"), "TRITON_CACHE_DIR": str(triton_cache)}
    proc = subprocess.run([sys.executable, __file__, "--child", mode], env=env, capture_output=True, text=True,
                          timeout=400)
    sys.stderr.write(proc.stderr[-4000:])
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} failed (rc={proc.returncode})")
    return json.loads(lines[-1][len("RESULT "):])


def report(results: dict, out: Path) -> None:
    calls, camp, rerun = results["calls"], results["campaign"], results["rerun"]
    rows = ["| M | calls: tuning s | campaign: tuning s | campaign choice | margin |", "|---|---|---|---|---|"]
    for row in camp["summary"]["keys"]:
        m = int(row["key"].strip("(),").split(",")[0])
        margin = "-" if row["margin"] is None else f"{100 * row['margin']:.1f}%"
        rows.append(f"| {m} | {calls['per_key_s'][str(m)]:.2f} | {row['seconds']:.2f} | {row['config']} | {margin} |")
    served = ", ".join(f"M={m}: {1e3 * s:.1f} ms" for m, s in rerun["nearest_first_call_s"].items())
    text = "\n".join([
        f"# Campaign of the examples' GEMM (N=K={N}, bf16), {len(SHAPES)} shapes, one GPU", "",
        f"- calling the function once per shape: {calls['total_s']:.1f} s",
        f"- one campaign: {camp['total_s']:.1f} s",
        f"- the campaign rerun on its cache (all cache hits): {rerun['total_s']:.2f} s",
        f"- first call at shapes never tuned, undecided=nearest: {served}", "", *rows, ""])
    (out / "campaign.md").write_text(text)
    print(text)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = [str(m) for m in SHAPES]
    fig, ax = plt.subplots(figsize=(8, 4))
    x = range(len(ms))
    ax.bar([i - 0.2 for i in x], [calls["per_key_s"][m] for m in ms], 0.4, label="one call per shape")
    ax.bar([i + 0.2 for i in x], [r["seconds"] for r in camp["summary"]["keys"]], 0.4, label="campaign")
    ax.set_xticks(list(x), ms)
    ax.set_xlabel(f"M (N=K={N}, bf16)")
    ax.set_ylabel("tuning time per key (s)")
    ax.set_title(f"GEMM tuning per key, one GPU: calls {calls['total_s']:.0f} s, campaign {camp['total_s']:.0f} s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "campaign.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="campaign_out")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run_mode(args.child)), flush=True)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        results["campaign"] = child("campaign", base / "camp", base / "triton-camp")
        results["rerun"] = child("rerun", base / "camp", base / "triton-camp")
        results["calls"] = child("calls", base / "calls", base / "triton-calls")
    (out / "campaign.json").write_text(json.dumps(results, indent=1))
    report(results, out)


if __name__ == "__main__":
    main()
