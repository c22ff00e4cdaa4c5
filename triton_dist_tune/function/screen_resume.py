"""A resumed search's screening from the journals (:class:`~triton_dist_tune.function.searched.Searched`): which
earlier samples a stage takes instead of measuring (:func:`take_journaled`), and which it gives back when this
attempt times with another clock than the one that timed them (:func:`drop_other_clock`): a search ranks every
screening sample in one history, device times (CUDA-graph replays) and eager ones (host time included) never
together."""

from __future__ import annotations

from typing import Any

from ..disk import logs
from ..measure.lockstep import Measurer
from ..records import Outcome


def screening_record(earlier: dict[int, dict[str, Any]], index: int) -> dict[str, Any] | None:
    """``index``'s screening record in the merged journals (a finalist's race record carries it in ``screening``:
    not read, as the finalists are raced again)."""
    record = earlier.get(index)
    if record is not None and isinstance(record.get("screening"), dict):
        record = record["screening"]
    return record


def expected_clock(measurer: Measurer) -> str | None:
    """The clock this attempt times with: the one chosen, else the one it means to keep (the journals'); None when
    neither is known yet."""
    return measurer.clock_kind if measurer._clock_chosen else measurer.journaled_clock


def take_journaled(earlier: dict[int, dict[str, Any]], index: int, history: dict[int, list[float] | None],
                   outcomes: dict[int, Outcome], measurer: Measurer, probes: bool) -> bool:
    """Whether an earlier attempt's journal holds ``index``'s next screening sample (or its failure); records it
    if so. The journal holds every sample a config was screened with (its screening record's ``round_times``). A
    time taken with another clock than this attempt's is not taken (measured again). ``probes``: a first screening
    took the warm-up's probe and a sample."""
    record = screening_record(earlier, index)
    if record is None or record.get("state") not in ("measured", "stopped", "failed"):
        return False
    outcome = Outcome.from_json({**record, "index": index})
    if outcome is None:
        return False
    taken = len(history.get(index) or ())
    if not outcome.usable:
        if index in history and taken:
            return False  # it failed later than the samples taken so far: sample it again now
        outcome.resumed = True
        history[index], outcomes[index] = None, outcome
        return True
    clock = expected_clock(measurer)
    if clock is not None and record.get("clock") not in (None, clock):
        return False
    journaled = outcome.round_times or [outcome.time]  # the samples as read back (records.group_samples)
    if taken >= len(journaled):
        return False
    outcome.resumed = True
    if outcome.probed:  # an earlier attempt's stand-in: a bound, as this attempt's own
        measurer.probes.indices.add(index)
    first = 2 if probes and taken == 0 else 1
    history[index] = [*(history.get(index) or ()), *map(float, journaled[taken:taken + first])]
    outcomes[index] = outcome
    return True


def drop_other_clock(earlier: dict[int, dict[str, Any]], history: dict[int, list[float] | None],
                     outcomes: dict[int, Outcome], measurer: Measurer, label: str) -> list[int]:
    """Once this attempt's clock is chosen: give back the journaled samples taken before it was (the first stage's)
    that another clock timed: this attempt meant to keep the journals' clock and could not (no config of its first
    race could be captured, or it may not time on the device at all). Those configs are unscreened again, and
    measured if the search proposes them. Returns those given back."""
    if not measurer._clock_chosen:
        return []
    dropped = [i for i, outcome in outcomes.items() if outcome.resumed and outcome.usable
               and (screening_record(earlier, i) or {}).get("clock") not in (None, measurer.clock_kind)]
    for i in dropped:
        del history[i], outcomes[i]
        measurer.probes.indices.discard(i)
    if dropped:
        logs.rank_log().warning("%s %d config(s) screened on another clock by an earlier attempt are measured again "
                                "if proposed: this attempt times %s", label, len(dropped),
                                "on the device" if measurer.clock_kind == "graph" else "eagerly")
    return dropped
