"""``ref_prog``'s result, and whether a config's first run matches it.

The verdict is ``torch.testing.assert_close``'s (``check_device=False``): the same shapes and dtypes, and every
element within ``atol + rtol * |expected|`` (NaN never matches), with torch's tolerances for the dtype where the user
gave none. Plain tensors (strided, not quantized, not a subclass, of the usual dtypes), ``None`` and lists, tuples
and dicts of them are compared here; anything else goes to ``assert_close`` itself.

Why not always ``assert_close``: on torch 2.13 its first call imports DTensor, sympy and mpmath (520 modules; 1.5 s
of a process on the 2-core CI machine, more under load), which every process with a ``ref_prog`` paid before its
first tuning, and which took 14% of the CPU of the suite's multi-rank example tests. torch 2.11 (the GPU hosts')
imports none of them there: its first check took 0.06-0.12 s on one H200 host, this module's 0.06-0.08 s
(``benchmarks/ref_check_cost.py``, ``results/session_h200_32``).
"""

from __future__ import annotations

from typing import Any

from .side_state import is_tensor

#: torch.testing's default (rtol, atol) per dtype (by name) of those compared here; the others compared here
#: (integers, bool) compare exactly
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7),
}


class Reference:
    """The reference result of ``ref_prog``, against which each config's first run is checked."""

    def __init__(self, value: Any, rtol: float | None, atol: float | None, equal_nan: bool = False,
                 parts: tuple[str, ...] | None = None) -> None:
        self.value = _detach_copy(value)
        self.rtol, self.atol, self.equal_nan = rtol, atol, equal_nan
        #: what each item of a tuple ``value`` is (``the result``, ``argument x (restore_value)``): the verdict
        #: names the item that differs by it, not by its position in the tuple the tuner compares
        self.parts = parts
        # a comparison that falls back to torch.testing pays its first use's imports here, before any config's
        # deadline, not in the first config's checked run
        self.mismatch(self.value)

    def mismatch(self, value: Any) -> str | None:
        """None when ``value`` matches the reference, else what differs (``wrong result: ...``)."""
        parts = self.parts
        if parts is not None and isinstance(value, tuple) and isinstance(self.value, tuple) \
                and len(value) == len(self.value) == len(parts):
            for part, item, expected in zip(parts, value, self.value, strict=True):
                if (problem := self._verdict(item, expected, part)) is not None:
                    return problem
            return None
        return self._verdict(value, self.value)

    def mismatch_of(self, value: dict[str, Any]) -> str | None:
        """As :meth:`mismatch`, for the entries of a dict reference that ``value`` names (the rest not compared)."""
        return self._verdict(value, {name: self.value[name] for name in value})

    def _verdict(self, value: Any, expected: Any, where: str = "the result") -> str | None:
        try:
            problem = difference(value, expected, self.rtol, self.atol, where, self.equal_nan)
        except (AssertionError, TypeError, ValueError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()
            problem = first[0] if first else type(exc).__name__
        return None if problem is None else "wrong result: " + problem


def difference(actual: Any, expected: Any, rtol: float | None, atol: float | None, where: str,
               equal_nan: bool = False) -> str | None:
    """What differs between ``actual`` and ``expected`` (``where`` names them), or None: ``assert_close``'s verdict
    (``equal_nan``: NaN matches NaN, for buffers whose unwritten parts may hold NaN alike)."""
    if actual is None and expected is None:
        return None
    if _category(actual) != _category(expected):  # a None, a tensor, a list, a dict against something else
        return f"{where}: {_kind(actual)}, the reference {_kind(expected)}"
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            return f"{where}: {len(actual)} items, the reference has {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            if (problem := difference(a, e, rtol, atol, f"{where}[{i}]", equal_nan)) is not None:
                return problem
        return None
    if isinstance(actual, dict) and isinstance(expected, dict):
        if set(actual) != set(expected):
            return f"{where}: keys {sorted(map(repr, actual))}, the reference has {sorted(map(repr, expected))}"
        for k in expected:
            if (problem := difference(actual[k], expected[k], rtol, atol, f"{where}[{k!r}]", equal_nan)) is not None:
                return problem
        return None
    if _plain(actual) and _plain(expected):
        return _tensor_difference(actual, expected, rtol, atol, where, equal_nan)
    return _torch_testing(actual, expected, rtol, atol, where, equal_nan)


def _category(value: Any) -> str:
    """What kind of value a comparison pairs with its own kind only: None, a tensor, a sequence, a mapping, else
    "other" (numbers and the like, which torch.testing compares among themselves)."""
    if value is None:
        return "None"
    if is_tensor(value):
        return "tensor"
    if isinstance(value, (list, tuple)):
        return "sequence"
    return "mapping" if isinstance(value, dict) else "other"


def _kind(value: Any) -> str:
    """``value`` in a few words: ``None``, ``a tensor of shape (100,) (torch.float32)``, ``a list of 2 items``."""
    category = _category(value)
    if category == "tensor":
        return f"a tensor of shape {tuple(value.shape)} ({value.dtype})"
    if category in ("sequence", "mapping"):
        return f"a {type(value).__name__} of {len(value)} {'items' if category == 'sequence' else 'keys'}"
    return "None" if value is None else f"a {type(value).__name__}"


#: the dtypes compared here; others (float8 types, which torch compares bit for bit, complex32, wide unsigned
#: integers) go to ``assert_close``
COMPARED_HERE = frozenset(DEFAULT_TOLERANCES) | {"int8", "int16", "int32", "int64", "uint8", "bool"}


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _plain(value: Any) -> bool:
    import torch

    return (type(value) is torch.Tensor and value.layout == torch.strided and not value.is_quantized
            and not value.is_nested and _name(value.dtype) in COMPARED_HERE)


def _tensor_difference(actual: Any, expected: Any, rtol: float | None, atol: float | None,
                       where: str, equal_nan: bool = False) -> str | None:
    import torch

    if actual.shape != expected.shape:
        return f"{where}: shape {tuple(actual.shape)}, the reference's {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"{where}: dtype {actual.dtype}, the reference's {expected.dtype}"
    if actual.device != expected.device:  # check_device=False: compared on the CPU
        actual, expected = actual.cpu(), expected.cpu()
    if rtol is None or atol is None:
        rtol, atol = DEFAULT_TOLERANCES.get(_name(expected.dtype), (0.0, 0.0))
    close = torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if bool(close.all()):
        return None
    wrong = int((~close).sum())
    if actual.dtype == torch.bool:
        return f"{where}: {wrong} of {close.numel()} elements differ"
    gap = (actual.double() - expected.double()).abs() if not actual.is_complex() else (actual - expected).abs()
    gap = torch.where(close, torch.zeros_like(gap), gap.nan_to_num(nan=float("inf")))
    worst = int(gap.flatten().argmax())
    index, rest = [], worst  # torch.unravel_index imports sympy
    for size in reversed(actual.shape):
        rest, i = divmod(rest, size)
        index.insert(0, i)
    got, want = actual.flatten()[worst].item(), expected.flatten()[worst].item()
    allowed = atol + rtol * abs(want)
    return (f"{where}: {wrong} of {close.numel()} elements differ; the worst at index {tuple(index)}: {got!r}, the "
            f"reference {want!r} (allowed {allowed:.3g})")


def _torch_testing(actual: Any, expected: Any, rtol: float | None, atol: float | None, where: str,
                   equal_nan: bool = False) -> str | None:
    import torch

    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, check_device=False, equal_nan=equal_nan)
    except (AssertionError, TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()
        return f"{where}: " + (first[0] if first else type(exc).__name__)
    return None


def _detach_copy(value: Any) -> Any:
    if hasattr(value, "detach") and hasattr(value, "clone"):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_detach_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _detach_copy(v) for k, v in value.items()}
    return value
