"""The chaos run's interruption mode (``python benchmarks/chaos.py --faults interrupt``, or this script with the same
arguments): one or two ranks of a job interrupted at a random moment of a tuning call, the program catching the
interruption and going on with its calls, as a REPL or a serving loop does (docs/fault-tolerance.md, the row of "a
``BaseException`` that is not an ``Exception``").

Each job is 2-4 gloo ranks (``benchmarks/_chaos_interrupt_rank.py``; torchrun's variables, a fresh HOME, cache and log
folder, the tuner's timeout ``T``) running one program of 4-9 calls drawn from the job's seed: an ``autotune``
function of one or two keys, a ``contextual_autotune`` function of two keys around a ``triton.autotune`` kernel
(``sync_every`` 2 or 3 in some jobs), or both in one program, each key's first call (its tuning) first, then calls of
keys drawn again. No collective in the functions (a peer left inside one is its watchdog's, the mixed mode's
ground). One or two ranks (by the seed) each get one interruption: Ctrl-C's ``KeyboardInterrupt``
(``signal.default_int_handler``), SIGTERM's ``SystemExit`` raised by a handler, or an ``asyncio.CancelledError``
raised by a signal handler; at a random delay (0-0.8 s) after a call's start, or at the ``k``-th exchange on the group
(1-20; a tuning call makes 10-20) counted from that call's start (sometimes once the rank's own part of it is
written: the wait for its result), plus a jitter, or (``write``) as the rank's store write of its part of the
``k``-th exchange returns, before the channel counts it written (a signal that came during the write: Python runs
its handler as the write returns; raised by the rank on itself); a tuning call mostly, the second leaver's often the
first's. A signal handled outside the library's call (between calls, or in the program's own line around one: the
program would skip that call itself) is sent again. The program catches it, sleeps 0 s, a little, or past the
peers' grace (``min(5, T/4)``), and goes on. About one job in eight is a control (none).

Checked per job:

- no hang: past ``30 + calls x (1.5 T + 5)`` s every live rank dumps its stacks (``stack.rank<r>``) and is killed;
- the program ends on every rank (exit 0 after its last call; no watchdog exit, no backstop; each waits up to 60 s
  for the others at its end, as a program ending with a barrier does: rank 0's process hosts the store);
- no call raises anything but the library's ``AutotuneError`` or, on its leaver, the interruption;
- no call raises ``GroupTimeoutError`` itself (a wait for ``T``; ``RankFailedError``, its subclass, is the
  promise) and none takes longer than ``T + slack`` (``--slack``, default ``T/2 + 2`` s: a loaded machine);
- every call after the last interrupted one ends alike on every rank: all returned, with the same config run last
  and the same decision of its key, or all raised an ``AutotuneError`` of the same type; the last call's decisions
  are the same on every rank;
- a control's calls all return.

Documented gaps, whose jobs' findings are noted, not counted: an interruption raised inside ``key_fn`` (docs: "Not
covered"), and a leaver back past the grace that its peers counted out at a call after the interrupted one (its
"left" record lay at their next turn: its next call pairs with their call after that, ``group/passover.py``: "a
caller that calls again pairs with its peers' call again"; this program goes on instead of calling again). One
line per job, then a summary; the job folders are kept for violations (``--keep``: all).
``--plan JSON`` runs a hand-made plan (a narrowed case; ``pauses`` there: ``_chaos_interrupt_rank.py``).
"""

from __future__ import annotations

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
from chaos import free_port, rank_env

HERE = Path(__file__).resolve().parent
RANK_SCRIPT = HERE / "_chaos_interrupt_rank.py"
#: errors of a wait for ``T`` (not their subclass RankFailedError, the promise's)
WAITED_T = ("GroupTimeoutError", "CrossedTurnsError")


