"""Several threads of every rank calling tuned functions on one group, run by tests/test_threads.py.

Usage: python threads_cases.py CASE (with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set). Each rank prints one
``RESULT {json}`` line: what each thread's call returned or raised, how long it took, and what the ranks decided.

Tunings on one group run one at a time per process (the group's lock), so threads that reach them in the same
order on every rank tune them alike, and threads that reach them in different orders pair different tunings'
exchanges: every thread raises, with an error that says so. The orders are forced: a thread starts its call only
once the one before it is inside its tuning; in the crossed cases (rank 0: A then B; rank 1: B then A) the first
exchange of each rank waits until the other thread of its rank is tuning too (:func:`gated`), so that the pairing
of A on one rank with B on the other always finds both threads of each rank at the group. The tuned functions talk
to no other rank (no collective): what is tested is the tuner's own exchanges.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _cases import case, emit, main, outcome  # noqa: E402

import triton_dist_tune as tdt  # noqa: E402
from triton_dist_tune.contextual import contextual_autotune  # noqa: E402
from triton_dist_tune.group.channel import Group  # noqa: E402
from triton_dist_tune.group.resolve import resolve_group  # noqa: E402
from triton_dist_tune.group.store import StoreGroup  # noqa: E402
from triton_dist_tune.group.threads import Turns  # noqa: E402

SPACE = [{"block": b} for b in (16, 32, 64)]
#: ms per config: 16 is the fastest by 75 ms or more, on every rank. The cases whose tests assert the choice time
#: their samples on a virtual clock of each thread (:func:`thread_clocks`), where the functions spend what they
#: sleep: on the wall clock the choice rested on 2 cold samples of 5 against 80 ms (3 of the contextual kernel's
#: 5 against 80, ``CTX_MS``), and stalls of a loaded machine have closed 35 and 60 ms gaps in other scenarios
SLEEP_MS = {16: 5, 32: 80, 64: 120}
#: the milliseconds each thread has spent (:func:`nap`)
_SPENT = threading.local()


def nap(ms: float) -> None:
    """Sleep ``ms`` and spend it on this thread's virtual clock (:func:`thread_clocks`)."""
    time.sleep(ms / 1e3)
    _SPENT.ms = getattr(_SPENT, "ms", 0.0) + ms


def thread_clocks() -> None:
    """Time ``autotune``'s samples and ``contextual_autotune``'s launches, for the rest of this process, on a clock
    that only :func:`nap` advances, one of each thread: threads tuning at once on other groups (or one waiting for
    a lock while another tunes) add nothing to each other's samples, as on the wall clock (``_cases``' virtual
    clock is one for the process; the tuner runs the tuned function on the calling thread)."""
    from triton_dist_tune.contextual import state
    from triton_dist_tune.function import agreed
    from triton_dist_tune.measure.clocks import HostClock

    class ThreadClock(HostClock):
        def start(self) -> float:
            return getattr(_SPENT, "ms", 0.0)

        def stop(self, start: float) -> float:
            return getattr(_SPENT, "ms", 0.0) - start

    agreed.make_clock = ThreadClock
    state.make_clock = ThreadClock
#: the longest wait for a thread to be inside its tuning, or for a gate to open
WAIT_S = 5.0


def rank() -> int:
    return dist.get_rank()


def crowd() -> int:
    """Threads of this process tuning on the default group now (holding or waiting for its lock); -1 where the
    library does not count them."""
    count = getattr(resolve_group(None), "tuning_threads", None)
    return count() if count is not None else -1


def wait_for(test: Callable[[], bool], seconds: float = WAIT_S) -> None:
    deadline = time.monotonic() + seconds
    while not test() and time.monotonic() < deadline:
        time.sleep(0.01)


def gated(waiting: Callable[[], bool] = lambda: False) -> None:
    """The first exchange of this process waits until two threads of this rank are tuning, or one is tuning and
    ``waiting()`` (another waits in the library for its turn to decide whether it tunes; at most ``WAIT_S``; where
    the library does not count them, half a second and ``WAIT_S``)."""
    real = StoreGroup.combine
    seen: list[bool] = []

    def combine(self: StoreGroup, *args: Any, **kwargs: Any) -> Any:
        if not seen:
            seen.append(True)
            if crowd() < 0:
                time.sleep(0.5)
            wait_for(lambda: crowd() >= 2 or waiting())
        return real(self, *args, **kwargs)

    StoreGroup.combine = combine  # type: ignore[method-assign]


def tuned(name: str, entered: threading.Event | None = None) -> Any:
    """An ``autotune``d function of 3 configs (16 wins) named ``name``; ``entered`` is set at its first run."""

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=2, timing="cold", name=name)
    def f(x: torch.Tensor, *, block: int) -> int:
        if entered is not None:
            entered.set()
        nap(SLEEP_MS[block])
        return block

    return f


def in_order(calls: dict[str, Callable[[], Any]], order: list[str], started: Callable[[str], None]) -> dict[str, Any]:
    """Run each named call on a thread of its own; the threads start in ``order``, each once ``started(name)`` of
    the one before it has returned. Returns each call's :func:`~_cases.outcome` with its seconds."""
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        began = time.monotonic()
        result = outcome(calls[name])
        result["s"] = round(time.monotonic() - began, 2)
        results[name] = result

    threads = []
    for i, name in enumerate(order):
        if i:
            started(order[i - 1])
        thread = threading.Thread(target=run, args=(name,), name=f"caller-{name}")
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return results


def crossed(names: list[str]) -> list[str]:
    """``names`` on rank 0, reversed on rank 1."""
    return names if rank() == 0 else names[::-1]


