"""Write a cpersist file sequentially: header, records holding the sections'
chunks, and the end record with the index and trailer (the layout is in
:mod:`.layout`, the records in :mod:`.framing`)."""

from collections import deque

from .files import named_os_error, reservable_fd, reserve_blocks
from .._runtime.parallel import COPY_ALONE_BELOW, IN_FLIGHT_PER_THREAD, ordered_map
from .._runtime.threads import get_pool
from .stream_in_file import InFileRecords
from .encode import encode_array_chunk
from .framing import ALIGNED, DATA, END, padding_before, record_header
from .layout import (BLOCKS_MINOR, BLOCKS_STUB, END_MAGIC, FORMAT_MAJOR, FORMAT_MINOR, HEADER,
                     MAGIC, PAGE_ALIGNED_FROM, TRAILER, VERBATIM, checksum, chunk_table_text,
                     index_text, piece_fields, verbatim_checksums)

#: Writes from this size on reserve their blocks first; below, the call costs more than it saves.
FALLOCATE_MIN = 1 << 18
#: Chunks smaller than the largest that may be in flight in its place.
TINY_CHUNKS_PER_CHUNK = 8


class ContainerWriter(InFileRecords):
    """Write a cpersist file sequentially to a binary file object.

    Parameters
    ----------
    file : binary file object
        Only ``write`` is used, so pipes and sockets work. Blocks are reserved
        ahead of large writes only in a plain local file not in append mode
        (:func:`cpersist.container.files.reservable_fd`).
    n_threads : int
        Threads used to encode and checksum chunks.
    name : str, optional
        Named in the :class:`OSError` a failed write raises.
    start : int, optional
        A commit of a growing object file (format 2.4): the offset of
        ``file``'s position, which the index's offsets count from; no header.
    minor : int, optional
        The minor format version the index states (default: a dump's).
    """

    def __init__(self, file, n_threads=1, name=None, *, start=None, minor=FORMAT_MINOR):
        self._file = file
        self._n_threads = n_threads
        self._name = name
        self._pos = start or 0
        self._minor = minor
        self._sections = []
        self._fd = reservable_fd(file)
        self._fd_base = file.tell() - self._pos if self._fd is not None else 0
        self._reserved = 0  # file position up to which blocks are reserved
        self._pending = deque()  # (section, raw length, future): on the pool, in file order
        self._pending_bytes = 0  # their raw lengths' sum
        self._largest_chunk = 0  # the largest raw length handed to the pool
        # Written once, in order: its records, not its header, say where it ends.
        if start is None:
            self._write(HEADER.pack(MAGIC, FORMAT_MAJOR, minor, 0))

    def _reserve(self, size):
        """Reserve the file's blocks for the next ``size`` bytes: large writes
        are much faster on ext4 so (numpy's ``tofile`` does the same)."""
        end = self._pos + size
        if self._fd is None or size < FALLOCATE_MIN or end <= self._reserved:
            return
        if reserve_blocks(self._fd, self._fd_base + self._pos, size):
            self._reserved = end
        else:
            self._fd = None  # not supported here (some network file systems)

    def _write(self, data):
        if type(data) is memoryview and data.format != "B":
            data = data.cast("B")
        total = len(data)
        if total >= FALLOCATE_MIN:
            self._reserve(total)
        try:
            n = self._file.write(data)
            if n is not None and n < total:  # a raw (unbuffered) stream's short write
                view = memoryview(data)
                while n < total:
                    n += self._file.write(view[n:]) or 0
        except OSError as exc:
            raise named_os_error(exc, self._name) from None
        self._pos += total

    def _record(self, kind, length):  # opens a record; returns where its payload starts
        self._write(record_header(kind, length, self._pos))
        return self._pos

    def add_section(self, chunks, *, codec=None, typesize=1, meta=None, size=None,
                    release=None):
        """Append a section made of ``chunks`` and return its number.

        Parameters
        ----------
        chunks : iterable of memoryview
            Contiguous byte chunks (format ``B``), none empty nor longer than
            ``MAX_CHUNK_SIZE``, whose concatenation is the section.
        codec : Codec or None
            None: one contiguous raw run.
        typesize : int
            Element size, for the codec (Blosc shuffles by it).
        meta : dict, optional
            JSON-serialisable, kept in the index.
        size : int, optional
            Total length of ``chunks``, if known (then reserved at once).
        release : callable, optional
            Called once per chunk, in order, when nothing reads its memory
            any more (checksummed, encoded, written), all before this
            returns: for chunks lent from memory about to change.
        """
        if codec is not None and self._n_threads > 1:
            return self._add_encoded_later(chunks, codec, typesize, meta, release)
        self._write_pending()
        if (codec is None and type(chunks) is tuple and len(chunks) == 1
                and len(chunks[0]) < PAGE_ALIGNED_FROM):
            # One small raw chunk (every small array, one piece): the generic
            # path's layers would cost more than pickling the array does.
            n = len(chunks[0])
            digest = checksum(chunks[0])
            offset = self._record(ALIGNED, n)
            self._write(chunks[0])
            if release is not None:
                release()
            return self._add_entry(offset, n, n, None, typesize,
                                   f"[[{n},{n},{digest},{VERBATIM}]]", meta)
        if codec is None:
            # A raw section is one record, whose header states its length.
            if size is None:
                chunks = list(chunks)
                size = sum(len(c) for c in chunks)
            if size >= PAGE_ALIGNED_FROM:  # its data at a multiple of PAGE
                self._write(padding_before(self._pos))
            offset = self._record(ALIGNED, size)
            if size:
                self._reserve(size)
            return self._add_raw_chunks(offset, size, chunks, typesize, meta, release)
        # Each encoded chunk is a record: its size is known only once it is
        # encoded, and the section is written as its chunks come.
        table = []
        pieces = []
        first = []

        def work(chunk):
            return encode_array_chunk(codec, chunk, typesize)

        def write(chunk, result):
            stored, digest, flag, chunk_pieces = result
            first.append(self._record(DATA, len(stored)))
            self._write(stored)
            if release is not None:
                release()
            table.append([len(stored), len(chunk), digest, flag])
            pieces.append(chunk_pieces)

        ordered_map(work, (c for c in chunks if len(c)), self._n_threads, write)
        offset = first[0] if first else self._pos
        return self._add_table(offset, table, codec, typesize, meta, records=True,
                               pieces=pieces)

    def _add_encoded_later(self, chunks, codec, typesize, meta, release):
        """:meth:`add_section` on the pool, returning before the chunks are
        encoded: they are written in order as they come, by this call and
        the next ones, so that the sections of a model's many one-chunk
        tensors are encoded side by side rather than one after another.
        The section's index entry is filled in once its last chunk is
        written. With ``release``, they are all written before it returns."""
        number = self._add_entry(None, 0, 0, codec, typesize, None, meta, records=True)
        section = _PendingSection(number, release)
        pool = get_pool(self._n_threads)
        # The window is counted in the dump's largest chunks, not in chunks:
        # a model's tiny biases and norms, between its weights, would
        # otherwise fill it and leave a worker idle. The count cap bounds the
        # futures kept for a file of many tiny arrays.
        window = self._n_threads * IN_FLIGHT_PER_THREAD
        for chunk in chunks:
            n = len(chunk)
            if n:
                if n > self._largest_chunk:
                    self._largest_chunk = n
                self._pending.append((section, n, pool.submit(
                    encode_array_chunk, codec, chunk, typesize)))
                self._pending_bytes += n
                section.count += 1
                while (self._pending_bytes > window * self._largest_chunk
                       or len(self._pending) > window * TINY_CHUNKS_PER_CHUNK):
                    self._write_oldest()
        section.submitted = True
        if section.count == 0 or release is not None:
            # An empty section starts after them; lent chunks are given back.
            self._write_pending()
        if section.written == section.count:
            self._close_section(section)
        return number

    def _write_oldest(self):
        section, raw_length, future = self._pending.popleft()
        self._pending_bytes -= raw_length
        stored, digest, flag, chunk_pieces = future.result()
        offset = self._record(DATA, len(stored))
        if section.first is None:
            section.first = offset
        self._write(stored)
        if section.release is not None:
            section.release()
        section.table.append([len(stored), raw_length, digest, flag])
        section.pieces.append(chunk_pieces)
        section.written += 1
        if section.submitted and section.written == section.count:
            self._close_section(section)

    def _write_pending(self):
        """Write every chunk still being encoded: the next bytes written
        come after them."""
        while self._pending:
            self._write_oldest()

    def _close_section(self, section):
        entry = self._sections[section.number]
        table = section.table
        entry["offset"] = self._pos if section.first is None else section.first
        entry["raw_size"] = sum(row[1] for row in table)
        entry["stored_size"] = sum(row[0] for row in table)
        entry["chunks"] = chunk_table_text(table)
        entry.update(piece_fields(section.pieces))

    def _add_raw_chunks(self, offset, size, chunks, typesize, meta, release):
        start = self._pos
        number = self._add_raw_run(offset, chunks, typesize, meta, size, release)
        if self._pos - start != size:
            raise ValueError(f"a raw section of {size} bytes was given {self._pos - start} bytes")
        return number

    def _add_raw_run(self, offset, chunks, typesize, meta, size, release):
        table = []
        pieces = []
        # Lent chunks are given back before a DirectFile waits for the disk.
        room = release and getattr(self._file, "wait_for_room", None)
        # Below COPY_ALONE_BELOW, handing checksums to a worker and waiting
        # for it costs more than computing them here.
        if self._n_threads <= 1 or size < COPY_ALONE_BELOW:
            for chunk in chunks:
                if len(chunk):
                    # Checksummed just before it is written, the chunk is
                    # still in the CPU cache when write() copies it.
                    digest, chunk_pieces = verbatim_checksums(chunk)
                    self._write(chunk)
                    if release is not None:
                        release()
                    table.append([len(chunk), len(chunk), digest, VERBATIM])
                    pieces.append(chunk_pieces)
                    if room:
                        room(len(chunk))
            return self._add_table(offset, table, None, typesize, meta, pieces=pieces)
        # A worker checksums each chunk while this thread writes it: it crosses
        # from memory once, and no write waits for a checksum.
        pool = get_pool(self._n_threads)
        pending = deque()
        most_pending = 2 * self._n_threads

        def done(chunk, future):
            # A checksum no worker has started yet is computed here: on a busy
            # machine, waiting for a worker to be scheduled costs more.
            if future.cancel():
                digest, chunk_pieces = verbatim_checksums(chunk)
            else:
                digest, chunk_pieces = future.result()
            if release is not None:
                release()  # written, and checksummed
            table.append([len(chunk), len(chunk), digest, VERBATIM])
            pieces.append(chunk_pieces)

        for chunk in chunks:
            if len(chunk):
                future = pool.submit(verbatim_checksums, chunk)
                self._write(chunk)
                pending.append((chunk, future))
                while pending and pending[0][1].done():
                    done(*pending.popleft())
                if len(pending) > most_pending:  # workers lag: keep few chunks alive
                    done(*pending.popleft())  # (dask blocks, row batches: a band each)
                if room and not room(len(chunk), wait=False):
                    while pending:
                        done(*pending.popleft())
                    room(len(chunk))
        for chunk, future in pending:
            done(chunk, future)
        return self._add_table(offset, table, None, typesize, meta, pieces=pieces)

    def add_encoded_section(self, encoded, *, codec=None, typesize=1, meta=None):
        """Append a section from chunks already passed through :func:`encode_chunk`:
        ``encoded`` is what :class:`EncodedStream` collects, (bytes to store,
        raw length, checksum, flag) each."""
        encoded = list(encoded)
        self._write_pending()
        # Every chunk is encoded already: one record holds them all. Raw
        # data is aligned, whatever it holds (the rule readers check).
        offset = self._record(ALIGNED if codec is None else DATA,
                              sum(len(stored) for stored, _, _, _ in encoded))
        table = []
        for stored, raw_length, digest, flag in encoded:
            self._write(stored)
            table.append([len(stored), raw_length, digest, flag])
        return self._add_table(offset, table, codec, typesize, meta)

    def _add_table(self, offset, table, codec, typesize, meta, records=False, pieces=None):
        number = self._add_entry(
            offset, sum(entry[1] for entry in table), sum(entry[0] for entry in table),
            codec, typesize, chunk_table_text(table), meta, records)
        if pieces:
            self._sections[number].update(piece_fields(pieces))
        return number

    def _add_entry(self, offset, raw_size, stored_size, codec, typesize, table_text, meta,
                   records=False):
        self._sections.append({
            "offset": offset,
            # The chunk table is JSON text parsed only when the section's chunks
            # are read, the totals let a reader check its extent without it:
            # opening a file costs the same however many chunks its arrays have.
            "raw_size": raw_size,
            "stored_size": stored_size,
            "codec": None if codec is None else codec.get_config(),
            "typesize": typesize,
            "chunks": table_text,
            "meta": meta or {},
        })
        if records:  # each chunk a record: chunk i + 1's header follows chunk i
            self._sections[-1]["layout"] = "records"
        return len(self._sections) - 1

    @property
    def n_sections(self):
        """Sections added so far."""
        return len(self._sections)

    def section_meta(self, section):
        """The ``meta`` dict of a section added, written with the index:
        what is added to it before :meth:`finish` is kept."""
        return self._sections[section]["meta"]

    def add_copied_section(self, entry, parts):
        """Append a section whose stored chunks are copied as they are, one
        after another in one record (compacting a growing file); returns
        its number. ``entry``: its index entry but for ``offset`` (set
        here); ``parts``: its stored bytes, in order, ``entry["stored_size"]``
        of them."""
        self._write_pending()
        size = entry["stored_size"]
        offset = self._record(ALIGNED if entry["codec"] is None else DATA, size)
        start = self._pos
        for part in parts:
            self._write(part)
        if self._pos - start != size:
            raise ValueError(f"a copied section of {size} bytes was given "
                             f"{self._pos - start} bytes")
        self._sections.append(dict(entry, offset=offset))
        return len(self._sections) - 1

    def section_entry(self, section):
        """The index entry of a section added, once its chunks are all
        written (every chunk still being encoded is written first)."""
        self._write_pending()
        return self._sections[section]

    @property
    def position(self):
        """Where the next byte goes, as the index counts offsets."""
        return self._pos

    def finish(self, root, info=None, sections=None, blocks=False):
        """Write the index and trailer; ``root`` names the entry section.
        ``sections``: the index's section entries, if not those added (a
        commit of a growing object file lists its whole state). ``blocks``: some
        are buffer blocks: format 2.5, the list ending with ``BLOCKS_STUB``."""
        self._write_pending()
        listed = self._sections if sections is None else sections
        listed = [*listed, BLOCKS_STUB] if blocks else listed
        # A growing file's commits keep their section list plain (index_text).
        data = index_text(root, listed, info or {}, BLOCKS_MINOR if blocks else self._minor,
                          pack=self._minor in (FORMAT_MINOR, BLOCKS_MINOR))
        offset = self._record(END, len(data) + TRAILER.size)
        self._write(data)
        self._write(TRAILER.pack(offset, len(data), checksum(data), END_MAGIC))
        return self._pos


class _PendingSection:
    """A compressed section whose chunks are being encoded on the pool."""
    __slots__ = ("number", "count", "written", "submitted", "first", "table", "pieces", "release")

    def __init__(self, number, release=None):
        self.number = number
        self.release = release  # see ContainerWriter.add_section
        self.count = self.written = 0
        self.submitted = False
        self.first = None  # where its first chunk's payload starts
        self.table = []
        self.pieces = []
