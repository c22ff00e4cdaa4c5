"""The step schedule of one (kernel, key) in a contextual tuning, as the whole group sees it.

A :class:`Track` is built and advanced only from data every rank has gathered, by the same code, so its state is
identical on every rank and the ranks never need to agree on anything else. Each run of the tuned function is one
step of every unfinished track: for each config in turn, ``n_warmup`` untimed steps then ``n_repeat`` timed ones.
A step counts when every rank that launches the kernel with this key launched it, with the current config and
without error, in that run; a config that failed on any rank is skipped on every rank. When the last config is
done, the least group time wins (group time: the maximum over ranks of each rank's median; ties go to the earlier
config).

Every per-config conclusion (the samples of a config are complete: summarize them, decide whether the config stays
in the running) is made in one place, :meth:`Track._conclude`; the choice among the concluded configs in
:meth:`Track._best`. A failure counts however late it is seen: a config measured before a rank reported it failing
leaves the running, and a decided track whose choice fails is decided again (or reopened).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import AllConfigsFailedError, BadInputError, MismatchError


class PruningError(BadInputError):
    """The kernel's own pruning (``prune_configs_by``) failed or kept nothing usable on some rank."""


#: one launch as a rank reports it: (config index, milliseconds or None, error or None)
Launch = tuple[int, "float | None", "str | None"]


