"""A chaos run: random faults at random moments on jobs of 2-4 real gloo ranks, looking for hangs and divergence.

Each job is a fresh set of rank processes (``benchmarks/_chaos_rank.py``, torchrun's variables, a fresh HOME, cache
and log folder) tuning a small function (``autotune`` on one or two keys, a ``campaign`` of 3 keys, or
``contextual_autotune`` around a ``triton.autotune`` kernel; a few configs, sometimes a gloo all_reduce inside the
tuned call) with the tuner's timeout ``T`` (``--timeout``, default 4 s), and ONE fault drawn from the job's seed:
SIGKILL or SIGSTOP of one rank (at a random delay after every rank is up, or at the k-th call of a config; a stopped
rank is continued after 0.5-3 T, or never), a RuntimeError in the tuned function on one rank at one config (before
or after its all_reduce), a sleep of 2 T there, an error in the key function or ``prune_fn`` on one rank; or no fault
(the control). A fault that comes in the user's own call of a key already decided (the call after the tuning) is the
user's: its errors are not the library's to report. So is a survivor's error raised there by the function's own
collective when a peer dies at the driver's delay (the driver cannot tell where that lands: each rank says whether
its error is the one its function raised in a call of a decided key, ``_chaos_rank.py``'s ``user_call``); such a
survivor may end beside one that returned or one that raised the library's error, and only its own end is excused.
Past ``6 T + 30`` s a job is a HANG: every live rank dumps its threads' stacks (SIGUSR1, faulthandler) into
``stack.rank<r>`` in the job's folder, then is killed.

Checked per job (the library's promise: docs/fault-tolerance.md):

- no hang;
- the surviving ranks (all but a killed one, or one stopped for good) either all return, with the same choice per
  key, or all end with the library's errors (an ``AutotuneError`` raised, or the watchdog's exit 86 / 87), never a
  mix, never another error (but the user's own call's, above);
- they end within ``2 T + 10`` s of the fault (the documented bounds are about ``T + max(1, T/10)``; the slack is
  for a loaded machine), or of a stopped rank's continuation;
- where a survivor raised for a rank's fault, its message names that rank (a killed store host: the store).

With ``--launcher mpi`` each job is started by ``mpiexec -n N --oversubscribe``, its ranks tuning over mpi4py's
``COMM_WORLD`` (no torch.distributed; the function's collective is mpi4py's ``allreduce``): the same jobs and faults,
checked against what docs/fault-tolerance.md promises there. No failure board (a peer waits ``T`` at an exchange,
one left in the function's collective is ended by its watchdog or the backstop), and the first rank to exit non-zero
ends the job: a survivor killed without a word after another rank's non-zero end (``mpiexec``) is the job's end,
and no mix where others had returned. A rank ends at its RESULT or its process's end, whichever is first
(``MPI_Finalize`` waits for every rank); a campaign's round keeps its worst case, ``(T + max(1, T/10)) x (configs +
4)`` s, which bounds its ranks' ends where that is longer; the ranks of an mpi4py group's GroupTimeoutError are not
named (a wait cannot tell who is missing); mpiexec alive 10 s after every rank's process ended is killed and noted.

Usage: ``python benchmarks/chaos.py --jobs 60 [--seed S] [--timeout T] [--out FILE] [--launcher mpi]``; ``--smoke``
runs 3 jobs;
``--job-seed S`` runs the one job of that seed again (each job's line prints its seed). One line per job, then a
summary; ``--out`` writes every job as JSON. The job folders are kept for violations (``--keep``: all).
``--faults interrupt``: ranks interrupted and calling on (``benchmarks/_chaos_interrupt.py``, its docstring).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _chaos_options import chaos_parser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from ports import free_port  # noqa: E402  (a pytest-xdist worker's own slice: two workers' jobs never meet)

HERE = Path(__file__).resolve().parent
RANK_SCRIPT = HERE / "_chaos_rank.py"
KINDS = ["none", "kill", "stop", "raise", "sleep", "key_raise", "prune_raise"]
WEIGHTS = [2, 3, 3, 3, 2, 1, 1]
#: exit statuses of a rank the library ended: its watchdog (hung, 86; a peer failed while it was inside, 87)
LIBRARY_EXITS = {86: "watchdog86", 87: "peer87"}


def make_plan(seed: int, timeout: float, launcher: str = "torch") -> dict[str, Any]:
    """The job of ``seed``: ranks, what is tuned, and its one fault (the same under either ``launcher``)."""
    rng = random.Random(seed)
    n = rng.choice([2, 2, 3, 4])
    mode = rng.choices(["autotune", "campaign", "contextual"], weights=[5, 3, 2])[0]
    kind = rng.choices(KINDS, weights=WEIGHTS)[0]
    if kind in ("key_raise", "prune_raise") and mode == "contextual":
        mode = "autotune"  # contextual_autotune has neither
    configs = rng.choice([3, 4])
    keys = {"autotune": rng.choice([[4], [4, 8]]), "campaign": [4, 8, 12],
            "contextual": rng.choice([[64], [64, 128]])}[mode]
    fault: dict[str, Any] = {"kind": kind}
    if kind != "none":
        fault.update(rank=rng.randrange(n), config=rng.randrange(configs), k=rng.randint(1, 4),
                     where=rng.choice(["before", "after"]),
                     trigger="delay" if kind in ("kill", "stop") and rng.random() < 0.5 else "call",
                     delay=round(rng.uniform(0.0, 3.0), 2))
        if kind == "key_raise":
            fault["k"] = rng.randint(1, 3)
        if kind == "stop":
            fault["cont"] = None if rng.random() < 0.4 else round(rng.uniform(0.5, 3.0) * timeout, 2)
    return {"seed": seed, "launcher": launcher, "ranks": n, "mode": mode, "configs": configs, "keys": keys,
            "collective": rng.random() < 0.5, "prune": kind == "prune_raise" or rng.random() < 0.3, "fault": fault}


@dataclass
class Rank:
    """One rank's end as the driver saw it."""

    rank: int
    rc: int | None = None
    ended: float | None = None  #: wall time the driver saw it end
    outcome: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    stderr_tail: str = ""
    backstop: bool = False  #: its stderr holds the faulthandler backstop's dump (``Timeout (0:00:10)!``)


