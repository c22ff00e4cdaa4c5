"""Multi-rank scenarios for untrusted input and side effects, run as real ranks by tests/test_inputs.py.

Usage: python input_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Prints ``RESULT {json}``.
``MARKER_DIR`` is where a malicious payload would create files if it ever ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
from _cases import case, emit, main, outcome

import triton_dist_tune as tdt
from triton_dist_tune.group.resolve import resolve_group
from triton_dist_tune.group.store import _job_store

#: an outsider: a process that can reach the job's key-value store (it has no authentication) writes a pickle that
#: would create a file when unpickled, under each of the given keys
OUTSIDER = """
import pickle, sys
from torch.distributed import TCPStore

host, port, marker_dir, prefix, *keys = sys.argv[1:]

class Payload:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))

store = TCPStore(host, int(port), is_master=False, wait_for_workers=False)
for n, key in enumerate(keys):
    store.set(prefix + key, pickle.dumps(Payload(f"{marker_dir}/ran-{n}")))
"""


def store_prefix() -> str:
    """What torch puts before the keys of the job's store on the TCP server (found with a probe key)."""
    store = _job_store()
    store.set("input-cases-probe", b"1")
    found = [k for k in store._underlying_non_prefix_store.list_keys() if k.endswith("input-cases-probe")]
    return found[0][: -len("input-cases-probe")]


def tiny(name: str):
    @tdt.autotune([{"block": b} for b in (1, 2)], key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=1,
                  timing="cold", name=name)
    def scale(x, block=1):
        return float(x.sum()) * block

    return scale


@case
def poisoned_store():
    """(a) rank 1 sends a value that is not plain data: both ranks raise the same TypeError at once; (b) an outsider
    writes a pickle as rank 1's message (rank 0 reads it); (c) an outsider writes a pickle as the combined result
    rank 1 reads. No payload ever runs; every rank that read one raises a clear error."""
    tdt.init_distributed()
    rank = dist.get_rank()
    group = resolve_group(None)  # the default group's channel: the one the tuned function talks through
    seen = {"refused": outcome(group.combine, object() if rank == 1 else 1, "sending an object", list)}
    seq = group._seq
    message_key, result_key = f"{group._prefix}{seq + 1}/1", f"{group._prefix}{seq + 2}/all"
    if rank == 1:
        subprocess.run([sys.executable, "-c", OUTSIDER, os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"],
                        os.environ["MARKER_DIR"], store_prefix(), message_key, result_key], check=True, timeout=60)
        from datetime import timedelta

        _job_store().wait([f"{group._prefix}{seq + 1}/all"], timedelta(seconds=60))  # rank 0 read the payload
    seen["message"] = outcome(tiny("poisoned_message"), torch.ones(4))
    if rank == 1:  # rank 0 does not take part: rank 1 alone finds the outsider's "result"
        seen["result"] = outcome(tiny("poisoned_result"), torch.ones(4))
    emit(seen=seen)


def make_cached():
    calls = []

    @tdt.autotune([{"block": b} for b in (1, 2, 4)], key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=1,
                  timing="cold", name="nested_file")
    def scale(x, block=1):
        calls.append(block)
        return float(x.sum()) * block

    return scale, calls


@case
def nested_cache_file():
    """A cache entry nested too deep for the JSON reader (RecursionError on rank 0): every rank tunes again."""
    tdt.init_distributed()
    first, _ = make_cached()
    first(torch.ones(4))
    dist.barrier()
    if dist.get_rank() == 0:
        for path in first.tuner.cache.folder.glob("*.json"):
            path.write_text("[" * 200000 + "]" * 200000)
    dist.barrier()
    again, calls = make_cached()
    emit(result=outcome(again, torch.ones(4)), calls=len(calls))


def chosen(fn, key) -> dict:
    return dict(fn.tuner.decided[key])


