"""One call of a contextual tuned function: the run loop.

One call of a tuned function is a :class:`Session`:

1. **Run** the function with every ``triton.autotune`` launch of this context intercepted
   (:mod:`~triton_dist_tune.contextual.intercept`; each launch is handled by :mod:`~.launches`). A launch whose
   (kernel, key) is decided runs its config exactly as stock Triton would; any other launch runs the config its
   schedule (:class:`~triton_dist_tune.contextual.schedule.Track`) says, with its own arguments, timed (CUDA events
   read after the run, or the host clock). A launch that raises is recorded and skipped; the run's output is
   discarded anyway.
2. **Exchange** (:mod:`~.exchange`): one ``allgather`` on the tuner's control channel carries each rank's newly
   met (kernel, key)s, launch times and errors, and whether the function raised. Every rank then updates the same
   tracks from the same data, so the number of runs and every choice are identical everywhere. New (kernel, key)s
   are looked up in the disk cache by group rank 0 (its answer travels in the same exchange, or one broadcast
   more). Decided tracks are published by :mod:`~.decisions`. On GPUs, the configs of the (kernel, key)s met in
   the run are then compiled ahead, each once per node, and their failures agreed (:mod:`~.compiling`).
3. Repeat until every track is decided; then **once more** with all the best configs, whose result is returned.

While tuning, each launch of a (kernel, key) being tuned is a benchmarking launch as ``Autotuner._bench`` makes
it (the config's and the autotuner's ``pre_hook``, the launch, the autotuner's ``post_hook``: ``reset_to_zero``
zeroed, ``restore_value`` restored), so repeated runs leave those tensors as one run would; the final run makes the
reset Triton makes after tuning, then real launches. A bound (``max_runs``) ends a call that keeps meeting new
keys with the best configs so far. Each tuning run is under the watchdog, and each (kernel, key) has a crash
journal per rank, so that a config that hangs or crashes a rank is left out after a restart.

A later (*hot*) call is a single run with no communication at all (:mod:`~.hot`). A key the group has not decided,
met in a hot call, runs with a local default (the first config its pruning keeps); at the end of the run the ranks
that met one settle it (:mod:`~.newkeys`): when every rank met it, the call goes on as a tuning call on every rank;
otherwise it is *pending* until every rank meets it in one call, or the group's exchange every ``sync_every`` calls
(:class:`~triton_dist_tune.contextual.tuner.ContextualTuner`) finds it (see docs/contextual.md, "New keys in later
calls, and ranks that meet different keys").
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..errors import BadInputError, describe_error
from ..faults.recovery import interruptible
from ..group.channel import Group
from . import intercept, launches
from .compiling import precompile_new
from .decisions import record_decision
from .exchange import ended_alike, exchange
from .newkeys import settle
from .state import CallState, RunRecord, TunerState

log = logging.getLogger("triton_dist_tune")

#: consecutive runs without progress after which unfinished tracks are ended with what they have
MAX_IDLE_RUNS = 2


class Session(CallState):
    """One call of a contextual tuned function (see the module docstring): its state (:class:`~.state.CallState`)
    and the run loop.

    ``tuning``: every rank of the group takes part (the group's first call, or a call the group agreed to tune
    in); otherwise the call is *hot*: no communication, and a key the group has not decided runs with a local
    default and is *pending* until the group's next agreement.
    """

    def __init__(self, tuner: TunerState, group: Group, tuning: bool, call: int = 0) -> None:
        super().__init__(tuner, group, tuning, call)
        self._idle, self._last_state = 0, ()

    def launch(self, autotuner: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run one intercepted launch (see :class:`~triton_dist_tune.contextual.intercept.Handler` and
        :func:`~triton_dist_tune.contextual.launches.launch`)."""
        return launches.launch(self, autotuner, args, kwargs)

    # -- the loop --------------------------------------------------------------------------------------------------

    def call(self, args: tuple, kwargs: dict[str, Any], first: tuple[Any, Exception | None] | None = None) -> Any:
        """Run the function until every track is decided, then once more; return that run's result. ``first``: the
        result of a run already made (a hot call that met an undecided key, :mod:`~.hot`)."""
        clean = False
        try:
            if self.tuning:
                self.gather_journals()
                self.open_board()
            with interruptible():
                out = self._loop(args, kwargs, first)
            clean = True
            return out
        except BadInputError as exc:
            if isinstance(exc, type(intercept.empty_pruning_error())) and _keeps_nothing(str(exc)):
                raise self._empty_pruning(exc) from exc
            raise
        except Exception:
            raise
        except BaseException as exc:  # Ctrl-C, SIGTERM (a launcher ending the job), a cancelled task between runs
            self.not_blamed(f"interrupted ({type(exc).__name__}) at an exchange between runs: no config is blamed")
            raise
        finally:
            self.close_board(clean)
            for local in self.local.values():
                local.journal.close()

    def _loop(self, args: tuple, kwargs: dict[str, Any], first: tuple[Any, Exception | None] | None) -> Any:
        while True:
            if first is not None:  # a hot call's run (its watchdog disarmed when it ended: HotCall.call)
                (out, error), first = first, None
            else:
                # final: every track of the call is decided (a tuning run before any track, run 0 included, is not:
                # it is under the watchdog, since a rank may wait in the function's collective before its first
                # tuned launch)
                self.final_run = bool(self.tracks) and all(t.done for t in self.tracks.values())
                out, error = self._run_once(args, kwargs)
            if not self.tuning and not self.needs_tuning and not (self.met and self._tune_now()):
                if error is not None:
                    raise error
                return out  # every launch was decided (or pending, not met by every rank): no communication
            exchanged = exchange(self, error)
            created = exchanged.created
            if (self.final_run or not self.tracks) and not created:
                self.tuner.tuned(self.group)  # ended on every rank: counted so before any line of it is logged
                self._summary()
                return out
            # the bound applies however the keys are decided: a key that changes every run and is decided as it is
            # met (one config after pruning, a disk-cache hit) leaves every track done after each run
            if self.runs >= self.tuner.options.max_runs and (created or not all(t.done for t in
                                                                                 self.tracks.values())):
                return self._bounded(args, kwargs)
            precompile_new(self, exchanged)
            self._idle_check(created)

    def _empty_pruning(self, exc: Exception) -> Exception:
        """Triton's own error for a pruning that keeps no config, on every rank alike: ``str(error)`` is Triton's
        text exactly; the kernel (``kernel``: the name Triton prints, ``kernel_id``, ``key``) and the group's
        account of it (``details``: which rank's pruning kept what) are attributes, and in the logs."""
        details = getattr(exc, "error_message", str(exc))
        tid = next((t for t in sorted({*self.tracks, *self.local}) if f"kernel={t[0]} key={t[1]}" in details), None)
        local = self.local.get(tid) if tid is not None else None
        error = type(exc)(intercept.EMPTY_PRUNING)
        error.kernel = intercept.kernel_name(local.autotuners[0]) if local is not None else (  # type: ignore
            tid[0] if tid is not None else None)
        error.kernel_id, error.key = (tid or (None, None))  # type: ignore[attr-defined]
        error.details = details  # type: ignore[attr-defined]
        self.log.error("%s %s: %s", self.label, error.kernel, details)  # type: ignore[attr-defined]
        log.error("triton_dist_tune: %s kernel %s: %s", self.label, error.kernel, details)  # type: ignore
        return error

    def _tune_now(self) -> bool:
        """A hot call whose ranks all met an undecided key: it goes on as a tuning call, on every rank alike."""
        if not settle(self.group, self.label, self.call_number, self.log, self.met):
            return False
        self.tuning, self.pending_mode, self.met = True, False, None
        self.gather_journals()  # every rank settled "now": the journal exchange is matched everywhere
        self.open_board()  # as a call that began tuning does: a peer's failure in a run is read, not taken for a hang
        return True

    def _bounded(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """The bound on runs per call is reached (on every rank at the same run): end every track with the best
        config so far, run once more (no exchange of tracks: a key met first there is pending), agree whether that
        run raised on some rank (then the same error on every rank), and return its result."""
        undone = sorted(tid for tid, t in self.tracks.items() if not t.done)
        bound = self.tuner.options.max_runs
        if undone:
            message = (f"{self.label} reached max_runs={bound} with {len(undone)} kernel key(s) still tuning "
                       f"({', '.join(f'{k} {t}' for k, t in undone)}): using the best config measured so far for "
                       "each; raise max_runs (or TRITON_DIST_AUTOTUNE_MAX_RUNS) to tune them fully")
        else:  # each run met new keys, each decided as it was met
            message = (f"{self.label} reached max_runs={bound} still meeting a new kernel key in each run (each "
                       "decided as it was met): the function runs once more, a key met first there running the first "
                       "config its pruning keeps until a later call tunes it; raise max_runs (or "
                       "TRITON_DIST_AUTOTUNE_MAX_RUNS) to tune more keys in one call")
        self.log.warning("%s", message)
        log.warning("triton_dist_tune: %s", message)
        for tid in undone:
            self.tracks[tid].force("best so far at max_runs")
            record_decision(self, self.tracks[tid])
        self.pending_mode, self.tuning, self.needs_tuning, self.final_run = True, False, False, True
        self.met = None
        out, error = self._run_once(args, kwargs)
        ended_alike(self, error)  # a run that raised on some rank raises on every rank
        self.tuner.tuned(self.group)
        self._summary()
        return out

    def _run_once(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, Exception | None]:
        self.runs += 1
        self.record = RunRecord()
        if self.tuning:  # the final run too: a rank may wait in the function's collective for a peer whose run raised
            self.arm()
        try:
            with intercept.intercepting(self):
                try:
                    return self.tuner.fn(*args, **kwargs), None
                except Exception as exc:
                    self.post_run_failure(describe_error(exc))
                    return None, exc
        except Exception:  # the tuner's own (a run's are returned above)
            raise
        except BaseException as exc:  # Ctrl-C, SIGTERM, a cancelled task's CancelledError: blames no config
            self._journal_inflight("interrupted")
            self.post_run_failure(f"interrupted ({type(exc).__name__})", interrupted=True)
            raise
        finally:
            self.disarm()

    def _idle_check(self, created: bool) -> None:
        """End tracks that no longer advance: after MAX_IDLE_RUNS runs in which no track moved."""
        state = tuple((tid, t.progress, t.best) for tid, t in sorted(self.tracks.items()))
        self._idle = 0 if created or state != self._last_state else self._idle + 1
        self._last_state = state
        if self._idle >= MAX_IDLE_RUNS:
            for track in self.tracks.values():
                if not track.done:
                    self.log.warning("%s %s: not launched by every rank for %d runs; ending it", self.label,
                                     track.label, self._idle)
                    track.force()
                    record_decision(self, track)

    def _summary(self) -> None:
        tuned = [t for t in self.tracks.values() if t.how == "tuned"]
        self.log.info("%s done after %d run(s): %d kernel key(s) decided (%d tuned) in %.2f s", self.label,
                      self.runs, len(self.tracks), len(tuned), time.monotonic() - self.started)


def _keeps_nothing(text: str) -> bool:
    """Whether a group's pruning error (the same text on every rank) says that no config is left: some rank's
    pruning kept none (Triton's own error there), or no config is kept by every rank; not a pruning function that
    raised something else."""
    return intercept.EMPTY_PRUNING in text or "keeps no config that every rank keeps" in text
