"""The fused-MoE config file that vLLM and SGLang read: ``E=<E>,N=<N>,device_name=<device>[,dtype=<d>].json``.

Its keys are batch sizes (the number of tokens M) as strings; each value is one tile config with exactly the six
integer entries of :data:`TILE_KEYS`. vLLM builds the file name in ``get_config_file_name`` (the device name is
``torch.cuda.get_device_name()`` with spaces replaced by ``_``; the dtype part is absent for fp16 and bf16), loads
the file with ``{int(k): v for k, v in json.load(f).items()}`` and, for a batch size it does not hold, uses the
config of the nearest batch size in the file.

Only batch sizes that were tuned go in a file written here: a key served by a policy (``undecided="nearest"`` or
``"first"``) has no decision of its own, and vLLM already serves a batch size missing from the file by the nearest.
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


def device_name(device: str | None = None) -> str:
    """The device part of the file name for decisions tuned on ``device``: the GPU model as the cache records it
    (``torch.cuda.get_device_name()``), or for ``"cpu"`` (CPU ranks) this machine's CPU model; default: the device
    this process tunes on (:func:`~triton_dist_tune.disk.cache.hardware`). Whitespace runs become ``_``."""
    if device is None:
        device = hardware()["gpu"]
    return file_safe(cpu_name() if device == "cpu" else device)


def file_safe(name: str) -> str:
    """A device name as one part of one file name, as vLLM names its files: each space replaced by ``_`` (one for
    one: ``torch.cuda.get_device_name().replace(" ", "_")``), and so is each character a file name cannot hold
    (:func:`one_name`). A ``ValueError`` when nothing is left."""
    safe = one_name(name.replace(" ", "_"))
    if not safe.strip("_"):
        raise ValueError("the device name is empty: give --device-name the GPU's name, as vLLM reads it")
    return safe


def one_name(text: str) -> str:
    """``text`` with each ``/``, ``\\`` and control character (NUL too) replaced by ``_``: a part of one file name,
    never a path (``..`` between two such parts of a name is no folder)."""
    return re.sub(r"[/\\\x00-\x1f\x7f]", "_", text)


def dtype_selector(dtype: Any) -> str | None:
    """The ``dtype=`` part vLLM expects for a MoE in ``dtype`` (a torch dtype or its text, ``torch.`` or not):
    ``float32`` for float32, none for float16 and bfloat16 (vLLM's default file), and a quantized scheme's name
    (``fp8_w8a8``, ``int8_w8a16``) as it is; None for None."""
    if dtype is None:
        return None
    text = str(dtype).removeprefix("torch.")
    if text in ("float32", "float"):
        return "float32"
    return None if text in ("float16", "half", "bfloat16") else text


#: vLLM's names for the dtype part of a quantized MoE's file (``--dtype`` takes them): never a torch dtype's name
SCHEMES = ("fp8_w8a8", "int8_w8a16", "int4_w4a16")


def inferable(dtype: Any) -> bool:
    """Whether a torch dtype a key names (``torch.bfloat16``) says the file's dtype part alone: float16 and bfloat16
    (none) and float32 (``float32``). Any other (``torch.float8_e4m3fn``, ``torch.int8``) does not: vLLM names a
    quantized MoE's file by its scheme (:data:`SCHEMES`), which the weights' dtype does not tell."""
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


def file_name(experts: int, n: int, device: str, dtype: str | None = None,
              block_shape: tuple[int, int] | None = None) -> str:
    """``E=<experts>,N=<n>,device_name=<device>[,dtype=<dtype>][,block_shape=[<n>, <k>]].json``, as vLLM's
    ``get_config_file_name`` writes it (the block shape as Python prints a list: ``[128, 128]``)."""
    block = f",block_shape=[{block_shape[0]}, {block_shape[1]}]" if block_shape else ""
    return (f"E={experts},N={n},device_name={file_safe(device)}" + (f",dtype={one_name(dtype)}" if dtype else "")
            + block + ".json")


def config_file(folder: Path | str, experts: int, n: int, device: str | None, dtype: Any,
                block_shape: tuple[int, int] | None = None) -> Path:
    """Where vLLM and SGLang look for the config file of decisions tuned on ``device`` (:func:`device_name`) for
    ``dtype`` (:func:`dtype_selector`) and, for a block-quantized MoE, ``block_shape`` (the quantization blocks'
    (n, k)): the one place that names the file, for the example and the command line. The file is in ``folder``
    itself, whatever the device's or the dtype's text (a ``ValueError`` otherwise)."""
    path = Path(folder) / file_name(experts, n, device_name(device), dtype_selector(dtype), block_shape)
    if path.parent != Path(folder) or path.name in (".", ".."):
        raise ValueError(f"the file name {path.name!r} is no file of the folder {folder}")
    return path


def tile_config(config: Mapping[str, Any] | str) -> dict[str, int]:
    """The six entries of a config (a dict, or a cache file's config text ``{BLOCK_SIZE_K: 32, ...}``) as ints, in
    :data:`TILE_KEYS` order. A ``ValueError`` says which entry is missing, not an integer, or (in a config's text)
    there more than once."""
    if isinstance(config, str):
        pairs = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([^,{}]+)", config)
        names = [name for name, _ in pairs]
        twice = [k for k in TILE_KEYS if names.count(k) > 1]
        if twice:  # a config of several kernels, each with its tile: vLLM's file holds one tile per batch size
            raise ValueError(f"the config {config!r} names {', '.join(twice)} more than once (a config of several "
                             "kernels?): a vLLM MoE config is one tile")
        config = {name: value.strip() for name, value in pairs}
    missing = [k for k in TILE_KEYS if k not in config]
    if missing:
        raise ValueError(f"the config {config!r} has no {', '.join(missing)}: a vLLM MoE config needs "
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
    """Write ``configs`` (see :func:`table`) to ``path`` (:func:`config_file`) atomically, readable as the umask
    allows (a server running as another user reads it); returns the path."""
    return write_atomic(path, json.dumps(configs, indent=4) + "\n")
