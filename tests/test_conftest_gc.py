"""The test processes' collector (tests/conftest.py): what collection left alive is frozen out of its walks."""

import gc


def test_the_objects_collection_left_alive_are_frozen_out_of_the_collectors_walks():
    assert gc.get_freeze_count() > 10_000  # torch's and the test modules' objects, at least
    made = [[] for _ in range(1000)]
    assert gc.is_tracked(made)  # a test's own objects are still the collector's
