"""Reading whole sections: every chunk read, checked against its checksum and
decoded (on the thread pool for large sections), into memory the caller
gives or that is claimed for the section's stated size; and checking a
section without keeping its bytes. A mixin of :class:`.reader.ContainerReader`.
"""

import itertools

from .._runtime.pages import can_fault_in, fault_in_fresh
from .._runtime.parallel import COPY_ALONE_BELOW, ordered_map, run_claimed
from ..exceptions import CorruptFileError
from .buffers import READ_BUFFERS, private_map
from .layout import ENCODED, VERBATIM, checksum, checksum_state
from .readahead import ask_for_heads, read_ahead
from .section_file import KEEP_BYTES, SECTION_BUFFERS, SectionFile
from .sources import ShortReadError

#: Sections claiming more decoded bytes than this have the sizes stated in
#: their chunks' headers checked against the index before anything is
#: allocated for them (smaller claims are harmless to allocate), and are
#: decoded into memory whose pages are backed only once written
#: (:func:`claimed_buffer`). An array a load allocates uninitialised is
#: checked chunk by chunk instead, by the codec before it decodes each.
CHECKED_CLAIM = 64 << 20

#: A chunk stored as it is, read whole, is read and checksummed this many
#: bytes at a time: a part still fits in the CPU's last-level cache when
#: it is checksummed right after its read, and each call (the read, the
#: checksum, both releasing the GIL) lasts long enough, a millisecond or
#: so, for threads reading side by side to share the GIL. With short calls
#: a thread that has just released it takes it back before the one waiting
#: for it has woken up, which then sleeps again: a 100 MB load by two
#: threads in parts of 256 KiB slept waiting up to about 50 times (each a
#: wake-up of an idle core, or up to a switch interval, 5 ms), in parts of
#: 4 MiB two or three times.
READ_PART = 4 << 20


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


