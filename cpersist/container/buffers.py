"""Reusable byte buffers that the reader reads encoded chunks into."""

import os
import threading


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

    def take(self, size):
        """A bytearray of at least ``size`` bytes, the caller's until given back."""
        with self._lock:
            while self._free:
                buffer = self._free.pop()
                self._kept_bytes -= len(buffer)
                if len(buffer) >= size:
                    return buffer
                # Too small (left by a section of smaller chunks): dropped.
        return bytearray(size)

    def give(self, buffer):
        """Return a buffer from :meth:`take`; kept if there is room."""
        with self._lock:
            if self._kept_bytes + len(buffer) <= self._keep_bytes:
                self._free.append(buffer)
                self._kept_bytes += len(buffer)

    def _after_fork(self):
        # The fork may have come while another thread held the lock.
        self._lock = threading.Lock()


#: Read buffers kept between loads: room for the five in flight on 2 cores
#: (two per worker and the one being read) for 4 MiB chunks compressed to
#: 3.2 MB or less.
READ_BUFFERS = BufferPool(16 << 20)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=READ_BUFFERS._after_fork)
