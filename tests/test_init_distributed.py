"""``init_distributed`` with launcher variables that cannot start a job: a BadInputError naming the variable, before
any store is started or waited for (in this process: nothing is initialized when it raises)."""

from __future__ import annotations

import time

import pytest
from harness import ended_result

import triton_dist_tune as tdt
from triton_dist_tune.group.rendezvous import IDENTITY_VARIABLES


@pytest.fixture
def launcher(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                 "PMI_SIZE", "PMIX_RANK", "TORCHELASTIC_USE_AGENT_STORE", *IDENTITY_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    return monkeypatch


@pytest.mark.timeout(30)
@pytest.mark.parametrize("port", ["abc", "", "99999", "-5", "0"])
def test_a_master_port_that_is_no_port_is_named(launcher, port):
    launcher.setenv("RANK", "0")
    launcher.setenv("WORLD_SIZE", "1")
    launcher.setenv("MASTER_PORT", port)
    # was: ValueError "invalid literal for int()" or TypeError "incompatible constructor arguments" from TCPStore
    with pytest.raises(tdt.BadInputError, match=f"MASTER_PORT='{port}' is not a port"):
        tdt.init_distributed(timeout_s=5)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("rank", ["x", "-1"])
def test_a_rank_that_is_not_a_number_is_named(launcher, rank):
    launcher.setenv("RANK", rank)
    launcher.setenv("WORLD_SIZE", "2")
    # was: "none of [...] is set"; then, for -1, "is not a number"
    with pytest.raises(tdt.BadInputError, match=f"RANK='{rank}' is not a whole number of 0 or more"):
        tdt.init_distributed(timeout_s=5)


@pytest.mark.timeout(30)
def test_a_rank_outside_the_world_is_refused_at_once(launcher):
    launcher.setenv("RANK", "2")
    launcher.setenv("WORLD_SIZE", "1")
    launcher.setenv("MASTER_PORT", "1")  # nobody listens: before, a client waited timeout_s for it
    import torch.distributed  # noqa: F401  (its first import, seconds on a loaded machine, is not what is timed)

    t0 = time.monotonic()
    with pytest.raises(tdt.BadInputError, match="rank 2 is not below the world size 1"):
        tdt.init_distributed(timeout_s=8)
    assert time.monotonic() - t0 < 2  # a quarter of the timeout the bug waited (as the tests below)


@pytest.mark.timeout(240)
def test_a_job_restarted_on_two_nodes_starts_again_and_tunes(tmp_path):
    """torchrun on two nodes (two agents on this host, ``--nnodes 2``, ``--max-restarts 1``): node 0's rank exits
    3 after ``init_distributed``. Its agent restarts its workers with ``TORCHELASTIC_RESTART_COUNT`` 1; node 1's
    agent restarts its own for the membership change with the count still 0. Both ranks of the next attempt start
    torch.distributed and tune alike (the tuner's exchanges under the attempt's name), node 1 spending no restart.
    Before: the store prefix was ``attempt<restart count>/``: node 1's restarted rank read the failed attempt's
    keys under ``attempt0/`` and failed too (node 1's restart spent: its next rank read count 1); with no restart
    left there, the ranks waited on different keys until ``init_distributed``'s deadline (``DistStoreError: wait
    timeout ... keys: /attempt1//0//cpu//0/1``). The tuner's own keys were named by the count too."""
    import subprocess
    from pathlib import Path

    from harness import HERE, free_port, parse_results, torchrun_command, tuner_env

    port = free_port()
    command, env = torchrun_command(
        ["--nnodes", "2", "--nproc-per-node", "1", "--max-restarts", "1", "--monitor-interval", "0.2",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"two-nodes-{port}"],
        Path(HERE) / "scenarios" / "restart_cases.py", ["node_0_fails_first"],
        tuner_env(tmp_path, 30, INIT_TIMEOUT_S="40", FAULT_DIR=str(tmp_path)))
    agents = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    outputs = [agent.communicate(timeout=200) for agent in agents]
    results = [r for out, _ in outputs for r in parse_results(out)]
    assert all(agent.returncode == 0 for agent in agents), [err[-3000:] for _, err in outputs]
    restarts = sorted((r["node"], r["restart"]) for r in results if r.get("started"))
    assert restarts == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "0")], results  # node 1's count stayed 0
    tuned = [r for r in results if "chosen" in r]
    assert len(tuned) == 2 and tuned[0]["chosen"] == tuned[1]["chosen"], results
    assert tuned[0]["states"] == tuned[1]["states"] and "failed" not in tuned[0]["states"], results


