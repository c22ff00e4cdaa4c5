"""The disk cache of decisions: one standard-JSON file per (function, key, space, group size, hardware).

Only group rank 0 reads it and broadcasts what it found (see ``function/``), so ranks whose disks differ never split.
Files are written atomically (a temporary file in the same folder, then ``os.replace``), so any number of
processes may write one folder; a cache hit's rewrite (its ``served`` time) is made only where the file is still the
one it read. An unreadable or corrupt file, or one that holds more than the tuner's exchanges
carry (:func:`~triton_dist_tune.group.codec.read_json`), is a warning and a re-tune, never a crash.

The software versions (torch, triton, CUDA, NCCL, this package) are recorded in each file, not in its name: a file
written under other versions is used with a warning, or re-tuned when ``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1``.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from pathlib import Path
from typing import Any

from .. import settings
from ..group.codec import read_json
from ..space import fingerprint
from .entries import MAX_ENTRY_BYTES, cut_writes
from .files import read_regular, rewrite_json, write_json_atomic, write_json_new
from .versions import remember, versions

log = logging.getLogger("triton_dist_tune")

#: the format written now; format 1 files (no margins, spreads or timing mode) are still read
FORMAT = 2
READABLE_FORMATS = (1, 2)


def cache_root() -> Path:
    """``TRITON_DIST_AUTOTUNE_CACHE_DIR``, or ``~/.triton_dist/autotune``."""
    return settings.current().cache_dir


@functools.lru_cache(maxsize=1)
def hardware() -> dict[str, Any]:
    """The GPU model and count this process sees ("cpu" and 0 without CUDA)."""
    try:
        import torch

        if torch.cuda.is_available():
            return {"gpu": torch.cuda.get_device_name(), "gpu_count": torch.cuda.device_count()}
    except Exception:
        pass
    return {"gpu": "cpu", "gpu_count": 0}


def source_of(fn: Any) -> str:
    """The function's source text, or its bytecode where no source is available."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        return repr(code.co_code) if code is not None else getattr(fn, "__qualname__", repr(fn))


def entry_id(fn_source: str, key_text: str, space_text: str, group_size: int, extra: str = "") -> str:
    """The file name (without suffix) of one decision; versions are deliberately not part of it.

    ``extra`` is everything else a decision depends on (see :func:`dependency_text`)."""
    hw = hardware()
    parts = [fn_source, key_text, space_text, str(group_size), hw["gpu"], str(hw["gpu_count"])]
    return fingerprint("\n".join(parts + ([extra] if extra else [])))


def _kernel_text(obj: Any) -> str | None:
    """The source identity of a Triton kernel object (``@triton.jit``, ``@triton.autotune``, ``@triton.heuristics``):
    its JIT cache key (which covers the jitted functions it calls) where Triton has one, else its source; None
    for anything that is not a Triton kernel."""
    for _ in range(8):  # autotune / heuristics wrappers hold the jitted function in .fn
        if obj is None or not type(obj).__module__.startswith("triton"):
            return None
        if hasattr(obj, "src") and hasattr(obj, "arg_names"):  # a JITFunction
            try:
                return str(obj.cache_key)
            except Exception:
                return str(obj.src)
        if type(obj).__name__ == "InterpretedFunction":  # TRITON_INTERPRET=1
            return source_of(obj.fn)
        obj = getattr(obj, "fn", None)
    return None


def _names_used(code: Any) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_used(const)
    return names


def kernels_of(fn: Any) -> dict[str, str]:
    """The Triton kernels ``fn`` refers to by a global or enclosing function's name, or as an attribute of a module
    it names (in its nested functions and lambdas too): name -> source identity. Kernels reached through other
    Python functions or objects are not found: put what identifies them in ``cache_key_extra``."""
    fn = inspect.unwrap(fn) if callable(fn) else fn
    code, namespace = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is None or namespace is None:
        return {}
    namespace = dict(namespace)
    for var, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False):
        try:
            namespace[var] = cell.cell_contents  # variables of an enclosing function
        except ValueError:
            pass
    names = sorted(_names_used(code) | set(code.co_freevars))
    modules = [namespace[n] for n in names if inspect.ismodule(namespace.get(n))]
    found = {}
    for name in names:
        text = _kernel_text(namespace.get(name))
        for module in modules:  # ``kernels.my_kernel[grid](...)``
            text = text or _kernel_text(getattr(module, name, None))
        if text is not None:
            found[name] = text
    return found


