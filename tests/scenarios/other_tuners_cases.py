"""Usages ported from TileLang's ``autotune`` and Helion's autotuner to ``autotune``, run by real ranks on real
Triton kernels in the interpreter; tests/test_other_tuners.py asserts what each rank prints.

Usage: python other_tuners_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints
``RESULT {json}``.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr, CLAMP: tl.constexpr):
    """``out = x + alpha * y``; a ``CLAMP`` config is a fast path that is wrong for negative ``y`` (as a config a
    reference check must catch: TileLang's ``ref_prog``, Helion's baseline)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    if CLAMP:
        y = tl.maximum(y, 0.0)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + alpha * y, mask=mask)


SPACE = [{"BLOCK": block, "CLAMP": clamp} for block in (64, 128, 256) for clamp in (False, True)]
RUNS: list[dict] = []  # every run of the tuned function on this rank: its config
#: the tensor-parallel group the function reduces over, where replicas tune (else the world)
TP: list = []


def axpy_reduced(x, y, alpha, *, BLOCK, CLAMP):
    """The kernel, then the sum over ranks (a tensor-parallel partial result)."""
    RUNS.append({"BLOCK": BLOCK, "CLAMP": CLAMP})
    out = torch.empty_like(x)
    axpy_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), alpha, BLOCK=BLOCK, CLAMP=CLAMP)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(out, group=TP[0] if TP else None)
    return out


def reference(x, y, alpha):
    """TileLang's ``ref_prog`` / Helion's ``autotune_baseline_fn``: the same arguments, the plain torch result."""
    out = x + alpha * y
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(out)
    return out


def inputs(negative: bool) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(300, dtype=torch.float32)
    y = -torch.ones(300) if negative else torch.ones(300)
    return x, y


@case
def accuracy():
    """A kernel tuned with a check against a reference: the ``CLAMP`` configs are wrong only where ``y`` is
    negative, which only the last rank's shard holds; they are left out on every rank, and every rank chooses
    alike."""
    tdt.init_distributed()
    rank, size = dist.get_rank(), dist.get_world_size()
    tuned = tdt.autotune(SPACE, key_fn=lambda x, y, alpha: (x.numel(), x.dtype), ref_prog=reference,
                         rtol=1e-5, atol=1e-5, n_repeat=2)(axpy_reduced)
    x, y = inputs(negative=rank == size - 1)
    out = tuned(x, y, 2.0)
    decided = tuned.tuner.decided[(300, torch.float32)]
    emit(decided=decided, right=bool(torch.allclose(out, reference(x, y, 2.0))),
         clamp_runs=sum(1 for r in RUNS if r["CLAMP"]), failed=sorted(
             str(o.config) for o in tuned.tuner.decisions[next(iter(tuned.tuner.decisions))].outcomes
             if o.error))


@case
def accuracy_all_wrong():
    """Every config differs from the reference: the call raises the same error on every rank."""
    tdt.init_distributed()
    tuned = tdt.autotune([c for c in SPACE if c["CLAMP"]], key_fn=lambda x, y, alpha: x.numel(),
                         ref_prog=reference, rtol=1e-5, atol=1e-5, n_repeat=2)(axpy_reduced)
    x, y = inputs(negative=True)
    try:
        tuned(x, y, 2.0)
        emit(raised=None)
    except Exception as exc:  # noqa: BLE001 - what a user meets
        emit(raised=type(exc).__name__, text=str(exc)[:2000])


@case
def budget():
    """Helion's ``autotune_effort='quick'`` / a time bound: ``budget=`` seconds bounds one key's tuning."""
    tdt.init_distributed()

    def slow(x, y, alpha, *, BLOCK, CLAMP):
        time.sleep(0.05)  # sleeps a load cannot shorten: the warm-ups and first round alone pass the budget
        return axpy_reduced(x, y, alpha, BLOCK=BLOCK, CLAMP=CLAMP)

    tuned = tdt.autotune(SPACE + [{"BLOCK": b, "CLAMP": False} for b in (32, 512, 1024)],
                         key_fn=lambda x, y, alpha: x.numel(), budget=1.5, n_repeat=50)(slow)
    x, y = inputs(negative=False)
    start = time.monotonic()
    tuned(x, y, 2.0)
    seconds = time.monotonic() - start
    decision = tuned.tuner.decisions[next(iter(tuned.tuner.decisions))]
    emit(seconds=seconds, decided=tuned.tuner.decided[300], cut=str(decision.cut))