def lock_held() -> bool:
    """Whether some thread (never the main one, which tunes nothing) holds the default group's lock now."""
    lock = resolve_group(None).lock
    if lock.acquire(blocking=False):
        lock.release()
        return False
    return True


def slow_to_take_the_lock(thread: str) -> None:
    """On rank 0, the thread named ``thread`` waits 0.3 s between being counted at a group and taking its lock: the
    moment in which :func:`inside_tuning` once let the next thread take the lock first (widened, so that a test whose
    helper waited for the count alone fails every time, not once in CI)."""
    real = Turns._acquire

    def acquire(self: Turns, me: int) -> None:
        if rank() == 0 and threading.current_thread().name == thread:
            time.sleep(0.3)
        real(self, me)

    Turns._acquire = acquire  # type: ignore[method-assign]


def inside_tuning(name: str) -> None:
    """The crossed cases: the thread just started is tuning once this process counts one thread at the group and
    that thread holds the group's lock (where the library does not count them: a tenth of a second later). A thread
    is counted a moment before it takes the lock: in that moment the next thread could take it first, and the rank
    would tune the two in the other order, uncrossed (both threads' tunings then succeed: seen once in CI)."""
    if crowd() < 0:
        time.sleep(0.1)
    wait_for(lambda: crowd() >= 1 and lock_held())


@case
def crossed_keys() -> None:
    """One function, keys 2 and 3 from two threads; rank 0 reaches 2 first, rank 1 reaches 3 first."""
    tdt.init_distributed()
    gated()
    f = tuned("crossed_keys")
    calls = {"a": lambda: f(torch.ones(2)), "b": lambda: f(torch.ones(3))}
    results = in_order(calls, crossed(["a", "b"]), inside_tuning)
    emit(results=results, decided={str(k): v for k, v in f.tuner.decided.items()})


@case
def crossed_functions() -> None:
    """Two functions from two threads; rank 0 reaches f first, rank 1 reaches g first."""
    tdt.init_distributed()
    gated()
    fns = {"f": tuned("crossed_f"), "g": tuned("crossed_g")}
    calls = {n: (lambda fn=fn: fn(torch.ones(4))) for n, fn in fns.items()}
    results = in_order(calls, crossed(["f", "g"]), inside_tuning)
    emit(results=results, decided={n: {str(k): v for k, v in fn.tuner.decided.items()} for n, fn in fns.items()})


@case
def same_order_functions() -> None:
    """Two functions from two threads, reached in the same order on every rank (f, then g while f tunes)."""
    tdt.init_distributed()
    thread_clocks()  # (see SLEEP_MS)
    events = {"f": threading.Event(), "g": threading.Event()}
    fns = {n: tuned(f"same_{n}", events[n]) for n in "fg"}
    calls = {n: (lambda fn=fn: fn(torch.ones(4))) for n, fn in fns.items()}
    results = in_order(calls, ["f", "g"], lambda name: events[name].wait(WAIT_S))
    emit(results=results, decided={n: {str(k): v for k, v in fn.tuner.decided.items()} for n, fn in fns.items()})


@case
def served_beside_tuning() -> None:
    """An ``autotune`` tuning on one thread; on another, while it tunes, a call of an undecided key of a function
    with ``undecided="first"`` (served the first config, agreed in one exchange), in the same order on every
    rank; rank 1 makes that call a quarter of a second later in the tuning than rank 0."""
    tdt.init_distributed()
    thread_clocks()  # (see SLEEP_MS)
    entered = threading.Event()
    f = tuned("tuning_beside_serving", entered)

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), undecided="first", name="served_beside_tuning")
    def g(x: torch.Tensor, *, block: int) -> int:
        return block

    calls = {"f": lambda: f(torch.ones(4)), "g": lambda: g(torch.ones(5))}
    lag = 0.05 + 0.25 * rank()  # the ranks' g reach f's tuning at different exchanges of it
    results = in_order(calls, ["f", "g"], lambda name: (entered.wait(WAIT_S), time.sleep(lag)))
    emit(results=results, decided={str(k): v for k, v in f.tuner.decided.items()},
         served={str(k): v for k, v in g.tuner.decided.items()})


@case
def campaign_beside_tuning() -> None:
    """A campaign of two keys (2 and 3) of one function on one thread; on another, once the campaign's first key
    is tuning, a tuning of another function, in the same order on every rank. Where the other thread could take
    the group between the campaign's keys, the ranks would order the two by timing: so rank 0's other thread asks
    for the group 0.3 s late, and so does rank 1's campaign once its first key is decided, to make the orders
    differ there."""
    tdt.init_distributed()
    thread_clocks()  # (see SLEEP_MS)
    real = Group.turn

    def turn(self: Group) -> Any:
        me = threading.current_thread().name
        late = me == "caller-g" if rank() == 0 else me == "caller-c" and bool(f.tuner.decided)
        if self.size > 1 and late:
            time.sleep(0.3)
        return real(self)

    Group.turn = turn  # type: ignore[method-assign]
    entered = threading.Event()
    f, g = tuned("campaign_f", entered), tuned("beside_campaign_g")
    calls = {"c": lambda: len(tdt.campaign(f, [torch.ones(n) for n in (2, 3)]).rows),
             "g": lambda: g(torch.ones(4))}
    results = in_order(calls, ["c", "g"], lambda name: entered.wait(WAIT_S))
    emit(results=results, decided={"f": {str(k): v for k, v in f.tuner.decided.items()},
                                   "g": {str(k): v for k, v in g.tuner.decided.items()}})


