"""Appending records to a record log (``docs/format.rst``, growing files):
:func:`append` for one record, :class:`LogWriter` behind
``cpersist.open(path, "a")`` for many, and :func:`repair`.

A writer holds the file's exclusive advisory lock from before it looks at
the file's end to after its last write, so that two writers are never
interleaved; it cuts off a torn tail (what an append killed midway left)
before writing, and writes every frame so that a frame is complete only
once all its bytes are there.
"""

import io
import pickle
import os

from .._args import check_compress, check_log_path, check_protocol
from .._runtime.locks import lock_for_writing
from ..container.targets import FileTarget
from ..container.frames import (ENTRY_KINDS, ENTRY_UP_TO, FILE_START, FRAME_TRAILER,
                                FRAMES_AT, check_file_start, dump_frame_head,
                                dump_frame_header, dump_frame_trailer, entry_frame,
                                frame_checks_out, parse_frame_head, walk_frames)
from ..container import DEFAULT_CHUNK_SIZE
from ..container.layout import RECORD_SIZE, TRAILER
from ..exceptions import CorruptFileError, UnwritableTargetError
from ..pickling.array_pickler import ArrayPickler
from ..pickling.dump import forget_objects, write_dump
from ..pickling.unpicklable import PICKLING_ERRORS, unpicklable_error

_OPEN = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
#: Bytes read at once from the end of a log to check its last frame.
TAIL_READ = 4096
#: A record's pickler is kept for the next record only after a stream this
#: short: one that pickled a large record holds large buffers and memo.
KEEP_PICKLER_BELOW = 1 << 16


def append(obj, path, compress=0, *, protocol=None, fsync=False, timeout=None):
    """Append ``obj`` to the record log at ``path`` as one more record.

    The file is created if it does not exist. Records are read back by
    :func:`cpersist.open` (in order, by number, or all at once by
    :func:`cpersist.load`). For many appends, keep the log open:
    ``with cpersist.open(path, "a") as log: log.append(record)`` costs a
    fraction of a call of this function per record.

    Parameters
    ----------
    obj : object
        Anything :func:`cpersist.dump` takes. A record without numpy arrays
        is stored as its pickle stream in a light frame; one holding arrays
        as a whole dump, its arrays sections that can be memory-mapped.
    path : str or os.PathLike
        A local file. A URL is refused: object stores cannot append in place
        (see :doc:`/growing`).
    compress : as in :func:`cpersist.dump`, default 0
        How the arrays of a record that holds some are stored. Records
        without arrays are stored as their pickle stream either way.
    protocol : int, optional
        Pickle protocol, 2 to 5; default :data:`pickle.HIGHEST_PROTOCOL`.
    fsync : bool, default False
        Flush the record to disk before returning, so that it survives a
        power loss, not only the writer's crash (see :doc:`/growing` for
        what it costs).
    timeout : float, optional
        Seconds to wait for another writer's lock; default: as long as it
        takes.

    Raises
    ------
    FileLockedError
        If another writer held the lock longer than ``timeout``.
    UnwritableTargetError
        For a URL, a file object, or a file that is not a record log.
    CorruptFileError
        If what follows the log's last complete record is not a torn tail
        (``cpersist repair`` cuts it off).
    UnpicklableError
        As in :func:`cpersist.dump`; nothing is left of the record.

    Examples
    --------
    >>> cpersist.append({"step": 1, "loss": 0.5}, "runs.cpl")
    >>> cpersist.append({"step": 2, "loss": 0.25}, "runs.cpl")
    >>> cpersist.load("runs.cpl")
    [{'step': 1, 'loss': 0.5}, {'step': 2, 'loss': 0.25}]
    """
    check_log_path(path)
    codec = check_compress(compress)
    protocol = check_protocol(protocol)
    writer = LogWriter(path, codec, protocol=protocol, fsync=fsync, timeout=timeout)
    try:
        writer.append(obj)
    finally:
        writer.close()


