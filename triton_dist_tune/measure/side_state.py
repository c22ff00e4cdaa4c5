"""What a tuning run leaves in the caller's arguments besides tensor values (:mod:`.arguments` keeps those).

* **Gradients.** An argument tensor that requires grad (inside lists, dicts and ``nn.Module`` arguments too) has
  its ``.grad`` saved (None, or a copy) and put back before every run and before the final call
  (:class:`Grads`): a fused forward and backward accumulates one call's gradient, not every run's.
* **Autograd history.** A tensor argument that requires grad and is no leaf (an activation ``h = w * 2``) is never
  given to the tuning runs: they get a stand-in (:func:`stand_ins`), a tensor of its own memory whose history
  starts at a leaf of the tuner's; only the final call records history on the caller's tensor. A run that changed
  the stand-in's history has it started afresh from the caller's values before the next run.
* **Structure.** A list or dict argument (nested ones too) has its items saved (their order and identities): one a
  run rebinds, appends to or deletes from is put back in place before every run and before the final call
  (``lst[:] = saved``, ``d.clear(); d.update(saved)``), with a warning naming it unless it is named in
  ``restore_value`` (:class:`Structures`).
* **Attributes.** An object argument (``self`` of a tuned method, an ``nn.Module``) has its attributes holding
  numbers, strings, None or tensors saved: one a run rebinds (``self.pos += 1``, ``self.kv = torch.cat(...)``) is
  put back before every run and before the final call, with a warning naming it (:class:`Attributes`). Other
  object state (a list held in an attribute changed in place, an attribute a run adds) is not restored. (An
  ``nn.Module``'s parameters and buffers are tensors of the argument: :func:`~.arguments.tensors_in`.)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

log = logging.getLogger("triton_dist_tune")

#: how deep the containers of an argument are followed
MAX_DEPTH = 8
#: the values of an attribute that :class:`Attributes` saves (by identity: a run that rebinds it is seen)
_PLAIN = (int, float, bool, str, bytes, complex, type(None))


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
    """The ``.grad`` of every argument tensor that requires grad and is a leaf, saved; put back by :meth:`put_back`."""

    def __init__(self, tensors: list[Any]) -> None:
        self.saved = [(t, None if t.grad is None else t.grad.detach().clone())
                      for t in {id(t): t for t in tensors if t.requires_grad and t.is_leaf}.values()]

    def put_back(self) -> None:
        import torch

        with torch.no_grad():
            for tensor, grad in self.saved:
                if grad is None:
                    tensor.grad = None
                elif tensor.grad is not None and tensor.grad.shape == grad.shape and tensor.grad is not grad:
                    tensor.grad.copy_(grad)
                else:
                    tensor.grad = grad.clone()


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
                items = list(container.items()) if isinstance(container, dict) else list(container)
                self.saved.append((path, container, items))
        #: the paths warned of (those of arguments named in ``restore_value`` are put back without a warning)
        self.warned = {path for path, _, _ in self.saved if path.split("[", 1)[0] in set(declared)}

    def put_back(self) -> None:
        """Put every container that differs from its saved items back in place, warning once for each."""
        for path, container, items in self.saved:
            now = list(container.items()) if isinstance(container, dict) else list(container)
            if len(now) == len(items) and all(a is b or (isinstance(a, tuple) and _same_items(a, b))
                                              for a, b in zip(now, items, strict=True)):
                continue
            if isinstance(container, dict):
                container.clear()
                container.update(items)
            else:
                container[:] = items
            if path not in self.warned:
                self.warned.add(path)
                log.warning("triton_dist_tune: %s the tuned function changed the items of its argument '%s' (it "
                            "rebinds, adds or deletes them); the tuner puts them back before every tuning run and "
                            "before the final call, so that the call's result is that of one call", self.label, path)


def _same_items(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class Attributes:
    """The attributes of object arguments that hold plain values or tensors, saved by identity (see the module's
    docstring)."""

    def __init__(self, named: Mapping[str, Any], label: str) -> None:
        self.label = label
        self.saved: list[tuple[str, Any, dict[str, Any]]] = []
        seen: set[int] = set()
        for name, value in sorted(named.items()):
            if is_tensor(value) or isinstance(value, (list, tuple, dict, type) + _PLAIN) or id(value) in seen:
                continue
            try:
                attributes = vars(value)
            except TypeError:  # no __dict__ (slots, a builtin)
                continue
            seen.add(id(value))
            kept = {k: v for k, v in attributes.items() if isinstance(v, _PLAIN) or is_tensor(v)}
            if kept:
                self.saved.append((name, value, kept))
        self.warned: set[str] = set()

    def put_back(self) -> None:
        """Put every saved attribute a run rebound back, warning once for each."""
        for name, obj, kept in self.saved:
            attributes = vars(obj)
            for attribute, value in kept.items():
                if attributes.get(attribute, _MISSING) is value:
                    continue
                try:
                    setattr(obj, attribute, value)
                except Exception:  # a property refusing it, a module refusing a plain tensor for a parameter:
                    attributes[attribute] = value  # put back where it was read from
                where = f"{name}.{attribute}"
                if where not in self.warned:
                    self.warned.add(where)
                    log.warning("triton_dist_tune: %s the tuned function rebound the attribute '%s' of its argument "
                                "'%s'; the tuner puts it back before every tuning run and before the final call "
                                "(other object state, such as an attribute added or a list in an attribute changed "
                                "in place, is not restored)", self.label, attribute, name)


_MISSING = object()


class StandIns:
    """Tensors that require grad and are no leaves, each replaced by a stand-in in the tuning runs (see the module's
    docstring): ``pairs`` holds (the caller's tensor, its stand-in, the leaf the stand-in's history starts at)."""

    def __init__(self) -> None:
        self.pairs: list[tuple[Any, Any, Any]] = []
        self._fresh: list[Any] = []

    def stand_in(self, tensor: Any) -> Any:
        for caller, stand, _ in self.pairs:
            if caller is tensor:
                return stand
        leaf = tensor.detach().requires_grad_(True)  # the caller's memory, a history of its own
        stand = leaf.clone()  # memory of its own, no leaf: the function may change it in place, as the caller's
        self.pairs.append((tensor, stand, leaf))
        self._fresh.append(stand.grad_fn)
        return stand

    def start_afresh(self) -> None:
        """Start the history of every stand-in a run changed it of (in place) again at its leaf, with the caller's
        values."""
        import torch

        for i, (_, stand, leaf) in enumerate(self.pairs):
            if stand.grad_fn is not self._fresh[i]:
                stand.detach_()
                with torch.enable_grad():
                    stand.copy_(leaf)
                self._fresh[i] = stand.grad_fn


def stand_ins(fn_args: tuple, kwargs: Mapping[str, Any]) -> tuple[tuple, dict[str, Any], StandIns]:
    """The arguments of the tuning runs: the caller's, with every tensor that requires grad and is no leaf (inside
    lists, tuples and dicts too, whose containers are then new ones) replaced by a stand-in."""
    made = StandIns()

    def swap(value: Any, depth: int = 0) -> Any:
        if is_tensor(value):
            if getattr(value, "requires_grad", False) and not value.is_leaf:
                return made.stand_in(value)
            return value
        if depth >= MAX_DEPTH:
            return value
        if type(value) in (list, tuple):
            items = [swap(v, depth + 1) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)
        if type(value) is dict:
            items = {k: swap(v, depth + 1) for k, v in value.items()}
            return value if all(items[k] is v for k, v in value.items()) else items
        return value

    args = tuple(swap(a) for a in fn_args)
    kw = {k: swap(v) for k, v in kwargs.items()}
    return args, kw, made


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
