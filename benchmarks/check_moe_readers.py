"""Check exported fused-MoE config files against vLLM's or SGLang's own lookup code, on a CPU machine.

``triton-dist-tune export DIR --format vllm-moe | sglang-moe`` names and writes the file by rules read from the
engines' wheels. This script asks the installed engine itself: for each file the export wrote it calls the engine's
``get_config_file_name`` (does the engine look for this name?), ``get_moe_configs`` (with ``VLLM_TUNED_CONFIG_FOLDER``
or ``SGLANG_MOE_CONFIG_DIR`` set to DIR: does it find and load the file, and return the configs written, per batch
size?) and, where it can be called, ``try_get_optimal_moe_config`` for batch sizes in the file and not in it (the
nearest batch size's config). One line per check; exit status 1 on a mismatch, 2 when the engine cannot be loaded.

The engine's device name is the one thing replaced: vLLM's ``current_platform.get_device_name`` and SGLang's
``get_device_name`` (as the config module imported it from ``sglang.srt.utils``) return ``--device-name``, the name
the export was given. SGLang's package ``__init__`` chain does not import on a CPU-only torch (sgl_kernel's CUDA
binary, torchvision built for CUDA): where the config module's normal import fails, it is loaded from its own file
(its own imports, ``sglang.srt.utils`` and the server args, still run), and the line says so. Where torchvision
cannot be imported (no build for this torch), its imports give placeholder modules, and the header line says so:
SGLang's server args reach it through the multimodal model configs only (0.5.23), never the MoE lookup; its
``try_get_optimal_moe_config`` then imports that chain and is reported as not callable. SGLang releases that read
the global server args get SGLang's own ``ServerArgs(model_path="dummy", device="cpu")`` set.

Install each engine into a folder of its own (nothing goes into site-packages), then the pure-Python modules its
import chain asks for, one at a time, into the same folder::

    pip install --no-deps --target /tmp/fw_vllm_0.34.0 vllm==0.34.0
    pip install --no-deps --target /tmp/fw_vllm_0.34.0 psutil   # and each module the import names as missing
    pip install --no-deps --target /tmp/fw_sglang_0.5.23 sglang==0.5.23
    pip install --no-deps --target /tmp/fw_sglang_0.5.23 dill apache-tvm-ffi sentencepiece compressed_tensors \
        loguru gguf   # what 0.5.23's server args import, beside the earlier sessions' list

Export, then check (the device name as given to the export)::

    triton-dist-tune export /tmp/x/vllm --format vllm-moe --function moe_gemm --experts 4 --n 12 \\
        --device-name "NVIDIA H200"
    python3 benchmarks/check_moe_readers.py /tmp/x/vllm /tmp/fw_vllm_0.34.0 --device-name "NVIDIA H200"
    python3 benchmarks/check_moe_readers.py /tmp/x/sglang /tmp/fw_sglang_0.5.23 --device-name "NVIDIA H200"

The file's E, N, dtype, block shape, per-channel and down parts are parsed leniently from its name and handed to the
engine's functions, which then build the name their own way: a name the engine does not build is a mismatch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

NAME = re.compile(r"E=(?P<E>\d+),N=(?P<N>\d+),device_name=(?P<device>.+?)(?:,dtype=(?P<dtype>[^,\[\]]+?))?"
                  r"(?:,block_shape=\[\s*(?P<bn>\d+)\s*,\s*(?P<bk>\d+)\s*\])?(?P<pc>,per_channel_quant=True)?"
                  r"(?P<down>_down)?\.json")
SGLANG_MODULES = ("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config",
                  "sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_config",
                  "sglang.srt.layers.moe.fused_moe_triton.fused_moe")
VLLM_MODULE = "vllm.model_executor.layers.fused_moe.fused_moe"
#: the key size K and top-k handed to try_get_optimal_moe_config's weight shapes (the lookup uses E and N alone)
K, TOP_K = 64, 2

failures: list[str] = []
skipped: list[str] = []


def say(ok: bool | None, what: str, detail: str = "") -> None:
    """One line per check: PASS, FAIL (counted) or SKIP (None)."""
    word = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
    print(f"{word} {what}" + (f": {detail}" if detail else ""), flush=True)
    if ok is False:
        failures.append(what)
    elif ok is None:
        skipped.append(what)


def first_line(exc: BaseException) -> str:
    """An exception's type and the first non-empty line of its message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def parse(name: str) -> dict[str, Any] | None:
    found = NAME.fullmatch(name)
    if not found:
        return None
    block = [int(found["bn"]), int(found["bk"])] if found["bn"] else None
    return {"E": int(found["E"]), "N": int(found["N"]), "dtype": found["dtype"], "block": block,
            "per_channel": bool(found["pc"]), "down": bool(found["down"])}


