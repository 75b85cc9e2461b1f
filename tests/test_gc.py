"""Pausing the cyclic collector while a file's index or stream is read."""

import gc

import pytest

from cpersist._runtime import gc as _gc


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    gc.collect()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_off_inside_and_on_after(collector_on):
    with _gc.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_stays_off_if_it_was(collector_on):
    gc.disable()
    with _gc.collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_small_block_leaves_its_objects_young_without_counting_frozen_ones(
        collector_on, monkeypatch):
    """Counting frozen objects walks them all: a load of a few arrays in a
    process that froze a large heap must not pay for that."""
    calls = []
    real = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: calls.append(1) or real())
    with _gc.collector_paused():
        built = [[i] for i in range(100)]
    assert calls == []
    assert gc.get_count()[0] >= 100  # not moved: freeze() resets the count
    assert any(obj is built for obj in gc.get_objects(generation=0))


def test_a_large_block_hands_its_objects_to_the_oldest_generation(collector_on):
    with _gc.collector_paused():
        built = [[i] for i in range(_gc.MOVE_FROM + 1000)]
    assert gc.get_count()[0] < 100
    assert any(obj is built for obj in gc.get_objects(generation=2))


def test_objects_the_application_froze_stay_frozen(collector_on):
    frozen = [[i] for i in range(1000)]
    gc.freeze()
    try:
        with _gc.collector_paused():
            built = [[i] for i in range(_gc.MOVE_FROM + 1000)]
        # Still frozen: not back among the collector's generations. (The
        # frozen count itself may drop meanwhile: other tests' threads free
        # objects that were frozen with the rest of the heap.)
        assert not any(obj is frozen for obj in gc.get_objects())
        assert not any(obj is built for obj in gc.get_objects(generation=2))
    finally:
        gc.unfreeze()
    del frozen


class _SeesTheCollector:
    seen = []

    def __init__(self):
        self.x = 1

    def __setstate__(self, state):
        _SeesTheCollector.seen.append(gc.isenabled())
        self.__dict__.update(state)


def test_a_trusted_load_unpickles_with_the_collector_paused(collector_on, tmp_path):
    import numpy as np

    import cpersist

    cpersist.dump([_SeesTheCollector(), np.arange(100_000.0)], tmp_path / "a.cp")
    _SeesTheCollector.seen.clear()
    back = cpersist.load(tmp_path / "a.cp")
    assert _SeesTheCollector.seen == [False] and back[0].x == 1
    assert gc.isenabled()


def test_a_block_past_the_first_threshold_moves_its_objects_until_frozen_ones_are_seen(
        collector_on, monkeypatch):
    """A block leaving more young objects than the first threshold (a
    young pass due at once) has them moved, counting frozen objects, until
    it finds some: from then on it counts them only from MOVE_FROM."""
    monkeypatch.setattr(_gc, "_frozen_seen", False)
    calls = []
    real = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: calls.append(1) or real())
    medium = gc.get_threshold()[0] + 500
    assert medium < _gc.MOVE_FROM
    with _gc.collector_paused():
        built = [[i] for i in range(medium)]
    assert calls == [1]
    assert gc.get_count()[0] < 100
    assert any(obj is built for obj in gc.get_objects(generation=2))

    frozen = [[i] for i in range(100)]
    gc.freeze()
    try:
        with _gc.collector_paused():
            seen = [[i] for i in range(medium)]
        assert calls == [1, 1] and _gc._frozen_seen
        assert not any(obj is frozen for obj in gc.get_objects())  # left frozen
        with _gc.collector_paused():
            again = [[i] for i in range(medium)]
        assert calls == [1, 1]  # not counted again, nor moved
    finally:
        gc.unfreeze()
    del frozen, seen, again
