"""The function-level tuner behind :func:`~triton_dist_tune.autotune`.

- :mod:`.options`: :class:`TuneOptions`, every option of the decorator, checked in one place.
- :mod:`.tuner`: :class:`Tuner`, the routing of one decorated function's calls.
- :mod:`.tuned`: :class:`~.tuned.TunedFunction`, what that function is and has decided (space, options,
  decisions): what a tuning reads and fills.
- :mod:`.tuning`: one tuning of one key on one group (the protocol).
- :mod:`.agreed`: the steps whose inputs every rank computes and the group agrees on (call, prune, preparation).
- :mod:`.decide`: the group's choice and its cache record.
"""

from .options import TuneOptions
from .tuner import Tuner

__all__ = ["TuneOptions", "Tuner"]
