"""``triton-dist-tune export DIR --format vllm-moe | sglang-moe``: vLLM's or SGLang's fused-MoE config file from the
cache.

For a tuned function whose configs carry the six tile entries (``BLOCK_SIZE_M``, ``BLOCK_SIZE_N``,
``BLOCK_SIZE_K``, ``GROUP_SIZE_M``, ``num_warps``, ``num_stages``) and whose key holds the batch size (the key
itself, or its element ``--batch-index``): one file ``E=..,N=..,device_name=..[,dtype=..][,block_shape=..]...json``,
one entry per batch size the cache holds a decision for (:mod:`~triton_dist_tune.disk.moe_file`), named from the
device the decisions were tuned on and the dtype (``--dtype``, else the one the keys name where it is float16,
bfloat16 or float32), as the example names it:

* ``vllm-moe``: in ``DIR`` itself, by the naming rules of the vLLM release ``--vllm-version`` names (default: the
  newest; :mod:`~triton_dist_tune.disk.vllm_moe`);
* ``sglang-moe``: in ``DIR/configs/triton_<X_Y_Z>/``, where SGLang (0.5.3 on) looks with ``SGLANG_MOE_CONFIG_DIR=DIR``
  when it runs that Triton (``--triton-version``, default: the one the decisions were tuned under), by SGLang's rules
  (``--per-channel-quant``, ``--down``; :mod:`~triton_dist_tune.disk.sglang_moe`).

The options of one format alone are refused with the other.
"""

from __future__ import annotations

import argparse
import ast
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..disk import decisions as dec
from ..disk import moe_file, sglang_moe, vllm_moe
from .common import _root, at_least_one, check_target, gpu_text

#: the formats of this module, and the engine that reads each
ENGINES = {"vllm-moe": "vLLM", "sglang-moe": "SGLang"}
#: the options of one format alone, (dest, flag) each: refused with the other
ONLY = {"vllm-moe": (("vllm_version", "--vllm-version"),),
        "sglang-moe": (("triton_version", "--triton-version"), ("per_channel_quant", "--per-channel-quant"),
                       ("down", "--down"))}

#: why a provisional decision stays out of the file: the engine would serve it for good
PROVISIONAL_NOTE = ("cut short by the time budget: the tuner tunes them again at their next call, the serving engine "
                    "would serve them as final; tune them to the end, then export")

#: ``--experts``' and ``--n``'s type: a whole number, at least 1 (a size in the file's name, as the engines build it)
SIZE = at_least_one("a whole number", "a size is at least 1")
#: ``--group-size``'s type: as ``campaign --group-size`` takes it
GROUP_SIZE = at_least_one("a whole number of ranks", "a group holds at least 1 rank")


