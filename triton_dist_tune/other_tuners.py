"""Options of TileLang's ``autotune`` and Helion's autotuner given to ``autotune``, with what to write instead.

A kernel author porting from those tuners writes their option names out of habit; ``autotune`` refuses an option
it does not have (:func:`~triton_dist_tune.checks.no_unknown_options`), and for these names says what this package
does in their place, or that it has no counterpart and why, instead of a bare "unknown option" (or a near name that
means something else: Helion's ``autotune_precompile="spawn"`` is no ``precompile_fn``). ``triton.autotune``'s
own names (``configs=``, ``warmup=``, ``rep=``), which TileLang shares, are in
:data:`~triton_dist_tune.checks.TRITON_NAMES`.
"""

from __future__ import annotations

#: TileLang's ``autotune`` / ``AutoTuner`` options that ``autotune`` spells otherwise or does without
TILELANG_NAMES: dict[str, str] = {
    "skip_check": "leave out ref_prog: without one no config's result is checked",
    "max_mismatched_ratio": "none: ref_prog's check is torch.testing.assert_close with rtol/atol, every element "
                            "within them",
    "manual_check_prog": "none: ref_prog=... with rtol/atol; a check of your own can raise inside the tuned "
                         "function, which leaves that config out on every rank",
    "supply_type": "none: the configs run on the call's own arguments (restore_value / reset_to_zero for those "
                   "they change)",
    "cache_input_tensors": "none: the configs run on the call's own arguments, saved and put back as needed",
    "target": "none: the configs run where the call's tensors are",
}

#: Helion's ``@helion.kernel(...)`` settings that ``autotune`` spells otherwise or does without
HELION_NAMES: dict[str, str] = {
    "autotune_effort": "'none': call with autotune=False (the first config prune_fn keeps, no tuning), or "
                       "undecided='first' for keys never tuned; 'quick': budget= seconds per key (at the bound the "
                       "best measured config is chosen); 'full': the default",
    "config": "a config pinned for production: a config_space of that one entry (the first call of each key still "
              "warms it up and times it, then the decision is cached), or call with autotune=False to run "
              "config_space[0] (the first prune_fn keeps) untuned",
    "autotune_baseline_fn": "ref_prog, called with the call's own arguments; not on by default: Helion checks "
                            "every config against its default config, this tuner checks nothing without ref_prog",
    "autotune_baseline_atol": "atol (with rtol: give both, or neither for torch's tolerances of the dtype)",
    "autotune_baseline_rtol": "rtol (with atol: give both, or neither for torch's tolerances of the dtype)",
    "autotune_accuracy_check": "none: configs are checked only against a ref_prog you give (without one, none is)",
    "autotune_precompile": "precompile_fn, a function that compiles one config (precompile_fn(config, *args, "
                           "**kwargs)), with compile_threads; not a start method ('spawn', 'fork': "
                           "TRITON_DIST_AUTOTUNE_COMPILE_START)",
    "autotune_compile_timeout": "timeout= (seconds): a config whose compile has not ended that long after it is "
                                "waited for is left out on every rank; the same timeout bounds each other phase of a "
                                "config on a rank and a rank's wait for the others (docs/fault-tolerance.md)",
    "autotune_random_seed": "none: the group draws the race's shuffled order from a seed it shares, alike on every "
                            "rank",
    "autotune_max_generations": "none: search= ('auto', 'search', 'exhaustive') and budget= seconds per key",
    "autotuner": "search= ('auto', 'search', 'exhaustive'; docs/search.md)",
    "autotune_log_level": "each call's autotune_verbose=True, or TRITON_PRINT_AUTOTUNING=1; every rank's log is in "
                          "TRITON_DIST_AUTOTUNE_LOG_DIR",
    "static_shapes": "none: key_fn's return value is the key (return to_hashable(x) for one decision per shape, "
                     "or leave the shapes out of it)",
}


#: what ``contextual_autotune`` (which tunes the ``@triton.autotune`` kernels a function launches, with their own
#: configs) has for a check against a reference and an effort bound, asked for by Helion's names, TileLang's, or
#: ``autotune``'s own
_NO_CHECK = ("none in contextual_autotune: it checks no config's result against a reference (autotune's ref_prog "
             "with rtol/atol does)")
_EFFORT = ("none in contextual_autotune (autotune's budget= bounds a key's tuning in seconds): fewer rounds with "
           "n_repeat= and n_warmup=, or a @triton.autotune kernel with fewer configs or prune_configs_by")
CONTEXTUAL_NAMES: dict[str, str] = {
    **dict.fromkeys(("autotune_baseline_fn", "autotune_baseline_atol", "autotune_baseline_rtol",
                     "autotune_accuracy_check", "ref_prog", "rtol", "atol", "skip_check", "max_mismatched_ratio",
                     "manual_check_prog"), _NO_CHECK),
    **dict.fromkeys(("autotune_effort", "budget", "autotune_max_generations"), _EFFORT),
    "config": "a kernel pinned for production: its @triton.autotune(configs=[that one config], ...), which "
              "contextual_autotune launches without timing it",
}


def contextual_hint(name: str) -> str | None:
    """What ``contextual_autotune`` has for option ``name`` of TileLang's, Helion's or ``autotune``'s that asks for a
    check against a reference, an effort bound or a pinned config (:data:`CONTEXTUAL_NAMES`), or None."""
    if name not in CONTEXTUAL_NAMES:
        return None
    whose = ("TileLang's" if name in TILELANG_NAMES else "Helion's" if name in HELION_NAMES else "autotune's")
    return f"{whose}; here: {CONTEXTUAL_NAMES[name]}"


def hint(name: str) -> str | None:
    """What to write instead of TileLang's or Helion's option ``name`` (with whose it is), or None."""
    if name in TILELANG_NAMES:
        return f"TileLang's; here: {TILELANG_NAMES[name]}"
    if name in HELION_NAMES:
        return f"Helion's; here: {HELION_NAMES[name]}"
    return None