@case
def pinned():
    """A config pinned for production (Helion's ``config=``, one of TileLang's configs): a space of one config, and
    a call with ``autotune=False``: how many runs each makes."""
    tdt.init_distributed()
    one = tdt.autotune([{"BLOCK": 128, "CLAMP": False}], key_fn=lambda x, y, alpha: x.numel())(axpy_reduced)
    x, y = inputs(negative=False)
    RUNS.clear()
    one(x, y, 2.0)
    runs_one = len(RUNS)
    many = tdt.autotune(SPACE, key_fn=lambda x, y, alpha: x.numel())(axpy_reduced)
    RUNS.clear()
    many(x, y, 2.0, autotune=False)
    emit(runs_one=runs_one, decided_one=one.tuner.decided, runs_off=len(RUNS), off_config=RUNS[-1],
         decided_off=many.tuner.decided)


@case
def one_config():
    """Keys decided with no timing, as ``triton.autotune`` decides a lone config: a space of one config (printed, as
    ``autotune_verbose`` prints it), a space that ``prune_fn`` prunes to one on every rank though each rank keeps
    two, and lone configs that raise or differ from ``ref_prog``: each rank's runs of the function, and what is
    decided."""
    tdt.init_distributed()
    rank = dist.get_rank() if dist.is_initialized() else 0
    key_fn = lambda x, y, alpha: x.numel()  # noqa: E731
    x, y = inputs(negative=False)
    one = tdt.autotune([{"BLOCK": 128, "CLAMP": False}], key_fn=key_fn, name="one")(axpy_reduced)
    RUNS.clear()
    out = one(x, y, 2.0, autotune_verbose=True)
    runs_one, right = len(RUNS), bool(torch.allclose(out, reference(x, y, 2.0)))
    decision = one.tuner.decisions[next(iter(one.tuner.decisions))]

    def keeps(config, x, y, alpha):  # rank 0 keeps BLOCK 64 and 128, rank 1 128 and 256: 128 alone on both
        return not config["CLAMP"] and config["BLOCK"] in ((64, 128) if rank == 0 else (128, 256))

    pruned = tdt.autotune(SPACE, key_fn=key_fn, prune_fn=keeps, name="pruned")(axpy_reduced)
    RUNS.clear()
    pruned(x, y, 2.0)
    runs_pruned = list(RUNS)
    failures = {}
    for label, space, ref in (("raises", [{"BLOCK": 0, "CLAMP": False}], None),
                              ("wrong", [{"BLOCK": 64, "CLAMP": True}], reference)):
        lone = tdt.autotune(space, key_fn=key_fn, ref_prog=ref, name=label)(axpy_reduced)
        RUNS.clear()
        try:
            lone(x, -y, 2.0)
            failures[label] = "no error"
        except tdt.AllConfigsFailedError as exc:
            failures[label] = str(exc)
        failures[label + "_runs"] = len(RUNS)
        failures[label + "_decided"] = {str(k): v for k, v in lone.tuner.decided.items()}
    emit(runs_one=runs_one, right=right, decided_one=one.tuner.decided, untimed=getattr(decision, "untimed", None),
         outcomes=[o.to_json() for o in decision.outcomes], runs_pruned=runs_pruned,
         decided_pruned=pruned.tuner.decided, **failures)


