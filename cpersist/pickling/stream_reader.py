"""A pickle stream in memory as the file object the C unpickler reads, in a
buffer kept for the next load.

``pickle.Unpickler`` takes the buffer of whatever its file's ``read``
returns: a frame (up to 64 KiB of opcodes and small arrays' bytes) read
from a :class:`io.BytesIO` is first copied into a new ``bytes``, and only
then out of it into each ``bytearray`` an array kept in the stream views.
Here ``read`` returns views of the stream's own buffer: such an array is
copied once on its way out, as ``pickle.load`` copies it once out of a
frame it read. And the stream of a model of many small arrays is a few
megabytes, which fresh memory would fault in page by page at every load
(costing about as much as unpickling it): a buffer of at most
:data:`KEEP_BYTES` is kept for the next load.
"""

import threading

from .._runtime.fork import renew_after_fork
from ..container.buffers import BufferPool

#: Stream buffers kept between loads, in bytes.
KEEP_BYTES = 16 << 20

STREAM_BUFFERS = BufferPool(KEEP_BYTES)
renew_after_fork(STREAM_BUFFERS, _lock=threading.Lock)


class StreamReader:
    """Read-only file object over the first ``size`` bytes of ``buffer`` (a
    bytearray or an anonymous map), whose reads are views of it.

    Parameters
    ----------
    buffer : bytearray or mmap.mmap
    size : int, optional
        Bytes of the stream (default: all of ``buffer``).
    pooled : bool
        Whether ``buffer`` came from :data:`STREAM_BUFFERS`, to which
        :meth:`close` gives it back: nothing may use what was read after.
    """

    __slots__ = ("_buffer", "_view", "_size", "_pos", "_pooled")

    def __init__(self, buffer, size=None, pooled=False):
        self._buffer = buffer
        self._size = len(buffer) if size is None else size
        self._view = memoryview(buffer)[:self._size]
        self._pos = 0
        self._pooled = pooled

    def read(self, n=-1):
        pos = self._pos
        end = self._size if n is None or n < 0 else min(pos + n, self._size)
        self._pos = end
        return self._view[pos:end]

    def readinto(self, target):
        pos = self._pos
        target = memoryview(target).cast("B")
        n = min(len(target), self._size - pos)
        target[:n] = self._view[pos:pos + n]
        self._pos = pos + n
        return n

    def readline(self):
        pos = self._pos
        end = self._buffer.find(b"\n", pos, self._size)
        end = self._size if end < 0 else end + 1
        self._pos = end
        return self._view[pos:end]

    def find(self, sub):
        """Where ``sub`` first occurs in the stream, or -1."""
        return self._buffer.find(sub, 0, self._size)

    def whole(self):
        """The stream as bytes of exactly its length that support what
        ``bytes`` does: the buffer itself when it is a bytearray of that
        length (see :func:`pooled_reader`), else a copy. Nothing may use it
        once closed."""
        buffer = self._buffer
        if type(buffer) is bytearray and len(buffer) == self._size:
            return buffer
        return bytes(self._view)

    def getbuffer(self):
        """The whole stream, as a memoryview."""
        return self._view

    def close(self):
        """Give a pooled buffer back for the next load."""
        if self._pooled:
            self._pooled = False
            STREAM_BUFFERS.give(self._buffer)


def pooled_reader(size, fill, exact=False):
    """A :class:`StreamReader` of ``size`` bytes, in a kept buffer when one
    fits (else a new one, kept once closed if small enough), filled by
    ``fill(writable memoryview of size bytes)``. ``exact``: a bytearray of
    ``size`` bytes, which :meth:`StreamReader.whole` gives as it is (a
    restricted load walks the stream as bytes: a copy of a model's stream
    of many small arrays, in fresh memory, would cost about a fifth of
    walking it)."""
    buffer = STREAM_BUFFERS.take(size, exact) if size <= KEEP_BYTES else bytearray(size)
    stream = StreamReader(buffer, size, pooled=size <= KEEP_BYTES)
    if size:
        try:
            fill(memoryview(buffer)[:size])
        except BaseException:
            stream.close()
            raise
    return stream