@case
def replicas_beside_tuning() -> None:
    """An ``autotune`` tuning with ``autotune_replicas`` (each rank's group: itself; the replicas: both ranks, a
    group of their own) on one thread; on another, once it is inside its tuning, a tuning of another function on
    that replicas group itself, in the same order on every rank (rank 1's a quarter of a second later in the
    tuning than rank 0's): both exchange on the replicas group."""
    tdt.init_distributed()
    thread_clocks()  # (see SLEEP_MS)
    tps = [dist.new_group([0]), dist.new_group([1])]
    across = dist.new_group([0, 1])
    entered = threading.Event()
    f, g = tuned("with_replicas", entered), tuned("on_the_replicas")
    calls = {"f": lambda: f(torch.ones(4), autotune_pg=tps[rank()], autotune_replicas=across),
             "g": lambda: g(torch.ones(4), autotune_pg=across)}
    lag = 0.05 + 0.25 * rank()  # the ranks' g reach f's tuning at different exchanges of it
    results = in_order(calls, ["f", "g"], lambda name: (entered.wait(WAIT_S), time.sleep(lag)))
    emit(results=results, decided={"f": sorted(map(str, f.tuner.decided_in.values())),
                                   "g": sorted(map(str, g.tuner.decided_in.values()))})


def _beside_campaign_on_another_group(serve: bool) -> None:
    tdt.init_distributed()
    thread_clocks()  # (see SLEEP_MS)
    groups = {"a": dist.new_group([0, 1]), "b": dist.new_group([0, 1])}
    comparing = threading.Event()

    def distance(key: int, other: int) -> float:
        if threading.current_thread().name == "caller-a":
            comparing.set()
            wait_for(lambda: len(f.tuner.decisions) > 1, 10.0)
        return abs(key - other)

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=2, timing="cold", name="on_two_groups",
                  undecided="nearest" if serve else None, search="auto" if serve else "search", distance=distance)
    def f(x: torch.Tensor, *, block: int) -> int:
        nap(SLEEP_MS[block])
        return block

    tdt.campaign(f, [torch.ones(4)], pg=groups["a"], progress=False)
    calls = {"a": lambda: f(torch.ones(6), autotune_pg=groups["a"]),
             "b": lambda: [row.index for row in tdt.campaign(f, [torch.ones(8)], pg=groups["b"], progress=False).rows]}
    results = in_order(calls, ["a", "b"], lambda name: comparing.wait(WAIT_S))
    emit(results={name: {k: v for k, v in got.items() if k != "s"} for name, got in results.items()},
         decided=sorted(f"{slot[-1]}: {config}" for slot, config in f.tuner.decided_in.items()))


@case
def served_beside_campaign_on_another_group() -> None:
    """One function (``undecided="nearest"``) on two groups of the same ranks, A and B: a call on A serves an
    undecided key (6) from A's decided key (4) while a campaign on B decides key 8, on another thread (each group
    has its own lock). The serving compares the keys with the function's ``distance``, which returns once the
    campaign has put B's decision in the function's decisions (at most 10 s)."""
    _beside_campaign_on_another_group(serve=True)


@case
def searched_beside_campaign_on_another_group() -> None:
    """As served_beside_campaign_on_another_group, the call on A tuning key 6 by a search (``search="search"``),
    which starts from A's decided keys nearest it, compared with ``distance``."""
    _beside_campaign_on_another_group(serve=False)


#: the contextual kernel's sleep per config (ms): config 0 wins by 75 ms
CTX_MS = [5, 80]
#: Triton's interpreter patches triton.language while a kernel runs: two threads must not run kernels at once
INTERPRETER = threading.Lock()


def _ctx_hook(index: int) -> Callable[[dict], None]:
    def hook(nargs: dict) -> None:
        nap(CTX_MS[index])
    return hook


@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=_ctx_hook(i)) for i, b in enumerate((64, 128))],
                 key=["n"])
@triton.jit
def copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def contextual_layer(entered: threading.Event | None = None, inner: Any = None) -> Any:
    """A ``contextual_autotune``d function launching ``copy_kernel`` (config 0 wins); ``entered`` is set at its
    first run; ``inner``: an ``autotune``d function it calls too (on the same group)."""

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3)
    def layer(x: torch.Tensor) -> float:
        if entered is not None:
            entered.set()
        out = torch.empty_like(x)
        with INTERPRETER:
            copy_kernel[(1,)](x, out, x.numel())
        extra = inner(torch.ones(4)) if inner is not None else 0
        return float(out.sum()) + extra

    return layer


