"""The steps of a tuning that every rank computes on its own and the group then agrees on: the call (key, config
space, group size), the configs ``prune_fn`` keeps, and the preparation of measuring. A problem on any rank is the
same error on every rank, and no config is blamed for it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from .. import settings
from ..disk import logs
from ..errors import AutotuneError, BadInputError, MismatchError, describe_error, per_rank
from ..faults.progress import user_code
from ..faults.recovery import ALWAYS_TUNE_FIELD, always_tune, warn_timeouts_differ
from ..group.agreement import agree
from ..group.channel import ExchangeError, Group
from ..group.rank_names import add_ranks_text
from ..group.unresolved import NOTES
from ..measure import compile_pass
from ..measure.arguments import ArgumentState, fill_raised_before, named_arguments
from ..measure.clocks import make_clock
from ..measure.reference import Reference
from ..measure.replicas import Layout, kept_by_all
from ..measure.timing import timing_mode
from ..measure.trial import Trial
from ..space import check_call, keeps
from .tuned import TunedFunction

#: the first agreement's field of the replica count (``autotune_replicas``'s group size, or "not given")
REPLICAS_FIELD = "autotune_replicas (the replica count)"
#: the first agreement's field of the tuning's timeout: ranks that differ in it are warned, not stopped
TIMEOUT_FIELD = "timeout"
#: the first agreement's field of ``cache_key_extra``'s text (:func:`extra_shown`)
EXTRA_FIELD = "cache_key_extra"
#: the longest ``cache_key_extra`` text the agreement carries whole (a longer one: its start, length and hash)
EXTRA_SHOWN_CHARS = 120


def extra_shown(text: str) -> str:
    """``cache_key_extra``'s text as the first agreement carries it and a ``MismatchError`` shows it: whole (quoted)
    up to :data:`EXTRA_SHOWN_CHARS` characters; a longer one as its start, its length and a hash of all of it (two
    texts that differ anywhere differ here)."""
    if len(text) <= EXTRA_SHOWN_CHARS:
        return repr(text)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[:80]!r}... ({len(text)} characters, sha256 {digest})"


def agree_on_call(tuner: TunedFunction, group: Group, key_text: str, problem: str | None, args: tuple,
                  kwargs: dict[str, Any], overwrite: bool = False, layout: Layout | None = None,
                  user_extra: str = "") -> None:
    """Step 1: one exchange of (key, config space, group size, replica count, ``cache_key_extra``'s text
    ``user_extra``) and this rank's ``problem`` (a failing ``key_fn``, a bad call keyword) or a config that clashes
    with the call's keywords. Group rank 0 alone reads the cache, for the entry its own ``cache_key_extra`` names:
    ranks whose texts differ get a ``MismatchError`` naming it (before, the other ranks' texts were never looked at).

    With a ``layout`` (``autotune_replicas``), three exchanges, so that a problem found on any rank of any replica
    is an error on every rank of every replica at once (never a timeout on the ranks that found none): across
    replicas (key, config space, group size, ``cache_key_extra``'s text: the layout keeps one decision), then inside
    the group (carrying what the first found), then across replicas again (carrying what the group found)."""
    if layout is None:
        return _agree_in_group(tuner, group, key_text, problem, args, kwargs, overwrite, "not given", user_extra)
    failed = _caught(lambda: layout.agree(tuner.name, key_text, tuner.space_text, tuner.options.timeout, problem,
                                          _timeout(tuner), extra_text=extra_shown(user_extra)))
    in_group = _caught(lambda: _agree_in_group(tuner, group, key_text, problem or _text(failed), args, kwargs,
                                               overwrite, str(layout.replicas.size), user_extra))
    failed = failed or in_group  # this rank's own error first: the group's carries it
    across_replicas(layout, tuner.name, failed, f"[{tuner.name}] agreement across replicas", tuner.options.timeout)


def in_job(group: Group, parts: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``parts`` of an agreed error, by group rank, as :func:`~triton_dist_tune.errors.per_rank` names them: a group
    of one rank (a rank-local campaign's unit, in a job of several processes) is this process, named by its rank in
    the job, as :func:`~.decide.failure_text` names it (each such tuning would say ``rank 0``: a key that global rank
    1 tuned sent the user to rank 0's log, tests/test_campaign.py)."""
    if group.size != 1:
        return parts
    me = logs.global_rank()
    return [(me, text) for _, text in parts]


def _caught(step: Callable[[], None]) -> AutotuneError | None:
    """What ``step`` raised of an agreement's own errors (a mismatch, a bad input), else None."""
    try:
        step()
    except (BadInputError, MismatchError) as exc:
        return exc
    return None


def _text(error: AutotuneError | None) -> str | None:
    return None if error is None else str(error)


def _agree_in_group(tuner: TunedFunction, group: Group, key_text: str, problem: str | None, args: tuple,
                    kwargs: dict[str, Any], overwrite: bool, replicas: str, user_extra: str) -> None:
    if problem is None:
        try:
            check_call(tuner.fn, tuner.space, args, kwargs, tuner.name, overwrite)
        except BadInputError as exc:
            problem = str(exc)
    fields = {"group size": str(group.size), "config space": tuner.space_text, "key": key_text,
              REPLICAS_FIELD: replicas, EXTRA_FIELD: extra_shown(user_extra), **protocol_fields(tuner),
              "search mode (search= / TRITON_DIST_AUTOTUNE_SEARCH)": tuner.search_mode(),
              TIMEOUT_FIELD: f"{_timeout(tuner):g} s"}
    agreement = agree(group, fields, f"[{tuner.name}] agree on key and config space", tuner.options.timeout,
                      problem)
    if agreement.notes:
        raise BadInputError(f"{tuner.name}: " + per_rank(in_job(group, agreement.notes), tuner.name))
    for what, holders in agreement.differ.items():
        detail = "; ".join(f"ranks {ranks}: {text}" for ranks, text in holders)
        if what == TIMEOUT_FIELD:
            warn_timeouts_differ(tuner.name, f"the ranks of group '{group.title}'", detail)
            continue
        error = MismatchError(f"{tuner.name}: the ranks of group '{group.title}' differ in {what}: {detail}")
        if replicas == "not given" and REPLICAS_FIELD in agreement.differ:
            # a peer of this group passed autotune_replicas: its partners across replicas (this rank's too, in a
            # group this rank was not given) wait for this rank there, and learn from this note that it never comes
            add_ranks_text(error, group.title, list(getattr(group, "global_ranks", None) or ()))
            NOTES.post(str(error), kind="MismatchError")
        raise error


def _timeout(tuner: TunedFunction) -> float:
    """The tuning's timeout: the decorator's ``timeout=``, else ``TRITON_DIST_AUTOTUNE_TIMEOUT``."""
    return tuner.options.timeout if tuner.options.timeout is not None else settings.current().timeout


def protocol_fields(tuner: TunedFunction) -> dict[str, str]:
    """The settings that change the steps of a tuning (how many runs, exchanges and rounds), as the fields of the
    first agreement: ranks that differ in one get a ``MismatchError`` naming it at once, on every rank, instead of
    pairing different steps. The timing mode (``TRITON_DIST_AUTOTUNE_TIMING`` over ``timing=``: steady timing has
    a probe run and settled rounds that cold timing has not), the options that set the runs and rounds, and
    ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE`` with the job id it reads journals by (an earlier job's records are left
    out of the shared view only under it: ranks that differ would plan different configs)."""
    options = tuner.options
    try:
        timing = timing_mode(options.timing)
    except BadInputError as exc:  # checked when decorating; the environment may still be bad: agreed as text
        timing = f"invalid: {exc}"
    runs = (f"n_warmup={options.n_warmup} n_repeat={options.n_repeat} batch={options.batch} "
            f"budget={options.budget} early_stop={options.early_stop} refine_top={options.refine_top} "
            f"sharded={options.sharded} ref_prog={options.ref_prog is not None} "
            f"precompile_fn={options.precompile_fn is not None}")
    return {"timing mode (TRITON_DIST_AUTOTUNE_TIMING, or timing=)": timing,
            "runs and rounds (n_warmup, n_repeat, batch, budget, early_stop, refine_top, sharded, ref_prog, "
            "precompile_fn)": runs,
            ALWAYS_TUNE_FIELD: always_tune()}


def agreed_prune(tuner: TunedFunction, group: Group, label: str, args: tuple, kwargs: dict[str, Any],
                 timeout: float, layout: Layout | None = None) -> list[int]:
    """Step 2: the indices of the configs that ``prune_fn`` keeps on every rank (with a ``layout``, of every
    replica: a replica's error, raised by ``prune_fn`` or for a pruning that keeps nothing, reaches every rank of
    every replica in the same exchange, :func:`across_replicas`)."""
    mine: list[bool] | str
    own: BaseException | None = None  # what prune_fn raised on this rank: the agreed error's cause, with its frames
    try:
        with user_code("prune_fn"):  # no deadline of its own: a campaign unit stuck there stops beating
            mine = [keeps(tuner.prune_fn, c, args, kwargs) for c in tuner.space]
    except BadInputError as exc:  # prune_fn's answer or error, said by keeps (``prune_fn ...``)
        mine, own = str(exc), exc.__cause__
    except Exception as exc:
        mine, own = f"prune_fn raised {describe_error(exc)}", exc
    everyone = group.allgather(mine, f"{label} prune", timeout=timeout)
    for r, m in enumerate(everyone):  # what the store held for a rank: the tuner's own shape, or a clear error
        if not isinstance(m, str) and not (isinstance(m, list) and len(m) == len(tuner.space)
                                           and all(isinstance(v, bool) for v in m)):
            raise ExchangeError(f"{label} prune: the message read for group rank {r} is not a prune message of the "
                                "tuner (another process wrote under the tuner's keys of the key-value store)")
    errors = [(r, m) for r, m in enumerate(everyone) if isinstance(m, str)]
    failed, kept = None, []
    if errors:
        failed = BadInputError(f"{tuner.name}: " + per_rank(in_job(group, errors), tuner.name))
    else:
        kept = [i for i in range(len(tuner.space)) if all(m[i] for m in everyone)]
    if not kept and failed is None:
        failed = BadInputError(f"{label} prune_fn left no config that every rank keeps (of {len(tuner.space)}): "
                               + per_rank(in_job(group, [(r, _kept_by(m)) for r, m in enumerate(everyone)])))
    if layout is not None:
        return across_replicas(layout, tuner.name, failed, f"{label} prune (across replicas)", timeout, kept,
                               kept_by_all)
    if failed is not None:
        raise failed from own
    return kept


def across_replicas(layout: Layout, name: str, failed: AutotuneError | None, what: str, timeout: float | None,
                    value: Any = None, merge: Callable[[list[Any]], Any] | None = None) -> Any:
    """One exchange (step ``what``) across the replicas of ``layout`` after a step that each replica's group agreed
    on inside itself: its error there (``failed``, the same on every rank of this group, or None) is raised by every
    rank of every replica at once, this replica's own first, else the others' (``replica j: ...``). Returns
    ``merge`` of every replica's ``value``, by replica (None without ``merge``). Before, the ranks of the replica
    whose ``prune_fn`` or ``ref_prog`` raised on one rank left the tuning alone, and the other replicas waited for
    them at their next exchange across replicas until its deadline, then raised ``GroupTimeoutError``."""
    def said(parts: list[list[Any]]) -> list[Any]:
        errors = [[j, text] for j, (text, _) in enumerate(parts) if text]
        return [errors, None if errors or merge is None else merge([part for _, part in parts])]

    try:
        errors, merged = layout.replicas.combine([_text(failed), value], what, said, timeout)
    except AutotuneError:  # a partner across replicas that raised a note of its own first, or went: this rank's
        if failed is None:  # own error still comes first (before, the note's relayed BadInputError came instead,
            raise  # once in a fresh-clone CI: test_layout.py's replicas_missing_on_one_rank test)
        raise failed from None
    if failed is not None:
        raise failed
    if errors:
        raise BadInputError(f"{name}: " + "; ".join(f"replica {j}: {text.removeprefix(f'{name}: ')}"
                                                    for j, text in errors))
    return merged


def _kept_by(mine: list[bool]) -> str:
    """What one rank's ``prune_fn`` kept, for the error when no config is kept by every rank: ``keeps configs
    [0, 3]`` (the first 10 indices, then how many in all), or ``keeps none``."""
    indices = [i for i, k in enumerate(mine) if k]
    if not indices:
        return "keeps none"
    shown = ", ".join(str(i) for i in indices[:10]) + (f", ... ({len(indices)} in all)" if len(indices) > 10 else "")
    return f"keeps config{'s' if len(indices) > 1 else ''} [{shown}]"


def prepare(tuner: TunedFunction, group: Group, label: str, args: tuple, kwargs: dict[str, Any], timeout: float,
            journaled: list[dict[str, Any]], layout: Layout | None = None) -> tuple[Trial, ArgumentState]:
    """What runs before the first aligned exchange of measuring: the timer, the argument snapshots and
    ``ref_prog``'s reference. Agreed like ``key_fn``: an exception on any rank is the same BadInputError on
    every rank, and no config is blamed for it; so is the kind of clock the samples' call counts follow.
    ``journaled``: this rank's journal records of the key: where any rank's show a run of an earlier attempt that
    raised from the NaN fill, no rank fills (:meth:`~triton_dist_tune.measure.arguments.ArgumentState.never_fill`).
    With a ``layout``, a replica's problem reaches every rank of every replica in one exchange more
    (:func:`across_replicas`): before, the other replicas measured their share and then waited for it at the
    outcomes across replicas, ``T + max(1, T/10)`` s, and raised ``GroupTimeoutError``.
    """
    options = tuner.options
    state: ArgumentState | None = None
    reference, buffers, timer, problem, step = None, None, None, None, "saving the arguments"
    try:
        state = ArgumentState(named_arguments(tuner.fn, args, kwargs), options.restore_value, options.reset_to_zero,
                              label)
        state.retry_fill = group.size == 1 or options.sharded  # measuring alone: no collective to match
        step = "making the clock"
        timer = make_clock()
        if options.ref_prog is not None:
            step = "ref_prog"
            state.before_run()
            with user_code("ref_prog"):  # as prune_fn
                out = options.ref_prog(*args, **kwargs)
            written = state.changed_now()  # undeclared outputs ref_prog wrote (a GEMM's c): compared too
            state.check_after()
            reference = Reference((out, *state.outputs), options.rtol, options.atol,
                                  parts=("the result", *state.output_names))
            buffers = Reference({name: state.watched[name][0] for name in written}, options.rtol, options.atol,
                                equal_nan=True) if written else None
    except Exception as exc:
        problem = f"{step} raised {describe_error(exc)}"
    kind = timer.kind if timer is not None else "host"
    everyone = group.allgather((problem, kind, fill_raised_before(journaled)),
                               f"{label} prepare (arguments, timer, ref_prog)", timeout=timeout)
    problems = [(r, p) for r, (p, _, _) in enumerate(everyone) if p]
    failed = BadInputError(f"{label} before measuring any config: " + per_rank(in_job(group, problems), tuner.name)) \
        if problems else None
    try:
        if layout is not None:
            across_replicas(layout, tuner.name, failed, f"{label} prepare (across replicas)", timeout)
        elif failed is not None:
            raise failed
    except AutotuneError:
        if state is not None:
            state.put_back()
        raise
    assert state is not None
    if any(raised for _, _, raised in everyone):  # agreed: a rank that fills could end the attempt again
        state.never_fill()
        logs.rank_log().info("%s an earlier attempt's run raised from the NaN fill: arguments the function changes "
                             "are restored before every run, none filled", label)
    user_pre_hook = options.pre_hook

    def pre_hook(config: dict[str, Any], *a: Any, **k: Any) -> None:
        if not compile_pass.in_pass():  # a config's first real run gets its arguments checked afterwards (its
            state.config_starting(config)  # pass launches no Triton kernel: it would see no kernel's writes)
        if user_pre_hook is not None:
            user_pre_hook(config, *a, **k)

    # the calls of a sample follow the host clock's rules on every rank when any rank times on the host (a rank
    # whose device cannot time falls back to it alone): the function's collectives must match
    trial = Trial(tuner.fn, args, kwargs, timer, state, pre_hook, options.post_hook, reference,
                  host_counts=any(k == "host" for _, k, _ in everyone), buffers=buffers)
    return trial, state
