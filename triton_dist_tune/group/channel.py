"""The tuner's own control channel between the ranks of a group.

The tuner never issues a collective on the user's process group: its messages could then be matched against the
collectives inside the user's function. Instead every group gets a channel of its own:

- a torch.distributed group (any backend, subgroups included) talks through the job's key-value store, under a
  namespace made of the restart attempt, the group's name, its global ranks, its incarnation and a sequence
  number; each exchange gathers to group rank 0 and broadcasts one combined result, so a rank's requests per
  exchange do not grow with the group;
- an mpi4py communicator talks through a duplicate of it (``Dup`` gives it a separate message context);
- a single process talks to nobody.

All exchanges are one primitive, :meth:`Group.combine` (``allgather``, ``broadcast`` and ``barrier`` are made of
it), with a deadline: a rank that does not show up in time
makes every waiting rank raise :class:`~triton_dist_tune.errors.GroupTimeoutError` naming the missing ranks, never hang.
"""


from __future__ import annotations

import contextlib
import functools
import json
import logging
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .. import settings
from ..errors import BadInputError, MismatchError, RankFailedError
from ..records import COMPILE_PASS, FROM_THE_FILL
from . import codec, meter
from .rank_names import naming_ranks
from .threads import Turns

DEFAULT_TIMEOUT_S = settings.DEFAULT_TIMEOUT_S
#: what torch.distributed.new_group returns on ranks that are not members of the new group
NON_MEMBER = -100


def not_a_member(option: str = "autotune_pg", mpi: bool = False) -> str:
    """The error of a rank that passed, as ``option``, a group it is not a member of."""
    made = ("MPI's Split and Create give MPI.COMM_NULL to the ranks outside the new communicator" if mpi else
            "torch.distributed.new_group returns GroupMember.NON_GROUP_MEMBER, -100, on the ranks outside the new "
            "group")
    return (f"{option}: this rank is not a member of the {'communicator' if mpi else 'process group'} it was "
            f"called with ({made}): call the tuned function with {option} only on the group's members")


log = logging.getLogger("triton_dist_tune")


def default_timeout() -> float:
    """Seconds a rank waits for the others at one step (``TRITON_DIST_AUTOTUNE_TIMEOUT``, default 300)."""
    return settings.current().timeout


