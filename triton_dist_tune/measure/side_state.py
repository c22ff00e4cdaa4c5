"""What a tuning run leaves in the caller's arguments besides tensor values (:mod:`.arguments` keeps those).

Each is found where :mod:`.arguments` checks the tensor values (after a config's first run): nothing is done per
run for arguments no run changed, as a run can take 20 microseconds on a GPU.

* **Gradients.** The ``.grad`` of every tensor argument that requires grad (inside lists and dicts too; a module's
  parameters where the module is named in ``restore_value``) is saved (None, or a copy where one is held) and put
  back before the final call, and before every run once a config's first run changed one (:class:`Grads`): a fused
  forward and backward leaves one call's gradient, not every run's.
* **Structure.** A list or dict argument (nested ones too) has its items saved (their order and identities): one a
  run rebinds, appends to or deletes from is found when checked (after a config's first run, or ``ref_prog``), and
  put back before every later run and the final call (``lst[:] = saved``, ``d.clear(); d.update(saved)``), with a
  warning naming it unless it is named in ``restore_value`` (:class:`Structures`).
* **Objects.** An object argument (``self`` of a tuned method, an ``nn.Module``) is not restored: a run that rebinds
  one of its attributes holding a number, a string, None or a tensor (``self.pos += 1``, a lazily made workspace),
  or changes a module's parameters or buffers in place, is said in a warning, once per process and function
  (:class:`Objects`; a module's tensors by their version counters: a kernel's write that moves none, a Triton or
  NCCL one, is not seen, nor is a module inside a list or dict argument). Putting such state back would break the
  counters distributed kernels keep beside flags in device memory (``self.signal_target += 1``), and a module's
  tensors are a model's weights: saved only where the module is named in ``restore_value``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

log = logging.getLogger("triton_dist_tune")

#: how deep the containers of an argument are followed (here and by :func:`~.arguments.tensors_in`)
MAX_DEPTH = 8
#: the values of an attribute that :class:`Objects` watches (by identity: a run that rebinds it is seen)
_PLAIN = (int, float, bool, str, bytes, complex, type(None))
#: (the tuned function, the object's type, the argument, the attribute or "tensors") already warned of in this process
_WARNED: set[tuple[str, str, str, str]] = set()


def is_tensor(value: Any) -> bool:
    return hasattr(value, "copy_") and hasattr(value, "clone")


def is_module(value: Any) -> bool:
    """Whether ``value`` is a ``torch.nn.Module`` (its parameters and buffers count as its tensors)."""
    return callable(getattr(value, "named_parameters", None)) and callable(getattr(value, "named_buffers", None))


def module_tensors(name: str, module: Any) -> list[tuple[str, Any]]:
    """A module's parameters and buffers by path (``model.layer.weight``), each once."""
    seen: set[int] = set()
    out = []
    for kind in (module.named_parameters, module.named_buffers):
        for path, tensor in kind():
            if tensor is not None and id(tensor) not in seen:
                seen.add(id(tensor))
                out.append((f"{name}.{path}", tensor))
    return out


def walk(name: str, value: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Every container (list, tuple, dict) inside an argument with its path, the argument first."""
    if depth > MAX_DEPTH or is_tensor(value):
        return
    if isinstance(value, (list, tuple)):
        yield name, value
        for i, v in enumerate(value):
            yield from walk(f"{name}[{i}]", v, depth + 1)
    elif isinstance(value, dict):
        yield name, value
        for k, v in value.items():
            yield from walk(f"{name}[{k!r}]", v, depth + 1)


class Grads:
    """The ``.grad`` of tensors that require grad and are leaves, saved: put back before the final call, and before
    every run once a config's first run changed one (:meth:`check`: a backward inside the function), so that the
    runs' gradients do not grow without bound (an ``all_reduce(w.grad)`` doubles them each run)."""

    def __init__(self, tensors: list[Any]) -> None:
        #: (tensor, its .grad object, that object's version, a copy of it), None for a tensor without one
        self.saved = [(t, t.grad, version_of(t.grad), None if t.grad is None else t.grad.detach().clone())
                      for t in {id(t): t for t in tensors if t.requires_grad and t.is_leaf}.values()]
        #: whether some run changed a gradient: put back before every run from then on
        self.active = False

    def check(self) -> None:
        """After a config's first run (or ``ref_prog``): whether it changed a gradient: rebound it, or wrote it in
        place (a version counter moved, or, for a kernel's write that moves none, the values differ)."""
        self.active = self.active or any(t.grad is not grad or version_of(t.grad) != version
                                         or (copy is not None and not _equal(t.grad, copy))
                                         for t, grad, version, copy in self.saved)

    def put_back(self) -> None:
        import torch

        with torch.no_grad():
            for tensor, _, _, grad in self.saved:
                if grad is None:
                    tensor.grad = None
                elif tensor.grad is not None and tensor.grad.shape == grad.shape and tensor.grad is not grad:
                    tensor.grad.copy_(grad)
                else:
                    tensor.grad = grad.clone()


def version_of(tensor: Any) -> int:
    """A tensor's in-place version counter (-1 for None: a gradient not there)."""
    return -1 if tensor is None else int(getattr(tensor, "_version", 0))


def _equal(a: Any, b: Any) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.equal(a, b))


