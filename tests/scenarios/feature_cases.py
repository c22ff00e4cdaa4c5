"""Multi-rank scenarios for side effects, correctness checks, compilation and sharded tuning.

Usage: python feature_cases.py CASE (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Prints ``RESULT {json}``.
"""

from __future__ import annotations

import collections
import logging
import os
import time

import torch
import torch.distributed as dist
import triton
import triton.language as tl
from _cases import case, emit, main, spend, virtual_clock

import triton_dist_tune as tdt


def space(n=3):
    return [{"variant": v} for v in range(n)]


@case
def restore_value():
    """An in-place update is applied exactly once, tuning or not; without restore_value it is applied per run."""
    tdt.init_distributed()
    out = {}
    for label, options in (("restored", {"restore_value": ["x"]}), ("plain", {})):
        @tdt.autotune(space(), key_fn=lambda x: 0, n_warmup=1, n_repeat=2, name=f"inplace_{label}", **options)
        def bump(x, *, variant):
            time.sleep(0.001 * (variant + 1))
            x.add_(1.0)
            dist.all_reduce(torch.zeros(1))
            return x.sum()

        x = torch.arange(4.0)
        total = bump(x)
        out[label] = {"x": x.tolist(), "total": float(total)}
    emit(**out)


@case
def reset_to_zero():
    """An accumulating output holds exactly one call's contribution after tuning."""
    tdt.init_distributed()
    out = {}
    for label, options in (("reset", {"reset_to_zero": ["acc"]}), ("plain", {})):
        @tdt.autotune(space(), key_fn=lambda a, acc: 0, n_warmup=1, n_repeat=2, name=f"acc_{label}", **options)
        def accumulate(a, acc, *, variant):
            time.sleep(0.001 * (variant + 1))
            acc += a
            return None

        a, acc = torch.full((3,), 2.0), torch.zeros(3)
        accumulate(a, acc)
        out[label] = acc.tolist()
    emit(**out)


@case
def written_output():
    """An output buffer every config writes whole is left as the last run wrote it (no copy back before each run,
    no warning), each config's first run checked from NaN; one a config writes in part is restored as before."""
    tdt.init_distributed()
    out = {}
    for label, part in (("whole", {}), ("part", {2: 2})):  # variant -> elements it writes (all when absent)
        seen = collections.Counter()
        base = torch.full((4,), -1.0)

        @tdt.autotune(space(), key_fn=lambda a, c: 0, n_warmup=1, n_repeat=2, name=f"written_{label}")
        def scale(a, c, *, variant):
            first = float(c[3])
            seen["nan" if first != first else "saved" if first == -1.0 else "left"] += 1
            time.sleep(0.001 * (variant + 1))
            n = part.get(variant, 4)
            c[:n] = a[:n] * (variant + 1)
            dist.all_reduce(torch.zeros(1))
            return c

        c = base.clone()
        scale(torch.arange(4.0), c)
        out[label] = {"c": c.tolist(), "chosen": scale.tuner.decided[0]["variant"], "seen": dict(sorted(seen.items()))}
    emit(**out)


@case
def wrong_on_one_rank():
    """The fastest config gives a wrong result on rank 1 only: left out everywhere."""
    tdt.init_distributed()
    rank = dist.get_rank()

    def reference(x):
        return x * 2

    @tdt.autotune(space(), key_fn=lambda x: 0, n_warmup=1, n_repeat=2, ref_prog=reference, rtol=0, atol=0,
                  name="wrong")
    def double(x, *, variant):
        ms = [160.0, 20.0, 5.0][variant]  # config 2 is fastest, config 1 next (8x apart), then 0
        time.sleep(ms / 1e3)
        spend(ms)
        if variant == 2 and rank == 1:
            return x * 2 + 1
        return x * 2

    # timed on the virtual clock: the test asserts config 1, from two samples of 20 against 160 ms on the wall clock
    with virtual_clock():
        y = double(torch.ones(4))
    rows = next(iter(double.tuner.tables.values()))
    emit(chosen=double.tuner.decided[0]["variant"], out=y.tolist(), states=[r["state"] for r in rows],
         error=rows[2].get("error"))


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


