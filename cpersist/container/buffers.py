"""Reusable byte buffers that the reader reads encoded chunks into."""

import mmap
import threading

from .._runtime.fork import renew_after_fork

#: Buffers of this many bytes or more are anonymous maps: the kernel hands
#: out their pages zeroed when first touched, where a bytearray is written
#: with zeros whole first. A buffer used only in part (the scratch space a
#: Blosc part never needs) costs no memory and no time.
MAP_FROM = 1 << 18


def private_map(nbytes):
    """Anonymous memory of ``nbytes``, its pages backed when first touched.

    Private, as malloc's memory is: after a fork, the child's writes to it
    stay its own (a shared map would be written by both processes).
    """
    if hasattr(mmap, "MAP_ANONYMOUS"):
        return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return mmap.mmap(-1, nbytes)


class BufferPool:
    """Byte buffers that encoded chunks are read into, kept for reuse.

    A new ``bytes`` per chunk, with several chunks in flight on the pool,
    makes malloc give that memory back to the kernel and fault it in again
    at every load; reused buffers stay mapped. At most ``keep_bytes`` are
    kept while idle.

    Parameters
    ----------
    keep_bytes : int
    """

    def __init__(self, keep_bytes):
        self._keep_bytes = keep_bytes
        self._kept_bytes = 0
        self._free = []
        self._lock = threading.Lock()

    def take(self, size, exact=False):
        """Writable bytes (a bytearray, or an anonymous map of :data:`MAP_FROM`
        bytes or more) of at least ``size`` bytes, the caller's until given
        back; with ``exact``, a bytearray of ``size`` bytes."""
        return self.take_backed(size, exact)[0]

    def take_backed(self, size, exact=False):
        """``(buffer, backed)``: :meth:`take`'s buffer, and whether its pages
        are backed with memory already, so that writing it faults nothing in:
        a bytearray's (zero-filled when made) and a kept buffer's (as far as
        it was written before) are, a new map's are not."""
        if exact:
            return self._take_exact(size), True
        with self._lock:
            free = self._free
            # The smallest that fits: a lazy slice takes buffers of two sizes
            # (a chunk's stored bytes and its decoded size).
            best = None
            for k, buffer in enumerate(free):
                if len(buffer) >= size and (best is None or len(buffer) < len(free[best])):
                    best = k
            if best is not None:
                buffer = free.pop(best)
                self._kept_bytes -= len(buffer)
                return buffer, True
            # All too small (left by a section of smaller chunks): dropped.
            free.clear()
            self._kept_bytes = 0
        if size < MAP_FROM:
            return bytearray(size), True
        # Rounded up, so that the next chunk, a little longer, fits too: pages
        # never touched are never backed.
        return private_map(-(-size // MAP_FROM) * MAP_FROM), False

    def _take_exact(self, size):
        with self._lock:
            for k, buffer in enumerate(self._free):
                if len(buffer) == size and type(buffer) is bytearray:
                    del self._free[k]
                    self._kept_bytes -= size
                    return buffer
        return bytearray(size)

    def give(self, buffer):
        """Return a buffer from :meth:`take`; kept if there is room."""
        with self._lock:
            if self._kept_bytes + len(buffer) <= self._keep_bytes:
                self._free.append(buffer)
                self._kept_bytes += len(buffer)


#: Read buffers kept between loads: room for the five in flight on 2 cores
#: (two per worker and the one being read) for 4 MiB chunks compressed to
#: 3.2 MB or less.
READ_BUFFERS = BufferPool(16 << 20)

renew_after_fork(READ_BUFFERS, _lock=threading.Lock)
