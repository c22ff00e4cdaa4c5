"""Keeping tuning runs from leaking side effects into the caller's arguments.

``restore_value`` tensors are saved before tuning and put back before every measured run; ``reset_to_zero``
tensors are zeroed before every measured run. Both are put back to their saved values before the final call, so
that after tuning the arguments and the result are exactly what one untuned call with the chosen config gives.

A list, tuple or dict argument counts as the tensors inside it (nested too): naming it in ``restore_value`` or
``reset_to_zero`` declares each of them, and the others are watched one by one (named ``xs[0]``, ``d['k']``).
Naming an argument that holds no tensor there (an object that keeps its tensors in attributes, say) is a
:class:`~triton_dist_tune.errors.BadInputError`, never ignored.

Every other tensor argument is watched: it is saved before tuning too, and after the first run of each config (the
first that launches its kernels: a compile pass's run is not announced, :func:`~.compile_pass.in_pass`) (and
after ``ref_prog``) it is checked, by torch's in-place version counter and by comparing it with the saved copy
(which also sees writes that bump no counter: collectives such as ``all_reduce``, Triton kernels). An argument found
changed is restored before every later run and before the final call, with a warning that names it and the option
(``restore_value``) that says so explicitly. A change made by a config only on a later run than its first is not
seen: declare such arguments.

An output buffer the function writes whole is no state to restore: it is found changed like any other, but a
floating-point one is then filled with NaN before the next plain warm-up run (untimed: never a probe's or a sample's
run) and, once every element was written over whatever it held (no NaN left), it is **written whole**
(:attr:`ArgumentState.written`): left as the last run wrote it from then on, with no copy before each run, and no
warning (until then it is restored before every run, as a changed one). Every later config's first warm-up run
(outside a CUDA graph's capture) is checked the same way: the buffer is filled with NaN before it, and a NaN left
after it (a run that skips elements, or reads the buffer: ``c += a @ b``, ``c * beta``) makes it a changed argument as
above, restored before every later run. (With ``n_warmup=0`` no run checks it: it stays restored before every run.) A
run checked against ``ref_prog`` gets it put back first, and so does the final call. A read that turns NaN into a
number (``torch.where(c > 0, a, b)``, ``nan_to_num``) leaves no NaN: such a buffer is taken for written whole, and the
other runs read what the run before wrote instead of the caller's values, which changes their times at most (the runs
whose results count start from the caller's values); ``restore_value`` has it restored before every run.
Each sample timed the copy with the calls: on one H200 (``benchmarks/results/session_h200_48``) it added 8% to every
sample of a 0.023 ms GEMM call (M = 128, a 2 MB output); a 2.1 s key's time was the same with it or without (samples
last a set time), the warning gone.

What else a run leaves in the arguments is :mod:`.side_state`'s: the ``.grad`` of tensors that require grad (put
back before the final call), the items of lists and dicts (those a run changed put back before every later run and
the final call), and object state (said, not put back). An ``nn.Module`` argument's parameters and buffers are
saved only where the module is named in ``restore_value`` (a model's weights).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..capture import capturing
from ..errors import BadInputError
from . import breakdown
from .names import check_names, named_arguments
from .side_state import (
    MAX_DEPTH,
    Grads,
    Objects,
    RandomState,
    Structures,
    is_module,
    is_tensor,
    module_tensors,
    version_of,
)

__all__ = ["ArgumentState", "RandomState", "check_names", "named_arguments", "tensors_in"]

log = logging.getLogger("triton_dist_tune")


class ArgumentState:
    """The saved state of the tensor arguments a tuning may disturb (see the module's docstring)."""

    def __init__(self, named: Mapping[str, Any], restore_value: Iterable[str], reset_to_zero: Iterable[str],
                 label: str = "", watch: bool = True) -> None:
        self.label = label
        restore = _declared(named, restore_value, "restore_value")
        zero = _declared(named, reset_to_zero, "reset_to_zero")
        self.restore, self.zero = [t for _, t in restore], [t for _, t in zero]
        #: the tensors a run writes in place, each once (by identity), with what names it for ``ref_prog``'s verdict
        #: (``argument x (restore_value)``): restore_value's first
        self.declared: dict[int, tuple[str, Any]] = {}
        for option, pairs in (("restore_value", restore), ("reset_to_zero", zero)):
            for path, tensor in pairs:
                self.declared.setdefault(id(tensor), (f"argument {path} ({option})", tensor))
        #: name (``xs[0]`` for a tensor inside a list argument) -> (tensor, saved copy, version counter when saved)
        #: of every other tensor argument
        self.watched: dict[str, tuple[Any, Any, int]] = {}
        with breakdown.part("restore"):
            self.saved = [(t, t.detach().clone()) for t in self.outputs]
            seen = set(self.declared)
            if watch:
                for name, value in sorted(named.items()):
                    for path, tensor in tensors_in(name, value, modules=False):  # a module's weights: declared
                        if id(tensor) not in seen and _comparable(tensor):  # (a sparse or meta one: unwatched)
                            seen.add(id(tensor))
                            self.watched[path] = (tensor, tensor.detach().clone(), version_of(tensor))
        declared = {*restore_value, *reset_to_zero}
        #: the ``.grad`` of every argument tensor that requires grad, put back before the final call (and every run
        #: once one changed)
        self.grads = Grads([t for name, value in named.items()
                            for _, t in tensors_in(name, value, modules=name in declared)])
        #: the items of every list and dict argument: those a run changed are put back before every later run
        self.structures = Structures(named, label, restore_value)
        #: object arguments' attributes and module arguments' tensors, to say when a run changed them
        self.objects = Objects(named, label, declared)
        #: names of watched arguments some run changed: restored before every run from now on
        self.changed: list[str] = []
        #: names of watched floating-point arguments some run changed that every checked run wrote whole (see the
        #: module's docstring): left as the last run wrote them, put back before the final call and checked runs
        self.written: list[str] = []
        #: those of :attr:`written` a warm-up run from NaN has found written whole: until then, restored before every
        #: run as changed ones are (with ``n_warmup=0`` no run checks them)
        self.confirmed: set[str] = set()
        #: whether the next warm-up run is filled with NaN first (one was just found changed)
        self._fill_due = False
        #: whether a run that raised from the NaN fill runs again at once from the caller's values
        #: (:meth:`fill_raised`): on a rank measuring alone only (a group's other ranks would not run it again: the
        #: function's collectives would not match); a group runs the config's warm-up again on every rank together
        #: (:meth:`~triton_dist_tune.measure.guarding.Guarding._again_after_fill`)
        self.retry_fill = False
        #: whether a changed argument may be filled with NaN to see whether it is written whole (False: every
        #: changed argument is restored before every run: :meth:`never_fill`)
        self.fills = True
        #: whether fills are held back: a group's warm-up run again after a run that raised from the fill
        self._holding = False
        #: whether the last run raised having started from the NaN fill (in a group, every rank then runs the
        #: config's warm-up again together: :meth:`again_after_fill`); cleared before each run
        self.raised_from_fill = False
        #: whether the run going on started with the written arguments filled with NaN (checked when it ends)
        self._filled = False
        #: whether the run going on is a plain warm-up run, the only kind a fill may start (no sample times it)
        self._warmup = False
        #: the configs whose first run outside a capture was filled and checked
        self._filled_configs: set[int] = set()
        self._seen_configs: set[int] = set()
        self._check_due = False
        #: watched arguments whose version counter moved while their values did not (views sharing a base's)
        self._shared_counter: set[str] = set()
        #: watched arguments the check could not compare (left alone from then on)
        self._unwatched: set[str] = set()

    def config_starting(self, config: Mapping[str, Any]) -> None:
        """Called right before each run (after :meth:`before_run`): the first run of each config gets its watched
        arguments checked when it ends (:meth:`after_run`), and its first plain warm-up run outside a capture starts
        with the written arguments filled with NaN (checked when it ends too)."""
        if id(config) not in self._seen_configs:
            self._seen_configs.add(id(config))
            self._check_due = True
        if not self.written or not self._warmup or self._holding or capturing():
            return
        if self._fill_due or id(config) not in self._filled_configs:
            self._filled_configs.add(id(config))
            self._fill_due = False
            self._filled = True
            with breakdown.part("restore"), _untracked():
                for name in self.written:
                    self.watched[name][0].fill_(float("nan"))
                self._zero()  # (a filled argument may share memory with one)

    def run_failed(self) -> bool:
        """The run going on raised: what it left in the written arguments says nothing, so the next warm-up run
        starts from NaN again and is checked in its place. Returns whether the run started from the NaN fill (on a
        rank alone it then runs again from the caller's values: :attr:`retry_fill`, :meth:`fill_raised`)."""
        filled, self._filled, self._warmup = self._filled, False, False
        if filled:
            self._fill_due = True
        self.raised_from_fill = filled
        return filled

    def never_fill(self) -> None:
        """Fill nothing in this tuning: some rank's journal shows a run of an earlier attempt that raised from the NaN
        fill (:func:`fill_raised_before`), one that left a peer inside a collective and ended the attempt, or left
        the device unusable. Without this each attempt would end so at its next config."""
        self.fills = False

    def again_after_fill(self) -> None:
        """The group runs the config's warm-up again, on every rank together, because some rank's run raised from
        the NaN fill: that warm-up fills nothing on any rank (:meth:`again_done` ends it), and starts from the
        caller's values."""
        self._holding = True

    def again_done(self, ran: bool, filled: bool) -> None:
        """The warm-up run again (:meth:`again_after_fill`) ended: ``ran`` without error; ``filled``: this rank's run
        had raised from the fill, so the fill made it raise (:meth:`fill_raised`)."""
        self._holding = False
        if ran and filled:
            self.fill_raised()

    def fill_raised(self) -> None:
        """A run that raised from the NaN fill ran without error from the caller's values: the fill made it raise
        (a run from NaN can: a sampling kernel's probabilities). The arguments filled and not yet found written
        whole are read ones: restored before every run from now on, never filled again. Before, each later
        config's first warm-up ran from NaN again, and every config but the first failed."""
        for name in [name for name in self.written if name not in self.confirmed] or list(self.written):
            self.written.remove(name)
            self.confirmed.discard(name)
            self._report(name)
        self._fill_due = False
        self.raised_from_fill = False

    def check_after(self) -> None:
        """Have the next :meth:`before_run` or :meth:`put_back` check the watched arguments (after ``ref_prog``)."""
        self._check_due = True

    def _detect(self) -> None:
        for name, (tensor, copy, version) in self.watched.items():
            if name in self.changed or name in self.written or name in self._unwatched:
                continue
            moved = version_of(tensor) != version and name not in self._shared_counter
            if not (moved or self._check_due) or self._same(name, tensor, copy):
                if moved:  # a view's counter moves with its base's (a write elsewhere, the tuner's own restore)
                    self._shared_counter.add(name)  # so it is judged by its values from now on, when a check is due
                continue
            if self.fills and _fillable(tensor) and tensor.shape == copy.shape:  # perhaps an output written whole:
                # the next run starts from NaN (one resized is restored before every run)
                self.written.append(name)
                self._fill_due = True
                continue
            self._report(name)
        self._check_due = False

    def _same(self, name: str, tensor: Any, copy: Any) -> bool:
        """:func:`_same`; a host tensor it cannot compare is the tuner's problem, never the run's: left unwatched
        from now on (a device's error is the run's, left there asynchronously: raised)."""
        try:
            return _same(tensor, copy)
        except Exception as exc:
            if getattr(tensor, "is_cuda", False):
                raise
            self._unwatched.add(name)
            log.warning("triton_dist_tune: %s cannot compare the argument '%s' with its saved copy (%s): it is left "
                        "unwatched", self.label, name, exc)
            return True

    def _check_written(self) -> None:
        """After a run that started with the written arguments filled with NaN: one with a NaN left was not written
        whole (or was read), and is restored before every run from now on; the others are confirmed."""
        self._filled = False
        for name in list(self.written):
            if bool(self.watched[name][0].isnan().any()):
                self.written.remove(name)
                self.confirmed.discard(name)
                self._report(name)
            else:
                self.confirmed.add(name)

    def _report(self, name: str) -> None:
        self.changed.append(name)
        tensor = self.watched[name][0]
        history = (" Its values are restored, not its autograd history, which holds every run's change: tune its "
                   "key in a call under torch.no_grad() first (a decided key's call runs the function once, with "
                   "the decision), or pass autotune=False (the first config prune_fn keeps, not the decision)"
                   if getattr(tensor, "requires_grad", False) and not tensor.is_leaf else "")
        log.warning(
                "triton_dist_tune: %s the tuned function changed its argument '%s' in place; the tuner restores "
                "it before every tuning run and before the final call, so that the call's result is that of "
                "one call (declare it with restore_value=['%s'] to say so, or reset_to_zero=['%s'] for an "
                "accumulating output).%s", self.label, name, *[name.split("[", 1)[0].split(".", 1)[0]] * 2, history)

    def after_run(self) -> None:
        """Check the watched arguments when the run that made the check due (a config's first) has just ended. At
        the start of the next run instead, the check (a compare and a synchronize) fell inside that run's timing: a
        config's warm-up probe then began on an idle device, and on one H200 an 840-config GEMM's probes read
        1.52-1.60 times their configs' device time in one call (1.19-1.22 in three) at M = 4096 where the same probes
        timed alone read 1.02, so the probe screening stood in its best config there in 13 of 15 tunings (after:
        1.11 and 1.04; 0 of 3; ``benchmarks/results/session_h200_24``). Not while a CUDA graph is being captured
        (the next run checks)."""
        filled = self._filled
        try:
            if (self._check_due or self._filled) and not capturing():
                with breakdown.part("restore"):
                    if self._filled:
                        self._check_written()
                    if self._check_due:
                        self._detect()
                        self._side_checks()
        except Exception:  # the check's synchronize met an error the run left on the device (an asynchronous one:
            self._filled = filled  # a device-side assert from the fill): the run's, as if it raised
            raise
        self._warmup = False

    def before_run(self, exact: bool = False, warmup: bool = False) -> None:
        """Put ``restore_value`` tensors and changed arguments back and zero ``reset_to_zero`` tensors (before
        every measured run); ``exact``: the run's result counts (checked against ``ref_prog``), so the written
        arguments are put back too; ``warmup``: a plain warm-up run, which a fill of the written arguments may start
        (:meth:`config_starting`; never a timed one: a probe's, a sample's). The time is the tuning's ``restore``
        time when there is something to copy or check."""
        self._warmup = warmup and not exact
        self.raised_from_fill = False
        if self._check_due:  # after ref_prog, or a config's first run inside a capture (after_run skipped it)
            self._side_checks()
        if self.structures.changed or self.grads.active:  # what a run changed besides values (side_state)
            with breakdown.part("restore"):
                self.structures.put_back()
                if self.grads.active:
                    self.grads.put_back()
        busy = (self.saved or self.zero or self.changed or self._check_due
                or any(exact or name not in self.confirmed for name in self.written))
        watch = breakdown.current() if busy else None
        if watch is None:
            self._before_run(exact)
            return
        watch.enter("restore")
        try:
            self._before_run(exact)
        finally:
            watch.leave()

    def _side_checks(self) -> None:
        """What a run changed besides tensor values (:mod:`.side_state`): put back from the next run on."""
        self.structures.check()
        self.objects.check()
        self.grads.check()

    def _before_run(self, exact: bool) -> None:
        self._detect()
        written = [name for name in self.written if exact or name not in self.confirmed]
        if not (self.saved or self.zero or self.changed or written):
            return
        with _untracked():
            for tensor, copy in self.saved:
                if any(tensor is t for t in self.restore):
                    _copy_back(tensor, copy)
            for name in self.changed + written:
                tensor, copy, _ = self.watched[name]
                _copy_back(tensor, copy)
            self._zero()  # last: an argument put back that shares memory with one (a workspace) must not undo it

    def _zero(self) -> None:
        """Zero the ``reset_to_zero`` tensors (after every other copy into the arguments)."""
        for tensor in self.zero:
            tensor.zero_()

    def put_back(self) -> None:
        """Put every saved tensor back as it was before tuning (before the final call)."""
        with breakdown.part("restore"):
            self.structures.put_back(every=True)
            if self._filled and not capturing():
                self._check_written()
            self._detect()
            self.grads.put_back()
            if not (self.saved or self.changed or self.written):
                return
            with _untracked():
                for tensor, copy in self.saved:
                    _copy_back(tensor, copy)
                for name in self.changed + self.written:
                    tensor, copy, _ = self.watched[name]
                    _copy_back(tensor, copy)

    def changed_now(self) -> list[str]:
        """The watched arguments whose values differ from the caller's now (NaN equal to NaN)."""
        return [name for name, (tensor, copy, _) in self.watched.items() if not self._same(name, tensor, copy)]

    @property
    def outputs(self) -> list[Any]:
        """The tensors a run writes in place, compared against the reference by ``ref_prog`` checks."""
        return [tensor for _, tensor in self.declared.values()]

    @property
    def output_names(self) -> list[str]:
        """What names each of :attr:`outputs`, in its order (``argument x (restore_value)``)."""
        return [name for name, _ in self.declared.values()]


def tensors_in(name: str, value: Any, depth: int = 0, modules: bool = True) -> list[tuple[str, Any]]:
    """The tensors of an argument, by path (``x``, ``xs[0]``, ``d['k'][1]``): the argument itself, or the
    tensors inside its lists, tuples and dicts (nested up to :data:`MAX_DEPTH` levels), and with ``modules`` an
    ``nn.Module``'s parameters and buffers (``model.layer.weight``)."""
    if is_tensor(value):
        return [(name, value)]
    if is_module(value):
        return module_tensors(name, value) if modules else []
    if depth >= MAX_DEPTH:
        return []
    if isinstance(value, (list, tuple)):
        items: Iterable[tuple[str, Any]] = ((f"{name}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, Mapping):
        items = ((f"{name}[{k!r}]", v) for k, v in value.items())
    else:
        return []
    return [found for path, v in items for found in tensors_in(path, v, depth + 1, modules)]


def _declared(named: Mapping[str, Any], names: Iterable[str], option: str) -> list[tuple[str, Any]]:
    """The tensors of the arguments ``names`` by path (a list, tuple or dict argument gives each tensor in it,
    ``xs[0]``); an argument given with no tensor in it is refused rather than ignored."""
    out = []
    for name in names:
        value = named.get(name)
        found = tensors_in(name, value)
        if value is not None and not found:
            raise BadInputError(f"{option} names '{name}', a {type(value).__name__} with no tensor the tuner can "
                                f"save (it saves tensors, and the tensors inside lists, tuples and dicts): drop it "
                                f"from {option}, or pass its tensors as arguments")
        out += found
    return out


def _untracked() -> Any:
    """``torch.no_grad()``: the tuner's copies into the arguments are no step of the caller's autograd graph, and
    a leaf that requires grad (an ``nn.Parameter`` a fused optimizer step updates in place) refuses an in-place
    copy outside it."""
    import torch

    return torch.no_grad()


def fill_raised_before(journaled: list[dict[str, Any]]) -> bool:
    """Whether a rank's journal records (``journaled``) hold a run that raised from the NaN fill (``fill``: true)."""
    return any(record.get("fill") is True for record in journaled)


def _fillable(tensor: Any) -> bool:
    """Whether a changed argument can be checked for being written whole (else restored before every run): a float
    tensor (not float8) with elements, not a non-leaf requiring grad (its history keeps each run's write: said now)."""
    import torch

    floats = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    return tensor.dtype in floats and tensor.numel() > 0 and (tensor.is_leaf or not tensor.requires_grad)


def _comparable(tensor: Any) -> bool:
    """Whether a tensor's values can be saved and compared (a strided tensor with memory: not a sparse one, nor one
    on the meta device, which an argument check cannot compare: left unwatched)."""
    import torch

    return getattr(tensor, "layout", None) == torch.strided and not getattr(tensor, "is_meta", False) \
        and not getattr(tensor, "is_quantized", False)


def _copy_back(tensor: Any, copy: Any) -> None:
    """Put ``copy``'s values back into ``tensor``, resized back first where a run resized it (``resize_``)."""
    if tensor.shape != copy.shape:
        tensor.resize_(copy.shape)
    tensor.copy_(copy)


def _same(tensor: Any, copy: Any) -> bool:
    """Whether ``tensor`` still holds ``copy``'s values (NaN equal to NaN: unwritten buffers are often NaN); one of
    another shape (``resize_``) does not."""
    import torch

    if tensor.shape != copy.shape:
        return False
    if torch.equal(tensor, copy):
        return True
    if tensor.is_floating_point() or tensor.is_complex():
        both_nan = torch.isnan(tensor) & torch.isnan(copy)
        return bool(((tensor == copy) | both_nan).all())
    return False