def make_plan(seed: int, timeout: float) -> dict[str, Any]:
    """The job of ``seed``: ranks, the program's calls, and who is interrupted how and when."""
    rng = random.Random(seed)
    n = rng.choice([2, 2, 3, 3, 4])
    shape = rng.choice(["auto", "ctx", "mix"])
    keys = []
    if shape in ("auto", "mix"):
        keys += [["auto", k] for k in rng.choice([[4], [4, 8]])]
    if shape in ("ctx", "mix"):
        keys += [["ctx", 64], ["ctx", 128]]
    first = list(keys)
    rng.shuffle(first)
    steps = first + [rng.choice(keys) for _ in range(rng.randint(3, 5))]
    sync_every = rng.choice([None, None, 2, 3]) if shape != "auto" else None
    tuning = list(range(len(first)))
    leavers: list[dict[str, Any]] = []
    if rng.random() >= 0.12:
        count = 2 if rng.random() < (0.45 if n >= 3 else 0.15) else 1
        grace = min(5.0, timeout / 4)
        for r in rng.sample(range(n), count):
            at = leavers[0]["call"] if leavers and rng.random() < 0.6 else (
                rng.choice(tuning) if rng.random() < 0.85 else rng.randrange(len(steps) - 1))
            spec: dict[str, Any] = {"rank": r, "sig": rng.choice(["INT", "TERM", "CANCEL"]), "call": at}
            how = rng.random()
            if how < 0.4:
                spec.update(trigger="delay", delay=round(rng.uniform(0.0, 0.8), 3))
            elif how < 0.6:
                spec.update(trigger="write", k=rng.randint(1, 20), hold=0.0)
            else:
                spec.update(trigger="exchange", k=rng.randint(1, 20), sent=rng.random() < 0.6,
                            jitter=round(rng.choice([0.0, rng.uniform(0.0, 0.2)]), 3))
            spec["after"] = round(rng.choice([0.0, 0.0, rng.uniform(0.05, 0.4), grace + rng.uniform(0.3, 1.5)]), 3)
            leavers.append(spec)
    return {"seed": seed, "ranks": n, "shape": shape, "configs": rng.choice([3, 4]), "steps": steps,
            "sync_every": sync_every, "leavers": leavers}


@dataclass
class Job:
    """One job's plan, what each rank said of each call, and its verdict."""

    seed: int
    plan: dict[str, Any]
    seconds: float = 0.0
    hang: bool = False
    #: rank -> {"rc", "calls": [RESULT], "end": END or None, "backstop", "stderr_tail"}
    ranks: list[dict[str, Any]] = field(default_factory=list)
    interrupted: list[list[int]] = field(default_factory=list)  #: [rank, call] of each interruption raised
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    folder: str = ""


