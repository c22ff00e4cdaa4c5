"""Why a held-out GEMM shape's choice reads 1.11-1.15x under the sustained oracle and 1.03-1.04 among heavy layers
(forty-fifth session, one H200: bench_fidelity.py's space at N = 4096, K = 14336, M = 8192 and 16384).

For one shape, the given configs of bench_fidelity.py's space are timed in four regimes, each config's median ms per
call, its ratio to the fastest, and the SM clock (MHz) and board power (W) read through pynvml while it runs:

- ``alone``: each config by itself for ``--alone-ms`` (400) after a synchronize, the last 250 ms timed with device
  events, 3 repeats in shuffled order: the sustained oracle's regime, the config at its own power limit;
- ``burst``: each config after 300 ms of idle, a 5 ms window: a figure taken after a synchronize;
- ``interleaved``: the tuner's settled block (5 ms settling then a 10 ms span per config, every config once per
  cycle in shuffled order, 8 cycles with no synchronize): the configs share one clock; ``interleavedS``: the same
  with S ms of settling and 5 ms spans, 6 cycles (how long a config must run for the power limiter to follow it);
- ``among_heavy``: each config's 10 ms window after 20 ms of a cuBLAS 8192^3 bf16 GEMM, 8 shuffled rounds;
- ``mlp``: the layer a down projection (N = 4096, K = 14336) sits in: for ``--alone-ms`` each config's call follows
  a cuBLAS up projection (M x 4096 @ 4096 x 14336) back to back; its ratio is of the pair's time (the last half of
  the pairs, device events; the config's own share is kept as ``own_ms``), 3 repeats in shuffled order: the two
  GEMMs share the power limit as in a model's MLP, and a config that draws more power slows the up projection too.

Then one tuning by ``triton_dist_tune.autotune`` with the defaults (its cache and log folders under ``--out``'s folder,
so the decision's table of finalists is kept).

Launch (one GPU): ``python benchmarks/power_regimes.py --m 8192 --nk 4096,14336 --configs A,B --out FILE``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from _oracle import ClockSampler, paired, per_call_ms, run_for, windows  # noqa: E402
from bench_fidelity import among_heavy, launcher, ours_tuning, space, tensors  # noqa: E402
from bench_gemm_tuning import fresh_kernel, spec, use_triton_cache  # noqa: E402

from examples.gemm_kernels import _gemm_kernel  # noqa: E402


def timed(call, n: int) -> float:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        call()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n


def alone(calls: dict, per: dict, total_ms: float, repeats: int, meter: ClockSampler) -> dict:
    out: dict[str, dict] = {n: {"ms": [], "mhz": [], "w": []} for n in calls}
    rng = random.Random(3)
    for _ in range(repeats):
        order = list(calls)
        rng.shuffle(order)
        for name in order:
            torch.cuda.synchronize()
            run_for(calls[name], total_ms - 250, per[name])
            with meter:
                ms = timed(calls[name], max(1, int(250 / per[name])))
            mhz, w = meter.medians()
            out[name]["ms"].append(ms)
            out[name]["mhz"].append(mhz)
            out[name]["w"].append(w)
    return out


def burst(calls: dict, per: dict, repeats: int) -> dict:
    out: dict[str, dict] = {n: {"ms": []} for n in calls}
    for _ in range(repeats):
        for name in calls:
            torch.cuda.synchronize()
            time.sleep(0.3)
            out[name]["ms"].append(timed(calls[name], max(1, int(5 / per[name]))))
    return out


def interleaved(calls: dict, cycles: int, meter: ClockSampler, settle_ms: float = 5, span_ms: float = 10) -> dict:
    """The settled block's regime: shuffled cycles of ``settle_ms`` then a ``span_ms`` window per config, with no
    synchronize until the last (``_oracle.windows`` as a block); the SM clock and power over the whole block."""
    torch.cuda.synchronize()
    with meter:
        times = windows(calls, cycles, lambda name, per: run_for(calls[name], settle_ms, per), span_ms, 1, 5,
                        block=True)
    mhz, w = meter.medians()
    return {"configs": {n: {"ms": v} for n, v in times.items()}, "mhz": mhz, "w": w}


def mlp(calls: dict, m: int, total_ms: float, repeats: int, meter: ClockSampler) -> dict:
    x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 14336, device="cuda", dtype=torch.bfloat16)
    return paired(calls, lambda: torch.matmul(x, w), total_ms, repeats, sampler=meter)


def summary(times: dict[str, list[float]]) -> dict[str, float]:
    med = {n: statistics.median(v) for n, v in times.items()}
    best = min(med.values())
    return {n: round(m / best, 4) for n, m in med.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--m", type=int, required=True)
    p.add_argument("--nk", default="4096,14336")
    p.add_argument("--configs", required=True, help="comma-separated names as bench_fidelity.py prints them")
    p.add_argument("--alone-ms", type=float, default=400)
    p.add_argument("--out", required=True)
    p.add_argument("--regimes", default="alone,burst,interleaved,among_heavy,mlp")
    p.add_argument("--no-tuning", action="store_true")
    args = p.parse_args()
    n, k = (int(v) for v in args.nk.split(","))
    use_triton_cache(os.environ.get("TRITON_CACHE_DIR") or f"/tmp/power_regimes_{os.getpid()}")
    os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"] = str(Path(args.out).parent / f"decisions_{args.m}")
    os.environ["TRITON_DIST_AUTOTUNE_LOG_DIR"] = str(Path(args.out).parent / f"logs_{args.m}")
    kernel = fresh_kernel(_gemm_kernel)
    by_name = {spec(c): c for c in space()}
    a, b, c = tensors(args.m, n, k)
    launch = launcher(kernel, a, b, c)
    calls = {name: (lambda cfg=by_name[name]: launch(cfg)) for name in args.configs.split(",")}
    per = {name: per_call_ms(call) for name, call in calls.items()}
    meter = ClockSampler(power=True)
    report: dict = {"shape": [args.m, n, k], "device": torch.cuda.get_device_name(), "per_call_ms": per}
    out = Path(args.out)
    regimes = {"alone": lambda: alone(calls, per, args.alone_ms, 3, meter),
               "burst": lambda: burst(calls, per, 3),
               "interleaved": lambda: interleaved(calls, 8, meter),
               "among_heavy": lambda: {n_: {"ms": v} for n_, v in among_heavy(calls, rounds=8).items()},
               "mlp": lambda: mlp(calls, args.m, args.alone_ms, 3, meter)}
    for regime in args.regimes.split(","):
        settle = regime.removeprefix("interleaved")
        run = regimes[regime] if regime in regimes else (  # interleavedS: S ms of settling, 5 ms spans, 6 cycles
            lambda s_=float(settle): interleaved(calls, 6, meter, settle_ms=s_, span_ms=5))
        t0 = time.perf_counter()
        got = run()
        configs = got.get("configs", got)
        report[regime] = {"raw": got, "ratios": summary({n_: v["ms"] for n_, v in configs.items()}),
                          "seconds": round(time.perf_counter() - t0, 2)}
        line = ", ".join(f"{n_} {r}" + (f" ({statistics.median(configs[n_]['mhz']):.0f} MHz "
                                         f"{statistics.median(configs[n_]['w']):.0f} W)"
                                         if configs[n_].get("mhz") and None not in configs[n_]["mhz"] else "")
                         for n_, r in sorted(report[regime]["ratios"].items(), key=lambda kv: kv[1]))
        shared = f" [shared clock {got['mhz']} MHz, {got['w']} W]" if "mhz" in got else ""
        print(f"{args.m} {regime}{shared}: {line}", flush=True)
        if all("own_ms" in v for v in configs.values()):
            report[regime]["own_ratios"] = summary({n_: v["own_ms"] for n_, v in configs.items()})
            print(f"{args.m} {regime}, the config's own share: {report[regime]['own_ratios']}", flush=True)
        out.write_text(json.dumps(report, indent=1, default=str))
    if args.no_tuning:
        return
    choice, seconds, warm, race = ours_tuning(kernel, space(), (args.m, n, k), f"regimes_{args.m}")
    report["tuning"] = {"choice": choice, "seconds": seconds, "warm_s": warm, "race_s": race}
    print(f"{args.m} tuning: {choice} in {seconds:.2f} s", flush=True)
    out.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