@case
def compile_failure():
    """A config whose kernel does not compile (BLOCK=3 is no power of two) is skipped everywhere, unmeasured."""
    tdt.init_distributed()
    launched = collections.Counter()

    def precompile(config, src, dst):
        _copy_kernel[(1,)](src[:1], dst[:1], 1, BLOCK=config["BLOCK"])  # the interpreter checks it as it runs

    @tdt.autotune([{"BLOCK": b} for b in (3, 4, 8)], key_fn=lambda src, dst: src.numel(), n_warmup=1, n_repeat=2,
                  precompile_fn=precompile, name="compile")
    def copy(src, dst, *, BLOCK):
        launched[BLOCK] += 1
        _copy_kernel[(triton.cdiv(src.numel(), BLOCK),)](src, dst, src.numel(), BLOCK=BLOCK)
        return dst

    src = torch.arange(10.0)
    dst = copy(src, torch.zeros(10))
    rows = next(iter(copy.tuner.tables.values()))
    emit(ok=dst.tolist() == src.tolist(), launched={str(k): v for k, v in launched.items()},
         states=[r["state"] for r in rows], error=rows[0].get("error"))


@case
def precompile_split():
    """``precompile_fn`` on the ranks of one node: each config compiled by one rank only (its share), and a config
    whose compile fails there (config 4) is failed on every rank, with that rank's error."""
    tdt.init_distributed()
    compiled = []

    def precompile(config):
        compiled.append(config["variant"])
        if config["variant"] == 4:
            raise ValueError("config 4 does not compile")

    @tdt.autotune(space(6), key_fn=lambda: 0, n_warmup=0, n_repeat=1, precompile_fn=precompile, name="split")
    def f(*, variant):
        time.sleep(0.001)

    f()
    rows = next(iter(f.tuner.tables.values()))
    emit(compiled=sorted(compiled), states=[r["state"] for r in rows], error=rows[4].get("error"))


@case
def compile_overlap():
    """``precompile_fn`` outside the interpreter (its compiles run in threads while the configs are warmed up): the
    compile of config 3 (rank 1's share) can only end once config 0 has run, which happens only if measuring does
    not wait for every compile; config 2's compile (rank 0's share) fails, and no rank ever runs it."""
    import threading

    tdt.init_distributed()
    compiled, ran = [], []
    first_ran = threading.Event()

    def precompile(config):
        compiled.append(config["variant"])
        if config["variant"] == 2:
            raise ValueError("config 2 does not compile")
        if config["variant"] == 3 and not first_ran.wait(20):
            raise TimeoutError("config 0 never ran while config 3 was compiling")

    @tdt.autotune(space(5), key_fn=lambda: 0, n_warmup=1, n_repeat=2, precompile_fn=precompile, name="overlap")
    def f(*, variant):
        ran.append(variant)
        first_ran.set() if variant == 0 else None
        time.sleep(0.001)
        dist.all_reduce(torch.zeros(1))

    f()
    rows = next(iter(f.tuner.tables.values()))
    emit(compiled=sorted(compiled), ran=sorted(set(ran)), states=[r["state"] for r in rows],
         error=rows[2].get("error"))


