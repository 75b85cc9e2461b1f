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
    owned : bool, default False
        Close ``file`` with the source (a path, which opens as this kind
        of source only where there is no ``pread``: Windows).
    """

    def __init__(self, file, name, owned=False):
        self.file = file
        self.name = name
        self._owned = owned
        if not owned:
            self.not_mapped = (f"a {type(file).__name__} is not a plain file object "
                               f"(only those made by open() are mapped)")
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
        if self._owned:
            self.file.close()
        elif self.end is not None:
            self.file.seek(self.base + self.end)