@dataclass
class Job:
    """One job's plan, what happened, and its verdict."""

    seed: int
    plan: dict[str, Any]
    seconds: float = 0.0
    fault_at: float | None = None  #: wall time the fault was injected (None: it never fired)
    cont_at: float | None = None  #: wall time a stopped rank was continued
    hang: bool = False
    #: a driver's fault came after its rank had printed its outcome (its tuning over: nothing left to disturb)
    victim_done: bool = False
    #: the fault came in the user's own call of a decided key, after the tuning: its errors are the user's
    after_decision: bool = False
    ranks: list[Rank] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  #: what is documented yet worth a look (the backstop's ends)
    folder: str = ""


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def rank_env(plan: dict[str, Any], folder: Path, timeout: float) -> dict[str, str]:
    """Every rank's environment but its rank variables: a fresh HOME, cache and log folder, the tuner's timeout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1", "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "HOME": str(folder / "home"), "TRITON_CACHE_DIR": str(folder / "home" / "triton"),
           "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(folder / "cache"),
           "TRITON_DIST_AUTOTUNE_LOG_DIR": str(folder / "logs"),
           "TRITON_DIST_AUTOTUNE_TIMEOUT": str(timeout), "CHAOS_PLAN": json.dumps(plan),
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    for name in ("TORCHELASTIC_RESTART_COUNT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


class Ranks:
    """A job's rank processes as the driver sees them: one child per rank with torchrun's variables, or one
    ``mpiexec`` whose ranks write their pid into ``ready.rank<r>`` (not the driver's children: their ends are read
    from ``/proc``, their RESULT lines and ``exit.rank<r>``)."""

    def __init__(self, plan: dict[str, Any], folder: Path, timeout: float) -> None:
        self.folder, self.n, self.mpi = folder, plan["ranks"], plan["launcher"] == "mpi"
        env, self.pids = rank_env(plan, folder, timeout), {}
        if self.mpi:
            with open(folder / "mpiexec.out", "w") as out, open(folder / "mpiexec.err", "w") as err:
                self.procs = [subprocess.Popen(["mpiexec", "-n", str(self.n), "--oversubscribe", sys.executable,
                                                str(RANK_SCRIPT)], cwd=folder, env=env, stdout=out, stderr=err,
                                               start_new_session=True)]
            return
        port, self.procs = free_port(), []
        for r in range(self.n):
            variables = {"RANK": str(r), "WORLD_SIZE": str(self.n), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE":
                         str(self.n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            with open(folder / f"out.rank{r}", "w") as out, open(folder / f"err.rank{r}", "w") as err:
                self.procs.append(subprocess.Popen([sys.executable, str(RANK_SCRIPT)], cwd=folder,
                                                   env={**env, **variables}, stdout=out, stderr=err,
                                                   start_new_session=True))
            self.pids[r] = self.procs[-1].pid

    def pid(self, r: int) -> int | None:
        if r not in self.pids:
            with contextlib.suppress(OSError, ValueError):
                self.pids[r] = json.loads((self.folder / f"ready.rank{r}").read_text())["pid"]
        return self.pids.get(r)

    def over(self) -> bool:
        return all(p.poll() is not None for p in self.procs)

    def gone(self, r: int) -> bool:
        """Its process has ended (a zombie: ended, not yet reaped by mpiexec)."""
        if not self.mpi:
            return self.procs[r].poll() is not None
        pid = self.pid(r)
        if self.over():
            return True
        return pid is not None and proc_state(pid) in ("", "Z")

    def done(self, r: int) -> bool:
        """Its part is over: its process ended or, under mpiexec (whose MPI_Finalize waits for every rank, a frozen
        one too), its RESULT printed."""
        return self.gone(r) or self.mpi and "RESULT " in self.out(r)

    def out(self, r: int, name: str = "out") -> str:
        path = self.folder / f"{name}.rank{r}"
        return path.read_text(errors="replace") if path.exists() else ""

    def signal(self, r: int, sig: int) -> None:
        with contextlib.suppress(OSError, TypeError):
            os.kill(self.pid(r), sig)  # type: ignore[arg-type]

    def end(self) -> None:
        """Past the hard limit: every live rank dumps its threads' stacks, then every process of the job is killed
        (under mpiexec, every process of its session)."""
        live = [r for r in range(self.n) if not self.gone(r)]
        for r in live:
            self.signal(r, signal.SIGCONT)
            self.signal(r, signal.SIGUSR1)
        time.sleep(2)
        for r in live:
            self.signal(r, signal.SIGKILL)
        for pid in [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()] if self.mpi else []:
            with contextlib.suppress(OSError):
                if os.getsid(pid) == self.procs[0].pid:
                    os.kill(pid, signal.SIGKILL)
        for p in self.procs:
            p.kill()
            p.wait()

    def rc(self, r: int, result: dict[str, Any], backstop: bool) -> int | None:
        """Its exit status; under mpiexec (one status for the job) the one its watchdog gave ``os._exit``, else its
        RESULT's (0, 3, 4), else 1 where the backstop ended it, else None: ended from outside (killed)."""
        if not self.mpi:
            return self.procs[r].returncode
        with contextlib.suppress(OSError, ValueError):
            return int((self.folder / f"exit.rank{r}").read_text())
        if result:
            return 0 if result.get("ok") else 3 if result.get("library") else 4
        return 1 if backstop else None


