"""Writing a file around the page cache (``O_DIRECT``), for dumps that run
beside other work: a background dump's checkpoint.

A buffered ``write`` copies every byte into page-cache pages the kernel
allocates for the file, on the writing thread, and the kernel's flusher
threads write them to disk later; a dump that replaces a file atomically
gets new pages for all of it, the old file's are freed only at the rename.
That copy, the pages' allocation and their first touch cost the writing
thread more kernel time than the rest of the dump (on a virtual machine
whose freed memory goes back to its host, several times a memory copy);
beside a training loop, they take a core and memory bandwidth from it,
and the dirty pages and the later write-back add to the machine's.

:class:`DirectFile` takes what the writer hands it into a page-aligned
buffer of its own, reused from file to file, and writes it each time it is
full straight from it to the disk: one copy, into memory that stays the
same, and no page cache. The file's bytes are those a buffered write gives.
Where the file system refuses direct writes (tmpfs, some network file
systems), it writes through the page cache, as a plain file does.
"""

import errno
import mmap
import os
import threading

from .._runtime.fork import renew_after_fork

#: Bytes of one direct write (and of the buffer, kept for the next file):
#: each write waits for the disk, and the writing thread then for a core,
#: which on a busy machine takes longer than the write; fewer, larger
#: writes wait less in all.
BUFFER_SIZE = 32 << 20
#: Alignment of direct writes' offsets, lengths and memory: the largest
#: logical block size of common disks.
BLOCK = 4096

_free_buffers = []  # page-aligned buffers (mmap), reused by the next file
_buffers_lock = threading.Lock()


def direct_writes_possible():
    """Whether this platform has ``O_DIRECT`` (Linux and some BSDs)."""
    return hasattr(os, "O_DIRECT")


class DirectFile:
    """A write-only binary file object on the descriptor ``fd`` of a new,
    empty regular file, which it writes from its start: whole blocks of
    :data:`BUFFER_SIZE` bytes with ``O_DIRECT``, the shorter end through
    the page cache.

    ``fd`` is not closed by :meth:`close`: its owner closes it. Its flags
    get ``O_DIRECT`` for the writes and lose it before :meth:`flush` writes
    the end; after :meth:`flush` the file holds all that was written, as
    after a buffered file's. Where the file system refuses direct writes
    (``EINVAL``), the blocks go through the page cache, as a plain file's.
    """

    def __init__(self, fd):
        self._fd = fd
        self._pos = 0  # bytes taken (written to the file or in the buffer)
        self._written = 0  # bytes written to the file: a multiple of BLOCK but at the end
        self._direct = _set_direct(fd, True)
        self._buffer = _take_buffer()
        # Copied into by numpy, which lets go of the GIL while it copies: the
        # caller's other threads (a training loop's) run on meanwhile.
        self._array = _as_array(self._buffer)
        self._filled = 0  # bytes of the buffer taken, not written yet
        self.closed = False

    def writable(self):
        return True

    def tell(self):
        return self._pos

    def write(self, data):
        """Take all of ``data``; returns its length."""
        if self.closed:
            raise ValueError("write to a closed file")
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        total = view.nbytes
        array, source, done, size = self._array, _as_array(view), 0, len(self._buffer)
        while done < total:
            n = min(size - self._filled, total - done)
            array[self._filled:self._filled + n] = source[done:done + n]
            self._filled += n
            done += n
            if self._filled == size:
                self._write_buffer(size)
        self._pos += total
        return total

    def _write_buffer(self, n):
        """Write the buffer's first ``n`` bytes, a multiple of :data:`BLOCK`
        (directly if the file system allows), and keep the rest."""
        view = memoryview(self._buffer)[:n]
        try:
            _write_at(self._fd, view, self._written)
        except OSError as exc:
            if exc.errno != errno.EINVAL or not self._direct:
                raise
            # Refused (its memory, offset and length are aligned: the file
            # system takes no direct write), written again at its place
            # through the page cache.
            self._direct = _set_direct(self._fd, False)
            _write_at(self._fd, view, self._written)
        finally:
            view.release()
        self._written += n
        rest = self._filled - n
        if rest:  # less than a block: moved to the front
            self._array[:rest] = self._array[n:self._filled]
        self._filled = rest

    def flush(self):
        """Write all that was taken: the whole blocks directly, then the
        rest through the page cache."""
        if self.closed or not self._filled:
            return
        whole = self._filled - self._filled % BLOCK
        if whole:
            self._write_buffer(whole)
        if self._filled:
            if self._direct:
                self._direct = _set_direct(self._fd, False)
            view = memoryview(self._buffer)[:self._filled]
            try:
                _write_at(self._fd, view, self._written)
            finally:
                view.release()
            self._written += self._filled
            self._filled = 0

    def close(self):
        """Flush, and give the buffer back for the next file."""
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self.closed = True
            if self._direct:
                self._direct = _set_direct(self._fd, False)
            buffer, self._buffer, self._array = self._buffer, None, None
            with _buffers_lock:
                _free_buffers.append(buffer)


def _take_buffer():
    """A page-aligned buffer of :data:`BUFFER_SIZE` bytes: the last file's if
    there is one (memory freed and allocated again would cost page faults
    again, as the page cache's does)."""
    with _buffers_lock:
        while _free_buffers:
            buffer = _free_buffers.pop()
            if len(buffer) == BUFFER_SIZE:
                return buffer
    return mmap.mmap(-1, BUFFER_SIZE)


def _as_array(buffer):
    import numpy as np  # imported by then: only dumps of arrays write directly

    return np.frombuffer(buffer, np.uint8)


def _set_direct(fd, on):
    """Set or clear ``O_DIRECT`` on ``fd``; whether it is set."""
    import fcntl

    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    wanted = flags | os.O_DIRECT if on else flags & ~os.O_DIRECT
    if wanted != flags:
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, wanted)
        except OSError:
            return False  # the file system has no direct writes
    return on


def _write_at(fd, view, offset):
    while view.nbytes:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


# A child forked while another thread held the lock would wait for it forever.
renew_after_fork(globals(), _buffers_lock=threading.Lock)
