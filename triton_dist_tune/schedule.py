"""The step schedule of one (kernel, key) in a contextual tuning, as the whole group sees it.

A :class:`Track` is built and advanced only from data every rank has gathered, by the same code, so its state is
identical on every rank and the ranks never need to agree on anything else. Each run of the tuned function is one
step of every unfinished track: for each config in turn, ``n_warmup`` untimed steps then ``n_repeat`` timed ones.
A step counts when every rank that launches the kernel with this key launched it, with the current config and
without error, in that run; a config that failed on any rank is skipped on every rank. When the last config is
done, the least group time wins (group time: the maximum over ranks of each rank's median; ties go to the earlier
config).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import AllConfigsFailedError, BadInputError, MismatchError

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
            raise BadInputError(f"{self.label}: pruning the configs failed: " + "; ".join(problems))
        self.holders: list[int] = sorted(infos)
        self.order = [i for i in first["pruned"] if all(i in info["pruned"] for info in infos.values())]
        if not self.order:
            raise BadInputError(f"{self.label}: the configs' pruning (prune_configs_by) keeps no config that every "
                                f"rank keeps: " + "; ".join(f"rank {r}: {i['pruned']}" for r, i in infos.items()))
        self.pos, self.step, self.runs = 0, 0, 0
        self.samples: dict[int, dict[int, list[float]]] = {}
        self.per_rank: dict[int, dict[int, float]] = {}
        self.times: dict[int, float] = {}
        self.failed: dict[int, str] = {}
        self.best: int | None = None
        self.how = ""
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
        if not self.done and self.order[self.pos] in self.failed:
            self._next()

    def fail(self, index: int, text: str) -> None:
        """Record that config ``index`` failed (ignored once it is measured)."""
        if index in self.times or index not in self.order:
            return
        self.failed[index] = f"{self.failed[index]}; {text}" if index in self.failed else text

    def advance(self, launches: Mapping[int, Sequence[Launch]]) -> str:
        """Apply one run's launches (by rank); returns what happened: advanced, failed, waiting or done."""
        if self.done:
            return "done"
        self.runs += 1
        for rank in sorted(launches):
            for index, _, error in launches[rank]:
                if error:
                    self.fail(index, f"rank {rank}: {error}")
        current = self.order[self.pos]
        if current in self.failed:
            self._next()
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
            self.per_rank[current] = {r: float(statistics.median(s)) for r, s in self.samples[current].items()}
            self.times[current] = max(self.per_rank[current].values())
            self._next()
        return "advanced"

    def _next(self) -> None:
        self.pos, self.step = self.pos + 1, 0
        while self.pos < len(self.order) and self.order[self.pos] in self.failed:
            self.pos += 1
        if self.pos == len(self.order):
            measured = [i for i in self.order if i in self.times]
            if not measured:
                raise AllConfigsFailedError(f"{self.label}: every config failed on some rank: " + "; ".join(
                    f"config {i} ({self.descriptions[i]}): {self.failed.get(i)}" for i in self.order))
            self.finish(min(measured, key=lambda i: (self.times[i], self.order.index(i))), "tuned")

    def finish(self, index: int, how: str) -> None:
        """Choose config ``index``; ``how`` says why (tuned, disk cache, only config, forced)."""
        self.best, self.how = index, how

    def force(self) -> None:
        """End a track whose kernel stopped being launched: the best measured config, else the first usable one."""
        measured = [i for i in self.order if i in self.times]
        if measured:
            self.finish(min(measured, key=lambda i: (self.times[i], self.order.index(i))), "forced")
            return
        usable = [i for i in self.order if i not in self.failed]
        if not usable:
            raise AllConfigsFailedError(f"{self.label}: every config failed on some rank")
        self.finish(usable[0], "forced, unmeasured")

    # -- reporting -------------------------------------------------------------------------------------------------

    def table(self) -> list[dict[str, Any]]:
        """One row per config in the order tried: index, config, state, group time, per-rank medians, error."""
        rows = []
        for i in self.order:
            state = "measured" if i in self.times else "failed" if i in self.failed else "skipped"
            rows.append({"index": i, "config": self.descriptions[i], "state": state, "time": self.times.get(i),
                         "per_rank": [self.per_rank[i][r] for r in sorted(self.per_rank[i])] if i in self.per_rank
                         else None, "error": self.failed.get(i)})
        return rows