class Group:
    """A group of ranks that tune together. Subclasses implement :meth:`combine`."""

    rank: int = 0
    size: int = 1
    name: str = "single"
    #: the group as users know it, in messages and tables: ``default`` (the default torch group), ``ranks [0, 2]``
    #: (another torch group), or its name
    title: str = "this process alone"
    #: what identifies the group in this process's state (decisions, tables): its kind, name and global ranks
    identity: tuple = ("single",)
    #: the members' global ranks, by group rank, for records (journals): a torch group's global ranks, an mpi4py
    #: communicator's ``COMM_WORLD`` ranks; empty where they are not known (one process)
    member_ranks: tuple = ()

    def __init__(self) -> None:
        #: held by a thread for a whole tuning on this group, so that two threads never interleave its exchanges
        #: (taken through :meth:`turn`)
        self.lock = threading.RLock()
        self.turns = Turns(self.lock)
        #: per thread: the exchanges this rank had begun when each of the thread's turns in progress began, outermost
        #: first (:meth:`turn`, :meth:`turn_began`)
        self._turns_began = threading.local()

    def tuning_threads(self) -> int:
        """How many threads of this process are tuning on this group now (holding its lock or waiting for it)."""
        return self.turns.count()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Hold :attr:`lock` for one tuning on this group, one thread at a time (re-entrant), counting the threads
        that tune on it at once: an exchange error raised inside while another thread tuned on it too says so
        (:mod:`.threads`); an error naming a rank says which global rank it is (:mod:`.rank_names`). An interruption
        (any ``BaseException`` that is not an ``Exception``) leaving it after this rank began an exchange in it leaves
        the group's exchanges (:meth:`leave`): the peers are in the same call, one exchange on. Before its first one,
        the rank has taken no step the peers have not (its call again joins them where they wait), and a call that
        makes none (a rank-local function's serving) has no peer to tell: nothing is sent (a peer's later tuning
        would have read it as this rank leaving). A peer past the turn when it reads what this rank left (the
        interruption came after the turn's last exchange: no peer waits in it any more) waits a short grace for this
        rank's next call, and passes over it if it comes (:mod:`.passover`, :class:`PassedOver`)."""
        with naming_ranks(self.title, self.member_ranks), self.turns.turn(self.title, (MismatchError, ExchangeError)):
            begun = self.exchanges()  # (this thread's turn: another's exchanges are not counted)
            began = self._began()
            began.append(begun)
            try:
                yield
            except Exception:
                raise
            except BaseException as exc:  # Ctrl-C, sys.exit, a cancelled task: raised on, the others told
                if self.exchanges() != begun or self._promised():
                    self.leave(exc)
                raise
            finally:
                began.pop()

    def _began(self) -> list[int]:
        """This thread's list of when its turns in progress on the group began (:attr:`_turns_began`)."""
        began = getattr(self._turns_began, "began", None)
        if began is None:
            began = self._turns_began.began = []
        return began

    def turn_began(self) -> int:
        """How many exchanges this rank had begun on the group when the outermost turn this thread is in began;
        outside a turn, how many it has begun now (it is past every turn it was in)."""
        began = self._began()
        return began[0] if began else self.exchanges()

    def exchanges(self) -> int:
        """How many exchanges this rank has begun on the group (0 where the channel does not count them)."""
        return 0

    def promise_next_exchange(self, promised: bool = True) -> None:
        """(``promised``: made, else withdrawn.) This rank's peers may go on, in this turn, to its next exchange on
        the group on its word alone, before it begins one (its count completing a hot call's settled key:
        ``contextual/newkeys.py``): an interruption before that exchange begins leaves the group's exchanges as one
        after an exchange in the turn does (:meth:`turn`, :meth:`leave`). This base has no peers to tell."""

    def _promised(self) -> bool:
        """Whether this rank's :meth:`promise_next_exchange` stands (no exchange begun since)."""
        return False

    def leave(self, interruption: BaseException) -> None:
        """This rank leaves the call it was in on this group by ``interruption`` (raised on): its peers, waiting
        for it at an exchange or coming to one, must hear of it there and stay in step with it. This base tells
        nobody (a single process; an MPI channel, whose waits mark it broken when they are interrupted)."""

    def keep_unread(self, keep: Callable[[Any], None], begun: int) -> bool:
        """Where an interruption ended this rank's part of the last exchange it began after its message was written
        (in the wait for the result, where the rank cannot know whether its peers got it, or once it read it, before
        its caller took it): have :meth:`read_unread` read the result again later and call ``keep`` with it; returns
        whether it will. ``begun``: :meth:`exchanges` before the caller's exchange; nothing is kept where no exchange
        began since (the interruption came before it: the last exchange awaited is an earlier step's). This base
        never does (an MPI channel's interrupted wait marks it broken)."""
        return False

    def raise_if_counted_out(self, what: str, timeout: float | None = None) -> None:
        """Before a step made once, at a point every rank reaches alike (``what``: a ``contextual_autotune``
        agreement at call N, which no caller makes again): where this rank left its last call and its peers raised
        ``RankFailedError`` at this very step without it (they counted it out there past their grace, or another
        rank that left with it), raise it here too, writing nothing, so that the ranks' next steps pair
        (:mod:`.passover`; ``timeout``: the step's deadline, for a read it may wait for). This base has no such
        record."""

    def has_unread(self) -> bool:
        """Whether :meth:`keep_unread` left a result to read (no store request)."""
        return False

    def read_unread(self) -> None:
        """Read the result :meth:`keep_unread` left to read, waiting for it as that exchange would have, and call its
        ``keep`` with it; nothing where some rank's error ended that exchange (every rank raised it) or where none is
        left to read. Done first at this rank's next exchange on the group, and by a tuning call (and the check of a
        call inside a CUDA graph's capture) before it looks for its key's decision: the result is kept in the store
        until this rank's next message is read."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every subclass's :meth:`combine` is charged to the tuning's ``exchange`` time (this thread's
        :mod:`~triton_dist_tune.group.meter`)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("combine")
        if own is not None:
            cls.combine = _charged(own)  # type: ignore[method-assign]

    def combine(self, obj: Any, what: str, fn: Callable[[list[Any]], Any], timeout: float | None = None) -> Any:
        """Every rank contributes ``obj``; ``fn`` (run once, on group rank 0) turns the list of contributions, by
        group rank, into one result, which every rank gets back.

        ``what`` names the step in the error raised when some rank does not arrive within ``timeout`` seconds. An
        exception raised by ``fn`` is raised on every rank (as :class:`ExchangeError`). Give a ``fn`` whose result
        does not grow with the group (a maximum, the ranks that failed) to keep the traffic linear in its size.
        """
        raise NotImplementedError

    def allgather(self, obj: Any, what: str, timeout: float | None = None) -> list[Any]:
        """Every rank contributes ``obj``; every rank gets the list of all contributions, by group rank."""
        return self.combine(obj, what, list, timeout)

    def broadcast(self, obj: Any, what: str, timeout: float | None = None) -> Any:
        """Return group rank 0's ``obj`` on every rank (the others' ``obj`` is ignored and not sent)."""
        return self.combine(obj if self.rank == 0 else None, what, operator.itemgetter(0), timeout)

    def barrier(self, what: str, timeout: float | None = None) -> None:
        """Wait until every rank has arrived here."""
        self.combine(None, what, _nothing, timeout)

    def board(self, window: float | None = None) -> Board:
        """A failure board for one tuning, outside the exchange sequence (every rank calls this at the same point
        of the sequence); ``window``: how long a rank may show no sign of life before the ranks waiting for it at
        an exchange give up (None: the exchanges' deadlines alone). This base has none: a rank learns of another's
        failure at the next exchange."""
        return Board()


def _charged(combine: Callable[..., Any]) -> Callable[..., Any]:
    """``combine``, its time charged to the exchanges of the tuning in progress on this thread, if any."""
    @functools.wraps(combine)
    def charged(self: Group, *args: Any, **kwargs: Any) -> Any:
        watch = meter.current()
        if watch is None:
            return combine(self, *args, **kwargs)
        watch.exchanges += 1
        watch.enter("exchange")
        try:
            return combine(self, *args, **kwargs)
        finally:
            watch.leave()

    return charged


@dataclass(frozen=True)
class FailureReport:
    """What a rank posts on the failure board: its run of config ``index`` raised ``error`` (or, with ``ended``,
    that it leaves the tuning after ``error``: its own interruption, or another rank's failure that reached it
    inside that config; with ``exits`` too, that it ends its process now)."""

    rank: int
    index: int
    config: str
    error: str
    ended: bool = False
    #: the rank whose failure this is (the poster itself unless ``ended``)
    origin: int = -1
    #: the step of the protocol the failure happened in (``config 3 warmup``, ``round 5``, ``config 3 compile
    #: pass``): a rank's guard acts only on reports of the step it is in (:mod:`~triton_dist_tune.faults.watchdog`)
    step: str = ""
    #: the poster ends its process right after posting (its watchdog fired, or it leaves a collective of the
    #: function the only way a process can); a rank interrupted by an exception its caller may catch does not
    exits: bool = False

    @property
    def interrupted(self) -> bool:
        """Whether the poster was interrupted (SIGINT, SIGTERM): it ended, and no config is to blame."""
        return self.ended and self.error.startswith("interrupted")

    @property
    def hung(self) -> bool:
        """Whether the poster's own watchdog ended it: its run did not finish in time (its collective partners'
        runs then break: that is no evidence against the config on their side)."""
        return self.ended and self.error.startswith("hung")

    def describe(self) -> str:
        """'rank r failed in config i (config): error' ('rank r failed in run n: error' for a contextual tuning's
        run, which names no config: index -1)."""
        origin = self.rank if self.origin < 0 else self.origin
        if self.index < 0:
            return f"rank {origin} failed in {self.step or 'a run'}: {self.error}"
        return f"rank {origin} failed in config {self.index} ({self.config}): {self.error}"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> FailureReport:
        """The report in ``text``; raises :class:`BadBoardEntry` when it is not one (anything that is not a flat
        JSON object of the report's fields and types: nested too deep, not UTF-8, wrong types). Plain data only:
        nothing read is executed."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError(f"a JSON {type(data).__name__}, not an object")
            report = cls(**{k: data[k] for k in ("rank", "index", "config", "error", "ended", "origin")},
                         step=data.get("step", ""), exits=data.get("exits", False))
        except Exception as exc:  # RecursionError (nested too deep), ValueError, TypeError, KeyError, ...
            raise BadBoardEntry(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        ok = (type(report.rank) is int and type(report.index) is int and type(report.origin) is int
              and isinstance(report.config, str) and isinstance(report.error, str) and type(report.ended) is bool
              and isinstance(report.step, str) and type(report.exits) is bool)
        if not ok:
            raise BadBoardEntry("a field of the wrong type")
        return report


class BadBoardEntry(ValueError):
    """A value on the failure board that is not a report of the tuner (written by another process: the store
    has no authentication). Refused: it is never evidence against a config, and never ends a rank."""


class Board:
    """The failure board of one tuning: where a rank whose run raised says so at once, so that ranks stuck in a
    collective of the function (waiting for it) can end promptly with the real error. This base is a board nobody
    reads (a single process, or a channel without a side channel: MPI)."""

    def post(self, report: FailureReport) -> None:
        """Post this rank's failure."""

    def post_ended(self, rank: int, report: FailureReport) -> None:
        """Post that ``rank`` ends its process because of ``report`` (another rank's failure)."""
        self.post(FailureReport(rank, report.index, report.config, report.error, True,
                                report.rank if report.origin < 0 else report.origin, report.step, exits=True))

    def read(self) -> list[FailureReport]:
        """Every report posted so far (cheap: read by the watchdog's monitor twice a second)."""
        return []

    beats_span = 0.0  #: how long before a guarded phase's deadline the watchdog reads the beats (:meth:`look`)

    def look(self, first: bool = False) -> None:
        """Read the other ranks' beats for :meth:`stopped` (``first``: early in the phase); a board that beats does."""

    def stopped(self, ranks: Sequence[int], since: float | None = None) -> list[int]:
        """Of ``ranks``, those that showed no sign of life (in the phase begun at ``since``)."""
        return []

    def close(self, clean: bool = True) -> None:
        """The tuning is over (``clean``: on every rank alike, not by this rank's own error or interruption)."""


class RankEnded(Exception):
    """Raised inside a wait when the failure board shows that ranks the wait needs have ended."""


def ended_message(reports: Sequence[FailureReport], missing: Sequence[int]) -> str | None:
    """The error of a rank that waits for ``missing`` ranks when ``reports`` (in the order posted) say some of them
    ended, else None. It names what ended them: the earliest of the ended ranks' latest reports (not a failure they,
    or others, posted earlier in the tuning and went on from). A rank is said to have ended its process only when
    it said so (``exits``); one interrupted by an exception (its caller may catch it) left the tuning."""
    ended = sorted({r.rank for r in reports if r.ended and r.rank in missing})
    if not ended:
        return None
    exited = sorted({r.rank for r in reports if r.ended and r.exits and r.rank in missing})
    left = [rank for rank in ended if rank not in exited]
    latest = {r.rank: r for r in reports if r.rank in ended}  # each ended rank's latest report
    failures = ([r for r in reports if latest.get(r.rank) is r] or [r for r in reports if not r.ended]
                or [r for r in reports if r.ended])
    first = failures[0]
    if first.interrupted:
        blamed = "No config is blamed (an interruption, or the tuner's own error)"
    elif first.error.startswith(FROM_THE_FILL):
        blamed = "No config is blamed (a run raised from the tuner's NaN fill; the next attempt fills nothing)"
    elif first.index < 0:  # a contextual tuning's run: the function's own error blames no config
        blamed = "No config is blamed (the tuned function's own error)"
    elif first.step.endswith(COMPILE_PASS):
        blamed = f"No config is blamed (the {COMPILE_PASS} is best-effort; the next attempt runs none for that config)"
    else:
        blamed = "The config is journaled as failed"
    said = ([f"group rank(s) {exited} ended their process to leave a collective of the function"] if exited else []) \
        + ([f"group rank(s) {left} left the tuning"] if left else [])
    return (f"triton_dist_tune: {first.describe()}; {' and '.join(said)}. {blamed}: resume with torchrun "
            "--max-restarts or by running the job again")


def _nothing(values: list[Any]) -> None:
    return None


class ExchangeError(BadInputError):
    """The combining function of an exchange raised on group rank 0, or a message was refused; every rank raises
    this."""


class PlainDataError(ExchangeError, TypeError):
    """Some rank tried to send a value that is not plain data (see :mod:`.codec`); every rank raises this."""


@codec.record
@dataclass(frozen=True)
class Failed:
    """What rank 0 sends instead of a result when the combining function raised (or a rank's message was refused:
    ``refused``), and what a rank sends instead of a message it cannot encode."""

    message: str
    refused: bool = False
    #: sent by a rank that left the call instead of its message (:meth:`Group.leave`): raised as RankFailedError
    left: bool = False
    #: with ``left``: the last exchange the rank began in the turn it left (-1: not said), which tells a rank that
    #: reads the record whether it is still in that turn (:func:`unwrap`)
    held: int = -1
    #: with ``left``: how the record was settled (:mod:`.passover`): "" not yet, ``back`` (the rank's next call came:
    #: a peer past the turn passes over it), ``out`` (it did not come within the grace, or its process ended)
    settled: str = ""
    #: with ``left``: the rank's process (:func:`.note.this_process`), read gone by a peer on its host
    process: tuple[str, int, int] | None = None
    #: with ``settled`` ``out``: the step of the peers' exchange that counted the rank out (they raised there)
    at: str = ""


class PassedOver(Exception):
    """Raised by :func:`unwrap` on a rank past the turn whose record of a rank that left it (:meth:`Group.leave`)
    it read, settled ``back`` (:mod:`.passover`: that rank's next call came): nobody waits for that rank in that
    turn any more, and the exchange is void on every rank; the channel makes it again at the next sequence number,
    where that rank's next call is."""


def run_on_root(fn: Callable[[list[Any]], Any], values: list[Any]) -> Any:
    """``fn(values)`` on rank 0 of an exchange, or a :class:`Failed` saying what it raised (sent to every rank in
    place of the result)."""
    try:
        return fn(values)
    except Exception as exc:
        return Failed(f"{type(exc).__name__}: {exc}")


def unwrap(result: Any, what: str, began: int | None = None) -> Any:
    """An exchange's ``result`` as every rank receives it; a :class:`Failed` is raised instead, as
    :class:`PlainDataError` when a rank's message was refused, else as :class:`ExchangeError`; a rank's record that
    it left its call (``left``), as :class:`~triton_dist_tune.errors.RankFailedError` where this rank is still in the
    turn that rank left: where the turn this rank is in (its outermost on the group) began after the last exchange
    that rank began in it (``began``: the exchanges this rank had begun when its turn began, :meth:`Group.turn_began`;
    None: not said), this rank is past that turn, and :class:`PassedOver` is raised instead where the record was
    settled ``back`` (that rank's next call came: :mod:`.passover`)."""
    if isinstance(result, Failed) and result.left and result.settled == "back" and began is not None \
            and began >= result.held >= 0:
        raise PassedOver(f"{result.message} (the exchange at '{what[:STEP_QUOTE]}' is made again)")
    if isinstance(result, Failed) and result.left:
        raise RankFailedError(f"triton_dist_tune: {result.message} (this rank was at '{what[:STEP_QUOTE]}')")
    if isinstance(result, Failed):
        kind = PlainDataError if result.refused else ExchangeError
        raise kind(f"triton_dist_tune: combining the ranks' messages at '{what}' failed: {result.message}")
    return result


#: the most characters of a step's text quoted in the error of ranks at different steps
STEP_QUOTE = 200


class SingleGroup(Group):
    """One process alone: every exchange returns at once."""

    def __init__(self) -> None:
        super().__init__()

    def combine(self, obj: Any, what: str, fn: Callable[[list[Any]], Any], timeout: float | None = None) -> Any:
        return unwrap(run_on_root(fn, [obj]), what)
