"""Open a cpersist file through a byte source (:mod:`.sources`): its header,
where the dump ends, and its index, for each layout (a dump of records, a
compact dump, a tiny dump). Reading the sections' bytes is :mod:`.sections`
(whole sections) and :mod:`.pieces` (parts of them)."""

import bisect

from .compact import COMPACT, STREAM_AT, compact_dump, parse_compact_index
from .frames import (FRAME_TRAILER, GROWING, GROWING_MINOR, OBJECT_FILE_START,
                     OBJECT_FRAMES_AT, OBJECT_MINOR, DumpsFollow, GrowingFileFound,
                     last_commit)
from .framing import DATA, END, parse_record_quietly, walk_records
from .index import parse_header, parse_index, parse_trailer
from ..exceptions import CorruptFileError, UnsupportedVersionError
from .layout import (EDITED, END_MAGIC, HEADER, MAGIC, RECORD_SIZE, TRAILER, VERBATIM, checksum,
                     corrupt)
from .pieces import PieceReads
from .section_file import SectionFile
from .sections import SectionReads
from .sources import ByteSource, MemorySource, ShortReadError, source_for
from .tiny import TINY_MAGIC, tiny_size, tiny_stream

#: Bytes read at once from the end of a file to find its trailer and index:
#: one read, rather than the trailer and then the index, keeps opening a
#: file from a cold cache as fast whatever the file's size.
TAIL_READ = 16 << 10
#: Bytes read at once from the start of a dump whose end its trailer gives:
#: its header and its first record's header (see
#: :meth:`ContainerReader.check_records`), and not a byte more: a remote
#: load streams the object from there, in file order, and the first
#: record's payload may start right after its header.
HEAD_READ = HEADER.size + RECORD_SIZE
#: Seconds a reader that found a dump's index half changed waits for the
#: lock of the process changing it, before it reports what it found.
LOCK_WAIT = 10


class _NotRead(Exception):
    """A record header outside the bytes a remote dump's reader has read."""


class _DecodedSource(MemorySource):
    """The compact dump a tiny dump's stream makes, in memory, standing for
    the file: what identifies the file (its path, descriptor, reference) and
    closing it are the file's."""

    def __init__(self, data, file):
        super().__init__(data, file.name)
        self._file = file

    def close(self):
        self._file.close()

    def __getattr__(self, name):
        return getattr(self._file, name)


