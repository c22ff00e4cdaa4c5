"""Around step 5 of a tuning (:mod:`~.tuning`): what an interrupt, a failing rank or the tuner's own error leaves in
the crash journal, and what is put back either way."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..disk import logs
from ..errors import CrossedTurnsError, DevicePoisonedError, GroupTimeoutError, describe_error
from ..measure.arguments import ArgumentState
from ..measure.lockstep import Measurer


@contextmanager
def measuring(measurer: Measurer, state: ArgumentState | None) -> Iterator[None]:
    """Around step 5: an interrupt (SIGINT, SIGTERM, any ``BaseException`` that is not an ``Exception``) is journaled
    and blames no config; the evidence of a failing, hung or poisoned rank is journaled where it arose; any other
    exception (the tuner's own code, a refused exchange) blames no config in flight. The compiles are dropped and
    the arguments put back either way; the CUDA graphs' memory goes back to the driver when the tuning ended normally
    (after an interrupt a kernel may still run, and emptying the allocator would wait for it, outside any
    deadline)."""
    try:
        yield
        measurer.close_graphs()
    except CrossedTurnsError as exc:  # threads of this process nested tunings in opposite orders: no config's fault
        measurer.not_blamed(exc)
        raise
    except DevicePoisonedError:
        raise
    except GroupTimeoutError as exc:  # a peer failed, ended or went silent, or the store went: this rank's config in
        # flight is no evidence (the peer's own journal holds any): journaled, not told (the peers' errors stand)
        measurer.journal.interrupt_started(f"interrupted: the group's exchange failed ({describe_error(exc)[:300]})")
        raise
    except Exception as exc:
        measurer.not_blamed(exc)
        raise
    except BaseException as exc:  # Ctrl-C, SIGTERM, a cancelled task's CancelledError: an interruption
        measurer.interrupted(exc)
        raise
    finally:
        measurer.compiles.close()
        workers = measurer.compiles.workers_text()
        if workers is not None:
            logs.rank_log().info("%s %s", measurer.label, workers)
        if state is not None:
            state.put_back()
