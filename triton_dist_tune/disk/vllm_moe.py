"""The fused-MoE config file that vLLM reads: ``E=<E>,N=<N>,device_name=<device>[,dtype=<d>][,block_shape=[n,k]].json``.

Its keys are batch sizes (the number of tokens M) as strings; each value is one tile config with exactly the six
integer entries of :data:`TILE_KEYS`. vLLM builds the file name in ``get_config_file_name``
(``vllm/model_executor/layers/fused_moe/fused_moe.py``), from ``current_platform.get_device_name()`` (on CUDA:
NVML's ``nvmlDeviceGetName``, or ``torch.cuda.get_device_name()`` where NVML is not there; the cache records the
latter) and the dtype part (absent for fp16 and bf16);
it opens the file in ``VLLM_TUNED_CONFIG_FOLDER`` first, then in its own ``configs`` folder, loads it with
``{int(k): v for k, v in json.load(f).items()}`` and, for a batch size it does not hold, uses the config of the
nearest batch size in the file. How the name is built changed over vLLM's releases (each read from its wheel),
which :func:`file_name` follows for the release ``vllm`` names (default: the newest rules, :data:`NEWEST`):

* the device part: each space one ``_`` (``.replace(" ", "_")``) before 0.26.0; from 0.26.0 each run of whitespace
  and ``/`` one ``_`` (``vllm/utils/platform_utils.py``: ``get_device_name_as_file_name``);
* from 0.11.1, a device part with the word ``H200`` (``NVIDIA_H200_NVL``) is ``NVIDIA_H200`` (a GH200 is not);
* the block shape (from 0.7.1; none before): ``[128, 128]`` in 0.7.1 alone, ``[128,128]`` from 0.7.2.

vLLM 0.34.0 also opens ``<that name less .json>_down.json`` for the down projection (fp8_w8a8, blocks 128 x 128), and
uses an entry of it only where the entry says ``USE_TMA``: a six-entry tile never does, so none is written here.
SGLang's names differ (its block shape keeps the space, it never renames an H200, and it adds
``,per_channel_quant=True`` and ``_down`` parts): a file for SGLang is not what this module names.

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


#: the vLLM releases whose file names changed (read from each release's wheel)
BLOCK_SHAPE_SINCE, NO_SPACE_SINCE, H200_SINCE, COLLAPSE_SINCE = (0, 7, 1), (0, 7, 2), (0, 11, 1), (0, 26, 0)
#: the newest release whose rules were read; a later one is named by the same rules
NEWEST = (0, 34, 0)


def release(text: str) -> tuple[int, int, int]:
    """A vLLM release's text (``0.11.1``, ``v0.10.1.1``, ``0.8.5.post1``, ``0.11.1+cu128``, ``0.7``) as (major, minor,
    patch); a pre-release counts as its release. A ``ValueError`` for anything else."""
    found = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\d+)*(?:[.+-]?[A-Za-z][0-9A-Za-z.+-]*)?", text.strip())
    if not found:
        raise ValueError(f"{text!r} is no vLLM release (0.11.1, 0.10.1.1, 0.8.5.post1)")
    return int(found[1]), int(found[2]), int(found[3] or 0)


def _since(vllm: tuple[int, int, int] | None, first: tuple[int, int, int]) -> bool:
    return vllm is None or tuple(vllm) >= first


def device_text(device: str | None = None) -> str:
    """The device's name for decisions tuned on ``device``: the GPU model as the cache records it
    (``torch.cuda.get_device_name()``), or for ``"cpu"`` (CPU ranks) this machine's CPU model; default: the device
    this process tunes on (:func:`~triton_dist_tune.disk.cache.hardware`)."""
    if device is None:
        device = hardware()["gpu"]
    return cpu_name() if device == "cpu" else device


def device_name(device: str | None = None, vllm: tuple[int, int, int] | None = None) -> str:
    """The device part of the file name for decisions tuned on ``device`` (:func:`device_text`), as the vLLM
    release ``vllm`` names it (:func:`file_safe`)."""
    return file_safe(device_text(device), vllm)


def _underscored(name: str, vllm: tuple[int, int, int] | None) -> str:
    """``name`` with each run of whitespace and ``/`` one ``_`` (vLLM 0.26.0 on), or each space one ``_`` (before;
    a ``/`` then is a ``ValueError``: vLLM reads it as a folder, so no file of one folder is the one it opens)."""
    if _since(vllm, COLLAPSE_SINCE):
        return re.sub(r"[\s/]+", "_", name)
    if "/" in name:
        raise ValueError(f"the device name {name!r} holds '/', which vLLM before 0.26.0 reads as a folder: no file "
                         "of one folder is the one it opens; give --device-name")
    return name.replace(" ", "_")


def h200_renamed(name: str, vllm: tuple[int, int, int] | None = None) -> bool:
    """Whether the vLLM release ``vllm`` looks up the file of the device ``name`` as ``NVIDIA_H200`` though the
    device is another H200 (``NVIDIA H200 NVL``): from 0.11.1 on."""
    safe = _underscored(name, vllm)
    return _since(vllm, H200_SINCE) and "H200" in safe.split("_") and safe != "NVIDIA_H200"


def file_safe(name: str, vllm: tuple[int, int, int] | None = None) -> str:
    """A device name as one part of one file name, as the vLLM release ``vllm`` (default: the newest) names its
    files: each run of whitespace and ``/`` one ``_`` (0.26.0 on) or each space one ``_`` (before,
    :func:`_underscored`); then, from 0.11.1, ``NVIDIA_H200`` for a name with the word ``H200``; then each
    character a file name cannot hold (:func:`one_name`) ``_``. A ``ValueError`` when nothing is left."""
    safe = _underscored(name, vllm)
    if _since(vllm, H200_SINCE) and "H200" in safe.split("_"):
        safe = "NVIDIA_H200"
    safe = one_name(safe)
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
              block_shape: tuple[int, int] | None = None, vllm: tuple[int, int, int] | None = None) -> str:
    """``E=<experts>,N=<n>,device_name=<device>[,dtype=<dtype>][,block_shape=[<n>,<k>]].json``, as the vLLM release
    ``vllm`` (default: the newest) looks it up in ``get_config_file_name`` (the device: :func:`file_safe`; the block
    shape with a space in 0.7.1 alone; before 0.7.1 no file has one, a ``ValueError``)."""
    block = ""
    if block_shape:
        if not _since(vllm, BLOCK_SHAPE_SINCE):
            raise ValueError("vLLM before 0.7.1 names no file by its block shape: --block-shape needs 0.7.1 or later")
        block = f",block_shape=[{block_shape[0]},{' ' if not _since(vllm, NO_SPACE_SINCE) else ''}{block_shape[1]}]"
    return (f"E={experts},N={n},device_name={file_safe(device, vllm)}" + (f",dtype={one_name(dtype)}" if dtype else "")
            + block + ".json")


def config_file(folder: Path | str, experts: int, n: int, device: str | None, dtype: Any,
                block_shape: tuple[int, int] | None = None, vllm: tuple[int, int, int] | None = None) -> Path:
    """Where the vLLM release ``vllm`` (default: the newest) looks for the config file of decisions tuned on
    ``device`` (:func:`device_text`) for ``dtype`` (:func:`dtype_selector`) and, for a block-quantized MoE,
    ``block_shape`` (the quantization blocks' (n, k)): the one place that names the file, for the example and the
    command line. The file is in ``folder`` itself, whatever the device's or the dtype's text (a ``ValueError``
    otherwise)."""
    path = Path(folder) / file_name(experts, n, device_text(device), dtype_selector(dtype), block_shape, vllm)
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
