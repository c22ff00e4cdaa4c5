"""triton-dist-tune: autotuning for distributed GPU kernels, with every rank in agreement.

- :func:`autotune`: tune a whole function (collectives and Triton kernels inside) over a config space.
- :func:`contextual_autotune`: tune the ``triton.autotune`` kernels inside a function, in their real context.
- :func:`init_distributed`: a restart-safe ``init_process_group``.
"""

from ._version import __version__  # noqa: E402
from .contextual import contextual_autotune  # noqa: E402
from .errors import (
    AllConfigsFailedError,
    AutotuneError,
    BadInputError,
    DevicePoisonedError,
    GroupTimeoutError,
    MismatchError,
)
from .group.dist import init_distributed  # noqa: E402
from .tune import autotune, to_hashable  # noqa: E402

__all__ = [
    "AllConfigsFailedError",
    "AutotuneError",
    "BadInputError",
    "DevicePoisonedError",
    "GroupTimeoutError",
    "MismatchError",
    "__version__",
    "autotune",
    "contextual_autotune",
    "init_distributed",
    "to_hashable",
]