class SectionReads:
    """Whole-section reads of :class:`~.reader.ContainerReader`."""

    def _read_chunk_into(self, section, offset, view):
        try:
            self.source.read_into(offset, view)
        except ShortReadError:
            raise self.error(f"truncated in section {section.index}") from None

    def _check(self, section, data, digest):
        if checksum(data) != digest and not self.unchecked(section):
            raise self.error(f"checksum mismatch in section {section.index}: damaged data")

    def check_read(self, section, data):
        """Check ``data``, the bytes of the contiguous raw ``section`` read by
        the caller (neighbouring sections read at once), against its
        checksums, as :meth:`read_into` checks what it reads."""
        digest = section.one_chunk_checksum()
        if digest is not None:  # most: one chunk, checked without its table parsed
            self._check(section, data, digest)
            return
        for chunk in section.chunks:
            at = chunk.offset - section.offset
            self._check(section, data[at:at + chunk.length], chunk.checksum)

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
        chunk is read into a buffer from ``READ_BUFFERS``, given back once decoded.
        """
        if self.source.remote:
            yield from self._fetch_chunks(section, out_view)
            return
        largest = max((c.length for c in section.chunks if c.flag != VERBATIM), default=0)
        ahead = read_ahead(self.source, section.chunks) if largest else None
        start = 0
        for i, chunk in enumerate(section.chunks):
            target = out_view[start:start + chunk.raw_length]
            if chunk.flag == VERBATIM:
                buffer = None
                data = target
            else:
                buffer = READ_BUFFERS.take(largest)
                data = memoryview(buffer)[:chunk.length]
            self._read_chunk_into(section, chunk.offset, data)
            if ahead is not None:
                ahead.read(i)
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

    def read_into(self, section, out, *, verify=True, n_threads=1, backed=False):
        """Fill ``out`` (writable bytes of ``section.raw_size``) with the section.

        Where the source takes concurrent reads, each of ``n_threads``
        threads claims the next chunk in file order and reads, checks and
        decodes it itself (:meth:`_decode_claimed`): the copies out of the
        page cache, the checksums and the decoding all run on every thread.
        A section of verbatim chunks only is read and checked by this thread
        alone (:meth:`_read_verbatim`) when it is one chunk, smaller than
        :data:`~cpersist._runtime.parallel.COPY_ALONE_BELOW` bytes, read into
        memory whose pages are ``backed`` already (a buffer reused, a new
        bytearray: with none to fault in, a second thread costs more to wake
        and hand the GIL to than it saves), or from a source that does not
        take concurrent reads (a file object without a descriptor of its own).
        Otherwise (a remote store, or encoded chunks from such a file
        object) this thread reads the chunks in file order and the pool
        checksums them and decodes the encoded ones into place.
        """
        out = memoryview(out).cast("B")
        if len(out) != section.raw_size:
            raise self.error(f"section {section.index} holds {section.raw_size} bytes, "
                             f"{len(out)} expected")
        if section.is_raw and not verify and section.contiguous:
            if not backed:
                fault_in_fresh(out)
            self._read_chunk_into(section, section.offset, out)
            return
        chunks = section.chunks
        if len(chunks) == 1:
            if chunks[0].flag == VERBATIM and not self.source.remote:
                # Every small raw array, and the pickle stream of a raw dump;
                # new memory is backed in one call rather than a fault a page
                # (no more than the read backs: a chunk stored as it is lies
                # within the file, as the index was checked to say).
                if not backed:
                    fault_in_fresh(out)
                self._read_verbatim_chunk(section, chunks[0], out, verify)
                return
            verbatim = chunks[0].flag == VERBATIM
        else:
            verbatim = all(c.flag == VERBATIM for c in chunks)
        if verbatim and (backed or section.raw_size < COPY_ALONE_BELOW or len(chunks) < 2):
            n_threads = 1
        if n_threads > 1 and self.source.concurrent and len(section.chunks) > 1:
            self._decode_claimed(section, out, verify, n_threads)
            return
        if verbatim and not self.source.remote:
            self._read_verbatim(section, out, verify)
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

    def _read_verbatim(self, section, out, verify):
        """Read a section of chunks stored as they are into ``out``, on this thread."""
        start = 0
        for chunk in section.chunks:
            self._read_verbatim_chunk(section, chunk, out[start:start + chunk.raw_length],
                                      verify)
            start += chunk.raw_length

    def _read_verbatim_chunk(self, section, chunk, target, verify):
        """Read a chunk stored as it is straight into ``target``,
        :data:`READ_PART` bytes at a time, each part checksummed as soon as
        it is read, while it is still in the CPU's cache. (Another thread
        checksumming what this one reads would read it from memory a second
        time.)"""
        if len(target) <= READ_PART:  # one part: checked in one call
            self._read_chunk_into(section, chunk.offset, target)
            if not verify or checksum(target) == chunk.checksum:
                return
        else:
            state = checksum_state() if verify else None
            for at in range(0, len(target), READ_PART):
                part = target[at:at + READ_PART]
                self._read_chunk_into(section, chunk.offset + at, part)
                if state is not None:
                    state.update(part)
            if state is None or state.intdigest() == chunk.checksum:
                return
        if not self.unchecked(section):
            raise self.error(f"checksum mismatch in section {section.index}: damaged data")

    def _decode_claimed(self, section, out, verify, n_threads):
        """Read, check and decode ``section`` into ``out`` on ``n_threads``
        threads, this one and ``n_threads - 1`` pool workers.

        Each thread claims the next chunk in file order and reads it: one
        stored as it is straight into place (:meth:`_read_verbatim_chunk`),
        an encoded one into a buffer of its own, checksummed while it is in
        its cache and decoded into place. No thread waits for another until
        the end, where handing every chunk read by one thread to the others
        made the readers wait on each other. Of a raw section, this thread faults in
        its worker's new pages (:func:`.fault_in_fresh`; both faulting slowed rounds
        of loads up to 8x), not those backed already, which a loop of loads reuses.
        """
        chunks = section.chunks
        starts = list(itertools.accumulate((c.raw_length for c in chunks), initial=0))
        largest = max((c.length for c in chunks if c.flag != VERBATIM), default=0)
        ahead = read_ahead(self.source, chunks) if largest else None

        def task(claims):
            buffer = READ_BUFFERS.take(largest) if largest else None
            try:
                for i in claims:
                    chunk = chunks[i]
                    target = out[starts[i]:starts[i] + chunk.raw_length]
                    if chunk.flag == VERBATIM:
                        self._read_verbatim_chunk(section, chunk, target, verify)
                        continue
                    data = memoryview(buffer)[:chunk.length]
                    self._read_chunk_into(section, chunk.offset, data)
                    if ahead is not None:
                        ahead.read(i)
                    if verify:
                        self._check(section, data, chunk.checksum)
                    self._decode(section, data, target)
            finally:
                # Safe even after a failure: no one else uses this buffer.
                if buffer is not None:
                    READ_BUFFERS.give(buffer)

        fault = lambda i: fault_in_fresh(out[starts[i]:starts[i + 1]], smallest=0)
        run_claimed(task, len(chunks), n_threads,
                    prepare=fault if not largest and can_fault_in() else None)

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
        ask_for_heads(self.source, encoded, codec.header_size)
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
        if section.raw_size:  # a bytearray's pages are backed: zero-filled when made
            self.read_into(section, out, verify=verify, n_threads=n_threads,
                           backed=type(out) is bytearray)
        return out

    def open_section(self, section, *, verify=True, n_threads=1, exact=False):
        """Return the section's bytes as a :class:`~.section_file.SectionFile`
        (a file object whose reads are views of them); close it once done.

        Up to :data:`~.section_file.KEEP_BYTES`, they are read into a
        buffer kept for the next section opened, given back when the file
        is closed; above, into new memory (:meth:`read_bytes`). ``exact``:
        a kept buffer is a bytearray of the section's length, which
        :meth:`~.section_file.SectionFile.whole` gives as it is (a
        restricted load walks the stream as bytes: a copy of a model's
        stream of many small arrays, in fresh memory, would cost about a
        fifth of walking it).
        """
        size = section.raw_size
        if size > KEEP_BYTES:
            return SectionFile(self.read_bytes(section, verify=verify, n_threads=n_threads))
        buffer, backed = SECTION_BUFFERS.take_backed(size, exact)
        if size:
            try:
                self.read_into(section, memoryview(buffer)[:size], verify=verify,
                               n_threads=n_threads, backed=backed)
            except BaseException:
                SECTION_BUFFERS.give(buffer)
                raise
        return SectionFile(buffer, size, kept=True)

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


def _ignore(item, result):
    pass
