"""What a contextual tuned function holds, as the modules that act on one of its calls see it.

- :class:`TunerState`: one decorated function's state across its calls (its
  :class:`~triton_dist_tune.contextual.tuner.ContextualTuner` adds the calls themselves: the group, the agreement);
- :class:`CallState`: one call's state (its :class:`~triton_dist_tune.contextual.session.Session` adds the run
  loop): the tracks, this rank's view of them, the current run's :class:`RunRecord`, what is made on first use
  (clock, disk cache, log), the journals every rank gathered before the first run, and the watchdog over each run;
- :class:`Exchanged`: what the exchange after a run told every rank alike.

The modules that act on a call (:mod:`~.launches`, :mod:`~.exchange`, :mod:`~.compiling`, :mod:`~.decisions`,
:mod:`~.hot`) take these, so that none of them imports the session or the tuner, which import them.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import settings
from ..disk import logs
from ..disk.cache import DiskCache
from ..faults.inside import waits_for
from ..faults.recovery import gather_entries
from ..faults.watchdog import WATCHDOG, Guard, exchange_timeout
from ..group.channel import Board, FailureReport, Group, default_timeout
from ..group.rank_names import rank_name
from ..measure.clocks import make_clock
from ..measure.guarding import peer_stopped_texts, stopped_peers
from .holding import Held
from .newkeys import can_settle
from .options import ContextualOptions
from .schedule import Track
from .tracks import LocalTrack, TrackId

#: per thread, the call whose run the watchdog guards (an inner tuning on another group leaves it to the outer one;
#: a call on another thread has its own)
_watching = threading.local()

#: one launch as this rank records it: (config index, the clock's token or None, error or None)
Record = tuple[int, Any, "str | None"]

#: the final run's watchdog deadline (s): none in effect (a year); the run is watched for the peers' reports alone
FINAL_RUN_S = 365 * 24 * 3600.0


class TunerState:
    """One function decorated with :func:`~triton_dist_tune.contextual.contextual_autotune`, across its calls:
    what its calls read and fill."""

    def __init__(self, fn: Callable[..., Any], options: ContextualOptions) -> None:
        self.fn, self.options = fn, options
        #: (track id, key text) -> the group's decision and its table of measurements
        self.decisions: dict[TrackId, dict[str, Any]] = {}
        #: runs of the function in the last call
        self.last_runs = 0
        #: group identity -> {(autotuner id, key): (track id, local default index)}: keys met in hot calls that the
        #: group has not decided, run with a local default until the group's next agreement
        self.pending: dict[tuple, dict[tuple[int, tuple], tuple[Any, int]]] = {}
        #: group identity -> the undecided keys this rank met in hot calls since the group's last agreement, with
        #: (how many calls met it, the last of them): settled (:mod:`~.newkeys`) in the 1st, 2nd, 4th ... of those
        #: calls only, and offered at the next agreement
        self.met_since: dict[tuple, dict[TrackId, tuple[int, int | None]]] = {}
        #: held while :attr:`pending` and :attr:`met_since` change or are read: hot calls of several threads meet
        #: keys (no group lock) while the group's agreement reads them (a read while another thread added a key
        #: raised RuntimeError on this rank alone, its peers left waiting at the agreement)
        self.meeting = threading.Lock()
        #: group identity -> the group ranks on this rank's node (found once, when compiling ahead first splits)
        self.nodes: dict[tuple, list[int]] = {}
        #: calls in which the group agreed to tune (pending keys), for inspection (:mod:`~.agreement`)
        self.agreed_calls: list[int] = []
        #: group identity -> the first call after the tuning window opened by the last agreement that found pending
        #: keys: calls before it tune on every rank (a key met off the agreement points is met in one of them)
        self.window_end: dict[tuple, int] = {}
        #: group identity -> the keys every rank offered at that agreement (the window ends once all are decided)
        self.offered: dict[tuple, list[TrackId]] = {}
        #: the configs' errors group rank 0 has said on the console (:mod:`~triton_dist_tune.disk.failures`)
        self.failures_said: dict[str, None] = {}

    # the order of calls from several threads (ContextualTuner's): a hot call that settles new keys is in flight
    # from its first undecided launch to its end, and takes the group's turn once every call before it has ended

    def settling(self, gid: tuple, calls: int) -> None:
        """Hot call ``calls`` on group ``gid`` met a key this rank has not decided: it settles it at its end."""

    def settle_turn(self, group: Group, calls: int) -> None:
        """Before settling hot call ``calls`` takes the group's turn."""

    def settled(self, gid: tuple, calls: int) -> None:
        """Settling hot call ``calls`` ended."""

    def tuned(self, group: Group) -> None:
        """A tuning call on ``group`` ended on every rank, as its last exchange told (:mod:`~.session`: before any
        line of it is logged), or as that exchange's result, which an interruption ended this rank's wait for,
        told at this rank's next call (:func:`~.exchange.applied_late`)."""

    def agreement_made(self, gid: tuple) -> None:
        """The group's agreement (every ``sync_every`` calls) is made at this call (:func:`~.agreement.agree`):
        none is left due on group ``gid``."""

    def left_unread(self, group: Group) -> None:
        """An interruption ended this rank's wait for the result of an exchange of a call of this function on
        ``group``, its message written: the group keeps the result to read (``Group.keep_unread``), and this
        function's next call on the group reads it first, hot or not (:mod:`~.tuner`)."""