def dependency_text(fn: Any, key_fn: Any, prune_fn: Any) -> str:
    """The code a decision depends on besides the function's own source, key and space: the Triton kernels it
    launches (their sources) and the sources of ``key_fn`` and ``prune_fn`` (the user's ``cache_key_extra`` is
    added per call: :meth:`~triton_dist_tune.function.tuned.TunedFunction.entry_extra`)."""
    parts = [f"kernel {name}: {text}" for name, text in kernels_of(fn).items()]
    parts.append("key_fn: " + source_of(key_fn))
    if prune_fn is not None:
        parts.append("prune_fn: " + source_of(prune_fn))
    return "\n".join(parts)


class DiskCache:
    """The decisions of one tuned function, in ``<root>/<name>/<entry id>.json``."""

    def __init__(self, name: str, root: Path | None = None) -> None:
        self.name, self._root = name, root

    @property
    def folder(self) -> Path:
        """``<root>/<name>``: the root given, else :func:`cache_root` as the environment names it now (at the
        tuning, not at decoration: a decorator never reads the environment, so a process with no home folder can
        still import the function; its tuning says so on every rank)."""
        return (self._root or cache_root()) / self.name

    def path(self, entry: str) -> Path:
        """Where the decision ``entry`` lives."""
        return self.folder / f"{entry}.json"

    def load(self, entry: str, space_text: str, quiet: bool = False) -> dict[str, Any] | None:
        """The stored decision, or None when absent, unreadable, for another space, or from other versions
        under ``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1``. Never raises for what the file holds: group rank 0 reads
        it before the broadcast that the other ranks wait on. ``quiet``: no warning for what it ignores or serves
        from other versions (a look ahead whose tuning reads the entry again and warns then)."""
        path = self.path(entry)
        warn = (lambda *args: None) if quiet else log.warning
        try:  # checked to the limits of what is sent: rank 0 broadcasts what it serves
            data = read_json(read_regular(path, MAX_ENTRY_BYTES))  # a FIFO named like the entry: refused at once
        except FileNotFoundError:
            if not quiet:
                _cut_short(self.folder, entry, path)
            return None
        except NotADirectoryError:  # a file where a folder of its path should be: no "unreadable cache file" of a
            return None  # file that is not there; the tuning's writes say what is
        except Exception as exc:  # any problem: unreadable, not UTF-8, not JSON, nested too deep
            warn("triton_dist_tune: ignoring unreadable cache file %s (%s: %s); tuning again", path,
                 type(exc).__name__, str(exc)[:200])
            return None
        fmt = data.get("format") if isinstance(data, dict) else None
        if type(fmt) is int and fmt > max(READABLE_FORMATS):
            warn("triton_dist_tune: %s was written by a newer triton-dist-tune (cache format %d; this one reads "
                 "formats %s); tuning again, and this decision will replace it", path, fmt,
                 ", ".join(map(str, READABLE_FORMATS)))
            return None
        if not _well_formed(data) or data.get("space") != fingerprint(space_text):
            warn("triton_dist_tune: ignoring malformed cache file %s; tuning again", path)
            return None
        if data["versions"] != versions():
            if settings.current().version_check:
                warn("triton_dist_tune: %s was tuned under %s, now %s; tuning again", path, data["versions"],
                     versions())
                return None
            warn("triton_dist_tune: %s was tuned under other versions (%s, now %s); using it "
                 "(set TRITON_DIST_AUTOTUNE_VERSION_CHECK=1 to re-tune)", path, data["versions"], versions())
        return data

    def served(self, entry: str, data: dict[str, Any]) -> None:
        """Mark ``entry``'s decision as served by this job: its file rewritten atomically with ``data`` (the record
        :meth:`load` just returned) and ``served`` set to now, so that the command line tells the decision a job uses
        from one tuned for a space or code it left (:func:`~.entries.superseded`) whatever the file's modification
        time (a copy, a checkout or an ``import`` resets it). Best effort: a read-only or shared folder keeps the file
        as it was. Only where the file still holds ``data`` (:func:`~.files.rewrite_json`): a decision another
        process removed (``clear``) or replaced (a tuning again, an ``import``) since it was read is never put back.
        Not fsynced (a cache hit costs a write, not a wait for the disk): a machine's crash may lose the time, or
        leave the file torn, which is a re-tune."""

        def unchanged(held: bytes) -> bool:
            try:
                return read_json(held) == data
            except Exception:  # (torn or damaged since: not the decision read)
                return False

        try:
            rewrite_json(self.path(entry), {**data, "served": time.time()}, unchanged, durable=False)
        except (OSError, ValueError, TypeError):  # ValueError, TypeError: what standard JSON cannot hold
            pass

    def store(self, entry: str, decision: dict[str, Any], space_text: str) -> Path:
        """Write ``decision`` atomically, ``served`` its creation time (now where it records none); returns the
        file's path."""
        self._write(entry, decision, space_text, write_json_atomic)
        return self.path(entry)

    def add(self, entry: str, decision: dict[str, Any], space_text: str) -> bool:
        """Write ``decision`` as :meth:`store` does, only where the folder has no file of ``entry`` (a campaign's
        decision tuned on another node's disk): the check and the write are one step (:func:`~.files.write_json_new`),
        so a decision another process writes meanwhile (a tuning again, an ``import``) is never replaced by this older
        one. Whether it was written."""
        return self._write(entry, decision, space_text, write_json_new)

    def _write(self, entry: str, decision: dict[str, Any], space_text: str, write: Any) -> Any:
        data = {"format": FORMAT, "space": fingerprint(space_text), "versions": versions(), **hardware(),
                **decision}
        created = data.get("created")
        data["served"] = created if type(created) in (int, float) else time.time()
        data = within_read_limit(data)
        try:
            done = write(self.path(entry), data)
        except OSError as exc:  # a full disk's error names no file: say which
            raise OSError(exc.errno, f"{exc.strerror or exc} (writing {self.path(entry)})") from exc
        remember(self.folder.parent, data["versions"])  # for ``list`` and ``show``: they need not import torch
        return done


