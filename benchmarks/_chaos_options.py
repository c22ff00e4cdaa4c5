"""The options both chaos drivers take: ``benchmarks/chaos.py`` (its classic faults) and
``benchmarks/_chaos_interrupt.py`` (the interruption mode, ``chaos.py --faults interrupt``). One parser for both,
so that either's ``--help`` lists every option it takes, ``--faults`` included (before, ``chaos.py`` handed
``--faults`` over before its parser was built, and its ``--help`` did not name it)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

INTERRUPT_DRIVER = Path(__file__).resolve().parent / "_chaos_interrupt.py"
FAULT_MODES = ["interrupt"]


class HandOver(argparse.Action):
    """``chaos.py --faults interrupt``: the interruption mode's driver runs in this process's place, with every
    argument as given (its own options, as ``--slack`` and ``--plan``, included; a ``--help`` after ``--faults`` is
    its help)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        os.execv(sys.executable, [sys.executable, str(INTERRUPT_DRIVER), *sys.argv[1:]])


def chaos_parser(description: str, *, interrupt_driver: bool) -> argparse.ArgumentParser:
    """The options of a chaos run: the fault mode, how many jobs, their seeds, the tuner's timeout, the output.
    ``interrupt_driver``: the interruption mode's own parser (``--faults interrupt`` is its one mode); else
    ``chaos.py``'s, whose ``--faults interrupt`` hands the run over to that driver (:class:`HandOver`)."""
    parser = argparse.ArgumentParser(description=description)
    if interrupt_driver:
        parser.add_argument("--faults", choices=FAULT_MODES, default="interrupt",
                            help="interrupt: ranks interrupted and calling on (this driver's one mode)")
    else:
        parser.add_argument("--faults", choices=FAULT_MODES, action=HandOver,
                            help="interrupt: ranks interrupted and calling on, instead of the classic faults (kill, "
                                 "stop, raise, sleep...), run by "
                                 "benchmarks/_chaos_interrupt.py with every argument given here (its own options, "
                                 "as --slack and --plan: --faults interrupt --help)")
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (default: a random one, printed)")
    parser.add_argument("--job-seed", type=int, action="append", help="run the job of this seed again (repeatable)")
    parser.add_argument("--timeout", type=float, default=4.0, help="the tuner's timeout T (s)")
    parser.add_argument("--out", type=Path, default=None, help="write every job as JSON here")
    parser.add_argument("--smoke", action="store_true", help="3 jobs")
    parser.add_argument("--keep", action="store_true", help="keep every job's folder")
    return parser
