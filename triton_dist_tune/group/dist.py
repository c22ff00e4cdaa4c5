"""Starting torch.distributed so that a restarted job never reads the previous attempt's addresses.

Under ``torchrun --max-restarts=N`` the agent's key-value store outlives a failed attempt; a restarted worker's
plain ``init_process_group`` can read the dead attempt's keys and fail (``connectFullMesh ... Connection refused``)
or hang. :func:`init_distributed` gives every attempt its own key prefix.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from ..errors import BadInputError

_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_LOCAL_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


def _env_int(names: tuple[str, ...], default: int | None = None) -> int:
    for name in names:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    if default is None:
        raise BadInputError(f"none of {list(names)} is set: start the job with torchrun, launch.sh or mpiexec")
    return default


def init_distributed(backend: str | None = None, timeout_s: float = 600.0) -> Any:
    """Initialize the default process group, restart-safe, and return it.

    Reads the rank and world size from torchrun's variables (or Open MPI's / PMI's), connects to the store at
    ``MASTER_ADDR:MASTER_PORT`` (torchrun's agent hosts it; otherwise rank 0 does), and prefixes every key with
    ``attempt{TORCHELASTIC_RESTART_COUNT}/``. The backend defaults to NCCL when CUDA is available, else gloo; with
    CUDA, each process uses GPU ``LOCAL_RANK``. Does nothing but return the group when already initialized.
    """
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.group.WORLD
    rank, world = _env_int(_RANK_VARS), _env_int(_SIZE_VARS)
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(_env_int(_LOCAL_VARS, 0) % torch.cuda.device_count())
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500"))
    agent_hosts_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(host, port, world, is_master=(rank == 0 and not agent_hosts_store),
                          timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(backend, store=dist.PrefixStore(f"attempt{attempt}/", store), rank=rank,
                            world_size=world, timeout=timedelta(seconds=timeout_s))
    return dist.group.WORLD
