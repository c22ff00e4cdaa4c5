"""Measuring configs: the lock-step protocol for functions with collectives, and sharded tuning for rank-local ones.

Lock-step, for every config in the agreed order, on every rank:

1. journal ``started``; warm up ``n_warmup`` times (plus one checked run when ``ref_prog`` is given), under the
   watchdog, every run started by all ranks together (as in 3.);
2. exchange "ok or error" (this exchange also aligns the ranks before timing); a config that failed anywhere is
   failed everywhere;
3. time ``n_repeat`` runs under the watchdog, each started by every rank together (a short exchange before each
   run, which also stops every rank at the same run when one failed); with early stopping, the first quarter of
   them is exchanged first and the group stops the config when it is already ``early_stop`` times slower than
   the best so far;
4. exchange each rank's median; the group time is the MAX over ranks; journal the outcome. A failure whose error
   says the GPU context is unusable (:data:`POISONED`) stops every rank with ``DevicePoisonedError``.

Sharded: each rank measures the configs ``i`` with ``i % size == rank`` on its own, and one exchange at the end
shares every result (only for functions that talk to no other rank).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .comm import Group
from .errors import DevicePoisonedError, GroupTimeoutError
from .journal import Journal
from .side_effects import ArgumentState
from .timing import median
from .watchdog import WATCHDOG, exchange_timeout

Row = dict[str, Any]

#: CUDA errors after which a process's context is unusable: every later launch on that rank would fail too
POISONED = re.compile(r"illegal memory access|unspecified launch failure|misaligned address|device-side assert"
                      r"|illegal instruction|hardware stack error|uncorrectable ECC"
                      r"|CUDA_ERROR_(?:ILLEGAL|LAUNCH_FAILED|MISALIGNED|ASSERT)", re.IGNORECASE)


@dataclass
class Plan:
    """How each config is measured; identical on every rank."""

    n_warmup: int
    n_repeat: int
    timeout: float
    early_stop: float | None = None


class Reference:
    """The reference result of ``ref_prog``, against which each config's first run is checked."""

    def __init__(self, value: Any, rtol: float | None, atol: float | None) -> None:
        self.value = _detach_copy(value)
        self.rtol, self.atol = rtol, atol

    def mismatch(self, value: Any) -> str | None:
        """None when ``value`` matches the reference, else what differs."""
        import torch

        try:
            torch.testing.assert_close(value, self.value, rtol=self.rtol, atol=self.atol, check_device=False)
        except (AssertionError, TypeError, ValueError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()
            return "wrong result: " + (first[0] if first else type(exc).__name__)
        return None


@dataclass
class Trial:
    """One tuning call: the function, its arguments and everything that runs around each measured call."""

    fn: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    timer: Any
    state: ArgumentState | None = None
    pre_hook: Callable[..., Any] | None = None
    post_hook: Callable[..., Any] | None = None
    reference: Reference | None = None

    def run(self, config: dict[str, Any]) -> tuple[float, Any]:
        """Prepare the arguments, run once with ``config`` and return (ms, result)."""
        if self.state is not None:
            self.state.before_run()
        if self.pre_hook is not None:
            self.pre_hook(config, *self.args, **self.kwargs)
        ms, out = self.timer.time_call(lambda: self.fn(*self.args, **self.kwargs, **config))
        if self.post_hook is not None:
            self.post_hook(config, *self.args, **self.kwargs)
        return ms, out

    def checked_run(self, config: dict[str, Any]) -> str | None:
        """One untimed run compared against the reference; None when it matches."""
        _, out = self.run(config)
        self.timer.synchronize()
        produced = (out, *self.state.outputs) if self.state is not None else (out,)
        return self.reference.mismatch(produced) if self.reference is not None else None


class WrongResult(Exception):
    """A config's result differs from ``ref_prog``'s."""


def describe_error(exc: BaseException) -> str:
    """A one-line description of an exception, for logs, journals and error messages."""
    if isinstance(exc, WrongResult):
        return str(exc)[:500]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")[:500]


class Measurer:
    """Runs the measurement protocols for one tuning call of one key."""

    def __init__(self, group: Group, trial: Trial, plan: Plan, journal: Journal, log: logging.Logger,
                 label: str) -> None:
        self.group, self.trial, self.plan, self.journal, self.log, self.label = group, trial, plan, journal, log, label

    def _guarded(self, index: int, desc: str, phase: str, runs: Callable[[], Any]) -> tuple[Any, str | None]:
        """Run ``runs`` under the watchdog; returns (its result, None) or (None, error)."""
        def on_fire() -> None:
            self.journal.append(index, "hung", config=desc, error=f"{phase} exceeded {self.plan.timeout:g} s")
            self.log.error("%s config %d %s: HUNG past %g s: %s", self.label, index, phase, self.plan.timeout, desc)

        WATCHDOG.arm(self.plan.timeout, f"{self.label} config {index} ({desc}) {phase}", on_fire)
        try:
            result = runs()
            self.trial.timer.synchronize()
            return result, None
        except GroupTimeoutError:
            raise  # the group itself broke down: not this config's fault, and not recoverable here
        except Exception as exc:  # a failing config is data, not a crash
            return None, describe_error(exc)
        finally:
            WATCHDOG.disarm()

    def _warmup(self, config: dict[str, Any], index: int | None = None) -> None:
        """The checked run (with ``ref_prog``) and ``n_warmup`` untimed runs; raises on a failure or a wrong
        result. With ``index`` (lock-step) the runs are aligned as in :meth:`_timed`."""
        def checked() -> float:
            wrong = self.trial.checked_run(config)
            if wrong:
                raise WrongResult(wrong)
            return 0.0

        runs: list[Callable[[], float]] = [checked] if self.trial.reference is not None else []
        runs += [lambda: self.trial.run(config)[0]] * self.plan.n_warmup
        self._runs(runs, index, "warmup")

    def _timed(self, config: dict[str, Any], count: int, index: int | None = None) -> list[float]:
        """``count`` timed runs (ms each); with ``index`` (lock-step) aligned as in :meth:`_runs`."""
        return self._runs([lambda: self.trial.run(config)[0]] * count, index, "run")

    def _runs(self, runs: Sequence[Callable[[], float]], index: int | None, phase: str) -> list[float]:
        """Call each of ``runs`` in turn. With ``index`` (lock-step), the ranks start every run together and all
        stop at the same run once any of them failed (so that nobody is left alone inside a collective of the
        function, and the exchanges stay matched); the failure is then re-raised."""
        if index is None:  # sharded: nobody to align with
            return [run() for run in runs]
        results: list[float] = []
        failure: Exception | None = None
        for t, run in enumerate(runs):
            statuses = self.group.allgather(failure is not None, f"{self.label} config {index} {phase} {t}",
                                            exchange_timeout(self.plan.timeout))
            if any(statuses):
                break
            try:
                results.append(run())
            except Exception as exc:  # reported after the loop, once every rank has stopped
                failure = exc
        if failure is not None:
            raise failure
        return results

    def lockstep(self, index: int, config: dict[str, Any], desc: str, best: float | None) -> Row:
        """Measure one config in lock-step with the group; returns its row (identical on every rank but 'own')."""
        plan = self.plan
        self.journal.append(index, "started", config=desc)
        _, error = self._guarded(index, desc, "warmup", lambda: self._warmup(config, index))
        errors = self._exchange(index, desc, error, error, "warmup")
        if any(errors):
            return self._failed(index, desc, by_rank(errors))

        first = plan.n_repeat
        if plan.early_stop and best is not None and plan.n_repeat >= 4:
            first = max(1, plan.n_repeat // 4)
        samples, error = self._guarded(index, desc, "timing", lambda: self._timed(config, first, index))
        results = self._exchange(index, desc, error or median(samples), error, "timing")
        if any(isinstance(r, str) for r in results):
            return self._failed(index, desc, by_rank([r if isinstance(r, str) else None for r in results]))
        if first < plan.n_repeat:
            partial = max(results)
            if partial > plan.early_stop * best:
                return self._measured(index, desc, results, median(samples), early_stop=True)
            more, error = self._guarded(index, desc, "timing",
                                        lambda: self._timed(config, plan.n_repeat - first, index))
            if error is None:
                samples = samples + more
            results = self._exchange(index, desc, error or median(samples), error, "timing (rest)")
            if any(isinstance(r, str) for r in results):
                return self._failed(index, desc, by_rank([r if isinstance(r, str) else None for r in results]))
        return self._measured(index, desc, results, median(samples))

    def _exchange(self, index: int, desc: str, value: Any, error: str | None, phase: str) -> list[Any]:
        """Share this rank's outcome of a phase; its own failure is journaled first and named in a timeout."""
        if error:
            self.journal.append(index, "local_failure", config=desc, error=error)
        try:
            return self.group.allgather(value, f"{self.label} config {index} {phase}",
                                        exchange_timeout(self.plan.timeout))
        except GroupTimeoutError as exc:
            if not error:
                raise
            raise GroupTimeoutError(f"{exc}; on this rank, config {index} ({desc}) had failed: {error}") from exc

    def refine(self, candidates: Sequence[tuple[int, dict[str, Any], str]], rounds: int = 3) -> dict[int, Any]:
        """Time the leading configs again, interleaved round by round (A B C A B C ...), so that a drift of the
        machine during a long tuning cannot decide between them. Returns {index: group ms, or "rank r: error"}:
        a config's group time is the MAX over ranks of each rank's median over the rounds."""
        per_round = max(1, self.plan.n_repeat // rounds)
        medians: dict[int, list[list[float]]] = {i: [] for i, _, _ in candidates}
        outcome: dict[int, Any] = {}
        for r in range(rounds):
            for index, config, desc in candidates:
                if index in outcome:
                    continue
                samples, error = self._guarded(index, desc, "refine",
                                               lambda c=config, i=index: self._timed(c, per_round, i))
                results = self._exchange(index, desc, error or median(samples), error, f"refine round {r}")
                if any(isinstance(x, str) for x in results):
                    outcome[index] = by_rank([x if isinstance(x, str) else None for x in results])
                    self._stop_if_poisoned(index, desc, outcome[index])
                else:
                    medians[index].append(results)
        for index, per_round_results in medians.items():
            if index not in outcome:
                per_rank = zip(*per_round_results, strict=True)
                outcome[index] = max(median(list(times)) for times in per_rank)
                self.log.info("%s config %d refined: group %.4f ms", self.label, index, outcome[index])
        return outcome

    def sharded(self, todo: Sequence[tuple[int, dict[str, Any], str]]) -> list[Row]:
        """Measure this rank's share of ``todo`` alone, then share all results; returns rows for all of them."""
        mine = []
        for position, (index, config, desc) in enumerate(todo):
            if position % self.group.size != self.group.rank:
                continue
            self.journal.append(index, "started", config=desc)
            samples, error = self._guarded(
                index, desc, "sharded", lambda c=config: (self._warmup(c), self._timed(c, self.plan.n_repeat))[1]
            )
            if error:
                row = self._failed(index, desc, f"rank {self.group.rank}: {error}")
            else:
                row = self._measured(index, desc, [median(samples)], median(samples), sharded=True)
            mine.append(row)
        share = -(-len(todo) // self.group.size)  # the most configs one rank measures, each under the watchdog
        shared = self.group.allgather(mine, f"{self.label} sharded results",
                                      exchange_timeout(self.plan.timeout) * max(1, share))
        return sorted((row for rows in shared for row in rows), key=lambda r: r["index"])

    def fail(self, index: int, desc: str, error: str) -> Row:
        """Record a config the group already knows to be failed (e.g. it did not compile on some rank)."""
        return self._failed(index, desc, error)

    def _failed(self, index: int, desc: str, text: str) -> Row:
        row = {"index": index, "config": desc, "state": "failed", "time": None, "own": None, "error": text}
        self.journal.append(index, "failed", config=desc, error=text)
        self.log.info("%s config %d FAILED (%s): %s", self.label, index, text, desc)
        self._stop_if_poisoned(index, desc, text)
        return row

    def _stop_if_poisoned(self, index: int, desc: str, text: str) -> None:
        """A CUDA error that leaves a context unusable fails every later config on that rank: stop the whole group
        (the failure is journaled) so that a restart resumes without this config."""
        if POISONED.search(text):
            message = (f"{self.label} config {index} ({desc}) left a GPU context unusable ({text}); it is journaled "
                       "as failed: restart the job (e.g. torchrun --max-restarts) to resume without it")
            self.log.error(message)
            raise DevicePoisonedError(message)

    def _measured(self, index: int, desc: str, per_rank: Sequence[float], own: float, early_stop: bool = False,
                  sharded: bool = False) -> Row:
        group_time = float(max(per_rank))
        row = {"index": index, "config": desc, "state": "measured", "time": group_time, "own": own,
               "per_rank": [float(t) for t in per_rank], "early_stop": early_stop}
        self.journal.append(index, "measured", config=desc, time=group_time, per_rank=row["per_rank"],
                            early_stop=early_stop)
        self.log.info("%s config %d: own %.4f ms, group %.4f ms%s%s: %s", self.label, index, own, group_time,
                      " (stopped early)" if early_stop else "", " (sharded)" if sharded else "", desc)
        return row


def by_rank(errors: Sequence[str | None]) -> str:
    """'rank r: error; ...' for the ranks whose entry is an error."""
    return "; ".join(f"rank {r}: {e}" for r, e in enumerate(errors) if e)


def _detach_copy(value: Any) -> Any:
    if hasattr(value, "detach") and hasattr(value, "clone"):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_detach_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _detach_copy(v) for k, v in value.items()}
    return value
