"""Scoped interception of ``triton.autotune`` kernel launches, and the few Triton internals it relies on.

While at least one contextual tuning is running in the process, ``Autotuner.run`` is replaced (reference-counted,
under a lock) by a wrapper that looks up the handler of the *current* context (a :class:`contextvars.ContextVar`):

- with a handler (inside a tuned function, in the thread or task that called it), the launch goes to the handler;
- without one (other threads, code outside the tuned function), the wrapper calls the original ``run`` exactly.

When the last tuning ends the original method is put back, so outside tunings Triton is untouched.

The key of a launch is computed exactly as ``Autotuner.run`` computes it (the same code in Triton 3.6 and 3.9):
the values of the ``key`` arguments, then the dtype of every argument that has one. Writing
``autotuner.cache[key] = config`` therefore makes later stock launches hit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, Protocol

log = logging.getLogger("triton_dist_tune")

#: a ``triton.runtime.autotuner.Autotuner`` (Triton is imported only when a tuning starts)
Autotuner = Any


class Handler(Protocol):
    """What receives the intercepted launches of one context."""

    def launch(self, autotuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Launch ``autotuner``'s kernel for a ``kernel[grid](*args, **kwargs)`` call; return what it returns."""


_ACTIVE: ContextVar[Handler | None] = ContextVar("triton_dist_tune_contextual", default=None)
_patch_lock = threading.Lock()
_patch_depth = 0
_original_run: Any = None


def _autotuner_class() -> type:
    from triton.runtime.autotuner import Autotuner as cls

    return cls


def _intercepted_run(self: Autotuner, *args: Any, **kwargs: Any) -> Any:
    handler = _ACTIVE.get()
    if handler is None or kwargs.get("warmup") or len(self.configs) <= 1:
        return _original_run(self, *args, **kwargs)
    return handler.launch(self, args, kwargs)


def _install() -> None:
    global _patch_depth, _original_run
    with _patch_lock:
        if _patch_depth == 0:
            cls = _autotuner_class()
            current = cls.__dict__.get("run")
            if current is not _intercepted_run:
                _original_run = current
            cls.run = _intercepted_run
        _patch_depth += 1


def _uninstall() -> None:
    global _patch_depth
    with _patch_lock:
        _patch_depth -= 1
        if _patch_depth == 0:
            cls = _autotuner_class()
            if cls.__dict__.get("run") is _intercepted_run:
                cls.run = _original_run
            else:
                log.warning("triton_dist_tune: Autotuner.run was replaced by someone else during a contextual "
                            "tuning; leaving their replacement in place")


@contextlib.contextmanager
def intercepting(handler: Handler) -> Iterator[None]:
    """Send every ``triton.autotune`` launch of the current context to ``handler`` while the block runs."""
    _install()
    token = _ACTIVE.set(handler)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        _uninstall()


def active_handler() -> Handler | None:
    """The handler of the current context, if any."""
    return _ACTIVE.get()


def patched() -> bool:
    """Whether ``Autotuner.run`` is currently replaced (for tests)."""
    return _autotuner_class().__dict__.get("run") is _intercepted_run


# -- Triton internals ------------------------------------------------------------------------------------------------


def tuning_key(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> tuple:
    """The key under which ``Autotuner.run`` caches its choice for this launch (same code in 3.6 and 3.9)."""
    names = autotuner.arg_names
    all_args = {**dict(zip(names, args, strict=False)), **kwargs}
    named = {k: v for k, v in all_args.items() if k in names}
    key = [named[k] for k in autotuner.keys if k in named]
    for value in named.values():
        if hasattr(value, "dtype"):
            key.append(str(value.dtype))
    return tuple(key)


def kernel_id(autotuner: Autotuner) -> str:
    """The kernel's name across ranks and processes: module and qualified name of the jitted Python function."""
    base = autotuner.base_fn
    return f"{base.__module__}.{base.__qualname__}"


def kernel_name(autotuner: Autotuner) -> str:
    """The short name Triton prints (``base_fn.__name__``)."""
    return autotuner.base_fn.__name__


def pruned_indices(autotuner: Autotuner, args: tuple, kwargs: dict[str, Any]) -> list[int]:
    """Indices into ``autotuner.configs`` of the configs its own pruning (``prune_configs_by``) keeps for this
    launch, in config order."""
    autotuner.nargs = dict(zip(autotuner.arg_names, args, strict=False))
    try:
        kept = autotuner.prune_configs(kwargs)
    finally:
        autotuner.nargs = None
    ids = {id(c) for c in kept}
    found = [i for i, c in enumerate(autotuner.configs) if id(c) in ids]
    if len(found) < len(kept):  # a pruning function that returned new Config objects: match them by value
        found = sorted({i for c in kept for i, own in enumerate(autotuner.configs) if own == c})
    return found


def launch_with(autotuner: Autotuner, config: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Launch the kernel with ``config`` exactly as ``Autotuner.run`` does once the key is decided."""
    autotuner.nargs = dict(zip(autotuner.arg_names, args, strict=False))
    autotuner.best_config = config
    try:
        if config.pre_hook is not None:
            config.pre_hook({**autotuner.nargs, **kwargs, **config.all_kwargs()})
        return autotuner.fn.run(*args, **kwargs, **config.all_kwargs())
    finally:
        autotuner.nargs = None


def compile_threads() -> int:
    """Threads used to precompile configs: ``TRITON_DIST_AUTOTUNE_COMPILE_THREADS`` or min(8, CPU count)."""
    value = os.environ.get("TRITON_DIST_AUTOTUNE_COMPILE_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else min(8, os.cpu_count() or 1)


def precompile(autotuner: Autotuner, indices: list[int], args: tuple, kwargs: dict[str, Any]) -> dict[int, str]:
    """Compile the kernel for each config of ``indices`` in a bounded thread pool (``fn.warmup(..., grid=...)``,
    which compiles without launching); returns {index: error} of the configs that failed to compile.

    Triton's compiler spends most of its time outside the interpreter lock (MLIR, LLVM, ptxas), so the configs'
    compilations overlap. Each worker thread first selects the caller's CUDA device, so that kernels are compiled
    for, and cached on, the device the launches will use.
    """
    from .measure import describe_error

    if not indices:
        return {}
    launch_kwargs = {k: v for k, v in kwargs.items() if k != "warmup"}
    device = None
    try:
        import torch

        if torch.cuda.is_available():
            device = torch.cuda.current_device()
    except Exception:
        pass

    def compile_one(index: int) -> tuple[int, str | None]:
        try:
            if device is not None:
                import torch

                torch.cuda.set_device(device)
            autotuner.fn.warmup(*args, **launch_kwargs, **autotuner.configs[index].all_kwargs())
            return index, None
        except Exception as exc:  # a config that does not compile is data, not an error
            return index, f"compile: {describe_error(exc)}"

    with ThreadPoolExecutor(max_workers=max(1, min(compile_threads(), len(indices))),
                            thread_name_prefix="tdt-precompile") as pool:
        return {i: e for i, e in pool.map(compile_one, indices) if e}