class ContainerReader(SectionReads, PieceReads):
    """Read the index of a cpersist file and the bytes of its sections.

    Parameters
    ----------
    source : ByteSource, seekable binary file object or bytes-like
        Where the cpersist data starts; the dump is read from there to its
        own end, and the source is told where that is
        (:meth:`ByteSource.mark_end`).
    name : str, optional
        How the file is named in error messages (default: the source's name).
    whole : bool, default False
        Whether the source must hold nothing but the dump (a path; also
        when the source's own ``whole`` says so): bytes after it are then
        an error naming them.
    records_later : bool, default False
        Leave :meth:`check_records` to the caller, who calls it with the
        bytes it read before it uses them.

    Attributes
    ----------
    size : int
        Bytes of the dump.
    edited : bool
        Whether raw sections may have been changed through a writable map
        (the index's edited mark; in format 2.0 files, the header's
        flag): their checksums are not held against them (see
        :meth:`unchecked`).
    growing : bool
        Whether the file is a growing object file (format 2.4), read as
        the dump its last complete commit describes.
    torn : int
        Bytes after the last complete commit of a growing object file (a
        commit cut short, or being written); 0 for a dump.
    commit_end : int
        Where the last complete commit of a growing object file ends (its
        committed size); the dump's size otherwise.

    Raises
    ------
    CorruptFileError
        If the file is not a cpersist file or its index is damaged.
    UnsupportedVersionError
        If a newer major format version wrote it.
    """

    def __init__(self, source, name=None, *, whole=False, records_later=False):
        if not isinstance(source, ByteSource):
            source = source_for(source, name or "<file>")
        #: Whether the source holds this dump and nothing after it.
        self.whole = whole or source.whole
        self.name = name or source.name
        #: Where the cpersist data starts in the underlying file.
        self.base, self._records_later = source.base, records_later
        try:
            self._open(source)
            return
        except (UnsupportedVersionError, GrowingFileFound):
            raise
        except CorruptFileError as exc:
            # A growing file's commits never change: nothing half made to wait for.
            if getattr(self, "growing", False):
                raise
            first = exc
            # What the failed read holds (a forged index of megabytes) is
            # not kept through the second one.
            import traceback

            traceback.clear_frames(exc.__traceback__)
        # Another process may be changing the dump in place (marking it
        # edited, resealing it) and the reads caught its change half
        # made. Its writer holds the file's lock for the whole change: read
        # again holding it shared, and report what that read says. Bounded,
        # so that a lock held by someone else entirely (the caller, through
        # another descriptor) costs a wait, not a hang.
        with source.locked(shared=True, timeout=LOCK_WAIT) as held:
            if not held:
                raise first
            source.refresh()
            self._open(source)

    def _open(self, source):
        """Read the header, find the dump's end, read its index."""
        self.source = source
        self._tail = self._unwalked = None
        self.growing = False
        self.torn = 0
        #: Bytes from the start of the dump to the end of the source.
        self.available = source.size
        self._read_header()
        if self.growing:
            self._find_commit()
        else:
            self.commit_end = self.size
            if self.whole and self.size < self.available:
                raise self._trailing_data(self.size)
        # A growing file is read whole: a file object is left at its end.
        source.mark_end(self.available if self.growing else self.size)
        self._read_index()

    def error(self, what):
        """A :class:`CorruptFileError` that names this file."""
        return corrupt(self.name, what)

    def _read_header(self):
        at_end = self.whole or self.source.remote
        head = self.source.read(0, min(self.available, HEAD_READ if at_end else HEADER.size))
        self.tiny = bytes(head[:len(TINY_MAGIC)]) == TINY_MAGIC
        if self.tiny:
            self._read_tiny(head[:HEADER.size])
            return
        self.major, self.minor, flags = parse_header(head[:HEADER.size], self.available,
                                                     self.name)
        if flags & GROWING and self.minor == OBJECT_MINOR:
            self.growing = True
            self.edited = self.compact = False
            return
        if flags & GROWING and self.minor >= GROWING_MINOR:
            raise GrowingFileFound(f"{self.name}: a record log (format 2.3), not one dump: "
                                   f"read it through its path with cpersist.open or "
                                   f"cpersist.load")
        self.edited = bool(flags & EDITED)
        self.compact = bool(flags & COMPACT)
        if at_end and self._ends_at_end():
            self._unwalked = head
            if not self._records_later:
                self.check_records()
        else:
            self.size = walk_records(self.source.read, self.available, self.name, self.base)

    def check_records(self, reads=()):
        """Walk the records of a dump whose trailer says where it ends (once),
        as a reader that must find its end walks them: a damaged record
        header is refused by every source alike. Nothing covers a record
        header (checksums cover the chunks and the index), and a reader of a
        stream, or of a file of several dumps, finds each dump's end by them.

        Headers are taken from the bytes read at the start and the end of
        the dump, and from ``reads`` (``(offset, bytes)`` the caller read,
        in order: blocks of small arrays hold theirs); others read in
        blocks (:func:`.framing.walk_records`), not from a map of the file
        (touching a page of a new map costs about twice a read). A remote
        source reads none more (a request per record costs more than the
        load): its walk stops at the first record outside those bytes.
        """
        head = self._unwalked
        if head is None:
            return
        tail_start, tail = self._tail
        starts = [start for start, _ in reads]

        def read(offset, length):
            if offset + RECORD_SIZE <= len(head):
                return head[offset:]
            if offset >= tail_start:
                return tail[offset - tail_start:]
            k = bisect.bisect_right(starts, offset) - 1
            if k >= 0 and offset + RECORD_SIZE <= starts[k] + len(reads[k][1]):
                return memoryview(reads[k][1])[offset - starts[k]:]
            if self.source.remote:
                raise _NotRead
            return self.source.read(offset, length)

        try:
            end = walk_records(read, self.size, self.name, self.base)
        except _NotRead:  # a remote source's
            end = self.size
        if end != self.size:  # an END record before the dump's: its magic is there
            raise self.error(f"damaged records: they end at offset {self.base + end}, the "
                             f"dump at offset {self.base + self.size}")
        self._unwalked = None

    def _find_commit(self):
        """Read a growing object file (format 2.4) as the dump its last
        complete commit describes: the commit's END record is that dump's,
        its offsets counted from the file's start."""
        if self.source.base:
            raise self.error("a growing object file inside another file: read it through "
                             "its path")
        start = bytes(self.source.read(0, min(self.available, OBJECT_FRAMES_AT)))
        if start != OBJECT_FILE_START:
            raise self.error("damaged growing file: its header or preamble is not the one "
                             "format 2.4 writes")
        end = last_commit(self._read_while_cut, self.available)
        self.available = max(end or 0, self.source.size)
        if end is None:
            raise self.error("a growing file with no complete commit (damaged, or cut short "
                             "while it was made)")
        self.commit_end = end
        self.torn = self.available - end
        self.size = end - FRAME_TRAILER.size  # the commit's dump trailer ends here

    def _read_while_cut(self, offset, length):
        """Read a growing file that a writer may cut meanwhile: one that
        opens it cuts off a torn tail, which this reader may have seen.
        What is cut is never committed: reading up to the new end finds the
        same last commit."""
        for _ in range(3):
            try:
                return self.source.read(offset, length)
            except ShortReadError:
                self.source.refresh()
                length = max(0, min(length, self.source.size - offset))
        return self.source.read(offset, length)

    def _read_tiny(self, head):
        """Read a tiny dump whole: its pickle stream, checked, is then read
        as the root of a compact dump made in memory (see :meth:`_read_index`)."""
        self.major, self.minor, self.edited, self.compact = 2, 0, False, True
        self.size = tiny_size(head, self.name)
        if self.size > self.available:
            raise self.error(f"truncated tiny dump: {self.available} bytes of {self.size}")
        self._tiny_stream = tiny_stream(self.source.read(0, self.size), self.name)

    def _ends_at_end(self):
        """Whether a dump's END record ends the source (one read of its tail,
        which the index is read from next): then nothing follows the dump
        and its records need no walk. Otherwise the walk says what is wrong,
        or, in a source that may hold several dumps, where this one ends.

        A remote source is checked this way even when it may hold several
        dumps (an fsspec file object), since a walk costs a request per
        record there: the trailer's offsets count from the start of its own
        dump, so a trailer at the end matches only when this dump, the
        first, ends there.

        A compact dump's one DATA record, which the index does not describe,
        is checked too: its header must say that the stream fills the dump up
        to the END record, as the quick paths of :func:`cpersist.loads` and a
        walk find it (else the walk says what is wrong, as it does for a
        file object read from its position)."""
        self.size = self.available
        tail_start = max(0, self.size - TAIL_READ)
        tail = self._tail = (tail_start, self.source.read(tail_start, self.size - tail_start))
        offset, length, _, end_magic = TRAILER.unpack(tail[1][-TRAILER.size:])
        start = offset - RECORD_SIZE  # the END record's header
        if (end_magic != END_MAGIC or offset + length != self.size - TRAILER.size
                or start < HEADER.size):
            return False
        if self._record_at(start, tail) != (END, length + TRAILER.size):
            return False
        return not self.compact or start < STREAM_AT or (
            self._record_at(HEADER.size, tail) == (DATA, start - STREAM_AT))

    def _record_at(self, at, tail):
        """``(kind, length)`` of the record header at ``at``, read from
        ``tail`` (``(start, bytes)``) where it holds it; None if cut short."""
        tail_start, data = tail
        if at >= tail_start:
            head = data[at - tail_start:at - tail_start + RECORD_SIZE]
        else:
            head = self.source.read(at, RECORD_SIZE)
        return parse_record_quietly(head) if len(head) == RECORD_SIZE else None

    def _trailing_data(self, end):
        """The error for bytes after a complete dump that ends at ``end``."""
        extra = self.available - end
        follows = bytes(self.source.read(end, min(extra, len(MAGIC))))
        if MAGIC.startswith(follows) or TINY_MAGIC.startswith(follows[:len(TINY_MAGIC)]):
            # Read by path as a sequence of records; the message is for
            # the sources that cannot be (a URL).
            return DumpsFollow(
                f"{self.name}: another dump follows a complete dump at offset "
                f"{self.base + end} ({extra} bytes more): load several dumps one after another from an open file")
        return self.error(f"trailing data after a complete dump ({extra} bytes after "
                          f"its {end})")

    def _read_index(self):
        if self.tiny:
            # The sections are read from the compact dump of the stream: the
            # file's own bytes hold it compressed.
            stream, self._tiny_stream = self._tiny_stream, None
            data = compact_dump(stream)
            self.source = _DecodedSource(data, self.source)
            self.root, self.info, self.sections = parse_compact_index(
                b"", checksum(stream), len(data) - TRAILER.size, self.name)
            return
        if self._tail is not None and self.size == self.available:
            tail_start, tail = self._tail
        else:
            tail_start = max(0, self.size - TAIL_READ)
            tail = self.source.read(tail_start, self.size - tail_start)
        offset, length, digest = parse_trailer(tail[-TRAILER.size:], self.size, self.name,
                                               self.base)
        if offset >= tail_start:
            data = tail[offset - tail_start:-TRAILER.size]
        else:
            data = self.source.read(offset, length)
        if self.compact:
            self.root, self.info, self.sections = parse_compact_index(data, digest, offset,
                                                                      self.name, self.base)
            return
        self.root, self.info, self.sections, edited = parse_index(data, digest, offset,
                                                                  self.name, self.base)
        if (self.major, self.minor) >= (2, 1):
            # The index's mark, covered by its checksum; the header's flag
            # is there for readers of format 2.0 only.
            self.edited = edited is True

    def _read_chunk_into(self, section, offset, view):
        tail = self._tail
        if tail is not None and section.index == self.root:
            # The pickle stream is written right before the index: mostly
            # it is in the bytes read from the file's end to find the
            # index, and copied from them rather than read a second time.
            start = offset - tail[0]
            if start >= 0 and start + len(view) <= len(tail[1]):
                view[:] = memoryview(tail[1])[start:start + len(view)]
                return
        super()._read_chunk_into(section, offset, view)

    def open_section(self, section, *, verify=True, n_threads=1, exact=False):
        """See :meth:`.sections.SectionReads.open_section`. A pickle stream
        stored as it is in the bytes read from the file's end (that of a
        raw dump of a few arrays) is opened as a copy of those bytes,
        checked: no buffer to take from the pool and give back."""
        tail = self._tail
        if tail is not None and section.index == self.root and not exact:
            chunks = section.chunks
            if len(chunks) == 1 and chunks[0].flag == VERBATIM:
                chunk = chunks[0]
                start = chunk.offset - tail[0]
                if start >= 0 and start + chunk.length <= len(tail[1]):
                    data = bytes(tail[1][start:start + chunk.length])  # a view from memory
                    if verify:
                        self._check(section, data, chunk.checksum)
                    return SectionFile(data)
        return super().open_section(section, verify=verify, n_threads=n_threads, exact=exact)

    def unchecked(self, section):
        """Whether ``section``'s checksums no longer hold: a raw array
        section of a file mapped for writing (see :attr:`edited`)."""
        return self.edited and section.is_raw and section.index != self.root

    # -- reading sections -------------------------------------------------

    def matches(self, section):
        """Whether every chunk of ``section`` has its stored checksum (read
        one chunk at a time)."""
        return all(checksum(self._read_stored(section, chunk)) == chunk.checksum
                   for chunk in section.chunks)

