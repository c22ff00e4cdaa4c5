"""Every environment variable the tuner reads, read in one place.

:func:`current` returns a :class:`Settings` read from the environment at the moment of the call (the tuner calls
it at most once per tuning, never on the hot path, so that a test or a launcher may change a variable between
tunings). To add a variable: add a field to :class:`Settings` with its documented default, parse it in
:meth:`Settings.from_env` (raising :class:`~triton_dist_tune.errors.BadInputError` for a malformed value), and read
it through ``settings.current().<field>``; document it in docs/operations.md's table of variables.

A malformed variable set on some ranks only must not leave the others waiting at the first exchange for a rank
that raised alone: the tuner reads :func:`problem` when a call would tune or serve an undecided key, and a rank
that has one goes on :func:`overlooking` it (each malformed variable read as its default) up to that exchange,
which carries the problem, so that every rank raises the same ``BadInputError`` at once.

What the launcher (torchrun, mpiexec, Slurm) tells a process is a :class:`Launcher`, read by :func:`launcher`. It
is apart from :class:`Settings` because it is read where a malformed tuner variable must not stop anything:
before any tuning (:func:`~triton_dist_tune.group.dist.init_distributed`), in the logs, and in the watchdog as it
ends a hung rank. Reading it never raises.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .errors import BadInputError, triton_flag

DEFAULT_TIMEOUT_S = 300.0
#: the most seconds any duration setting or option may hold (about 11.6 days): every clock the tuner arms must hold
#: it with room to spare. A deadline becomes ``faulthandler.dump_traceback_later(T + 6)`` (which overflows past
#: ~9.2e9 s on Linux, ``threading.TIMEOUT_MAX``), and the waits of a round or a campaign are T times the configs
#: in them: 1e6 keeps 9,000 configs' worth of a round under that limit
MAX_SECONDS = 1e6
#: the least timeout a tuning takes (option or variable): a store wait or an exchange on a loaded machine takes
#: hundreds of ms, so a shorter one ends ranks that are not hung (at 0.05 s on 2 CPU ranks one rank raised a group
#: timeout while the other decided and then failed in gloo)
MIN_TIMEOUT_S = 1.0
PREFIX = "TRITON_DIST_AUTOTUNE_"
T = TypeVar("T")

#: launcher variables of a process's rank in the whole job (the first one set wins)
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
#: launcher variables of the number of ranks in the whole job
SIZE_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
#: launcher variables of a process's rank on its node
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
#: launcher variables that name one job on every rank of it (the first one set wins)
JOB_VARIABLES = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")
#: what a call does with a key not decided yet (``autotune(undecided=...)``, ``..._UNDECIDED``)
UNDECIDED_POLICIES = ("tune", "nearest", "first")
#: ``search=``: search spaces of more than 64 kept configs (auto), always, or race every config (exhaustive)
SEARCH_MODES = ("auto", "search", "exhaustive")


def flag(value: str | None) -> bool:
    """Whether a variable's text means true (anything but empty, 0, false, no, off)."""
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def _timeout(env: Mapping[str, str]) -> float:
    seconds = _seconds(env, PREFIX + "TIMEOUT", DEFAULT_TIMEOUT_S)
    if seconds < MIN_TIMEOUT_S:
        raise BadInputError(f"{PREFIX}TIMEOUT must be at least {MIN_TIMEOUT_S:g} s (a shorter one ends ranks that "
                            f"are only slow), not {env.get(PREFIX + 'TIMEOUT')!r}")
    return seconds


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name, "")
    try:
        seconds = float(value) if value else default
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise BadInputError(f"{name} must be a positive number of seconds, not {value!r}")
    if seconds > MAX_SECONDS:
        raise BadInputError(f"{name} must be at most {MAX_SECONDS:g} seconds (about 11.6 days: the watchdog's "
                            f"clocks must hold it), not {value!r}")
    return seconds


