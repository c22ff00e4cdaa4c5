"""Fault-injection scenarios for ``autotune``, run as real ranks by tests/test_faults.py.

Usage: ``python fault_cases.py CASE`` under torchrun, ``tests/harness.run_ranks`` (RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT set), mpiexec (``MODE=mpi``) or alone (no rank variables: a single process). Every rank prints
``RESULT {json}`` lines.

Environment of the ``tune`` case:

- ``FAULTS``: comma-separated ``config:kind@rank`` faults, each injected into the tuned function:
  ``raise`` (raise after the function's collective), ``poison`` (raise as torch does after an illegal memory
  access, which leaves the GPU context unusable), ``raise_before`` (raise before it, while the other ranks
  wait inside it), ``hang`` (sleep for an hour before the collective), ``hang_after`` (after it: the other ranks
  go on to the exchange and wait there), ``hang_gil`` (sleep in C holding the GIL),
  ``kill`` (first attempt only, of the runs ``KILL_RUNS`` names, default ``0``: write ``kill-me.rank<r>`` with the
  pid into ``FAULT_DIR`` and wait to be killed, or signalled), ``stop`` (``RUN`` 0, the first call of the config
  only: write ``stop-me.rank<r>`` and go on ``GO_ON_S`` (1.5) s after the test has stopped and continued the rank,
  ``_cases.stopped_then_on``), ``stop_after`` (the same, ``STOP_AFTER_S`` (1) s after the collective), ``mark``
  (write ``stop-me.rank<r>`` there and go on at once: the test stops the rank with another).
- ``FAULT_DIR``: each rank appends one line ``<run>.<attempt> <config>`` to ``calls.rank<r>`` for every call of
  the tuned function, so the tests can count how often each config ran in each attempt.
- ``RUN``: a label for the run (the tests' own reruns); the attempt is ``TORCHELASTIC_RESTART_COUNT``.
- ``SYNC_DIR``, ``JOBS``, ``JOB``, ``JOB_DELAY``: jobs that must tune at the same moment wait for each other.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from pathlib import Path

import _cases
import torch
import torch.distributed as dist
from _cases import case, main, pid_marker, stopped_then_on, waited_for

import triton_dist_tune as tdt

MPI_MODE = os.environ.get("MODE") == "mpi"
#: ms each config sleeps: alone in a healthy space, config 0 is the fastest, then 1, 2, 3. ``make_work``'s function
#: also spends them on the virtual clock (``_cases.use_virtual_clock``), which times its samples: the order is the
#: scenario's whatever the load (on the wall clock, 5 against 40 ms over two cold samples was reordered once by a
#: loaded machine's stalls, as 160 against 320 ms had been before)
SLEEP_MS = [5, 40, 160, 640]
# cold timing (one call per sample) and 2 rounds: every config still running gets exactly N_WARMUP + N_REPEAT calls
# ($N_WARMUP sets the warm-up runs)
N_WARMUP, N_REPEAT = 1, 2
#: whether the ``stop`` fault fired in this process (it fires in its first call of the config only)
STOPPED: list[int] = []




def emit(**fields) -> None:
    """A RESULT line that also names the rank and the restart attempt."""
    _cases.emit(rank=rank(), attempt=attempt(), **fields)


def attempt() -> str:
    return f"{os.environ.get('RUN', '0')}.{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def rank() -> int:
    if MPI_MODE:
        return comm().Get_rank()
    return dist.get_rank() if dist.is_initialized() else 0


def start() -> None:
    if not MPI_MODE and "WORLD_SIZE" in os.environ:
        tdt.init_distributed()


def faults() -> dict[tuple[int, int], str]:
    found = {}
    for item in filter(None, os.environ.get("FAULTS", "").split(",")):
        config, rest = item.split(":")
        kind, on = rest.split("@")
        found[(int(config), int(on))] = kind
    return found


def record(variant: int) -> None:
    folder = Path(os.environ["FAULT_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"calls.rank{rank()}", "a") as f:
        f.write(f"{attempt()} {variant}\n")


def collective(x: torch.Tensor) -> torch.Tensor:
    if MPI_MODE:
        return torch.tensor(comm().allreduce(x.tolist()[0])).expand(x.shape).clone()
    if dist.is_initialized():
        y = x.clone()
        dist.all_reduce(y)
        return y
    return x.clone()


def make_work(name: str = "work", **options):
    injected = faults()
    _cases.use_virtual_clock()  # (see SLEEP_MS)

    options = {"n_warmup": int(os.environ.get("N_WARMUP", N_WARMUP)), "n_repeat": N_REPEAT, "timing": "cold",
               **options}

    @tdt.autotune(config_space=[{"variant": v} for v in range(len(SLEEP_MS))], key_fn=lambda x: tuple(x.shape),
                  name=name, **options)
    def work(x: torch.Tensor, *, variant: int) -> torch.Tensor:
        me = rank()
        record(variant)
        kind = injected.get((variant, me))
        if kind == "raise_before":
            Path(os.environ["FAULT_DIR"], f"raised.rank{me}").write_text(repr(time.time()))
            raise RuntimeError(f"injected: config {variant} raised on rank {me} before the collective")
        if kind == "hang":
            time.sleep(3600)  # a hung kernel: only the watchdog ends this
        if kind == "store_get":  # NCCL's first use of a communicator, waiting for an id a peer that raised never
            from torch.distributed import distributed_c10d as c10d  # sends: a blocking get on the job's client

            c10d._get_default_store().get("an id no rank ever sets")
        if kind == "hang_gil":
            ctypes.PyDLL(None).sleep(3600)  # C code that never releases the GIL: only the backstop ends this
        if kind == "kill" and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0" and \
                os.environ.get("RUN", "0") in os.environ.get("KILL_RUNS", "0").split(","):
            pid_marker(Path(os.environ["FAULT_DIR"]) / f"kill-me.rank{me}")
            time.sleep(3600)
        marker = Path(os.environ["FAULT_DIR"]) / f"stop-me.rank{me}"
        first_stop = (kind or "").startswith(("stop", "mark")) and os.environ.get("RUN", "0") == "0" and not STOPPED
        if first_stop:
            STOPPED.append(me)
        if first_stop and kind == "mark":  # only say where this process is: the test stops it with another
            pid_marker(marker)
        if first_stop and kind == "stop":
            stopped_then_on(marker)
        time.sleep(SLEEP_MS[variant] / 1e3)
        _cases.spend(SLEEP_MS[variant])
        y = collective(x * (variant + 1))
        if first_stop and kind == "stop_after":  # past the collective: the others reach the tuner's exchange
            time.sleep(float(os.environ.get("STOP_AFTER_S", "1.0")))
            stopped_then_on(marker)
        if kind == "hang_after":
            time.sleep(3600)
        if kind == "raise":
            raise RuntimeError(f"injected: config {variant} raised on rank {me}")
        if kind == "poison":  # what torch raises once a kernel made an illegal memory access
            raise RuntimeError("CUDA error: an illegal memory access was encountered (injected)")
        return y

    return work


def rendezvous_jobs() -> None:
    """Jobs sharing a cache folder start tuning together: rank 0 of each waits for every job's rank 0."""
    sync = os.environ.get("SYNC_DIR")
    if not sync:
        return
    jobs, job = int(os.environ["JOBS"]), os.environ["JOB"]
    if rank() == 0:
        Path(sync, f"ready.{job}").touch()
        deadline = time.monotonic() + 60
        while len(list(Path(sync).glob("ready.*"))) < jobs and time.monotonic() < deadline:
            time.sleep(0.01)
    if dist.is_initialized():
        dist.barrier()
    time.sleep(float(os.environ.get("JOB_DELAY", "0")))


