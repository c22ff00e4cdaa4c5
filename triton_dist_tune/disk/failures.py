"""The console's word on the configs a tuning left out because they failed (their runs raised, or gave a wrong
result), for both tuners: ``autotune``'s keys and ``contextual_autotune``'s (kernel, key)s.

Each failure is in every rank's log as it happens (``config N FAILED (rank r: error): config``). Without
``autotune_verbose`` nor ``TRITON_PRINT_AUTOTUNING`` (whose table lists each failed config and its error) the
console heard nothing of them: a config that raised a ``TypeError`` for a reason of the user's looked like a slow
config that lost. So group rank 0 says them, once, after the decision, in one warning of the ``triton_dist_tune``
logger, as the tuner's other warnings (on stderr where logging is not set up;
``logging.getLogger("triton_dist_tune").setLevel(logging.ERROR)`` silences them). The other ranks say nothing.

Never a flood: one line per distinct error (the other configs that raised it numbered on that line), at most
:data:`SHOWN` lines, then one line counting the rest; an error said before for the same decorated function
(another key of it, a campaign's next key, another kernel it launches) is not said again. Only what every rank
already has is read (the decision's outcomes): nothing is exchanged, and which configs are kept and the ranks'
agreement are as before. Where every config failed, the error every rank raises says each error instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from ..errors import per_rank
from ..records import Outcome
from . import logs

log = logging.getLogger("triton_dist_tune")

#: the distinct errors one warning shows, each on a line of its own; the rest are counted on one more line
SHOWN = 3
#: the longest error text shown on a line (its first line only; the rank logs hold it whole)
ERROR_CHARS = 240
#: the distinct errors a function remembers having said (past this, the oldest are forgotten)
REMEMBERED = 256


def say_failures(name: str, label: str, outcomes: Sequence[Outcome], said: dict[str, None]) -> None:
    """Group rank 0, after a decision of the function ``name`` (a config chosen from ``outcomes``, the decision's,
    every rank's alike): warn of the configs that failed, one line per distinct error not in ``said`` (the
    function's errors said before, kept in order; updated here)."""
    failed = [o for o in outcomes if o.state == "failed"]
    by_error: dict[str, list[Outcome]] = {}
    for outcome in failed:
        by_error.setdefault(outcome.error or "?", []).append(outcome)
    new = {error: failing for error, failing in by_error.items() if error not in said}
    if not new:
        return
    for error in new:
        said[error] = None
    while len(said) > REMEMBERED:
        del said[next(iter(said))]
    lines = [_line(error, failing) for error, failing in list(new.items())[:SHOWN]]
    rest = list(new.values())[SHOWN:]
    if rest:
        lines.append(f"  and {sum(map(len, rest))} more config(s) with {len(rest)} other error(s)")
    earlier = len(failed) - sum(map(len, new.values()))
    again = f"; {earlier} more with error(s) said before for {name}" if earlier else ""
    tried = sum(o.state != "pruned" for o in outcomes)
    log.warning("triton_dist_tune: %s %d of the %d config(s) tried failed and were left out of the choice%s; every "
                "failure is in the rank logs (%s):\n%s", label, len(failed), tried, again, logs.logs_text(),
                "\n".join(lines))


def _line(error: str, outcomes: Sequence[Outcome]) -> str:
    """One line of the warning: the first config that raised ``error``, its description, the error (its first line,
    cut at :data:`ERROR_CHARS`), and how many others raised it too."""
    first = outcomes[0]
    error = _ranks_alike(error)
    text = error.splitlines()[0] if error.strip() else "?"
    if len(text) > ERROR_CHARS or text != error.strip():
        text = f"{text[:ERROR_CHARS]} [...]"
    others = [o.index for o in outcomes[1:]]
    shown = ", ".join(map(str, others[:8])) + (f" and {len(others) - 8} more" if len(others) > 8 else "")
    also = f" (and config(s) {shown}, with the same error)" if others else ""
    earlier = " (in an earlier attempt, read from its journal)" if first.resumed else ""
    return f"  config {first.index} {first.config}: {text}{earlier}{also}"


#: where one rank's part of an error starts (``rank r: ...; rank s: ...``, as the exchanges join them)
_RANK_PART = re.compile(r"(?:^|; )rank (\d+): ")


def _ranks_alike(error: str) -> str:
    """``error`` with the ranks that raised the same text named once, ``ranks [0, 1]: ValueError: ...``, where every
    rank's part of it was written out (a config failing alike on 8 ranks was 8 copies of one line)."""
    marks = list(_RANK_PART.finditer(error))
    if not marks or marks[0].start() != 0:
        return error
    parts = [(int(m.group(1)), error[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(error)])
             for i, m in enumerate(marks)]
    return per_rank(parts)