def init_timeout(default: float, env: Mapping[str, str] | None = None) -> float:
    """Seconds ``init_distributed`` waits for the job's ranks to join (``..._INIT_TIMEOUT``; unset or blank:
    ``default``, its ``timeout_s``); a :class:`~triton_dist_tune.errors.BadInputError` naming the variable for a
    malformed value. Read by ``init_distributed`` alone, at the job's start, so it is no field of :class:`Settings`
    (a malformed value would stop every tuning of a job that started long ago)."""
    return _seconds(os.environ if env is None else env, PREFIX + "INIT_TIMEOUT", default)


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise BadInputError(f"{name} must be a positive whole number, not {text!r}")
    return int(text)


def _int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """The first of the variables ``names`` set to a whole number (spaces around it as ``int()`` reads them, and
    torch with it); None when none is."""
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def _slurm_job(env: Mapping[str, str]) -> str | None:
    """Slurm's job as journals name it: ``SLURM_JOB_ID``, with ``.SLURM_STEP_ID`` where that is set (Slurm's own
    ``42.3``). Two ``srun`` steps of one allocation run at once as two jobs (each its own launch, its own ranks);
    named by the allocation alone, one step's ``ALWAYS_TUNE`` tuning resumed from the other's journal records and
    deleted them at its end, while the other step, killed inside a config, still needed them for its restart. A
    torchrun restart stays within its step; a step started again (a retry loop in a batch script) is a new job."""
    job = env.get("SLURM_JOB_ID", "").strip()
    step = env.get("SLURM_STEP_ID", "").strip()
    return f"{job}.{step}" if job and step else (job or None)


