"""The guarded runs of one tuning's measurer: each phase of a config under the tuning's own deadline (a
:class:`~triton_dist_tune.faults.watchdog.Guard`), a failure posted at once on the group's failure board (so that
ranks stuck in a collective of the function end promptly with the real error), an interruption journaled so that
no config is blamed for it; and each config's outcome journaled as the group knows it, a failure that leaves the
GPU context unusable stopping every rank (:class:`~triton_dist_tune.errors.DevicePoisonedError`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from ..disk.logs import ms_text
from ..errors import DevicePoisonedError, GroupTimeoutError, describe_error
from ..faults.journal import Journal
from ..faults.watchdog import Guard, exchange_timeout
from ..group.channel import FailureReport, Group
from ..group.rank_names import rank_name
from ..records import COMPILE_PASS, FROM_THE_FILL, WARMUP, WARMUP_AGAIN, Outcome

#: CUDA errors after which a process's context is unusable: every later launch on that rank would fail too
POISONED = re.compile(r"illegal memory access|unspecified launch failure|misaligned address|device-side assert"
                      r"|illegal instruction|hardware stack error|uncorrectable ECC"
                      r"|CUDA_ERROR_(?:ILLEGAL|LAUNCH_FAILED|MISALIGNED|ASSERT)", re.IGNORECASE)


#: what the collective libraries raise in a rank whose peer process went away (gloo, NCCL, the store's sockets):
#: the loss of a peer, whose own journal holds what happened to it, not evidence against this rank's config
PEER_LOST = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe|remote process exited"
                       r"|DistNetworkError|NCCL communicator was aborted", re.IGNORECASE)
#: how a rank's report on the failure board says that its collective broke because a peer's process was lost
LOST_PEER = "a peer's process was lost"

#: phases that are best-effort: nothing that happens in them is evidence against a config
BEST_EFFORT = (COMPILE_PASS,)
#: the phases whose ``started`` record is fsynced (:mod:`~triton_dist_tune.faults.journal`): a config's first runs
#: on the device, its warm-up; a compile pass's (it launches no kernel), a capture's or a sample's reaches the disk
#: with the next durable record
FIRST_RUNS = (WARMUP, WARMUP_AGAIN)


class Guarding:
    """What :class:`~triton_dist_tune.measure.lockstep.Measurer` runs each phase with, and how it journals each
    config's outcome (a mixin: it needs the measurer's group, journal, guard, plan, trial, log and label)."""

    group: Group
    journal: Journal
    guard: Guard
    plan: Any
    trial: Any
    log: logging.Logger
    label: str
    _posted: dict[tuple[int, str], str]  # (config, step) -> the failure posted, as this rank says it
    _current: tuple[int, str] | None
    _step: str
    #: whether this rank waits at the exchange that starts the phase's next run together (its own run done)
    waiting: bool
    #: this rank's own error in the aligned phase it waits in (None when its runs did not raise)
    own_failure: str | None
    #: sharded: a poisoning failure, raised on every rank after the exchange of outcomes
    _deferred: str | None
    #: whether this rank's last failed warm-up run had started from the NaN fill (:meth:`_again_after_fill`)
    _filled_here: bool

    def _guarded(self, index: int, desc: str, phase: str, runs: Callable[[], Any],
                 sync: bool = True, step: str | None = None, patience: float = 0.0) -> tuple[Any, str | None]:
        """Run ``runs`` under this tuning's guard, then synchronize the device (unless ``sync`` is false: a steady
        round's samples are read after the round); returns (its result, None) or (None, error). A failure is posted
        on the failure board at once; an interruption (SIGINT, SIGTERM, or any other ``BaseException`` that is not an
        ``Exception``, such as ``asyncio.CancelledError``) is journaled and posted as such and re-raised.

        ``step`` (default ``config <index> <phase>``) names the step of the protocol the phase belongs to, the same
        on every rank: the guard acts on the board's reports of that step only. Blame needs evidence from the
        config's own run: the compile pass (:data:`BEST_EFFORT`) blames nothing, and a rank ended because another
        rank failed in another config of its step (a steady round) journals its own config as interrupted, after
        ``patience`` seconds (the time the phase takes when not stuck), or at the deadline. The ``interrupted``
        records written here name their ``phase``: one in the compile pass, the last record of its attempt, makes
        the next attempt run no compile pass for the config (:func:`~triton_dist_tune.faults.evidence.merge`)."""
        step = f"config {index} {phase}" if step is None else step
        blames = phase not in BEST_EFFORT

        def on_fire() -> str | None:
            # a peer that failed, was interrupted or hung in another config of this step left this rank stuck: no
            # evidence against this config. A peer that hung in this same config is no exoneration: its watchdog
            # may fire first even when this rank's own run is the one that never finished (seen in CI)
            peers = [r for r in self._board_reports() if r.step == step and r.rank != self.group.rank
                     and not (r.hung and r.index == index)]
            if getattr(self, "waiting", False) and blames:
                return self._waited_out(index, desc, phase, step)
            # a peer frozen, or holding the GIL, left this rank inside a collective: its beat stopped (a hang's beats),
            # or it was stopped and continued in the phase (its beat's mark). (This process's own stops moved the
            # deadline: :meth:`~triton_dist_tune.faults.watchdog.Guard.credit_pauses`)
            stopped = stopped_peers(self.group, self.guard.board, self._board_reports(), self.guard.began) \
                if blames and not peers else []
            if stopped:
                return self._unblamed(index, desc, phase, step,
                                      *peer_stopped_texts([rank_name(self.group, r) for r in stopped], phase,
                                                    self.plan.timeout))
            if peers and blames:
                first = peers[0]
                self.journal.append(index, "interrupted", config=desc, phase=phase,
                                    error=f"interrupted: {phase} exceeded {self.plan.timeout:g} s after rank "
                                          f"{first.rank} failed in config {first.index} of {step}: {first.error}")
            elif blames:
                self.journal.append(index, "hung", config=desc, error=f"{phase} exceeded {self.plan.timeout:g} s")
                try:  # before this process ends and its partners' collectives break: their errors follow this
                    self.guard.board.post(FailureReport(self.group.rank, index, desc,
                                                        f"hung: {phase} exceeded {self.plan.timeout:g} s",
                                                        ended=True, step=step, exits=True))
                except Exception:  # the store is going away: the journal holds the hang
                    pass
            else:  # the pass runs the function on outputs it never launched: no evidence
                self.journal.append(index, "interrupted", config=desc, phase=phase,
                                    error=f"interrupted: {phase} exceeded {self.plan.timeout:g} s (not blamed)")
            self.log.error("%s config %d %s: HUNG past %g s: %s", self.label, index, phase, self.plan.timeout, desc)
            if getattr(self, "sharding", False) and self.group.size > 1:  # likely the option, not the config
                return (f"{hang_recorded(self.journal)}; with sharded=True each rank measures its share of the "
                        "configs alone, so a function whose calls are collective (or wait for another rank) hangs "
                        "there: tune such a function without sharded=True")
            return hang_recorded(self.journal) if self.journal.unwritten else None

        def on_peer(report: FailureReport) -> str:  # another rank raised in this step: it failed, not this one
            if report.interrupted or not blames or report.index != index or report.error.startswith(FROM_THE_FILL):
                why = (report.error if report.interrupted else
                       f"interrupted: rank {report.rank} failed in config {report.index} ({report.step}): "
                       f"{report.error}")
                self.journal.append(index, "interrupted", config=desc, phase=phase, error=f"rank {report.rank}: {why}")
                told = f"Config {index} is journaled as interrupted: no config is blamed"
                if not blames:
                    told += f" (the next attempt warms it up without its {phase})"
            else:
                self.journal.record(Outcome(index, desc, "failed", error=f"rank {report.rank}: {report.error}"))
                told = f"Config {index} is journaled as failed"
            self.log.error("%s config %d %s: %s; ending this rank", self.label, index, phase, report.describe())
            return told

        self._current = (index, desc)
        self._step = step
        self.guard.arm(self.plan.timeout, f"{self.label} config {index} ({desc}) {phase}", on_fire, index, on_peer,
                       step, patience)
        try:
            result = runs()
            if sync:
                self.trial.clock.synchronize()
            return result, None
        except GroupTimeoutError:
            raise  # the group itself broke down: not this config's fault, and not recoverable here
        except Exception as exc:  # a failing config is data, not a crash
            error = describe_error(exc)
            self.trial.last_error = exc
            return None, self._post(index, desc, error)
        except BaseException as exc:  # Ctrl-C, SIGTERM, a cancelled task's CancelledError: an interruption
            self.interrupted(exc)
            raise
        finally:
            self.guard.disarm()

    def _unblamed(self, index: int, desc: str, phase: str, step: str, why: str, told: str) -> str:
        """The deadline passed while this rank was inside a run of config ``index``, for a reason that is no
        evidence against the config (``why``: :func:`peer_stopped_texts`). Journaled ``interrupted`` and posted, so
        that the peers blame nothing either; returns ``told``, what the watchdog's message says."""
        self.journal.append(index, "interrupted", config=desc, phase=phase, error=why)
        try:
            self.guard.board.post(FailureReport(self.group.rank, index, desc, why, ended=True, step=step, exits=True))
        except Exception:  # the store is going away: the journal holds it
            pass
        self.log.error("%s config %d %s: %s", self.label, index, phase, why)
        return told

    def _waited_out(self, index: int, desc: str, phase: str, step: str) -> str:
        """The deadline passed while this rank, its own run of config ``index`` done, waited at the exchange that
        starts the next run together: the others did not come (interrupted, crashed, hung: their journals say which;
        or frozen: named). Journaled ``interrupted``, blaming nothing here, and posted so; returns what the
        watchdog's message says was journaled. Where this rank's own run raised in the phase (:attr:`own_failure`),
        it names that error: the others most likely wait for this rank inside a collective of the function."""
        own, state = self.own_failure, self.trial.state
        if own is not None:  # this rank's run raised: the others are likely inside a collective, waiting for it
            journaled = ("an interruption: it raised from the tuner's NaN fill"
                         if state is not None and state.raised_from_fill
                         else "this rank's failure: the next attempt leaves the config out")
            waited = (f"raised {own} in a run of this phase (journaled as {journaled}), then waited "
                      f"{self.plan.timeout:g} s for the other ranks to stop the "
                      "phase together (they did not come: most likely they wait for this rank inside a collective "
                      "of the function)")
        else:  # (a peer whose beat stood still is named: frozen or killed, the store's host among them)
            stopped = stopped_peers(self.group, self.guard.board, self._board_reports(), self.guard.began)
            why = (f"{', '.join(rank_name(self.group, r) for r in stopped)} showed no sign of life" if stopped else
                   "they were interrupted, crashed or hung: their own journals say which")
            waited = f"waited {self.plan.timeout:g} s for the other ranks to start its next run together ({why})"
        self.journal.append(index, "interrupted", config=desc, phase=phase, error=f"interrupted: {waited}")
        try:
            self.guard.board.post(FailureReport(self.group.rank, index, desc, f"interrupted: {waited}", ended=True,
                                                step=step, exits=True))  # the watchdog ends this process next
        except Exception:  # the store is going away: the journal holds it
            pass
        self.log.error("%s config %d %s: %s", self.label, index, phase, waited)
        if own is not None:
            return f"it {waited}"
        return f"it {waited}; journaled as interrupted: no config is blamed on this rank"

    def _post(self, index: int, desc: str, error: str) -> str:
        """Journal this rank's failure in config ``index`` and post it on the failure board (once per step); returns
        it as this rank says it (naming a lost peer whose beat stopped). In the compile pass nothing is journaled (no
        evidence: the pass's ``started`` record stays this rank's last), and the report only ends a rank stuck there."""
        step = getattr(self, "_step", "")
        if (index, step) in self._posted:
            return self._posted[(index, step)]
        self._posted[(index, step)] = error
        # a peer was interrupted, or its watchdog ended it, or its process went away (this rank's collective then
        # breaks): this failure follows from the peer's, whose own journal holds the evidence
        reports = self._board_reports()
        peers = [r for r in reports if r.rank != self.group.rank and (r.interrupted or r.hung)]
        causes = [r for r in peers if LOST_PEER not in r.error]  # not survivors of a lost peer: each reads its beat
        if peers or PEER_LOST.search(error):
            cause = f"rank {causes[0].rank} {'hung' if causes[0].hung else 'was interrupted'}" if causes else LOST_PEER
            self.journal.append(index, "interrupted", config=desc, error=f"interrupted after {cause}: {error}")
            if not causes:  # the others (a larger group) end too, blaming nothing: told which rank was lost
                self.guard.disarm()  # (the look waits a few beats: no deadline of the run's while it does)
                lost = stopped_peers(self.group, self.guard.board, reports)
                if lost:
                    cause = f"{', '.join(rank_name(self.group, r) for r in lost)} showed no sign of life"
                    error, cause = f"{error} ({cause})", f"{cause} ({LOST_PEER})"
                    self._posted[(index, step)] = error
                try:
                    self.guard.board.post(FailureReport(self.group.rank, index, desc, f"interrupted: {cause}",
                                                        ended=True, step=step))
                except Exception:  # the store went with the peer: the exchange will say so
                    pass
            return error
        state = self.trial.state
        if state is not None and state.raised_from_fill:
            # the tuner's NaN fill made it raise: no evidence against the config (a peer it leaves inside a call of
            # the function blames nothing either: on_peer), and the group may run it again (_again_after_fill)
            error = error if error.startswith(FROM_THE_FILL) else f"{FROM_THE_FILL}: {error}"
            self.journal.append(index, "interrupted", config=desc, error=f"interrupted: {error}", fill=True)
        elif not step.endswith(BEST_EFFORT):
            self.journal.append(index, "local_failure", config=desc, error=error)
        try:
            self.guard.board.post(FailureReport(self.group.rank, index, desc, error, step=step))
        except Exception as exc:  # the store is going away: the exchange will say so
            self.log.warning("%s cannot post the failure of config %d (%s)", self.label, index, exc)
        return error

    def started(self, index: int, desc: str, phase: str) -> None:
        """Journal that this rank starts a phase of config ``index`` (the record a crash leaves last) and remember
        the config in flight, so that anything ending this rank before its outcome is journaled for it."""
        self._current = (index, desc)
        self.journal.append(index, "started", durable=phase in FIRST_RUNS, config=desc, phase=phase)

    def not_blamed(self, exc: BaseException) -> None:
        """The tuner's own code raised ``exc`` while a config was in flight (outside the user's function's guarded
        run): no evidence. Journaled and told as an interruption: the next attempt measures the config again."""
        self.interrupted(exc, f"interrupted by the tuner's own error, not the config's ({describe_error(exc)})")

    def interrupted(self, exc: BaseException, reason: str | None = None) -> None:
        """An interruption (SIGINT, SIGTERM, SystemExit, any ``BaseException`` that is not an ``Exception``) reached
        this rank: journal it for the config in flight (no config is blamed: the next attempt measures it again) and
        tell the other ranks."""
        if self._current is None:
            return
        index, desc = self._current
        reason = reason or f"interrupted ({type(exc).__name__})"
        self.journal.append(index, "interrupted", config=desc, error=reason)
        try:
            self.guard.board.post(FailureReport(self.group.rank, index, desc, reason, ended=True,
                                                origin=self.group.rank, step=getattr(self, "_step", "")))
        except Exception:
            pass

    def _again_after_fill(self, index: int, error: str | None) -> bool:
        """Config ``index``'s warm-up failed on some rank, one of them from the NaN fill (its error, in the group's,
        says :data:`~triton_dist_tune.records.FROM_THE_FILL`): whether every rank runs it again together, agreed (one
        exchange). It does when every run that raised had started from the tuner's NaN fill (its check of outputs
        written whole: a read that cannot take NaN, such as ``torch.multinomial`` after an in-place temperature):
        the fill's error, not the config's. A rank measuring alone runs such a run again at once
        (:class:`~triton_dist_tune.measure.trial.Trial`); a group's ranks cannot (the function's collectives would
        not match), so they run the whole warm-up again, from the caller's values, under the phase
        :data:`~triton_dist_tune.records.WARMUP_AGAIN` (a step of its own: the failure board's report of the first
        try is no peer failure in it). A rank whose run raised from the fill and then runs without error takes the
        filled arguments for read ones (restored before every run, never filled again:
        :meth:`~triton_dist_tune.measure.arguments.ArgumentState.fill_raised`)."""
        state = self.trial.state
        self._filled_here = (error is not None and state is not None and state.raised_from_fill
                             and not POISONED.search(error))  # a device left unusable runs nothing again
        if state is not None:
            state.raised_from_fill = False  # read once: what comes next (another config's compile error) is not it
        again = self.group.combine((error is None or self._filled_here, self._filled_here),
                                   f"{self.label} config {index} warm-up again after the NaN fill", _from_the_fill,
                                   exchange_timeout(self.plan.timeout))
        if again and state is not None:
            state.again_after_fill()
        return bool(again)

    def _peer_poisoned(self) -> bool:
        """Whether another rank posted a failure that left its GPU context unusable."""
        return any(POISONED.search(r.error) for r in self._board_reports())

    def _board_reports(self) -> list[FailureReport]:
        try:
            return self.guard.board.read()
        except Exception:  # the store is going away: the next exchange says so
            return []

    # -- outcomes --------------------------------------------------------------------------------------------------

    def fail(self, index: int, desc: str, error: str) -> Outcome:
        """Record a config the group already knows to be failed (e.g. it did not compile on some rank)."""
        return self._failed(index, desc, error)

    def _failed(self, index: int, desc: str, text: str, sharded: bool = False) -> Outcome:
        outcome = Outcome(index, desc, "failed", error=text)
        if fill_broke_the_device(text):  # the tuner's NaN fill broke the device: no evidence,
            self.journal.append(index, "interrupted", config=desc, error=f"interrupted: {text}", fill=True)  # and
        else:  # the next attempt fills nothing
            self.journal.record(outcome)
        self.log.info("%s config %d FAILED (%s): %s", self.label, index, text, desc)
        if sharded and POISONED.search(text):
            self._deferred = text  # raised after the exchange of outcomes, on every rank alike
        else:
            self._stop_if_poisoned(index, desc, text)
        return outcome

    def _final(self, outcome: Outcome, share: bool = False, least: bool = False) -> Outcome:
        """Journal a measured or stopped outcome the group agreed on (``share``: a sharded rank's, final), and log
        it (:func:`final_text`; ``least``: a race's time that is its least sample, the race's samples noisy)."""
        self.journal.record(outcome, **({"share": True} if share else {}))
        self.log.info("%s config %d %s: %s: %s", self.label, outcome.index, outcome.state,
                      final_text(outcome, share, least), outcome.config)
        return outcome

    def _stop_if_poisoned(self, index: int, desc: str, text: str) -> None:
        """A CUDA error that leaves a context unusable fails every later config on that rank: stop the whole group
        (the failure is journaled) so that a restart resumes without this config."""
        if POISONED.search(text):
            how = ("journaled as an interruption, no config blamed, and the next attempt fills nothing"
                   if fill_broke_the_device(text) else "journaled as failed")
            message = (f"{self.label} config {index} ({desc}) left a GPU context unusable ({text}); it is {how}: "
                       "restart the job (e.g. torchrun --max-restarts) to resume without it")
            self.log.error(message)
            raise DevicePoisonedError(message)


