"""Pause Python's cyclic garbage collector while building many objects.

Reading the index or the pickle stream of a file of thousands of arrays
allocates tens of thousands of small containers, none of them garbage until
the caller is done; each allocation threshold crossed would otherwise scan
all of them again (CPython's collector is generational, so a growing heap of
live objects is rescanned by every older-generation pass). When a block that
built many objects ends, what it built is moved straight to the oldest
generation (``gc.freeze`` then ``gc.unfreeze``), so that the
youngest-generation pass the pause put off does not scan it all at the next
allocation. That move is skipped when the application keeps objects frozen
itself (a pre-fork server), since ``gc.unfreeze`` would thaw them too.

A block that leaves more young objects than the collector's first
threshold (a pass is then due at the next allocation) has them moved too,
as long as this process has never been seen keeping objects frozen: a
model of a few hundred small arrays, unpickled, leaves about 1500
containers, whose young pass would cost a few percent of its load. Once
frozen objects are seen, it is not asked again below :data:`MOVE_FROM`:
asking walks every frozen object.
"""

import gc

#: Objects a block must leave in the youngest generation for the move to be
#: asked for whatever was seen before. Below, the pass it saves is short,
#: while finding out whether the application keeps objects frozen
#: (``gc.get_freeze_count``) walks every frozen object, which in a process
#: that froze a large heap costs more than a small load itself.
MOVE_FROM = 10_000

#: Whether a block has found objects the application froze: from then on,
#: only blocks of :data:`MOVE_FROM` objects or more ask again.
_frozen_seen = False


class collector_paused:
    """Disable the cyclic collector inside the ``with`` block, if it was
    enabled. A class rather than a generator: every load enters it twice
    (its index, its stream), and a generator's context manager costs several
    times more to enter and leave."""

    __slots__ = ("_was_enabled",)

    def __enter__(self):
        self._was_enabled = gc.isenabled()
        if self._was_enabled:
            gc.disable()

    def __exit__(self, *exc_info):
        if not self._was_enabled:
            return
        try:
            young = gc.get_count()[0]
            if young >= MOVE_FROM or (not _frozen_seen and 0 < gc.get_threshold()[0] <= young):
                _move_to_oldest()
        finally:
            gc.enable()


def _move_to_oldest():
    """Every tracked object to the oldest generation, unless the
    application keeps objects frozen (then noted, see :data:`_frozen_seen`)."""
    global _frozen_seen
    if gc.get_freeze_count():
        _frozen_seen = True
        return
    gc.freeze()
    gc.unfreeze()