def repair(path, *, timeout=None):
    """Cut off the torn tail of a record log: what an append killed midway
    left after the last complete record. Holds the writers' lock.

    Unlike a writer, which refuses to append after bytes that are not a
    torn tail (a frame of a kind it does not know, or other data), this
    cuts off everything after the last complete record.

    Of a file of several dumps written one after another, this cuts off a
    dump cut short at the end; damage elsewhere is refused, not cut. Writers
    of dumps take no lock: repair such a file while none is writing to it.
    Of a growing file (``dump(..., growing=True)``), this cuts off what a
    change killed midway left after the last commit.

    Returns
    -------
    dict
        ``"records"``: how many the log holds (None for a growing file);
        ``"cut_bytes"``: how many bytes were cut off (0 for a file that
        needed no repair).
    """
    from .dumps import cut_torn_dump

    check_log_path(path)
    done = cut_torn_dump(path, os.fsdecode(path)) if os.path.exists(path) else None
    if done is not None:
        return done
    from ..growfile.handle import is_growing_object

    if is_growing_object(path):
        from ..growfile.writer import GrowingWriter

        # Opening it for changing cuts the torn tail a killed change left.
        grower = GrowingWriter(path, timeout=timeout)
        grower.close()
        return {"records": None, "cut_bytes": grower.cut_bytes}
    writer = LogWriter(path, timeout=timeout, _repair=True)
    try:
        return {"records": writer.records, "cut_bytes": writer.cut_bytes}
    finally:
        writer.close()


