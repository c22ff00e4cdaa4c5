"""Measuring configs on a group's ranks, for both tuners: how the configs of one key are run, timed and compared.

:mod:`.lockstep` warms the configs up and runs the race in lock-step with the group, :mod:`.race` holds the race's
bookkeeping and decisions, :mod:`triton_dist_tune.stats` the statistics they decide with, :mod:`.timing` the samples and
:mod:`.clocks` the clocks that time them. Around them: :mod:`.precompile` compiles every config in a thread pool
before measuring, :mod:`.arguments` keeps tuning runs from leaking side effects into the caller's arguments, and
:mod:`.replicas` tunes a tensor-parallel group repeated across a data-parallel job as one. Measuring talks to the
other ranks through :mod:`triton_dist_tune.group` and guards itself with :mod:`triton_dist_tune.faults`.
"""