@case
def compile_ahead():
    """One rank, ``precompile_fn`` outside the interpreter, a 144-config grid the search screens in stages: each
    compile takes 0.15 s, so the first stage waits for its compiles, and from then on the configs the next stage will
    likely hold compile while the current one is measured (each config's compile runs once, needed or not)."""
    import threading

    lock = threading.Lock()
    compiled: list[tuple[int, int]] = []

    def precompile(config):
        time.sleep(0.15)
        with lock:
            compiled.append((config["a"], config["b"]))

    grid = [{"a": a, "b": b} for a in range(12) for b in range(12)]

    @tdt.autotune(grid, key_fn=lambda: 0, n_warmup=0, precompile_fn=precompile, name="ahead")
    def f(*, a, b):
        time.sleep(0.0002 * (1 + abs(a - 7) + abs(b - 4)))  # a smooth landscape, its bottom at (7, 4)

    f()
    # a compile running when the tuning ends goes on in its daemon thread (``Precompiler.close``) and logs its line
    # when it ends: wait for the list to stop growing (1 s, over 6 compiles' time), or a compile logged after the
    # emit is missing from it (the fresh-clone CI of 1017977: 109 lines for 108 configs, under load)
    count = -1
    while count != len(compiled):
        count = len(compiled)
        time.sleep(1.0)
    decision = next(iter(f.tuner.decisions.values()))
    screened = sorted((grid[o.index]["a"], grid[o.index]["b"]) for o in decision.outcomes if o.state != "pruned")
    emit(compiled=sorted(compiled), screened=screened, search=decision.search)


#: the grid of the straggler scenarios: times additive in ``a`` and ``b``, best at a = 7, b = 4
STRAGGLER_GRID = [{"a": a, "b": b} for a in range(12) for b in range(12)]


def _straggling(slow, chosen: list, release, seconds: float, running=None):
    """A ``precompile_fn`` whose first config that ``slow`` picks (appended to ``chosen`` as (a, b)) compiles until
    ``release`` is set (or ``seconds`` pass, setting ``running`` first), the others in 10 ms."""
    import threading

    lock = threading.Lock()

    def precompile(config):
        with lock:
            straggler = not chosen and slow(config)
            if straggler:
                chosen.append((config["a"], config["b"]))
        if straggler:
            if running is not None:
                running.set()
            release.wait(seconds)
        else:
            time.sleep(0.01)

    return precompile


def _straggling_after_the_first_stage():
    """:func:`_straggling` over :data:`STRAGGLER_GRID` whose straggler is the first config submitted for compiling
    after the first stage's (so in a stage after the tuning's clock is chosen), released by the caller (or after
    30 s); returns (``precompile_fn``, the straggler as a one-item list once chosen, its release, its running)."""
    import threading

    from triton_dist_tune.measure.search import initial_size

    submitted: list[tuple[int, int]] = []
    straggler: list[tuple[int, int]] = []
    release, running = threading.Event(), threading.Event()
    lock = threading.Lock()

    def later(config):
        with lock:
            submitted.append((config["a"], config["b"]))
            return len(submitted) > initial_size(len(STRAGGLER_GRID))

    return _straggling(later, straggler, release, 30, running), straggler, release, running


@case
def compile_straggler():
    """One rank, ``precompile_fn`` outside the interpreter, a 144-config grid the search screens in stages: the
    first config submitted for compiling (one of the first stage's) is a straggler, whose compile ends only once
    the function has run configs of a later stage (or after 30 s). The rest of its stage is warmed up as its
    compiles end; the straggler is deferred to a later stage, and screened there."""
    import threading

    from triton_dist_tune.measure.search import initial_size

    lock = threading.Lock()
    order: list[tuple[int, int]] = []  # the first call of each config
    first: list[tuple[int, int]] = []
    later_stage = threading.Event()
    precompile = _straggling(lambda config: True, first, later_stage, 30)
    grid = STRAGGLER_GRID

    @tdt.autotune(grid, key_fn=lambda: 0, n_warmup=0, precompile_fn=precompile, name="straggler")
    def f(*, a, b):
        with lock:
            if (a, b) not in order:
                order.append((a, b))
                if len(order) > initial_size(len(grid)):
                    later_stage.set()
        time.sleep(0.0002 * (1 + abs(a - 7) + abs(b - 4)))

    f()
    decision = next(iter(f.tuner.decisions.values()))
    states = {(grid[o.index]["a"], grid[o.index]["b"]): o.state for o in decision.outcomes}
    emit(straggler=first[0], state=states[first[0]], before=order.index(first[0]), first_look=initial_size(len(grid)),
         search=decision.search)