def vllm_release(text: str) -> tuple[int, int, int]:
    """``--vllm-version``'s type: a vLLM release (:func:`~triton_dist_tune.disk.vllm_moe.release`)."""
    try:
        return vllm_moe.release(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def triton_release(text: str) -> str:
    """``--triton-version``'s type: a Triton version of numbers alone, as SGLang names its folder by it
    (:func:`~triton_dist_tune.disk.sglang_moe.triton_folder`)."""
    try:
        sglang_moe.triton_folder(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``export`` options of the ``vllm-moe`` and ``sglang-moe`` formats."""
    p.add_argument("--format", choices=("bundle", *ENGINES), default="bundle",
                   help="bundle (default): one file of decisions for 'import'; vllm-moe: vLLM's fused-MoE config file, "
                        "written into the folder BUNDLE names; sglang-moe: SGLang's, written into BUNDLE/configs/"
                        "triton_X_Y_Z/ (SGLang reads it with SGLANG_MOE_CONFIG_DIR=BUNDLE)")
    g = p.add_argument_group("--format vllm-moe and sglang-moe")
    g.add_argument("--experts", type=SIZE, metavar="E", help="the number of experts (the file name's E)")
    g.add_argument("--n", type=SIZE, metavar="N",
                   help="the file name's N: the intermediate size per expert, which vLLM and SGLang look the file up "
                   "by (the down projection's in features, w2.shape[2]; a fused gate and up weight has 2N out "
                   "features)")
    g.add_argument("--dtype", help="the problem's dtype: bfloat16 or float16 (no dtype part in the file name), "
                   "float32, or a quantized scheme (fp8_w8a8, ...); default: the torch dtype the keys name")
    g.add_argument("--block-shape", type=SIZE, nargs=2, metavar=("BN", "BK"),
                   help="a block-quantized MoE's quantization blocks (fp8_w8a8 with block scales: 128 128), the file "
                        "name's block_shape part as the engine looks it up (vLLM: [128,128]; [128, 128] for vLLM "
                        "0.7.1, none before; SGLang: [128, 128]); default none")
    g.add_argument("--device-name", help="the file name's device (default: the GPU the decisions were tuned on; "
                   "for decisions tuned on CPU ranks, this machine's CPU model), named as the engine names it: "
                   "SGLang and vLLM before 0.26.0 make each space one '_' and read a '/' as a folder (refused here; "
                   "from 0.26.0 vLLM makes each run of spaces and '/' one '_'), and from vLLM 0.11.1 a name with "
                   "the word H200 (NVIDIA H200 NVL) is NVIDIA_H200 (SGLang renames none); '\\' and control "
                   "characters become '_'")
    g.add_argument("--batch-index", type=int, default=0,
                   help="where the batch size is in a tuple key (default 0; a key that is an int is the batch size)")
    g.add_argument("--where", action="append", default=[], metavar="POS=VALUE",
                   help="only keys whose element POS equals VALUE (a Python literal), to pick one problem; repeatable")
    g.add_argument("--gpu", help="only decisions tuned on this GPU model: as 'list' shows it (H200 x8), or "
                   "as the cache file records it (NVIDIA H200), or without its maker (H200)")
    g.add_argument("--group-size", type=GROUP_SIZE, metavar="N",
                   help="only decisions that serve calls on groups of N ranks (the job's world size for the default "
                        "group; a TP group's size), for a cache that holds the function's decisions tuned at "
                        "several: 'list' shows it under ranks, 'show' a rank-local decision's")
    g = p.add_argument_group("--format vllm-moe alone")
    g.add_argument("--vllm-version", type=vllm_release, metavar="X.Y.Z",
                   help="the vLLM release that reads the file, whose naming rules name it (default: the newest, "
                        "read up to vLLM 0.34.0): the H200 rule from 0.11.1, runs of spaces as one '_' from 0.26.0, "
                        "the block shape's space in 0.7.1 alone")
    g = p.add_argument_group("--format sglang-moe alone")
    g.add_argument("--triton-version", type=triton_release, metavar="X.Y.Z",
                   help="the Triton SGLang runs, which names the folder configs/triton_X_Y_Z/ it looks in first "
                        "(default: the Triton the decisions were tuned under)")
    g.add_argument("--per-channel-quant", action="store_true",
                   help="a per-channel quantized MoE's file: the name's ',per_channel_quant=True' part (SGLang "
                        "0.5.3.post3 on)")
    g.add_argument("--down", action="store_true",
                   help="the down projection's file: the name's '_down' part (SGLang 0.5.5 on tiles the down "
                        "projection's GEMM with it; from 0.5.13 at the up-projection file's BLOCK_SIZE_M)")


def _filters(texts: list[str], fail: Callable[[str], Exception]) -> list[tuple[int, Any]]:
    """``--where`` texts as (position, value); a value that is no Python literal is taken as text."""
    out = []
    for text in texts:
        pos, sep, value = text.partition("=")
        if not sep or not pos.strip().lstrip("-").isdigit():
            raise fail(f"--where wants POS=VALUE (1=8, 5='torch.bfloat16'), not {text!r}")
        try:
            out.append((int(pos), ast.literal_eval(value)))
        except (ValueError, SyntaxError):
            out.append((int(pos), value))
    return out


def _matches(key: str, filters: list[tuple[int, Any]]) -> bool:
    if not filters:
        return True
    try:
        parsed = ast.literal_eval(key)
    except (ValueError, SyntaxError):
        return False
    if not isinstance(parsed, (tuple, list)):
        return False
    return all(-len(parsed) <= pos < len(parsed) and parsed[pos] == value for pos, value in filters)


def _gpu_names(entry: dec.Entry) -> set[str]:
    """The names ``--gpu`` takes for the GPU ``entry`` was tuned on: as the file records it (``NVIDIA H200``), without
    its maker's first word (``H200``, ``Instinct MI300X``), and as ``list`` shows it (``H200 x8``)."""
    return {entry.gpu, entry.gpu.split(" ", 1)[-1], gpu_text(entry)}


#: the options both formats share, (dest, flag) each: they select nothing for a bundle, and are refused with it
SHARED = (("experts", "--experts"), ("n", "--n"), ("dtype", "--dtype"), ("block_shape", "--block-shape"),
          ("device_name", "--device-name"), ("batch_index", "--batch-index"), ("where", "--where"), ("gpu", "--gpu"),
          ("group_size", "--group-size"))


def refuse_with_bundle(args: argparse.Namespace, fail: Callable[[str], Exception]) -> None:
    """``--format bundle`` (every selected decision into one file): the options of the MoE files, given, are
    refused, naming the formats they are for (before, ignored: ``--group-size 2`` exported every size's)."""
    given = [flag for dest, flag in SHARED if getattr(args, dest, None) not in (None, False, [], 0)]
    if given:
        raise fail(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --format vllm-moe or sglang-moe "
                   f"(a fused-MoE config file), not --format {args.format}, which exports every decision selected "
                   "(by --function, --stale)")
    _refuse_others(args, fail)


def _refuse_others(args: argparse.Namespace, fail: Callable[[str], Exception]) -> None:
    """The options of the other format, given: refused, naming the format they are for."""
    for fmt, options in ONLY.items():
        given = [flag for dest, flag in options if getattr(args, dest, None) not in (None, False)]
        if given and fmt != args.format:
            raise fail(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --format {fmt} alone "
                       f"({ENGINES[fmt]}'s file), not --format {args.format}")


def export(args: argparse.Namespace, entries: list[dec.Entry], fail: Callable[[str], Exception]) -> dict[str, Any]:
    """Write the file; returns what was written (path, batch sizes, the entries used). ``fail(text)`` makes the
    exception to raise for the user's mistakes."""
    fmt, engine = args.format, ENGINES[args.format]
    _refuse_others(args, fail)
    if not args.function:
        raise fail(f"--format {fmt} needs --function: one file holds one tuned function's decisions")
    if args.experts is None or args.n is None:
        raise fail(f"--format {fmt} needs --experts E and --n N (they name the file, as {engine} looks it up)")
    filters = _filters(args.where, fail)
    problem = [e for e in entries if e.kernel is None and _matches(e.key, filters)]
    sized = [e for e in problem if args.group_size is None or e.serves_size == args.group_size]
    matching = [e for e in sized if args.gpu is None or args.gpu.strip() in _gpu_names(e)]
    chosen = [e for e in matching if not e.provisional]
    provisional = [e.name for e in matching if e.provisional]
    if not chosen:
        there = sorted({f"{e.gpu} ({gpu_text(e)!r} in 'list')" for e in sized})
        sizes = sorted({e.serves_size for e in problem if e.serves_size is not None})
        raise fail(f"no decision of {args.function!r} matches" + (f" --where {' '.join(args.where)}"
                                                                  if args.where else "")
                   + (f" --group-size {args.group_size}" if args.group_size else "")
                   + (f" --gpu {args.gpu!r}" if args.gpu else "")
                   + (f" but {len(provisional)} provisional one(s) ({PROVISIONAL_NOTE})" if provisional else "")
                   + (f" (the group sizes its decisions serve: {', '.join(map(str, sizes)) or 'none recorded'})"
                      if args.group_size and problem and not sized else "")
                   + (f" (GPUs of its decisions: {', '.join(there)})" if args.gpu and there and not matching else ""))
    gpus = sorted({e.gpu for e in chosen})
    if len(gpus) > 1:
        raise fail(f"decisions tuned on {len(gpus)} GPU models ({', '.join(gpus)}): pick one with --gpu")
    pairs, origin = [], {}
    for entry in chosen:
        try:
            pair = (moe_file.batch_of(entry.key, args.batch_index), moe_file.tile_config(entry.config))
        except ValueError as exc:
            raise fail(f"{entry.name}: {exc}") from None
        first = origin.setdefault(pair[0], (entry, pair[1]))
        if first[1] != pair[1]:
            raise fail(_conflict(pair[0], (first[0], first[1]), (entry, pair[1])))
        pairs.append(pair)
    configs = moe_file.table(pairs)
    folder = Path(args.bundle)
    if folder.exists() and not folder.is_dir():
        raise fail(f"{folder} is not a folder: --format {fmt} writes a file into the folder it is given")
    check_target(folder, _root(args), "folder")
    dtype = _dtype(args, chosen, fail)
    device = args.device_name if args.device_name is not None else gpus[0]
    block = tuple(args.block_shape) if args.block_shape else None
    try:  # the device's and the dtype's text name one file in its folder: never a path out of it
        if fmt == "sglang-moe":
            triton = args.triton_version or _tuned_triton(chosen, fail)
            path = sglang_moe.config_file(folder, args.experts, args.n, device, dtype, triton, block,
                                          args.per_channel_quant, args.down)
            more = {"triton_version": triton, "config_dir": str(folder.absolute()), "down": args.down}
        else:
            path = vllm_moe.config_file(folder, args.experts, args.n, device, dtype, block, args.vllm_version)
            text = moe_file.device_text(device)  # an H200 NVL's file is NVIDIA_H200's: the report says so
            more = {"h200_renamed": text if vllm_moe.h200_renamed(text, args.vllm_version) else None}
    except ValueError as exc:
        raise fail(f"{exc} (--device-name {device!r}, --dtype {dtype!r})") from None
    for sub in path.relative_to(folder).parents:  # SGLang's configs/triton_X_Y_Z/: folders where they are
        if (folder / sub).exists() and not (folder / sub).is_dir():
            raise fail(f"{folder / sub} is not a folder: --format {fmt} writes the file into {path.parent}")
    check_target(path, _root(args), f"{engine} config file")
    path = moe_file.write(path, configs)
    return {"format": fmt, "file": str(path), "batch_sizes": [int(b) for b in configs],
            "entries": [e.name for e in chosen], "provisional_skipped": provisional, **more}


def _dtype(args: argparse.Namespace, chosen: list[dec.Entry], fail: Callable[[str], Exception]) -> str:
    """``--dtype``, else the dtype the keys name (as the example's key ends with it) where it tells the file's dtype
    part alone; else the user must say."""
    if args.dtype is not None:
        return args.dtype
    engine = ENGINES[args.format]
    schemes = sglang_moe.SCHEMES if args.format == "sglang-moe" else vllm_moe.SCHEMES
    found = {moe_file.key_dtype(e.key) for e in chosen}
    if len(found) != 1 or None in found:
        raise fail(f"--format {args.format} needs --dtype (bfloat16 or float16: the file has no dtype part; float32; "
                   "fp8_w8a8, ...): " + ("the keys name no dtype" if found == {None} else
                                         f"the keys name several: {', '.join(sorted(map(str, found)))}"))
    dtype = found.pop()
    if not moe_file.inferable(dtype):  # a file the engine would never open (it asks for fp8_w8a8, not float8_e4m3fn)
        raise fail(f"the keys name {dtype}, whose file name {engine} does not derive from it: give --dtype with "
                   f"{engine}'s name ({', '.join(schemes)}; float32; bfloat16 or float16 for no dtype part)")
    return dtype


def _tuned_triton(chosen: list[dec.Entry], fail: Callable[[str], Exception]) -> str:
    """The Triton version the decisions were tuned under (their files record it), which names SGLang's folder."""
    recorded = [e.versions.get("triton") for e in chosen]
    found = sorted({str(v) for v in recorded if v})
    if len(found) == 1 and all(recorded):
        try:
            sglang_moe.triton_folder(found[0])
        except ValueError as exc:
            raise fail(f"the decisions were tuned under Triton {found[0]}: {exc}") from None
        return found[0]
    says = (f"the decisions record several ({', '.join(found)})" if len(found) > 1 else
            "the decisions record none" if not found else f"only some of the decisions record one ({found[0]})")
    raise fail("--format sglang-moe needs --triton-version X.Y.Z (the Triton SGLang runs, which names the folder "
               f"configs/triton_X_Y_Z/ it looks in): {says}")


def _conflict(batch: int, *choices: tuple[dec.Entry, dict[str, int]]) -> str:
    """The error for two decisions with different configs for one batch size: both files, their ages and configs,
    and the option that picks one where the files tell them apart (``--gpu``, ``--group-size``, ``--where``)."""
    now = time.time()
    both = " and ".join(f"{entry.path} (tuned {dec.age_text(max(0.0, now - entry.created))} ago: {tile})"
                        for entry, tile in choices)
    machines = sorted({gpu_text(entry) for entry, _ in choices})
    if len(machines) > 1:  # the files record the GPU count: --gpu takes it
        return (f"batch size {batch} has two different decisions: {both}, tuned on {' and '.join(map(repr, machines))}"
                f" (as 'list' shows them): pick one with --gpu, e.g. --gpu {machines[0]!r}")
    sizes = [entry.serves_size for entry, _ in choices]
    # the group sizes the files record, when they differ: --group-size picks one (a world size, a TP group's size)
    known = [size for size in sizes if size is not None]
    apart = sorted(set(known)) if len(known) == len(sizes) and len(set(known)) > 1 else []
    # a file without rank_local tuned on one rank may be an older rank-local campaign's, of any group size
    unsized = [entry for entry, _ in choices if entry.rank_local is None and (entry.group_size or 1) == 1]
    if len({entry.key for entry, _ in choices}) == 1 and apart:
        # one key, for groups of different sizes (rank-local campaigns on 2 and then 4 ranks): the files say so
        serving = f", serving calls on {' and '.join(map(str, sizes))} ranks ('list' shows them, 'show' says which)"
        pick = f"pick one with --group-size {apart[0]} (or {' or '.join(map(str, apart[1:]))})"
        if unsized:  # the other file's size, and none for the older one (its 1 is the rank that tuned it)
            sized = next(entry for entry, _ in choices if entry is not unsized[0])
            serving = (f"; {sized.path.name} serves calls on {sized.serves_size} ranks; {unsized[0].path.name} does "
                       "not record on how many (it has no rank_local field: one process's tuning, or an older "
                       "rank-local campaign's on any number of ranks)")
            pick = (f"pick one with --group-size {sized.serves_size} ({sized.path.name}) or --group-size 1 "
                    f"({unsized[0].path.name}: the one rank that tuned it)")
        return (f"batch size {batch} has two different decisions for one key: {both}{serving}: one file holds one "
                f"config per batch size: {pick}, or delete the file not wanted")
    local = [entry for entry, _ in choices if entry.rank_local is not None]
    if len({entry.key for entry, _ in choices}) == 1 and len(local) == 1 and len(set(sizes)) == 1 and not unsized:
        # one key, one size: a rank-local campaign's decision and its whole group's (the files say which; not an
        # older file's group of one, which may be an older rank-local campaign's)
        return (f"batch size {batch} has two different decisions for one key: {both}; both serve calls on {sizes[0]} "
                f"ranks; {local[0].path.name} was tuned by one rank alone (a rank-local campaign, 'local' in 'list'), "
                "the other by its whole group: one file holds one config per batch size: delete the file not wanted")
    if len({entry.key for entry, _ in choices}) == 1:  # one key: told apart by what the files do not record
        unrecorded = ", the number of ranks a rank-local campaign ran on)" if unsized else \
            f"); both serve calls on {sizes[0]} ranks"
        return (f"batch size {batch} has two different decisions for one key: {both}. They differ in what the files "
                f"do not record (cache_key_extra, the devices of the call's tensors{unrecorded}: delete the file not "
                "wanted")
    sized_apart = (f"; --group-size N picks the decisions that serve calls on N ranks: here "
                   f"{' and '.join(map(str, apart))}" if apart else "")
    return (f"batch size {batch} has two different decisions: {both}. Select one problem (E, N, dtype, GPU) per file "
            f"(--where POS=VALUE picks keys{sized_apart}), or remove the decision not wanted ('triton-dist-tune "
            "clear')")


def report(done: dict[str, Any]) -> str:
    """What ``export`` prints after writing the file."""
    engine = ENGINES[done["format"]]
    skipped = (f"skipped {len(done['provisional_skipped'])} provisional decision(s) ({PROVISIONAL_NOTE})\n"
               if done["provisional_skipped"] else "")
    renamed = (f"vLLM 0.11.1 and later look up every H200 ({done['h200_renamed']} here) as NVIDIA_H200: "
               "--vllm-version names the file for an older release\n" if done.get("h200_renamed") else "")
    where = ""
    if done["format"] == "sglang-moe":
        folder = sglang_moe.triton_folder(done["triton_version"])
        where = (f"SGLang reads it with {sglang_moe.ENV}={done['config_dir']} when it runs Triton "
                 f"{done['triton_version']} (SGLang 0.5.3 on, which then reads no config of its own package; "
                 f"before 0.5.3 copy the file into configs/{folder}/ beside SGLang's fused_moe_triton module, into "
                 "configs/ itself before 0.4.7)\n")
        if done["down"]:
            where += ("SGLang 0.5.5 on tiles the down projection's GEMM with this _down file's entries, from 0.5.13 "
                      "at the up-projection file's BLOCK_SIZE_M\n")
    return (f"{skipped}{renamed}wrote {done['file']}: {len(done['batch_sizes'])} tuned batch size(s) "
            f"{', '.join(map(str, done['batch_sizes']))}\n{where}"
            "only batch sizes with a decision in the cache are in the file (none served by an undecided= policy); "
            f"{engine} serves any other batch size with the config of the nearest one in the file")