def _threads(env: Mapping[str, str]) -> int | None:
    value = env.get(PREFIX + "COMPILE_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None  # anything else: the default


def _processes(env: Mapping[str, str]) -> int | None:
    value = env.get(PREFIX + "COMPILE_PROCESSES", "").strip()
    return int(value) if value.isdigit() else None  # anything else: the default


def default_cache_dir() -> Path:
    """``~/.triton_dist/autotune`` of the home folder as ``HOME`` names it now (read at each use, not at import).
    Raises BadInputError, naming the variable to set, where this process has no home folder: ``HOME`` unset and its
    user id not in the password database (a container run as an arbitrary user), where ``Path.home()`` raises."""
    try:
        home = Path.home()
    except (RuntimeError, KeyError, OSError):
        raise BadInputError(f"{PREFIX}CACHE_DIR is unset and its default, ~/.triton_dist/autotune, names no folder: "
                            f"HOME is unset and user id {os.getuid()} has no entry in the password database; set "
                            f"{PREFIX}CACHE_DIR (or HOME)") from None
    return home / ".triton_dist" / "autotune"


#: the cache folder of a process with no home folder (:func:`default_cache_dir`) while it overlooks that (a rank
#: carrying the error into its group's first exchange of a tuning, which raises it on every rank before any cache
#: file is read or written): never created, nothing is found there
NO_HOME = Path("/nonexistent/triton-dist-tune-no-home")


def cache_folder(env: Mapping[str, str] | None = None) -> Path:
    """The cache folder ``env`` (default ``os.environ``) names: ``..._CACHE_DIR``, else :func:`default_cache_dir`
    (BadInputError where there is no home folder). Reads no other variable: the command line's folder does not
    depend on a malformed timeout."""
    value = (os.environ if env is None else env).get(PREFIX + "CACHE_DIR")
    return Path(value) if value else default_cache_dir()


@dataclass(frozen=True)
class Settings:
    """The tuner's view of the environment."""

    #: seconds a rank waits for the others at one step, and the watchdog's limit (``..._TIMEOUT``, default 300)
    timeout: float = DEFAULT_TIMEOUT_S
    #: root folder of the decision caches and crash journals (``..._CACHE_DIR``, default ~/.triton_dist/autotune)
    cache_dir: Path = field(default_factory=default_cache_dir)
    #: ignore cached decisions and earlier attempts' journals (``..._ALWAYS_TUNE=1``)
    always_tune: bool = False
    #: re-tune when a cached decision was made under other software versions (``..._VERSION_CHECK=1``)
    version_check: bool = False
    #: seconds between the progress lines of a rank waiting for the others (``..._PROGRESS_S``, default 30)
    progress_s: float = 30.0
    #: seconds without a beat after which a rank waiting for a rank of another host whose wrong-group note stands
    #: reads that rank's process as gone (``..._LOST_S``, default 30; see :mod:`~triton_dist_tune.group.beat`)
    lost_s: float = 30.0
    #: the job's identity written into journals: ``..._JOB_ID``, else torchrun's ``TORCHELASTIC_RUN_ID``, else
    #: Slurm's ``SLURM_JOB_ID`` with its ``SLURM_STEP_ID`` (``42.3``: each ``srun`` step of an allocation is a job
    #: of its own, :func:`_slurm_job`), else the name ``init_distributed`` kept in the job's store
    #: (:func:`name_job`); None when there is none
    job_id: str | None = None
    #: the launcher's world size (``WORLD_SIZE`` / Open MPI's / PMI's); None outside a launcher
    world_size: int | None = None
    #: the timing mode of every tuned function of the job (``..._TIMING``: steady or cold); None: each decorator's
    timing: str | None = None
    #: the most runs of one contextual call (``..._MAX_RUNS``, default 1000)
    max_runs: int = 1000
    #: calls between a contextual group's agreements on pending keys (``..._SYNC_EVERY``, default 64)
    sync_every: int = 64
    #: Triton's interpreter runs the kernels (``TRITON_INTERPRET=1``, read as Triton reads it: 1, true, on, yes or y,
    #: in any case; anything else is off there, so here too): nothing is compiled
    interpret: bool = False
    #: the per-rank log folder (``..._LOG_DIR``, default ``.autotune_logs`` in the job's working directory)
    log_dir: Path = Path(".autotune_logs")
    #: seconds a rank that met a key its group has not decided, in a call that does not tune, waits at the end of
    #: the call for the others to meet it too (then the call tunes it) (``..._NEW_KEY_GRACE``, default 0.5)
    new_key_grace: float = 0.5
    #: threads that compile configs (``..._COMPILE_THREADS``, a whole number >= 1); None (unset or not such a
    #: number): min(16, CPU count)
    compile_threads: int | None = None
    #: worker processes that compile for those threads (``..._COMPILE_PROCESSES``, a whole number; 0: none, the
    #: threads compile); None (unset or not such a number): min(16, CPUs / ranks of the group on the node) for keys
    #: of 128 configs or more, none for smaller ones
    compile_processes: int | None = None
    #: how those workers start (``..._COMPILE_START``: fork or spawn); None: forked where that is safe (see
    #: :func:`~triton_dist_tune.measure.compile_workers.fork_refusal`), else spawned
    compile_start: str | None = None
    #: a campaign unit of one rank compiles its next key's likely configs while it tunes the current one
    #: (``..._COMPILE_NEXT_KEY``, default 1; 0: not; see :mod:`~triton_dist_tune.function.next_key`)
    compile_next_key: bool = True
    #: print summaries on group rank 0 where a decorator's ``autotune_verbose`` is not given
    #: (``TRITON_PRINT_AUTOTUNING=1``, on as Triton reads it: :func:`~triton_dist_tune.errors.triton_flag`)
    print_autotuning: bool = False
    #: what every tuned function does with a key not decided yet (``..._UNDECIDED``: tune, nearest or first);
    #: None: each decorator's ``undecided`` (default tune)
    undecided: str | None = None
    #: whether large spaces are searched (``..._SEARCH``: auto, search or exhaustive); None: each decorator's
    #: ``search`` (default auto)
    search: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, lenient: bool = False) -> Settings:
        """Parse ``env`` (default ``os.environ``); raises BadInputError for a malformed value (``lenient``: reads
        it as its default instead)."""
        env = os.environ if env is None else env

        def parsed(parse: Callable[[], T], default: T) -> T:
            try:
                return parse()
            except BadInputError:
                if not lenient:
                    raise
                return default

        log_dir = env.get(PREFIX + "LOG_DIR")
        job = next((value for value in (env.get(PREFIX + "JOB_ID"), env.get("TORCHELASTIC_RUN_ID"), _slurm_job(env))
                    if value and value.lower() != "none"), _STORE_JOB[0])  # torchrun's is "none" unless named
        return cls(
            timeout=parsed(lambda: _timeout(env), cls.timeout),
            cache_dir=parsed(lambda: cache_folder(env), NO_HOME),
            always_tune=flag(env.get(PREFIX + "ALWAYS_TUNE")),
            version_check=flag(env.get(PREFIX + "VERSION_CHECK")),
            progress_s=parsed(lambda: _seconds(env, PREFIX + "PROGRESS_S", 30.0), cls.progress_s),
            lost_s=parsed(lambda: _seconds(env, PREFIX + "LOST_S", 30.0), cls.lost_s),
            job_id=job,
            world_size=_int(env, SIZE_VARIABLES),
            timing=parsed(lambda: _choice(env, PREFIX + "TIMING", ("steady", "cold")), cls.timing),
            max_runs=parsed(lambda: _count(env, PREFIX + "MAX_RUNS", 1000), cls.max_runs),
            sync_every=parsed(lambda: _count(env, PREFIX + "SYNC_EVERY", 64), cls.sync_every),
            interpret=triton_flag(env.get("TRITON_INTERPRET")),  # as Triton reads it: it runs the kernels
            log_dir=Path(log_dir) if log_dir else cls.log_dir,
            new_key_grace=parsed(lambda: _seconds(env, PREFIX + "NEW_KEY_GRACE", 0.5), cls.new_key_grace),
            compile_threads=_threads(env),
            compile_processes=_processes(env),
            compile_start=parsed(lambda: _choice(env, PREFIX + "COMPILE_START", ("fork", "spawn")), cls.compile_start),
            compile_next_key=flag(env.get(PREFIX + "COMPILE_NEXT_KEY", "1")),
            print_autotuning=triton_flag(env.get("TRITON_PRINT_AUTOTUNING")),  # Triton's switch, read as Triton does
            undecided=parsed(lambda: _choice(env, PREFIX + "UNDECIDED", UNDECIDED_POLICIES), cls.undecided),
            search=parsed(lambda: _choice(env, PREFIX + "SEARCH", SEARCH_MODES), cls.search),
        )


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str | None:
    """The variable ``name`` as one of ``choices``, any case; None where it is unset or blank."""
    value = env.get(name, "")
    chosen = value.strip().lower()
    if chosen and chosen not in choices:
        allowed = " or ".join(choices) if len(choices) == 2 else f"one of {', '.join(choices)}"
        raise BadInputError(f"{name} must be {allowed}, not {value!r}")
    return chosen or None