#: outcomes past which a record's size is worked out before it is written (fewer are far below the read limit)
SIZED_ABOVE = 10_000


def within_read_limit(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a decision's record) as written so that every reader reads it: one over
    :data:`~.entries.MAX_ENTRY_BYTES`, which a reader refuses unread, is one of a space of some 160,000 configs or
    more, almost all pruned (or never screened), so their outcomes keep only index, config, state and error, and
    where that is still too much they are left out (``pruned_left_out``: how many). Before, such a record was written
    whole and refused by the tuner's next read of it: the key was tuned again in every job."""
    outcomes = data.get("measurements") or []
    if len(outcomes) <= SIZED_ABOVE or len(json.dumps(data, indent=1, sort_keys=True)) <= MAX_ENTRY_BYTES:
        return data
    kept = ("index", "config", "state", "error")
    compact = [{k: o[k] for k in kept if o.get(k) is not None} if o.get("state") == "pruned" else o for o in outcomes]
    smaller = {**data, "measurements": compact}
    if len(json.dumps(smaller, indent=1, sort_keys=True)) <= MAX_ENTRY_BYTES:
        return smaller
    left = [o for o in outcomes if o.get("state") != "pruned"]
    return {**data, "measurements": left, "pruned_left_out": len(outcomes) - len(left)}


def _cut_short(folder: Path, entry: str, path: Path) -> None:
    """Say a write of ``entry``'s decision that was cut short (its temporary file left, never renamed into place: a
    process killed mid-write, :func:`~.entries.cut_writes`), and remove that file (where the folder allows): the
    decision is not there, so the group tunes the key again. Group rank 0 reads the cache alone: said once."""
    for tmp in cut_writes(folder, entry):
        try:
            tmp.unlink()
            what = "removed now"
        except OSError as exc:
            what = f"not removed: {exc.strerror or exc}"
        log.warning("triton_dist_tune: no decision at %s: a write of it was cut short (a process killed while it "
                    "wrote it left %s, never renamed into place; %s); tuning again", path, tmp.name, what)


def _well_formed(data: Any) -> bool:
    """Whether ``data`` is a decision the tuner can serve: its format, index, config and versions, and, where it
    records them (null: not recorded), measurements that are a list of objects (a damaged file is a re-tune, never
    a crash: group rank 0 reads them before the broadcast that the other ranks wait on)."""
    rows = data.get("measurements") if isinstance(data, dict) else None
    return (
        isinstance(data, dict)
        and data.get("format") in READABLE_FORMATS
        and type(data.get("index")) is int  # (``true`` read as 1 was served, then refused by every rank's lookup)
        and isinstance(data.get("config"), str)
        and isinstance(data.get("versions"), dict)
        and (rows is None or isinstance(rows, list) and all(isinstance(row, dict) for row in rows))
    )
