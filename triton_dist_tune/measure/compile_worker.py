"""One compile worker process (:mod:`~triton_dist_tune.measure.compile_workers`): run as a script, it imports only
Triton, what the parent names at its start and what each task names.

Run with ``--niceness=N`` (how much to lower its priority: :data:`NICENESS` without it), then the names of modules
to import first (Triton's compiler, torch: :func:`~triton_dist_tune.measure.worker_process.preloaded`), it imports
them, then says it is ready in one JSON line, ``{"ready": true}``.
Each task arrives on standard input as an 8-byte length and a pickle from the parent process that started it
(never from a file or the store): ``(sys.path, TRITON_* variables, Triton's version key, module, qualname,
signature, constexprs, attrs, target, options)``, the variables as the parent has them now (its cache folder, say),
the key as the parent computed it (the same Triton: the worker runs
the parent's interpreter and path). The worker imports
``module``, finds the ``@triton.jit`` kernel bound to ``qualname`` (through ``triton.autotune`` or
``triton.heuristics`` wrappers), compiles it with the kernel's own ``compile`` (``triton.compile``) into Triton's
cache folder, and answers one JSON line: ``{"ok": true}``, or ``{"ok": false, "error": "..."}``. Standard output
carries only the answers: anything else written to it goes to standard error. The worker ends at the end of its
input (the parent ended or closed it). A worker forked from the parent (:class:`~triton_dist_tune.measure.
compile_workers.Forked`) runs :func:`serve` on its two pipes, with everything imported already.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import struct
import sys
from typing import Any, BinaryIO, TextIO


def kernel(module: str, qualname: str) -> Any:
    """The ``@triton.jit`` kernel bound to ``qualname`` in ``module``."""
    from triton.runtime.jit import JITFunction

    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    for _ in range(8):  # through triton.autotune / triton.heuristics wrappers
        if isinstance(found, JITFunction):
            return found
        found = getattr(found, "fn", None)
    raise LookupError(f"{module}.{qualname} is not a @triton.jit kernel")


def routable() -> bool:
    """Whether Triton's JIT compiles a kernel it has not compiled through ``JITFunction._do_compile`` (Triton 3.5 and
    newer), the call :func:`~triton_dist_tune.measure.compile_workers.shared_pool` wraps to hand that compile to a
    worker. Triton 3.2 to 3.4 have no such call (their ``JITFunction.run`` compiles inline): there no worker is
    started and the rank's threads compile, as with ``TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=0``."""
    try:
        from triton.runtime.jit import JITFunction
    except Exception:
        return False
    return callable(getattr(JITFunction, "_do_compile", None))


def triton_key_module() -> Any | None:
    """The module that defines Triton's version key function ``triton_key`` and calls it to key each compile:
    ``triton.runtime.cache`` (Triton 3.5 and newer), ``triton.compiler.compiler`` (Triton 3.2 to 3.4); None for a
    Triton without it."""
    for name in ("triton.runtime.cache", "triton.compiler.compiler"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(module, "triton_key", None)):
            return module
    return None


def knob_groups() -> dict[str, Any]:
    """Triton's knob groups by name (``triton.knobs.cache``, ``.compilation``, ``.nvidia``...); none before Triton
    3.4, whose settings are environment variables only."""
    try:
        knobs = importlib.import_module("triton.knobs")
    except ImportError:
        return {}
    base = getattr(knobs, "base_knobs", None)
    return {name: group for name, group in sorted(vars(knobs).items()) if base is not None and isinstance(group, base)}


def explicit_knobs() -> dict[str, dict[str, Any]] | None:
    """The Triton knobs this process set in code (``triton.knobs.cache.dir = ...``), by group, for a worker to compile
    under: such a value wins over its environment variable, and a forked worker keeps the values set before its fork
    (so a cache folder set in code after it was forked never reached it: it compiled into the old folder, and the
    rank compiled every kernel again itself). None where one holds a value that is not plain data (a class, a tool),
    or where this process instruments Triton's compiler (:func:`instrumented`): a worker cannot be given it, and the
    rank's threads compile."""
    if instrumented():
        return None
    explicit: dict[str, dict[str, Any]] = {}
    for name, group in knob_groups().items():
        values = {k: v for k, v in vars(group).items() if k in group.knob_descriptors}
        if any(not isinstance(v, (str, int, float, bool, type(None))) for v in values.values()):
            return None
        if values:
            explicit[name] = values
    return explicit