@case
def nested_arguments():
    """Tensors inside list and dict arguments are restored (declared) or watched (not declared): the result and the
    arguments after the call are those of one untuned call; an argument with no tensor the tuner can save is
    refused when named in restore_value."""
    tdt.init_distributed()
    space = [{"block": b} for b in (1, 2, 3)]

    def bump(xs, d, block=1):
        xs[0].add_(1.0)  # in place, inside a list
        d["acc"].mul_(2.0)  # in place, inside a dict
        return float(xs[0].sum() + d["acc"].sum()) * block

    seen = {}
    for label, options in (("declared", {"restore_value": ["xs"], "reset_to_zero": []}), ("watched", {})):
        tuned = tdt.autotune(space, key_fn=lambda xs, d: len(xs), n_warmup=1, n_repeat=2, timing="cold",
                             name=f"nested_{label}", **options)(bump)
        xs, d = [torch.ones(4), torch.ones(2)], {"acc": torch.ones(3)}
        out = tuned(xs, d)
        ref_xs, ref_d = [torch.ones(4), torch.ones(2)], {"acc": torch.ones(3)}
        ref = bump(ref_xs, ref_d, **chosen(tuned, 2))
        seen[label] = {"same_result": out == ref, "xs0": xs[0].tolist(), "acc": d["acc"].tolist(),
                       "ref_xs0": ref_xs[0].tolist(), "ref_acc": ref_d["acc"].tolist()}

    class Holder:
        def __init__(self) -> None:
            self.t = torch.ones(2)

    def use(holder, block=1):
        holder.t.add_(1.0)
        return block

    opaque = tdt.autotune(space, key_fn=lambda holder: 0, n_warmup=0, n_repeat=1, timing="cold",
                          restore_value=["holder"], name="opaque")(use)
    seen["opaque"] = outcome(opaque, Holder())
    emit(seen=seen)


@case
def parameter_updated_in_place():
    """An ``nn.Parameter`` a fused optimizer step updates in place (under ``no_grad``), declared in restore_value or
    watched: every config is measured and the parameter after the call is that of one step."""
    tdt.init_distributed()
    space = [{"block": b} for b in (1, 2, 3)]

    def step(w, g, block=1):
        with torch.no_grad():
            w.sub_(0.5 * g)
        dist.all_reduce(g.clone())
        return block

    seen = {}
    for label, options in (("declared", {"restore_value": ["w"]}), ("watched", {})):
        tuned = tdt.autotune(space, key_fn=lambda w, g: w.numel(), n_warmup=1, n_repeat=2, timing="cold",
                             name=f"param_{label}", **options)(step)
        w = torch.nn.Parameter(torch.ones(4))
        result = outcome(tuned, w, torch.ones(4))
        decision = next(iter(tuned.tuner.decisions.values()), None)
        seen[label] = {"result": result, "w": w.tolist(), "requires_grad": w.requires_grad,
                       "states": [o.state for o in decision.outcomes] if decision else None}
    emit(seen=seen)


