"""Ports for the tests' jobs and the chaos drivers' jobs (``benchmarks/chaos.py`` imports this file): each
pytest-xdist worker picks from a slice of its own, below the kernel's ephemeral range, so two jobs started at once by
two workers never take one port (a chaos job's random port once met another worker's job store: both of its ranks
failed in ``init_distributed``, a failed control)."""

from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path

#: where the tests' jobs listen: below the kernel's ephemeral range, from which every outgoing connection (gloo's
#: pairs, the stores' clients) takes its local port. A port found by binding port 0 comes from that range, and one
#: such connection took it once before the job's store listened on it (EADDRINUSE, beside the rest of the suite).
#: Each pytest-xdist worker (and the passes run beside them) picks from its own slice (:func:`port_slice`).
PORTS_FROM = 12000
#: the widest slice (a worker's jobs never need more)
PORT_SLICE = 2000


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (Linux's default where it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def port_slice() -> tuple[int, int]:
    """This process's slice of ports below the ephemeral range: slot 0 outside pytest-xdist (the passes run beside
    the workers), slot k + 1 for worker ``gwk``; the range split over as many slots as there are workers and one
    (at most :data:`PORT_SLICE` each), so that every worker has a slice however many there are (with 2,000 each,
    workers past the tenth had none and took the kernel's ports)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    slot = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    slots = max(int(count) if count.isdigit() else 0, slot) + 1
    width = min(PORT_SLICE, max(0, ephemeral_ports()[0] - PORTS_FROM) // slots)
    return PORTS_FROM + slot * width, PORTS_FROM + (slot + 1) * width


def free_port() -> int:
    """A port no one listens on, outside the ephemeral range (see :data:`PORTS_FROM`), in this process's slice."""
    low, high = port_slice()
    candidates = list(range(low, high)) if high > low else []
    random.Random(os.getpid() ^ time.monotonic_ns()).shuffle(candidates)
    for port in candidates[:200]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # no slice below the ephemeral range: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
