"""Tuned calls inside a CUDA-graph capture and under ``torch.compile`` (see docs/cuda-graphs.md).

- :func:`capturing`: whether the current CUDA stream is being captured (``torch.cuda.is_current_stream_capturing``;
  False without CUDA). Asked only on a path that would tune, never on a decided call.
- :func:`tuning_in_capture`: the error a call raises when it would tune while its stream is captured: tuning
  synchronizes, measures and talks to the group, which a capture forbids (the capture would be invalidated). It
  names the key and how to tune ahead.
- :func:`eagerly`: runs a tuner's slow path outside ``torch.compile``'s tracing: ``torch._dynamo`` never inlines it
  (a graph break) and, once Dynamo is loaded, the call runs under ``torch._dynamo.disable``, so that no frame of the
  tuner (nor the tuned function while it is tuned) is compiled, and each key is tuned once, by the tuner, whatever
  Dynamo recompiles.
- :func:`is_compiling`: ``torch.compiler.is_dynamo_compiling`` (True only while Dynamo traces), to bind once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .errors import CaptureError

_cuda: bool | None = None


def capturing() -> bool:
    """Whether the current CUDA stream is being captured into a CUDA graph (False where CUDA is not available)."""
    global _cuda
    if _cuda is None:
        import torch

        _cuda = bool(torch.cuda.is_available())
    if not _cuda:
        return False
    import torch

    return bool(torch.cuda.is_current_stream_capturing())


def tuning_in_capture(name: str, undecided: str, how: str) -> CaptureError:
    """The error of a call of ``name`` that would tune while its stream is captured; ``undecided``: what is not
    decided (``key (64,) is not decided``); ``how``: what tunes it ahead for this tuner."""
    return CaptureError(
        f"{name}: {undecided}, and this call is inside a CUDA graph capture (torch.cuda.graph), where "
        f"tuning cannot run (it synchronizes, measures and talks to the group; the capture would be invalidated). "
        f"Tune the key ahead, outside the capture: {how}. Nothing was launched; the capture is left as it was.")


def eagerly(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, never traced by ``torch.compile``: Dynamo does not inline this function (it is marked as
    ``torch.compiler.disable`` marks), and once Dynamo is loaded the call runs under ``torch._dynamo.disable``."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None or not hasattr(dynamo, "disable"):
        return call(*args)
    return dynamo.disable(call)(*args)


eagerly._torchdynamo_disable = True  # type: ignore[attr-defined]  # read by Dynamo, statically: no import needed


def is_compiling() -> Callable[[], bool]:
    """``torch.compiler.is_dynamo_compiling`` (True only while Dynamo traces its caller; one Python call, where
    ``is_compiling`` makes two), else ``torch.compiler.is_compiling``: to bind once where a tuned function is
    decorated."""
    import torch.compiler

    return getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
