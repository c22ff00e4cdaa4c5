"""A signal that comes while a ``contextual_autotune`` rank applies an exchange result that is an error (every rank
raises it): the handler the program set must still run (``contextual/holding.py``). Usage: python
held_signal_cases.py CASE, with the rank variables set; each rank prints ``RESULT {json}`` lines."""

from __future__ import annotations

import logging
import os
import signal
import time

from _cases import case, emit, main
from contextual_cases import inputs, raising_on_rank_1, rank

import triton_dist_tune as tdt


class SignalAtTheErrorsLine(logging.Handler):
    """Sends this process SIGTERM as its rank log writes the line of a run's error (inside the application)."""

    def emit(self, record: logging.LogRecord) -> None:
        if "the function raised in run" in record.getMessage():
            os.kill(os.getpid(), signal.SIGTERM)


@case
def signal_while_an_error_is_applied():
    """The function raises on rank 1 in its 4th run: every rank's application of that run's exchange raises
    ``AutotuneError``. A SIGTERM comes as each rank logs that error; the program's handler only sets a flag (a
    training loop's graceful shutdown)."""
    got: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    tdt.init_distributed()
    from triton_dist_tune.disk import logs

    logs.rank_log().addHandler(SignalAtTheErrorsLine())
    layer = raising_on_rank_1([])
    try:
        layer(*inputs())
        error = None
    except tdt.AutotuneError as exc:
        error = type(exc).__name__
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:  # a handler that ran at all ran by now
        time.sleep(0.05)
    emit(rank=rank(), error=error, handler_ran=bool(got),
         handler_back=signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN))


if __name__ == "__main__":
    main()