#: the job's name kept in its key-value store by ``init_distributed`` (:func:`name_job`), or None
_STORE_JOB: list[str | None] = [None]


def name_job(name: str) -> None:
    """Name the job ``name`` where the launcher names none (torchrun's run id is ``none`` without ``--standalone`` or
    ``--rdzv-id``): ``init_distributed`` keeps its first attempt's name in the store, which outlives the attempts,
    so that ``..._ALWAYS_TUNE`` still reads the records of the job's earlier attempts (a restart then leaves out a
    config that hung there, instead of running it again)."""
    _STORE_JOB[0] = f"store-{name}"


#: inside :func:`overlooking`: :func:`current` reads a malformed variable as its default
_OVERLOOKING: ContextVar[bool] = ContextVar("triton_dist_tune_overlooking", default=False)


def current() -> Settings:
    """The settings as the environment says now (raises BadInputError for a malformed value, except inside
    :func:`overlooking`); a variable of the tuner's prefix that it does not read is warned of (:func:`say_unknown`,
    scanning the environment only where its names changed since the last scan: :func:`_names_changed`)."""
    if _names_changed():
        say_unknown(os.environ)
    return Settings.from_env(lenient=_OVERLOOKING.get())


#: every variable of :data:`PREFIX` the tuner reads (docs/operations.md's table), without the prefix
KNOWN_VARIABLES = ("CACHE_DIR", "ALWAYS_TUNE", "VERSION_CHECK", "TIMEOUT", "INIT_TIMEOUT", "TIMING", "UNDECIDED",
                   "SEARCH", "LOG_DIR", "NEW_KEY_GRACE", "COMPILE_THREADS", "COMPILE_PROCESSES", "COMPILE_START",
                   "COMPILE_NEXT_KEY", "PROGRESS_S", "LOST_S", "JOB_ID", "MAX_RUNS", "SYNC_EVERY")
