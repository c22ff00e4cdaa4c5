"""Scenarios for tuned calls inside a CUDA-graph capture (docs/cuda-graphs.md), run as real processes by
tests/test_capture.py: real tuners, real Triton kernels in the interpreter, real gloo ranks and cache folders.

Usage: python capture_cases.py CASE [CASE ...]  (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set for the cases on two
ranks). Prints ``RESULT {json}``.

No GPU runs here, so a capture cannot really run. :class:`Capture` makes the package believe one is in progress at
the narrowest point: :func:`triton_dist_tune.capture.capturing` answers ``torch.cuda.is_current_stream_capturing()``
behind a cached ``torch.cuda.is_available()`` (``capture._cuda``); the cache is set to True, as on a GPU machine,
and the predicate answers whether the scenario is "inside" a capture. Nothing else is replaced: the other hooks
only count (the predicate's asks, the group's exchanges, fetches of the job's key-value store, file events under
the tuner's cache and log folders, through an audit hook). The GPU run of the same promises is
benchmarks/check_cuda_graphs.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import contextlib  # noqa: E402
import hashlib  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune import capture as capture_module  # noqa: E402
from triton_dist_tune import settings  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402
from triton_dist_tune.disk import logs  # noqa: E402
from triton_dist_tune.group import store as store_module  # noqa: E402
from triton_dist_tune.group.resolve import find_group, resolve_group  # noqa: E402

#: file events that read or change a folder's files
FILE_EVENTS = ("open", "os.listdir", "os.scandir", "os.rename", "os.remove", "os.mkdir", "os.rmdir", "os.truncate")


class Capture:
    """The "capture" of this process (see the module docstring) and what happened while it was on."""

    def __init__(self) -> None:
        self.active = False
        self.asks = 0  # is_current_stream_capturing() calls while active
        self.store = 0  # fetches of the job's key-value store while active (any thread)
        self.exchanges: list[str] = []  # the labels of the group exchanges made while active
        self.files: list[str] = []  # file events under the cache and log folders while active

    def install(self) -> None:
        capture_module._cuda = True  # as on a GPU machine: capturing() now asks the predicate
        torch.cuda.is_current_stream_capturing = self._predicate
        real_store = store_module._job_store

        def counted_store():
            if self.active:
                self.store += 1
            return real_store()

        store_module._job_store = counted_store
        sys.addaudithook(self._audit)

    def count_exchanges(self, group) -> None:
        """Record the label of every exchange ``group`` (a channel object) makes while the capture is on."""
        combine = group.combine

        def counted(obj, what, fn, timeout=None):
            if self.active:
                self.exchanges.append(what)
            return combine(obj, what, fn, timeout)

        group.combine = counted

    def _predicate(self) -> bool:
        if self.active:
            self.asks += 1
        return self.active

    def _audit(self, event: str, args: tuple) -> None:
        if not self.active or event not in FILE_EVENTS or not args:
            return
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if isinstance(path, str) and any(path.startswith(str(root)) for root in roots()):
            self.files.append(f"{event} {path}")

    @contextlib.contextmanager
    def on(self):
        """Inside a "capture": the counters start from zero."""
        self.asks, self.store, self.exchanges, self.files = 0, 0, [], []
        self.active = True
        try:
            yield self
        finally:
            self.active = False

    def seen(self) -> dict:
        return {"asks": self.asks, "store": self.store, "exchanges": self.exchanges, "files": self.files}


CAPTURE = Capture()


def roots() -> list[Path]:
    return [settings.current().cache_dir, logs.log_dir()]


def snapshot(root: Path) -> dict[str, list]:
    """Every file under ``root``: [size, mtime_ns, sha256 of its bytes]."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): [p.stat().st_size, p.stat().st_mtime_ns,
                                       hashlib.sha256(p.read_bytes()).hexdigest()[:16]]
            for p in sorted(root.rglob("*")) if p.is_file()}


def snapshots() -> dict[str, dict]:
    return {"cache": snapshot(settings.current().cache_dir), "logs": snapshot(logs.log_dir())}


