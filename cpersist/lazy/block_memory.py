"""Memory for the blocks dask reads from lazy arrays, used again once a block is gone.

A dask computation over a lazy array reads it as blocks of one size, one
after another in each worker, and drops each block once it is reduced. A
fresh allocation of tens of MiB is mapped anew by malloc and faulted in page
by page, and two processes faulting in pages at once slow each other down
(``benchmarks/dask_scaling.py`` measures it). A block taken from a
:class:`BlockMemory` reuses the pages of a block already dropped: its
memory goes back to the pool when the last view of the block is gone.

Kept pages are marked free for the kernel (``MADV_FREE``): under memory
pressure it takes them back, and they fault in again; otherwise they are
used again as they are.
"""

import mmap
import threading
import weakref

import numpy as np

from .._runtime.fork import renew_after_fork
from ..container.buffers import private_map


class BlockMemory:
    """Anonymous memory maps handed out as arrays and taken back when unused.

    Parameters
    ----------
    keep_bytes : int
        Most bytes of unused maps kept for reuse; more are unmapped.
    smallest : int
        Arrays of fewer bytes are plain ``numpy.empty`` (malloc reuses small
        blocks by itself).
    """

    def __init__(self, keep_bytes, smallest):
        self._keep_bytes = keep_bytes
        self._smallest = smallest
        self._kept_bytes = 0
        self._free = []
        self._lock = threading.Lock()

    def empty(self, shape, dtype):
        """An uninitialised writable C-order array, like :func:`numpy.empty`."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes < self._smallest:
            return np.empty(shape, dtype)
        buffer = self._take(nbytes)
        flat = np.frombuffer(buffer, dtype=np.uint8, count=nbytes)
        # Every view of the block, the returned one included, keeps ``flat``
        # alive (numpy points views at the array holding the buffer), so the
        # map comes back only when no array uses it any more.
        weakref.finalize(flat, self._give, buffer).atexit = False
        return flat.view(dtype).reshape(shape)

    def _take(self, nbytes):
        with self._lock:
            for i, buffer in enumerate(self._free):
                if nbytes <= len(buffer) <= 2 * nbytes:
                    del self._free[i]
                    self._kept_bytes -= len(buffer)
                    return buffer
        buffer = private_map(nbytes)  # private, as numpy's own memory is
        _advise(buffer, "MADV_HUGEPAGE")  # as numpy does for its large arrays
        return buffer

    def _give(self, buffer):
        if len(buffer) > self._keep_bytes:
            return
        _advise(buffer, "MADV_FREE")
        with self._lock:
            while self._free and self._kept_bytes + len(buffer) > self._keep_bytes:
                # The oldest goes first: its size is the least likely to come again.
                self._kept_bytes -= len(self._free.pop(0))
            self._free.append(buffer)
            self._kept_bytes += len(buffer)


def _advise(buffer, name):
    """``madvise`` where the platform has the advice; a kernel that refuses it
    changes only how fast the memory is."""
    advice = getattr(mmap, name, None)
    if advice is not None:
        try:
            buffer.madvise(advice)
        except OSError:
            pass


#: The blocks of :meth:`cpersist.LazyArray.to_dask`: a worker holds about
#: one block per thread at a time, so a few are kept.
BLOCK_MEMORY = BlockMemory(keep_bytes=256 << 20, smallest=1 << 20)

renew_after_fork(BLOCK_MEMORY, _lock=threading.Lock)
