"""A section's decoded bytes read as a file object, whose reads are views of
them, in a buffer kept for the next section opened.

``pickle.Unpickler`` takes the buffer of whatever its file's ``read``
returns: a frame (up to 64 KiB of opcodes and small arrays' bytes) read
from a :class:`io.BytesIO` is first copied into a new ``bytes``, and only
then out of it into each ``bytearray`` an array kept in the stream views.
Here ``read`` returns views of the section's own buffer: such an array is
copied once on its way out, as ``pickle.load`` copies it once out of a
frame it read. And the pickle stream of a model of many small arrays is a
few megabytes, which fresh memory would fault in page by page at every load
(costing about as much as unpickling it): a buffer of at most
:data:`KEEP_BYTES` is kept for the next section opened.
"""

import threading

from .._runtime.fork import renew_after_fork
from .buffers import BufferPool

#: Bytes of section buffers kept between loads.
KEEP_BYTES = 16 << 20

SECTION_BUFFERS = BufferPool(KEEP_BYTES)
renew_after_fork(SECTION_BUFFERS, _lock=threading.Lock)


class SectionFile:
    """Read-only file object over the first ``size`` bytes of ``buffer`` (a
    bytearray or an anonymous map), whose reads are views of it.

    Parameters
    ----------
    buffer : bytearray or mmap.mmap
    size : int, optional
        Bytes of the section (default: all of ``buffer``).
    kept : bool
        Whether ``buffer`` came from :data:`SECTION_BUFFERS`, to which
        :meth:`close` gives it back: nothing may use what was read after.
    """

    __slots__ = ("_buffer", "_view", "_size", "_pos", "_kept")

    def __init__(self, buffer, size=None, kept=False):
        self._buffer = buffer
        self._size = len(buffer) if size is None else size
        self._view = memoryview(buffer)[:self._size]
        self._pos = 0
        self._kept = kept

    def read(self, n=-1):
        pos = self._pos
        end = self._size if n is None or n < 0 else min(pos + n, self._size)
        self._pos = end
        return self._view[pos:end]

    def peek(self, n=0):
        """The rest of the section, the position left where it is.

        ``pickle.Unpickler`` peeks before it reads and takes all it is given
        (:meth:`io.BufferedReader.peek` too may give more than asked for):
        given the rest, it reads the stream through with a pointer, calling
        :meth:`read` once, at the end, to move past what it took, where it
        would otherwise call :meth:`read` or :meth:`readinto` for every frame
        and every array's bytes.
        """
        return self._view[self._pos:]

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
        """Where ``sub`` first occurs in the section, or -1."""
        return self._buffer.find(sub, 0, self._size)

    def whole(self):
        """The stream as bytes of exactly its length that support what
        ``bytes`` does: the buffer itself when it is a bytearray of that
        length (see :meth:`~.sections.ContainerReader.open_section`), else
        a copy. Nothing may use it once closed."""
        buffer = self._buffer
        if type(buffer) is bytearray and len(buffer) == self._size:
            return buffer
        return bytes(self._view)

    def getbuffer(self):
        """The whole section, as a memoryview."""
        return self._view

    def close(self):
        """Give a kept buffer back for the next section opened."""
        if self._kept:
            self._kept = False
            SECTION_BUFFERS.give(self._buffer)

