"""What vLLM's and SGLang's fused-MoE config files share: their content, and the device and dtype they are named by.

Both engines read one JSON file per problem and GPU whose keys are batch sizes (the number of tokens M) as strings
and whose values are tile configs of exactly the six integer entries of :data:`TILE_KEYS`; both load it with
``{int(k): v for k, v in json.load(f).items()}`` and serve a batch size the file does not hold with the config of
the nearest one in it. Both name the file ``E=<E>,N=<N>,device_name=<device>[,dtype=<d>]...`` from the GPU's
``torch.cuda.get_device_name()`` (what the cache records) and a dtype part (:func:`dtype_selector`). How each engine
turns the device into a file name, what follows the dtype part and which folder holds the file are its own:
:mod:`.vllm_moe`, :mod:`.sglang_moe`.

Only batch sizes that were tuned go in a file written here: a key served by a policy (``undecided="nearest"`` or
``"first"``) has no decision of its own, and the engines already serve a batch size missing from the file by the
nearest.
"""

from __future__ import annotations

import ast
import json
import platform
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .cache import hardware
from .files import write_atomic

#: the entries of one config in the file, all integers
TILE_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def cpu_name() -> str:
    """This machine's CPU model (``model name`` in ``/proc/cpuinfo``, else ``platform.processor()``, else the
    architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name") and ":" in line:
                found = line.split(":", 1)[1].strip()
                if found:
                    return found
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_text(device: str | None = None) -> str:
    """The device's name for decisions tuned on ``device``: the GPU model as the cache records it
    (``torch.cuda.get_device_name()``), or for ``"cpu"`` (CPU ranks) this machine's CPU model; default: the device
    this process tunes on (:func:`~triton_dist_tune.disk.cache.hardware`)."""
    if device is None:
        device = hardware()["gpu"]
    return cpu_name() if device == "cpu" else device


def each_space(name: str, reader: str) -> str:
    """``name`` with each space one ``_`` (``.replace(" ", "_")``, as SGLang and vLLM before 0.26.0 name the file);
    a ``/`` is a ``ValueError``: ``reader`` reads it as a folder, so no file of one folder is the one it opens."""
    if "/" in name:
        raise ValueError(f"the device name {name!r} holds '/', which {reader} reads as a folder: no file of one "
                         "folder is the one it opens; give --device-name")
    return name.replace(" ", "_")


def one_name(text: str) -> str:
    """``text`` with each ``/``, ``\\`` and control character (NUL too) replaced by ``_``: a part of one file name,
    never a path (``..`` between two such parts of a name is no folder)."""
    return re.sub(r"[/\\\x00-\x1f\x7f]", "_", text)


def device_part(safe: str, reader: str) -> str:
    """The device part ``safe`` (spaces already turned as ``reader`` turns them) as one part of one file name
    (:func:`one_name`); a ``ValueError`` when nothing is left."""
    safe = one_name(safe)
    if not safe.strip("_"):
        raise ValueError(f"the device name is empty: give --device-name the GPU's name, as {reader} reads it")
    return safe


def dtype_selector(dtype: Any) -> str | None:
    """The ``dtype=`` part both engines expect for a MoE in ``dtype`` (a torch dtype or its text, ``torch.`` or not):
    ``float32`` for float32, none for float16 and bfloat16 (the default file), and a quantized scheme's name
    (``fp8_w8a8``, ``int8_w8a16``) as it is; None for None."""
    if dtype is None:
        return None
    text = str(dtype).removeprefix("torch.")
    if text in ("float32", "float"):
        return "float32"
    return None if text in ("float16", "half", "bfloat16") else text


def inferable(dtype: Any) -> bool:
    """Whether a torch dtype a key names (``torch.bfloat16``) says the file's dtype part alone: float16 and bfloat16
    (none) and float32 (``float32``). Any other (``torch.float8_e4m3fn``, ``torch.int8``) does not: the engines name
    a quantized MoE's file by its scheme (``fp8_w8a8``, ``int8_w8a16``), which the weights' dtype does not tell."""
    return str(dtype).removeprefix("torch.") in ("float16", "half", "bfloat16", "float32", "float")


def key_dtype(key: Any) -> str | None:
    """The torch dtype a tuning key names (an element ``'torch.<dtype>'``, as the example's key ends), or None; a
    key read from a cache file is text, parsed as a Python literal."""
    if isinstance(key, str):
        try:
            key = ast.literal_eval(key)
        except (ValueError, SyntaxError):
            return None
    parts = key if isinstance(key, (tuple, list)) else (key,)
    found = [p for p in parts if isinstance(p, str) and p.startswith("torch.")]
    return found[0] if len(found) == 1 else None


def tile_config(config: Mapping[str, Any] | str) -> dict[str, int]:
    """The six entries of a config (a dict, or a cache file's config text ``{BLOCK_SIZE_K: 32, ...}``) as ints, in
    :data:`TILE_KEYS` order. A ``ValueError`` says which entry is missing, not an integer, or (in a config's text)
    there more than once."""
    if isinstance(config, str):
        pairs = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([^,{}]+)", config)
        names = [name for name, _ in pairs]
        twice = [k for k in TILE_KEYS if names.count(k) > 1]
        if twice:  # a config of several kernels, each with its tile: the file holds one tile per batch size
            raise ValueError(f"the config {config!r} names {', '.join(twice)} more than once (a config of several "
                             "kernels?): a fused-MoE config is one tile")
        config = {name: value.strip() for name, value in pairs}
    missing = [k for k in TILE_KEYS if k not in config]
    if missing:
        raise ValueError(f"the config {config!r} has no {', '.join(missing)}: a fused-MoE config needs "
                         f"{', '.join(TILE_KEYS)}")
    out = {}
    for k in TILE_KEYS:
        value = config[k]
        try:
            number = int(value) if not isinstance(value, float) or value.is_integer() else None
        except (TypeError, ValueError):
            number = None
        if number is None or isinstance(value, bool):
            raise ValueError(f"the config's {k} is {value!r}, not an integer")
        out[k] = number
    return out


def batch_of(key: Any, index: int = 0) -> int:
    """The batch size in a tuning key: the key itself when it is an integer, else its element ``index`` (a key
    read from a cache file is text, parsed as a Python literal)."""
    if isinstance(key, str):
        try:
            key = ast.literal_eval(key)
        except (ValueError, SyntaxError):
            raise ValueError(f"the key {key!r} is not a literal this export can read") from None
    value = key if isinstance(key, int) else (key[index] if isinstance(key, (tuple, list)) and
                                              -len(key) <= index < len(key) else None)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"the key {key!r} holds no batch size (a positive integer) at position {index}")
    return value


def table(choices: Iterable[tuple[int, Mapping[str, Any] | str]]) -> dict[str, dict[str, int]]:
    """The file's content: batch size (as a string, in increasing order) -> tile config. Two different configs
    for one batch size are a ``ValueError``."""
    by_batch: dict[int, dict[str, int]] = {}
    for batch, config in choices:
        tile = tile_config(config)
        if batch in by_batch and by_batch[batch] != tile:
            raise ValueError(f"batch size {batch} has two different decisions ({by_batch[batch]} and {tile}): "
                             "select one problem (E, N, dtype, GPU) per file")
        by_batch[batch] = tile
    return {str(batch): by_batch[batch] for batch in sorted(by_batch)}


def write(path: Path, configs: Mapping[str, Mapping[str, int]]) -> Path:
    """Write ``configs`` (see :func:`table`) to ``path`` atomically, creating its folders, readable as the umask
    allows (a server running as another user reads it); returns the path."""
    return write_atomic(path, json.dumps(configs, indent=4) + "\n")