@pytest.mark.timeout(120)
def test_ranks_that_start_torch_distributed_themselves_on_nodes_that_count_restarts_apart_tune_alike(tmp_path):
    """Two gloo ranks that start torch.distributed themselves (``init_process_group``), with the variables two
    torchrun agents give their workers after node 0's restart (``GROUP_WORLD_SIZE`` 2; ``TORCHELASTIC_RESTART_COUNT``
    1 on rank 0, 0 on rank 1: the test above shows an agent restarting for a membership change does not count). They
    tune alike: the group names the attempt among its ranks at its first exchange (``epoch.named_by_each_group``).
    Before: each rank named the tuner's keys by its node's count, and both waited ``T`` (15 s) at the first exchange
    under different names (``GroupTimeoutError: ... waited 15 s at '[counted_apart] agree on key and config
    space'``). Reproduced with two real torchrun agents too (node 0's rank exiting 3 after a tuning): the same error
    after 20 s, and the job failed."""
    from pathlib import Path

    from harness import HERE, run_ranks, tuner_env

    case = "own_init_on_nodes_that_count_restarts_apart"
    results = run_ranks(Path(HERE) / "scenarios" / "restart_cases.py", 2, [case],
                        env=tuner_env(tmp_path, 15, GROUP_WORLD_SIZE="2"), timeout=90,
                        per_rank_env={0: {"TORCHELASTIC_RESTART_COUNT": "1"}, 1: {"TORCHELASTIC_RESTART_COUNT": "0"}})
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    (first,), (second,) = (r.results for r in results)
    assert (first["restart"], second["restart"]) == ("1", "0")
    assert first["chosen"] == second["chosen"] and first["states"] == second["states"] == ["measured"] * 3, results


@pytest.mark.timeout(120)
def test_wrong_group_notes_on_nodes_that_count_restarts_apart_are_read_and_an_earlier_attempts_are_not(tmp_path):
    """The same two ranks (counts 1 and 0, own ``init_process_group``). Where the job shares no attempt name, the
    wrong-group notes live under one name for every attempt (``unresolved.EVERY_ATTEMPT``) and a note posted before
    the reader's process started is an earlier attempt's:
    - rank 1 calls with a wrong ``autotune_pg``: rank 0, waiting for it with the right one, raises its
      ``BadInputError`` at once (before: rank 1's note was under its node's count, 0, rank 0 looked under 1, and it
      waited ``T``, 40 s, and raised ``GroupTimeoutError``);
    - an earlier attempt's note of rank 1 (its process ended), about the function the ranks then tune with rank 1
      3 s late, is not read: both tune alike (without the rule rank 0 raises it at once)."""
    from pathlib import Path

    from harness import HERE, run_ranks, tuner_env

    T = 40
    results = run_ranks(Path(HERE) / "scenarios" / "restart_cases.py", 2, ["notes_on_nodes_that_count_restarts_apart"],
                        env=tuner_env(tmp_path, T, GROUP_WORLD_SIZE="2"), timeout=100,
                        per_rank_env={0: {"TORCHELASTIC_RESTART_COUNT": "1"}, 1: {"TORCHELASTIC_RESTART_COUNT": "0"}})
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    (first,), (second,) = (r.results for r in results)
    assert first["late"] == second["late"] and first["late"]["states"] == ["measured"] * 3, (first, second)
    assert second["wrong"]["error"] == "BadInputError", second
    assert first["wrong"]["error"] == "BadInputError", first
    assert "global rank 1 raised BadInputError" in first["wrong"]["message"], first
    assert "earlier attempt" not in first["wrong"]["message"], first
    assert first["wrong"]["seconds"] < T / 4, first