def final_text(outcome: Outcome, share: bool = False, least: bool = False) -> str:
    """A rank log's account of a config's two times, each said with what it is, so that one rank's log reads
    without the code: the group's time (the one the choice is made by, the same on every rank) and this rank's own.
    In a race each round's group sample is the slowest rank's time in that round, and the group's time is their
    median, or their least where the race's samples are noisy (``least``; a later line of the race says so too), or
    a settled leader's drift-free time; this rank's own time is the median of its own samples. So the group's time
    may be less than this rank's own: a noisy race's least sample against a median, or a drift-free time. A sharded
    rank's config (``share``) and one screened by its probe alone were timed by this rank only: both are one
    time."""
    spread = f" +-{100 * (outcome.spread or 0):.1f}%"
    group = f"group time {ms_text(outcome.time)} ms{spread} over {outcome.samples} sample(s)"
    if share:
        how = "timed by this rank alone, its share of a sharded tuning: the median of its samples"
    elif outcome.probed:
        how = "its warm-up probe standing in for a sample, on this rank: far behind the fastest probe"
    else:
        if outcome.drift_free is not None and outcome.time == outcome.drift_free:
            statistic = ("drift-free: its median ratio, over its settled rounds, to the round's median leader, "
                         "scaled by the leaders' median sample")
        elif least:
            statistic = "the least of them, the race's samples being noisy"
        else:
            statistic = "their median"
        how = f"each sample the slowest rank's time in its round; the group time is {statistic}"
    own = "the same" if share or outcome.probed else "the median of its own samples"
    return f"{group} ({how}); this rank's own time {ms_text(outcome.own)} ms ({own})"