@case
def gradients_of_the_tuning_call():
    """(a) A fused forward and backward that all-reduces ``w.grad``, with ``w.grad`` None before the call and with
    one held already (inside a list argument): the gradients after the tuning call are those of one untuned call;
    (b) a tensor that requires grad and is no leaf, changed in place: its values are one call's, its autograd
    history is every run's (a warning says so)."""
    tdt.init_distributed()

    def fwd_bwd(x, ws, chunk=1):
        w = ws[0]
        loss = sum((xc @ w).square().sum() for xc in x.chunk(chunk))
        loss.backward()
        dist.all_reduce(w.grad)
        return float(loss.detach())

    def add_(h, y, b=1):
        h.add_(y)
        return h

    seen = {}
    for held in (False, True):
        tuned = tdt.autotune([{"chunk": 1}, {"chunk": 2}], key_fn=lambda x, ws: x.shape[0], n_warmup=1,
                             n_repeat=2, timing="cold", name=f"fwd_bwd_{held}")(fwd_bwd)
        grads = []
        for fn in (tuned, lambda x, ws: fwd_bwd(x, ws, **chosen(tuned, 4))):
            w = torch.ones(3, 2, requires_grad=True)
            if held:
                w.grad = torch.full((3, 2), 5.0)
            fn(torch.ones(4, 3), [w])
            grads.append(w.grad[0, 0].item())
        seen[f"fwd_bwd held={held}"] = grads
    tuned = tdt.autotune([{"b": 1}, {"b": 2}], key_fn=lambda h, y: h.shape[0], n_warmup=1, n_repeat=2,
                         timing="cold", name="non_leaf")(add_)
    grads = []
    for fn in (tuned, add_):
        w, v = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
        h, y = w * 2, v * 1
        out = fn(h, y)
        out.sum().backward()
        grads.append([out[0].item(), h[0].item()])
    seen["non_leaf"] = grads
    emit(seen=seen)


@case
def containers_rebound():
    """A dict argument whose items a run rebinds (a KV cache grown by ``torch.cat``, a counter), with and without
    restore_value, and a list inside it appended to: after the tuning call they hold what one untuned call leaves."""
    tdt.init_distributed()

    def step(x, cache, b=1):
        cache["k"] = torch.cat([cache["k"], x * b])
        cache["n"] = cache["n"] + 1
        cache["log"].append(b)
        dist.all_reduce(x.clone())
        return float(cache["k"].sum())

    seen = {}
    for label, options in (("declared", {"restore_value": ["cache"]}), ("watched", {})):
        tuned = tdt.autotune([{"b": 1}, {"b": 2}], key_fn=lambda x, cache: x.shape[0], n_warmup=1, n_repeat=2,
                             timing="cold", name=f"containers_{label}", **options)(step)
        got = []
        for fn in (tuned, lambda x, cache: step(x, cache, **chosen(tuned, 1))):
            cache = {"k": torch.zeros(1), "n": 0, "log": []}
            out = fn(torch.ones(1), cache)
            got.append([out, cache["k"].tolist(), cache["n"], cache["log"]])
        seen[label] = got
    emit(seen=seen)


@case
def object_state():
    """A tuned method of an ``nn.Module`` decode step that writes its buffer at ``self.pos`` and advances it (object
    state the tuner does not put back: a warning says so), and a module argument whose parameter a run changes in
    place, undeclared (a warning) and named in ``restore_value`` (one call's effect after the tuning call)."""
    tdt.init_distributed()

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("kv", torch.zeros(4))
            self.pos = 0

        @tdt.autotune([{"b": 1}, {"b": 2}], key_fn=lambda self, x: 0, n_warmup=1, n_repeat=2, timing="cold",
                      name="decode_step")
        def step(self, x, b=1):
            self.kv[self.pos] = x * b
            self.pos += 1
            dist.all_reduce(x.clone())
            return float(self.kv.sum())

    def scale_(layer, b=1):
        with torch.no_grad():
            layer.weight.mul_(2.0)
        return b

    seen = {}
    decoder = Decoder()
    seen["decode"] = outcome(decoder.step, torch.tensor(1.0))
    seen["decoder"] = [decoder.pos, decoder.kv.tolist()]
    tuned = tdt.autotune([{"b": 1}, {"b": 2}], key_fn=lambda layer: 0, n_warmup=1, n_repeat=2, timing="cold",
                         name="module_scale")(scale_)
    layer = torch.nn.Linear(2, 2, bias=False)
    torch.nn.init.ones_(layer.weight)
    seen["scaled"] = outcome(tuned, layer)
    seen["weight"] = layer.weight.flatten().tolist()
    declared = tdt.autotune([{"b": 1}, {"b": 2}], key_fn=lambda layer: 0, n_warmup=1, n_repeat=2, timing="cold",
                            restore_value=["layer"], name="module_scale_declared")(scale_)
    torch.nn.init.ones_(layer.weight)
    seen["declared"] = outcome(declared, layer)
    seen["declared_weight"] = layer.weight.flatten().tolist()
    emit(seen=seen)