def drive(job: Job, folder: Path, timeout: float) -> None:
    """Run the job's ranks, inject the driver's faults, and record how each rank ended."""
    plan, fault = job.plan, job.plan["fault"]
    (folder / "home").mkdir(parents=True)
    started = time.time()
    ranks = Ranks(plan, folder, timeout)
    hard = started + 4 * timeout + 20 + late_bound(plan, timeout)  # 6 T + 30 but a longer bound's excess
    ready_at, stopped_at, victim_gone, all_gone = None, None, False, None
    ended: dict[int, float] = {}
    victim = fault.get("rank")
    while not ranks.over():
        now = time.time()
        ended.update({r: now for r in range(plan["ranks"]) if r not in ended and ranks.done(r)})
        if ready_at is None and all((folder / f"ready.rank{r}").exists() for r in range(plan["ranks"])):
            ready_at = now
        if job.fault_at is None and (folder / "fault.json").exists():
            said = json.loads((folder / "fault.json").read_text())
            job.fault_at, job.after_decision = said["at"], bool(said.get("decided"))
        if fault.get("trigger") == "delay" and job.fault_at is None and ready_at is not None \
                and now >= ready_at + fault["delay"] and not ranks.gone(victim):
            ranks.signal(victim, signal.SIGKILL if fault["kind"] == "kill" else signal.SIGSTOP)
            job.fault_at = now
            job.victim_done = "RESULT " in ranks.out(victim)
        if fault.get("kind") == "stop" and stopped_at is None and not ranks.gone(victim) \
                and proc_state(ranks.pid(victim) or 0) == "T":
            stopped_at = now
        if stopped_at is not None and job.cont_at is None and fault.get("cont") is not None \
                and now >= stopped_at + fault["cont"]:
            ranks.signal(victim, signal.SIGCONT)
            job.cont_at = now
        others = [r for r in range(plan["ranks"]) if r != victim]
        if stopped_at is not None and job.cont_at is None and all(r in ended for r in others) \
                and (fault.get("cont") is None) and not victim_gone:
            ranks.signal(victim, signal.SIGKILL)  # stopped for good: the others ended; the job is over
            victim_gone = True
        all_gone = (all_gone or now) if all(ranks.gone(r) for r in range(plan["ranks"])) else None
        if all_gone and now > all_gone + 10:  # (seen: Open MPI 5.0.11's prterun deadlocked on a mutex of its own)
            job.notes.append("mpiexec alive 10 s after every rank's process ended (the launcher hung): killed")
            ranks.end()
            break
        if now > hard:
            job.hang = True
            job.notes.append("alive at the hard limit: " + ", ".join(
                f"rank {r}" + (" (its RESULT printed)" if "RESULT " in ranks.out(r) else "")
                for r in range(plan["ranks"]) if not ranks.gone(r)))
            ranks.end()
            break
        time.sleep(0.05)
    now = time.time()
    ended.update({r: now for r in range(plan["ranks"]) if r not in ended})
    job.seconds = now - started
    for r in range(plan["ranks"]):
        out = ranks.out(r)
        results = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
        err = ranks.out(r, "err")
        backstop = re.search(r"(?m)^Timeout \(\d", err) is not None
        result = results[-1] if results else {}
        job.ranks.append(Rank(r, ranks.rc(r, result, backstop), ended[r], result=result, stderr_tail=err[-1500:],
                              backstop=backstop))