@case
def compile_straggler_left_out():
    """One rank, ``precompile_fn`` outside the interpreter, the 144-config grid of :func:`compile_straggler`, whose
    times double with every step from the best (a = 7, b = 4), up to 8 steps (0.5 ms to 128 ms): log-additive, as
    the search's model is, so that the model reads the landscape as steep as it is. The first config submitted with
    a = 0 (the first look's (0, 8), eleven steps from the best) is a straggler whose compile ends only when released,
    after the tuning (or after 60 s). Reports its outcome, whether its compile was still running when the tuning
    returned, and the search's line.

    The model puts the straggler about 48 times its prediction for the slowest finalist (the rule's bar: 5 times;
    15 times with 4 ms added to every call, 8 with 8 ms). With times growing as the square of the distance it put
    it 8.5-9.8 times, under twice the bar, and 4 ms added to every call (a loaded machine's late wake-ups, which
    shrink the ratios of fast configs) brought it to 4.99: the search waited for the straggler until the compile
    timeout failed it."""
    import threading

    straggler: list[tuple[int, int]] = []
    release, running = threading.Event(), threading.Event()
    precompile = _straggling(lambda config: config["a"] == 0, straggler, release, 60, running)
    grid = STRAGGLER_GRID

    @tdt.autotune(grid, key_fn=lambda: 0, n_warmup=0, precompile_fn=precompile, name="straggler_left")
    def f(*, a, b):
        time.sleep(0.0005 * 2 ** min(abs(a - 7) + abs(b - 4), 8))

    f()
    still_compiling = running.is_set() and not release.is_set()
    release.set()
    decision = next(iter(f.tuner.decisions.values()))
    outcome = next(o for o in decision.outcomes if (grid[o.index]["a"], grid[o.index]["b"]) == straggler[0])
    emit(state=outcome.state, error=outcome.error, still_compiling=still_compiling, search=decision.search)


#: :func:`compile_straggler_named_again`'s cliff: every config with ``a`` = 9 takes this many times as long
CLIFF = 30


@case
def compile_straggler_named_again():
    """As :func:`compile_straggler_left_out`, the straggler next to the best: times grow with the distance from
    the best (a = 7, b = 4), and every config with a = 9 (a cliff: a tile that spills) takes :data:`CLIFF` times as
    long; the straggler is config (9, 4), whose compile ends only when released, after the tuning (or after 60 s).
    The search names it again as a neighbour of the leader (8, 4) once its stage has deferred it. Reports as
    :func:`compile_straggler_left_out`, and whether the straggler's compile was ever submitted."""
    import threading

    straggler: list[tuple[int, int]] = []
    release, running = threading.Event(), threading.Event()
    precompile = _straggling(lambda config: (config["a"], config["b"]) == (9, 4), straggler, release, 60, running)
    grid = STRAGGLER_GRID

    @tdt.autotune(grid, key_fn=lambda: 0, n_warmup=0, precompile_fn=precompile, name="straggler_named_again")
    def f(*, a, b):
        time.sleep(0.001 * (1 + abs(a - 7) + abs(b - 4)) * (CLIFF if a == 9 else 1))

    f()
    still_compiling = running.is_set() and not release.is_set()
    release.set()
    decision = next(iter(f.tuner.decisions.values()))
    outcome = next(o for o in decision.outcomes if (grid[o.index]["a"], grid[o.index]["b"]) == (9, 4))
    emit(state=outcome.state, error=outcome.error, still_compiling=still_compiling, search=decision.search,
         submitted=bool(straggler))


