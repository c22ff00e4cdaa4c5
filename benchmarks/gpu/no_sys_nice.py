"""Run a command without the privilege to raise a priority: drop ``CAP_SYS_NICE`` from this process's bounding set,
then exec the command (root's exec then has no ``CAP_SYS_NICE``, as in a default container), with ``RLIMIT_NICE``
at 0. A measurement's arm (the compile workers' path where a needed guess cannot be raised: it compiles again).

Launch: ``python3 benchmarks/gpu/no_sys_nice.py COMMAND [ARG ...]``
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

PR_CAPBSET_DROP, CAP_SYS_NICE = 24, 23

if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    resource.setrlimit(resource.RLIMIT_NICE, (0, 0))
    if os.getuid() == 0 and ctypes.CDLL(None, use_errno=True).prctl(PR_CAPBSET_DROP, CAP_SYS_NICE, 0, 0, 0) != 0:
        raise SystemExit(f"prctl(PR_CAPBSET_DROP, CAP_SYS_NICE): {os.strerror(ctypes.get_errno())}")
    os.execvp(sys.argv[1], sys.argv[1:])