@pytest.mark.timeout(30)
@pytest.mark.parametrize("seconds", ["abc", "0", "-3", "inf"])
def test_a_malformed_init_timeout_is_named(launcher, seconds):
    """``TRITON_DIST_AUTOTUNE_INIT_TIMEOUT`` bounds the wait for the ranks to join: a value that is no positive number
    of seconds is a BadInputError naming it, before any store starts."""
    launcher.setenv("RANK", "0")
    launcher.setenv("WORLD_SIZE", "2")
    launcher.setenv("MASTER_PORT", "1")
    launcher.setenv("TRITON_DIST_AUTOTUNE_INIT_TIMEOUT", seconds)
    with pytest.raises(tdt.BadInputError, match="TRITON_DIST_AUTOTUNE_INIT_TIMEOUT must be a positive number"):
        tdt.init_distributed(timeout_s=5)


@pytest.mark.timeout(180)
def test_init_distributed_starts_again_after_destroy_process_group_where_rank_0_hosts_the_store(tmp_path):
    """Two ranks started without torchrun's agent (as mpiexec starts them: rank 0 hosts the store) call
    ``init_distributed``, ``destroy_process_group`` and ``init_distributed`` again, as torch's own
    ``init_process_group`` allows. Both start again at once and all-reduce. Before: rank 0's first store still held
    its port (kept for its wait at exit), so rank 0 raised at once (``could not start the job's key-value store
    ...: EADDRINUSE``) and rank 1 ended with a ``GroupTimeoutError`` once rank 0's process was gone."""
    from pathlib import Path

    from harness import HERE, describe, run_ranks, tuner_env

    results = run_ranks(Path(HERE) / "scenarios" / "restart_cases.py", 2, ["init_again_after_destroy"],
                        env=tuner_env(tmp_path, 20), timeout=150)
    assert [r.returncode for r in results] == [0, 0], describe(results)
    for r in results:
        assert "error" not in r.result and r.result["sum"] == 2.0, r.result
        assert r.result["seconds"] < 15, r.result  # the wait bound is 60 s (a 4x gap)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("seconds", [0, -3, float("inf"), 2e6])
def test_a_timeout_s_that_is_no_positive_number_of_seconds_is_named_not_the_unset_variable(launcher, seconds):
    """``init_distributed(timeout_s=...)`` out of range, ``TRITON_DIST_AUTOTUNE_INIT_TIMEOUT`` unset: the error names
    the argument. Before: ``TRITON_DIST_AUTOTUNE_INIT_TIMEOUT must be a positive number of seconds, not ''``, a
    variable nobody set."""
    launcher.setenv("RANK", "0")
    launcher.setenv("WORLD_SIZE", "2")
    launcher.setenv("MASTER_PORT", "1")
    launcher.delenv("TRITON_DIST_AUTOTUNE_INIT_TIMEOUT", raising=False)
    with pytest.raises(tdt.BadInputError, match=r"init_distributed: timeout_s must be") as caught:
        tdt.init_distributed(timeout_s=seconds)
    assert "INIT_TIMEOUT" not in str(caught.value)


@pytest.mark.timeout(30)
def test_several_ranks_without_master_port_or_a_job_name_are_refused_naming_master_port(launcher):
    """``MASTER_PORT`` unset, 2 ranks, no launcher variable that names the job, no MPI: nothing could tell this job's
    store on the default port 29500 from another job's there, so the ranks are refused at once, naming MASTER_PORT
    (before: rank 1 connected to whatever listened on 29500, another job's store included: see the next test; here,
    with nothing there, it waited the init timeout and raised a GroupTimeoutError)."""
    launcher.setenv("RANK", "1")
    launcher.setenv("WORLD_SIZE", "2")
    t0 = time.monotonic()
    with pytest.raises(tdt.BadInputError, match="MASTER_PORT is unset and the launcher names no job"):
        tdt.init_distributed(timeout_s=8)
    assert time.monotonic() - t0 < 2


