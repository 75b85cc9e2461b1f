"""Read a cpersist file's index and the bytes of its sections, through a
byte source (:mod:`.sources`)."""

import itertools

from .._threads import ordered_map, run_claimed
from ..exceptions import CorruptFileError
from .buffers import READ_BUFFERS
from .layout import (ENCODED, HEADER, TRAILER, VERBATIM, checksum, corrupt, parse_header,
                     parse_index, parse_trailer)
from .sources import ByteSource, ShortReadError, source_for

#: Sections claiming more decoded bytes than this have the sizes stated in
#: their chunks' headers checked against the index before anything is
#: allocated for them (smaller claims are harmless to allocate).
CHECKED_CLAIM = 64 << 20
#: Bytes read at once from the end of a file to find its trailer and index:
#: one read, rather than the trailer and then the index, keeps opening a
#: file from a cold cache as fast whatever the file's size.
TAIL_READ = 16 << 10


class ContainerReader:
    """Read the index of a cpersist file and the bytes of its sections.

    Parameters
    ----------
    source : ByteSource, seekable binary file object or bytes-like
        Where the cpersist data is; a file object is read from its current
        position to its end (see :func:`.sources.source_for`).
    name : str, optional
        How the file is named in error messages (default: the source's name).

    Raises
    ------
    CorruptFileError
        If the file is not a cpersist file or its index is damaged.
    UnsupportedVersionError
        If a newer major format version wrote it.
    """

    def __init__(self, source, name=None):
        if not isinstance(source, ByteSource):
            source = source_for(source, name or "<file>")
        self.source = source
        self.name = name or source.name
        #: Where the cpersist data starts in the underlying file.
        self.base = source.base
        self.size = source.size
        self._read_header()
        self._read_index()

    def error(self, what):
        """A :class:`CorruptFileError` that names this file."""
        return corrupt(self.name, what)

    def _read_header(self):
        head = self.source.read(0, min(self.size, HEADER.size))
        self.major, self.minor = parse_header(head, self.size, self.name)

    def _read_index(self):
        tail_start = max(0, self.size - TAIL_READ)
        tail = self.source.read(tail_start, self.size - tail_start)
        offset, length, digest = parse_trailer(tail[-TRAILER.size:], self.size, self.name)
        if offset >= tail_start:
            data = tail[offset - tail_start:-TRAILER.size]
        else:
            data = self.source.read(offset, length)
        self.root, self.info, self.sections = parse_index(data, digest, offset, self.name)

    # -- reading sections -------------------------------------------------

    def _read_chunk_into(self, section, offset, view):
        try:
            self.source.read_into(offset, view)
        except ShortReadError:
            raise self.error(f"truncated in section {section.index}") from None

    def _check(self, section, data, digest):
        if checksum(data) != digest:
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
        work.
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
        """Return the section's bytes as a new bytearray."""
        self.check_claimed_sizes(section)
        if section.raw_size > CHECKED_CLAIM and section.codec is not None:
            # Grow the buffer chunk by chunk: a forged size is found at the
            # first chunk that does not decode to it, before that memory is
            # touched (bytearray(n) would zero-fill all of it first).
            out = bytearray()
            for piece in self.iter_section_chunks(section, verify=verify):
                out += piece
            return out
        out = bytearray(section.raw_size)
        self.read_into(section, out, verify=verify, n_threads=n_threads)
        return out

    def iter_section_chunks(self, section, *, verify=True):
        """Yield the section's decoded bytes one chunk at a time.

        Each chunk is a new ``bytearray`` (the caller may keep it), read and
        decoded on demand, so memory stays at the chunks the caller holds
        whatever the section's size. Used by :func:`cpersist.convert`.
        """
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
            out = bytearray(chunk.raw_length)
            self._decode(section, data, memoryview(out))
            yield out

    def _read_stored(self, section, chunk):
        try:
            return self.source.read(chunk.offset, chunk.length)
        except ShortReadError:
            raise self.error(f"truncated in section {section.index}") from None

    def verify_section(self, section):
        """Check every chunk's checksum (and that encoded chunks decode)."""
        if section.is_raw:
            for chunk, data in self._stored_chunks(section):
                self._check(section, data, chunk.checksum)
            return
        # Decoded chunks are dropped as they come: memory stays at one chunk
        # whatever the section's size.
        for _ in self.iter_section_chunks(section, verify=True):
            pass


def _ignore(item, result):
    pass
