"""The fused-MoE config file that SGLang reads, and where it reads it:
``<folder>/configs/triton_<X_Y_Z>/E=<E>,N=<N>,device_name=<device>[,dtype=<d>][,block_shape=[n, k]]
[,per_channel_quant=True][_down].json``.

Its content, and the device and dtype it is named by, are what vLLM's and SGLang's files share (:mod:`.moe_file`).
SGLang names the file in ``get_config_file_name`` and opens it in ``get_moe_configs`` (in
``sglang/srt/layers/moe/fused_moe_triton/fused_moe.py`` from 0.4.1 to 0.5.1, ``fused_moe_triton_config.py`` beside it
from 0.5.2, ``sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py`` from 0.5.11); read from its
released wheels, 0.3.6 to 0.5.23 (each change pinned between two releases read, named here by the later):

* the device part: the device's name with each space one ``_`` and nothing else, in every release read: no run of
  spaces is collapsed, no H200 renamed (an H200 NVL's file is ``NVIDIA_H200_NVL``), a ``/`` makes a path;
* the dtype part as vLLM's: none for fp16 and bf16, ``float32``, or the scheme (:data:`SCHEMES`);
* the block shape (from 0.4.1.post7; none in 0.4.1) is the Python list's text, with its space: ``[128, 128]``;
* ``,per_channel_quant=True`` after it for a per-channel quantized MoE (from 0.5.3.post3; none in 0.5.3);
* ``_down`` before ``.json`` for the down projection's GEMM (from 0.5.5; none in 0.5.4): its entries tile that GEMM
  (``USE_TMA`` is an extra entry it may hold, a six-entry tile runs without TMA), and from 0.5.13 each is run with
  the up-projection file's ``BLOCK_SIZE_M``.

The folder: the file is in ``configs/triton_<triton.__version__ with '.' as '_'>/`` (from 0.4.7; ``configs/`` itself
before) under SGLang's own module folder, or, from 0.5.3, under the folder the environment variable
:data:`ENV` names, which then replaces SGLang's own (none of its package's files is read). Where the serving Triton's
folder has no such file, SGLang tries those of other Triton versions: a fixed list up to 0.5.10 (3.3.1, 3.2.0,
3.1.0; and 3.4.0 from 0.5.3), from 0.5.12 every ``triton_*`` folder there, newest first, each name read as numbers
(one that is not, ``triton_3_4_0+git1``, stops the lookup with an error): :func:`triton_folder` names only versions
of numbers. SGLang loads the file with integer keys and serves a batch size it does not hold with the config of the
nearest one, as vLLM does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .moe_file import device_part, device_text, dtype_selector, each_space, one_name

#: the environment variable that names the folder SGLang (0.5.3 on) reads ``configs/triton_<X_Y_Z>/`` from
ENV = "SGLANG_MOE_CONFIG_DIR"
#: SGLang's names for the dtype part of a quantized MoE's file (``get_config_dtype_str``)
SCHEMES = ("fp8_w8a8", "int8_w8a8", "int8_w8a16", "int4_w4a16")


def file_safe(name: str) -> str:
    """A device name as one part of one file name, as SGLang names its files: each space one ``_``; a ``/`` is a
    ``ValueError`` (SGLang reads a folder there), and each other character a file name cannot hold (``\\``, control
    characters) ``_``."""
    return device_part(each_space(name, "SGLang"), "SGLang")


def device_name(device: str | None = None) -> str:
    """The device part of the file name for decisions tuned on ``device`` (:func:`~.moe_file.device_text`), as
    SGLang names it (:func:`file_safe`)."""
    return file_safe(device_text(device))


def triton_folder(version: str) -> str:
    """``triton_<version with '.' as '_'>``: the folder SGLang looks in first when it runs Triton ``version``. A
    ``ValueError`` for a version that is not numbers between dots (``3.4.0+git1``): SGLang 0.5.12 on reads each
    such folder's name as numbers, and one that is not stops its lookup with an error."""
    text = version.strip()
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise ValueError(f"{version!r} is no Triton version of numbers alone (3.4.0): SGLang 0.5.12 on reads the "
                         "folder names under configs/ as numbers, and triton_<that> would stop its lookup with an "
                         "error; give --triton-version X.Y.Z")
    return "triton_" + text.replace(".", "_")


def file_name(experts: int, n: int, device: str, dtype: str | None = None,
              block_shape: tuple[int, int] | None = None, per_channel_quant: bool = False,
              down: bool = False) -> str:
    """``E=<experts>,N=<n>,device_name=<device>[,dtype=<dtype>][,block_shape=[<n>, <k>]][,per_channel_quant=True]
    [_down].json``, as SGLang's ``get_config_file_name`` builds it (the device: :func:`file_safe`)."""
    return (f"E={experts},N={n},device_name={file_safe(device)}" + (f",dtype={one_name(dtype)}" if dtype else "")
            + (f",block_shape={list(block_shape)}" if block_shape else "")
            + (",per_channel_quant=True" if per_channel_quant else "") + ("_down" if down else "") + ".json")


def config_file(folder: Path | str, experts: int, n: int, device: str | None, dtype: Any, triton: str,
                block_shape: tuple[int, int] | None = None, per_channel_quant: bool = False,
                down: bool = False) -> Path:
    """Where SGLang running Triton ``triton`` with :data:`ENV` set to ``folder`` looks for the config file of
    decisions tuned on ``device`` (:func:`~.moe_file.device_text`) for ``dtype`` (:func:`~.moe_file.dtype_selector`):
    ``folder/configs/triton_<X_Y_Z>/<file_name>``; the one place that names it, for the example and the command
    line. The file is in that folder whatever the device's or the dtype's text (a ``ValueError`` otherwise)."""
    where = Path(folder) / "configs" / triton_folder(triton)
    path = where / file_name(experts, n, device_text(device), dtype_selector(dtype), block_shape, per_channel_quant,
                             down)
    if path.parent != where or path.name in (".", ".."):
        raise ValueError(f"the file name {path.name!r} is no file of the folder {where}")
    return path
