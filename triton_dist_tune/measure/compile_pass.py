"""The compile pass: compiling an ``autotune`` function's Triton kernels ahead, without user code.

``autotune`` does not know which kernels a config launches, so every rank runs the function once per config, in
the agreed order and aligned like a warm-up run (so that the function's own collectives are matched), while
Triton's JIT launches are turned into compiles: each launch of a ``@triton.jit`` kernel submits
``run(..., warmup=True)`` (Triton's compile-only launch) to a thread pool and returns without launching. On a
node with several ranks a launch is compiled only by the rank whose share holds the config
(:func:`~triton_dist_tune.measure.precompile.node_share`); the others skip it and load the kernel from the node's
Triton cache at their first run. The pass only submits: the compiles go on while the measurer warms up the first
configs (:class:`~triton_dist_tune.measure.precompile.Compiles`); the thread that compiled a kernel also builds its
launcher (:func:`build_launcher`).

What it cannot compile ahead falls back to today's path (compiled in the warm-up): a kernel launched after a
stop (a launch inside ``triton.autotune``'s own benchmarking, whose choice must not be made on launches that
never ran, stops the pass for that config), and anything after an exception the function raises on the pass's
garbage (unlaunched) outputs. A compile that fails is the config's compile failure, agreed by the group before any
rank runs the config.

Nothing that happens in the pass blames a config. Each config's pass is journaled (``started``, phase ``compile
pass``): when it ends the attempt (the function raised on one rank while another waits in its collective, which
it leaves by ending; a hang; a crash), the next attempt, reading the group's merged journals, leaves that config
out of the pass on every rank (:attr:`~triton_dist_tune.function.tuning.Tuning.skip_pass`): its kernels compile
in its warm-up, so the same pass cannot end every attempt.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..group.channel import Group
from .daemon_pool import NEXT_KEY, NOW
from .precompile import Compiles, current_cuda_device, node_share, on_device, start_pool


class StopPass(Exception):
    """Raised inside the function to end its compile pass for one config (the rest compiles in the warm-up)."""


@dataclass
class _Pass:
    """The compile pass of one config on this rank: where its launches go."""

    index: int
    compiles: Compiles | None  #: None: another rank of the node compiles this config
    device: int | None
    #: the rank of its compiles in the pool (:meth:`~.precompile.Compiles.submit`)
    rank: int = NOW


_active: ContextVar[_Pass | None] = ContextVar("tdt_compile_pass", default=None)
_lock = threading.Lock()


def in_pass() -> bool:
    """Whether the function is running its compile pass on this thread (its Triton launches launch nothing)."""
    return _active.get() is not None


def _in_autotuner_bench() -> bool:
    """Whether a ``triton.autotune`` benchmark is on the stack (its choice must not be made on unlaunched runs)."""
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return False
        if frame.f_code.co_name in ("_bench", "benchmark") and "autotuner" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _patched(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        current = _active.get()
        if current is None or warmup:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        if _in_autotuner_bench():
            raise StopPass("a triton.autotune benchmark")
        if current.compiles is not None:
            def compile_one() -> Any:
                on_device(current.device)
                kernel = original(self, *args, grid=grid, warmup=True, **kwargs)
                build_launcher(kernel)
                return kernel

            current.compiles.submit(current.index, compile_one, current.rank)
        return None
    run.__wrapped__ = original  # type: ignore[attr-defined]
    return run


_launchers_built: set[Any] = set()
_launchers_lock = threading.Lock()


def build_launcher(kernel: Any) -> None:
    """Build the launcher of a kernel just compiled in a compile thread, once per kernel signature, so that the
    warm-up's first run of it does not. (On triton 3.6 a launcher is a C module that Triton builds with the C
    compiler, ~1 s, at a kernel's first run, on the main thread; newer Triton launches through one generic module.)
    Only Triton's file cache and its loaded modules change here, never the kernel: its first run still loads it.
    Anything Triton raises here is left to that first run to raise again."""
    src, metadata = getattr(kernel, "src", None), getattr(kernel, "metadata", None)
    try:
        from triton.runtime import driver

        key = (id(getattr(src, "fn", None)), tuple(sorted(getattr(src, "signature", {}).items())))
        with _launchers_lock:
            if key in _launchers_built:
                return
            _launchers_built.add(key)
        driver.active.launcher_cls(src, metadata)
    except Exception:
        return


def available() -> bool:
    """Whether Triton's JIT launches can be turned into compiles here (Triton with ``JITFunction.run``)."""
    try:
        from triton.runtime.jit import JITFunction

        return callable(getattr(JITFunction, "run", None))
    except Exception:
        return False


def compile_pass(group: Group, label: str, todo: Sequence[tuple[int, dict, str]],
                 run_aligned: Callable[[int, str, Callable[[], Any]], str | None], call: Callable[[dict], Any],
                 workers: int | None, timeout: float, go_on: Callable[[], bool] | None = None,
                 space: int = 0, compiles: Compiles | None = None, rank: int = NOW) -> Compiles:
    """Run the compile pass of every config of ``todo`` (``run_aligned(index, desc, run)`` runs ``run`` on every
    rank together, journaled, and returns its error or None; ``call(config)`` runs the function once), in order,
    while ``go_on()`` (asked before each config; it must read only what the group agreed, such as the time
    budget's clock) says so: the configs after a stop compile in their warm-up (``space``: the configs kept for
    the key, see :func:`~.precompile.default_processes`). Returns this rank's compiles (``compiles``, added to,
    else new ones), still running (:attr:`~.precompile.Compiles.passed`: how many configs this pass ran);
    ``rank``: the compiles' rank in the pool (:meth:`~.precompile.Compiles.submit`; for a campaign's next key,
    ``call`` runs the function with that key's arguments, and the configs are not this tuning's)."""
    compiles, units = pass_units(group, label, todo, run_aligned, call, workers, timeout, go_on, space, compiles,
                                 rank)
    for unit in units:
        if not unit():
            break
    return compiles


def pass_units(group: Group, label: str, todo: Sequence[tuple[int, dict, str]],
               run_aligned: Callable[[int, str, Callable[[], Any]], str | None], call: Callable[[dict], Any],
               workers: int | None, timeout: float, go_on: Callable[[], bool] | None = None,
               space: int = 0, compiles: Compiles | None = None,
               rank: int = NOW) -> tuple[Compiles, list[Callable[[], bool]]]:
    """:func:`compile_pass`'s compiles and its configs' passes, not run yet: each unit runs one config's pass, in
    ``todo``'s order, and returns False without running it once ``go_on()`` says to stop (so that a campaign's
    next key's passes can run while the rank would otherwise wait: :meth:`~.precompile.Compiles.run_idle`)."""
    position, peers = node_share(group, label, timeout)
    device = current_cuda_device()
    compiles = compiles if compiles is not None else start_pool(workers, timeout, peers, space,
                                                                alone=group.size == 1, label=label)
    pool = compiles

    def unit(k: int, index: int, config: dict, desc: str) -> bool:
        from triton.runtime.jit import JITFunction

        if go_on is not None and not go_on():
            return False
        if rank != NEXT_KEY:
            pool.passed = k + 1
            pool.submitted.add(index)
        with _lock:
            original = JITFunction.run
            JITFunction.run = _patched(original)
            token = _active.set(_Pass(index, pool if k % peers == position else None, device, rank))
            try:
                run_aligned(index, desc, lambda: call(config))  # its errors: the warm-up's to report
            finally:
                _active.reset(token)
                JITFunction.run = original
        return True

    return compiles, [functools.partial(unit, k, *item) for k, item in enumerate(todo)]