def _job_rank(port: int, job: str, rank: int, value: float, env: dict[str, str]):
    """A rank of job ``job`` (2 ranks, named by the launcher as mpiexec names its jobs) on store port ``port``."""
    from pathlib import Path

    from harness import HERE, base_env, spawn

    rank_env = base_env({**env, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_PORT": str(port),
                         "MASTER_ADDR": "127.0.0.1", "PMIX_NAMESPACE": f"job-{job}", "JOB_VALUE": str(value)})
    return spawn(Path(HERE) / "scenarios" / "restart_cases.py", ["all_reduce_own_value"], rank_env)


@pytest.mark.timeout(120)
def test_a_second_job_on_the_same_port_ends_at_once_and_never_joins_the_first(tmp_path):
    """Two jobs of 2 ranks started without torchrun's agent (rank 0 hosts the store) on one host and one port, each
    named by its launcher (``PMIX_NAMESPACE``, as mpiexec names its jobs). Job A's rank 0 starts first; job B's two
    ranks start while it waits for its rank 1, which starts once they have ended. Job B's rank 0 cannot bind the
    port and says so, naming MASTER_PORT; B's rank 1 reaches A's store, finds A's token there and ends at once with
    one line naming MASTER_PORT; job A all-reduces its own ranks' values. Before: B's rank 1 took part in A's naming
    of its attempt, A's rank 0 and B's rank 1 formed one group and all-reduced 1 + 100 = 101 (cross-talk), and A's
    own rank 1 never got in (``GroupTimeoutError``)."""
    import socket

    from harness import free_port, tuner_env

    port, init_s = free_port(), 30
    env = tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT="30")
    go_b, go_a1 = tmp_path / "go_b", tmp_path / "go_a1"  # (every rank's process started at once: forks take ~1 s)
    first = _job_rank(port, "A", 0, 1, env)
    others = [_job_rank(port, "B", rank, 100, {**env, "GO_FILE": str(go_b)}) for rank in (0, 1)]
    last = _job_rank(port, "A", 1, 1, {**env, "GO_FILE": str(go_a1)})
    deadline = time.monotonic() + 60
    while True:  # A's rank 0 hosts the store
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.02)
    go_b.touch()
    b0, b1 = (ended_result(proc, 60) for proc in others)
    go_a1.touch()
    a1 = ended_result(last, 60)
    a0 = ended_result(first, 60)
    assert (a0.get("sum"), a1.get("sum")) == (2.0, 2.0), (a0, a1, b0, b1)
    assert b0.get("error") == "AutotuneError" and f"port {port} is in use (MASTER_PORT={port}" in b0["message"], b0
    assert b1.get("error") == "AutotuneError" and "is another job's (MASTER_PORT=" in b1["message"], b1
    assert "'PMIX_NAMESPACE=job-A world=2', this rank's 'PMIX_NAMESPACE=job-B world=2'" in b1["message"], b1
    assert all("give each job its own MASTER_PORT" in r["message"] for r in (b0, b1)), (b0, b1)
    assert b1["seconds"] < init_s / 4, b1  # at once, not at the end of the init timeout


@pytest.mark.timeout(120)
def test_two_one_rank_processes_without_master_port_both_start_on_one_host(tmp_path):
    """Two processes of one rank each (no torchrun agent, ``MASTER_PORT`` unset: ``python script.py`` calling
    ``init_distributed()``), the second started while the first holds its store: both start and all-reduce their own
    value. Before, both took the default port 29500, and the second ended with its port in use."""
    from pathlib import Path

    from harness import HERE, base_env, spawn, tuner_env

    up, hold = tmp_path / "up", tmp_path / "hold"

    def alone(value: float, **extra: str):
        env = base_env({**tuner_env(tmp_path, 20), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                        "JOB_VALUE": str(value), **extra})
        for name in ("MASTER_PORT", "MASTER_ADDR", "PMIX_NAMESPACE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
            env.pop(name, None)
        return spawn(Path(HERE) / "scenarios" / "restart_cases.py", ["all_reduce_own_value"], env)

    first = alone(1, UP_FILE=str(up), HOLD_FILE=str(hold))
    deadline = time.monotonic() + 60
    while not up.exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.02)
    second = ended_result(alone(5), 60)
    hold.touch()
    assert (ended_result(first, 60).get("sum"), second.get("sum")) == (1.0, 5.0), second


