"""A raw pickle stream written straight into its record of the file while it
is pickled (:class:`InFileStream`), as ``pickle.dump`` writes its frames,
rather than gathered in memory to be written once the array sections
before it are.

A raw dump's pickle stream is its root section: one record after every
array section. While the dump has written no array section, the record can
be opened where the file is and the stream written into it as it comes;
its header, which states the record's length, is written once the stream
ends. A dump that needs an array section after that takes the stream back
out of the file (:meth:`InFileStream.withdraw`) and gathers it in memory
from there on: the file's bytes are the same either way.
"""

import os

from .encode import EncodedStream
from .files import named_os_error
from .framing import ALIGNED, RECORD, record_header
from .gathering import write_parts
from .layout import VERBATIM, checksum_state

try:
    import fcntl
except ImportError:  # Windows: no pread either
    fcntl = None

#: Most parts gathered for one write.
MAX_PARTS = 256
_LENGTH_BITS = 56


class InFileRecords:
    """The part of :class:`.writer.ContainerWriter` that lets a
    :class:`InFileStream` write a record's payload to the file's descriptor
    itself (it uses the writer's ``_file``, ``_fd``, ``_fd_base``, ``_pos``,
    ``_name``, ``_reserve``, and :class:`InFileStream` its ``_add_table``)."""

    def in_file_stream(self, chunk_size):
        """A :class:`InFileStream` writing the next record, or None if the
        file is not a local one whose descriptor also reads back what is
        written to it."""
        fd = self._fd
        if fd is None or fcntl is None or not hasattr(os, "preadv"):
            return None
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDWR:
                return None
        except OSError:
            return None
        return InFileStream(self, fd, chunk_size)

    def _open_in_file_record(self):
        """Open a raw record, its length 0 until :meth:`_close_in_file_record`
        states it; return where it starts. What follows is written to the
        descriptor (:meth:`_write_directly`)."""
        self._write_pending()
        head = self._pos
        self._write(record_header(ALIGNED, 0, head))
        self._file.flush()
        return head

    def _write_directly(self, fd, parts, total):
        """Write ``parts`` (``total`` bytes) to ``fd`` with one system call
        (or more, after a short write)."""
        self._reserve(total)
        try:
            write_parts(fd, parts)
        except OSError as exc:
            raise named_os_error(exc, self._name) from None
        self._pos += total

    def _close_in_file_record(self, fd, head, length):
        try:
            os.pwrite(fd, RECORD.pack(ALIGNED << _LENGTH_BITS | length),
                      self._fd_base + head)
        except OSError as exc:
            raise named_os_error(exc, self._name) from None
        # The file object's own position, which writes to its descriptor
        # did not move.
        self._file.seek(self._fd_base + self._pos)

    def _read_back(self, fd, start, into):
        """Fill ``into`` with the bytes of the file from ``start`` on."""
        try:
            while into:
                n = os.preadv(fd, [into], self._fd_base + start)
                if not n:
                    raise OSError(f"the file ends at byte {start}")
                into, start = into[n:], start + n
        except OSError as exc:
            raise named_os_error(exc, self._name) from None

    def _rewind(self, position):
        """Write on from ``position``, back from where the writer is."""
        self._file.seek(self._fd_base + position)
        self._pos = position


class InFileStream:
    """A write-only file object writing a raw stream as the next record of
    ``writer``'s file through its descriptor ``fd``
    (:meth:`InFileRecords.in_file_stream`), checksummed in
    chunks of ``chunk_size`` bytes as it goes (see the module's doc).

    The pickler's frames (of 64 KiB) are gathered, not copied, and written
    ``chunk_size`` bytes at a time with their blocks reserved first: for a
    new file, writes of a MiB cost the kernel less than writes of a frame.
    The writer writes nothing else until :meth:`add_section` or
    :meth:`withdraw`.
    """

    def __init__(self, writer, fd, chunk_size):
        self._writer = writer
        # Its own: the writer forgets its descriptor where blocks cannot be
        # reserved.
        self._fd = fd
        self._chunk_size = chunk_size
        self._head = None  # where the record starts, once opened
        self._start = 0  # where its payload starts
        self._parts = []  # bytes gathered, not written yet
        self._gathered = 0
        self._filled = 0  # bytes of the current chunk
        self._state = checksum_state()
        self._table = []  # [stored, raw, checksum, flag] of each full chunk

    def write(self, data):
        if self._head is None:
            self._head = self._writer._open_in_file_record()
            self._start = self._writer.position
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")  # a C-contiguous buffer of an array
        total = view.nbytes
        self._checksum(view, total)
        self._parts.append(view)
        self._gathered += total
        if (self._gathered >= self._chunk_size or type(view.obj) is not bytes
                or len(self._parts) >= MAX_PARTS):
            # A bytearray or buffer of the object itself is written before
            # pickling goes on and could change it.
            self._write_gathered()
        return total

    def _checksum(self, view, total):
        size, state = self._chunk_size, self._state
        if self._filled + total < size:  # most writes: a frame
            state.update(view)
            self._filled += total
            return
        at = 0
        while at < total:
            take = min(size - self._filled, total - at)
            state.update(view[at:at + take])
            at += take
            self._filled += take
            if self._filled == size:
                self._table.append([size, size, state.intdigest(), VERBATIM])
                state.reset()
                self._filled = 0

    def _write_gathered(self):
        if self._parts:
            self._writer._write_directly(self._fd, self._parts, self._gathered)
            self._parts = []
            self._gathered = 0

    def add_section(self, meta):
        """End the stream: state its record's length, and add it to the
        index as a section; return its number."""
        writer = self._writer
        if self._head is None:
            self._head = writer._open_in_file_record()
            self._start = writer.position
        self._write_gathered()
        table = self._table
        if self._filled:
            table.append([self._filled, self._filled, self._state.intdigest(), VERBATIM])
        writer._close_in_file_record(self._fd, self._head, writer.position - self._start)
        return writer._add_table(self._start, table, None, 1, meta)

    def withdraw(self):
        """Take the stream out of the file, which goes on where its record
        started: an :class:`EncodedStream` holding it, to take the rest.

        Its whole chunks are read back into the stream's chunk buffers,
        their checksums known; the rest is written to it as pickled."""
        size = self._chunk_size
        stream = EncodedStream(None, size, 1)
        if self._head is not None:
            writer, fd, start = self._writer, self._fd, self._start
            written = writer.position - start
            for k in range(written // size):
                stream.take_raw_chunk(
                    lambda chunk, at=start + k * size: writer._read_back(fd, at, chunk),
                    self._table[k][2])
            tail = bytearray(written % size)
            writer._read_back(fd, writer.position - len(tail), memoryview(tail))
            stream.write(tail)
            writer._rewind(self._head)
            for part in self._parts:  # gathered, not written
                stream.write(part)
            self._parts, self._head = [], None
        return stream
