"""How long must a config run on its own before its time is its sustained time? (issue 20, one GPU)

Launch: ``python benchmarks/probe_duel.py --out DIR [--shapes 2048,4096] [--rounds 12]``.

On a power-limited GPU the limiter sets the SM clock from the power the device has drawn over the last tens to
hundreds of ms. A short sample therefore runs at the clock the configs before it left, while a long one runs at
the config's own clock. Two configs with the same cycle count but different power draw rank alike in short samples
and apart in long ones. This probe measures exactly that, side by side in one run: the close contenders of
``bench_fidelity.py``'s GEMM space (128x256x64 with 8 warps and 3 or 4 stages, and 256x128x64 with 3 stages as a
third), in shuffled rounds with no synchronize between configs (one per round), for several (settle ms, timed
window ms) pairs from the tuner's settled sample (5 + 10) to the sustained oracle's (100 + 250); then the tuner's
own settled samples (and their span and queued parts alone) and stock's ``do_bench``, in the same rounds
(:func:`structured`). For each pair it
reports every config's drift-free score relative to the first (the median over rounds of the ratio of their
samples in the same round) and the same from the even and the odd rounds, and the median SM clock (pynvml, sampled
every ~2 ms by a thread while the pair ran). Regime: sustained (the device never idles inside a round).
Writes DIR/duel.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from bench_fidelity import launcher, space, sustained, tensors  # noqa: E402
from bench_gemm_tuning import fresh_kernel, spec  # noqa: E402

from examples.gemm_kernels import _gemm_kernel  # noqa: E402

CONTENDERS = ["128x256x64-g8-w8-s3", "128x256x64-g8-w8-s4", "256x128x64-g8-w8-s3"]
PAIRS = [(5, 10), (25, 25), (50, 50), (100, 100), (100, 250)]


class ClockSampler:
    """SM clock samples (MHz) every ~2 ms in a thread, while active."""

    def __init__(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handle, self.nvml = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml
        except Exception:  # no pynvml: no clock figures
            self.handle = None
        self.samples: list[float] = []
        self.active = False

    def __enter__(self) -> ClockSampler:
        self.samples, self.active = [], True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.active = False
        self.thread.join()

    def _loop(self) -> None:
        while self.active and self.handle is not None:
            self.samples.append(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
            time.sleep(0.002)

    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


def relative(samples: dict[str, list[float]], rounds: list[int]) -> dict[str, float]:
    """Each config's median over ``rounds`` of its sample over the first contender's sample in the same round."""
    base = CONTENDERS[0]
    return {n: statistics.median(samples[n][r] / samples[base][r] for r in rounds) for n in samples}


def structured(calls: dict[str, object], rounds: int, seed: int, settled_blocks: int = 8) -> dict[str, dict]:
    """The contenders timed the tuner's way and stock's way, in the same shuffled rounds: ``tuner`` is the tuner's
    settled block (``settled_blocks`` cycles back to back, each contender once per cycle, one synchronize) of settled
    samples (:func:`triton_dist_tune.measure.timing.steady_calls`: 5 ms settling, a 10 ms span and, under
    1 ms per call, calls queued behind a short hold, averaged), ``span`` and ``queued`` its two parts alone;
    ``do_bench`` is ``triton.testing.do_bench`` (stock ``triton.autotune``'s: each call timed alone after an L2
    flush, ~100 ms). Returns {mode: {name: [ms per call, one per round]}}."""
    import random

    import triton

    from triton_dist_tune.measure import timing

    clock = timing.DeviceClock("cuda")
    per = {}
    for name, call in calls.items():
        per[name] = timing.probe(clock, call)
    out: dict[str, dict] = {"tuner": {}, "span": {}, "queued": {}, "do_bench": {}}
    rng = random.Random(seed)
    for _ in range(rounds):
        order = list(calls)
        tokens = []
        for cycle in range(settled_blocks):  # one settled block: cycles back to back, one synchronize
            rng.shuffle(order)
            for k, name in enumerate(order):
                steady = timing.steady_calls(False, per[name], True, cycle == 0 and k == 0, None)
                tokens.append((name, steady, timing.steady_span(clock, calls[name], steady)))
        clock.synchronize()
        for name, steady, token in tokens:
            out["tuner"].setdefault(name, []).append(timing.read_sample(clock, token, steady))
            out["span"].setdefault(name, []).append(clock.read(token.span) / steady.span)
            if token.queued is not None:
                out["queued"].setdefault(name, []).append(clock.read(token.queued) / steady.queued)
        rng.shuffle(order)
        for name in order:
            out["do_bench"].setdefault(name, []).append(triton.testing.do_bench(calls[name]))
    return {mode: samples for mode, samples in out.items() if samples}


def summary(title: str, samples: dict[str, list[float]], clocks: ClockSampler) -> dict:
    """Each contender's time relative to the first (all rounds, even ones, odd ones), the median SM clock and each
    one's median ms; printed."""
    rounds = list(range(min(len(v) for v in samples.values())))
    row = {"all": relative(samples, rounds), "even": relative(samples, rounds[0::2]),
           "odd": relative(samples, rounds[1::2]), "sm_mhz": clocks.median(),
           "ms": {n: statistics.median(v) for n, v in samples.items()}}
    fmt = lambda d: " ".join(f"{d[n]:.4f}" for n in CONTENDERS)  # noqa: E731
    print(f"{title}: relative to {CONTENDERS[0]}: {fmt(row['all'])} (even {fmt(row['even'])}, odd "
          f"{fmt(row['odd'])}); {CONTENDERS[0]} {row['ms'][CONTENDERS[0]]:.4f} ms; SM {row['sm_mhz']} MHz", flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--shapes", default="2048,4096,8192,16384")
    p.add_argument("--rounds", type=int, default=12)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    by_name = {spec(c): c for c in space()}
    kernel = fresh_kernel(_gemm_kernel)
    clocks = ClockSampler()
    report: dict = {"device": torch.cuda.get_device_name(), "contenders": CONTENDERS, "pairs": {}}
    for m in (int(s) for s in args.shapes.split(",")):
        a, b, c = tensors(m, 8192, 4096)
        launch = launcher(kernel, a, b, c)
        calls = {n: (lambda n=n: launch(by_name[n])) for n in CONTENDERS}
        sustained(calls, rounds=1, settle_ms=50, window_ms=50)  # compile and warm up
        for settle, window in PAIRS:
            with clocks:
                samples = sustained(calls, rounds=args.rounds, settle_ms=settle, window_ms=window, seed=m)
            report["pairs"][f"{m} {settle}+{window}"] = summary(f"M={m} settle {settle} ms + window {window} ms",
                                                                 samples, clocks)
        with clocks:
            modes = structured(calls, args.rounds, seed=m)
        for mode, samples in modes.items():
            report["pairs"][f"{m} {mode}"] = summary(f"M={m} {mode}", samples, clocks)
    (out / "duel.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