@case
def tune():
    """Tune ``work`` once (with the faults of ``FAULTS``) and report the choice and the table."""
    start()
    rendezvous_jobs()
    work = make_work()
    x = torch.ones(4)
    t0 = time.perf_counter()
    try:
        out = work(x, autotune_pg=comm()) if MPI_MODE else work(x)
    except tdt.AutotuneError as exc:
        emit(error=type(exc).__name__, message=str(exc))
        raise
    ((_, table),) = work.tuner.tables.items()
    emit(chosen=chosen(work), out=out.tolist(), states=[r["state"] for r in table],
         errors=[r.get("error") for r in table], resumed=[bool(r.get("resumed")) for r in table],
         seconds=time.perf_counter() - t0)


@case
def capture_hang():
    """One rank tunes ``captured`` (steady timing) as if its calls replayed from CUDA graphs, which cannot run here: a
    stand-in :class:`~triton_dist_tune.measure.graphs.Graphs` whose capture runs the call once (as torch's warm-up
    before a capture does) and replays the call itself. With ``CAPTURE_HANG=1`` config 1 hangs inside its capture
    (a kernel that never ends: only the watchdog ends this); with ``CAPTURE_RAISE=1`` config 2 raises there, as the
    synchronize after a capture raises a kernel's asynchronous error; the configs ``CAPTURE_FAILS`` lists
    (comma-separated) cannot be captured (the stand-in's capture fails, as torch's does at a host read; with
    ``CAPTURE_OOM=1``, for want of device memory), of
    ``CAPTURE_VARIANTS`` configs (default 3). Reports the choice, the clock and the table."""
    from triton_dist_tune.measure import sampling

    capturing = _cases.host_graphs(frozenset(int(v) for v in os.environ.get("CAPTURE_FAILS", "").split(",") if v),
                                   oom=bool(os.environ.get("CAPTURE_OOM")))
    sampling.device_time_applies = lambda *args: True
    start()
    hang, raises = os.environ.get("CAPTURE_HANG") == "1", os.environ.get("CAPTURE_RAISE") == "1"

    variants = int(os.environ.get("CAPTURE_VARIANTS", "3"))

    @tdt.autotune(config_space=[{"variant": v} for v in range(variants)], key_fn=lambda x: tuple(x.shape),
                  name="captured")
    def captured(x: torch.Tensor, *, variant: int) -> torch.Tensor:
        record(variant)
        if hang and variant == 1 and capturing:
            time.sleep(3600)
        if raises and variant == 2 and capturing:
            raise RuntimeError("CUDA error: an unaligned access was encountered (injected in a capture)")
        time.sleep(SLEEP_MS[variant] / 1e3)
        return x * (variant + 1)

    captured(torch.ones(4))
    ((_, decision),) = captured.tuner.decisions.items()
    ((_, table),) = captured.tuner.tables.items()
    emit(chosen=chosen(captured), clock=decision.clock, states=[r["state"] for r in table],
         errors=[r.get("error") for r in table])