def same_or_crossed(calls: dict[str, Callable[[], Any]], order: list[str], cross: bool,
                    inside: Callable[[str], Any], waiting: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """The calls on threads of their own (:func:`in_order`): in ``order`` on every rank, each started a tenth of a
    second after ``inside(name)`` of the one before returned; or (``cross``) crossed on rank 1, the first exchange
    gated until both threads of the rank are tuning."""
    if cross:
        gated(waiting)
        return in_order(calls, crossed(order), inside_tuning)
    return in_order(calls, order, lambda name: (inside(name), time.sleep(0.1)))


def _mixed(cross: bool) -> None:
    tdt.init_distributed()
    thread_clocks()  # (see SLEEP_MS)
    if cross:
        slow_to_take_the_lock("caller-ctx")
    events = {"ctx": threading.Event(), "fn": threading.Event()}
    layer = contextual_layer(events["ctx"])
    f = tuned("beside_contextual", events["fn"])
    calls = {"ctx": lambda: layer(torch.ones(64)), "fn": lambda: f(torch.ones(4))}
    results = same_or_crossed(calls, ["ctx", "fn"], cross, lambda name: events[name].wait(WAIT_S))
    emit(results=results, decided={str(k): v for k, v in f.tuner.decided.items()},
         contextual={str(k[1]): d["index"] for k, d in layer.tuner.decisions.items()})


@case
def autotune_beside_contextual() -> None:
    """A contextual_autotune call tunes on one thread; an autotune call starts tuning on another while it does,
    in the same order on every rank."""
    _mixed(False)


@case
def autotune_beside_contextual_crossed() -> None:
    """As autotune_beside_contextual, rank 1 reaching the autotune call first."""
    _mixed(True)


@case
def autotune_inside_contextual() -> None:
    """A contextual tuning call whose function calls an ``autotune``d function on the same group: the inner
    tuning takes the group's lock the contextual call holds (on the same thread)."""
    tdt.init_distributed()
    thread_clocks()  # (see SLEEP_MS)
    f = tuned("inside_contextual")
    layer = contextual_layer(inner=f)
    first = outcome(layer, torch.ones(64))
    again = outcome(layer, torch.ones(64))
    emit(first=first, again=again, decided={str(k): v for k, v in f.tuner.decided.items()},
         contextual={str(k[1]): d["index"] for k, d in layer.tuner.decisions.items()})


@case
def decided_from_threads() -> None:
    """Once a key is decided (an ``autotune`` key, a contextual call), 4 threads call it 200 times each at once
    while the main thread holds the group's lock: a decided call takes no lock, so every call returns, each with
    the decided config."""
    tdt.init_distributed()
    thread_clocks()  # (see SLEEP_MS)
    f = tuned("decided_threads")
    layer = contextual_layer()
    first = f(torch.ones(4))
    layer(torch.ones(64))
    x = torch.ones(4)
    answers: list[int] = []
    sums: list[float] = []

    def hammer() -> None:
        answers.extend(f(x) for _ in range(200))
        sums.extend(layer(torch.ones(64)) for _ in range(5))

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    group = resolve_group(None)
    with group.lock:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    emit(first=first, answers=sorted(set(answers)), count=len(answers), sums=sorted(set(sums)), calls=len(sums),
         alive=sum(t.is_alive() for t in threads), contextual_runs=layer.tuner.last_runs)



def _one_contextual(cross: bool) -> None:
    tdt.init_distributed()
    entered = threading.Event()
    layer = contextual_layer(entered)
    calls = {"a": lambda: layer(torch.ones(64)), "b": lambda: layer(torch.ones(48))}
    results = same_or_crossed(calls, ["a", "b"], cross, lambda name: entered.wait(WAIT_S),
                              lambda: any(layer.tuner._waiting.values()))  # b waits for a's call to end
    again = {n: outcome(call) for n, call in calls.items()}
    emit(results=results, again=again,
         contextual={str(k[1]): d["index"] for k, d in sorted(layer.tuner.decisions.items(), key=str)})


@case
def one_contextual_from_two_threads() -> None:
    """One contextual_autotune function called from two threads at once (inputs of 64 and 48 elements: two keys
    of its kernel), thread a's call inside its tuning before b calls, in the same order on every rank."""
    _one_contextual(False)


@case
def one_contextual_from_two_threads_crossed() -> None:
    """As one_contextual_from_two_threads, rank 1 calling with 48 elements first."""
    _one_contextual(True)



def copy_layer(sync_every: int) -> Any:
    """A contextual function of the world group that copies ``x`` with one Triton launch (its key: the size) and
    returns its sum; agreements every ``sync_every`` calls (the thread-order cases)."""

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3, sync_every=sync_every)
    def layer(x: torch.Tensor) -> float:
        out = torch.empty_like(x)
        with INTERPRETER:
            copy_kernel[(1,)](x, out, x.numel())
        return float(out.sum())

    return layer

