"""The fused-MoE config file that vLLM reads: ``E=<E>,N=<N>,device_name=<device>[,dtype=<d>][,block_shape=[n,k]].json``.

Its content, and the device and dtype it is named by, are what vLLM's and SGLang's files share
(:mod:`.moe_file`, whose names this module also offers). vLLM builds the file name in ``get_config_file_name``
(``vllm/model_executor/layers/fused_moe/fused_moe.py``), from ``current_platform.get_device_name()`` (on CUDA:
NVML's ``nvmlDeviceGetName``, or ``torch.cuda.get_device_name()`` where NVML is not there; the cache records the
latter) and the dtype part (absent for fp16 and bf16);
it opens the file in ``VLLM_TUNED_CONFIG_FOLDER`` first, then in its own ``configs`` folder, loads it with
``{int(k): v for k, v in json.load(f).items()}`` and, for a batch size it does not hold, uses the config of the
nearest batch size in the file. How the name is built changed over vLLM's releases (each read from its wheel),
which :func:`file_name` follows for the release ``vllm`` names (default: the newest rules, read up to vLLM 0.34.0):

* the device part: each space one ``_`` (``.replace(" ", "_")``) before 0.26.0; from 0.26.0 each run of whitespace
  and ``/`` one ``_`` (``vllm/utils/platform_utils.py``: ``get_device_name_as_file_name``);
* from 0.11.1, a device part with the word ``H200`` (``NVIDIA_H200_NVL``) is ``NVIDIA_H200`` (a GH200 is not);
* the block shape (from 0.7.1; none before): ``[128, 128]`` in 0.7.1 alone, ``[128,128]`` from 0.7.2.

vLLM 0.34.0 also opens ``<that name less .json>_down.json`` for the down projection (fp8_w8a8, blocks 128 x 128), and
uses an entry of it only where the entry says ``USE_TMA``: a six-entry tile never does, so none is written here.
SGLang names its file otherwise, and reads it from another folder: :mod:`.sglang_moe`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .moe_file import device_part, device_text, dtype_selector, each_space, one_name

#: the vLLM releases whose file names changed (read from each release's wheel)
BLOCK_SHAPE_SINCE, NO_SPACE_SINCE, H200_SINCE, COLLAPSE_SINCE = (0, 7, 1), (0, 7, 2), (0, 11, 1), (0, 26, 0)
#: vLLM's names for the dtype part of a quantized MoE's file (``--dtype`` takes them): never a torch dtype's name
SCHEMES = ("fp8_w8a8", "int8_w8a16", "int4_w4a16")


def release(text: str) -> tuple[int, int, int]:
    """A vLLM release's text (``0.11.1``, ``v0.10.1.1``, ``0.8.5.post1``, ``0.11.1+cu128``, ``0.7``) as (major, minor,
    patch); a pre-release counts as its release. A ``ValueError`` for anything else."""
    found = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\d+)*(?:[.+-]?[A-Za-z][0-9A-Za-z.+-]*)?", text.strip())
    if not found:
        raise ValueError(f"{text!r} is no vLLM release (0.11.1, 0.10.1.1, 0.8.5.post1)")
    return int(found[1]), int(found[2]), int(found[3] or 0)


def _since(vllm: tuple[int, int, int] | None, first: tuple[int, int, int]) -> bool:
    return vllm is None or tuple(vllm) >= first


def device_name(device: str | None = None, vllm: tuple[int, int, int] | None = None) -> str:
    """The device part of the file name for decisions tuned on ``device`` (:func:`device_text`), as the vLLM
    release ``vllm`` names it (:func:`file_safe`)."""
    return file_safe(device_text(device), vllm)


def _underscored(name: str, vllm: tuple[int, int, int] | None) -> str:
    """``name`` with each run of whitespace and ``/`` one ``_`` (vLLM 0.26.0 on), or each space one ``_`` (before;
    a ``/`` then is a ``ValueError``: vLLM reads it as a folder, so no file of one folder is the one it opens)."""
    if _since(vllm, COLLAPSE_SINCE):
        return re.sub(r"[\s/]+", "_", name)
    return each_space(name, "vLLM before 0.26.0")


def h200_renamed(name: str, vllm: tuple[int, int, int] | None = None) -> bool:
    """Whether the vLLM release ``vllm`` looks up the file of the device ``name`` as ``NVIDIA_H200`` though the
    device is another H200 (``NVIDIA H200 NVL``): from 0.11.1 on."""
    safe = _underscored(name, vllm)
    return _since(vllm, H200_SINCE) and "H200" in safe.split("_") and safe != "NVIDIA_H200"


def file_safe(name: str, vllm: tuple[int, int, int] | None = None) -> str:
    """A device name as one part of one file name, as the vLLM release ``vllm`` (default: the newest) names its
    files: each run of whitespace and ``/`` one ``_`` (0.26.0 on) or each space one ``_`` (before,
    :func:`_underscored`); then, from 0.11.1, ``NVIDIA_H200`` for a name with the word ``H200``; then each
    character a file name cannot hold (:func:`~.moe_file.one_name`) ``_``. A ``ValueError`` when nothing is left."""
    safe = _underscored(name, vllm)
    if _since(vllm, H200_SINCE) and "H200" in safe.split("_"):
        safe = "NVIDIA_H200"
    return device_part(safe, "vLLM")


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
