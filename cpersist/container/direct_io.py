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
writer waits for the disk only when every buffer is waiting for it. Memory
its owner keeps unchanged until the file is closed (a background dump's
snapshot) is written straight from where it is, without that copy, where
its address matches its place in the file modulo :data:`BLOCK` (a large
raw section's data starts at a multiple of it in the file, and the
snapshot's copies in memory). The file's bytes are those a buffered write
gives. Where the file system
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
#: Bytes of kept memory from which a write is written straight from it
#: (smaller ones are copied: the writes of a run of whole blocks, and of
#: the buffer before it, would cost more than the copy).
KEPT_FROM = 1 << 20

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

    ``kept``, if given, tells whether memory handed to :meth:`write` stays
    unchanged until the file is closed: called with a memoryview, it
    returns ``(array, offset)``, the 1-d uint8 numpy array the view lies in
    at ``offset``, or None. Runs of such memory are written from it,
    :data:`BUFFER_SIZE` bytes at a time, where its address is the file
    position's modulo :data:`BLOCK`; but for the part blocks at their ends,
    which go through the buffers.

    ``fd`` is not closed by :meth:`close`: its owner closes it. Its flags
    get ``O_DIRECT`` for the writes and lose it before :meth:`flush` writes
    the end; after :meth:`flush` the file holds all that was written, as
    after a buffered file's. Where the file system refuses direct writes
    (``EINVAL``), the buffers go through the page cache, as a plain file's.
    An error of a buffer's write is raised by the next :meth:`write`,
    :meth:`wait_for_room` or :meth:`flush`.
    """

    def __init__(self, fd, kept=None):
        self._fd = fd
        self._kept = kept
        # Kept memory being taken, not sent yet: [array, start, end], its
        # start at file offset _sent (no buffer is being filled meanwhile).
        self._run = None
        self._lent = {}  # number -> view of kept memory the writing thread writes
        self._next_lent = 0  # the number of the next view lent
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
        place = self._kept(view) if self._kept is not None and total >= BLOCK else None
        if place is not None and self._extend_run(place, total):
            return total
        if self._run is not None:
            self._lend_run(final=True)
        if place is None or not self._start_run(view, place):
            self._copy_in(view)
            self._pos += total
        return total

    def _copy_in(self, view):
        """Copy ``view`` into the buffers, handing each full one to the
        writing thread (no run of kept memory is open)."""
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

    def _extend_run(self, place, total):
        """Whether kept memory at ``place`` follows the open run in memory:
        then it is taken into it."""
        run = self._run
        if run is None or run[0] is not place[0] or run[2] != place[1]:
            return False
        run[2] += total
        self._pos += total
        self._lend_run(final=False)
        return True

    def _start_run(self, view, place):
        """Open a run of kept memory at ``view`` (at ``place``) if its address
        matches the file position modulo BLOCK: its bytes up to the next
        block boundary go through the buffer, sent with what it holds."""
        array, offset = place
        head = -self._pos % BLOCK
        total = view.nbytes
        if total < KEPT_FROM or (array.ctypes.data + offset + head) % BLOCK:
            return False
        if head:
            self._copy_in(view[:head])
        if self._current is not None and self._filled:
            self._send()  # it ends at a block boundary
        self._pos += total
        self._run = [array, offset + head, offset + total]
        self._lend_run(final=False)
        return True

    def _lend_run(self, final):
        """Hand the open run's whole buffers (with ``final``, all its whole
        blocks, its last bytes copied into a buffer, and the run closed) to
        the writing thread."""
        array, start, end = self._run
        while end - start >= BUFFER_SIZE or final and end - start >= BLOCK:
            n = min(BUFFER_SIZE, end - start) // BLOCK * BLOCK
            number = self._next_lent
            self._next_lent += 1
            with self._done:
                self._lent[number] = memoryview(array)[start:start + n]
            run_later(_write_lent, self, number, self._sent)
            self._sent += n
            start += n
        self._run[1] = start
        if final:
            self._run = None
            if start < end:
                self._copy_in(memoryview(array)[start:end])

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
        """Hand the buffer being filled (full, or ending at a block boundary)
        to the writing thread (that of
        :func:`~cpersist._runtime.threads.run_later`, which runs its work in
        turn: the file's writes stay in order)."""
        number, offset, length = self._current, self._sent, self._filled
        with self._done:
            self._writing[number] = True
        self._current, self._filled = None, 0
        self._sent += length
        run_later(_write_buffer, self, number, offset, length)

    def _written(self, number, error):
        """On the writing thread: buffer ``number`` is written or failed."""
        with self._done:
            self._writing[number] = False
            if error is not None and self._error is None:
                self._error = error
            self._done.notify_all()

    def _lent_written(self, number, error):
        """On the writing thread: lent view ``number`` is written or failed."""
        with self._done:
            del self._lent[number]
            if error is not None and self._error is None:
                self._error = error
            self._done.notify_all()

    def _raise_error(self):
        if self._error is not None:
            raise self._error

    def _wait_written(self):
        """Wait until the writing thread holds none of the buffers, nor any
        kept memory."""
        with self._done:
            while any(self._writing) or self._lent:
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
        if self._run is not None:
            self._lend_run(final=True)
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
            self._run = self._kept = None  # the owner's memory is its own again
            self._wait_written()  # after a failed write, the others' too
            if self._direct:
                self._direct = _set_direct(self._fd, False)
            buffers, self._buffers, self._arrays = self._buffers, None, None
            with _buffers_lock:
                _free_buffers.extend(buffers)


def _write_buffer(file, number, offset, length):
    """On the writing thread: write ``length`` bytes of ``file``'s buffer
    ``number`` at ``offset``, and tell the file they are written, or what
    failed."""
    _write_view(file, memoryview(file._buffers[number])[:length], offset, file._written, number)


def _write_lent(file, number, offset):
    """On the writing thread: write ``file``'s lent view ``number`` (kept
    memory) at ``offset``, let go of it, and tell the file."""
    _write_view(file, file._lent[number], offset, file._lent_written, number)


def _write_view(file, view, offset, tell, number):
    """Write ``view`` at ``offset``, release it, then ``tell(number, error)``
    (``error`` None, or what the write raised: raised on the file's next
    call)."""
    error = None
    try:
        file._write_blocks(view, offset)
    except BaseException as exc:  # noqa: BLE001 - raised on the file's next call
        error = exc
    finally:
        view.release()
        tell(number, error)


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