def cache_files() -> list[str]:
    """The cache folder's files but the versions records (``.versions-*``, written beside the first decision
    stored: ``disk/versions.py``); :func:`snapshot` has them all."""
    return sorted(f for f in snapshot(settings.current().cache_dir) if not f.startswith(".versions-"))


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def attempt(fn, expect: torch.Tensor, *args, **kwargs) -> dict:
    """Call ``fn``: ``{"ok": whether it returned expect}``, or the exception's type and message."""
    try:
        return {"ok": bool(torch.equal(fn(*args, **kwargs), expect))}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def captured(fn, expect: torch.Tensor, *args, **kwargs) -> dict:
    """Call ``fn`` inside a "capture" (between barriers on a group, so that no rank's other work is seen): what
    :func:`attempt` says, what the capture saw and whether the cache and log folders changed."""
    barrier()
    before = snapshots()
    with CAPTURE.on():
        result = attempt(fn, expect, *args, **kwargs)
    after = snapshots()
    barrier()
    return {**result, **CAPTURE.seen(), "cache_changed": before["cache"] != after["cache"],
            "logs_changed": before["logs"] != after["logs"]}


# -- autotune: a function launching one Triton kernel with the config's BLOCK ---------------------------------------


@triton.jit
def add_one_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1.0, mask=mask)


SPACE = [{"BLOCK": 32}, {"BLOCK": 64}, {"BLOCK": 128}]


def add_one_function(runs: list[int]):
    """The undecorated function: records each run's BLOCK, launches the kernel, returns x + 1."""

    def add_one(x: torch.Tensor, *, BLOCK: int) -> torch.Tensor:  # noqa: N803 - a Triton meta-parameter
        runs.append(BLOCK)
        out = torch.empty_like(x)
        n = x.numel()
        add_one_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
        return out

    return add_one


def numel(x: torch.Tensor) -> int:
    return x.numel()


@case
def autotune_undecided_raises():
    """An undecided key inside a capture under the default policy: CaptureError before anything runs; after the
    capture, the same call tunes."""
    CAPTURE.install()
    runs: list[int] = []
    f = tdt.autotune(SPACE, key_fn=numel, n_warmup=0, n_repeat=2, name="cap_raise")(add_one_function(runs))
    x = torch.arange(64, dtype=torch.float32)
    inside = captured(f, x + 1, x)
    runs_inside, files_inside = list(runs), cache_files()
    out = f(x)
    emit(inside=inside, runs_inside=runs_inside, cache_files_inside=files_inside, runs_after=len(runs),
         decided=sorted(f.tuner.decided), cache_files_after=cache_files(), ok_after=bool(torch.equal(out, x + 1)))


def pruned(config: dict, x: torch.Tensor) -> bool:
    """BLOCK 32 is never kept; for 64 elements only BLOCK 128 is (so that key 64's decision is 128, never the first
    kept config, 64)."""
    return config["BLOCK"] == 128 if x.numel() == 64 else config["BLOCK"] >= 64


@case
def autotune_served_alone():
    """Undecided keys inside a capture served by ``undecided="first"``, ``"nearest"`` (a neighbour decided ahead
    by a campaign), ``TRITON_DIST_AUTOTUNE_UNDECIDED=first`` and a call with ``autotune=False``."""
    CAPTURE.install()
    x65 = torch.arange(65, dtype=torch.float32)
    report = {}
    runs_first: list[int] = []
    first = tdt.autotune(SPACE, key_fn=numel, prune_fn=pruned, undecided="first", name="cap_first")(
        add_one_function(runs_first))
    report["first"] = {**captured(first, x65 + 1, x65), "runs": list(runs_first),
                       "decided": sorted(first.tuner.decided)}

    runs_nearest: list[int] = []
    nearest = tdt.autotune(SPACE, key_fn=numel, prune_fn=pruned, undecided="nearest", n_warmup=0, n_repeat=2,
                           name="cap_nearest")(add_one_function(runs_nearest))
    tdt.campaign(nearest, [torch.arange(64, dtype=torch.float32)], progress=False)  # tunes key 64 ahead
    decided_64 = nearest.tuner.decided.get(64)
    runs_nearest.clear()
    report["nearest"] = {**captured(nearest, x65 + 1, x65), "runs": list(runs_nearest), "decided_64": decided_64,
                         "decided": sorted(nearest.tuner.decided)}

    runs_env: list[int] = []
    by_env = tdt.autotune(SPACE, key_fn=numel, prune_fn=pruned, name="cap_env")(add_one_function(runs_env))
    os.environ["TRITON_DIST_AUTOTUNE_UNDECIDED"] = "first"
    try:
        report["env"] = {**captured(by_env, x65 + 1, x65), "runs": list(runs_env),
                         "decided": sorted(by_env.tuner.decided)}
    finally:
        del os.environ["TRITON_DIST_AUTOTUNE_UNDECIDED"]

    runs_off: list[int] = []
    off = tdt.autotune(SPACE, key_fn=numel, prune_fn=pruned, name="cap_off")(add_one_function(runs_off))
    report["off"] = {**captured(off, x65 + 1, x65, autotune=False), "runs": list(runs_off),
                     "decided": sorted(off.tuner.decided)}
    emit(**report, cache_files=cache_files())