@pytest.mark.timeout(150)
def test_an_mpiexec_job_without_master_port_agrees_a_free_port_through_mpi(tmp_path):
    """``mpiexec -n 2 python -m mpi4py`` with ``MASTER_PORT`` unset while the default port 29500 is taken (another
    job's store there; here, this test listens on it): rank 0 starts the job's store on a port the kernel picks and
    hands it to every rank through MPI, and the job all-reduces; so two such jobs on one host each have their own.
    Before: rank 0 could not bind 29500 (EADDRINUSE) and rank 1 met whatever listened there (another job's store:
    the cross-talk of the test above)."""
    import socket
    from pathlib import Path

    pytest.importorskip("mpi4py")
    from harness import HERE, parse_results, run_mpiexec, tuner_env

    taken = socket.socket()
    try:
        taken.bind(("", 29500))
        taken.listen()
    except OSError:  # taken already, by another process: the same premise
        pass
    try:
        env = {**tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT="30"), "JOB_VALUE": "1"}
        proc = run_mpiexec(Path(HERE) / "scenarios" / "restart_cases.py", 2, ["all_reduce_own_value"], env,
                           timeout=120, python_args=["-m", "mpi4py"])
    finally:
        taken.close()
    results = parse_results(proc.stdout)
    assert sorted(r.get("rank") for r in results) == [0, 1], (proc.stdout[-2000:], proc.stderr[-3000:])
    assert all(r.get("sum") == 2.0 for r in results), results


@pytest.mark.timeout(150)
def test_an_mpiexec_rank_waiting_in_mpis_start_for_a_rank_that_never_comes_ends_within_the_init_timeout(tmp_path):
    """``mpiexec -n 2 python -m mpi4py`` with ``MASTER_PORT`` unset: ``init_distributed`` starts MPI (importing
    ``mpi4py.MPI``) to agree the store's port, and MPI's start waits for every rank, holding the GIL. Rank 1 comes
    100 s late (as one that hangs before its ``init_distributed``). Before, rank 0 waited in MPI's start, silently,
    until rank 1 came, whatever the init timeout (4 s here); now it ends at the init timeout with one line naming
    what it waited for, and mpiexec ends the job."""
    from pathlib import Path

    pytest.importorskip("mpi4py")
    from harness import HERE, run_mpiexec, tuner_env

    env = {**tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT="4"), "JOB_VALUE": "1", "LATE_RANK": "1",
           "LATE_S": "100"}
    env.pop("MASTER_PORT", None)
    t0 = time.monotonic()
    proc = run_mpiexec(Path(HERE) / "scenarios" / "restart_cases.py", 2, ["all_reduce_own_value"], env,
                       timeout=130, python_args=["-m", "mpi4py"])
    took = time.monotonic() - t0
    assert proc.returncode != 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "init_distributed: rank 0 waited 4 s in MPI's start" in proc.stderr, proc.stderr[-3000:]
    assert took < 50, took  # (before: 100 s, rank 1's delay, then the job ran)