#: what other tuners' variables (Helion's ``HELION_*``, TileLang's) are here, by the words a port would put after
#: the prefix
OTHER_VARIABLES = {
    **dict.fromkeys(("FORCE_AUTOTUNE", "FORCE", "FORCE_TUNE", "SKIP_CACHE", "DISABLE_CACHE", "NO_CACHE"),
                    f"{PREFIX}ALWAYS_TUNE=1 tunes again a key the disk cache holds"),
    **dict.fromkeys(("EFFORT", "AUTOTUNE_EFFORT", "BUDGET"), "no variable: autotune(budget=seconds) bounds a key's "
                    "tuning; a call with autotune=False, or undecided='first', tunes nothing"),
    **dict.fromkeys(("LOG_LEVEL", "AUTOTUNE_LOG_LEVEL", "VERBOSE", "PRINT"),
                    "TRITON_PRINT_AUTOTUNING=1, or each call's autotune_verbose=True"),
}
#: the unknown variables :func:`say_unknown` warned of in this process
_SAID_UNKNOWN: set[str] = set()
#: the names ``os.environ`` held (as it keeps them: bytes on POSIX) when :func:`current` last scanned it
_SCANNED: list[frozenset[Any]] = [frozenset()]


def _names_changed() -> bool:
    """Whether ``os.environ``'s names differ from those of :func:`current`'s last scan, which this then takes as
    scanned. Only names matter (a known one is never warned of, an unknown one once whatever its value), and a
    compare of ``os.environ``'s own dict's keys with the last set of them runs in C, where iterating ``os.environ``
    decodes every name in Python: a scan at every call cost about 8 us of ``current()``'s, which the tuner calls
    on every call of a tuned function. Names set later (or one removed and another added) are scanned at the next
    call. True, every call, where ``os.environ`` keeps no such dict (CPython's ``os._Environ`` keeps ``_data``)."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):
        return True
    if data.keys() == _SCANNED[0]:
        return False
    _SCANNED[0] = frozenset(data)  # before the scan: a name set during it differs from these at the next call
    return True


def say_unknown(env: Mapping[str, str]) -> None:
    """Warn once per process and name of each variable of :data:`PREFIX` in ``env`` that the tuner does not read: a
    misspelt one (``..._ALWAYSTUNE=1``) or one carried over from another tuner (Helion's ``HELION_FORCE_AUTOTUNE``
    as ``..._FORCE_AUTOTUNE``) was ignored with no word, and the job used its cached decisions. Each is named with
    the nearest variable, or what stands for another tuner's."""
    for name in sorted(env):
        if not name.startswith(PREFIX) or name in _SAID_UNKNOWN or name[len(PREFIX):] in KNOWN_VARIABLES:
            continue
        _SAID_UNKNOWN.add(name)
        rest = name[len(PREFIX):]
        near = difflib.get_close_matches(rest, KNOWN_VARIABLES, n=1)
        instead = OTHER_VARIABLES.get(rest) or (f"did you mean {PREFIX}{near[0]}?" if near else
                                               "the variables it reads are in docs/operations.md")
        warnings.warn(f"triton_dist_tune reads no variable {name} (set to {env[name]!r}), so it changes nothing: "
                      f"{instead}", RuntimeWarning, stacklevel=2)


