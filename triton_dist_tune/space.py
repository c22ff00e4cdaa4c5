"""Config spaces: validation, stable descriptions and fingerprints that every rank computes alike."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import BadInputError

CALL_KEYWORDS = frozenset({"autotune", "autotune_verbose", "autotune_pg", "autotune_replicas"})


def describe(value: Any) -> str:
    """A stable text for a config value: equal on every rank and in every process for equal configs.

    ``triton.Config`` objects are described by their kwargs and launch options (not by ``id``), dicts by their
    sorted items, callables by their qualified name.
    """
    if isinstance(value, Mapping):
        items = ", ".join(f"{k!s}: {describe(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
        return "{" + items + "}"
    if type(value).__name__ == "Config" and hasattr(value, "all_kwargs"):
        return f"Config({describe(value.all_kwargs())})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if callable(value):
        return f"<{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}>"
    return repr(value)


def fingerprint(text: str) -> str:
    """A short hex digest of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def validate_space(config_space: Any) -> list[dict[str, Any]]:
    """Check a config space and return it as a list of dicts (raises :class:`BadInputError`)."""
    if isinstance(config_space, (str, bytes, Mapping)) or not isinstance(config_space, Sequence):
        raise BadInputError(f"config_space must be a list of dicts, not {type(config_space).__name__}")
    if len(config_space) == 0:
        raise BadInputError("config_space is empty: give at least one config")
    space = []
    for i, config in enumerate(config_space):
        if not isinstance(config, Mapping):
            raise BadInputError(f"config_space[{i}] must be a dict of keyword arguments, not {type(config).__name__}")
        clash = CALL_KEYWORDS.intersection(config)
        if clash:
            raise BadInputError(f"config_space[{i}] uses the tuner's call keywords {sorted(clash)}")
        bad = [k for k in config if not isinstance(k, str)]
        if bad:
            raise BadInputError(f"config_space[{i}] has keys that are not keyword names: {bad}")
        space.append(dict(config))
    return space


def check_no_clash(config: Mapping[str, Any], kwargs: Mapping[str, Any]) -> None:
    """Raise :class:`BadInputError` when a config would overwrite a keyword argument of the call."""
    clash = set(config).intersection(kwargs)
    if clash:
        raise BadInputError(
            f"config keys {sorted(clash)} clash with keyword arguments of the call: "
            "a tuned parameter must not also be passed by the caller"
        )