@case
def numpy_and_list_keys():
    """key_fn returns a Python int on rank 0 and the numpy integer of the same value on rank 1; then a list."""
    import numpy as np

    tdt.init_distributed()
    rank = dist.get_rank()

    def f(x, b=1):
        dist.all_reduce(x.clone())
        return b

    mixed = tdt.autotune([{"b": 1}, {"b": 2}], key_fn=lambda x: x.numel() if rank == 0 else np.int64(x.numel()),
                         n_warmup=0, n_repeat=1, timing="cold", name="numpy_key")(f)
    listed = tdt.autotune([{"b": 1}, {"b": 2}], key_fn=lambda x: [x.numel()], n_warmup=0, n_repeat=1,
                          timing="cold", name="list_key")(f)
    emit(seen={"mixed": outcome(mixed, torch.ones(4)), "listed": outcome(listed, torch.ones(4))})


@case
def post_hook_after_a_failing_run():
    """A pre_hook / post_hook pair keeping a phase counter (pre opens a phase, post closes it) and a config whose run
    raises after the function's all_reduce, on every rank, in both timing modes: only that config fails."""
    tdt.init_distributed()
    seen = {}
    for timing in ("steady", "cold"):
        depth = [0]

        def pre(config, x, depth=depth):
            if depth[0] != 0:
                raise RuntimeError("pre_hook: the phase the previous run opened was never closed")
            depth[0] += 1

        def post(config, x, depth=depth):
            depth[0] -= 1

        def fn(x, block=1):
            dist.all_reduce(x.clone())
            if block == 2:
                raise RuntimeError("config 2 fails")
            return block

        tuned = tdt.autotune([{"block": b} for b in (1, 2, 3)], key_fn=lambda x: x.numel(), pre_hook=pre,
                             post_hook=post, n_warmup=1, n_repeat=2, timing=timing, name=f"posthook_{timing}")(fn)
        result = outcome(tuned, torch.ones(2))
        decision = next(iter(tuned.tuner.decisions.values()), None)
        seen[timing] = {"result": result, "states": [o.state for o in decision.outcomes] if decision else None}
    emit(seen=seen)


@case
def random_state():
    """A function that draws random numbers (dropout-like), tuned lock-step and sharded on ranks seeded alike:
    the result and the next draw are those of one untuned call with the chosen config, on every rank."""
    tdt.init_distributed()
    space = [{"block": b} for b in (1, 2, 3, 4)]

    def dropout(x, block=1):
        keep = torch.rand(x.shape) > 0.5
        return (x * keep).sum().item() * block

    seen = {}
    for sharded in (False, True):
        tuned = tdt.autotune(space, key_fn=lambda x: x.numel(), n_warmup=1, n_repeat=2, timing="cold",
                             sharded=sharded, name=f"dropout_{sharded}")(dropout)
        x = torch.arange(64, dtype=torch.float32)
        torch.manual_seed(1234)
        out = tuned(x)
        after = torch.rand(5).tolist()
        torch.manual_seed(1234)
        ref = dropout(x, **chosen(tuned, 64))
        ref_after = torch.rand(5).tolist()
        seen[f"sharded={sharded}"] = {"out": out, "ref": ref, "after": after, "ref_after": ref_after}
    emit(seen=seen)


