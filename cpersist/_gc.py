"""Pause Python's cyclic garbage collector while building many objects.

Reading the index or the pickle stream of a file of thousands of arrays
allocates tens of thousands of small containers, none of them garbage until
the caller is done; each allocation threshold crossed would otherwise scan
all of them again (CPython's collector is generational, so a growing heap of
live objects is rescanned by every older-generation pass).
"""

import contextlib
import gc


@contextlib.contextmanager
def collector_paused():
    """Disable the cyclic collector inside the block, if it was enabled."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