def late_bound(plan: dict[str, Any], timeout: float) -> float:
    """Seconds a survivor may end after the fault: ``2 T + 10``, or under mpiexec a campaign's round deadline (no
    side channel there: ``(T + max(1, T/10)) x (configs + 4)``) plus 10 s where that is longer."""
    rounds = plan["launcher"] == "mpi" and plan["mode"] == "campaign"
    return max(2 * timeout + 10, rounds * ((timeout + max(1.0, timeout / 10)) * (plan["configs"] + 4) + 10))


def named_ranks(text: str) -> set[int]:
    """Every rank number a message names (``rank 1``, ``ranks [0, 2]``, ``group rank(s) [1] (global [1])``)."""
    found = {int(m) for m in re.findall(r"\brank (\d+)", text)}
    for group in re.findall(r"\branks?(?:\(s\))? \[([\d, ]+)\]", text) + re.findall(r"global \[([\d, ]+)\]", text):
        found |= {int(x) for x in group.replace(",", " ").split()}
    return found


def judge(job: Job, timeout: float) -> None:
    """Classify each rank's end and record every broken promise in ``job.violations``."""
    fault = job.plan["fault"]
    kind, victim = fault["kind"], fault.get("rank")
    fired = job.fault_at is not None
    for r in job.ranks:
        if r.rc == 0 and r.result.get("ok"):
            r.outcome = "ok"
        elif r.rc == 3 and r.result.get("library"):
            r.outcome = "lib:" + r.result["error"]
        elif r.rc in LIBRARY_EXITS:
            r.outcome = LIBRARY_EXITS[r.rc]
        elif r.rc == 1 and r.backstop and not job.hang:
            r.outcome = "backstop"  # the faulthandler backstop: every thread's stack, exit 1 (noted, not a violation)
        elif r.rc in (-signal.SIGKILL, None) and r.rank == victim and fired and kind in ("kill", "stop") \
                and not job.hang:
            r.outcome = "killed"  # (under mpiexec no status: None)
        else:
            r.outcome = f"other:rc={r.rc}" + (f":{r.result.get('error')}" if r.result else "")
    mpi = job.plan["launcher"] == "mpi"
    for r in job.ranks if mpi and not job.hang else []:  # killed by mpiexec after another rank's non-zero end
        if r.outcome == "other:rc=None" and any(q.ended <= r.ended for q in job.ranks if q.rc not in (0, None)
                                                or q.outcome == "killed"):
            r.outcome = "mpiexec"
    if job.hang and job.after_decision:  # a rank frozen or asleep in the user's own call, its peers in its collective
        job.notes.append("the user's own call after the decision hung (outside the tuning: "
                         + ("MPI's collectives have no timeout)" if mpi else "gloo's timeout bounds it)"))
    elif job.hang:
        job.violations.append("HANG: ranks alive past 6T+30 s: " + ", ".join(
            f"{r.rank}" for r in job.ranks if r.outcome.startswith("other")))
    gone = {victim} if kind == "kill" or (kind == "stop" and fault.get("cont") is None) else set()
    survivors = [r for r in job.ranks if not (r.rank in gone and r.outcome == "killed")]
    oks = [r for r in survivors if r.outcome == "ok"]
    for r in survivors:  # the user's own call after the tuning: whatever it raises is the user's
        # (the fault's rank said its fault came there; or, for a fault the driver timed, the rank's own error is the
        # one its function's body raised in a call of a key already decided there: RESULT's ``user_call``)
        if r.outcome.startswith("other") and not job.hang and (job.after_decision or r.result.get("user_call")):
            r.outcome = "user:" + r.outcome[6:]
    bad = [r for r in survivors if r.outcome.startswith("other")]
    job.notes += [f"rank {r.rank} ended by the faulthandler backstop" for r in survivors if r.outcome == "backstop"]
    if bad and not job.hang:
        job.violations.append("NOT A LIBRARY END: " + "; ".join(f"rank {r.rank} {r.outcome}" for r in bad))
    if oks and any(r.outcome not in ("ok", "mpiexec") and not r.outcome.startswith("user:") for r in survivors) \
            and not job.after_decision:
        job.violations.append("MIXED: " + ", ".join(f"rank {r.rank} {r.outcome}" for r in survivors))
    if len({json.dumps(r.result["choices"], sort_keys=True) for r in oks}) > 1:
        job.violations.append("DIVERGED: " + "; ".join(f"rank {r.rank} {r.result['choices']}" for r in oks))
    if not fired and len(oks) < len(survivors) and not job.hang:
        job.violations.append("CONTROL FAILED: no fault fired, yet " + ", ".join(
            f"rank {r.rank} {r.outcome}" for r in survivors if r.outcome != "ok"))
    if fired and not job.hang:
        bound = late_bound(job.plan, timeout)
        for r in survivors:
            since = job.cont_at if r.rank == victim and job.cont_at else job.fault_at
            if r.ended is not None and r.ended - since > bound:
                job.violations.append(f"LATE: rank {r.rank} ended {r.ended - since:.1f} s after the fault "
                                      f"(bound {bound:g} s)")
    if fired and not oks and victim is not None and not job.after_decision:
        for r in survivors:
            if r.rank == victim or not r.outcome.startswith("lib:") or mpi and r.outcome == "lib:GroupTimeoutError":
                continue  # (an mpi4py wait cannot tell who is missing: only a torch group's names them)
            text = r.result.get("message", "")
            store = victim == 0 and "key-value store" in text
            if victim not in named_ranks(text) and not store:
                job.violations.append(f"UNNAMED: rank {r.rank}'s {r.outcome} does not name rank {victim}: "
                                      f"{text[:300]}")


