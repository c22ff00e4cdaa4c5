"""A campaign's next key compiled ahead, while the current key is tuned.

A campaign on units of one rank (the README's MoE campaign: 16 batch sizes on one GPU) spends half its time waiting
for compiles: each key's search screens configs that no earlier key did (the larger batch sizes keep larger tiles),
and the compile workers are idle while a stage is measured. The campaign knows which key comes next on the unit, so
the tuning of one key also compiles the configs the next will likely screen (:class:`NextKey`), with the next key's
own arguments (kernels specialise on them) and after every compile of its own (the guess and its compile passes
run on the rank's thread while the first stage would wait for its own compiles,
:meth:`~triton_dist_tune.measure.precompile.Compiles.run_idle`, and those left once that stage is measured run then:
left to later stages' waits, the next key's compiles started too late for it, 4.1-6.0 s against 1.9-2.5 s at 48
tokens in ``benchmarks/results/session_h200_17``; their compiles go to the pool's
:data:`~triton_dist_tune.measure.daemon_pool.NEXT_KEY` rank, run on its speculative threads, in worker processes of
the lowest priority): they take mostly the CPUs the current key's compiles leave idle, and those not started when the
key ends are dropped. The kernels compiled go into
Triton's caches, where the next key's compile pass finds them.

Which configs (:func:`~triton_dist_tune.measure.ahead.likely_for_next_key`): the next key's search, run without a
device over the times of the decided key nearest it (the same seeds and plan as the real one), then the configs
those times rank fastest, leaving out what the unit's decided keys screened and what was compiled ahead already.

Only where nothing can go wrong for the current key:

- one rank (a unit of one rank: no other rank is waiting in a collective), on a pool that compiles as it is given
  work (a GPU; not Triton's interpreter);
- a fresh tuning (no earlier attempt's journal): a compile pass for the next key that crashed or hung the process
  is not run again by the attempt that resumes the current key (the next key's own pass, journaled, then meets the
  same config and leaves it out);
- each config's pass under the tuning's deadline, blaming nothing; whatever the function raises there is dropped
  (the next key's own warm-up reports it).

The next key is the next one the unit will tune: a key its disk cache serves (a rerun of a campaign, a key tuned
before it) is passed over (``campaign._next_tuned``). Its call is built once more for that (the campaign's builder:
keep building cheap), and held while the current key is tuned. ``TRITON_DIST_AUTOTUNE_COMPILE_NEXT_KEY=0`` turns it
all off.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ..disk import logs
from ..errors import describe_error
from ..measure import ahead, compile_pass
from ..measure.daemon_pool import NEXT_KEY
from ..measure.lockstep import Measurer
from ..measure.precompile import compiles_here, precompile
from ..measure.search import search_applies
from ..records import Decision
from ..space import describe_key, plan_seed
from .searched import KeyTuning, nearest_decided, start_from


@dataclass
class NextKey:
    """The key a campaign's unit tunes after the current one: its key, its call and the configs kept for it."""

    key: Hashable
    #: builds its call: (positional arguments, keyword arguments); the campaign's builder, called only when its
    #: configs are compiled ahead
    call: Callable[[], tuple[tuple, dict[str, Any]]]
    kept: list[int]
    #: configs compiled ahead for some key of the campaign already (shared by the campaign's keys)
    compiled: set[int] = field(default_factory=set)
    #: the configs this key's guess compiled ahead (for the log line of how many the key then screened)
    guessed: list[int] = field(default_factory=list)


def screened_by(decision: Decision) -> set[int]:
    """The configs a decided key screened (each compiled in this process then)."""
    return {o.index for o in decision.outcomes if o.time is not None or o.state == "failed"}


def landscape_of(decision: Decision) -> dict[int, float]:
    """A decided key's screened times (its usable outcomes)."""
    return {o.index: float(o.time) for o in decision.outcomes
            if o.usable and o.time is not None and math.isfinite(o.time) and o.time > 0}


def compiles_ahead(tuner: Any) -> bool:
    """Whether a key's configs can compile ahead for ``tuner``: it has a ``precompile_fn``, or kernels compile
    here (a GPU, not Triton's interpreter) through the compile pass."""
    return tuner.options.precompile_fn is not None or (compiles_here() and compile_pass.available())