@case
def call_beside_agreement() -> None:
    """While a key is pending (met by rank 0 only, in call 2), thread a makes call 4, the agreement (sync_every=4),
    and thread b makes call 5, timed apart on purpose: on rank 0 b calls while a's agreement is held (until b's call
    has returned or waits for the agreement's outcome), on rank 1 once a's agreement has been made. The agreement
    finds the pending key, so calls 4 to 7 are its tuning window (until the key is decided): every rank must tune
    call 5, whichever thread got there first. Then calls 6 to 8 from the main thread (6 meets the key on every rank,
    which decides it; 8 is the next agreement)."""
    from triton_dist_tune.contextual.tuner import ContextualTuner

    tdt.init_distributed()
    in_agreement, agreed, b_done = threading.Event(), threading.Event(), threading.Event()
    tuned_calls: list[int] = []

    layer = copy_layer(4)

    def waits(call: int) -> bool:  # the call waits in the library for the calls before it (once that exists)
        return any(call in numbers for numbers in getattr(layer.tuner, "_waiting", {}).values())

    from triton_dist_tune.contextual import tuner as tuner_module

    real_agree, real_tune = tuner_module.agree, ContextualTuner._tune

    def agree(self: Any, group: Any, calls: int) -> bool:
        if calls != 4:
            return real_agree(self, group, calls)
        if rank() == 0:  # b calls now; the agreement waits until b's call returned or waits for it
            in_agreement.set()
            wait_for(lambda: b_done.is_set() or waits(5))
            return real_agree(self, group, calls)
        out = real_agree(self, group, calls)
        agreed.set()  # rank 1: b calls now
        return out

    def tune(self: Any, group: Any, calls: int, args: tuple, kwargs: dict) -> Any:
        tuned_calls.append(calls)
        return real_tune(self, group, calls, args, kwargs)

    tuner_module.agree, ContextualTuner._tune = agree, tune  # type: ignore[method-assign]
    results = {"1": outcome(layer, torch.ones(64)),  # first: tunes 64
               "2": outcome(layer, torch.ones(48 if rank() == 0 else 64)),  # 48: pending on rank 0 only
               "3": outcome(layer, torch.ones(64))}

    def b() -> None:
        (in_agreement if rank() == 0 else agreed).wait(WAIT_S)
        results["5"] = outcome(layer, torch.ones(64))
        b_done.set()

    threads = [threading.Thread(target=lambda: results.update({"4": outcome(layer, torch.ones(64))}), name="a"),
               threading.Thread(target=b, name="b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(4 * T_BESIDE)
    results.update({str(n): outcome(layer, torch.ones(x)) for n, x in ((6, 48), (7, 64), (8, 64))})
    emit(results=results, tuned=tuned_calls, agreed=layer.tuner.agreed_calls,
         alive=[t.name for t in threads if t.is_alive()],
         contextual={str(k[1]): d["index"] for k, d in sorted(layer.tuner.decisions.items(), key=str)})


@case
def call_beside_first() -> None:
    """Thread a makes the group's first call (it tunes); thread b makes call 2 with the same input, timed apart on
    purpose: on rank 0 while a's call tunes (a's first run waits until b's call returned or waits for a's), on rank
    1 once a's call has returned. Call 2 is not the first on any rank (the first tuned to its end): every rank runs
    it hot, whichever thread got there first. Then call 3 from the main thread."""
    from triton_dist_tune.contextual.tuner import ContextualTuner

    tdt.init_distributed()
    inside, a_done, b_done = threading.Event(), threading.Event(), threading.Event()
    tuned_calls: list[int] = []

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3)
    def layer(x: torch.Tensor) -> float:
        if threading.current_thread().name == "a" and not inside.is_set() and rank() == 0:  # b calls now
            inside.set()
            wait_for(lambda: b_done.is_set() or any(2 in n for n in getattr(layer.tuner, "_waiting", {}).values()))
        out = torch.empty_like(x)
        with INTERPRETER:
            copy_kernel[(1,)](x, out, x.numel())
        return float(out.sum())

    real_tune = ContextualTuner._tune

    def tune(self: Any, group: Any, calls: int, args: tuple, kwargs: dict) -> Any:
        tuned_calls.append(calls)
        return real_tune(self, group, calls, args, kwargs)

    ContextualTuner._tune = tune  # type: ignore[method-assign]
    results: dict[str, Any] = {}

    def a() -> None:
        results["1"] = outcome(layer, torch.ones(64))
        a_done.set()

    def b() -> None:
        (inside if rank() == 0 else a_done).wait(4 * T_BESIDE)
        results["2"] = outcome(layer, torch.ones(64))
        b_done.set()

    threads = [threading.Thread(target=a, name="a"), threading.Thread(target=b, name="b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(4 * T_BESIDE)
    results["3"] = outcome(layer, torch.ones(64))
    emit(results=results, tuned=tuned_calls, alive=[t.name for t in threads if t.is_alive()],
         contextual={str(k[1]): d["index"] for k, d in sorted(layer.tuner.decisions.items(), key=str)})


@case
def window_calls_from_two_threads() -> None:
    """Calls 5 and 6 in the tuning window of the agreement at call 4 (a key pending, sync_every=4), from threads c
    and d (c takes its number first), their turns timed apart on purpose: on rank 0 c's turn waits until d is
    tuning or waits for c, on rank 1 d's turn waits until c is tuning. Every rank must tune call 5 then call 6 (in
    the order of their numbers). Then calls 7 and 8 from the main thread."""
    from triton_dist_tune.contextual.tuner import ContextualTuner

    tdt.init_distributed()
    tuning = {"c": threading.Event(), "d": threading.Event()}
    tuned_calls: list[int] = []

    layer = copy_layer(4)

    def waits(call: int) -> bool:
        return any(call in numbers for numbers in getattr(layer.tuner, "_waiting", {}).values())

    real_tune = ContextualTuner._tune

    def tune(self: Any, group: Any, calls: int, args: tuple, kwargs: dict) -> Any:
        tuned_calls.append(calls)
        if threading.current_thread().name in tuning:
            tuning[threading.current_thread().name].set()
        return real_tune(self, group, calls, args, kwargs)

    group = layer.tuner.group()
    real_turn = type(group).turn

    def turn(self: Any) -> Any:
        me = threading.current_thread().name
        if me == "c" and rank() == 0:
            wait_for(lambda: tuning["d"].is_set() or waits(6))
        elif me == "d" and rank() == 1:
            wait_for(lambda: tuning["c"].is_set())
        return real_turn(self)

    ContextualTuner._tune = tune  # type: ignore[method-assign]
    results = {"1": outcome(layer, torch.ones(64)),  # first: tunes 64
               "2": outcome(layer, torch.ones(48 if rank() == 0 else 64)),  # 48: pending on rank 0 only
               "3": outcome(layer, torch.ones(64)),
               "4": outcome(layer, torch.ones(64))}  # the agreement: the window opens
    type(group).turn = turn  # type: ignore[method-assign]
    threads = [threading.Thread(target=lambda: results.update({"5": outcome(layer, torch.ones(64))}), name="c"),
               threading.Thread(target=lambda: results.update({"6": outcome(layer, torch.ones(48))}), name="d")]
    threads[0].start()
    wait_for(lambda: sum(layer.tuner._calls.values()) >= 5)  # c took number 5
    threads[1].start()
    for thread in threads:
        thread.join(4 * T_BESIDE)
    type(group).turn = real_turn  # type: ignore[method-assign]
    results.update({str(n): outcome(layer, torch.ones(64)) for n in (7, 8)})
    emit(results=results, tuned=tuned_calls, agreed=layer.tuner.agreed_calls,
         alive=[t.name for t in threads if t.is_alive()],
         contextual={str(k[1]): d["index"] for k, d in sorted(layer.tuner.decisions.items(), key=str)})


@case
def call_beside_a_hot_call_settling() -> None:
    """Thread a's call 3 is hot and meets a key no rank has decided (48 elements, on every rank): it settles it (and
    tunes it: every rank met it) once its run has ended, after thread b's call 4 (the agreement, sync_every=4) has
    decided whether it tunes. Thread c's call 5 comes at opposite moments on purpose: on rank 1 while a's call tunes
    the key (a's tuning waits until c's call returned, tunes or waits for a), on rank 0 once a's call has returned.
    Every rank must decide call 5 alike. Then calls 6 to 8 from the main thread."""
    from triton_dist_tune.contextual.session import Session
    from triton_dist_tune.contextual.tuner import ContextualTuner

    tdt.init_distributed()
    ran, b_done, settled, a_done, c_done = (threading.Event() for _ in range(5))
    tuned_calls: list[int] = []
    settled_now: list[int] = []

    layer = copy_layer(4)

    tuner = layer.tuner

    def waits(call: int) -> bool:  # the call waits in the library for the calls before it
        return any(call in numbers for numbers in getattr(tuner, "_waiting", {}).values())

    def tunes(call: int) -> bool:  # the call decided to tune (it waits for its turn or tunes)
        return any(call in numbers for numbers in getattr(tuner, "_tuning", {}).values())

    real_tune, real_tune_now = ContextualTuner._tune, Session._tune_now

    def tune(self: Any, group: Any, calls: int, args: tuple, kwargs: dict) -> Any:
        tuned_calls.append(calls)
        return real_tune(self, group, calls, args, kwargs)

    def tune_now(self: Any) -> bool:
        now = real_tune_now(self)
        if now:
            settled_now.append(self.call_number)
        if now and threading.current_thread().name == "a":
            settled.set()
            if rank() == 1:  # c calls now, while a's call tunes the key
                wait_for(lambda: c_done.is_set() or waits(5) or tunes(5))
        return now

    group = tuner.group()
    real_turn = type(group).turn

    def turn(self: Any) -> Any:
        if threading.current_thread().name == "a":  # a's run has ended: b calls now; a settles after b decided
            ran.set()
            wait_for(lambda: b_done.is_set() or waits(4))
        return real_turn(self)

    ContextualTuner._tune, Session._tune_now = tune, tune_now  # type: ignore[method-assign]
    results = {"1": outcome(layer, torch.ones(64)),  # first: tunes 64
               "2": outcome(layer, torch.ones(64))}
    type(group).turn = turn  # type: ignore[method-assign]

    def a() -> None:
        results["3"] = outcome(layer, torch.ones(48))
        a_done.set()

    def b() -> None:
        ran.wait(WAIT_S)
        results["4"] = outcome(layer, torch.ones(64))
        b_done.set()

    def c() -> None:
        wait_for(lambda: sum(tuner._calls.values()) >= 4)  # b took number 4
        (settled if rank() == 1 else a_done).wait(WAIT_S)
        results["5"] = outcome(layer, torch.ones(64))
        c_done.set()

    threads = [threading.Thread(target=fn, name=fn.__name__) for fn in (a, b, c)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(4 * T_BESIDE)
    type(group).turn = real_turn  # type: ignore[method-assign]
    results.update({str(n): outcome(layer, torch.ones(x)) for n, x in ((6, 64), (7, 48), (8, 64))})
    emit(results=results, tuned=tuned_calls, settled_now=settled_now, agreed=tuner.agreed_calls,
         alive=[t.name for t in threads if t.is_alive()],
         contextual={str(k[1]): d["index"] for k, d in sorted(tuner.decisions.items(), key=str)})


@case
def agreement_beside_a_hot_call_meeting_its_new_key_late() -> None:
    """Thread a's call 3 is hot: it copies 64 elements (decided), then 32 (a key no rank has decided, on every rank),
    and settles (tunes) 32 once its run has ended. Thread b makes call 4, the agreement (sync_every=4), once a's call
    has taken its number; a's run reaches its 32-element launch at opposite moments on purpose: on rank 1 at once
    (before b calls), on rank 0 only once b's call has decided whether it tunes (it agrees, or waits for a). Every
    rank must order the settlement and the agreement alike. Then calls 5 to 8 from the main thread."""
    from triton_dist_tune.contextual.session import Session

    tdt.init_distributed()
    in_agreement, paused = threading.Event(), threading.Event()
    settled_now: list[int] = []

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3, sync_every=4)
    def layer(x: torch.Tensor, y: torch.Tensor | None = None) -> float:
        out = torch.empty_like(x)
        with INTERPRETER:
            copy_kernel[(1,)](x, out, x.numel())
        if y is None:
            return float(out.sum())
        if threading.current_thread().name == "a" and rank() == 0 and not paused.is_set():
            paused.set()  # (once: the settlement's tuning runs the function again)
            wait_for(lambda: in_agreement.is_set() or waits(4), 2 * WAIT_S)
        more = torch.empty_like(y)
        with INTERPRETER:
            copy_kernel[(1,)](y, more, y.numel())
        return float(out.sum()) + float(more.sum())

    tuner = layer.tuner

    def waits(call: int) -> bool:  # the call waits in the library for the calls before it
        return any(call in numbers for numbers in getattr(tuner, "_waiting", {}).values())

    from triton_dist_tune.contextual import tuner as tuner_module

    real_agree, real_tune_now = tuner_module.agree, Session._tune_now

    def agree(self: Any, group: Any, calls: int) -> bool:
        in_agreement.set()
        return real_agree(self, group, calls)

    def tune_now(self: Any) -> bool:
        now = real_tune_now(self)
        if now:
            settled_now.append(self.call_number)
        return now

    tuner_module.agree, Session._tune_now = agree, tune_now  # type: ignore[method-assign]
    results = {"1": outcome(layer, torch.ones(64)),  # first: tunes 64
               "2": outcome(layer, torch.ones(64))}

    def a() -> None:
        results["3"] = outcome(layer, torch.ones(64), torch.ones(32))

    def b() -> None:
        wait_for(lambda: sum(tuner._calls.values()) >= 3)  # a took number 3
        if rank() == 1:  # a's run has met 32 here before b calls
            wait_for(lambda: any(3 in numbers for numbers in tuner._tuning.values()))
        results["4"] = outcome(layer, torch.ones(64))

    threads = [threading.Thread(target=fn, name=fn.__name__) for fn in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(4 * T_BESIDE)
    results.update({str(n): outcome(layer, torch.ones(64)) for n in range(5, 9)})
    emit(results=results, settled_now=settled_now, agreed=tuner.agreed_calls,
         alive=[t.name for t in threads if t.is_alive()],
         contextual={str(k[1]): d["index"] for k, d in sorted(tuner.decisions.items(), key=str)})


@case
def two_hot_calls_settling() -> None:
    """Threads a and b make hot calls 3 and 4, each meeting a key no rank has decided (48 and 32 elements, on every
    rank), their settlements timed apart on purpose: on rank 0 a's settles first (b's turn waits until a's settles
    or waits for it), on rank 1 a's turn waits until b is at its turn (or waits for a before it). Every rank met
    each key in its call: every rank must tune both, each in its own call. Then calls 5 and 6 from the main
    thread."""
    from triton_dist_tune.contextual.session import Session
    from triton_dist_tune.contextual.tuner import ContextualTuner

    tdt.init_distributed()
    a_settling, b_at_turn = threading.Event(), threading.Event()
    settled_now: list[int] = []

    layer = copy_layer(8)

    tuner = layer.tuner
    real_tune_now = Session._tune_now
    real_settle_turn = getattr(ContextualTuner, "settle_turn", None)

    def tune_now(self: Any) -> bool:
        if threading.current_thread().name == "a":
            a_settling.set()
        now = real_tune_now(self)
        if now:
            settled_now.append(self.call_number)
        return now

    def settle_turn(self: Any, group: Any, calls: int) -> None:
        if threading.current_thread().name == "b":
            b_at_turn.set()
        return real_settle_turn(self, group, calls)  # type: ignore[misc]

    group = tuner.group()
    real_turn = type(group).turn

    def turn(self: Any) -> Any:
        me = threading.current_thread().name
        if me == "b":
            b_at_turn.set()
            if rank() == 0:
                wait_for(lambda: a_settling.is_set())
        elif me == "a" and rank() == 1:
            wait_for(lambda: b_at_turn.is_set())
        return real_turn(self)

    Session._tune_now = tune_now  # type: ignore[method-assign]
    if real_settle_turn is not None:
        ContextualTuner.settle_turn = settle_turn  # type: ignore[method-assign]
    results = {"1": outcome(layer, torch.ones(64)),  # first: tunes 64
               "2": outcome(layer, torch.ones(64))}
    type(group).turn = turn  # type: ignore[method-assign]
    threads = [threading.Thread(target=lambda: results.update({"3": outcome(layer, torch.ones(48))}), name="a"),
               threading.Thread(target=lambda: results.update({"4": outcome(layer, torch.ones(32))}), name="b")]
    threads[0].start()
    wait_for(lambda: sum(tuner._calls.values()) >= 3)  # a took number 3
    threads[1].start()
    for thread in threads:
        thread.join(4 * T_BESIDE)
    type(group).turn = real_turn  # type: ignore[method-assign]
    results.update({str(n): outcome(layer, torch.ones(x)) for n, x in ((5, 48), (6, 32))})
    emit(results=results, settled_now=sorted(settled_now), alive=[t.name for t in threads if t.is_alive()],
         contextual={str(k[1]): d["index"] for k, d in sorted(tuner.decisions.items(), key=str)})


@case
def settlement_waiting_for_a_hot_call_that_ends_late() -> None:
    """Thread a's call 3 is hot (64 elements, decided) and its run holds until thread b's call 4 sleeps in the
    library: b's call is hot too, meets a key no rank has decided (48 elements, on every rank) and, its run ended,
    waits to settle it until every earlier call has ended. a's call then ends, which must wake b's at once: nothing
    else changes while b sleeps (no call waits to decide whether it tunes). Then calls 5 and 6 from the main
    thread."""
    from triton_dist_tune.contextual.session import Session
    from triton_dist_tune.contextual.tuner import ContextualTuner

    tdt.init_distributed()
    b_settling = threading.Event()
    settled_now: list[int] = []

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3, sync_every=100)
    def layer(x: torch.Tensor) -> float:
        if threading.current_thread().name == "a":  # b's call ends its run and sleeps, waiting for this one to end
            wait_for(lambda: b_settling.is_set() and len(getattr(tuner._changed, "_waiters", ())) > 0, 2 * WAIT_S)
        out = torch.empty_like(x)
        with INTERPRETER:
            copy_kernel[(1,)](x, out, x.numel())
        return float(out.sum())

    tuner = layer.tuner
    real_tune_now, real_settle_turn = Session._tune_now, ContextualTuner.settle_turn

    def tune_now(self: Any) -> bool:
        now = real_tune_now(self)
        if now:
            settled_now.append(self.call_number)
        return now

    def settle_turn(self: Any, group: Any, calls: int) -> None:
        if threading.current_thread().name != "b":
            return real_settle_turn(self, group, calls)
        b_settling.set()
        began = time.monotonic()
        try:
            return real_settle_turn(self, group, calls)
        finally:
            settle_wait.append(time.monotonic() - began)

    settle_wait: list[float] = []
    Session._tune_now, ContextualTuner.settle_turn = tune_now, settle_turn  # type: ignore[method-assign]
    results = {"1": outcome(layer, torch.ones(64)),  # first: tunes 64
               "2": outcome(layer, torch.ones(64))}

    def b() -> None:
        wait_for(lambda: sum(tuner._calls.values()) >= 3)  # a took number 3
        results["4"] = outcome(layer, torch.ones(48))

    threads = [threading.Thread(target=lambda: results.update({"3": outcome(layer, torch.ones(64))}), name="a"),
               threading.Thread(target=b, name="b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(4 * T_BESIDE)
    results.update({str(n): outcome(layer, torch.ones(x)) for n, x in ((5, 48), (6, 64))})
    emit(results=results, settled_now=settled_now, settle_wait=settle_wait,
         alive=[t.name for t in threads if t.is_alive()],
         contextual={str(k[1]): d["index"] for k, d in sorted(tuner.decisions.items(), key=str)})


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128)], key=["n"])
@triton.jit
def copy_alone_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def alone_layer(kernel: Any, timeout: float, before: Callable[[], None] = lambda: None) -> Any:
    """A ``contextual_autotune``d function of a process alone (``is_dist=False``) copying ``x`` with ``kernel``;
    ``before()`` runs first in every run."""

    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=1, timeout=timeout)
    def layer(x: torch.Tensor, cancel: bool = False) -> float:
        before()
        out = torch.empty_like(x)
        with INTERPRETER:
            kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel())
        if cancel:
            raise KeyboardInterrupt  # a BaseException out of the run, as a cancelled task's
        return float(out.sum())

    return layer