def problem() -> str | None:
    """What :func:`current` raises for a malformed variable, as text; None when every variable is well formed."""
    try:
        Settings.from_env()
    except BadInputError as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def overlooking() -> Iterator[None]:
    """Inside, :func:`current` reads each malformed variable as its default instead of raising: for a rank that
    carries the error (:func:`problem`) into its group's first exchange of a tuning, so that every rank of the
    group raises it at once instead of this rank alone while the others wait for it to their deadline."""
    token = _OVERLOOKING.set(True)
    try:
        yield
    finally:
        _OVERLOOKING.reset(token)


@dataclass(frozen=True)
class Launcher:
    """What the launcher told this process (see the module docstring): read by :func:`launcher`, never raises."""

    #: rank in the whole job: the first of :data:`RANK_VARIABLES` set to a number; None when none is
    rank: int | None = None
    #: ranks in the whole job: the first of :data:`SIZE_VARIABLES` set to a number; None when none is
    world_size: int | None = None
    #: rank on this node: the first of :data:`LOCAL_RANK_VARIABLES` set to a number; None when none is
    local_rank: int | None = None
    #: torchrun's agents in the job, one per node (``GROUP_WORLD_SIZE``); None when unset
    agents: int | None = None
    #: the host of the job's key-value store (``MASTER_ADDR`` without the spaces around it, as the numbers are read;
    #: default 127.0.0.1; empty where it is set to nothing, which ``init_distributed`` refuses)
    master_addr: str = "127.0.0.1"
    #: the port of the job's key-value store as set (``MASTER_PORT``); None when unset
    master_port: str | None = None
    #: torchrun's agent hosts the store (``TORCHELASTIC_USE_AGENT_STORE=true``), so rank 0 must not
    agent_store: bool = False
    #: torchrun's restart count as set (``TORCHELASTIC_RESTART_COUNT``, default 0)
    restart_count: str = "0"
    #: the first of :data:`JOB_VARIABLES` set (torchrun's run id counts unless it is ``none``), as
    #: (variable, value stripped); None when none is
    job: tuple[str, str] | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Launcher:
        """Read ``env`` (default ``os.environ``)."""
        env = os.environ if env is None else env
        jobs = ((name, env.get(name, "").strip()) for name in JOB_VARIABLES)
        return cls(
            rank=_int(env, RANK_VARIABLES),
            world_size=_int(env, SIZE_VARIABLES),
            local_rank=_int(env, LOCAL_RANK_VARIABLES),
            agents=_int(env, ("GROUP_WORLD_SIZE",)),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1").strip(),
            master_port=env.get("MASTER_PORT"),
            agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
            restart_count=env.get("TORCHELASTIC_RESTART_COUNT", "0"),
            # torchrun's run id is "none" unless --standalone or --rdzv-id
            job=next(((name, value) for name, value in jobs if value and value.lower() != "none"), None),
        )


def launcher() -> Launcher:
    """What the launcher says now."""
    return Launcher.from_env()


def store_host() -> str:
    """Which process hosts the job's key-value store, as an error that lost it names it: torchrun's agent where the
    launcher says it does (``TORCHELASTIC_USE_AGENT_STORE=true``: it goes with the agent, which a scheduler or
    Kubernetes ends first), else global rank 0 (a job started without torchrun's agent; by its global rank: on a
    group of other ranks, such as [2, 3], group rank 0 is another process)."""
    return "torchrun's agent" if launcher().agent_store else "global rank 0, started without torchrun's agent"