@case
def one_config_replicas():
    """:func:`one_config` under ``autotune_replicas=``: two replicas of a 2-rank tensor-parallel group (TP [0, 1] and
    [2, 3], replicas [0, 2] and [1, 3]) tune a space of one config, a space that ``prune_fn`` prunes to one (replica
    0 keeps BLOCK 64 and 128, replica 1 128 and 256), and a lone config that raises on rank 3 alone (replica 1's
    rank 1, after the reduce: no peer is left inside it): each rank's runs of the function, and what is decided."""
    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    tps = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    reps = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    TP[:] = [tps[rank // 2]]
    layout = dict(autotune_pg=TP[0], autotune_replicas=reps[rank % 2])
    key_fn = lambda x, y, alpha: x.numel()  # noqa: E731
    x, y = inputs(negative=False)
    one = tdt.autotune([{"BLOCK": 128, "CLAMP": False}], key_fn=key_fn, name="one")(axpy_reduced)
    RUNS.clear()
    out = one(x, y, 2.0, **layout)
    runs_one, right = len(RUNS), bool(torch.allclose(out, 2 * (x + 2.0 * y)))
    decision = one.tuner.decisions[next(iter(one.tuner.decisions))]

    def keeps(config, x, y, alpha):
        return not config["CLAMP"] and config["BLOCK"] in ((64, 128) if rank < 2 else (128, 256))

    pruned = tdt.autotune(SPACE, key_fn=key_fn, prune_fn=keeps, name="pruned")(axpy_reduced)
    RUNS.clear()
    pruned(x, y, 2.0, **layout)
    runs_pruned = list(RUNS)

    def raising(x, y, alpha, *, BLOCK, CLAMP):
        out = axpy_reduced(x, y, alpha, BLOCK=BLOCK, CLAMP=CLAMP)
        if rank == 3:
            raise RuntimeError("the lone config fails on rank 3")
        return out

    lone = tdt.autotune([{"BLOCK": 64, "CLAMP": False}], key_fn=key_fn, name="raises")(raising)
    RUNS.clear()
    try:
        lone(x, y, 2.0, **layout)
        raised = "no error"
    except tdt.AllConfigsFailedError as exc:
        raised = str(exc)
    where = (300, TP[0], layout["autotune_replicas"])
    emit(runs_one=runs_one, right=right, decided_one=one.tuner.decided_config(*where), untimed=decision.untimed,
         outcomes=[o.to_json() for o in decision.outcomes], runs_pruned=runs_pruned,
         decided_pruned=pruned.tuner.decided_config(*where), raises=raised, raises_runs=len(RUNS),
         raises_decided=lone.tuner.decided_config(*where))


@case
def unknown_variable():
    """A job run twice with ``..._FORCE_AUTOTUNE=1`` (Helion's ``HELION_FORCE_AUTOTUNE``) and a misspelt
    ``..._ALWAYSTUNE=1`` set, meant to tune again: each rank says, once, that neither changes anything, and what to
    set; the second call of the job reads the cache as before."""
    import warnings

    x, y = inputs(negative=False)
    said = []
    for call in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if call == 0:
                tdt.init_distributed()
            tuned = tdt.autotune(SPACE[:2], key_fn=lambda x, y, alpha: x.numel())(axpy_reduced)
            tuned(x, y, 2.0)
        said.append([str(w.message) for w in caught if w.category is RuntimeWarning])
    emit(said=said)


@case
def builder():
    """TileLang's habit: ``autotune`` on a function that builds the kernel for a config and returns it (TileLang's
    ``@autotune`` over ``@tilelang.jit`` tunes the kernel it builds): here each run of the function is what is
    timed, the build. Said once, at the caller's line, on every rank; a port that runs the kernel is not."""
    import warnings

    tdt.init_distributed()

    def build(n, *, BLOCK, CLAMP):
        def run(x, y, out, alpha):
            axpy_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, alpha, BLOCK=BLOCK, CLAMP=CLAMP)
        return run

    builds = tdt.autotune(SPACE[:2], key_fn=lambda n: n)(build)
    runs = tdt.autotune(SPACE[:2], key_fn=lambda x, y, alpha: x.numel())(axpy_reduced)
    x, y = inputs(negative=False)
    said = {}
    for name, call in (("builds", lambda: builds(300)), ("runs", lambda: runs(x, y, 2.0))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
            call()
        said[name] = [(str(w.message), w.category.__name__, os.path.basename(w.filename)) for w in caught]
    emit(said=said)


@triton.jit
def axpy_into_kernel(x_ptr, y_ptr, alpha, BLOCK: tl.constexpr):
    """``y += alpha * x`` over whole blocks (no mask: the grid covers whole blocks only)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(y_ptr + offs) + alpha * tl.load(x_ptr + offs))


def axpy_into(x, y, alpha, *, BLOCK):
    """``y += alpha * x`` in place, its grid ``n // BLOCK`` (no program where ``BLOCK > n``); returns nothing."""
    axpy_into_kernel[(x.numel() // BLOCK,)](x, y, alpha, BLOCK=BLOCK)


def axpy_reference(x, y, alpha):
    """:func:`axpy_into`'s reference, writing ``y`` as it does."""
    y.add_(alpha * x)


@case
def unwritten_output():
    """An in-place kernel that returns nothing, its output ``y`` undeclared, checked against a ``ref_prog`` that
    writes ``y`` too (Helion compares the arguments a kernel mutates with its baseline's): the grid is written
    ``n // BLOCK``, so the ``BLOCK=512`` config launches no program for ``n = 256`` and leaves ``y`` as the caller
    had it. It must fail its check on every rank, not be chosen."""
    tdt.init_distributed()

    tuned = tdt.autotune([{"BLOCK": block} for block in (64, 128, 256, 512)], key_fn=lambda x, y, alpha: x.numel(),
                         ref_prog=axpy_reference, n_repeat=2)(axpy_into)
    x, y = torch.ones(256), torch.arange(256, dtype=torch.float32)
    tuned(x, y, 2.0)
    decision = tuned.tuner.decisions[next(iter(tuned.tuner.decisions))]
    emit(failed={str(o.config): o.error for o in decision.outcomes if o.error},
         right=bool(torch.equal(y, torch.arange(256, dtype=torch.float32) + 2)))


@case
def unwritten_first():
    """As :func:`unwritten_output`, with the config whose grid launches no program (``BLOCK=512`` for ``n = 256``)
    checked first, before any config has written ``y``. On 2 ranks rank 0's ``x`` is zeros, so its ``ref_prog``
    leaves ``y`` as it was and nothing is compared there: only rank 1 can find the config wrong, once a config
    checked later writes ``y``, and every rank must fail it alike (it launches nothing: the fastest, chosen if not
    failed)."""
    tdt.init_distributed()
    alone = not dist.is_initialized() or dist.get_world_size() == 1
    rank = 0 if alone else dist.get_rank()

    tuned = tdt.autotune([{"BLOCK": block} for block in (512, 64, 128, 256)], key_fn=lambda x, y, alpha: x.numel(),
                         ref_prog=axpy_reference, n_repeat=2)(axpy_into)
    x = torch.ones(256) if alone or rank == 1 else torch.zeros(256)
    y = torch.arange(256, dtype=torch.float32)
    tuned(x, y, 2.0)
    decision = tuned.tuner.decisions[next(iter(tuned.tuner.decisions))]
    emit(failed={str(o.config): o.error for o in decision.outcomes if o.error}, chosen=decision.config,
         right=bool(torch.equal(y, torch.arange(256, dtype=torch.float32) + 2 * x)))



@case
def unwritten_sharded():
    """:func:`unwritten_first` with ``sharded=True`` on 2 ranks, ``x`` ones on both: rank 0 checks the config that
    launches no program (``BLOCK=512``), rank 1 the one that writes ``y`` (``BLOCK=64``). Neither rank alone sees both,
    so only the ranks' reports together find config 0 wrong; every rank must fail it alike. Before, it passed on
    rank 0, launching nothing it was the fastest, and it was chosen: ``y`` left unwritten."""
    tdt.init_distributed()
    tuned = tdt.autotune([{"BLOCK": block} for block in (512, 64)], key_fn=lambda x, y, alpha: x.numel(),
                         ref_prog=axpy_reference, n_repeat=2, sharded=True)(axpy_into)
    x, y = torch.ones(256), torch.arange(256, dtype=torch.float32)
    tuned(x, y, 2.0)
    decision = tuned.tuner.decisions[next(iter(tuned.tuner.decisions))]
    emit(failed={str(o.config): o.error for o in decision.outcomes if o.error}, chosen=decision.config,
         right=bool(torch.equal(y, torch.arange(256, dtype=torch.float32) + 2)))

if __name__ == "__main__":
    main()