#: the timeout of the hot calls alone (s): a run of theirs past it ends the process (exit 86)
T_ALONE = 2.0


@case
def hot_call_alone_waiting_for_a_long_tuning() -> None:
    """A process alone: f's hot call meets a new key (its timed launches put its run under the watchdog, T = 2 s),
    its run ends, and it waits for the process's turn (to settle the key) while g, on another thread, tunes for
    longer than T: g's run holds until f waits, then 3 s more. The waiting is no run: f must not be ended as
    hung. Then a hot run of f raises a BaseException after meeting a new key, and the process lives on past T."""
    from triton_dist_tune.contextual.tuner import ContextualTuner

    f_waits, g_inside = threading.Event(), threading.Event()

    def g_before() -> None:
        if threading.current_thread().name == "g" and not g_inside.is_set():
            g_inside.set()
            f_waits.wait(2 * WAIT_S)
            time.sleep(T_ALONE + 1.0)

    f = alone_layer(copy_alone_kernel, T_ALONE)
    g = alone_layer(copy_kernel, 60.0, g_before)
    real_settle_turn = ContextualTuner.settle_turn

    def settle_turn(self: Any, group: Any, calls: int) -> None:
        if self is f.tuner and threading.current_thread().name == "MainThread":
            f_waits.set()
        return real_settle_turn(self, group, calls)

    ContextualTuner.settle_turn = settle_turn  # type: ignore[method-assign]
    results = {"f 64": outcome(f, torch.ones(64))}  # f's first call: tunes 64
    thread = threading.Thread(target=lambda: results.update({"g 64": outcome(g, torch.ones(64))}), name="g")
    thread.start()
    g_inside.wait(WAIT_S)
    results["f 48"] = outcome(f, torch.ones(48))  # hot, a new key: settled (tuned) once g's tuning has ended
    thread.join(4 * WAIT_S)
    try:
        f(torch.ones(32), cancel=True)  # hot, a new key, and the run raises a BaseException
    except KeyboardInterrupt:
        results["f 32"] = {"error": "KeyboardInterrupt"}
    time.sleep(T_ALONE + 1.0)  # a deadline left armed would end the process now
    emit(results=results, alive=[thread.name] if thread.is_alive() else [],
         decided=sorted(str(k[1]) for k in f.tuner.decisions))