@dataclass
class RunRecord:
    """What this rank saw in one run of the function (made afresh for each run)."""

    #: the tracks first met in this run (their :meth:`~.tracks.LocalTrack.info` is sent)
    new: list[TrackId] = field(default_factory=list)
    #: track -> this rank's launches of it in the run
    launches: dict[TrackId, list[Record]] = field(default_factory=dict)
    #: (track, config index) of every timed launch started in the run: journaled ``hung`` if the watchdog fires
    inflight: list[tuple[TrackId, int]] = field(default_factory=list)
    #: (autotuner id, key)s whose reset before use is made (final run)
    reset: set[tuple[int, tuple]] = field(default_factory=set)


@dataclass(frozen=True)
class Exchanged:
    """What one exchange told every rank alike, besides the tracks' steps."""

    #: whether tracks were created (met for the first time by the group in the run)
    created: bool
    #: track -> the ranks that met it first in the run (a new track, or ranks that joined one late)
    met: dict[TrackId, list[int]]
    #: track -> the configs some rank launched in the run
    launched: dict[TrackId, set[int]]
    #: every rank compiles ahead (:func:`~.compiling.compiles_ahead`)
    compiles: bool


class CallState:
    """One call of a contextual tuned function on ``group``: what its launches, exchanges and decisions read and
    change (see the module docstring). ``tuning``: every rank of the group takes part; otherwise the call is *hot*
    (no communication; a key the group has not decided runs with a local default and is *pending*)."""

    def __init__(self, tuner: TunerState, group: Group, tuning: bool, call: int = 0) -> None:
        self.tuner, self.group, self.tuning, self.call_number = tuner, group, tuning, call
        self.label = tuner.options.label
        self.tracks: dict[TrackId, Track] = {}
        self.local: dict[TrackId, LocalTrack] = {}
        self.lock = threading.Lock()
        self.runs = 0
        self.needs_tuning = False
        #: undecided keys run with a local default, without communication (hot calls on a group, or past the bound)
        self.pending_mode = not tuning and group.size > 1
        #: the undecided keys met in the first run of a hot call, settled at its end (:mod:`~.newkeys`); None: this
        #: call cannot turn into a tuning call (alone, an mpi4py group, or past the bound)
        self.met: list[TrackId] | None = [] if self.pending_mode and can_settle(group) else None
        #: (autotuner id, key) of every launch this call tuned: benchmark launches until the final run
        self.session_keys: set[tuple[int, tuple]] = set()
        #: (autotuner id, key) of every launch this call made plainly, as Triton launches a key its pruning cuts to
        #: one config (:func:`~triton_dist_tune.contextual.launches.plain_launch`)
        self.plain_keys: set[tuple[int, tuple]] = set()
        self.final_run = False
        #: what this rank saw in the current run
        self.record = RunRecord()
        self.started = time.monotonic()
        self._armed = False
        self._guard: Guard | None = None
        #: the failure board of a tuning call (a group with a store): a rank whose run raises says so there, so that
        #: a peer left waiting inside the function's collective journals no hang (:meth:`_hung`); its beat tells the
        #: waiting ranks a dead peer (:meth:`open_board`)
        self.board: Board | None = None
        #: entry -> every group rank's journal records of it, gathered before the first run (None: not yet)
        self._earlier: dict[str, list[list[dict[str, Any]]]] | None = None
        #: this attempt's name as that exchange agreed it, written into the journals of the call's tracks
        #: (:attr:`~triton_dist_tune.faults.journal.Journal.attempt`; None before it)
        self.attempt: str | None = None
        #: jitted kernel -> group rank -> the ``triton.autotune`` wrappers of it that rank met in this call (track
        #: kernel id -> its configs and key names), from the exchanges: every rank must tune the same ones
        self.wrappers: dict[str, dict[int, dict[str, tuple[list[str], list[str]]]]] = {}
        #: while a run's exchange result is applied: the interruptions the user's code raised there, held until the
        #: whole result is applied (:mod:`~.holding`); None otherwise
        self.held: Held | None = None

    # what a hot call never needs is made on first use

    @functools.cached_property
    def clock(self) -> Any:
        """Times the tuning launches of this call."""
        return make_clock()

    @functools.cached_property
    def cache(self) -> DiskCache:
        """The contextual disk cache (and the folder of the journals)."""
        return DiskCache("contextual")

    @functools.cached_property
    def timeout(self) -> float:
        """Seconds of the watchdog per run and of each exchange."""
        timeout = self.tuner.options.timeout
        return timeout if timeout is not None else default_timeout()

    @functools.cached_property
    def log(self) -> logging.Logger:
        """This rank's log file."""
        return logs.rank_log()

    # -- the earlier attempts -------------------------------------------------------------------------------------

    def gather_journals(self) -> None:
        """Before the first run of a call the whole group tunes: one exchange of every rank's journals of this
        group (:func:`~triton_dist_tune.faults.recovery.gather_entries`), the view every resume decision of the
        call is taken from (which configs to leave out, which to launch first), identical on every rank. It carries
        this rank's malformed variable, if any: every rank raises it here (the call reads the environment leniently
        up to this exchange, :meth:`~.tuner.ContextualTuner.__call__`), and its timeout: ranks whose timeouts
        differ are warned."""
        self._earlier, self.attempt = gather_entries(self.group, self.cache.folder, f"{self.label} journal exchange",
                                                     exchange_timeout(self.timeout), settings.problem(), self.label,
                                                     self.timeout)
        for local in self.local.values():  # tracks met before the exchange (a hot call turned tuning) name it too
            local.journal.attempt = self.attempt

    def earlier(self, entry: str) -> list[list[dict[str, Any]]]:
        """Every group rank's journal records of ``entry`` from the gathered view (a process alone reads its own
        now; a rank that meets a key without the group, never: it runs a pending default)."""
        if self._earlier is None and self.group.size == 1:
            self.gather_journals()
        return (self._earlier or {}).get(entry) or [[] for _ in range(self.group.size)]

    # -- the watchdog ----------------------------------------------------------------------------------------------

    def arm(self) -> None:
        """Put this run under the watchdog (once per run; not when an outer tuning already has it)."""
        if self._armed or getattr(_watching, "owner", None) is not None:
            return
        _watching.owner = self
        self._armed = True
        # this call's own deadline; its monitor reads the peers' beats on the call's board (:meth:`_hung`)
        self._guard = self._guard or WATCHDOG.guard(self.board, rank=self.group.rank)
        # a peer's report that its run raised ends this rank after the grace while it waits inside a collective of
        # torch.distributed whose group holds that peer, who never comes (:meth:`_left`); a rank doing anything else
        # goes on. The final run has no deadline (its launches are not timed, and it may take any time): the watch alone
        thread, members = threading.get_ident(), self.group.member_ranks
        self._guard.arm(self.timeout if not self.final_run else FINAL_RUN_S, f"{self.label} run {self.runs - 1}",
                        self._hung, index=-1, on_peer=self._left, step=f"run {self.runs - 1}",
                        waiting=lambda ranks: waits_for(thread, [members[r] if r < len(members) else r for r in ranks]))

    def disarm(self) -> None:
        """End this run's watchdog deadline (the run is over), if it has one."""
        if self._armed:
            if self._guard is not None:
                self._guard.close()
                self._guard = None
            self._armed = False
            _watching.owner = None

    def open_board(self) -> None:
        """Open the call's failure board (every rank of a tuning call, at the same point of the exchanges). It
        beats (:class:`~triton_dist_tune.group.store_board.StoreBoard`): a rank waiting at an exchange gives up on a
        peer whose process ended, was killed or froze ``exchange_timeout(T)`` s after its last beat, not at the
        exchange's deadline (``T`` times the waves of compiles for the exchange after compiling ahead)."""
        if self.group.size > 1:
            self.board = self.group.board(exchange_timeout(self.timeout))

    def close_board(self, clean: bool = True) -> None:
        """The call is over: its board is no longer read (``clean``: not ended by an error or interruption, whose
        report a peer may still need to read: see :meth:`~triton_dist_tune.group.channel.Board.close`)."""
        if self.board is not None:
            self.board.close(clean)
            self.board = None

    def post_run_failure(self, error: str, interrupted: bool = False) -> None:
        """Say on the board that this rank's run raised ``error`` (``interrupted``: an interruption, and this rank
        leaves the call), for a peer stuck in a collective of the function waiting for this rank (:meth:`_hung`)."""
        if self.board is None:
            return
        try:
            self.board.post(FailureReport(self.group.rank, -1, "", error, ended=interrupted,
                                          step=f"run {self.runs - 1}"))
        except Exception as exc:  # the store is going away: the peers' journals then say hung, as before
            self.log.debug("%s could not post this rank's failure in run %d: %s", self.label, self.runs, exc)

    def _hung(self) -> str | None:
        """The watchdog fired: every config this rank launched in the run is journaled as hung, unless a peer said
        on the board that its run raised or was interrupted: then this rank was left waiting in a collective of
        the function, the evidence is the peer's, and its configs are journaled ``interrupted`` (blaming none); or
        unless a peer showed no sign of life (its beat stood still: frozen, killed, or holding the GIL in one C call;
        or it was stopped and continued in the run: :meth:`~triton_dist_tune.group.store_board.StoreBoard.stopped`):
        then they are journaled ``interrupted`` naming it, and posted so, as ``autotune``'s are. (This process's
        own stops moved its deadline: :meth:`~triton_dist_tune.faults.watchdog.Guard.credit_pauses`.)"""
        board, step, peers = self.board, f"run {self.runs - 1}", []
        reports: list[FailureReport] = []
        if board is not None:
            try:
                reports = board.read()
                peers = [r for r in reports if r.rank != self.group.rank and r.step == step]
            except Exception:  # the store is gone: no evidence either way, as without a board
                pass
        stopped = stopped_peers(self.group, board, reports, self._guard.began) if board is not None and not peers \
            else []
        if stopped:
            phase = f"run {self.runs - 1}"
            why, told = peer_stopped_texts([rank_name(self.group, r) for r in stopped], phase, self.timeout)
            self._journal_inflight("interrupted", error=why)
            self.post_run_failure(why, interrupted=True)  # (the peers blame nothing either)
            return told
        if board is None or not peers:
            if not self.record.inflight:  # (the final run's launches, with every key decided, are not timed)
                return "no timed launch was in flight in the run: nothing is journaled"
            self._journal_inflight("hung", error=f"run {self.runs - 1} exceeded {self.timeout:g} s")
            return None
        first = peers[0]
        waited = (f"waited {self.timeout:g} s in the function for rank {first.rank}, whose run "
                  f"{'was ' + first.error if first.interrupted else 'raised ' + first.error}")
        self._journal_inflight("interrupted", error=f"interrupted: {waited}")
        try:  # a peer waiting at the tuner's exchange for this rank ends at once, not after its deadline
            board.post_ended(self.group.rank, first)
        except Exception:
            pass
        return f"it {waited}; journaled as interrupted: no config is blamed on this rank"

    def _left(self, report: FailureReport) -> str:
        """The watchdog ends this rank, left waiting in the run by ``report``'s rank: the configs it launched in the
        run are journaled ``interrupted`` (the peer's error blames none); what was journaled, for its message."""
        if not self.record.inflight:
            return "Nothing was journaled (no timed launch was in flight in the run)"
        self._journal_inflight("interrupted", error=f"interrupted: waited in the function for rank {report.rank}, "
                                                    f"whose run {'was' if report.interrupted else 'raised'} "
                                                    f"{report.error}")
        return "The configs this rank launched in the run are journaled interrupted (no config is blamed)"

    def _journal_inflight(self, state: str, **fields: Any) -> None:
        for tid, index in sorted(set(self.record.inflight)):
            self.local[tid].append(index, state, **fields)

    def not_blamed(self, reason: str) -> None:
        """The attempt ends with an error the group attributes to the function (not to a config): every track's
        config in flight (the config of its journal's last record, when that is a ``started`` one) is journaled
        ``interrupted``, so that no config is blamed for the attempt's end (``autotune``'s rule too)."""
        for tid in sorted(self.local):
            self.local[tid].not_blamed(reason)