@case
def nan_fill_in_a_group():
    """Logits scaled in place, all-reduced, then sampled (``torch.multinomial``): a run that starts from the tuner's
    NaN fill (its check of outputs written whole) raises on the ranks that sample (``SAMPLERS``: every rank, or rank 0
    alone), lock-step in both timing modes, and sharded; with ``READ_FIRST=1`` the sampling comes before the
    all_reduce (steady timing alone), so a rank that raises leaves the others inside it."""
    tdt.init_distributed()
    samplers = {int(r) for r in os.environ["SAMPLERS"].split(",")}
    read_first = os.environ.get("READ_FIRST") == "1"  # the sampling before the all_reduce: a peer is left inside it
    seen = {}
    modes = (("steady", {}),) if read_first else (("steady", {}), ("cold", {"timing": "cold"}),
                                                   ("sharded", {"sharded": True}))
    for label, options in modes:
        def sample_(logits, *, b):
            logits.div_(0.7)
            drawn = None
            if read_first and dist.get_rank() in samplers:
                drawn = torch.multinomial(logits.softmax(-1), 1).sum().item()
            if not options.get("sharded"):
                dist.all_reduce(logits.clone())
            if dist.get_rank() in samplers and drawn is None:
                drawn = torch.multinomial(logits.softmax(-1), 1).sum().item()
            return drawn if drawn is not None else float(logits.sum())

        tuned = tdt.autotune([{"b": b} for b in range(4)], key_fn=lambda logits: 0, n_warmup=1, n_repeat=2,
                             name=f"nanfill_{label}", **options)(sample_)
        logits = torch.randn(8, 32)
        before = logits.clone()
        result = outcome(tuned, logits)
        decision = next(iter(tuned.tuner.decisions.values()), None)
        seen[label] = {"result": result, "one_call": bool(torch.allclose(logits, before / 0.7)),
                       "states": [[o.state, o.error] for o in decision.outcomes] if decision else None}
    emit(seen=seen)


@case
def nan_fill_staggered():
    """Rank 0 samples before the first all_reduce, rank 1 between the first and the second: each rank's raise from
    the NaN fill leaves the other inside a collective, at a different point (found by a reviewer)."""
    tdt.init_distributed()
    rank = dist.get_rank()

    def sample_(logits, *, b):
        logits.div_(0.7)
        if rank == 0:
            torch.multinomial(logits.softmax(-1), 1)
        dist.all_reduce(logits.clone())
        if rank == 1:
            torch.multinomial(logits.softmax(-1), 1)
        dist.all_reduce(logits.clone())
        return float(logits.sum())

    tuned = tdt.autotune([{"b": b} for b in range(4)], key_fn=lambda logits: 0, n_warmup=1, n_repeat=2,
                         name="nanfill_staggered")(sample_)
    result = outcome(tuned, torch.randn(8, 32))
    decision = next(iter(tuned.tuner.decisions.values()), None)
    emit(result=result, states=[[o.state, o.error] for o in decision.outcomes] if decision else None)


@case
def nan_fill_found_in_the_warm_up_run_again():
    """Rank 1 writes the logits only from config 1 on, both ranks sample after the all_reduce: in config 1's warm-up
    rank 0 raises from the fill, and rank 1 first finds the logits changed, so its warm-up run again would fill them
    (found by a reviewer)."""
    tdt.init_distributed()
    rank = dist.get_rank()

    def sample_(logits, *, b):
        if rank == 0 or b >= 1:
            logits.div_(0.7)
        dist.all_reduce(logits.clone())
        return torch.multinomial(logits.softmax(-1), 1).sum().item()

    tuned = tdt.autotune([{"b": b} for b in range(4)], key_fn=lambda logits: 0, n_warmup=1, n_repeat=2,
                         name="nanfill_again")(sample_)
    result = outcome(tuned, torch.randn(8, 32))
    decision = next(iter(tuned.tuner.decisions.values()), None)
    emit(result=result, states=[[o.state, o.error] for o in decision.outcomes] if decision else None)