@case
def screened_while_compiling():
    """One rank, ``precompile_fn`` outside the interpreter, the 144-config grid of :func:`compile_straggler`: the
    first config submitted for compiling after the first stage's (so in a stage after the tuning's clock is chosen)
    compiles until some config first called after it has been called 6 times (a warm-up calls a config 4 times at
    most: a lead call and 3 timed ones; so only once a sample of it was taken), or for 30 s; the others compile in
    10 ms. Reports the straggler's outcome and the search's line."""
    grid = STRAGGLER_GRID
    precompile, straggler, release, running = _straggling_after_the_first_stage()
    calls: collections.Counter = collections.Counter()
    since: set[tuple[int, int]] = set()  # the configs first called after the straggler's compile began

    @tdt.autotune(grid, key_fn=lambda: 0, n_warmup=0, precompile_fn=precompile, name="screened_while_compiling")
    def f(*, a, b):
        if running.is_set() and not calls[a, b]:
            since.add((a, b))
        calls[a, b] += 1
        if (a, b) in since and calls[a, b] >= 6:
            release.set()
        time.sleep(0.0002 * (1 + abs(a - 7) + abs(b - 4)))

    f()
    decision = next(iter(f.tuner.decisions.values()))
    outcome = next(o for o in decision.outcomes if (grid[o.index]["a"], grid[o.index]["b"]) == straggler[0])
    emit(state=outcome.state, search=decision.search)


#: the time budget of :func:`budget_spent_in_a_pause` (s); the race's sample there sleeps as long. Long enough that a
#: loaded machine's first stage (2-4 s beside 3 CPU hogs on 2 cores) never spends it
PAUSE_BUDGET_S = 10.0


@case
def budget_spent_in_a_pause():
    """One rank, ``precompile_fn`` outside the interpreter, the 144-config grid of :func:`compile_straggler`, a time
    budget of :data:`PAUSE_BUDGET_S`: the first config submitted for compiling after the first stage's is a
    straggler whose compile ends only once a config first called after it began is sampled in a race (called again
    after another config: a warm-up's calls of one config come back to back), which sleeps the whole budget first
    (or after 30 s). So its stage pauses, races what it warmed up, and the budget is spent in that race; then the
    straggler's compile ends. Reports whether the straggler was ever called, its outcome, whether the decision was
    cut, and the search's line."""
    grid = STRAGGLER_GRID
    precompile, straggler, release, running = _straggling_after_the_first_stage()
    calls: collections.Counter = collections.Counter()
    since: set[tuple[int, int]] = set()  # the configs first called after the straggler's compile began
    last: list[tuple[int, int]] = []

    @tdt.autotune(grid, key_fn=lambda: 0, n_warmup=0, precompile_fn=precompile, name="budget_pause",
                  budget=PAUSE_BUDGET_S, timeout=60)
    def f(*, a, b):
        if running.is_set() and not calls[a, b]:
            since.add((a, b))
        sampled_again = (a, b) in since and calls[a, b] and last and last[-1] != (a, b)
        calls[a, b] += 1
        last[:] = [(a, b)]
        if sampled_again and not release.is_set():
            time.sleep(PAUSE_BUDGET_S)  # the budget is spent in this race
            release.set()
        time.sleep(0.0002 * (1 + abs(a - 7) + abs(b - 4)))

    f()
    decision = next(iter(f.tuner.decisions.values()))
    outcome = next(o for o in decision.outcomes if (grid[o.index]["a"], grid[o.index]["b"]) == straggler[0])
    emit(called=calls[straggler[0]], state=outcome.state, error=outcome.error, cut=decision.cut,
         search=decision.search)


