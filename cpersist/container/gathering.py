"""A file that cpersist creates, written through its descriptor: small
writes gathered in memory, each large one written from the caller's own
memory together with what is gathered, in one ``writev``.

A buffered file object copies every write smaller than its buffer into it:
the whole of an array of up to a megabyte, once more than needed. Fewer
write calls still pay (ext4 updates the inode at every one), so writes of
a section's record header, padding and small chunks are gathered.
"""

import errno
import os

#: Writes smaller than this are gathered (copied); larger ones are written
#: from the caller's memory before :meth:`GatheringFile.write` returns.
GATHER_BELOW = 256 << 10
#: What is gathered is written once it reaches this many bytes.
WRITE_GATHERED_AT = 1 << 20
#: Not on Windows: there each part is written by a call of its own.
_HAS_WRITEV = hasattr(os, "writev")


class GatheringFile:
    """A binary file object writing the descriptor ``fd`` (which it does not
    close) from its current position. ``write`` keeps nothing of what it
    is given once it returns; ``flush``, ``seek`` and ``close`` write what
    is gathered. What the writers of a dump use of a file object."""

    __slots__ = ("_fd", "_gathered", "_position", "closed")

    def __init__(self, fd):
        self._fd = fd
        self._gathered = bytearray()
        self._position = os.lseek(fd, 0, os.SEEK_CUR)
        self.closed = False

    def fileno(self):
        return self._fd

    def writable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._position

    def write(self, data):
        size = len(data) if type(data) is bytes else memoryview(data).nbytes
        if size < GATHER_BELOW:
            self._gathered += data
            if len(self._gathered) >= WRITE_GATHERED_AT:
                self.flush()
        else:
            # Taken out first: a failed write leaves no view of it behind
            # that would keep the next from growing it.
            gathered, self._gathered = self._gathered, bytearray()
            self._write_out([gathered, data] if gathered else [data])
        self._position += size
        return size

    def _write_out(self, parts):
        write_parts(self._fd, [_bytes_view(part) for part in parts])

    def flush(self):
        if self._gathered:
            gathered, self._gathered = self._gathered, bytearray()
            self._write_out([gathered])

    def seek(self, position, whence=os.SEEK_SET):
        self.flush()
        self._position = os.lseek(self._fd, position, whence)
        return self._position

    def close(self):
        """Write what is gathered."""
        if not self.closed:
            self.flush()
            self.closed = True


def write_parts(fd, parts):
    """Write all of ``parts`` (byte memoryviews, at most ``IOV_MAX``) to
    ``fd`` from its position, in one call where the file takes them all."""
    while parts:
        # A file takes all of a write but for a signal, a full disk
        # (raised) or more than about 2 GiB asked at once.
        written = os.writev(fd, parts) if _HAS_WRITEV else os.write(fd, parts[0])
        if not written:
            raise OSError(errno.EIO, "the file took no byte of a write")
        while parts and written >= parts[0].nbytes:
            written -= parts[0].nbytes
            parts = parts[1:]
        if written:
            parts = [parts[0][written:]] + parts[1:]


def _bytes_view(data):
    view = memoryview(data)
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")
