"""What every rank's journal records say about each config, merged into one outcome per config (:func:`merge`): the
evidence the next attempt resumes from (:mod:`~triton_dist_tune.faults.recovery`), the same on every rank that merges
the same records. The records' format and their files: :mod:`~triton_dist_tune.faults.journal`."""

from __future__ import annotations

import re
from typing import Any

from ..group.rank_names import member_name, members_name
from ..records import COMPILE_PASS, finite_number
from .journal import FINAL, SCREENING, well_formed


def _samples(record: dict[str, Any]) -> int:
    """How many group samples a timed record holds (its ``round_times``)."""
    return len(record["round_times"]) if isinstance(record.get("round_times"), list) else 0


def _chronological(sessions: dict[Any, list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """One rank's attempts (its records grouped by ``session``) in the order they began: by the wall time of each
    one's first record where every attempt has one (a later attempt appends to the first journal it adopts, which
    may hold an attempt older than another file's), else in the order read; each attempt's records in the order
    written."""
    attempts = list(sessions.values())
    starts = [a[0].get("at") for a in attempts]
    if all(finite_number(t) for t in starts):
        return [a for _, a in sorted(zip(starts, attempts, strict=True), key=lambda pair: pair[0])]
    return attempts


def _latest(by_rank: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """The latest of a config's records, each rank's in the order written: the last one of the rank that holds
    the most (every rank journals the same group outcomes, so a rank holding fewer lost some: a machine's crash
    before they reached its disk), of equals the lowest rank's."""
    rank = max(by_rank, key=lambda r: (len(by_rank[r]), -r))
    return by_rank[rank][-1]


def settled(record: dict[str, Any], sharded: bool) -> bool:
    """Whether an earlier attempt's merged ``record`` of a config is its outcome, taken as it is: failed or stopped,
    or, in a ``sharded=True`` tuning, measured whole by one rank's share (``share``); a lock-step race's ``measured``
    config was still racing when that attempt ended, and races again."""
    state = record.get("state")
    return state in ("failed", "stopped") or (sharded and state == "measured" and record.get("share") is True)


def merge(per_rank: list[list[dict[str, Any]]] | dict[int, list[dict[str, Any]]], descriptions: list[str],
          only_job: str | None | bool = False, kept: str | None = None) -> dict[int, dict[str, Any]]:
    """Merge the journals of every rank (``per_rank``, by group rank: a list's position, or a dict's key where
    ranks are absent) into one outcome per config index, the same on every rank that merges the same records.

    With ``only_job`` (a job id, or None for "no job id known"), records of other jobs are ignored (and with None,
    every record: ``ALWAYS_TUNE`` outside a launcher that names its job). Records whose description does not match
    the current space are ignored; configs no rank started are absent. An outcome is, by evidence:

    - ``failed`` when some rank recorded that it failed or hung in it (a failure recorded after a ``measured``
      one wins: the config failed in a later round), with "failed on rank r: <error>" / "hung on rank r: ...";
    - ``failed`` when ranks were inside it at the end of two attempts that ended without an error (``kill -9``,
      the OOM killer, a lost node); after one such attempt it is a ``suspect``: measured again once (the other
      ranks' lost-peer errors in it are then taken for consequences: a peer that vanished inside a collective);
    - the group's ``measured`` / ``stopped`` record otherwise; of several, the latest: attempts in the order they
      began, each one's records in the order written (a race journals a config that left it again at its end, of
      the race's final statistic; a later attempt races again a config an earlier one left ``measured``, and its
      record, ``stopped`` or not, whatever its sample count, is the evidence now). A search's screening records
      (``stage``: :data:`SCREENING`) are kept apart: the one with the most samples (a config sampled again is
      journaled with every sample it took; of equals the first, as a sample taken again is journaled alone before
      the record of them all), carried in ``screening`` beside a finalist's race record, and the outcome where
      the config has no other. An ``interrupted`` attempt (SIGINT, SIGTERM) blames nothing: the config it was
      inside is measured again; nor does a hang in an attempt where a rank's run of that config raised from the
      tuner's NaN fill (``fill``) and that rank started nothing of the config after it: the peer the raise left
      inside a collective (a group without a failure board, mpi4py). A hang after the group went on is evidence.

    Evidence belongs to the config, not to the kept set: the journals of an entry are shared by every kept set of
    its key, and a failure, a hang or a crash recorded under any kept set counts. A time, though, ranks a config
    only against the configs it raced: with ``kept`` (the fingerprint of this tuning's kept set), a ``measured`` or
    ``stopped`` record written under another kept set (its ``kept`` field differs) is ignored, and the config is
    measured again.

    An attempt whose last record on some rank is in a config's compile pass (its ``started`` record there, or the
    ``interrupted`` one of a hang or of another rank's failure there: the record's ``phase``) ended in that pass,
    which is best-effort: it blames nothing (no suspect), and the config's outcome gets ``skip_pass`` (true), so
    that the next attempt warms it up without a compile pass. Without another outcome, that is an
    ``interrupted`` one (measured as if new).

    Every rank gathers the same records and merges them in the same order (by group rank, then as above), so every
    rank takes the same outcome of each config.
    """
    final: dict[int, dict[str, Any]] = {}  # index -> its first failure
    timed: dict[int, dict[int, list[dict[str, Any]]]] = {}  # index -> rank -> its timed records, in order
    screened: dict[int, dict[str, Any]] = {}  # index -> its screening record with the most samples
    local: dict[int, dict[int, dict[str, dict[str, Any]]]] = {}  # index -> rank -> state -> last record
    crashes: dict[int, dict[int, int]] = {}  # index -> rank -> attempts that ended inside it
    launches: dict[int, set[str]] = {}  # index -> the agreed attempts (``attempt``) that ended inside it
    passes: dict[int, set[int]] = {}  # index -> ranks with an attempt that ended in its compile pass
    # index -> attempt -> the rank whose run of it raised from the NaN fill, where that rank started nothing of it
    # after (the group never got past the raise: a peer's hang in that attempt is the raise's)
    filled: dict[int, dict[str, int]] = {}
    members = _members(per_rank)  # the group's global ranks, by group rank: messages name both where they differ
    for rank, records in sorted(per_rank.items()) if isinstance(per_rank, dict) else enumerate(per_rank):
        usable = [r for r in records if well_formed(r) and 0 <= r["index"] < len(descriptions)
                  and r["config"] == descriptions[r["index"]]
                  and (only_job is False or (only_job is not None and r.get("job") == only_job))]
        sessions: dict[Any, list[dict[str, Any]]] = {}
        for record in usable:
            sessions.setdefault(record.get("session"), []).append(record)
        for attempt in _chronological(sessions):
            for record in attempt:
                i, state = record["index"], record["state"]
                if state in ("measured", "stopped") and kept is not None and record.get("kept", kept) != kept:
                    continue  # timed against another kept set's configs: measured again
                if state == "failed":
                    final.setdefault(i, record)  # a failure outweighs any time, earlier or later
                elif state in FINAL and record.get("stage") == SCREENING:
                    if i not in screened or _samples(record) > _samples(screened[i]):
                        screened[i] = record
                elif state in FINAL:
                    timed.setdefault(i, {}).setdefault(rank, []).append(record)
                elif state in ("local_failure", "hung"):
                    local.setdefault(i, {}).setdefault(rank, {})[state] = record
                elif record.get("fill") is True and isinstance(record.get("attempt"), str):
                    filled.setdefault(i, {})[record["attempt"]] = rank
                attempt_name = record.get("attempt")
                if state == "started" and isinstance(attempt_name, str) and filled.get(i, {}).get(attempt_name) == rank:
                    del filled[i][attempt_name]  # it ran the config again: the group went on past the raise
            last = attempt[-1]
            if last.get("phase") == COMPILE_PASS:  # the attempt ended in this config's compile pass: no evidence
                passes.setdefault(last["index"], set()).add(rank)
            elif last["state"] == "started":  # it ended inside this config, with no error
                by_rank = crashes.setdefault(last["index"], {})
                by_rank[rank] = by_rank.get(rank, 0) + 1
                if isinstance(last.get("attempt"), str):
                    launches.setdefault(last["index"], set()).add(last["attempt"])
    outcomes: dict[int, dict[str, Any]] = {}
    for i in sorted({*final, *timed, *screened}):
        if i in final:
            record = final[i]
            outcomes[i] = {**record, "error": f"in an earlier attempt: {record.get('error', '')}{AGAIN}"}
        elif i in timed:
            outcomes[i] = _latest(timed[i]) if i not in screened else {**_latest(timed[i]), "screening": screened[i]}
        else:
            outcomes[i] = screened[i]
    for i, by_rank in sorted(local.items()):
        if outcomes.get(i, {}).get("state") == "failed":
            continue
        # a rank that died inside it leaves the others failing with a lost peer: no evidence then
        parts = [f"failed on {member_name(members, r)}: {states['local_failure'].get('error', '')}"
                 for r, states in sorted(by_rank.items()) if "local_failure" in states
                 and not (i in crashes and LOST_PEER.search(states["local_failure"].get("error", "")))]
        parts += [f"hung on {member_name(members, r)}: {states['hung'].get('error', '')}"
                  for r, states in sorted(by_rank.items())
                  if "hung" in states and "local_failure" not in states  # a hang stays a hang, but for one where
                  and not (isinstance(states["hung"].get("attempt"), str)  # a peer's run raised from the fill
                           and states["hung"]["attempt"] in filled.get(i, {}))]
        if not parts:
            continue
        error = "in an earlier attempt, " + "; ".join(p.rstrip(": ") for p in parts) + AGAIN
        outcomes[i] = {"index": i, "state": "failed", "error": error, "config": descriptions[i]}
    for i, by_rank in sorted(crashes.items()):
        if outcomes.get(i, {}).get("state") != "failed":
            outcomes[i] = crashed(i, descriptions[i], members_name(members, by_rank), launches.get(i, set()),
                                  max(by_rank.values()))
    for i, ranks in sorted(passes.items()):
        ended = {"index": i, "state": "interrupted", "config": descriptions[i],
                 "error": f"an earlier attempt ended in its {COMPILE_PASS} on {members_name(members, ranks)}, blaming "
                          f"nothing: warmed up without a {COMPILE_PASS}"}
        outcomes[i] = {**outcomes.get(i, ended), "skip_pass": True}
    return outcomes


def _members(per_rank: list[list[dict[str, Any]]] | dict[int, list[dict[str, Any]]]) -> list[int]:
    """The global ranks of the group whose records these are (each record names them in ``ranks``), or []."""
    for records in per_rank.values() if isinstance(per_rank, dict) else per_rank:
        for record in records if isinstance(records, list) else []:
            ranks = record.get("ranks") if isinstance(record, dict) else None
            if isinstance(ranks, list) and ranks and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
                return ranks
    return []


def crashed(index: int, config: str, who: str, attempts: set[str], most: int = 0) -> dict[str, Any]:
    """A config that attempts ended inside without an error: a suspect after one, failed after two. They count as
    the distinct ``attempts`` named by the records (:attr:`~.journal.Journal.attempt`: one attempt that ended inside
    it on several ranks or replicas counts once) or ``most``, the most ends one rank's journal holds (records that name
    no attempt), whichever is more. The outcome carries ``attempts``, so that
    :func:`~triton_dist_tune.faults.recovery.across` can count them over the replicas too."""
    times = max(most, len(attempts))
    what = (f"{who} were inside this config when {times} earlier attempt(s) ended without an error (killed, out of "
            "memory, a lost node)")
    if times >= 2:
        error, state = f"crashed: {what}{AGAIN}", "failed"
    else:
        error, state = f"suspect: {what}; measured once more", "suspect"
    return {"index": index, "state": state, "error": error, "config": config, "attempts": sorted(attempts)}


#: errors of a collective whose peer process went away (a consequence of another rank's crash, not evidence)
LOST_PEER = re.compile(r"by peer|Connection (?:reset|refused|closed)|Broken pipe|peer (?:process )?(?:died|exited)",
                       re.IGNORECASE)
#: what every "left out" message ends with: how to measure the config again
AGAIN = "; to measure it again: `triton-dist-tune clear` or TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1"


def outcome_text(record: dict[str, Any]) -> str:
    """A config's merged outcome (:func:`merge`) as the rank log says it: its state, then its error (``suspect:
    ...``, ``failed: in an earlier attempt, ...``), or its time."""
    state, error, time_ms = record.get("state", "?"), record.get("error") or "", record.get("time")
    detail = error if error else (f"{time_ms:.4g} ms" if isinstance(time_ms, (int, float)) else "")
    return error if error.startswith(state) else f"{state}{': ' + detail if detail else ''}"