@case
def next_key_compiled_ahead():
    """A campaign of three keys on one rank, ``precompile_fn`` outside the interpreter (a pool that compiles as it
    is given work), a 144-config grid the search screens in stages: each ``precompile_fn`` call records the key its
    arguments are for and how many keys were decided then. ``TRITON_DIST_AUTOTUNE_COMPILE_NEXT_KEY`` as set.
    ``NEXT_KEY_TUNED_BEFORE=2``: key 2 is tuned by a call before the campaign (the campaign's cache hit); ``during``
    then lists (key compiled for, keys decided then) of the campaign's compiles."""
    import threading

    lock = threading.Lock()
    calls: list[tuple[int, int]] = []  # (the key compiled for, keys decided when compiled)
    during: list[tuple[int, list]] = []  # the campaign's: (the key compiled for, the keys decided then)
    in_campaign = threading.Event()

    def precompile(config, m):
        with lock:
            calls.append((m, len(f.tuner.decisions)))
            if in_campaign.is_set():
                during.append((m, sorted(key for _, key in f.tuner.decisions)))
        time.sleep(0.002)

    grid = [{"a": a, "b": b} for a in range(12) for b in range(12)]

    @tdt.autotune(grid, key_fn=lambda m: m, n_warmup=0, precompile_fn=precompile, name="next_key")
    def f(m, *, a, b):
        time.sleep(0.0002 * (1 + abs(a - 7 + m) + abs(b - 4)))

    builds = collections.Counter()

    def build(m):  # with NEXT_KEY_BUILD_FAILS set, key 2's second build (the one to compile it ahead) raises
        builds[m] += 1
        if os.environ.get("NEXT_KEY_BUILD_FAILS") and m == 2 and builds[m] == 2:
            raise RuntimeError("out of memory building the call")
        return (m,)

    before = os.environ.get("NEXT_KEY_TUNED_BEFORE")
    if before:
        f(int(before))
    if os.environ.get("NEXT_KEY_CACHE_CORRUPT"):  # the decision on disk cannot be read: the key is tuned again
        for path in f.tuner.cache.folder.glob("*.json"):
            path.write_text("{not json")
    warnings: list[str] = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logging.getLogger("triton_dist_tune").addHandler(Count(logging.WARNING))
    in_campaign.set()
    summary = tdt.campaign(f, build, keys=[1, 2, 3])
    emit(ahead=sorted({(m, decided) for m, decided in calls if decided < m - 1}),
         decided=[row.state for row in summary.rows], builds=[builds[m] for m in (1, 2, 3)],
         during=sorted({(m, tuple(keys)) for m, keys in during}),
         unreadable=sum("ignoring unreadable cache file" in w for w in warnings))


@case
def next_key_compile_pass():
    """As ``next_key_compiled_ahead``, without ``precompile_fn``: the compile pass (forced on this CPU rank, outside
    the interpreter; the function launches no kernel, so nothing fails to compile) runs the function once per
    config; each run records the key its arguments are for, whether it is a pass, and how many keys were decided."""
    from triton_dist_tune.function import next_key, tuning
    from triton_dist_tune.measure import compile_pass

    tuning.compiles_here = next_key.compiles_here = lambda: True
    runs: list[tuple[int, bool, int]] = []
    grid = [{"a": a, "b": b} for a in range(12) for b in range(12)]

    @tdt.autotune(grid, key_fn=lambda m: m, n_warmup=0, name="next_key_pass")
    def f(m, *, a, b):
        runs.append((m, compile_pass.in_pass(), len(f.tuner.decisions)))
        if not compile_pass.in_pass():
            time.sleep(0.0002 * (1 + abs(a - 7 + m) + abs(b - 4)))

    summary = tdt.campaign(f, [(1,), (2,), (3,)])
    emit(ahead=sorted({(m, decided) for m, passing, decided in runs if passing and decided < m - 1}),
         early_runs=sum(1 for m, passing, decided in runs if not passing and decided < m - 1),
         decided=[row.state for row in summary.rows])


