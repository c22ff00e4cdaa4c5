"""A chaos run: random faults at random moments on jobs of 2-4 real gloo ranks, looking for hangs and divergence.

Each job is a fresh set of rank processes (``benchmarks/_chaos_rank.py``, torchrun's variables, a fresh HOME, cache
and log folder) tuning a small function (``autotune`` on one or two keys, a ``campaign`` of 3 keys, or
``contextual_autotune`` around a ``triton.autotune`` kernel; a few configs, sometimes a gloo all_reduce inside the
tuned call) with the tuner's timeout ``T`` (``--timeout``, default 4 s), and ONE fault drawn from the job's seed:
SIGKILL or SIGSTOP of one rank (at a random delay after every rank is up, or at the k-th call of a config; a stopped
rank is continued after 0.5-3 T, or never), a RuntimeError in the tuned function on one rank at one config (before
or after its all_reduce), a sleep of 2 T there, an error in the key function or ``prune_fn`` on one rank; or no fault
(the control). A fault that comes in the user's own call of a key already decided (the call after the tuning) is
the user's: its errors are not the library's to report. Past ``6 T + 30`` s a job is a HANG: every live rank dumps
its threads' stacks (SIGUSR1, faulthandler) into ``stack.rank<r>`` in the job's folder, then is killed.

Checked per job (the library's promise: docs/fault-tolerance.md):

- no hang;
- the surviving ranks (all but a killed one, or one stopped for good) either all return, with the same choice per
  key, or all end with the library's errors (an ``AutotuneError`` raised, or the watchdog's exit 86 / 87), never a
  mix, never another error;
- they end within ``2 T + 10`` s of the fault (the documented bounds are about ``T + max(1, T/10)``; the slack is
  for a loaded machine), or of a stopped rank's continuation;
- where a survivor raised for a rank's fault, its message names that rank (a killed store host: the store).

Usage: ``python benchmarks/chaos.py --jobs 60 [--seed S] [--timeout T] [--out FILE]``; ``--smoke`` runs 3 jobs;
``--job-seed S`` runs the one job of that seed again (each job's line prints its seed). One line per job, then a
summary; ``--out`` writes every job as JSON. The job folders are kept for violations (``--keep``: all).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RANK_SCRIPT = HERE / "_chaos_rank.py"
KINDS = ["none", "kill", "stop", "raise", "sleep", "key_raise", "prune_raise"]
WEIGHTS = [2, 3, 3, 3, 2, 1, 1]
#: exit statuses of a rank the library ended: its watchdog (hung, 86; a peer failed while it was inside, 87)
LIBRARY_EXITS = {86: "watchdog86", 87: "peer87"}


def make_plan(seed: int, timeout: float) -> dict[str, Any]:
    """The job of ``seed``: ranks, what is tuned, and its one fault."""
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
    return {"seed": seed, "ranks": n, "mode": mode, "configs": configs, "keys": keys,
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


def free_port() -> int:
    """A free port below the kernel's ephemeral range (whose ports outgoing connections take)."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def start_ranks(plan: dict[str, Any], folder: Path, timeout: float) -> list[subprocess.Popen]:
    port, procs = free_port(), []
    root = str(HERE.parent)
    for r in range(plan["ranks"]):
        env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(plan["ranks"]), "LOCAL_RANK": str(r),
               "LOCAL_WORLD_SIZE": str(plan["ranks"]), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
               "PYTHONUNBUFFERED": "1", "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
               "HOME": str(folder / "home"), "TRITON_CACHE_DIR": str(folder / "home" / "triton"),
               "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(folder / "cache"),
               "TRITON_DIST_AUTOTUNE_LOG_DIR": str(folder / "logs"),
               "TRITON_DIST_AUTOTUNE_TIMEOUT": str(timeout), "CHAOS_PLAN": json.dumps(plan)}
        env.pop("TORCHELASTIC_RESTART_COUNT", None)
        with open(folder / f"out.rank{r}", "w") as out, open(folder / f"err.rank{r}", "w") as err:
            procs.append(subprocess.Popen([sys.executable, str(RANK_SCRIPT)], cwd=folder, env=env, stdout=out,
                                          stderr=err, start_new_session=True))
    return procs