def chosen(work) -> int:
    """The variant ``work`` decided on (for its one key)."""
    (config,) = [*work.tuner.decided.values(), *work.tuner.decided_in.values()]
    return config["variant"]



def tuned(work) -> int:
    """How many keys ``work`` tuned (a cache hit also fills ``tuner.decisions``, marked cached)."""
    return sum(not d.cached for d in work.tuner.decisions.values())

@case
def cache_damage():
    """Damage the cache file in every way a crash or a disk can, each time asking again in a new tuner."""
    start()
    damages = {  # (an empty file and an out-of-range index are in tests/test_tune_dist.py)
        "truncated": lambda text: text[: len(text) // 2].encode(),
        "binary": lambda text: b"\x00\xff\xfe\x80 not utf-8",
        "not_an_object": lambda text: b"[1, 2, 3]",
        "index_not_int": lambda text: json.dumps({**json.loads(text), "index": "0"}).encode(),
    }
    cache_dir = Path(os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"]) / "work"
    x = torch.ones(4)
    work = make_work()
    work(x)
    files = sorted(cache_dir.glob("*.json"))
    good = files[0].read_text()
    outcome = {"first": chosen(work), "files": len(files)}
    for label, damage in damages.items():
        if rank() == 0:
            files[0].write_bytes(damage(good))
        _barrier()
        work = make_work()
        work(x)
        outcome[label] = (chosen(work), tuned(work))  # 1 when it tuned again
        _barrier()
    # a half-written cache file (the temporary file of an interrupted atomic write) next to the real one
    if rank() == 0:
        files[0].write_text(good)
        (cache_dir / f".{files[0].name}.abc123.tmp").write_text(good[: len(good) // 3])
    _barrier()
    work = make_work()
    work(x)
    outcome["tmp_leftover_with_file"] = (chosen(work), tuned(work))
    _barrier()
    if rank() == 0:
        files[0].unlink()
    _barrier()
    work = make_work()
    work(x)
    outcome["tmp_leftover_alone"] = (chosen(work), tuned(work))
    _barrier()
    outcome["valid_json_after"] = json.loads(files[0].read_text())["config"]
    emit(**outcome)


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def tune_and_say_error(work, pg, reraise: bool = False) -> None:
    """Call ``work`` once on ``pg`` and emit the library error it raised (its type, message and seconds), or none;
    ``reraise``: raise it again after, as a user's script would."""
    t0 = time.perf_counter()
    try:
        work(torch.ones(4), autotune_pg=pg)
        emit(error=None)
    except tdt.AutotuneError as exc:
        emit(error=type(exc).__name__, message=str(exc), seconds=time.perf_counter() - t0)
        if reraise:
            raise


@case
def wrong_group():
    """Ranks that call with groups that do not match (``GROUPING``).

    ``not_every_rank`` (2 ranks): rank 0 tunes with a group {0, 1} that rank 1 never calls with (it uses the
    whole world, also of size 2). ``sizes`` (3 ranks): rank 0 tunes with {0, 1} (size 2), ranks 1 and 2 with the
    whole world (size 3). Every rank waits for a rank that is elsewhere and raises GroupTimeoutError.
    """
    start()
    pair = dist.new_group([0, 1])
    pg = pair if dist.get_rank() == 0 else dist.group.WORLD
    tune_and_say_error(make_work(name="wrong_group"), pg)
    dist.barrier()  # under run_ranks rank 0 hosts the store: it stays until every rank has timed out
    sys.stdout.flush()
    os._exit(0)  # the ranks' channels are out of step now: this process must not tune again


@case
def mpi_cancelled():
    """Under mpiexec: rank 1's task is cancelled (``asyncio.CancelledError``) in config 0's first warm-up run of run
    ``0``, and the error ends rank 1's script (mpi4py then waits in ``MPI_Finalize``); rank 0 has finished that run
    and waits at the exchange that starts the next one together, inside the warm-up's deadline."""
    import asyncio

    me, first = rank(), os.environ.get("RUN", "0") == "0"
    _cases.use_virtual_clock()  # (see SLEEP_MS)

    @tdt.autotune(config_space=[{"variant": v} for v in range(3)], key_fn=lambda x: tuple(x.shape), n_warmup=2,
                  n_repeat=N_REPEAT, timing="cold", name="mpi_cancelled")
    def work(x: torch.Tensor, *, variant: int) -> torch.Tensor:
        record(variant)
        if first and me == 1 and variant == 0:
            raise asyncio.CancelledError()
        time.sleep(SLEEP_MS[variant] / 1e3)
        _cases.spend(SLEEP_MS[variant])
        return x * (variant + 1)

    work(torch.ones(4), autotune_pg=comm())
    ((_, table),) = work.tuner.tables.items()
    emit(chosen=chosen(work), states=[r["state"] for r in table], errors=[r.get("error") for r in table])


@case
def mpi_raise_mid_warm_up():
    """Under mpiexec: ``tune``'s function with the default (steady) timing, whose warm-up is a phase of several runs
    (a warm-up run, then the steady probe); ``FAULTS`` makes a rank raise in one of them."""
    start()
    work = make_work(name="mpi_raise_mid_warm_up", timing="steady")
    out = work(torch.ones(4), autotune_pg=comm())
    ((_, table),) = work.tuner.tables.items()
    emit(chosen=chosen(work), out=out.tolist(), states=[r["state"] for r in table],
         errors=[r.get("error") for r in table])


@case
def mpi_fill_raise():
    """Under mpiexec: logits scaled in place, then sampled on rank 0 (``torch.multinomial``) before an allreduce over
    the communicator. In the first run (``RUN=0``), config 1's run from the tuner's NaN fill raises on rank 0 and
    leaves rank 1 inside the allreduce, which only the watchdog ends; ``RUN=1`` is the rerun."""
    me = rank()

    @tdt.autotune(config_space=[{"variant": v} for v in range(3)], key_fn=lambda logits: 0, n_warmup=1,
                  n_repeat=N_REPEAT, name="mpi_fill_raise")
    def sample_(logits: torch.Tensor, *, variant: int) -> float:
        record(variant)
        logits.div_(0.7)
        if me == 0:
            torch.multinomial(logits.softmax(-1), 1)
        comm().allreduce(float(logits.sum()))
        time.sleep(SLEEP_MS[variant] / 1e3)
        return float(logits.sum())

    result = _cases.outcome(sample_, torch.randn(8, 32), autotune_pg=comm())
    decision = next(iter(sample_.tuner.decisions.values()), None)
    emit(result=result, states=[o.state for o in decision.outcomes] if decision else None,
         errors=[o.error for o in decision.outcomes] if decision else None)


@case
def mpi_late_at_an_exchange():
    """Under mpiexec, ``STEP`` (``combine`` or ``allgather``): rank 0 waits ``T`` s at an exchange of the tuner's
    MPI channel and gives up (``GroupTimeoutError``); only then (a file says so) does rank 1 come to it, with the
    same deadline. Each rank reports what its exchange ended in; both then end their scripts, as a user's would."""
    from triton_dist_tune.group.mpi import MpiGroup

    group = MpiGroup(comm(), timeout=30)
    gave_up = Path(os.environ["FAULT_DIR"]) / "rank0_gave_up"
    seconds = float(os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"])
    if group.rank == 1 and not waited_for([gave_up]):
        emit(error="rank 0 never gave up")
        return
    t0 = time.monotonic()
    try:
        if os.environ["STEP"] == "combine":
            group.combine(group.rank, "a late exchange", sum, timeout=seconds)
        else:
            group.allgather(group.rank, "a late exchange", timeout=seconds)
        emit(error=None, seconds=time.monotonic() - t0)
    except tdt.AutotuneError as exc:
        emit(error=type(exc).__name__, message=str(exc), seconds=time.monotonic() - t0)
    finally:
        if group.rank == 0:
            gave_up.parent.mkdir(parents=True, exist_ok=True)
            gave_up.touch()


@case
def mpi_wrong_comm():
    """Under mpiexec: rank 0 tunes with COMM_WORLD, rank 1 with a duplicate of it that rank 0 never uses."""
    world = comm()
    other = world.Dup()
    mine = world if world.Get_rank() == 0 else other
    # raised again, as a user's script would: mpiexec then ends the job with a non-zero status
    tune_and_say_error(make_work(name="mpi_wrong_comm"), mine, reraise=True)


@case
def groups_created_in_another_order():
    """2 ranks that start their group themselves, outside ``init_distributed`` (``dist.init_process_group`` under
    torchrun, on its agent's store; mpi4py under mpiexec, ``MODE=mpi``), each making two groups of both ranks, rank 1
    in the other order (torch groups; MPI duplicates of COMM_WORLD), and tuning on the first it made: the groups
    the two ranks tune on are not the same (torch names the group '1' on rank 0 and '2' on rank 1; the MPI
    duplicates pair by the order of the calls). Nothing here says so to the ranks (no job is registered for the
    names of the groups, :mod:`triton_dist_tune.group.names`): each waits ``T`` and raises GroupTimeoutError."""
    if MPI_MODE:
        world = comm()
        made = [world.Dup(), world.Dup()]
        me = world.Get_rank()
    else:
        dist.init_process_group("gloo")
        made = [dist.new_group([0, 1]), dist.new_group([0, 1])]
        me = dist.get_rank()
    mine = made[0] if me == 0 else made[1]  # (each rank's first: rank 1 made them in the other order)
    tune_and_say_error(make_work(name="groups_in_another_order"), mine)
    sys.stdout.flush()
    if not MPI_MODE:
        dist.barrier()  # (on the default group: both ranks are past their waits)
    os._exit(0)  # the ranks' channels are out of step now (MPI: an Idup pending on each rank): no finalize


@case
def init_restarts():
    """Under torchrun: attempts 0.. fail on alternating ranks right after an all_reduce; the last one succeeds."""
    t0 = time.perf_counter()
    tdt.init_distributed(timeout_s=30)
    me, count = dist.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    y = torch.tensor([float(me + 1)])
    dist.all_reduce(y)
    emit(sum=y.item(), init_seconds=time.perf_counter() - t0)
    if count < int(os.environ["FAIL_ATTEMPTS"]):
        if me == count % 2:
            os._exit(3)  # this attempt dies; the other rank is left inside the next collective
        dist.barrier()
    emit(done=True)


@case
def board_posted_in_the_last_slice():
    """Rank 0 waits at an exchange that rank 1 never joins (deadline 3 s: slices of 1 s, the group's failure board
    read between them); rank 1 posts on that board that it ended its process, while rank 0's last slice runs: a
    file handshake, not a clock (rank 0's last store wait begins only once the report is posted). Rank 0 prints
    the error it raised and how many slices it waited."""
    from triton_dist_tune.group import store as store_module
    from triton_dist_tune.group.channel import FailureReport
    from triton_dist_tune.group.resolve import resolve_group

    start()
    group = resolve_group(None)
    board = group.board()
    folder = Path(os.environ["FAULT_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    if rank() == 1:
        waited_for([folder / "last_slice"])
        board.post(FailureReport(1, 0, "{variant: 0}", "hung: run exceeded 3 s (injected)", ended=True, origin=1,
                                exits=True))  # as its watchdog posts before it ends the process
        (folder / "posted").touch()
        waited_for([folder / "done"])
        emit(posted=True)
        return
    slices: list[float] = []
    plain = store_module.quiet_store_wait

    def wait(store, keys, seconds, **kw):
        slices.append(seconds)
        if seconds < store_module.BOARD_SLICE_S:  # the last slice: less than a slice was left
            (folder / "last_slice").touch()
            waited_for([folder / "posted"])
        return plain(store, keys, seconds, **kw)

    store_module.quiet_store_wait = wait
    try:
        group.combine(1, "an exchange rank 1 never joins", list, timeout=3.0)
        emit(error=None, slices=len(slices))
    except tdt.AutotuneError as exc:
        emit(error=type(exc).__name__, message=str(exc)[:600], slices=len(slices))
    finally:
        store_module.quiet_store_wait = plain
        (folder / "done").touch()



@case
def stale_journal_cache_hit():
    """2 ranks, each its own one-rank group (the same cache entry: a group's size names it, not its ranks). Rank
    1's tuning is interrupted (its journal stays, for a resume); rank 0's group then tunes the key and writes the
    decision; rank 1 calls again and is served that decision from the cache. Emits rank 1's journals before and
    after."""
    tdt.init_distributed()
    me = rank()
    alone = [dist.new_group([r]) for r in range(dist.get_world_size())][me]
    interrupt = [me == 1]

    @tdt.autotune([{"variant": v} for v in range(2)], key_fn=lambda x: tuple(x.shape), n_warmup=1, n_repeat=1,
                  timing="cold", name="stale")
    def f(x: torch.Tensor, *, variant: int) -> torch.Tensor:
        if interrupt[0]:
            interrupt[0] = False
            raise KeyboardInterrupt  # a Ctrl-C its caller catches: the tuning is cut, its journal kept
        return x * (variant + 1)

    cache = Path(os.environ["TRITON_DIST_AUTOTUNE_CACHE_DIR"])
    before: list[str] = []
    if me == 1:
        try:
            f(torch.ones(4), autotune_pg=alone)
        except KeyboardInterrupt:
            pass
        before = sorted(p.name for p in cache.rglob("*.journal"))
    dist.barrier()
    if me == 0:
        f(torch.ones(4), autotune_pg=alone)  # decided, written to the cache
    dist.barrier()
    if me == 1:
        f(torch.ones(4), autotune_pg=alone)  # a cache hit
    dist.barrier()
    emit(before=before, after=sorted(p.name for p in cache.rglob("*.journal")))


if __name__ == "__main__":
    main(mpi=MPI_MODE)

