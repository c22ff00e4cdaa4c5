"""triton-dist-tune: autotuning for distributed GPU kernels, with every rank in agreement.

- :func:`autotune`: tune a whole function (collectives and Triton kernels inside) over a config space.
- :func:`contextual_autotune`: tune the ``triton.autotune`` kernels inside a function, in their real context.
- :func:`campaign`: tune a function at many keys ahead of time, spread over the job's ranks (see :class:`Call`).
- :func:`init_distributed`: a restart-safe ``init_process_group``.
"""

from ._version import __version__  # noqa: E402
from .contextual import contextual_autotune  # noqa: E402
from .errors import (
    AllConfigsFailedError,
    AutotuneError,
    BadInputError,
    CaptureError,
    CrossedTurnsError,
    DevicePoisonedError,
    GroupTimeoutError,
    MismatchError,
    RankFailedError,
)
from .function.campaign import campaign  # noqa: E402
from .function.campaign_calls import Call  # noqa: E402
from .function.summary import Summary  # noqa: E402
from .group.channel import ExchangeError, PlainDataError  # noqa: E402
from .group.dist import init_distributed  # noqa: E402
from .tune import autotune, to_hashable  # noqa: E402

__all__ = [
    "AllConfigsFailedError",
    "AutotuneError",
    "BadInputError",
    "CaptureError",
    "Call",
    "CrossedTurnsError",
    "DevicePoisonedError",
    "ExchangeError",
    "GroupTimeoutError",
    "MismatchError",
    "PlainDataError",
    "RankFailedError",
    "Summary",
    "__version__",
    "autotune",
    "campaign",
    "contextual_autotune",
    "init_distributed",
    "to_hashable",
]
