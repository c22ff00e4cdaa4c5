"""What "rank 1" means in an error of a tuning on a group that is not the whole job.

The tuner's messages name ranks by their rank in the tuning's group (``rank 1: key_fn failed ...``), as its
exchanges know them. On a tensor-parallel group such as global ranks [2, 3], "rank 1" is global rank 3: without
saying so, the message sends the user to the wrong process. :func:`naming_ranks` (every tuning's turn on its group:
:meth:`~.channel.Group.turn`) adds, once, which global rank each group rank is, to an
:class:`~triton_dist_tune.errors.AutotuneError` that names a rank and is raised inside it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import AutotuneError

#: a rank named in a message: ``rank 1``, ``ranks [0, 1]``, ``group ranks [1]``
_NAMES_A_RANK = re.compile(r"\branks? (\d|\[)")
#: a message that names its ranks otherwise: by global rank already (an exchange's timeout, a lost store), by MPI
#: world rank (an mpi4py sub-communicator's timeout: ``rank 0 (world rank 1) of MPI group ... (world ranks [1, 0])``),
#: or by replica (a replicas group's error, raised inside the turn of a tuning group it is not)
_NAMED_OTHERWISE = re.compile(r"\(global|\(world ranks? |\breplicas? \d|\breplicas? \[")


@contextlib.contextmanager
def naming_ranks(title: str, members: Sequence[int]) -> Iterator[None]:
    """Run the block (a tuning's turn on the group ``title``, whose global ranks by group rank are ``members``); an
    :class:`~triton_dist_tune.errors.AutotuneError` raised inside gets :func:`add_ranks_text`."""
    try:
        yield
    except AutotuneError as exc:
        add_ranks_text(exc, title, members)
        raise


def add_ranks_text(exc: Exception, title: str, members: Sequence[int]) -> None:
    """End ``exc``'s message with :func:`ranks_text` where it names a rank and the group's ranks are not the job's
    own numbering. The innermost group's turn decides, once: a tuning on the default group nested in a turn on
    another group leaves its error's ranks as they are (an error whose arguments are not one text is left too)."""
    if getattr(exc, "ranks_named", False) or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return
    exc.ranks_named = True  # type: ignore[attr-defined]
    text, message = ranks_text(title, members), exc.args[0]
    if text and _NAMES_A_RANK.search(message) and not _NAMED_OTHERWISE.search(message):
        exc.args = (f"{message}{'' if message.endswith('.') else '.'} {text}",)


def renumbered(members: Sequence[int]) -> bool:
    """Whether a group's global ranks (by group rank) are known and are not its own numbering (0, 1, ...)."""
    return bool(members) and list(members) != list(range(len(members)))


def rank_name(group: Any, rank: int) -> str:
    """How messages name group rank ``rank``: ``rank r`` where group and global ranks agree (the default group,
    one process), else ``group rank r (global rank g)``."""
    return member_name(list(getattr(group, "global_ranks", []) or []), rank)


def member_name(members: Sequence[int], rank: int) -> str:
    """:func:`rank_name` of group rank ``rank`` of a group whose global ranks by group rank are ``members``."""
    if not renumbered(members) or not 0 <= rank < len(members):
        return f"rank {rank}"
    return f"group rank {rank} (global rank {members[rank]})"


def members_name(members: Sequence[int], ranks: Sequence[int]) -> str:
    """``ranks [0, 1]``, or ``group ranks [0, 1] (global ranks [2, 3])`` (as :func:`member_name`)."""
    ranks = sorted(ranks)
    if not renumbered(members) or not all(0 <= r < len(members) for r in ranks):
        return f"ranks {ranks}"
    return f"group ranks {ranks} (global ranks {[members[r] for r in ranks]})"


def ranks_text(title: str, members: Sequence[int]) -> str:
    """``the ranks named are ranks of group 'ranks [2, 3]': group rank 0 is global rank 2, 1 is 3``; empty where
    group rank r is global rank r (the default group), the group is one rank, or its global ranks are not known."""
    members = list(members)
    if len(members) <= 1 or not renumbered(members):  # one rank's errors name its global rank
        return ""
    head = f"The ranks named are ranks of group '{title}'" if title else "The ranks named are group ranks"
    if members == list(range(members[0], members[0] + len(members))) and len(members) > 4:
        return f"{head}: group rank r is global rank r + {members[0]}"
    pairs = ", ".join(f"{r} is {g}" for r, g in enumerate(members))
    return f"{head}: group rank {pairs.replace(' is ', ' is global rank ', 1)}"


def global_ranks_named(exc: Exception) -> Exception:
    """``exc``, marked as naming ranks by their global rank already (a campaign's agreement on keys): no turn adds
    the group's ranks to it."""
    exc.ranks_named = True  # type: ignore[attr-defined]
    return exc