def drive(job: Job, folder: Path, timeout: float) -> None:
    """Run the job's ranks, inject the driver's faults, and record how each rank ended."""
    plan, fault = job.plan, job.plan["fault"]
    (folder / "home").mkdir(parents=True)
    started = time.time()
    procs = start_ranks(plan, folder, timeout)
    hard = started + 6 * timeout + 30
    ready_at, stopped_at, victim_gone = None, None, False
    ended: dict[int, float] = {}
    victim = fault.get("rank")
    while len(ended) < len(procs):
        now = time.time()
        for r, p in enumerate(procs):
            if r not in ended and p.poll() is not None:
                ended[r] = now
        if ready_at is None and all((folder / f"ready.rank{r}").exists() for r in range(len(procs))):
            ready_at = now
        if job.fault_at is None and (folder / "fault.json").exists():
            said = json.loads((folder / "fault.json").read_text())
            job.fault_at, job.after_decision = said["at"], bool(said.get("decided"))
        if fault.get("trigger") == "delay" and job.fault_at is None and ready_at is not None \
                and now >= ready_at + fault["delay"] and victim not in ended:
            os.kill(procs[victim].pid, signal.SIGKILL if fault["kind"] == "kill" else signal.SIGSTOP)
            job.fault_at = now
            job.victim_done = "RESULT " in (folder / f"out.rank{victim}").read_text(errors="replace")
        if fault.get("kind") == "stop" and stopped_at is None and victim not in ended \
                and proc_state(procs[victim].pid) == "T":
            stopped_at = now
        if stopped_at is not None and job.cont_at is None and fault.get("cont") is not None \
                and now >= stopped_at + fault["cont"]:
            os.kill(procs[victim].pid, signal.SIGCONT)
            job.cont_at = now
        others = [r for r in range(len(procs)) if r != victim]
        if stopped_at is not None and job.cont_at is None and all(r in ended for r in others) \
                and (fault.get("cont") is None) and not victim_gone:
            procs[victim].kill()  # stopped for good: the others ended; the job is over
            victim_gone = True
        if now > hard:
            job.hang = True
            for r, p in enumerate(procs):
                if r not in ended:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGUSR1)
            time.sleep(2)
            for r, p in enumerate(procs):
                if r not in ended:
                    p.kill()
                    p.wait()
                    ended[r] = time.time()
            break
        time.sleep(0.05)
    job.seconds = time.time() - started
    for r, p in enumerate(procs):
        out = (folder / f"out.rank{r}").read_text(errors="replace")
        results = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
        err = (folder / f"err.rank{r}").read_text(errors="replace")
        job.ranks.append(Rank(r, p.returncode, ended.get(r), result=results[-1] if results else {},
                              stderr_tail=err[-1500:], backstop=re.search(r"(?m)^Timeout \(\d", err) is not None))


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
        elif r.rc == -signal.SIGKILL and r.rank == victim and fired and kind in ("kill", "stop") and not job.hang:
            r.outcome = "killed"
        else:
            r.outcome = f"other:rc={r.rc}" + (f":{r.result.get('error')}" if r.result else "")
    if job.hang and job.after_decision:  # a rank frozen or asleep in the user's own call, its peers in its collective
        job.notes.append("the user's own call after the decision hung (outside the tuning: gloo's timeout bounds it)")
    elif job.hang:
        job.violations.append("HANG: ranks alive past 6T+30 s: " + ", ".join(
            f"{r.rank}" for r in job.ranks if r.outcome.startswith("other")))
    gone = {victim} if kind == "kill" or (kind == "stop" and fault.get("cont") is None) else set()
    survivors = [r for r in job.ranks if not (r.rank in gone and r.outcome == "killed")]
    oks = [r for r in survivors if r.outcome == "ok"]
    if job.after_decision:  # the user's own call after the tuning: whatever it raises is the user's
        for r in survivors:
            r.outcome = "user:" + r.outcome[6:] if r.outcome.startswith("other") and not job.hang else r.outcome
    bad = [r for r in survivors if r.outcome.startswith("other")]
    job.notes += [f"rank {r.rank} ended by the faulthandler backstop" for r in survivors if r.outcome == "backstop"]
    if bad and not job.hang:
        job.violations.append("NOT A LIBRARY END: " + "; ".join(f"rank {r.rank} {r.outcome}" for r in bad))
    if oks and len(oks) < len(survivors) and not job.after_decision:
        job.violations.append("MIXED: " + ", ".join(f"rank {r.rank} {r.outcome}" for r in survivors))
    if len({json.dumps(r.result["choices"], sort_keys=True) for r in oks}) > 1:
        job.violations.append("DIVERGED: " + "; ".join(f"rank {r.rank} {r.result['choices']}" for r in oks))
    if not fired and len(oks) < len(survivors) and not job.hang:
        job.violations.append("CONTROL FAILED: no fault fired, yet " + ", ".join(
            f"rank {r.rank} {r.outcome}" for r in survivors if r.outcome != "ok"))
    if fired and not job.hang:
        bound = 2 * timeout + 10
        for r in survivors:
            since = job.cont_at if r.rank == victim and job.cont_at else job.fault_at
            if r.ended is not None and r.ended - since > bound:
                job.violations.append(f"LATE: rank {r.rank} ended {r.ended - since:.1f} s after the fault "
                                      f"(bound {bound:g} s)")
    if fired and not oks and victim is not None and not job.after_decision:
        for r in survivors:
            if r.rank == victim or not r.outcome.startswith("lib:"):
                continue
            text = r.result.get("message", "")
            store = victim == 0 and "key-value store" in text
            if victim not in named_ranks(text) and not store:
                job.violations.append(f"UNNAMED: rank {r.rank}'s {r.outcome} does not name rank {victim}: "
                                      f"{text[:300]}")


