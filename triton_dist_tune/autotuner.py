"""``triton_dist.autotuner``'s path: ``from triton_dist_tune.autotuner import contextual_autotune`` works as
``from triton_dist.autotuner import contextual_autotune`` does in Triton-distributed, so that porting the decorator
is a rename of the import (the function-level tuner is at ``triton_dist_tune.tune``, as ``triton_dist.tune``). What
differs after the import (the tuner's class is :class:`ContextualTuner`; a raise inside the function is an
``AutotuneError`` on every rank; what the kernels hold after tuning) is in docs/api.md, "Where this differs".

Importing this module patches nothing: ``triton.autotune`` launches are intercepted only inside a tuned call (see
:mod:`triton_dist_tune.contextual.intercept`).
"""

from __future__ import annotations

from .contextual import contextual_autotune
from .contextual.tuner import ContextualTuner

__all__ = ["ContextualTuner", "contextual_autotune"]