#: the tuner's timeout in call_beside_agreement (s), as tests/test_threads.py sets it
T_BESIDE = 10


@case
def nested_on_two_groups() -> None:
    """Nested tunings on two groups from two threads, in the same order on every rank: a contextual tuning call on
    the default group whose function calls an ``autotune``d function on another group of the same ranks (half a
    second into its first run); on another thread, started once the contextual call runs, a tuning on that other
    group whose function calls another contextual function on the default group."""
    tdt.init_distributed()
    other = dist.new_group([0, 1])
    inner_f = tuned("nested_inner_f")
    entered = threading.Event()

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=3)
    def outer_layer(x: torch.Tensor) -> float:
        entered.set()
        time.sleep(0.5)
        out = torch.empty_like(x)
        with INTERPRETER:
            copy_kernel[(1,)](x, out, x.numel())
        return float(out.sum()) + inner_f(torch.ones(4), autotune_pg=other)

    inner_layer = contextual_layer()

    @tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=0, n_repeat=2, timing="cold", name="nested_outer_g")
    def outer_g(x: torch.Tensor, *, block: int) -> float:
        nap(SLEEP_MS[block])
        return inner_layer(torch.ones(64)) + block

    calls = {"ctx": lambda: outer_layer(torch.ones(64)), "g": lambda: outer_g(torch.ones(4), autotune_pg=other)}
    results = in_order(calls, ["ctx", "g"], lambda name: entered.wait(WAIT_S))
    emit(results=results)

if __name__ == "__main__":
    main()
