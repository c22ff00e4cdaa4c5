"""What a new user meets (issue 19, point 6) that needs no ranks: the plot's config labels and time axis, and
per-rank error texts."""

from __future__ import annotations

from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def plots() -> ModuleType:
    """The plot module, imported by the tests that use it (matplotlib's pyplot: 0.4 CPU-s at every worker's
    collection, where it was imported at this module's)."""
    pytest.importorskip("matplotlib")
    from triton_dist_tune.cli import plots

    return plots


def test_plot_labels_keep_the_fields_that_tell_configs_apart(plots):
    base = "{gemm_config: Config({BLOCK_K: 32, BLOCK_M: 64, BLOCK_N: 128, GROUP_M: 8, num_ctas: 1, num_stages: 3, "
    configs = [base + "num_warps: 4})}", base + "num_warps: 8})}"]
    assert configs[0][:38] == configs[1][:38]  # cut at 38 characters (as before) they looked identical
    labels = plots.config_labels(configs)  # whole, wrapped (issue 29): the differing field is always there
    assert [label.replace("\n", " ") for label in labels] == configs
    assert plots.distinguishing(configs) == (["num_warps: 4", "num_warps: 8"],
                                             ["gemm_config: Config", "BLOCK_K: 32", "BLOCK_M: 64", "BLOCK_N: 128",
                                              "GROUP_M: 8", "num_ctas: 1", "num_stages: 3"])
    assert plots.config_labels(["BLOCK: 16", "BLOCK: 32"]) == ["BLOCK: 16", "BLOCK: 32"]  # short: whole


def test_plot_time_axis_is_logarithmic_when_times_span_a_lot(plots):
    assert plots.log_scale([0.63, 285.0, 120.0])  # a 0.63 ms winner beside 285 ms losers
    assert not plots.log_scale([1.0, 1.2, 3.0])
    assert not plots.log_scale([])


def test_per_rank_errors_say_each_text_once_without_the_function_name_again():
    from triton_dist_tune.errors import per_rank

    parts = [(0, "gemm: prune_fn raised TypeError: boom"), (1, "gemm: prune_fn raised TypeError: boom"),
             (2, "[gemm] key_fn failed: KeyError: 'x'")]
    assert per_rank(parts, "gemm") == ("ranks [0, 1]: prune_fn raised TypeError: boom; "
                                       "rank 2: key_fn failed: KeyError: 'x'")
    assert per_rank([(1, "a")]) == "rank 1: a"