def peer_stopped_texts(who: list[str], phase: str, timeout: float) -> tuple[str, str]:
    """Why a rank whose deadline passed inside a run, while the ranks ``who`` showed no sign of life, blames nothing
    (it waited for them in a collective of the function: no hang of its own; their journals end inside the config,
    which counts as an attempt ended there, once), and what the watchdog's message says of it."""
    names = ", ".join(who)
    why = (f"interrupted: {phase} exceeded {timeout:g} s while {names} showed no sign of life (frozen, killed, or "
           "holding the GIL in one C call): this rank most likely waited for it in a collective of the function")
    return why, (f"{names} showed no sign of life (frozen, killed, or holding the GIL in one C call), so this rank "
                 "most likely waited for it in a collective of the function; journaled as interrupted: no config is "
                 "blamed on this rank")


def stopped_peers(group: Group, board: Any, reports: list[FailureReport], since: float | None = None) -> list[int]:
    """The other ranks of ``group`` whose beat does not move now, or that stood still since ``since`` (the phase's
    start; :meth:`~triton_dist_tune.group.channel.Board.stopped`), but for those that posted that they ended (a peer
    whose own watchdog fired first: its report says why)."""
    ended = {r.rank for r in reports if r.ended}
    return board.stopped([r for r in range(group.size) if r != group.rank and r not in ended], since)