def drive(job: Job, folder: Path, timeout: float) -> None:
    """Run the job's ranks to their end (or the hard limit) and read what each said."""
    plan = job.plan
    (folder / "home").mkdir(parents=True)
    env, port, procs = rank_env(plan, folder, timeout), free_port(), []
    for r in range(plan["ranks"]):
        variables = {"RANK": str(r), "WORLD_SIZE": str(plan["ranks"]), "LOCAL_RANK": str(r),
                     "LOCAL_WORLD_SIZE": str(plan["ranks"]), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        with open(folder / f"out.rank{r}", "w") as out, open(folder / f"err.rank{r}", "w") as err:
            procs.append(subprocess.Popen([sys.executable, str(RANK_SCRIPT)], cwd=folder, env={**env, **variables},
                                          stdout=out, stderr=err, start_new_session=True))
    started = time.time()
    hard = started + 30 + len(plan["steps"]) * (1.5 * timeout + 5)
    while any(p.poll() is None for p in procs):
        if time.time() > hard:
            job.hang = True
            live = [p for p in procs if p.poll() is None]
            job.notes.append("alive at the hard limit: ranks " + ", ".join(str(procs.index(p)) for p in live))
            for p in live:
                os.kill(p.pid, signal.SIGUSR1)
            time.sleep(2)
            for p in live:
                p.kill()
                p.wait()
            break
        time.sleep(0.05)
    job.seconds = time.time() - started
    for r, p in enumerate(procs):
        out = (folder / f"out.rank{r}").read_text(errors="replace")
        err = (folder / f"err.rank{r}").read_text(errors="replace")
        ends = [json.loads(x[4:]) for x in out.splitlines() if x.startswith("END ")]
        job.ranks.append({"rank": r, "rc": p.returncode, "end": ends[-1] if ends else None,
                          "calls": [json.loads(x[7:]) for x in out.splitlines() if x.startswith("RESULT ")],
                          "backstop": re.search(r"(?m)^Timeout \(\d", err) is not None, "stderr_tail": err[-1500:]})


def short(call: dict[str, Any] | None) -> str:
    if call is None:
        return "-"
    if call["outcome"] == "ok":
        return "ok"
    return {"interrupted": "INT", "lib": "lib", "other": "other"}[call["outcome"]] + ":" + call.get("error", "")


def key_decision(call: dict[str, Any]) -> Any:
    """The decision of the called key after the call (a contextual key is named by its size among others)."""
    fn, n = call["step"]
    if fn == "auto":
        return call["decided"]["auto"].get(str(n))
    return sorted(v for k, v in call["decided"]["ctx"].items() if f"({n}, " in k)


def judge(job: Job, timeout: float, slack: float) -> None:
    """Record every broken promise in ``job.violations`` (``job.notes`` where a documented gap explains them)."""
    steps, found = job.plan["steps"], []
    if job.hang:
        found.append("HANG")
    for r in job.ranks:
        if r["rc"] != 0 or not (r["end"] or {}).get("ok"):
            found.append(f"NOT ENDED: rank {r['rank']} rc={r['rc']}" + (" (backstop)" if r["backstop"] else ""))
        elif len(r["calls"]) != len(steps):
            found.append(f"CALLS: rank {r['rank']} said {len(r['calls'])} of {len(steps)} calls")
    job.interrupted = sorted([r["rank"], c["i"]] for r in job.ranks for c in r["calls"]
                             if c["outcome"] == "interrupted" or c["signalled"])
    last = max((i for _, i in job.interrupted), default=-1)
    gaps = sorted({f"rank {r['rank']} call {c['i']}: in key_fn" for r in job.ranks for c in r["calls"]
                   if c["outcome"] == "interrupted" and any(":key_of:" in f for f in c.get("frames", []))})
    late = {s["rank"] for s in job.plan["leavers"] if s["after"] > min(5.0, timeout / 4)}
    gaps += sorted({f"rank {rank} back past the grace, counted out at call {c['i']}" for rank, i in job.interrupted
                    if rank in late for r in job.ranks for c in r["calls"][i + 1:]
                    if c.get("error") == "RankFailedError" and f"group rank(s) [{rank}] left" in c.get("message", "")})
    for i in range(len(steps)):
        calls = {r["rank"]: r["calls"][i] for r in job.ranks if i < len(r["calls"])}
        for rank, c in calls.items():
            if c["outcome"] == "other" or (c["outcome"] == "interrupted" and [rank, i] not in job.interrupted):
                found.append(f"NOT A LIBRARY ERROR: rank {rank} call {i} {short(c)}: {c.get('message', '')[:200]}")
            if c.get("error") in WAITED_T:
                found.append(f"WAITED T: rank {rank} call {i} {c['error']} after {c['seconds']} s: "
                             f"{c.get('message', '')[:300]}")
            if c["seconds"] > timeout + slack:
                found.append(f"LATE: rank {rank} call {i} took {c['seconds']} s (bound {timeout + slack:g})")
        if i <= last or len(calls) < len(job.ranks):
            continue
        ends = {(c["outcome"], c.get("error")) for c in calls.values()}
        said = ", ".join(f"rank {rank} {short(c)}" for rank, c in calls.items())
        if len(ends) > 1:
            found.append(f"MIXED at call {i} {steps[i]}: {said}")
        elif ("ok", None) in ends:
            runs = {json.dumps([c["ran"][-1:], key_decision(c)]) for c in calls.values()}
            if len(runs) > 1:
                found.append(f"DIVERGED at call {i} {steps[i]}: " + "; ".join(
                    f"rank {rank} ran {c['ran'][-1:]} decided {key_decision(c)}" for rank, c in calls.items()))
        if not job.interrupted and ends != {("ok", None)}:
            found.append(f"CONTROL FAILED at call {i}: {said}")
    finals = {json.dumps(r["calls"][-1]["decided"], sort_keys=True) for r in job.ranks
              if len(r["calls"]) == len(steps)}
    if len(finals) > 1:
        found.append("DECISIONS DIFFER at the end: " + "; ".join(
            f"rank {r['rank']} {r['calls'][-1]['decided']}" for r in job.ranks if r["calls"]))
    if gaps:
        job.notes += [f"documented gap ({', '.join(gaps)})"] + [f"(gap) {v}" for v in found if v != "HANG"]
        found = [v for v in found if v == "HANG"]
    job.violations += found


def run_job(seed: int, timeout: float, slack: float, keep: bool, base: Path, plan: dict | None = None) -> Job:
    job = Job(seed, plan or make_plan(seed, timeout))
    folder = Path(tempfile.mkdtemp(prefix=f"chaos-int-{seed}-", dir=base))
    job.folder = str(folder)
    drive(job, folder, timeout)
    judge(job, timeout, slack)
    if not keep and not job.violations:
        shutil.rmtree(folder, ignore_errors=True)
    return job


def describe(plan: dict[str, Any]) -> str:
    out = []
    for s in plan["leavers"]:
        when = (f"+{s['delay']}s" if s["trigger"] == "delay" else f"w{s['k']}+{s.get('hold', 0)}"
                if s["trigger"] == "write" else f"x{s['k']}{'s' if s['sent'] else ''}+{s['jitter']}")
        out.append(f"{s['sig']}@{s['rank']} call {s['call']} {when} after {s['after']}")
    return "; ".join(out) or "none"


def line(i: int, job: Job) -> str:
    p = job.plan
    prog = " ".join(f"{'a' if f == 'auto' else 'c'}{n}" for f, n in p["steps"])
    calls = " ".join("/".join(short(c).replace("RankFailedError", "RFE") for c in r["calls"]) for r in job.ranks)
    verdict = ("OK" if not job.violations else "VIOLATION " + " | ".join(job.violations)) + (
        f" (note: {'; '.join(job.notes)})" if job.notes else "")
    return (f"job {i:3d} seed {job.seed:10d} {p['ranks']}r [{prog}] se={p['sync_every']} [{describe(p)}] "
            f"hit={job.interrupted} {job.seconds:5.1f}s | {calls} -> {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = chaos_parser(__doc__.split("\n\n")[0], interrupt_driver=True)
    parser.add_argument("--slack", type=float, default=None, help="a call's bound past T (s; default T/2 + 2)")
    parser.add_argument("--plan", type=json.loads, action="append", help="run this plan (JSON; a narrowed case)")
    args = parser.parse_args(argv)
    slack = args.slack if args.slack is not None else args.timeout / 2 + 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    plans = args.plan or []
    seeds = [p.get("seed", 0) for p in plans] or args.job_seed or [
        rng.randrange(1 << 31) for _ in range(3 if args.smoke else args.jobs)]
    base = Path(tempfile.mkdtemp(prefix="chaos-run-"))
    print(f"chaos run (interrupt): seed {seed}, {len(seeds)} jobs, T = {args.timeout:g} s, call bound "
          f"{args.timeout + slack:g} s, load {os.getloadavg()}, folders in {base}", flush=True)
    jobs = []
    for i, s in enumerate(seeds):
        jobs.append(run_job(s, args.timeout, slack, args.keep, base, plans[i] if plans else None))
        print(line(i, jobs[-1]), flush=True)
    bad = [j for j in jobs if j.violations]
    controls = [j for j in jobs if not j.plan["leavers"]]
    longest = max((c["seconds"] for j in controls for r in j.ranks for c in r["calls"]), default=0.0)
    print(f"summary: {len(jobs)} jobs, {len(bad)} with violations, {len(controls)} controls (longest call "
          f"{longest:g} s), {sum(bool(j.interrupted) for j in jobs)} with an interruption raised "
          f"({sum(len({r for r, _ in j.interrupted}) > 1 for j in jobs)} with two leavers; "
          f"{sum(len(j.plan['leavers']) for j in jobs)} planned, {sum(len(j.interrupted) for j in jobs)} raised), "
          f"{sum(any('gap' in n for n in j.notes) for j in jobs)} in a documented gap; load {os.getloadavg()}")
    for j, plan in zip(jobs, plans or [None] * len(jobs), strict=True):
        what = f"--plan '{json.dumps(plan)}'" if plan else f"--job-seed {j.seed}"
        if j.violations:
            print(f"  rerun: python benchmarks/chaos.py --faults interrupt {what} --timeout {args.timeout:g}  "
                  f"({j.folder}): {' | '.join(j.violations)[:400]}")
    if args.out:
        args.out.write_text(json.dumps({"seed": seed, "timeout": args.timeout, "slack": slack,
                                        "jobs": [asdict(j) for j in jobs]}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
