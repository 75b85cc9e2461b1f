"""Read a cpersist file's index and the bytes of its sections, through a
byte source (:mod:`.sources`)."""

import itertools

from .._runtime.threads import COPY_ALONE_BELOW, ordered_map, run_claimed
from ..exceptions import CorruptFileError
from .buffers import READ_BUFFERS, private_map
from .compact import COMPACT, compact_dump, parse_compact_index
from .framing import END, parse_record_quietly, walk_records
from .layout import (EDITED, ENCODED, END_MAGIC, HEADER, MAGIC, RECORD_SIZE, TRAILER, VERBATIM,
                     checksum, checksum_state, corrupt, parse_header, parse_index,
                     parse_trailer)
from .sources import ByteSource, MemorySource, ShortReadError, source_for
from .tiny import TINY_MAGIC, tiny_size, tiny_stream

#: Sections claiming more decoded bytes than this have the sizes stated in
#: their chunks' headers checked against the index before anything is
#: allocated for them (smaller claims are harmless to allocate), and are
#: decoded into memory whose pages are backed only once written
#: (:func:`claimed_buffer`).
CHECKED_CLAIM = 64 << 20
#: Bytes read at once from the end of a file to find its trailer and index:
#: one read, rather than the trailer and then the index, keeps opening a
#: file from a cold cache as fast whatever the file's size.
TAIL_READ = 16 << 10
#: When only part of a chunk stored as is is wanted, the rest of it is read
#: this many bytes at a time into the same piece of scratch memory, which
#: stays in the CPU's cache to be checksummed there: the bytes not wanted
#: never go out to main memory.
PASS_THROUGH = 256 << 10


def claimed_buffer(nbytes, reader, section):
    """Writable bytes of ``nbytes`` that ``section`` of ``reader`` claims to
    decode to, for decoding into.

    Above :data:`CHECKED_CLAIM` bytes, an anonymous map whose pages are
    backed only when a decoder writes them: a claim that its chunks do not
    live up to costs the memory of what they decode to, not of what the
    index says (a bytearray is zero-filled whole before the first chunk is
    read). A claim that cannot be allocated at all is a
    :class:`CorruptFileError` naming it, not a bare ``MemoryError``.
    """
    if nbytes <= CHECKED_CLAIM:
        return bytearray(nbytes)
    try:
        return private_map(nbytes)
    except (MemoryError, OSError, OverflowError) as exc:
        raise reader.error(f"section {section.index} claims {nbytes} decoded bytes, which "
                           f"cannot be allocated ({type(exc).__name__}: {exc})") from None


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


