"""Every environment variable the tuner reads, read in one place.

:func:`current` returns a :class:`Settings` read from the environment at the moment of the call (the tuner calls
it at most once per tuning, never on the hot path, so that a test or a launcher may change a variable between
tunings). To add a variable: add a field to :class:`Settings` with its documented default, parse it in
:meth:`Settings.from_env` (raising :class:`~triton_dist_tune.errors.BadInputError` for a malformed value), and read
it through ``settings.current().<field>``; document it in README's table of variables.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInputError

DEFAULT_TIMEOUT_S = 300.0
PREFIX = "TRITON_DIST_AUTOTUNE_"


def flag(value: str | None) -> bool:
    """Whether a variable's text means true (anything but empty, 0, false, no, off)."""
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to a true value now."""
    return flag(os.environ.get(name))


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name, "")
    try:
        seconds = float(value) if value else default
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise BadInputError(f"{name} must be a positive number of seconds, not {value!r}")
    return seconds


def _int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


@dataclass(frozen=True)
class Settings:
    """The tuner's view of the environment."""

    #: seconds a rank waits for the others at one step, and the watchdog's limit (``..._TIMEOUT``, default 300)
    timeout: float = DEFAULT_TIMEOUT_S
    #: root folder of the decision caches and crash journals (``..._CACHE_DIR``, default ~/.triton_dist/autotune)
    cache_dir: Path = Path.home() / ".triton_dist" / "autotune"
    #: ignore cached decisions and earlier attempts' journals (``..._ALWAYS_TUNE=1``)
    always_tune: bool = False
    #: re-tune when a cached decision was made under other software versions (``..._VERSION_CHECK=1``)
    version_check: bool = False
    #: seconds between the progress lines of a rank waiting for the others (``..._PROGRESS_S``, default 30)
    progress_s: float = 30.0
    #: torchrun's restart count (``TORCHELASTIC_RESTART_COUNT``), part of the control channel's key prefix
    restart_count: str = "0"
    #: the job's identity written into journals: ``..._JOB_ID``, else torchrun's ``TORCHELASTIC_RUN_ID``, else
    #: Slurm's ``SLURM_JOB_ID``; None when none is set
    job_id: str | None = None
    #: the launcher's world size (``WORLD_SIZE`` / Open MPI's / PMI's); None outside a launcher
    world_size: int | None = None
    #: the timing mode of every tuned function of the job (``..._TIMING``: steady or cold); None: each decorator's
    timing: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Parse ``env`` (default ``os.environ``); raises BadInputError for a malformed value."""
        env = os.environ if env is None else env
        cache_dir = env.get(PREFIX + "CACHE_DIR")
        job = env.get(PREFIX + "JOB_ID") or env.get("TORCHELASTIC_RUN_ID") or env.get("SLURM_JOB_ID") or None
        return cls(
            timeout=_seconds(env, PREFIX + "TIMEOUT", DEFAULT_TIMEOUT_S),
            cache_dir=Path(cache_dir) if cache_dir else cls.cache_dir,
            always_tune=flag(env.get(PREFIX + "ALWAYS_TUNE")),
            version_check=flag(env.get(PREFIX + "VERSION_CHECK")),
            progress_s=_seconds(env, PREFIX + "PROGRESS_S", 30.0),
            restart_count=env.get("TORCHELASTIC_RESTART_COUNT", "0") or "0",
            job_id=job,
            world_size=_int(env, ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")),
            timing=_timing(env.get(PREFIX + "TIMING", "")),
        )


def _timing(value: str) -> str | None:
    mode = value.strip().lower()
    if mode and mode not in ("steady", "cold"):
        raise BadInputError(f"{PREFIX}TIMING must be steady or cold, not {value!r}")
    return mode or None


def current() -> Settings:
    """The settings as the environment says now."""
    return Settings.from_env()