class LogWriter:
    """A record log open for appending, its lock held until :meth:`close`.

    Parameters are those of :func:`append`, checked by its caller
    (``codec``: ``compress`` parsed, None for raw). :attr:`end` is where the next
    record goes; :attr:`records` how many the log held when opened (None
    when that was not counted: a log whose end checked out at once).
    """

    def __init__(self, path, codec=None, *, protocol=pickle.HIGHEST_PROTOCOL, fsync=False,
                 timeout=None, _repair=False):
        self.name = os.fsdecode(path)
        self._codec = codec
        self._protocol = protocol
        self._fsync = bool(fsync)
        self.records = None
        self.cut_bytes = 0
        self._pickler = None
        # repair never makes a file: a missing one is an error
        fd = os.open(path, _OPEN & ~os.O_CREAT if _repair else _OPEN, 0o666)
        try:
            lock_for_writing(fd, timeout, self.name, "the record log", "appending")
            self.end = self._committed_end(fd, _repair)
            os.lseek(fd, self.end, os.SEEK_SET)
        except BaseException:
            os.close(fd)  # releases the lock
            raise
        self._fd = fd

    def _read(self, offset, length):
        return os.pread(self._fd_for_read, length, offset)

    def _committed_end(self, fd, repair):
        """Where the log's committed frames end; a torn tail is cut off, a
        new file gets its header."""
        self._fd_for_read = fd
        size = os.fstat(fd).st_size
        if size < FRAMES_AT and FILE_START.startswith(os.pread(fd, size, 0)):
            # A new file, or one whose creation was cut short.
            _write_all(fd, FILE_START, 0)
            os.ftruncate(fd, FRAMES_AT)
            self._durable(fd)
            self.records = 0
            return FRAMES_AT
        try:
            check_file_start(os.pread(fd, FRAMES_AT, 0), self.name)
        except CorruptFileError as exc:
            if type(exc) is CorruptFileError:
                raise UnwritableTargetError(f"{exc}: cpersist.append writes record logs "
                                            f"only; append to a new file (a dump's arrays "
                                            f"grow in a file dumped with growing=True)") from None
            raise
        if not repair and _ends_with_frame(self._read, size):
            return size
        walk = walk_frames(self._read, size)
        self.records = len(walk.starts)
        if walk.foreign_at is not None and not repair:
            raise CorruptFileError(
                f"{self.name}: {size - walk.foreign_at} bytes at offset {walk.foreign_at}, "
                f"after the last complete record, are not record frames; `cpersist repair` "
                f"cuts them off")
        if walk.end < size:
            os.ftruncate(fd, walk.end)
            self._durable(fd)
            self.cut_bytes = size - walk.end
        return walk.end

    def _durable(self, fd):
        if self._fsync:
            os.fsync(fd)

    def append(self, obj):
        """Append ``obj`` as one more record; returns where its frame starts."""
        start = self.end
        try:
            stream = self._pickled(obj)
        except PICKLING_ERRORS as exc:
            error = unpicklable_error(obj, self._protocol, exc)
            if error is None:
                raise
            raise error from exc
        try:
            if stream is None:
                self.end = self._append_dump(obj, start)
            else:
                frame = entry_frame(stream, start)
                if os.write(self._fd, frame) != len(frame):
                    raise OSError(f"{self.name}: short write (disk full?)")
                self.end = start + len(frame)
            self._durable(self._fd)
        except BaseException:
            # Nothing of a record that failed stays: the file is as before.
            os.ftruncate(self._fd, start)
            os.lseek(self._fd, start, os.SEEK_SET)
            self.end = start
            raise
        if self.records is not None:
            self.records += 1
        return start

    def _pickled(self, obj):
        """The pickle stream of ``obj``, or None when it holds an array (or
        tensor storage) to store as a section, or is longer than
        :data:`ENTRY_UP_TO`. The pickler and its buffer
        are kept from one record to the next: making them costs about as
        much as pickling a small record."""
        kept = self._pickler
        if kept is None:
            buffer = io.BytesIO()
            # No buffer blocks: a record pickled here holds no array.
            kept = self._pickler = (buffer, ArrayPickler(buffer, self._protocol, _refuse))
        buffer, pickler = kept
        try:
            pickler.dump(obj)
            stream = buffer.getvalue()
        except _HasArrays:
            stream = None
        except BaseException:
            self._pickler = None  # a pickler stopped midway may hold state of its own
            raise
        finally:
            buffer.seek(0)
            buffer.truncate()
        if stream is None or len(stream) > KEEP_PICKLER_BELOW:
            self._pickler = None
        else:
            forget_objects(pickler, len(stream))
            pickler.forget()
        return None if stream is not None and len(stream) > ENTRY_UP_TO else stream

    def _append_dump(self, obj, start):
        """Write ``obj`` as an ENTRY_DUMP frame at ``start``; its end. The
        frame's header says PENDING until its trailer is written, so that a
        reader, or the writer after a crash, never takes it as complete."""
        head, payload = dump_frame_head(start)
        _write_all(self._fd, head, start)
        with open(self._fd, "r+b", closefd=False) as file:
            file.seek(payload)
            try:
                with FileTarget(file) as out:
                    write_dump(obj, out, self._codec, self._protocol, DEFAULT_CHUNK_SIZE, None)
            except PICKLING_ERRORS as exc:
                error = unpicklable_error(obj, self._protocol, exc)
                if error is None:
                    raise
                raise error from exc
            file.flush()
            dump_end = file.tell()
        size = dump_end - payload
        covered = os.pread(self._fd, min(size, TRAILER.size), dump_end - min(size, TRAILER.size))
        _write_all(self._fd, dump_frame_trailer(start, size, covered), dump_end)
        self._durable(self._fd)  # the frame's bytes before the header that commits it
        _write_all(self._fd, dump_frame_header(size), start)
        end = dump_end + FRAME_TRAILER.size
        os.lseek(self._fd, end, os.SEEK_SET)
        return end

    def close(self):
        """Release the lock and the file; appending is then refused."""
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            os.close(fd)

    def __del__(self):
        # A log left open releases its lock when collected, as a file closes.
        self.close()

    @property
    def closed(self):
        return self._fd is None


class _HasArrays(Exception):
    """Pickling a record met an array to store as a section."""


def _refuse(arr, favour_speed=False):
    raise _HasArrays


def _write_all(fd, data, offset):
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _ends_with_frame(read, size):
    """Whether the file's last bytes end a complete frame: then the log has
    no torn tail, found without walking it (one read, usually)."""
    if size < FRAMES_AT + RECORD_SIZE + FRAME_TRAILER.size:
        return size == FRAMES_AT
    tail_at = max(FRAMES_AT, size - TAIL_READ)
    tail = read(tail_at, size - tail_at)

    def cached(offset, length):
        if offset >= tail_at and offset + length <= size:
            return tail[offset - tail_at:offset - tail_at + length]
        return read(offset, length)

    start = FRAME_TRAILER.unpack_from(tail, len(tail) - FRAME_TRAILER.size)[0]
    if not FRAMES_AT <= start <= size - RECORD_SIZE - FRAME_TRAILER.size:
        return False
    kind, _, end = parse_frame_head(bytes(cached(start, RECORD_SIZE)), start)
    return kind in ENTRY_KINDS and end == size and frame_checks_out(cached, start, size)
