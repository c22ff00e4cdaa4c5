"""The tuner's control channel between the ranks of a group, and how a job's ranks start.

- :mod:`.channel`: :class:`Group` (one primitive, ``combine``, with a deadline), the single-process group;
- :mod:`.agreement`: :func:`agree` (the same texts on every rank, by fingerprint), and what group rank 0
  computes for the group, its result or its error, on every rank alike (:func:`~.agreement.from_root`);
- :mod:`.store`: a torch.distributed group, through the job's key-value store (:mod:`.store_board`: its failure
  board; :mod:`.store_wait`: its quiet waits; :mod:`.store_peek`: its reads that never wait);
- :mod:`.mpi`: an mpi4py communicator, through a duplicate of it;
- :mod:`.resolve`: the channel of a call's ``autotune_pg`` (one per group object and process);
- :mod:`.dist`: :func:`~.dist.init_distributed`, a restart-safe ``init_process_group``;
- :mod:`.exits`: each rank's count-out at its end, and the store host's wait for it at exit (the linger);
- :mod:`.epoch`: the name of this attempt of the job, agreed by every rank (the keys' prefix after a restart), or
  by each group's ranks;
- :mod:`.unresolved`, :mod:`.note`, :mod:`.beat`, :mod:`.calls`: a rank's wrong-group error told to the ranks that
  wait for it (:mod:`.calls`: which calls a thread is inside, what a note is about).
"""

from .agreement import Agreement, agree
from .channel import ExchangeError, Group, SingleGroup, default_timeout
from .resolve import find_group, forget_groups, resolve_group

__all__ = ["Agreement", "ExchangeError", "Group", "SingleGroup", "agree", "default_timeout",
           "find_group", "forget_groups", "resolve_group"]