def _inside(name: str) -> bool:
    """Whether a function named ``name`` is on the calling stack."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != name:
        frame = frame.f_back
    return frame is not None


@case
def nan_fill_then_replicas_leaders():
    """Two replicas of a 2-rank tensor-parallel group (TP [0, 1] and [2, 3]; replicas [0, 2] and [1, 3]); TP rank 0
    samples after the TP all_reduce, so its raise from the NaN fill leaves no peer inside it and the group runs the
    warm-up again. Config 2 (replica 0's share) is the fastest; in the leaders' race, rank 1's warm-up of it takes
    ``SLOW`` s, longer than a peer's failure grace (found by a reviewer)."""
    from _cases import spend, virtual_clock

    tdt.init_distributed(backend="gloo")
    rank = dist.get_rank()
    tps = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    reps = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp, rep = tps[rank // 2], reps[rank % 2]
    slow = float(os.environ.get("SLOW", "7"))

    def sample_(logits, *, b):
        logits.div_(0.7)
        dist.all_reduce(logits.clone(), group=tp)
        if rank % 2 == 0:
            torch.multinomial(logits.softmax(-1), 1)
        if rank == 1 and b == 2 and _inside("_settle") and _inside("_warm"):
            time.sleep(slow)
        spend(0.5 if b == 2 else 1.0)
        return float(logits.sum())

    tuned = tdt.autotune([{"b": b} for b in range(4)], key_fn=lambda logits: 0, n_warmup=1, n_repeat=2,
                         name="nanfill_replicas")(sample_)
    with virtual_clock("host"):
        result = outcome(tuned, torch.randn(8, 32), autotune_pg=tp, autotune_replicas=rep)
    decision = next(iter(tuned.tuner.decisions.values()), None)
    emit(result=result, states=[[o.state, o.error] for o in decision.outcomes] if decision else None)


@case
def forged_board_count():
    """Rank 1 stands in for an outsider: once the tuning's failure board opens, it adds ``FORGED`` to the board's
    report count (any process that reaches the store can; found by a reviewer). Reports each rank's seconds."""
    from triton_dist_tune.group import store_board

    tdt.init_distributed()
    forged = int(os.environ.get("FORGED", "0"))
    if dist.get_rank() == 1 and forged:
        opened = store_board.StoreBoard.__init__

        def outsider(self, *args, **kwargs):
            opened(self, *args, **kwargs)
            self.store.add(f"{self.scope}count", forged)

        store_board.StoreBoard.__init__ = outsider
    began = time.monotonic()
    result = outcome(tiny("forged_board"), torch.ones(8))
    emit(result=result, seconds=time.monotonic() - began)


def _campaign_kernel(name: str):
    @tdt.autotune([{"variant": v} for v in range(2)], key_fn=lambda x: x.shape[0], n_warmup=1, n_repeat=2,
                  timing="cold", name=name)
    def kernel(x, *, variant):
        time.sleep(0.002 if variant == 0 else 0.02)
        return x * (variant + 1)

    return kernel


@case
def campaign_rows():
    """A local campaign over keys 8 and 16 on two ranks, each its own "node" (cache folder and local rank 0). With
    ``FORGED_ENTRY``, rank 1 stands in for an outsider: its row of the round's exchange names the cache entry
    ``../../PWNED`` with a record of its own (found by a reviewer)."""
    from triton_dist_tune.function import summary

    tdt.init_distributed()
    forged = os.environ.get("FORGED_ENTRY")
    if dist.get_rank() == 1 and forged:
        sent = summary.KeyResult.to_json

        def outsider(self):
            data = sent(self)
            if data.get("record") is not None:
                data["entry"], data["record"] = forged, {"anything": "the outsider wants", "index": 0}
            return data

        summary.KeyResult.to_json = outsider
    try:
        rows = [(r.key, r.state) for r in tdt.campaign(_campaign_kernel("rows"), lambda n: torch.ones(n), [8, 16],
                                                        local=True).rows]
        emit(rows=rows)
    except Exception as exc:
        emit(error=f"{type(exc).__name__}: {exc}"[:600])


if __name__ == "__main__":
    main()
