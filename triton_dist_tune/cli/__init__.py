"""The command line: ``triton-dist-tune`` / ``python -m triton_dist_tune`` (:mod:`.commands`), and its plots
(:mod:`.plots`, needs matplotlib)."""

from .commands import run

__all__ = ["run"]