def compile_next_key(tuning: KeyTuning, upcoming: NextKey, measurer: Measurer, earlier: dict[int, Any],
                     space: int) -> None:
    """Queue, as the rank's idle work (:meth:`~triton_dist_tune.measure.precompile.Compiles.run_idle`), the
    compiles of the configs ``upcoming``, the key after ``tuning``'s, will likely screen (see the module docstring):
    a no-op unless this is a fresh tuning on one rank with an open compile pool."""
    if earlier or tuning.group.size != 1 or not measurer.compiles.open or not compiles_ahead(tuning.tuner):
        return
    measurer.compiles.idle.append(lambda: _start(tuning, upcoming, measurer, space))


def _start(tuning: KeyTuning, upcoming: NextKey, measurer: Measurer, space: int) -> None:
    """The guess (a search without a device: 0.1 s a key on one H200 host), the next key's call, then its configs'
    compiles started (``precompile_fn``) or their compile passes queued as idle work, one unit each."""
    tuner, group = tuning.tuner, tuning.group
    fn = tuner.options.precompile_fn
    try:
        guess = _guess(tuning, upcoming)
    except Exception as exc:  # a user's distance or key that the next key's own tuning will report
        logs.rank_log().info("%s next key: nothing compiled ahead (%s)", tuning.label, describe_error(exc))
        return
    if not guess:
        return
    try:
        args, kwargs = upcoming.call()
    except Exception as exc:  # the next key's own tuning reports it
        logs.rank_log().info("%s next key: nothing compiled ahead (building its call raised %s)", tuning.label,
                             describe_error(exc))
        return
    upcoming.guessed = guess
    upcoming.compiled.update(guess)
    todo = [tuning.todo(i) for i in guess]
    label = f"{tuning.label} next key {describe_key(upcoming.key)}"
    logs.rank_log().info("%s: compiling %d config(s) it will likely screen, after this key's own", label, len(todo))
    if fn is not None:
        precompile(group, label, fn, todo, args, kwargs, tuner.options.compile_threads, tuning.timeout, space,
                   measurer.compiles, NEXT_KEY)
        return
    budget = measurer.budget

    def run_quietly(index: int, desc: str, run: Any) -> str | None:
        measurer.guard.arm(tuning.timeout, f"{label} compile pass of config {index}", lambda: None)
        try:
            run()
        except Exception as exc:  # the next key's own warm-up reports it
            return describe_error(exc)
        finally:
            measurer.guard.disarm()
        return None

    # one unit per config: run while the first stage would wait for its compiles, the rest once it is measured
    _, units = compile_pass.pass_units(group, label, todo, run_quietly,
                                       lambda config: tuner.fn(*args, **kwargs, **config),
                                       tuner.options.compile_threads, tuning.timeout,
                                       go_on=lambda: not budget.spent, space=space, compiles=measurer.compiles,
                                       rank=NEXT_KEY)
    measurer.compiles.idle.extend(units)


def _guess(tuning: KeyTuning, upcoming: NextKey) -> list[int]:
    """The configs to compile ahead for ``upcoming`` (:func:`~triton_dist_tune.measure.ahead.likely_for_next_key`)."""
    tuner, group = tuning.tuner, tuning.group
    compiled = set(upcoming.compiled)
    for (name, _), decision in list(tuner.decisions.items()):  # a copy: another group's tuning may add to it
        if name == group.name:
            compiled |= screened_by(decision)
    if not search_applies(tuner.search_mode(), len(upcoming.kept)):  # the next key races every kept config
        return [i for i in upcoming.kept if i not in compiled][:ahead.NEXT_KEY_CAP]
    near = nearest_decided(tuner.decisions, group.name, upcoming.key, tuner.options.distance)
    seed = plan_seed(describe_key(upcoming.key), tuner.space_text)
    start = start_from(near)
    return ahead.likely_for_next_key(tuner.space, upcoming.kept, seed, start.seeds,
                                     landscape_of(near[0]) if near else {}, compiled, preferred=start.screened)
