"""Exceptions raised by triton-dist-tune.

Every error that ends a tuning is raised on every rank of the group with the same message, so that no rank is
left waiting for the others.
"""

from __future__ import annotations

import os


class AutotuneError(RuntimeError):
    """Base class of every error the tuner raises."""


class BadInputError(AutotuneError, ValueError):
    """The config space, a callback or a call's arguments are unusable (raised before any measurement)."""


class MismatchError(AutotuneError):
    """The ranks of a group called the tuned function with different keys, config spaces or group sizes."""


class AllConfigsFailedError(AutotuneError):
    """Every config was pruned, failed, crashed or hung on some rank: nothing is left to choose from."""


class GroupTimeoutError(AutotuneError):
    """Some ranks did not reach a step of the tuning protocol in time (a hang, a crash, or a wrong group)."""


class CrossedTurnsError(GroupTimeoutError):
    """Threads of this process nest tunings on several groups in opposite orders: each holds one group's turn (its
    lock for a tuning) and waits for another's, which another thread of the cycle holds. Every thread of the cycle
    raises this instead of waiting for ever; no config is blamed."""


class RankFailedError(GroupTimeoutError):
    """A rank's run of a config raised while other ranks were inside a collective of the function; those ended
    their processes (the only way out of a collective), and every rank still waiting raises this with the failing
    rank's error. The config is journaled as failed: a restarted (or rerun) job resumes without it (in the compile
    pass, which blames nothing, it is journaled as interrupted: the rerun measures it, without a compile pass)."""


class DevicePoisonedError(AutotuneError):
    """A config left some rank's GPU context unusable (an illegal memory access, a device-side assert...): every
    rank stops, the config is journaled as failed, and a restarted job resumes without it. When the run had started
    from the tuner's NaN fill, no config is blamed and the restarted job fills nothing."""


class CaptureError(AutotuneError):
    """A call would tune a key while its CUDA stream is being captured into a graph (``torch.cuda.graph``), where
    tuning cannot run; nothing was launched. Tune the key ahead, outside the capture (see docs/cuda-graphs.md)."""


class WrongResult(Exception):
    """A config's result differs from ``ref_prog``'s (a config failure, not an error of the tuner)."""


class CompileFailed(Exception):
    """A config's kernels did not compile ahead (a config failure: the message is the compiler's error)."""


def one_cause(errors: list[str]) -> str | None:
    """When every config failed with the same error (two or more configs), the end of the message that says it once,
    as what it most likely is: the function or its environment (a missing ``init_process_group``, no GPU driver),
    not the configs; else None."""
    if len(errors) > 1 and len(set(errors)) == 1:
        if "wrong result: " in errors[0]:  # every config's result differs alike: the reference is as suspect
            return (f", all {len(errors)} with the same error, so the cause is most likely ref_prog (what it returns "
                    f"and what it leaves in the arguments the result holds), its tolerances or the function, not "
                    f"the configs: {errors[0]}")
        return (f", all {len(errors)} with the same error, so the cause is most likely the function or its "
                f"environment, not the configs: {errors[0]}")
    return None


def _text_of(exc: BaseException) -> str:
    """``str(exc)``, or what says it failed: an exception whose ``__str__`` raises must not break the tuner's own
    handling of it (one rank would leave the protocol while the others wait to hear which config failed)."""
    try:
        return str(exc)
    except Exception as inner:
        return f"<str() of the {type(exc).__name__} raised {type(inner).__name__}>"


#: the texts Triton reads as true in a switch such as ``TRITON_INTERPRET`` (its ``getenv_bool``: any case, nothing
#: around them); anything else is false there, ``2`` and `` 1`` included
TRITON_TRUE = ("1", "true", "on", "yes", "y")


def triton_flag(value: str | None) -> bool:
    """Whether a switch of Triton's (``TRITON_INTERPRET``) is on, as Triton reads it: :data:`TRITON_TRUE`."""
    return (value or "").lower() in TRITON_TRUE


def _interpreting() -> bool:
    """Whether ``TRITON_INTERPRET`` is on, as Triton reads it (:func:`triton_flag`)."""
    return triton_flag(os.environ.get("TRITON_INTERPRET"))


def describe_error(exc: BaseException) -> str:
    """A one-line description of an exception, for logs, journals and error messages."""
    whole = _text_of(exc)
    if isinstance(exc, (WrongResult, CompileFailed)):
        return whole[:500]
    text = whole.strip().splitlines()
    hint = ""
    if "active drivers" in whole and _interpreting():  # the interpreter runs kernels, not Triton's benchmarking
        hint = (" (Triton asked for a GPU driver although TRITON_INTERPRET is set: its interpreter runs kernels, not "
                "Triton's own benchmarking, which a @triton.autotune kernel tuning by itself needs (outside "
                "contextual_autotune), as does triton.testing.do_bench; launch such kernels from a "
                "contextual_autotune function, which times them itself, or give triton.autotune a do_bench= of "
                "your own)")
    elif "active drivers" in whole:  # Triton's "0 active drivers ([]). There should only be one."
        hint = (" (Triton found no GPU driver: on a machine without a GPU, set TRITON_INTERPRET=1 to run Triton "
                "kernels in its interpreter, or start the job with launch.sh, which does)")
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")[:500] + hint


def per_rank(parts: list[tuple[int, str]], name: str = "") -> str:
    """Every rank's part of an error, once per distinct text: ``ranks [0, 1]: X; rank 2: Y``. A part that starts
    with ``name`` (the function's name, already at the start of the message) has it cut off."""
    texts: dict[str, list[int]] = {}
    for rank, text in parts:
        for prefix in (f"{name}: ", f"{name}() ", f"[{name}] ") if name else ():
            if text.startswith(prefix):
                text = text[len(prefix):]
                break
        texts.setdefault(text, []).append(rank)
    return "; ".join(f"rank {ranks[0]}: {text}" if len(ranks) == 1 else f"ranks {ranks}: {text}"
                     for text, ranks in texts.items())