def _items(container: Any) -> list[Any]:
    return list(container.items()) if isinstance(container, dict) else list(container)


def _same_items(now: list[Any], saved: list[Any]) -> bool:
    return len(now) == len(saved) and all(a is b or (isinstance(a, tuple) and len(a) == len(b)
                                                     and all(x is y for x, y in zip(a, b, strict=True)))
                                          for a, b in zip(now, saved, strict=True))


class Structures:
    """The items of every list and dict inside the arguments (see the module's docstring)."""

    def __init__(self, named: Mapping[str, Any], label: str, declared: Iterable[str] = ()) -> None:
        self.label = label
        self.saved: list[tuple[str, Any, Any]] = []
        seen: set[int] = set()
        for name, value in sorted(named.items()):
            for path, container in walk(name, value):
                if id(container) in seen or isinstance(container, tuple):
                    continue
                seen.add(id(container))
                self.saved.append((path, container, _items(container)))
        #: the containers found changed: put back before every run from then on
        self.changed: list[tuple[str, Any, Any]] = []
        self._quiet = set(declared)  # arguments named in restore_value: put back without a warning

    def check(self) -> None:
        """After a config's first run (or ``ref_prog``): find the containers a run changed, to put back before every
        later run (not now: the run's result, which may be such a container, is compared first), and say so once
        each."""
        for entry in self.saved:
            path, container, items = entry
            if any(entry is e for e in self.changed) or _same_items(_items(container), items):
                continue
            self.changed.append(entry)
            if path.split("[", 1)[0] not in self._quiet:
                log.warning("triton_dist_tune: %s the tuned function changed the items of its argument '%s' (it "
                            "rebinds, adds or deletes them); the tuner puts them back before every tuning run and "
                            "before the final call, so that the call's result is that of one call", self.label, path)

    def put_back(self, every: bool = False) -> None:
        """Put the changed containers back (``every``: each container that differs, before the final call)."""
        for _, container, items in self.saved if every else self.changed:
            if not _same_items(_items(container), items):
                _put(container, items)


def _put(container: Any, items: list[Any]) -> None:
    if isinstance(container, dict):
        container.clear()
        container.update(items)
    else:
        container[:] = items


class Objects:
    """The object arguments' attributes holding plain values or tensors (by identity), and the versions of a module
    argument's tensors, to say when a run changed them (see the module's docstring): nothing is put back."""

    def __init__(self, named: Mapping[str, Any], label: str, declared: Iterable[str] = ()) -> None:
        self.label = label
        self.saved: list[tuple[str, Any, dict[str, Any], list[tuple[str, Any, int]]]] = []
        for name, value in sorted(named.items()):
            if is_tensor(value) or isinstance(value, (list, tuple, dict, type) + _PLAIN) or name in set(declared):
                continue
            try:
                attributes = vars(value)
            except TypeError:  # no __dict__ (slots, a builtin)
                continue
            kept = {k: v for k, v in attributes.items() if isinstance(v, _PLAIN) or is_tensor(v)}
            tensors = [(path, t, version_of(t)) for path, t in module_tensors(name, value)] \
                if is_module(value) else []
            if kept or tensors:
                self.saved.append((name, value, kept, tensors))

    def check(self) -> None:
        """After a config's first run: say (once per process) which attributes a run rebound, and which module
        tensors it changed in place."""
        function = self.label.split(" key=", 1)[0]
        for name, obj, kept, tensors in self.saved:
            kind = (function, type(obj).__qualname__)
            attributes = vars(obj)
            for attribute, value in kept.items():
                if attributes.get(attribute, _MISSING) is not value and (*kind, name, attribute) not in _WARNED:
                    _WARNED.add((*kind, name, attribute))
                    log.warning("triton_dist_tune: %s the tuned function rebinds the attribute '%s' of its argument "
                                "'%s' (%s): the tuner does not put object state back, so it changes with every "
                                "tuning run (a counter counts each run)", self.label, attribute, name,
                                type(obj).__name__)
            moved = [path for path, t, version in tensors if version_of(t) != version]
            if moved and (*kind, name, "tensors") not in _WARNED:
                _WARNED.add((*kind, name, "tensors"))
                log.warning("triton_dist_tune: %s the tuned function changes tensors of its module argument '%s' in "
                            "place (%s): the tuner does not save a module's tensors (its weights) unless the "
                            "module is named in restore_value, so they change with every tuning run", self.label,
                            name, ", ".join(moved[:3]) + (", ..." if len(moved) > 3 else ""))


_MISSING = object()


class RandomState:
    """Torch's random-number generators as they were before tuning (the CPU one, and the current GPU's when there is
    one), put back before the final call: a function that draws random numbers (dropout) then returns what one
    untuned call with the chosen config returns, and every later draw of the program is the one it would have
    been, on every rank however many runs each measured (sharded too)."""

    def __init__(self) -> None:
        import torch

        self.cpu = torch.random.get_rng_state()
        self.device: tuple[int, Any] | None = None
        if torch.cuda.is_available():
            index = torch.cuda.current_device()
            self.device = (index, torch.cuda.get_rng_state(index))

    def put_back(self) -> None:
        """Put the saved generator states back."""
        import torch

        torch.random.set_rng_state(self.cpu)
        if self.device is not None:
            torch.cuda.set_rng_state(self.device[1], self.device[0])