class Track:
    """The group's schedule and measurements for one (kernel, key)."""

    def __init__(self, kernel: str, key_text: str, infos: Mapping[int, dict[str, Any]], n_warmup: int,
                 n_repeat: int) -> None:
        self.kernel, self.key_text = kernel, key_text
        self.label = f"kernel={kernel} key={key_text}"
        first = infos[min(infos)]
        self.name, self.descriptions, self.names = first["name"], first["descriptions"], first["names"]
        self.entry, self.space_text = first["entry"], first["space_text"]
        self.n_warmup, self.n_repeat = n_warmup, n_repeat
        for rank, info in sorted(infos.items()):
            if info["descriptions"] != self.descriptions:
                raise MismatchError(f"{self.label}: the ranks differ in the kernel's configs (rank {min(infos)}: "
                                    f"{len(self.descriptions)} configs, rank {rank}: {len(info['descriptions'])})")
        problems = [f"rank {r}: {i['pruned']}" for r, i in sorted(infos.items()) if isinstance(i["pruned"], str)]
        if problems:
            raise PruningError(f"{self.label}: pruning the configs failed: " + "; ".join(problems))
        self.holders: list[int] = sorted(infos)
        self.order = [i for i in first["pruned"] if all(i in info["pruned"] for info in infos.values())]
        if not self.order:
            raise PruningError(f"{self.label}: the configs' pruning (prune_configs_by) keeps no config that every "
                                f"rank keeps: " + "; ".join(f"rank {r}: {i['pruned']}" for r, i in infos.items()))
        self.pos, self.step, self.runs = 0, 0, 0
        self.samples: dict[int, dict[int, list[float]]] = {}
        self.per_rank: dict[int, dict[int, float]] = {}
        self.times: dict[int, float] = {}
        self.failed: dict[int, str] = {}
        #: configs whose time came from an earlier attempt's journal
        self.resumed: set[int] = set()
        self.best: int | None = None
        self.how = ""
        #: increases whenever the choice changes (a late failure of the chosen config)
        self.revision = 0
        if len(self.order) == 1:
            self.finish(self.order[0], "only config")

    # -- state -----------------------------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Whether the group has chosen a config."""
        return self.best is not None

    def current(self) -> int:
        """The config index this run's launches use (the best one once done)."""
        return self.best if self.best is not None else self.order[self.pos]

    def phase(self) -> tuple[str, int]:
        """("warmup" | "measure", iteration) of the current step."""
        if self.step < self.n_warmup:
            return "warmup", self.step
        return "measure", self.step - self.n_warmup

    # -- updates, from gathered data only ----------------------------------------------------------------------------

    def join(self, infos: Mapping[int, dict[str, Any]]) -> None:
        """Ranks that met this (kernel, key) later than the others: configs they prune are left out."""
        for rank, info in sorted(infos.items()):
            if rank in self.holders:
                continue
            self.holders = sorted([*self.holders, rank])
            kept = info["pruned"] if isinstance(info["pruned"], list) else []
            for index in self.order:
                if index not in kept:
                    self.fail(index, f"rank {rank}: pruned")

    def fail(self, index: int, text: str) -> None:
        """Record that config ``index`` failed; it leaves the running however late this is seen (a measured
        config loses its time; a chosen one is replaced by the next best, or the track reopens)."""
        if index not in self.order:
            return
        self.failed[index] = f"{self.failed[index]}; {text}" if index in self.failed else text
        self.times.pop(index, None)
        self.per_rank.pop(index, None)
        if self.best == index:
            self.best, self.how = None, ""
            self.revision += 1
            self.pos, self.step = -1, 0
            self._next()
        elif not self.done and self.order[self.pos] == index:
            self._next()

    def resume(self, outcomes: Mapping[int, Mapping[str, Any]]) -> None:
        """Take the group outcomes of an earlier attempt (merged journals): measured configs keep their time and
        are not measured again; failed, hung or crashed ones are left out."""
        for index, outcome in sorted(outcomes.items()):
            if index not in self.order or self.done:
                continue
            if outcome["state"] == "measured":
                self.times[index] = float(outcome["time"])
                per_rank = outcome.get("per_rank") or []
                self.per_rank[index] = {r: float(t) for r, t in zip(self.holders, per_rank, strict=False)}
                self.resumed.add(index)
            else:
                self.fail(index, str(outcome.get("error", "failed in an earlier attempt")))
        if not self.done and (self.order[self.pos] in self.failed or self.order[self.pos] in self.times):
            self.pos -= 1
            self._next()

    def advance(self, launches: Mapping[int, Sequence[Launch]]) -> str:
        """Apply one run's launches (by rank); returns what happened: advanced, failed, waiting or done."""
        if self.done:
            return "done"
        self.runs += 1
        current = self.order[self.pos]
        for rank in sorted(launches):
            for index, _, error in launches[rank]:
                if error:
                    self.fail(index, f"rank {rank}: {error}")
        if current in self.failed or self.done:
            return "failed"
        if not all(launches.get(r) and all(i == current and e is None for i, _, e in launches[r])
                   for r in self.holders):
            return "waiting"
        if self.step >= self.n_warmup:
            mine = self.samples.setdefault(current, {})
            for r in self.holders:
                mine.setdefault(r, []).extend(float(ms) for _, ms, _ in launches[r])
        self.step += 1
        if self.step == self.n_warmup + self.n_repeat:
            self._conclude(current)
            self._next()
        return "advanced"

    def _conclude(self, index: int) -> None:
        """The samples of config ``index`` are complete: summarize them into its per-rank and group time.

        The one place where a config's measurements become a conclusion (statistics plug in here: a summary with
        its spread, or leaving the config out as clearly slower than the best so far)."""
        self.per_rank[index] = {r: float(statistics.median(s)) for r, s in self.samples[index].items()}
        self.times[index] = max(self.per_rank[index].values())

    def _best(self) -> int | None:
        """The choice among the measured configs: the least group time, ties to the earlier config."""
        measured = [i for i in self.order if i in self.times]
        return min(measured, key=lambda i: (self.times[i], self.order.index(i))) if measured else None

    def _next(self) -> None:
        self.pos, self.step = self.pos + 1, 0
        while self.pos < len(self.order) and (self.order[self.pos] in self.failed or self.order[self.pos] in
                                              self.times):
            self.pos += 1
        if self.pos == len(self.order):
            best = self._best()
            if best is None:
                raise AllConfigsFailedError(f"{self.label}: every config failed on some rank: " + "; ".join(
                    f"config {i} ({self.descriptions[i]}): {self.failed.get(i)}" for i in self.order))
            self.finish(best, "tuned")

    def finish(self, index: int, how: str) -> None:
        """Choose config ``index``; ``how`` says why (tuned, disk cache, only config, forced)."""
        self.best, self.how = index, how

    def force(self, how: str = "forced") -> None:
        """End the track now: the best measured config, else the first usable one."""
        best = self._best()
        if best is not None:
            self.finish(best, how)
            return
        usable = [i for i in self.order if i not in self.failed]
        if not usable:
            raise AllConfigsFailedError(f"{self.label}: every config failed on some rank")
        self.finish(usable[0], f"{how}, unmeasured")

    # -- reporting -------------------------------------------------------------------------------------------------

    def table(self) -> list[dict[str, Any]]:
        """One row per config in the order tried: index, config, state, group time, per-rank medians, error."""
        rows = []
        for i in self.order:
            state = "measured" if i in self.times else "failed" if i in self.failed else "skipped"
            if i in self.resumed:
                state = "resumed"
            rows.append({"index": i, "config": self.descriptions[i], "state": state, "time": self.times.get(i),
                         "per_rank": [self.per_rank[i][r] for r in sorted(self.per_rank[i])] if i in self.per_rank
                         else None, "error": self.failed.get(i)})
        return rows