def instrumented() -> str | None:
    """What instruments Triton's compiler in this process, which a worker's compile would go without, or None.

    A worker compiles under the key the rank would, but a pass or stage that only this process adds would be missing
    from its kernel, cached under that same key: the rank would then load a kernel built without the sanitizer or
    the profiler's instrumentation it asked for. So any of these leaves the kernels to the rank's threads:
    ``triton.knobs.compilation.instrumentation_mode`` (set in code by Proton's instrumentation and by the sanitizers;
    Triton 3.6's CUDA backend reads it beside the option), ``triton.knobs.runtime.add_stages_inspection_hook``, a
    backend's ``instrumentation`` (Triton 3.6: Proton's) and callbacks registered with ``triton._instrumentation``
    (newer Triton: Proton's)."""
    try:
        import triton
        from triton import knobs
    except ImportError:
        return None
    if getattr(getattr(knobs, "compilation", None), "instrumentation_mode", ""):
        return f"triton.knobs.compilation.instrumentation_mode = {knobs.compilation.instrumentation_mode!r}"
    if getattr(getattr(knobs, "runtime", None), "add_stages_inspection_hook", None) is not None:
        return "triton.knobs.runtime.add_stages_inspection_hook"
    for name, backend in sorted(getattr(getattr(triton, "backends", None), "backends", {}).items()):
        if getattr(getattr(backend, "compiler", None), "instrumentation", None):
            return f"the {name} backend's instrumentation"
    if getattr(sys.modules.get("triton._instrumentation"), "_callbacks", None):
        return "callbacks registered with triton._instrumentation"
    return None


def apply_knobs(explicit: dict[str, dict[str, Any]]) -> None:
    """Make this worker's knobs the rank's: every knob set in code here before (inherited from the rank at the fork)
    is cleared, back to its environment variable, then ``explicit`` (:func:`explicit_knobs`) is set."""
    groups = knob_groups()
    for group in groups.values():
        group.reset()
    for name, values in explicit.items():
        for knob, value in values.items():
            setattr(groups[name], knob, value)


def compile_one(task: tuple) -> None:
    """Compile one task's kernel into Triton's cache."""
    import triton
    from triton.compiler import ASTSource

    path, triton_env, version_key, module, qualname, signature, constexprs, attrs, target, options, knobs = task
    sys.path.extend(p for p in path if p not in sys.path)
    holder = triton_key_module() if version_key is not None else None
    if holder is not None:
        holder.triton_key = lambda: version_key
    for name in [k for k in os.environ if k.startswith("TRITON_") and k not in triton_env]:
        del os.environ[name]
    os.environ.update(triton_env)
    apply_knobs(knobs)
    fn = kernel(module, qualname)
    source = getattr(fn, "ASTSource", ASTSource)
    getattr(fn, "compile", triton.compile)(source(fn, signature, constexprs, attrs), target=target, options=options)


#: a worker's niceness: the rank's own threads (its warm-ups, captures and timed launches, which run while the
#: workers compile ahead) take a CPU before any worker does; a worker still has every CPU the rank leaves idle
NICENESS = 10
#: the niceness of a worker that compiles guesses (:mod:`~triton_dist_tune.measure.daemon_pool`'s speculative
#: threads): the most Linux gives, so that a compile a stage waits for gets most of a CPU it shares with a guess (under
#: Linux's scheduler a process of niceness 10 weighs 7 times one of 19)
SPECULATIVE_NICENESS = 19


def serve(tasks: BinaryIO, answers: TextIO, niceness: int = NICENESS) -> None:
    """Lower this process's priority by ``niceness``, say ready, then answer each task of ``tasks`` on ``answers``
    until the end of ``tasks``."""
    try:
        os.nice(niceness)
    except OSError:
        pass
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    while True:
        head = tasks.read(8)
        if len(head) < 8:
            return
        body = tasks.read(struct.unpack("<Q", head)[0])
        try:
            compile_one(pickle.loads(body))
            answer: dict[str, Any] = {"ok": True}
        except BaseException as exc:  # the parent compiles it itself, and raises what Triton raises there
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def main() -> None:
    """The worker run as a script (see the module docstring): ``[--niceness=N] module ...``, then :func:`serve` on
    standard input, answering on standard output (everything else written there goes to standard error)."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # print() and C code write to standard error; standard output is the answers' alone
    sys.stdout = sys.stderr
    names = sys.argv[1:]
    niceness = NICENESS
    if names and names[0].startswith("--niceness="):
        niceness = int(names.pop(0).split("=", 1)[1])
    for name in names:  # what the parent names, before the first task (a module that fails: at its task)
        try:
            importlib.import_module(name)
        except Exception:
            pass
    serve(sys.stdin.buffer, answers, niceness)
    # every answer is flushed and every kernel written: end here, without the interpreter's end, which walks what the
    # imports made (with torch: 0.7-1.1 s, which the parent's exit waited for; 2 s and a kill past that)
    os._exit(0)


if __name__ == "__main__":
    main()
