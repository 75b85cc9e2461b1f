"""A seekable file object read through its own methods (``seek`` and
``readinto``): compressing files (``gzip.open``), ``io.BytesIO``, anything
whose descriptor, if it has one, does not hold the bytes it reads."""

import threading

from .abc import ByteSource


class FileObjectSource(ByteSource):
    """The bytes of a seekable binary file object from its position to its end.

    A lock keeps each seek-and-read whole when threads share the source;
    closing it leaves the file object positioned after the dump (see
    :meth:`mark_end`), or where the last read ended if none was marked.

    Parameters
    ----------
    file : binary file object
        Seekable, with ``readinto`` or ``read``.
    name : str
    """

    def __init__(self, file, name):
        self.file = file
        self.name = name
        self._lock = threading.Lock()
        self.base = file.tell()
        self._size = file.seek(0, 2) - self.base

    @property
    def size(self):
        return self._size

    def read_into(self, offset, buffer):
        readinto = getattr(self.file, "readinto", None)
        if readinto is None:
            read = self.file.read

            def readinto(view):
                data = read(len(view))
                view[:len(data)] = data
                return len(data)

        with self._lock:
            self.file.seek(self.base + offset)
            self.fill(offset, buffer, readinto)

    def close(self):
        if self.end is not None:
            self.file.seek(self.base + self.end)