def run_job(seed: int, timeout: float, keep: bool, base: Path, launcher: str = "torch") -> Job:
    job = Job(seed, make_plan(seed, timeout, launcher))
    folder = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-", dir=base))
    job.folder = str(folder)
    drive(job, folder, timeout)
    judge(job, timeout)
    if not keep and not job.violations:
        shutil.rmtree(folder, ignore_errors=True)
    return job


def line(i: int, job: Job) -> str:
    p, f = job.plan, job.plan["fault"]
    what = f["kind"] if f["kind"] == "none" else (
        f"{f['kind']}@{f['rank']} " + (f"delay {f['delay']}s" if f.get("trigger") == "delay" else
                                       f"cfg {f['config']} call {f['k']} {f['where']}")
        + (f" cont {f['cont']}" if f["kind"] == "stop" else ""))
    verdict = ("OK" if not job.violations else "VIOLATION " + " | ".join(job.violations)) + (
        f" (note: {'; '.join(job.notes)})" if job.notes else "")
    return (f"job {i:3d} seed {job.seed:10d} {p['ranks']}r {p['mode']:10s} coll={int(p['collective'])} "
            f"[{what}] fired={int(job.fault_at is not None)}{' after-decision' if job.after_decision else ''}"
            f"{' after-its-end' if job.victim_done else ''} "
            f"{job.seconds:5.1f}s "
            f"{' '.join(r.outcome for r in job.ranks)} -> {verdict}")