class ContainerReader:
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

    Attributes
    ----------
    size : int
        Bytes of the dump.
    edited : bool
        Whether raw sections may have been changed through a writable map
        (the index's edited mark; in format 2.0 and 1.x files, the header's
        flag): their checksums are not held against them (see
        :meth:`unchecked`).

    Raises
    ------
    CorruptFileError
        If the file is not a cpersist file or its index is damaged.
    UnsupportedVersionError
        If a newer major format version wrote it.
    """

    def __init__(self, source, name=None, *, whole=False):
        if not isinstance(source, ByteSource):
            source = source_for(source, name or "<file>")
        self._whole = whole or source.whole
        self._tail = None
        self.source = source
        self.name = name or source.name
        #: Where the cpersist data starts in the underlying file.
        self.base = source.base
        #: Bytes from the start of the dump to the end of the source.
        self.available = source.size
        self._read_header()
        if self._whole and self.size < self.available:
            raise self._trailing_data(self.size)
        source.mark_end(self.size)
        self._read_index()

    def error(self, what):
        """A :class:`CorruptFileError` that names this file."""
        return corrupt(self.name, what)

    def _read_header(self):
        head = self.source.read(0, min(self.available, HEADER.size))
        self.tiny = bytes(head[:len(TINY_MAGIC)]) == TINY_MAGIC
        if self.tiny:
            self._read_tiny(head)
            return
        self.major, self.minor, flags = parse_header(head, self.available, self.name)
        self.edited = bool(flags & EDITED)
        self.compact = self.major >= 2 and bool(flags & COMPACT)
        if self.major == 1:
            self.size = self.available  # format 1 runs to the end of the stream
        elif not ((self._whole or self.source.remote) and self._ends_at_end()):
            self.size = walk_records(self.source.read, self.available, self.name)

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
        first, ends there."""
        self.size = self.available
        tail_start = max(0, self.size - TAIL_READ)
        tail = self._tail = (tail_start, self.source.read(tail_start, self.size - tail_start))
        offset, length, _, end_magic = TRAILER.unpack(tail[1][-TRAILER.size:])
        start = offset - RECORD_SIZE  # the END record's header
        if (end_magic != END_MAGIC or offset + length != self.size - TRAILER.size
                or start < HEADER.size):
            return False
        head = tail[1][start - tail_start:offset - tail_start] if start >= tail_start else (
            self.source.read(start, RECORD_SIZE))
        return len(head) == RECORD_SIZE and parse_record_quietly(head) == (
            END, length + TRAILER.size)

    def _trailing_data(self, end):
        """The error for bytes after a complete dump that ends at ``end``."""
        extra = self.available - end
        follows = bytes(self.source.read(end, min(extra, len(MAGIC))))
        if follows == MAGIC or follows[:len(TINY_MAGIC)] == TINY_MAGIC:
            return self.error(
                f"another dump follows a complete dump at offset {end} ({extra} bytes "
                f"more): load several dumps one after another from an open file")
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
        try:
            offset, length, digest = parse_trailer(tail[-TRAILER.size:], self.size, self.name)
        except CorruptFileError:
            if self.major == 1:
                self._diagnose_tail(tail, tail_start)
            raise
        if offset >= tail_start:
            data = tail[offset - tail_start:-TRAILER.size]
        else:
            data = self.source.read(offset, length)
        if self.compact:
            self.root, self.info, self.sections = parse_compact_index(data, digest, offset,
                                                                      self.name)
            return
        self.root, self.info, self.sections, edited = parse_index(
            data, digest, offset, self.name, self.major)
        if (self.major, self.minor) >= (2, 1):
            # The index's mark, covered by its checksum; the header's flag
            # is there for readers of format 2.0 only.
            self.edited = edited is True
        self.index_at, self.index_length = offset, length

    def _diagnose_tail(self, tail, tail_start):
        """Say what follows a complete format-1 dump, if that is what ends
        the stream: bytes after its trailer, or another dump."""
        tail = bytes(tail)
        at = tail.rfind(END_MAGIC)
        if at >= 0 and tail_start + at + len(END_MAGIC) < self.size:
            end = tail_start + at + len(END_MAGIC)
            offset, length, _, _ = TRAILER.unpack(tail[at + len(END_MAGIC) - TRAILER.size:
                                                       at + len(END_MAGIC)])
            if offset + length == end - TRAILER.size:
                raise self._trailing_data(end)
        offset, length, _, end_magic = TRAILER.unpack(tail[-TRAILER.size:])
        last = self.size - (offset + length + TRAILER.size)  # where a last dump would start
        if end_magic == END_MAGIC and HEADER.size <= last < self.size and bytes(
                self.source.read(last, len(MAGIC))) == MAGIC:
            raise self._trailing_data(last)

    def unchecked(self, section):
        """Whether ``section``'s checksums no longer hold: a raw array
        section of a file mapped for writing (see :attr:`edited`)."""
        return self.edited and section.is_raw and section.index != self.root

    # -- reading sections -------------------------------------------------

    def _read_chunk_into(self, section, offset, view):
        try:
            self.source.read_into(offset, view)
        except ShortReadError:
            raise self.error(f"truncated in section {section.index}") from None

    def _check(self, section, data, digest):
        if checksum(data) != digest and not self.unchecked(section):
            raise self.error(f"checksum mismatch in section {section.index}: damaged data")

    def _decode(self, section, data, target):
        try:
            section.codec.decode_into(data, target)
        except CorruptFileError as exc:
            raise self.error(f"section {section.index}: {exc}") from None

    def _read_chunks(self, section, out_view):
        """Yield (chunk, its stored bytes, output slice, read buffer) in file order.

        A verbatim chunk is read straight into its output slice, which is
        then also its "stored bytes": a copy through a temporary buffer would
        add a pass over data that compression could not shrink. An encoded
        chunk is read into a buffer from ``READ_BUFFERS``, given back once it
        is decoded.
        """
        if self.source.remote:
            yield from self._fetch_chunks(section, out_view)
            return
        largest = max((c.length for c in section.chunks if c.flag != VERBATIM), default=0)
        start = 0
        for chunk in section.chunks:
            target = out_view[start:start + chunk.raw_length]
            if chunk.flag == VERBATIM:
                buffer = None
                data = target
            else:
                buffer = READ_BUFFERS.take(largest)
                data = memoryview(buffer)[:chunk.length]
            self._read_chunk_into(section, chunk.offset, data)
            yield chunk, data, target, buffer
            start += chunk.raw_length

    def _stored_chunks(self, section):
        """Yield (chunk, its stored bytes) in file order; from a remote
        source, many chunks are fetched per request (:meth:`.ByteSource.iter_ranges`)."""
        if not self.source.remote:
            for chunk in section.chunks:
                yield chunk, self._read_stored(section, chunk)
            return
        try:
            yield from zip(section.chunks, self.source.iter_ranges(
                [(c.offset, c.length) for c in section.chunks]))
        except ShortReadError:
            raise self.error(f"truncated in section {section.index}") from None

    def _fetch_chunks(self, section, out_view):
        """:meth:`_read_chunks` from a remote source: verbatim chunks are
        copied into their output slice, encoded ones decoded from the
        fetched bytes (no read buffer to give back)."""
        start = 0
        for chunk, data in self._stored_chunks(section):
            target = out_view[start:start + chunk.raw_length]
            if chunk.flag == VERBATIM:
                target[:] = data
                data = target
            yield chunk, data, target, None
            start += chunk.raw_length

    def read_into(self, section, out, *, verify=True, n_threads=1):
        """Fill ``out`` (writable bytes of ``section.raw_size``) with the section.

        Where decoding is most of the work (encoded chunks decode to more
        than half the section's bytes) and the source takes concurrent
        reads, each thread claims the next chunk in file order and reads,
        checks and decodes it itself (:meth:`_decode_claimed`). Otherwise
        this thread reads the chunks in file order, verbatim ones straight
        into their slice of ``out``, and the pool checksums them and decodes
        the encoded ones into place. Reading in one thread in order keeps
        the kernel's readahead streaming on a cold file where reading is the
        work. A section of verbatim chunks only, of fewer than
        :data:`~cpersist._runtime.threads.COPY_ALONE_BELOW` bytes, is read and
        checked by this thread alone.
        """
        out = memoryview(out).cast("B")
        if len(out) != section.raw_size:
            raise self.error(
                f"section {section.index} holds {section.raw_size} bytes, "
                f"{len(out)} expected"
            )
        if section.is_raw and not verify:
            self._read_chunk_into(section, section.offset, out)
            return
        if section.raw_size < COPY_ALONE_BELOW and all(c.flag == VERBATIM for c in section.chunks):
            n_threads = 1
        if n_threads > 1 and self.source.concurrent and len(section.chunks) > 1 and (
                2 * sum(c.raw_length for c in section.chunks if c.flag == VERBATIM)
                < section.raw_size):
            self._decode_claimed(section, out, verify, n_threads)
            return

        def work(item):
            chunk, data, target, buffer = item
            if verify:
                self._check(section, data, chunk.checksum)
            if chunk.flag != VERBATIM:  # a verbatim chunk was read into place
                self._decode(section, data, target)
                if buffer is not None:
                    READ_BUFFERS.give(buffer)

        ordered_map(work, self._read_chunks(section, out), n_threads, _ignore)

    def _decode_claimed(self, section, out, verify, n_threads):
        """Read, check and decode ``section`` into ``out`` on ``n_threads``
        threads, this one and ``n_threads - 1`` pool workers.

        Each thread claims the next chunk in file order, reads it into a
        buffer of its own, checksums it while it is in its cache and decodes
        it into place; no thread waits for another until the end, where
        handing every chunk read by one thread to the others made the
        readers wait on each other.
        """
        chunks = section.chunks
        starts = list(itertools.accumulate((c.raw_length for c in chunks), initial=0))
        largest = max((c.length for c in chunks if c.flag != VERBATIM), default=0)

        def task(claims):
            buffer = READ_BUFFERS.take(largest)
            try:
                for i in claims:
                    chunk = chunks[i]
                    target = out[starts[i]:starts[i] + chunk.raw_length]
                    data = (target if chunk.flag == VERBATIM
                            else memoryview(buffer)[:chunk.length])
                    self._read_chunk_into(section, chunk.offset, data)
                    if verify:
                        self._check(section, data, chunk.checksum)
                    if chunk.flag != VERBATIM:
                        self._decode(section, data, target)
            finally:
                # Safe even after a failure: no one else uses this buffer.
                READ_BUFFERS.give(buffer)

        run_claimed(task, len(chunks), n_threads)

    def _read_verbatim_part(self, section, i, skip, out, whole):
        """Part of a chunk stored as is, checked: the part is read straight
        into ``out``. With checksums of the chunk's pieces, only the pieces
        it touches are read, their bytes outside the part into ``whole``;
        else the rest of the chunk passes through ``whole`` for the chunk's
        checksum."""
        chunk = section.chunks[i]
        pieces = section.pieces(i)
        start = chunk.offset
        if pieces is None:
            runs = [(start, start + chunk.length, chunk.checksum, "")]
        else:
            size = section.piece_size
            runs = [(start + k * size, min(start + (k + 1) * size, start + chunk.length),
                     pieces[k], f", piece {k}")
                    for k in range(skip // size, (skip + len(out) - 1) // size + 1)]
        for lo, hi, digest, piece in runs:
            try:
                matches = self._checked_run(lo, hi, digest, out, start + skip, memoryview(whole))
            except ShortReadError:
                raise self.error(f"truncated in section {section.index}, chunk {i}") from None
            if not matches:
                raise self.error(f"checksum mismatch in section {section.index}, chunk {i}"
                                 f"{piece}: damaged data")

    def piece_range(self, section, i, skip, n):
        """``(lo, hi)``: the bytes of verbatim chunk ``i`` (from its start)
        that the pieces holding its bytes ``skip:skip + n`` span, or None if
        the chunk has no piece checksums."""
        if section.pieces(i) is None or n <= 0:
            return None
        size = section.piece_size
        return (skip // size * size,
                min(section.chunks[i].length, -(-(skip + n) // size) * size))

    def _read_pieces_at_once(self, section, i, span, skip, out, whole, stored):
        """Part of a verbatim chunk from the pieces that hold it, read in one
        request into ``whole`` (or given as ``stored``), checked piece by
        piece."""
        chunk = section.chunks[i]
        lo, hi = span
        data = stored
        if data is None:
            data = memoryview(whole)[:hi - lo]
            try:
                self.source.read_into(chunk.offset + lo, data)
            except ShortReadError:
                raise self.error(f"truncated in section {section.index}, chunk {i}") from None
        view = memoryview(data)
        size = section.piece_size
        bad = _bad_piece(section.pieces(i), size, view, lo, range(lo // size, -(-hi // size)))
        if bad is not None:
            raise self.error(f"checksum mismatch in section {section.index}, chunk {i}, "
                             f"piece {bad}: damaged data")
        out[:] = view[skip - lo:skip - lo + len(out)]

    def _checked_run(self, lo, hi, digest, out, at, scratch):
        """Read the bytes ``lo:hi``, those from ``at`` on into ``out`` (as far
        as it goes), the others through ``scratch``'s first
        :data:`PASS_THROUGH` bytes; whether their checksum is ``digest``."""
        state = checksum_state()
        into_from = min(max(lo, at), hi)
        into_to = min(max(lo, at + len(out)), hi)
        for a, b, into_out in ((lo, into_from, False), (into_from, into_to, True),
                               (into_to, hi, False)):
            position = a
            while position < b:
                view = (out[position - at:b - at] if into_out
                        else scratch[:min(b, position + PASS_THROUGH) - position])
                self.source.read_into(position, view)
                state.update(view)
                position += len(view)
        return state.intdigest() == digest

    def read_chunk_into(self, section, i, out, buffer, *, verify=True, stored=None, skip=0,
                        whole=None):
        """Read chunk ``i`` of ``section``, check it and decode it into ``out``.

        ``out`` is writable bytes of the chunk's ``raw_length``; ``buffer``
        holds at least its stored length (an encoded chunk is read there). A
        verbatim chunk is read straight into ``out``. ``stored``, if given,
        is the chunk's stored bytes already fetched (with its neighbours),
        checked and decoded instead of reading them. Errors name the chunk,
        for readers of a few chunks of a section.

        With ``whole`` (writable bytes of the chunk's ``raw_length``, free
        to overwrite), ``out`` receives only the decoded bytes ``skip:skip +
        len(out)``, and the codec decodes no more of the chunk than it must.

        Raises
        ------
        CorruptFileError
        """
        chunk = section.chunks[i]
        part = whole is not None
        verify = verify and not self.unchecked(section)
        if part and chunk.flag == VERBATIM and verify:
            if stored is None and not self.source.remote:  # remote: one request, not three
                self._read_verbatim_part(section, i, skip, out, whole)
                return
            span = self.piece_range(section, i, skip, len(out))
            if span is not None and (stored is None or len(stored) == span[1] - span[0]):
                self._read_pieces_at_once(section, i, span, skip, out, whole, stored)
                return
        if stored is not None:
            data = stored
        else:
            data = (out if chunk.flag == VERBATIM and not part
                    else memoryview(whole if chunk.flag == VERBATIM else buffer)[:chunk.length])
            try:
                self.source.read_into(chunk.offset, data)
            except ShortReadError:
                raise self.error(f"truncated in section {section.index}, chunk {i}") from None
        if verify and checksum(data) != chunk.checksum:
            raise self.error(
                f"checksum mismatch in section {section.index}, chunk {i}: damaged data")
        if chunk.flag == VERBATIM:
            if part:
                out[:] = data[skip:skip + len(out)]
            elif stored is not None:
                out[:] = data
            return
        try:
            if part:
                section.codec.decode_part_into(data, skip, out, whole)
            else:
                section.codec.decode_into(data, out)
        except CorruptFileError as exc:
            raise self.error(f"section {section.index}, chunk {i}: {exc}") from None

    def check_claimed_sizes(self, section):
        """Check a section's claimed decoded size before allocating for it.

        The chunk table is checked first (against the file's size, the
        section's totals and, for codecs with a bounded expansion, each
        chunk's stored length). For sections claiming more than
        :data:`CHECKED_CLAIM` bytes, the sizes each encoded chunk states in
        its own header (Zstandard frame content size, Blosc header) are also
        compared with the index, so a forged index is reported before a
        large buffer is allocated.

        Raises
        ------
        CorruptFileError
        """
        chunks = section.chunks
        codec = section.codec
        if section.raw_size <= CHECKED_CLAIM or codec is None or not codec.header_size:
            return
        if self.source.remote:
            # A request per chunk header (chunks lie farther apart than
            # ranges are merged): more than the whole load. Arrays are
            # allocated uninitialised, so a forged size costs no memory
            # before the first chunk that does not decode to it.
            return
        encoded = [c for c in chunks if c.flag == ENCODED]
        heads = self.source.read_ranges(
            [(c.offset, min(c.length, codec.header_size)) for c in encoded])
        for chunk, head in zip(encoded, heads):
            try:
                codec.check_header(head, chunk.length, chunk.raw_length)
            except CorruptFileError as exc:
                raise self.error(f"section {section.index}: {exc}") from None

    def read_bytes(self, section, *, verify=True, n_threads=1):
        """Return the section's bytes as new writable bytes: a bytearray,
        or above :data:`CHECKED_CLAIM` bytes an anonymous map
        (:func:`claimed_buffer`), which is also a file object to read.

        The chunks' own headers are checked against the index first; then
        memory grows with what the chunks decode to, one copy of it, and a
        chunk that does not decode to its claimed size ends the read.
        """
        self.check_claimed_sizes(section)
        out = claimed_buffer(section.raw_size, self, section)
        if section.raw_size:
            self.read_into(section, out, verify=verify, n_threads=n_threads)
        return out

    def iter_section_chunks(self, section, *, verify=True):
        """Yield the section's decoded bytes one chunk at a time.

        Each chunk is new writable bytes (the caller may keep it), read and
        decoded on demand, so memory stays at the chunks the caller holds
        whatever the section's size; an encoded chunk's is a
        :func:`claimed_buffer`, backed as it is decoded. Used by
        :func:`cpersist.convert` and :func:`cpersist.verify`.
        """
        self.check_claimed_sizes(section)
        for chunk, data in self._stored_chunks(section):
            if chunk.flag == VERBATIM:
                if type(data) is not bytearray:  # a view of the source's bytes
                    data = bytearray(data)
                if verify:
                    self._check(section, data, chunk.checksum)
                yield data
                continue
            if verify:
                self._check(section, data, chunk.checksum)
            out = claimed_buffer(chunk.raw_length, self, section)
            self._decode(section, data, memoryview(out))
            yield out

    def _read_stored(self, section, chunk):
        try:
            return self.source.read(chunk.offset, chunk.length)
        except ShortReadError:
            raise self.error(f"truncated in section {section.index}") from None

    def matches(self, section):
        """Whether every chunk of ``section`` has its stored checksum (read
        one chunk at a time)."""
        return all(checksum(self._read_stored(section, chunk)) == chunk.checksum
                   for chunk in section.chunks)

    def verify_section(self, section):
        """Check every chunk's checksum and its pieces' (and that encoded
        chunks decode)."""
        if section.is_raw:
            for i, (chunk, data) in enumerate(self._stored_chunks(section)):
                self._check(section, data, chunk.checksum)
                self._check_pieces(section, i, data)
            return
        # Decoded chunks are dropped as they come: memory stays at one chunk
        # whatever the section's size. A verbatim chunk decodes to its bytes.
        for i, data in enumerate(self.iter_section_chunks(section, verify=True)):
            self._check_pieces(section, i, data)

    def _check_pieces(self, section, i, data):
        """Check the checksums of chunk ``i``'s pieces against its bytes."""
        pieces = section.pieces(i)
        if pieces is None or self.unchecked(section):
            return
        bad = _bad_piece(pieces, section.piece_size, memoryview(data), 0, range(len(pieces)))
        if bad is not None:
            raise self.error(f"checksum mismatch in section {section.index}, chunk {i}, "
                             f"piece {bad}: the index does not match the data")


def _bad_piece(pieces, size, view, origin, numbers):
    """The first of the pieces ``numbers`` whose bytes in ``view`` (which
    starts at byte ``origin`` of the chunk) do not have the checksum
    ``pieces`` gives, or None."""
    for k in numbers:
        if checksum(view[k * size - origin:(k + 1) * size - origin]) != pieces[k]:
            return k
    return None


def _ignore(item, result):
    pass
