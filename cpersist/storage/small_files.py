"""A local path opened once for a load, and a small local file read in one
call: the quick path of loading a compact dump (an object without arrays,
:mod:`cpersist.container.compact`), which needs no byte source, no
container reader and no file object kept open.

A module apart from :mod:`.open`: :mod:`cpersist.api` imports it on import,
and a dump needs none of the byte sources :mod:`.open` imports.
"""

import errno
import os
import stat

from ..container.compact import OVERHEAD, compact_stream

#: Largest pickle stream :func:`compact_file_stream` reads: larger compact
#: dumps (only :func:`cpersist.dumps` makes them) go through the reader.
READ_WHOLE_UP_TO = 64 << 10

#: None where the system has no pread (Windows).
_pread = getattr(os, "pread", None)
#: None where the system has no preadv: a byte source then reads through a
#: file object.
_preadv = getattr(os, "preadv", None)


def open_local(path, writable=False):
    """``(file, status)``: the local path ``path`` opened for reading (and
    writing if ``writable``), and its ``os.fstat``.

    One open and one status for the whole load: the quick path of a
    compact dump and the byte source of any other file
    (:func:`.open.open_source`'s ``opened``) share them, where each taking
    its own cost a small load a tenth of its time. A regular file, read
    with ``pread`` on its descriptor alone, is an :class:`OpenedFile`;
    anything else (a FIFO, a device; any file where there is no
    ``preadv``) an unbuffered file object (``'r+b'`` if ``writable``).

    Raises
    ------
    OSError
        As :func:`open` does (no such file, a directory, no permission).
    """
    if _preadv is None:
        file = open(path, "r+b" if writable else "rb", buffering=0)
        try:
            return file, os.fstat(file.fileno())
        except BaseException:
            file.close()
            raise
    name = os.fspath(path)
    fd = os.open(name, os.O_RDWR if writable else os.O_RDONLY)
    try:
        status = os.fstat(fd)
        if stat.S_ISREG(status.st_mode):
            return OpenedFile(fd, name, writable), status
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
        return open(fd, "r+b" if writable else "rb", buffering=0), status
    except BaseException:
        os.close(fd)
        raise


class OpenedFile:
    """A regular file :func:`open_local` opened: its descriptor, read with
    ``pread`` and mapped, never through a file object (whose making, and
    the status and position it takes, would cost a small load more than
    its own reads). What the byte source uses of a file object."""

    __slots__ = ("fd", "name", "_writable")

    def __init__(self, fd, name, writable):
        self.fd, self.name, self._writable = fd, name, writable

    def fileno(self):
        if self.fd < 0:
            raise ValueError("I/O operation on closed file")
        return self.fd

    def tell(self):
        """0: the file is only read with ``pread``, which leaves the
        position where the open put it."""
        return 0

    def writable(self):
        return self._writable

    def close(self):
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def compact_file_stream(file, status):
    """The pickle stream of the compact dump in ``file`` (a plain file
    object whose ``os.fstat`` is ``status``), or None when the file is
    anything else (left to the container reader, which says what is wrong
    with a damaged one), read in one call. The file's position is left as
    it was."""
    largest = READ_WHOLE_UP_TO + OVERHEAD
    # A regular file only: a FIFO's data is left to the general way.
    if not stat.S_ISREG(status.st_mode) or not OVERHEAD < status.st_size <= largest:
        return None
    try:
        if _pread is not None:
            data = _pread(file.fileno(), largest + 1, 0)
        else:  # Windows: read, then back to the start, where the byte source starts
            data = file.read(largest + 1)
            file.seek(0)
    except OSError:
        return None
    return compact_stream(data)
