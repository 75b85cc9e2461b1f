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
"""

import gc

#: Objects a block must leave in the youngest generation for the move to
#: pay. Below, the pass it saves is short, while finding out whether the
#: application keeps objects frozen (``gc.get_freeze_count``) walks every
#: frozen object, which in a process that froze a large heap costs more than
#: a small load itself.
MOVE_FROM = 10_000


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
            if gc.get_count()[0] >= MOVE_FROM and not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
        finally:
            gc.enable()