@case
def autotune_served_on_two_ranks():
    """``undecided="first"`` on a group of two inside a capture: a function whose ranks must agree (collective) and
    a rank-local one (``sharded=True``); then the collective one's key again, inside a capture again."""
    CAPTURE.install()
    tdt.init_distributed(backend="gloo")
    CAPTURE.count_exchanges(resolve_group(None))
    x = torch.arange(65, dtype=torch.float32) + dist.get_rank()
    runs: list[int] = []
    collective = tdt.autotune(SPACE, key_fn=numel, prune_fn=pruned, undecided="first", name="cap_first_group")(
        add_one_function(runs))
    inside = {**captured(collective, x + 1, x), "runs": list(runs)}
    runs_sharded: list[int] = []
    sharded = tdt.autotune(SPACE, key_fn=numel, prune_fn=pruned, undecided="first", sharded=True,
                           name="cap_first_sharded")(add_one_function(runs_sharded))
    inside_sharded = {**captured(sharded, x + 1, x), "runs": list(runs_sharded)}
    runs.clear()
    again = {**captured(collective, x + 1, x), "runs": list(runs)}
    emit(collective=inside, sharded=inside_sharded, collective_again=again,
         decided=sorted(collective.tuner.decided) + sorted(sharded.tuner.decided), cache_files=cache_files())


@case
def autotune_decided_on_two_ranks():
    """A key tuned outside, then called inside a capture: on the default group, with ``autotune_pg=``, and with
    ``autotune_pg=`` and ``autotune_replicas=``."""
    CAPTURE.install()
    tdt.init_distributed(backend="gloo")
    channels = {id(c): c for c in (resolve_group(None), resolve_group(dist.group.WORLD))}
    for channel in channels.values():  # one channel object for both, as it happens: each counted once
        CAPTURE.count_exchanges(channel)
    x = torch.arange(64, dtype=torch.float32) + dist.get_rank()
    runs: list[int] = []
    f = tdt.autotune(SPACE, key_fn=numel, n_warmup=0, n_repeat=2, name="cap_decided")(add_one_function(runs))
    f(x)  # tunes key 64 on both ranks
    decided = f.tuner.decided[64]["BLOCK"]
    runs.clear()
    inside = {**captured(f, x + 1, x), "runs": list(runs)}
    runs_pg: list[int] = []
    g = tdt.autotune(SPACE, key_fn=numel, n_warmup=0, n_repeat=2, name="cap_decided_pg")(add_one_function(runs_pg))
    g(x, autotune_pg=dist.group.WORLD)
    decided_pg = next(iter(g.tuner.decided_in.values()))["BLOCK"]
    runs_pg.clear()
    inside_pg = {**captured(g, x + 1, x, autotune_pg=dist.group.WORLD), "runs": list(runs_pg)}
    # a DP x TP layer's call: each rank its own one-rank TP group, the two ranks the replicas of one another
    singles = [dist.new_group([r]) for r in range(dist.get_world_size())]
    layout = {"autotune_pg": singles[dist.get_rank()], "autotune_replicas": dist.group.WORLD}
    runs_layout: list[int] = []
    h = tdt.autotune(SPACE, key_fn=numel, n_warmup=0, n_repeat=2, name="cap_decided_layout")(
        add_one_function(runs_layout))
    h(x, **layout)
    decided_layout = next(iter(h.tuner.decided_in.values()))["BLOCK"]
    runs_layout.clear()
    inside_layout = {**captured(h, x + 1, x, **layout), "runs": list(runs_layout)}
    runs_layout.clear()  # a keyword that takes the slow path: its capture check finds the layout's decision
    slow_layout = {**captured(h, x + 1, x, **layout, autotune_allow_arg_overwrite=True), "runs": list(runs_layout)}
    # a group object no call has used: nothing decided for it, and it is not set up inside the capture
    fresh = dist.new_group(list(range(dist.get_world_size())))
    runs_layout.clear()
    fresh_group = {**captured(h, x + 1, x, autotune_pg=fresh), "runs": list(runs_layout),
                   "set_up": find_group(fresh) is not None}
    emit(decided=decided, inside=inside, decided_pg=decided_pg, inside_pg=inside_pg, decided_layout=decided_layout,
         inside_layout=inside_layout, slow_layout=slow_layout, fresh_group=fresh_group)