def load_by_file(dotted: str, root: Path) -> Any:
    """The module ``dotted`` from its file under ``root``, without running its packages' ``__init__``."""
    path = root.joinpath(*dotted.split(".")).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(dotted, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[dotted] = module
    spec.loader.exec_module(module)
    return module


def version(root: Path, dist: str) -> str:
    found = sorted(root.glob(f"{dist}-*.dist-info"))
    return found[0].name.removeprefix(f"{dist}-").removesuffix(".dist-info") if found else "?"


def expected_tiles(path: Path) -> dict[int, dict[str, int]]:
    with open(path) as f:
        return {int(k): v for k, v in json.load(f).items()}


def nearest(tiles: dict[int, Any], m: int) -> Any:
    return tiles[min(tiles, key=lambda b: abs(b - m))]


def probes(tiles: dict[int, Any]) -> list[int]:
    """The batch sizes in the file, and some not in it: 1, midpoints, past the largest."""
    keys = sorted(tiles)
    middles = {(a + b) // 2 for a, b in zip(keys, keys[1:], strict=False)}
    extra = {1, keys[-1] * 4} | middles
    return keys + sorted(extra - set(keys))


def check_vllm(export: Path, root: Path, device: str) -> None:
    os.environ["VLLM_TUNED_CONFIG_FOLDER"] = str(export)
    try:
        fm = importlib.import_module(VLLM_MODULE)
        from vllm.platforms import current_platform
    except Exception as exc:  # noqa: BLE001 -- report where the engine's import chain stops
        say(False, f"import {VLLM_MODULE}", f"{type(exc).__name__}: {exc}")
        sys.exit(2)
    # the one replacement: the platform's device name is the one the export was given
    current_platform.get_device_name = lambda device_id=0: device
    down_param = "down_moe" in inspect.signature(fm.get_moe_configs).parameters
    print(f"vLLM {version(root, 'vllm')} from {Path(fm.__file__)}; replaced "
          f"{type(current_platform).__name__}.get_device_name -> {device!r}; VLLM_TUNED_CONFIG_FOLDER={export}")
    files = sorted(p for p in export.glob("*.json"))
    if not files:
        say(False, f"files in {export}", "none")
    for path in files:
        parts = parse(path.name)
        if parts is None:
            say(False, f"{path.name}", "not a fused-MoE config file name")
            continue
        e, n, dtype, block = parts["E"], parts["N"], parts["dtype"], parts["block"]
        if parts["per_channel"]:
            say(False, f"{path.name}", "vLLM names no file per_channel_quant=True")
            continue
        built = fm.get_config_file_name(e, n, dtype, block)
        if parts["down"]:
            built = built.removesuffix(".json") + "_down.json"
        say(built == path.name, f"name {path.name}", f"vLLM builds {built!r}")
        kwargs = {"down_moe": True} if parts["down"] else {}
        if parts["down"] and not down_param:
            say(None, f"get_moe_configs {path.name}", "this release reads no _down file")
            continue
        fm.get_moe_configs.cache_clear()
        got = fm.get_moe_configs(e, n, dtype, *(block or (None, None)), **kwargs)
        want = expected_tiles(path)
        say(got == want, f"get_moe_configs {path.name}", f"batch sizes {sorted(got) if got else got}")
        if parts["down"]:
            continue
        n_shape = n // 2 if dtype == "int4_w4a16" else n  # vLLM doubles w2's N for int4 (_moe_config_shape)
        for m in probes(want):
            cfg = fm.try_get_optimal_moe_config((e, 2 * n_shape, K), (e, K, n_shape), TOP_K, dtype, m, block)
            say(cfg == nearest(want, m), f"try_get_optimal_moe_config M={m}" + ("" if m in want else " (not in file)"),
                f"{cfg}")


def sglang_module(root: Path) -> tuple[Any, str]:
    errors = []
    for dotted in SGLANG_MODULES:
        if not root.joinpath(*dotted.split(".")).with_suffix(".py").exists():
            continue
        try:
            module = importlib.import_module(dotted)
        except Exception as exc:  # noqa: BLE001 -- the chain's failure is reported, then the file is loaded
            errors.append(first_line(exc))
            for name in [k for k in sys.modules if k.startswith("sglang.srt.layers")]:
                del sys.modules[name]
            module = load_by_file(dotted, root)
            if hasattr(module, "get_moe_configs"):
                return module, f"loaded from its file (the package import failed: {errors[-1]})"
            continue
        if hasattr(module, "get_moe_configs"):
            return module, "imported"
    raise ImportError("; ".join(errors) or "no SGLang fused-MoE config module found")


class _Placeholder:
    """Any attribute, call or base class of a module that is not installed (what a placeholder module returns)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Placeholder:
        return _Placeholder()

    def __getattr__(self, name: str) -> _Placeholder:
        return _Placeholder()

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _PlaceholderModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of ``package`` and its submodules give empty modules whose every attribute is a
    :class:`_Placeholder` (``__version__`` a plausible version, which transformers compares)."""

    def __init__(self, package: str, version: str) -> None:
        self.package, self.version = package, version

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == self.package or name.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__version__ = self.version
        module.__getattr__ = lambda name: _Placeholder()  # type: ignore[method-assign]
        return module

    def exec_module(self, module: Any) -> None:
        pass


def placeholder_torchvision() -> str:
    """Where torchvision cannot be imported (no CPU build for this torch), imports of it give placeholders: SGLang's
    server args import it through its multimodal model configs only, never on the MoE config lookup's path. Returns
    what the header line says of it."""
    try:
        importlib.import_module("torchvision")
        return ""
    except Exception:  # noqa: BLE001 -- missing, or built for another torch
        sys.modules.pop("torchvision", None)
        sys.meta_path.insert(0, _PlaceholderModules("torchvision", "0.28.0"))
        return "; torchvision (not importable here: SGLang's multimodal configs import it) replaced by placeholders"


def check_sglang(export: Path, root: Path, device: str) -> None:
    os.environ["SGLANG_MOE_CONFIG_DIR"] = str(export)
    try:
        fm, how = sglang_module(root)
    except Exception as exc:  # noqa: BLE001 -- report where the engine's import chain stops
        say(False, "import SGLang's fused-MoE config module", f"{type(exc).__name__}: {exc}")
        sys.exit(2)
    import triton
    # the one replacement: SGLang's get_device_name, as the config module imported it, returns the export's name
    fm.get_device_name = lambda device_id=0: device
    no_args = None  # why get_moe_configs cannot run here: the server args it reads could not be set
    placeholders = placeholder_torchvision()
    try:
        from sglang.srt.server_args import ServerArgs
        if hasattr(fm, "get_global_server_args"):  # 0.5.x releases that read the global server args
            from sglang.srt.server_args import set_global_server_args_for_scheduler
            set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", device="cpu"))
        elif hasattr(fm, "get_exec"):  # later releases read the published runtime context
            from sglang.srt.runtime_context import publish
            publish(ServerArgs(model_path="dummy", device="cpu"), role="test")
    except Exception as exc:  # noqa: BLE001 -- reported on each check it stops
        no_args = f"SGLang's ServerArgs(model_path='dummy', device='cpu') fails here: {first_line(exc)}"
    print(f"SGLang {version(root, 'sglang')}: {fm.__name__} {how}; replaced {fm.__name__}.get_device_name -> "
          f"{device!r}; SGLANG_MOE_CONFIG_DIR={export}; Triton {triton.__version__}{placeholders}")
    files = sorted(export.glob("configs/triton_*/*.json"))
    if not files:
        say(False, f"files in {export}/configs/triton_*/", "none")
    params = inspect.signature(fm.get_config_file_name).parameters
    for path in files:
        parts = parse(path.name)
        where = f"{path.parent.name}/{path.name}"
        if parts is None:
            say(False, where, "not a fused-MoE config file name")
            continue
        e, n, dtype, block = parts["E"], parts["N"], parts["dtype"], parts["block"]
        extra = {}
        if parts["per_channel"] or parts["down"]:
            missing = [p for p, on in (("per_channel_quant", parts["per_channel"]), ("down_moe", parts["down"]))
                       if on and p not in params]
            if missing:
                say(False, f"name {where}", f"this release's get_config_file_name has no {', '.join(missing)}")
                continue
            extra = {"per_channel_quant": parts["per_channel"], "down_moe": parts["down"]}
        # get_moe_configs hands [block_n, block_k] (zeros for none) to get_config_file_name: so does this call
        built = fm.get_config_file_name(e, n, dtype, block or [0, 0], **extra)
        say(built == path.name, f"name {where}", f"SGLang builds {built!r}")
        if no_args:
            say(None, f"get_moe_configs {where}", no_args)
            continue
        fm.get_moe_configs.cache_clear()
        got = fm.get_moe_configs(e, n, dtype, *(block or (0, 0)), **extra)
        want = expected_tiles(path)
        say(got == want, f"get_moe_configs {where}", f"batch sizes {sorted(got) if got else got}"
            + ("" if path.parent.name == "triton_" + triton.__version__.replace(".", "_")
               else f" (another Triton's folder: SGLang runs {triton.__version__})"))
        if parts["down"]:
            continue
        for m in probes(want):
            label = f"try_get_optimal_moe_config M={m}" + ("" if m in want else " (not in file)")
            kw = {"per_channel_quant": True} if parts["per_channel"] else {}
            if kw and "per_channel_quant" not in inspect.signature(fm.try_get_optimal_moe_config).parameters:
                say(None, label, "this release's try_get_optimal_moe_config takes no per_channel_quant")
                break
            try:
                cfg = fm.try_get_optimal_moe_config((e, 2 * n, K), (e, K, n), TOP_K, dtype, m, block_shape=block,
                                                    **kw)
            except ImportError as exc:
                say(None, label, f"not callable here: {first_line(exc)}")
                break
            say(cfg == nearest(want, m), label, f"{cfg}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("export", type=Path, help="the folder given to triton-dist-tune export")
    p.add_argument("framework", type=Path, help="the folder vllm or sglang was pip-installed into (--target)")
    p.add_argument("--device-name", default="NVIDIA H200", help="the device name the export was given")
    args = p.parse_args()
    root = args.framework.resolve()
    sys.path.insert(0, str(root))
    if (root / "vllm").is_dir():
        check_vllm(args.export.resolve(), root, args.device_name)
    elif (root / "sglang").is_dir():
        check_sglang(args.export.resolve(), root, args.device_name)
    else:
        print(f"no vllm or sglang package in {root}", file=sys.stderr)
        return 2
    print(f"{len(failures)} mismatch(es)" + (f": {', '.join(failures)}" if failures else "")
          + f"; {len(skipped)} check(s) skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
