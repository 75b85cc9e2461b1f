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

:class:`DirectFile` takes what the writer hands it into page-aligned
buffers of its own, reused from file to file, and hands each full one to a
thread that writes it straight to the disk while the writer fills the
next: one copy, into memory that stays the same, no page cache, and the
writer waits for the disk only when every buffer is waiting for it. The
file's bytes are those a buffered write gives. Where the file system
refuses direct writes (tmpfs, some network file systems), it writes
through the page cache, as a plain file does.
"""

import errno
import mmap
import os
import threading

from .._runtime.fork import renew_after_fork
from .._runtime.threads import run_later

#: Bytes of one direct write (and of each buffer, kept for the next file):
#: each write waits for the disk, and the writing thread then for a core,
#: which on a busy machine takes longer than the write; fewer, larger
#: writes wait less in all.
BUFFER_SIZE = 32 << 20
#: Buffers per file: one is filled while the others are written or wait
#: for the writing thread, so that the writer copies on while the disk
#: writes; with two, a write slower than a buffer's copy (the disk's pace
#: varies) holds the writer up at once.
BUFFERS = 3
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
    empty regular file, which it writes from its start: whole buffers of
    :data:`BUFFER_SIZE` bytes with ``O_DIRECT`` on a thread of their own,
    the shorter end through the page cache.

    ``fd`` is not closed by :meth:`close`: its owner closes it. Its flags
    get ``O_DIRECT`` for the writes and lose it before :meth:`flush` writes
    the end; after :meth:`flush` the file holds all that was written, as
    after a buffered file's. Where the file system refuses direct writes
    (``EINVAL``), the buffers go through the page cache, as a plain file's.
    An error of a buffer's write is raised by the next :meth:`write`,
    :meth:`wait_for_room` or :meth:`flush`.
    """

    def __init__(self, fd):
        self._fd = fd
        self._pos = 0  # bytes taken (written to the file or in a buffer)
        self._sent = 0  # bytes handed to the writing thread or written
        self._direct = _set_direct(fd, True)
        self._buffers = [_take_buffer() for _ in range(BUFFERS)]
        # Copied into by numpy, which lets go of the GIL while it copies: the
        # caller's other threads (a training loop's) run on meanwhile.
        self._arrays = [_as_array(buffer) for buffer in self._buffers]
        self._done = threading.Condition()
        # Under _done: which buffers the writing thread holds, its first error.
        self._writing = [False] * BUFFERS
        self._error = None
        self._current = 0  # the buffer being filled, or None (all were full)
        self._filled = 0  # bytes of it taken, not sent yet
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
        source, done = _as_array(view), 0
        while done < total:
            if self._current is None:
                self._take_free()
            n = min(BUFFER_SIZE - self._filled, total - done)
            self._arrays[self._current][self._filled:self._filled + n] = source[done:done + n]
            self._filled += n
            done += n
            if self._filled == BUFFER_SIZE:
                self._send()
        self._pos += total
        return total

    def wait_for_room(self, nbytes, wait=True):
        """Whether :meth:`write` takes ``nbytes`` now without waiting for the
        disk; with ``wait``, wait until it would (or until nothing is being
        written), and return True. A writer lent memory it must give back
        soon gives it back first, then waits here."""
        with self._done:
            while True:
                self._raise_error()
                free = BUFFER_SIZE - self._filled if self._current is not None else 0
                free += BUFFER_SIZE * sum(not writing for number, writing in
                                          enumerate(self._writing) if number != self._current)
                if free >= nbytes or not any(self._writing):
                    return True
                if not wait:
                    return False
                self._done.wait()

    def _take_free(self):
        """Fill a buffer the writing thread does not hold, once it has one."""
        with self._done:
            while True:
                self._raise_error()
                for number, writing in enumerate(self._writing):
                    if not writing:
                        self._current, self._filled = number, 0
                        return
                self._done.wait()

    def _send(self):
        """Hand the full buffer to the writing thread (that of
        :func:`~cpersist._runtime.threads.run_later`, which runs its work in
        turn: the file's writes stay in order)."""
        number, offset = self._current, self._sent
        with self._done:
            self._writing[number] = True
        self._current, self._filled = None, 0
        self._sent += BUFFER_SIZE
        run_later(_write_buffer, self, number, offset)

    def _written(self, number, error):
        """On the writing thread: buffer ``number`` is written or failed."""
        with self._done:
            self._writing[number] = False
            if error is not None and self._error is None:
                self._error = error
            self._done.notify_all()

    def _raise_error(self):
        if self._error is not None:
            raise self._error

    def _wait_written(self):
        """Wait until the writing thread holds none of the buffers."""
        with self._done:
            while any(self._writing):
                self._done.wait()

    def _write_blocks(self, view, offset):
        """Write ``view`` (aligned, or the end of the file) at ``offset``:
        directly if the file system allows, else through the page cache."""
        try:
            _write_at(self._fd, view, offset)
        except OSError as exc:
            if exc.errno != errno.EINVAL or not self._direct:
                raise
            # Refused (its memory, offset and length are aligned: the file
            # system takes no direct write), written again at its place
            # through the page cache.
            self._direct = _set_direct(self._fd, False)
            _write_at(self._fd, view, offset)

    def flush(self):
        """Write all that was taken: the whole blocks directly, then the
        rest through the page cache."""
        if self.closed:
            return
        self._wait_written()
        self._raise_error()
        if self._current is None or not self._filled:
            return
        view = memoryview(self._buffers[self._current])[:self._filled]
        try:
            whole = self._filled - self._filled % BLOCK
            if whole:
                self._write_blocks(view[:whole], self._sent)
            if whole < self._filled:
                if self._direct:
                    self._direct = _set_direct(self._fd, False)
                _write_at(self._fd, view[whole:], self._sent + whole)
        finally:
            view.release()
        self._sent += self._filled
        self._filled = 0

    def close(self):
        """Flush, and give the buffers back for the next file."""
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self.closed = True
            self._wait_written()  # after a failed write, the others' too
            if self._direct:
                self._direct = _set_direct(self._fd, False)
            buffers, self._buffers, self._arrays = self._buffers, None, None
            with _buffers_lock:
                _free_buffers.extend(buffers)


def _write_buffer(file, number, offset):
    """On the writing thread: write ``file``'s buffer ``number`` at
    ``offset``, and tell the file it is written, or what failed."""
    error = None
    view = memoryview(file._buffers[number])
    try:
        file._write_blocks(view, offset)
    except BaseException as exc:  # noqa: BLE001 - raised on the file's next call
        error = exc
    finally:
        view.release()
        file._written(number, error)


def _take_buffer():
    """A page-aligned buffer of :data:`BUFFER_SIZE` bytes: an earlier file's
    if there is one (memory freed and allocated again would cost page faults
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