# -- contextual_autotune: a function launching one triton.autotune kernel --------------------------------------------

#: (n, BLOCK) of every launch of copy_kernel that runs a config (the config's pre_hook), tuning or decided
LAUNCHES: list[tuple[int, int]] = []


def recorder(block: int):
    def hook(nargs):
        LAUNCHES.append((int(nargs["n"]), block))

    return hook


@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=recorder(b)) for b in (256, 512)], key=["n"])
@triton.jit
def copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def copy(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


def chosen(tuned) -> dict[str, str]:
    """The decided (kernel, key)s: {key text: config text}."""
    return {str(key): str(d["config"]) for (_, key), d in sorted(tuned.tuner.decisions.items())}


def contextual_call(tuned, n: int, inside: bool) -> dict:
    """One call with ``n`` elements, inside a "capture" or not: its outcome, what the capture saw, the launches that
    ran a config and whether the output is the input."""
    x = torch.arange(n, dtype=torch.float32)
    start = len(LAUNCHES)
    if inside:
        made = captured(tuned, x, x)
    else:
        barrier()
        made = attempt(tuned, x, x)
    made["launches"] = [list(item) for item in LAUNCHES[start:]]
    return made


@case
def contextual_alone():
    """``contextual_autotune(is_dist=False)``: its first call inside a capture, a tuned key inside one, then a new
    key inside one, and that key after the capture."""
    CAPTURE.install()
    tuned = contextual_autotune(is_dist=False, n_warmup=1, n_repeat=2, name="cap_ctx")(copy)
    calls = [("first_inside", 64, True), ("tunes", 64, False), ("decided_inside", 64, True),
             ("new_key_inside", 200, True), ("new_key_after", 200, False)]
    report = {}
    for label, n, inside in calls:
        report[label] = contextual_call(tuned, n, inside)
        report[label]["chosen"] = chosen(tuned)
    emit(**report, cache_files=cache_files())


@case
def contextual_deferred_agreement():
    """``sync_every=4`` on two ranks. Call 2: rank 1 alone meets key 96 (pending there). Call 3 (decided) and 4 (an
    agreement point) inside a capture; 5 outside (n=96); 6 (decided), 7 (a new key) and 8 (an agreement point)
    inside; 9 outside."""
    CAPTURE.install()
    tdt.init_distributed(backend="gloo")
    group = resolve_group(None)
    labels: list[tuple[int, str]] = []  # (call, label) of every exchange of the group, inside a capture or not
    combine = group.combine
    call_number = [0]

    def recorded(obj, what, fn, timeout=None):
        labels.append((call_number[0], what))
        if CAPTURE.active:
            CAPTURE.exchanges.append(what)
        return combine(obj, what, fn, timeout)

    group.combine = recorded
    tuned = contextual_autotune(n_warmup=1, n_repeat=2, sync_every=4, name="cap_sync")(copy)
    rank = dist.get_rank()
    plan = [(64, False), (96 if rank == 1 else 64, False), (64, True), (64, True), (96, False), (64, True),
            (200, True), (64, True), (64, False)]
    report = []
    for number, (n, inside) in enumerate(plan, start=1):
        call_number[0] = number
        made = contextual_call(tuned, n, inside)
        made.update(call=number, n=n, inside=inside, chosen=chosen(tuned),
                    pending=sorted(str(tid) for slots in tuned.tuner.pending.values() for tid, _ in slots.values()))
        report.append(made)
    emit(calls=report, agreed_calls=tuned.tuner.agreed_calls,
         agreements=[[c, w] for c, w in labels if "agreement at call" in w], chosen=chosen(tuned))


if __name__ == "__main__":
    main()
