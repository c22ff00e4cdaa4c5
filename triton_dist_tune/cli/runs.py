"""``triton-dist-tune logs``: one job's per-rank logs (``rank-*.jsonl`` in the log folder) merged into one
timeline, or the jobs a log folder holds (``--list``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..disk import logs, timeline
from .common import UsageError, _emit_json


def _not_a_log_folder(path: Path) -> str:
    """What ``logs PATH`` says of a file, or of a folder without rank logs, given as its job argument."""
    what = "no job logs in this folder" if path.is_dir() else "a file, not a job's name or a log folder"
    folder = path.parent if not path.is_dir() and any(path.parent.glob("rank-*.jsonl")) else None
    return (f"{path}: {what} (give a log folder, which holds rank-*.jsonl files, or a job's name from 'logs --list'"
            + (f": 'logs {folder}' for its folder's latest job)" if folder is not None else ")"))


def cmd_logs(args: argparse.Namespace) -> int:
    """``logs``: one job's per-rank logs merged into one timeline."""
    given = Path(args.job) if args.job else None
    if given is not None and given.is_dir() and any(given.glob("rank-*.jsonl")):
        root, wanted = given, None  # a log folder given as the job argument: its latest job
    elif given is not None and given.exists() and not args.log_dir:  # a path, not a job's name: not looked up as
        raise UsageError(_not_a_log_folder(given))  # one in the default folder (whose error named only that folder)
    else:
        root, wanted = (Path(args.log_dir) if args.log_dir else logs.log_dir()), args.job
    jobs = timeline.jobs_in(root)
    if not jobs:
        raise UsageError(f"no job logs in {root} (the default is ./.autotune_logs where the job ran; set "
                         "TRITON_DIST_AUTOTUNE_LOG_DIR or pass --log-dir)")
    if args.list:
        if args.json:
            _emit_json({"folder": str(root), "jobs": [{"job": j.name, "ranks": j.ranks, "first": j.first,
                                                        "last": j.last} for j in jobs]})
            return 0
        for job in jobs:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.last))
            print(f"{job.name}  {len(job.ranks)} rank(s)  last written {stamp}")
        return 0
    if wanted:
        matches = [j for j in jobs if j.name == wanted] or [j for j in jobs if j.name.startswith(wanted)]
        if len(matches) != 1:
            raise UsageError(f"{'no' if not matches else 'more than one'} job {wanted!r} in {root} (--list)")
        job = matches[0]
    else:
        job = jobs[-1]
    records, damaged = timeline.read_job(root, job.name)
    if args.rank is not None:
        present = sorted({r.get("rank") for r in records if type(r.get("rank")) is int})
        if args.rank not in present:
            raise UsageError(f"job {job.name} has no records of rank {args.rank}: its ranks are "
                             f"{', '.join(map(str, present)) or 'none'} ({root})")
        records = [r for r in records if r.get("rank") == args.rank]
    if args.json:
        _emit_json({"job": job.name, "folder": str(root), "records": records, "damaged_lines": damaged})
        return 0
    ranks = sorted({r.get("rank") for r in records}, key=str)
    print(f"job {job.name}: {len(records)} record(s) from rank(s) {ranks} ({root})")
    for record in records:
        print(timeline.render_record(record))
    if damaged:
        print(f"triton-dist-tune: skipped {damaged} damaged line(s)", file=sys.stderr)
    return 0