def fill_broke_the_device(text: str) -> bool:
    """Whether a (group) error ``text`` (``rank r: error; ...``) left a device unusable only where a run raised from
    the NaN fill: every rank's part that did starts with :data:`~triton_dist_tune.records.FROM_THE_FILL`."""
    poisoned = [part for part in re.split(r"(?:^|; )rank \d+: ", text) if part and POISONED.search(part)]
    return bool(poisoned) and all(part.startswith(FROM_THE_FILL) for part in poisoned)


def _from_the_fill(contributions: list[tuple[bool, bool]]) -> bool:
    """Rank 0's reduction of :meth:`Guarding._again_after_fill`: each rank sent (its warm-up ran, or raised from the
    NaN fill; it raised from the fill): True when every rank's is the first, and some rank's the second."""
    return all(ok for ok, _ in contributions) and any(filled for _, filled in contributions)


def hang_recorded(journal: Journal) -> str:
    """What the watchdog's last words say of a hang's journal record: recorded (the config is left out), or not
    (:attr:`~triton_dist_tune.faults.journal.Journal.unwritten`: the next attempt may run it again)."""
    unwritten = journal.unwritten
    if unwritten:
        return f"NOT recorded in the journal ({unwritten}): the next attempt may run this config again"
    return "recorded as hung in the journal (the config is left out)"