def run_job(seed: int, timeout: float, keep: bool, base: Path) -> Job:
    job = Job(seed, make_plan(seed, timeout))
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (default: a random one, printed)")
    parser.add_argument("--job-seed", type=int, action="append", help="run the job of this seed again (repeatable)")
    parser.add_argument("--timeout", type=float, default=4.0, help="the tuner's timeout T (s)")
    parser.add_argument("--out", type=Path, default=None, help="write every job as JSON here")
    parser.add_argument("--smoke", action="store_true", help="3 jobs")
    parser.add_argument("--keep", action="store_true", help="keep every job's folder")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    seeds = args.job_seed or [rng.randrange(1 << 31) for _ in range(3 if args.smoke else args.jobs)]
    base = Path(tempfile.mkdtemp(prefix="chaos-run-"))
    print(f"chaos run: seed {seed}, {len(seeds)} jobs, T = {args.timeout:g} s, load {os.getloadavg()}, "
          f"folders in {base}", flush=True)
    jobs = []
    for i, s in enumerate(seeds):
        jobs.append(run_job(s, args.timeout, args.keep, base))
        print(line(i, jobs[-1]), flush=True)
    bad = [j for j in jobs if j.violations]
    print(f"summary: {len(jobs)} jobs, {len(bad)} with violations, "
          f"{sum(j.plan['fault']['kind'] == 'none' for j in jobs)} controls, "
          f"{sum(j.fault_at is not None for j in jobs)} faults fired; load {os.getloadavg()}")
    for j in bad:
        print(f"  rerun: python benchmarks/chaos.py --job-seed {j.seed} --timeout {args.timeout:g}  "
              f"({j.folder}): {' | '.join(j.violations)[:400]}")
    if args.out:
        args.out.write_text(json.dumps({"seed": seed, "timeout": args.timeout, "jobs": [asdict(j) for j in jobs]},
                                       indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