def main() -> int:
    # --faults interrupt: benchmarks/_chaos_interrupt.py runs instead, with every argument (_chaos_options.HandOver)
    parser = chaos_parser(__doc__.split("\n\n")[0], interrupt_driver=False)
    parser.add_argument("--launcher", choices=["torch", "mpi"], default="torch",
                        help="torchrun's variables and gloo (default), or mpiexec and an mpi4py communicator")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    seeds = args.job_seed or [rng.randrange(1 << 31) for _ in range(3 if args.smoke else args.jobs)]
    base = Path(tempfile.mkdtemp(prefix="chaos-run-"))
    print(f"chaos run: seed {seed}, {len(seeds)} jobs, {args.launcher}, T = {args.timeout:g} s, "
          f"load {os.getloadavg()}, folders in {base}", flush=True)
    jobs = []
    for i, s in enumerate(seeds):
        jobs.append(run_job(s, args.timeout, args.keep, base, args.launcher))
        print(line(i, jobs[-1]), flush=True)
    bad = [j for j in jobs if j.violations]
    controls = sum(j.plan["fault"]["kind"] == "none" for j in jobs)
    print(f"summary: {len(jobs)} jobs, {len(bad)} with violations, {controls} controls, "
          f"{sum(j.fault_at is not None for j in jobs)} faults fired; load {os.getloadavg()}")
    for j in bad:
        print(f"  rerun: python benchmarks/chaos.py --job-seed {j.seed} --timeout {args.timeout:g} "
              f"--launcher {args.launcher}  ({j.folder}): {' | '.join(j.violations)[:400]}")
    if args.out:
        args.out.write_text(json.dumps({"seed": seed, "launcher": args.launcher, "timeout": args.timeout,
                                        "jobs": [asdict(j) for j in jobs]}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
