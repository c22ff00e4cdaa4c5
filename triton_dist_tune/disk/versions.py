"""The software versions a decision depends on, read exactly or, for a read-only display, from a record.

A decision records the versions it was tuned under (torch, CUDA, NCCL, Triton, this package): a decision from other
versions is used with a warning, or tuned again under ``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1``. :func:`versions`
reads them exactly, which imports torch: 3 s on a CPU machine, and ``list`` and ``show`` took about 6 s on an H200
host, almost all of it that import, to print a table of a few lines.

So a stored decision also records the versions in the cache folder (:func:`remember`), in a small file named by a
fingerprint of the installed software (:func:`installed`): the paths, sizes, modification times and inodes of
torch's, Triton's and NCCL's files (those holding their versions, and their compiled libraries), the interpreter,
and the variables that choose which shared libraries load. :func:`recorded_versions` returns the record whose
fingerprint matches, else reads exactly and records. Reinstalling or upgrading any of them changes the
fingerprint, so a record is never read for software it was not written under.

A record serves only what a person reads: ``list`` and ``show`` (``plot`` reads no versions). Everything that
acts on versions reads them exactly: the tuner (whether a decision is used or tuned again), ``clear --stale``
(which deletes), ``import`` and ``export``. A record that cannot be read or written changes nothing but the time
a display takes.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from .._version import __version__
from ..group.codec import read_json
from .files import left_behind, write_json_atomic

#: the record's format; another format is not read
RECORD_FORMAT = 1
#: the packages whose installed files the fingerprint covers (``nvidia``: pip's NCCL, ``nvidia/nccl/lib``)
PACKAGES = ("torch", "triton", "nvidia")
#: the environment variables that choose which shared libraries load (NCCL's version is its loaded library's)
LIBRARY_VARIABLES = ("LD_LIBRARY_PATH", "LD_PRELOAD")
#: the files of a package folder whose state the fingerprint covers: where the versions are written, and the
#: compiled libraries (torch's NCCL, where it is linked in, is inside ``lib/libtorch_cuda.so``)
PACKAGE_FILES = ("__init__.py", "version.py", "_C*.so", "_C/*.so", "lib/*.so*", "nccl/lib/*.so*")


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Versions of the software a decision depends on, read exactly (imports torch and Triton)."""
    found = {"triton_dist_tune": __version__}
    try:
        import torch

        found["torch"] = torch.__version__
        found["cuda"] = str(torch.version.cuda)
        found["nccl"] = _nccl_version(torch)
    except Exception:
        pass
    try:
        import triton

        found["triton"] = triton.__version__
    except Exception:
        pass
    return found


def _nccl_version(torch: Any) -> str:
    """The NCCL version torch was built with ("None" for a build without one). A constant of the build, read
    without a device: read only where a GPU was visible, it made a decision tuned on a GPU host read as tuned under
    other versions wherever none was (a login node sharing the cache folder), and ``clear --stale`` deleted it."""
    try:
        nccl = torch.cuda.nccl.version()
    except Exception:  # a build without NCCL (CPU wheels: no torch._C._nccl_version)
        return "None"
    return ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)


def installed(packages: tuple[str, ...] = PACKAGES) -> str:
    """The fingerprint's text: the interpreter, :data:`LIBRARY_VARIABLES`, and for each of ``packages`` found on
    ``sys.path`` (found, not imported) the path, size, modification time and inode of its :data:`PACKAGE_FILES`."""
    lines = [f"python {sys.executable} {sys.version}", f"triton_dist_tune {__version__}"]
    lines += [f"{name}={os.environ.get(name, '')}" for name in LIBRARY_VARIABLES]
    for package in packages:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        lines.append(f"{package}: {' '.join(folders) if folders else 'not found'}")
        for folder in folders:
            for pattern in PACKAGE_FILES:
                for path in sorted(Path(folder).glob(pattern)):
                    try:
                        st = path.stat()
                    except OSError:
                        continue
                    lines.append(f"{path} {st.st_size} {st.st_mtime_ns} {st.st_ino} {st.st_dev}")
    return "\n".join(lines)


#: a temporary file of a record's atomic write (:func:`~.files.write_atomic`: ``..versions-<16 hex digits>.<8
#: characters of mkstemp>.tmp``), renamed into place within milliseconds, or left by a process killed between the two
_RECORD_TMP = re.compile(r"\.\.versions-[0-9a-f]{16}\.[a-z0-9_]{8}\.tmp")


def cut_records(root: Path) -> list[Path]:
    """The temporary files of record writes cut short in the cache folder ``root`` (a process killed between the
    temporary file and its rename): named as :func:`remember`'s write names them and over
    :data:`~.files.CUT_WRITE_S` old, sorted. Never read; :func:`remember` and ``clear --all`` remove them."""
    return left_behind(root, "..versions-*.tmp", _RECORD_TMP)


def record_path(root: Path, text: str) -> Path:
    """The record for the installed software ``text`` describes, in the cache folder ``root``: a dot file beside the
    functions' folders, JSON without the ``.json`` suffix, so that nothing that looks for decisions (``*.json``, the
    command line's or a user's script) finds it."""
    return root / f".versions-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def recorded_versions(root: Path) -> dict[str, str]:
    """The versions for a read-only display (see the module docstring): the record in ``root`` written under the
    same installed software, else :func:`versions`, then recorded."""
    text = data = None
    try:
        text = installed()
        data = read_json(record_path(root, text).read_bytes())
    except Exception:  # none yet, unreadable, not JSON: read exactly
        pass
    if (isinstance(data, dict) and data.get("format") == RECORD_FORMAT and data.get("installed") == text
            and isinstance(found := data.get("versions"), dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in found.items())):
        return found
    found = versions()
    remember(root, found, text, replace=True, tidy=False)  # (a display removes nothing: list names what is left)
    return found


def remember(root: Path, found: dict[str, str], text: str | None = None, replace: bool = False,
             tidy: bool = True) -> None:
    """Record ``found`` (:func:`versions`) in ``root`` for the installed software (``text``, else
    :func:`installed`), where no such record is (``replace``: in place of one that could not be read), and
    (``tidy``: a decision's store, not a display's) remove the temporary files of record writes cut short
    (:func:`cut_records`); a folder that cannot be written is left as it is."""
    for left in cut_records(root) if tidy else ():
        try:
            left.unlink()
        except OSError:
            pass
    try:
        text = installed() if text is None else text
        path = record_path(root, text)
        if (path.exists() and not replace) or not root.is_dir():
            return
        write_json_atomic(path, {"format": RECORD_FORMAT, "installed": text, "versions": found})
    except Exception:  # a record is a convenience: storing a decision never fails for it
        pass
