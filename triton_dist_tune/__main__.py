"""``python -m triton_dist_tune``: the command line (see :mod:`triton_dist_tune.cli`)."""

from .cli.commands import run

run()
