"""Reading a record log: :class:`RecordLog`, what ``cpersist.open`` gives
for one, its records read in order, by number, or all at once.

A reader takes no lock: it reads the frames complete when it looked (their
bytes never change once complete), and ignores what follows them, a torn
tail or a record being appended. :meth:`RecordLog.refresh` looks again.
"""

import io
import os
import pickle

from ..container.compact import compact_dump
from ..container.frames import (ENTRY, FRAMES_AT, check_file_start, entry_stream,
                                parse_frame_head, walk_frames)
from ..container.layout import RECORD_SIZE
from ..exceptions import CorruptFileError
from .dumps import starts_with_dump, walk_dumps

#: Bytes read at once while reading records in order: many small records
#: come in one read.
READ_BLOCK = 1 << 20


class RecordLog:
    """A record log: its records in the order they were appended.

    Made by :func:`cpersist.open`: ``cpersist.open(path)`` reads,
    ``cpersist.open(path, "a")`` also appends (holding the writers' lock
    until closed). Use it as a context manager, or call :meth:`close`.
    ``cpersist.open(path)`` also gives one for a file of several dumps
    written one after another (to the file opened ``"ab"``), each dump a
    record, read the same way (:attr:`dumps` is then true).

    ``len(log)`` is the number of complete records; ``log[i]`` loads record
    ``i`` (negative numbers count from the end; a slice gives a list)
    reading no other record; iterating loads them in order, reading the
    file in large blocks. Each record is loaded as :func:`cpersist.load`
    would load it alone, with the ``trusted``, ``verify`` and ``limits`` given
    to :func:`cpersist.open`: a restricted load applies to every record.

    Attributes
    ----------
    name : str
        The file's path.
    dumps : bool
        Whether the file is plain dumps one after another rather than a
        record log (only a record log is appended to).
    """

    def __init__(self, path, load_dump, *, trusted=True, verify=True, limits=None,
                 writer=None):
        self.name = os.fsdecode(path)
        self._load_dump = load_dump
        self._trusted, self._verify, self._limits = trusted, verify, limits
        self._writer = writer
        self._walk = None
        try:
            self._file = open(path, "rb")
            head = os.pread(self._file.fileno(), FRAMES_AT, 0)
            self.dumps = writer is None and starts_with_dump(head)
            if not self.dumps:
                check_file_start(head, self.name)
        except BaseException:
            self.close()
            raise

    def __repr__(self):
        state = "closed" if self.closed else "open for appending" if self._writer else "open"
        return f"<cpersist.RecordLog {self.name!r} {state}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Close the file (and release the writers' lock, if appending)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()

    @property
    def closed(self):
        return self._file.closed

    # -- appending --------------------------------------------------------

    def append(self, obj):
        """Append ``obj`` as one more record (see :func:`cpersist.append`).

        Raises
        ------
        ValueError
            If the log was opened for reading only, or is closed.
        """
        if self._writer is None or self._writer.closed:
            raise ValueError(f"{self.name}: open for reading only; "
                             f"cpersist.open(path, 'a') appends")
        start = self._writer.append(obj)
        if self._walk is not None and self._walk.end == start:
            self._walk.starts.append(start)
            self._walk.end = self._walk.size = self._writer.end

    # -- reading ----------------------------------------------------------

    def _read(self, offset, length):
        return os.pread(self._file.fileno(), length, offset)

    def _frames(self):
        if self._walk is None:
            if self.closed:
                raise ValueError(f"{self.name}: the record log is closed")
            size = os.fstat(self._file.fileno()).st_size
            if self.dumps:
                self._walk = walk_dumps(self._read, size, self.name)
            else:
                self._walk = walk_frames(self._read, size)
        return self._walk

    def refresh(self):
        """Look again for records appended since the log was read: by other
        processes, or records whose append was in progress.

        Returns
        -------
        int
            The number of records now.
        """
        walk = self._frames()
        size = os.fstat(self._file.fileno()).st_size
        if size != walk.end:
            if self.dumps:
                self._walk = walk_dumps(self._read, size, self.name, begin=walk.end,
                                        starts=walk.starts)
            else:
                self._walk = walk_frames(self._read, size, begin=walk.end,
                                         starts=walk.starts)
        return len(self._walk.starts)

    @property
    def torn_bytes(self):
        """Bytes after the last complete record: a torn tail, or a record
        being appended, when the log was read."""
        return self._frames().torn

    @property
    def committed_bytes(self):
        """Bytes of the file up to the end of its last complete record."""
        return self._frames().end

    def __len__(self):
        return len(self._frames().starts)

    def _extent(self, i):
        walk = self._frames()
        starts = walk.starts
        n = len(starts)
        if type(i) is not int and not hasattr(i, "__index__"):
            raise TypeError(f"record numbers are ints, not {type(i).__name__}")
        i = i.__index__()
        if not -n <= i < n:
            raise IndexError(f"{self.name}: no record {i}: the log holds {n}")
        i %= n
        return starts[i], starts[i + 1] if i + 1 < n else walk.end

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return self.load(i)

    def load(self, i, mmap_mode=None):
        """Load record ``i``, reading no other.

        Parameters
        ----------
        i : int
            The record's number, from 0 (negative: from the end).
        mmap_mode : {None, 'r', 'c'}
            For a record holding raw arrays: as in :func:`cpersist.load`.
            A record's arrays are never mapped for writing: the log's
            committed bytes do not change.
        """
        if mmap_mode == "r+":
            raise ValueError("mmap_mode='r+' is not available for records: a record log's "
                             "committed bytes never change; load the record and append it "
                             "changed")
        start, end = self._extent(i)
        if self.dumps:
            return self._dump_from(start, mmap_mode)
        head = self._read(start, RECORD_SIZE)
        if head[RECORD_SIZE - 1] == ENTRY:
            return self._from_frame(self._read(start, end - start), start)
        return self._from_dump(start, end, mmap_mode)

    def __iter__(self):
        walk = self._frames()
        starts, n, last_end = walk.starts, len(walk.starts), walk.end
        if self.dumps:
            for start in starts:
                yield self._dump_from(start, None)
            return
        block, block_at = b"", 0
        for i in range(n):
            start = starts[i]
            end = starts[i + 1] if i + 1 < n else last_end
            if end > block_at + len(block):
                if end - start > READ_BLOCK:  # a long record: read alone, not copied
                    yield self.load(i)
                    continue
                block_at = start
                block = self._read(start, min(READ_BLOCK, last_end - start))
            frame = memoryview(block)[start - block_at:end - block_at]
            if frame[RECORD_SIZE - 1] == ENTRY:
                yield self._from_frame(frame, start)
            else:
                yield self._from_dump(start, end, None)

    def _from_frame(self, frame, start):
        stream = entry_stream(frame, start, self.name, self._verify)
        if self._trusted is True:
            try:
                return pickle.loads(stream)
            except (pickle.UnpicklingError, EOFError) as exc:
                raise CorruptFileError(f"{self.name}: damaged pickle stream of the record "
                                       f"at offset {start} ({exc})") from None
        # A restricted load runs cpersist's own machine over the stream, as
        # for the compact dump the record would be alone.
        return self._load_dump(io.BytesIO(compact_dump(bytes(stream))), trusted=self._trusted,
                               verify=False, limits=self._limits)

    def _from_dump(self, start, end, mmap_mode):
        _, payload, _ = parse_frame_head(self._read(start, RECORD_SIZE), start)
        return self._dump_from(payload, mmap_mode)

    def _dump_from(self, payload, mmap_mode):
        self._file.seek(payload)
        return self._load_dump(self._file, mmap_mode=mmap_mode, trusted=self._trusted,
                               verify=self._verify, limits=self._limits)

    def dump_at(self, i):
        """Where record ``i``'s dump starts in the file, or None for a record
        stored as its pickle stream alone (for the tools that read a
        record's dump as a file)."""
        start, _ = self._extent(i)
        if self.dumps:
            return start
        kind, payload, _ = parse_frame_head(self._read(start, RECORD_SIZE), start)
        return None if kind == ENTRY else payload