@case
def next_key_guess_after_the_budget():
    """As ``next_key_compile_pass`` over two keys, with a time budget (0.5 s) that the first stage of each key
    spends: each measured call sleeps 20 ms, and that stage warms up and screens 20 configs or more. The function
    launches no kernel, so no stage waits for compiles, and the rank's idle work (the next key's guess, then its
    compile passes) would run only once the first stage is measured. Reports the next key's passes run while the
    first key was tuned, each key's state and whether its decision was cut; the rank's log says whether the guess
    ran (``compiling N config(s) it will likely screen``)."""
    from triton_dist_tune.function import next_key, tuning
    from triton_dist_tune.measure import compile_pass

    tuning.compiles_here = next_key.compiles_here = lambda: True
    runs: list[tuple[int, bool, int]] = []
    grid = [{"a": a, "b": b} for a in range(12) for b in range(12)]

    @tdt.autotune(grid, key_fn=lambda m: m, n_warmup=0, name="next_key_budget", budget=0.5)
    def f(m, *, a, b):
        runs.append((m, compile_pass.in_pass(), len(f.tuner.decisions)))
        if not compile_pass.in_pass():
            time.sleep(0.02)

    summary = tdt.campaign(f, [(1,), (2,)])
    emit(ahead=sum(1 for m, passing, decided in runs if m == 2 and passing and decided == 0),
         decided=[row.state for row in summary.rows],
         cut=[decision.cut for decision in f.tuner.decisions.values()])


@triton.jit
def _fill_kernel(dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, 1.0, mask=offs < n)


@case
def compile_pass_split():
    """The compile pass (no ``precompile_fn``) forced on CPU ranks outside the interpreter, where Triton has no GPU
    compiler and every compile fails ("0 active drivers"): the pass runs the function once per config with its JIT
    launch turned into a compile, each rank submits the compiles of its node share only, every config fails on
    every rank with its owner's error before any rank runs it again, and every rank raises the same error."""
    from triton_dist_tune.function import tuning
    from triton_dist_tune.measure import precompile

    tdt.init_distributed()
    tuning.compiles_here = lambda: True
    submitted, ran = [], []
    submit = precompile.Compiles.submit

    def counted(self, index, compile_one, *rest):
        submitted.append(index)
        return submit(self, index, compile_one, *rest)

    precompile.Compiles.submit = counted

    @tdt.autotune(space(4), key_fn=lambda x: 0, n_warmup=1, n_repeat=2, name="pass")
    def f(x, *, variant):
        ran.append(variant)
        _fill_kernel[(1,)](x, x.numel(), BLOCK=16)
        dist.all_reduce(torch.zeros(1))

    try:
        f(torch.zeros(16))
        error = None
    except tdt.AllConfigsFailedError as exc:
        error = str(exc)
    emit(submitted=sorted(submitted), ran=ran, error=error)


@case
def compile_pass_one_rank_search():
    """The compile pass forced on one CPU rank outside the interpreter (every compile fails: no GPU compiler) over a
    100-config space the search screens in stages that share one compile pool: each config's compile is submitted
    once, and every config fails with its compile error."""
    from triton_dist_tune.function import tuning
    from triton_dist_tune.measure import precompile

    tuning.compiles_here = lambda: True
    submitted = []
    submit = precompile.Compiles.submit

    def counted(self, index, compile_one, *rest):
        submitted.append(index)
        return submit(self, index, compile_one, *rest)

    precompile.Compiles.submit = counted

    @tdt.autotune(space(100), key_fn=lambda x: 0, n_warmup=1, name="pass_search")
    def f(x, *, variant):
        _fill_kernel[(1,)](x, x.numel(), BLOCK=16)

    try:
        f(torch.zeros(16))
        error = None
    except tdt.AllConfigsFailedError as exc:
        error = str(exc)
    emit(submitted=sorted(submitted), error=error)


