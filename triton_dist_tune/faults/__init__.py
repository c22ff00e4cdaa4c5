"""Surviving a config that crashes or hangs a rank: :mod:`.watchdog` ends a rank whose measurement outlives its
deadline (a hung kernel or collective cannot be interrupted in-process), and :mod:`.journal` records every step of
a tuning on disk as it happens, so that the next attempt (a ``torchrun --max-restarts`` restart, or the job run
again) resumes where the tuning stopped and leaves out the configs that crashed or hung. docs/fault-tolerance.md
has the faults, what happens for each, and the tests that show it.
"""