@pytest.mark.timeout(120)
def test_a_master_addr_with_spaces_around_it_starts_the_job(tmp_path):
    """``MASTER_ADDR="127.0.0.1 "`` on both ranks of a job started without torchrun's agent (a trailing space, as
    ``hostname -I`` prints one, or a quoted value in a job file): the address is read as ``RANK``, ``WORLD_SIZE`` and
    ``MASTER_PORT`` are, without the spaces around it, and the two ranks all-reduce. Before: rank 1 tried to resolve
    ``'127.0.0.1 '`` until the init timeout (``GroupTimeoutError ... gaierror``), and rank 0's store, whose own
    client could not resolve it either, ended after two connect tries of the init timeout each in torch's
    ``DistNetworkError`` and about 40 lines of its C++ warnings."""
    from pathlib import Path

    from harness import HERE, base_env, free_port, spawn, tuner_env

    port = free_port()
    env = tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT="20")
    ranks = [spawn(Path(HERE) / "scenarios" / "restart_cases.py", ["all_reduce_own_value"],
                   base_env({**env, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                             "MASTER_PORT": str(port), "MASTER_ADDR": " 127.0.0.1 ", "PMIX_NAMESPACE": "job-A",
                             "JOB_VALUE": "1"}))
             for rank in (0, 1)]
    assert [ended_result(proc, 90).get("sum") for proc in ranks] == [2.0, 2.0]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("addr", ["", "  "])
def test_a_blank_master_addr_is_named(launcher, addr):
    """``MASTER_ADDR`` set to nothing (a launch script whose look-up of the store's node printed nothing): a
    BadInputError naming it, at once. Before: rank 1 waited the init timeout to resolve ``''`` and rank 0 ended in
    torch's C++ warnings after twice the init timeout."""
    launcher.setenv("RANK", "1")
    launcher.setenv("WORLD_SIZE", "2")
    launcher.setenv("MASTER_PORT", "1")
    launcher.setenv("MASTER_ADDR", addr)
    import torch.distributed  # noqa: F401  (its first import, seconds on a loaded machine, is not what is timed)

    t0 = time.monotonic()
    with pytest.raises(tdt.BadInputError, match=f"MASTER_ADDR='{addr}' names no host"):
        tdt.init_distributed(timeout_s=8)
    assert time.monotonic() - t0 < 2


@pytest.mark.timeout(30)
@pytest.mark.parametrize("backend", ["glo", "cpu:gloo,cuda:nosuch"])
def test_a_backend_torch_does_not_have_is_named_before_anything_starts(launcher, backend):
    """``init_distributed(backend=...)`` naming a backend torch does not know: a BadInputError naming it and those
    torch knows, before any store starts. Before: torch's ``AssertionError: Unknown backend type`` (or, for ``nccl``
    on a CPU build, its RuntimeError) from ``init_process_group``, after the ranks had met."""
    launcher.setenv("RANK", "1")
    launcher.setenv("WORLD_SIZE", "2")
    launcher.setenv("MASTER_PORT", "1")
    launcher.setenv("MASTER_ADDR", "127.0.0.1")
    with pytest.raises(tdt.BadInputError, match="init_distributed: backend .* torch.distributed has no backend "
                                                "'(glo|nosuch)' \\(it knows .*gloo"):
        tdt.init_distributed(backend=backend, timeout_s=8)


@pytest.mark.timeout(60)
def test_rank_0_with_a_master_addr_that_does_not_resolve_ends_in_one_line_within_the_init_timeout(tmp_path):
    """Global rank 0, which hosts the store (no torchrun agent), given a ``MASTER_ADDR`` no resolver knows: one line
    naming ``MASTER_ADDR`` and the name, within the init timeout (4 s here), and none of torch's C++ warnings.
    Before: torch's client on rank 0 tried twice, the init timeout each (8 s), and rank 0 ended in an
    ``AutotuneError`` wrapping torch's ``DistNetworkError`` after about 40 lines of C++ warnings on stderr."""
    from pathlib import Path

    from harness import HERE, base_env, free_port, parse_results, spawn, tuner_env

    env = base_env({**tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT="4"), "RANK": "0", "WORLD_SIZE": "2",
                    "LOCAL_RANK": "0", "MASTER_PORT": str(free_port()), "MASTER_ADDR": "no-such-host.invalid",
                    "PMIX_NAMESPACE": "job-A", "JOB_VALUE": "1"})
    proc = spawn(Path(HERE) / "scenarios" / "restart_cases.py", ["all_reduce_own_value"], env)
    out, err = proc.communicate(timeout=50)
    said = parse_results(out)[-1]
    assert said.get("error") == "GroupTimeoutError", (said, err[-3000:])
    assert "MASTER_ADDR='no-such-host.invalid'" in said["message"] and "\n" not in said["message"], said
    assert "TCPStore.cpp" not in err and "socket.cpp" not in err, err[-3000:]
    assert said["seconds"] < 4 * 4, said