@case
def compile_pass_in_place():
    """The compile pass forced on outside the interpreter; the function writes its argument in place the way a Triton
    kernel does (no version counter bumped: through ``.data``), and, as a Triton launch, not in its pass. The write
    must be found after each config's first real run and undone: after tuning the argument holds one call's write."""
    from triton_dist_tune.function import tuning
    from triton_dist_tune.measure import compile_pass

    tdt.init_distributed()
    tuning.compiles_here = lambda: True

    passed = []

    @tdt.autotune(space(), key_fn=lambda x: 0, n_warmup=1, n_repeat=2, name="in_place_pass")
    def bump(x, *, variant):
        if compile_pass.in_pass():
            passed.append(variant)
        else:
            x.data.add_(1.0)
        dist.all_reduce(torch.zeros(1))

    x = torch.zeros(4)
    bump(x)
    emit(x=x.tolist(), passed=passed)


#: an 80-config space: searched (more than 64 configs), its first look 16 configs
BUDGET_SPACE = [{"a": a, "b": b, "c": c} for a in range(5) for b in range(4) for c in range(4)]
#: the seconds one config's compile step takes in the budget case (every rank)
SLOW_COMPILE_S = 0.04


@case
def budget_bounds_compiles():
    """Issue 41 item 5: ``budget=0.1`` over the 80-config space whose compile step takes 40 ms per config: the
    compile pass (``COMPILE=pass``: forced on outside the interpreter; the function sleeps in its pass), or else a
    ``precompile_fn`` under Triton's interpreter. Prints the configs this rank compiled (passed or precompiled), in
    order, whether the decision was cut, and its choice."""
    from triton_dist_tune.function import tuning
    from triton_dist_tune.measure import compile_pass

    tdt.init_distributed()
    by_pass = os.environ.get("COMPILE") == "pass"
    if by_pass:
        tuning.compiles_here = lambda: True
    compiled = []

    def precompile(config, x):
        compiled.append(BUDGET_SPACE.index(config))
        time.sleep(SLOW_COMPILE_S)

    @tdt.autotune(BUDGET_SPACE, key_fn=lambda x: 0, name="budget_compile", budget=0.1, timeout=30,
                  **({} if by_pass else {"precompile_fn": precompile}))
    def f(x, **config):
        if compile_pass._active.get() is not None:  # this call is the config's compile pass
            precompile(config, x)
            return
        time.sleep(0.0005 * (1 + config["a"] + config["b"]))
        dist.all_reduce(x)

    f(torch.zeros(4))
    ((_, decision),) = f.tuner.decisions.items()
    emit(compiled=compiled, cut=decision.cut, chosen=decision.index, search=decision.search)


@case
def sharded():
    """A rank-local function tuned lock-step and sharded: the same choice; sharded, each rank runs its share of
    the configs only (counted, not timed: a loaded machine cannot change a count). The choice is timed on the
    virtual clock (``_cases.virtual_clock``): on the wall clock, 5 against 40 ms over 2 samples is the gap
    (35 ms) that a loaded machine closed in fault_cases.py."""
    tdt.init_distributed()
    runs = {}
    chosen = {}
    for mode in (False, True):
        calls = collections.Counter()

        @tdt.autotune(space(8), key_fn=lambda: 0, n_warmup=0, n_repeat=2, sharded=mode, name=f"sharded_{mode}")
        def local(*, variant):
            calls[variant] += 1
            ms = 5.0 if variant == 5 else 40.0 + 2.0 * abs(variant - 5)  # 5 is the best by 8x, 35 ms
            time.sleep(ms / 1e3)
            spend(ms)

        with virtual_clock():
            local()
        calls[local.tuner.decided[0]["variant"]] -= 1  # the call itself, after the tuning
        runs[str(mode)] = sorted(v for v, c in calls.items() if c > 0)
        chosen[str(mode)] = local.tuner.decided[0]["variant"]
    emit(runs=runs, chosen=chosen)


if __name__ == "__main__":
    main()