@pytest.mark.timeout(90)
def test_a_rank_whose_port_holds_a_program_that_never_answers_ends_within_the_init_timeout(tmp_path):
    """Rank 1 of a job without torchrun's agent, its ``MASTER_PORT`` held by a program that accepts connections and
    never answers (not a key-value store: here, this test's socket), ``..._INIT_TIMEOUT=4`` and the tuner's timeout
    at its default 300 s: one line naming the store's address and ``MASTER_PORT``, within 4 x 4 s. Before: torch's
    client read the handshake's reply without a limit, and the rank was cut off only after the tuner's silence window
    (``T + T/10``: 330 s), with a message saying the store's host froze."""
    import socket
    from pathlib import Path

    from harness import HERE, base_env, free_port, parse_results, spawn, tuner_env

    port = free_port()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", port))
        silent.listen(16)  # (the kernel accepts the connections; nobody reads them)
        env = tuner_env(tmp_path, 300, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT="4")
        proc = spawn(Path(HERE) / "scenarios" / "restart_cases.py", ["all_reduce_own_value"],
                     base_env({**env, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_PORT": str(port),
                               "MASTER_ADDR": "127.0.0.1", "PMIX_NAMESPACE": "job-A", "JOB_VALUE": "1"}))
        try:
            out, err = proc.communicate(timeout=60)
        except Exception:
            proc.kill()
            out, err = proc.communicate()
    results = parse_results(out)
    assert results and results[-1].get("error") == "GroupTimeoutError", (out[-2000:], err[-3000:])
    said = results[-1]
    assert f"127.0.0.1:{port}" in said["message"] and "MASTER_PORT" in said["message"], said
    assert "\n" not in said["message"], said
    assert said["seconds"] < 40, said  # (about 7 s here; before, the tuner's T + T/10: 330 s)


@pytest.mark.timeout(120)
def test_ranks_of_one_job_that_disagree_on_its_size_are_told_so_not_to_change_the_port(tmp_path):
    """Two ranks of one job (one ``PMIX_NAMESPACE``, one port), rank 0 with ``WORLD_SIZE=2`` and rank 1 with
    ``WORLD_SIZE=3`` (a launch script's mistake): rank 1 ends within its init timeout (8 s: it waits that long for
    rank 0 to start a job of its size, as a job started again with fewer ranks in the same processes does) with one
    line saying the ranks disagree on the job's size, naming both. Before: "is another job's ... give each job its
    own MASTER_PORT", advice for two jobs on one port that cannot help here."""
    from pathlib import Path

    from harness import HERE, base_env, free_port, spawn, tuner_env

    port = free_port()
    env = tuner_env(tmp_path, 20, TRITON_DIST_AUTOTUNE_INIT_TIMEOUT="8")

    def rank_of(rank: int, world: int):
        return spawn(Path(HERE) / "scenarios" / "restart_cases.py", ["all_reduce_own_value"],
                     base_env({**env, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                               "MASTER_PORT": str(port), "MASTER_ADDR": "127.0.0.1", "PMIX_NAMESPACE": "job-A",
                               "JOB_VALUE": "1"}))

    first, second = rank_of(0, 2), rank_of(1, 3)
    said = ended_result(second, 60)
    assert said.get("error") == "AutotuneError", said
    assert "disagree on its size" in said["message"] and "world size of 2, this rank 3" in said["message"], said
    assert "MASTER_PORT" not in said["message"], said
    assert ended_result(first, 60).get("error") == "GroupTimeoutError"  # (rank 0: rank 1 never took part)
