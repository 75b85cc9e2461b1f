"""Byte layout of a cpersist file: header, sections of chunks, index, trailer.

The container stores numbered *sections* of bytes, each split into chunks
that are either stored as they are or encoded with a codec, and a JSON index
that describes them. It knows nothing of numpy objects or pickling: what a
section holds is said by an opaque ``meta`` dict that the caller provides.
The layout is specified in ``docs/format.rst``::

    header   64 bytes   magic, major and minor format version
    sections            each starts on a 64-byte boundary; raw sections are
                        one contiguous run of bytes (so they can be memmapped)
    index               UTF-8 JSON: every section's offset, codec, chunk table
    trailer  32 bytes   index offset and length, checksum of the index, end magic

Writing is strictly sequential (a pipe or socket can be the target); reading
needs random access (the loader spools a non-seekable source to a temporary
file first).
"""

import itertools
import json
import os
import stat
import struct
import threading
from collections import deque

from xxhash import xxh3_64_intdigest as _xxh3_64

from ._files import plain_file_fd
from ._threads import get_pool, ordered_map, run_claimed
from .codecs import codec_from_config
from .codecs.abc import middle_sample
from .exceptions import CorruptFileError, UnsupportedVersionError

MAGIC = b"\x89CPS\r\n\x1a\n"
END_MAGIC = b"CPSEND\r\n"
FORMAT_MAJOR = 1
FORMAT_MINOR = 1
#: magic, major, minor, then zero padding up to 64 bytes.
HEADER = struct.Struct("<8sHH52x")
#: index offset, index length, XXH3-64 checksum of the index, end magic.
TRAILER = struct.Struct("<QQQ8s")
ALIGN = 64
#: Chunk flags: encoded with the section's codec, or stored as is.
ENCODED, STORED = 0, 1
#: Upper bound of a chunk's size: chunk tables use it to reject forged sizes.
MAX_CHUNK_SIZE = 1 << 31
#: Sections claiming more decoded bytes than this have the sizes stated in
#: their chunks' headers checked against the index before anything is
#: allocated for them (smaller claims are harmless to allocate).
CHECKED_CLAIM = 64 << 20

#: Bytes of each large chunk compressed first to decide whether compressing
#: the whole chunk pays, and the saving it must show to go ahead: at the fast
#: levels 1-5, 15%, since a smaller saving costs more time than the space is
#: worth (float64 noise shrinks 11% with shuffle, compressed at 0.17x the
#: speed of storing it); at levels 6-9, where size matters most, 5%.
PROBE_SIZE = 64 << 10
MIN_SAVING_FAST, MIN_SAVING_SMALL = 0.15, 0.05
#: Chunks of the pickle stream encoded together, per thread (see
#: :class:`EncodedStream`), and at most in all: with several chunks each,
#: the threads finish together; the cap bounds the raw bytes held.
BATCH_CHUNKS = 4
MAX_BATCH_CHUNKS = 32
#: Bytes read at once from the end of a file to find its trailer and index.
TAIL_READ = 16 << 10
#: Writes at least this large preallocate their blocks first.
FALLOCATE_MIN = 1 << 16

_ZEROS = bytes(ALIGN)


def checksum(data):
    """XXH3-64 of a bytes-like object.

    Chosen by measurement over zlib's CRC-32: ~28 GB/s against ~6 GB/s on
    one core here, which keeps verification of a raw (uncompressed) load, a
    plain copy from the page cache, within a few percent instead of doubling
    it. It holds the GIL, so it gains nothing from a second worker; on the
    pool it overlaps the calling thread's file I/O, which does not hold it.
    """
    return _xxh3_64(data)


class Section:
    """One section as read from a file's index.

    Attributes
    ----------
    index : int
        Position in the file's section list.
    offset : int
        Absolute file offset of the first chunk (relative to the start of the
        cpersist data).
    codec : Codec or None
        None for a raw section, whose bytes are one contiguous run.
    typesize : int
    raw_size, stored_size : int
    chunks : list of tuple
        ``(offset, stored_len, raw_len, crc, flag)`` per chunk, offsets
        absolute. Checked on first use when the index states the section's
        totals, so that opening a file costs the same whatever its size
        (a memmapped load never needs the chunk table).
    meta : dict
        What the writer said the section holds.
    """

    __slots__ = ("index", "offset", "codec", "typesize", "raw_size", "stored_size",
                 "_chunks", "_check_chunks", "meta")

    @property
    def chunks(self):
        if self._chunks is None:
            self._chunks = self._check_chunks()
        return self._chunks

    @property
    def is_raw(self):
        return self.codec is None


class ContainerWriter:
    """Write a cpersist file sequentially to a binary file object.

    Parameters
    ----------
    file : binary file object
        Only ``write`` is used, so pipes and sockets work.
    n_threads : int
        Threads used to encode and checksum chunks.
    """

    def __init__(self, file, n_threads=1):
        self._file = file
        self._n_threads = n_threads
        self._pos = 0
        self._sections = []
        self._fd, self._fd_base = _regular_file_fd(file)
        self._reserved = 0  # file position up to which blocks are reserved
        self._write(HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR))

    def _reserve(self, size):
        """Reserve the file's blocks for the next ``size`` bytes.

        Reserving before writing makes large writes ~3x faster on ext4
        (numpy's tofile does the same). Raw sections reserve once for their
        whole size: a call per 4 MiB chunk cost 0.9 ms of an 18 ms dump.
        """
        end = self._pos + size
        if self._fd is None or size < FALLOCATE_MIN or end <= self._reserved:
            return
        try:
            os.posix_fallocate(self._fd, self._fd_base + self._pos, size)
            self._reserved = end
        except OSError:
            self._fd = None  # not supported here (some network file systems)

    def _write(self, data):
        # Kept lean: a file of small arrays calls this twice per array.
        if type(data) is memoryview and data.format != "B":
            data = data.cast("B")
        total = len(data)
        if total >= FALLOCATE_MIN:
            self._reserve(total)
        n = self._file.write(data)
        if n is not None and n < total:
            # Raw (unbuffered) streams may write less than asked; buffered
            # ones return None or the full length.
            view = memoryview(data)
            while n < total:
                n += self._file.write(view[n:]) or 0
        self._pos += total

    def _align(self):
        pad = -self._pos % ALIGN
        if pad:
            self._write(_ZEROS[:pad])

    def add_section(self, chunks, *, codec=None, typesize=1, meta=None, size=None):
        """Append a section made of ``chunks`` and return its number.

        Parameters
        ----------
        chunks : iterable of memoryview
            Contiguous byte chunks (format ``B``), each at most
            ``MAX_CHUNK_SIZE`` long and none empty, whose concatenation is
            the section.
        codec : Codec or None
            None stores the bytes as one contiguous raw run.
        typesize : int
            Element size, passed to the codec (Blosc shuffles by it).
        meta : dict, optional
            JSON-serialisable description kept in the index.
        size : int, optional
            Total length of ``chunks``, if known: a raw section reserves
            its blocks in the file at once.
        """
        self._align()
        offset = self._pos
        if codec is None and type(chunks) is tuple and len(chunks) == 1:
            # One raw chunk (every small array): the generic path's layers
            # cost 7.7 us per array, 4x what pickling one costs.
            n = len(chunks[0])
            crc = checksum(chunks[0])
            self._write(chunks[0])
            return self._add_entry(offset, n, n, None, typesize, f"[[{n},{n},{crc},{STORED}]]",
                                   meta)
        if codec is None:
            if size:
                self._reserve(size)
            return self._add_raw_chunks(offset, chunks, typesize, meta)
        table = []

        def work(chunk):
            return encode_chunk(codec, chunk, typesize)

        def write(chunk, result):
            stored, crc, flag = result
            self._write(stored)
            table.append([len(stored), len(chunk), crc, flag])

        ordered_map(work, (c for c in chunks if len(c)), self._n_threads, write)
        return self._add_table(offset, table, codec, typesize, meta)

    def _add_raw_chunks(self, offset, chunks, typesize, meta):
        table = []
        if self._n_threads <= 1:
            for chunk in chunks:
                if len(chunk):
                    # Checksummed just before it is written, the chunk is
                    # still in the CPU cache when write() copies it.
                    crc = checksum(chunk)
                    self._write(chunk)
                    table.append([len(chunk), len(chunk), crc, STORED])
            return self._add_table(offset, table, None, typesize, meta)
        # A worker checksums each chunk while this thread writes it: both read
        # it at once, so it crosses from memory once, and nothing waits for a
        # checksum before writing (checksumming ahead of the write, as encoded
        # chunks are, made a 100 MB raw dump 2 ms slower).
        pool = get_pool(self._n_threads)
        pending = deque()
        for chunk in chunks:
            if len(chunk):
                future = pool.submit(checksum, chunk)
                self._write(chunk)
                pending.append((len(chunk), future))
                while pending and pending[0][1].done():
                    n, future = pending.popleft()
                    table.append([n, n, future.result(), STORED])
        for n, future in pending:
            table.append([n, n, future.result(), STORED])
        return self._add_table(offset, table, None, typesize, meta)

    def add_encoded_section(self, encoded, *, codec=None, typesize=1, meta=None):
        """Append a section from chunks already passed through :func:`encode_chunk`.

        Parameters
        ----------
        encoded : iterable of (stored, raw_len, crc, flag)
            What :class:`EncodedStream` collects.
        """
        self._align()
        offset = self._pos
        table = []
        for stored, raw_len, crc, flag in encoded:
            self._write(stored)
            table.append([len(stored), raw_len, crc, flag])
        return self._add_table(offset, table, codec, typesize, meta)

    def _add_table(self, offset, table, codec, typesize, meta):
        return self._add_entry(
            offset, sum(entry[1] for entry in table), sum(entry[0] for entry in table),
            codec, typesize, _table_text(table), meta)

    def _add_entry(self, offset, raw_size, stored_size, codec, typesize, table_text, meta):
        self._sections.append({
            "offset": offset,
            # Format 1.1: the chunk table is JSON text inside the index, parsed
            # only when the section's chunks are read, and the totals let a
            # reader check the section's extent without it. Opening a file
            # then costs the same whatever its size: parsing the 256-entry
            # table of a 1 GB array took 52 us, more than the rest of a
            # memmapped load.
            "raw_size": raw_size,
            "stored_size": stored_size,
            "codec": None if codec is None else codec.get_config(),
            "typesize": typesize,
            "chunks": table_text,
            "meta": meta or {},
        })
        return len(self._sections) - 1

    def finish(self, root, info=None):
        """Write the index and trailer; ``root`` names the entry section."""
        index = {
            "format": [FORMAT_MAJOR, FORMAT_MINOR],
            "root": root,
            "sections": self._sections,
            "info": info or {},
        }
        self._align()
        data = json.dumps(index, separators=(",", ":")).encode()
        offset = self._pos
        self._write(data)
        self._write(TRAILER.pack(offset, len(data), checksum(data), END_MAGIC))
        return self._pos


class BufferPool:
    """Byte buffers that encoded chunks are read into, kept for reuse.

    A new ``bytes`` per chunk, with several chunks in flight on the pool,
    made malloc give that memory back to the kernel and fault it in again
    at every load: reading the 17.9 MB of a compressed 100 MB atlas took
    5.6 ms against 1.6 ms into reused buffers, and 2-thread loads of the
    atlas were 8-11% faster with the buffers kept between loads. At most
    ``keep_bytes`` are kept while idle.

    Parameters
    ----------
    keep_bytes : int
    """

    def __init__(self, keep_bytes):
        self._keep_bytes = keep_bytes
        self._kept_bytes = 0
        self._free = []
        self._lock = threading.Lock()

    def take(self, size):
        """A bytearray of at least ``size`` bytes, the caller's until given back."""
        with self._lock:
            while self._free:
                buffer = self._free.pop()
                self._kept_bytes -= len(buffer)
                if len(buffer) >= size:
                    return buffer
                # Too small (left by a section of smaller chunks): dropped.
        return bytearray(size)

    def give(self, buffer):
        """Return a buffer from :meth:`take`; kept if there is room."""
        with self._lock:
            if self._kept_bytes + len(buffer) <= self._keep_bytes:
                self._free.append(buffer)
                self._kept_bytes += len(buffer)


#: Read buffers kept between loads: room for the five in flight on 2 cores
#: (two per worker and the one being read) for 4 MiB chunks compressed to
#: 3.2 MB or less.
READ_BUFFERS = BufferPool(16 << 20)


class ContainerReader:
    """Read the index of a cpersist file and the bytes of its sections.

    Parameters
    ----------
    file : binary file object
        Must be seekable; the cpersist data runs from its current position
        to its end.
    name : str
        How the file is named in error messages.

    Raises
    ------
    CorruptFileError
        If the file is not a cpersist file or its index is damaged.
    UnsupportedVersionError
        If a newer major format version wrote it.
    """

    def __init__(self, file, name):
        self.file = file
        self.name = name
        self._fd = _pread_fd(file)
        self.base = file.tell()
        self.size = file.seek(0, 2) - self.base
        self._read_header()
        self._read_index()

    def error(self, what):
        """A :class:`CorruptFileError` that names this file."""
        return CorruptFileError(f"{self.name}: {what}")

    def _read_exact(self, offset, n):
        self.file.seek(self.base + offset)
        data = self.file.read(n)
        if len(data) != n:
            raise self.error(f"truncated: wanted {n} bytes at offset {offset}, got {len(data)}")
        return data

    def _read_header(self):
        head = self._read_exact(0, min(self.size, HEADER.size))
        if not head.startswith(MAGIC[: len(head)]) or len(head) < len(MAGIC):
            if not head:
                raise self.error("empty file, not a cpersist file")
            raise self.error(f"not a cpersist file (it starts with {head[:8]!r})")
        if len(head) < HEADER.size or self.size < HEADER.size + TRAILER.size:
            raise self.error(f"truncated: only {self.size} bytes")
        _, self.major, self.minor = HEADER.unpack(head)
        if self.major > FORMAT_MAJOR:
            raise UnsupportedVersionError(
                f"{self.name}: written in cpersist format {self.major}.{self.minor}, "
                f"newer than the {FORMAT_MAJOR}.x this version reads; upgrade cpersist"
            )
        if self.major < 1:
            raise self.error(f"unknown format version {self.major}.{self.minor}")

    def _read_index(self):
        # One read for the trailer and, usually, the index before it: from a
        # cold cache, reading them one after the other made opening a 1 GB
        # file (a 10 KB index) 1.18x slower than a 1 MB one; with one 16 KiB
        # read, 1.00x (0.34 ms each). 64 KiB cost 0.06 ms more for both.
        tail_start = max(0, self.size - TAIL_READ)
        tail = self._read_exact(tail_start, self.size - tail_start)
        offset, length, crc, end = TRAILER.unpack(tail[-TRAILER.size:])
        if end != END_MAGIC:
            raise self.error("truncated or damaged: no end marker (an interrupted write?)")
        if offset < HEADER.size or offset + length != self.size - TRAILER.size:
            raise self.error(f"damaged trailer: index at {offset}+{length} in {self.size} bytes")
        if offset >= tail_start:
            data = tail[offset - tail_start:-TRAILER.size]
        else:
            data = self._read_exact(offset, length)
        if checksum(data) != crc:
            raise self.error("index checksum mismatch: the file is damaged")
        try:
            index = json.loads(data)
            self.root = index["root"]
            self.info = index.get("info", {})
            raw_sections = index["sections"]
            self.sections = [
                self._check_section(i, s, offset) for i, s in enumerate(raw_sections)
            ]
        except CorruptFileError:
            raise
        except Exception as exc:  # malformed JSON, wrong types, bad codec...
            raise self._damaged_index(exc) from None
        if not (isinstance(self.root, int) and 0 <= self.root < len(self.sections)):
            raise self.error(f"damaged index: bad root section {self.root!r}")

    def _damaged_index(self, exc):
        return self.error(f"damaged index ({type(exc).__name__}: {exc})")

    def _check_section(self, i, s, end):
        section = Section()
        section.index = i
        section.offset = _uint(s["offset"])
        if section.offset < HEADER.size or section.offset % ALIGN:
            raise self.error(f"section {i} at a bad offset {section.offset}")
        section.codec = None if s["codec"] is None else codec_from_config(s["codec"])
        section.typesize = _uint(s["typesize"])
        section.meta = s["meta"]
        if not isinstance(section.meta, dict):
            raise self.error(f"section {i} meta is not a mapping")
        table = s["chunks"]
        if isinstance(table, list):  # format 1.0: a plain list, checked now
            section._chunks, section.raw_size, section.stored_size = self._check_table(
                section, table, end)
            return section
        if not isinstance(table, str):
            raise self.error(f"section {i} has no chunk table")
        section.raw_size = _uint(s["raw_size"])
        section.stored_size = _uint(s["stored_size"])
        if section.codec is None and section.raw_size != section.stored_size:
            raise self.error(
                f"section {i} is inconsistent: raw, yet {section.raw_size} bytes "
                f"stored in {section.stored_size}"
            )
        if section.offset + section.stored_size > end:
            raise self.error(
                f"section {i} runs to offset {section.offset + section.stored_size}, "
                f"past the data end {end} (truncated?)"
            )

        def check_chunks():
            try:
                chunks, raw_size, stored_size = self._check_table(
                    section, json.loads(table), end)
            except CorruptFileError:
                raise
            except Exception as exc:  # wrong types in the table
                raise self._damaged_index(exc) from None
            if (raw_size, stored_size) != (section.raw_size, section.stored_size):
                raise self.error(
                    f"damaged index: section {i}'s chunks hold {raw_size} bytes in "
                    f"{stored_size}, its totals say {section.raw_size} in "
                    f"{section.stored_size}"
                )
            return chunks

        section._chunks, section._check_chunks = None, check_chunks
        return section

    def _check_table(self, section, table, end):
        """Check a chunk table: ``(chunks, raw_size, stored_size)``."""
        i = section.index
        pos = section.offset
        chunks = []
        raw_size = 0
        for entry in table:
            stored, raw, crc, flag = (_uint(v) for v in entry)
            if not 0 < raw <= MAX_CHUNK_SIZE or flag not in (ENCODED, STORED):
                raise self.error(f"section {i} has a bad chunk entry {entry}")
            if flag == STORED and stored != raw or flag == ENCODED and section.codec is None:
                raise self.error(f"section {i} has an inconsistent chunk entry {entry}")
            if flag == ENCODED:
                bound = section.codec.max_raw_size(stored)
                if bound is not None and raw > bound:
                    raise self.error(
                        f"section {i} claims a {section.codec.codec_id} chunk of {stored} "
                        f"bytes decodes to {raw}, more than that codec can produce "
                        f"({bound}): forged or damaged index"
                    )
            chunks.append((pos, stored, raw, crc, flag))
            pos += stored
            raw_size += raw
        if pos > end:
            raise self.error(
                f"section {i} runs to offset {pos}, past the data end {end} (truncated?)"
            )
        return chunks, raw_size, pos - section.offset

    # -- reading sections -------------------------------------------------

    def _stored_chunks(self, section, out_view):
        """Yield (chunk, stored bytes, output slice, read buffer) in file order.

        A chunk stored as is (flag ``STORED``) is read straight into its
        output slice, which is then also its "stored bytes": copying it
        through a temporary buffer cost a third of the load of a compressed
        file of noise. An encoded chunk is read into a buffer from
        ``READ_BUFFERS``, given back once it is decoded.
        """
        self.file.seek(self.base + section.offset)
        largest = max((c[1] for c in section.chunks if c[4] != STORED), default=0)
        start = 0
        for chunk in section.chunks:
            _, stored, raw, _, flag = chunk
            target = out_view[start:start + raw]
            if flag == STORED:
                buffer = None
                data = target
            else:
                buffer = READ_BUFFERS.take(largest)
                data = memoryview(buffer)[:stored]
            if _readinto_full(self.file, data) != stored:
                raise self.error(f"truncated in section {section.index}")
            yield chunk, data, target, buffer
            start += raw

    def read_into(self, section, out, *, verify=True, n_threads=1):
        """Fill ``out`` (writable bytes of ``section.raw_size``) with the section.

        Where decoding is most of the work (encoded chunks decode to more
        than half the section's bytes) and the file is a plain file, each
        thread claims the next chunk in file order and reads, checks and
        decodes it itself (:meth:`_decode_claimed`). Otherwise this thread
        reads the chunks in file order, those stored as they are straight
        into their slice of ``out``, and the pool checksums them and decodes
        the encoded ones into place. Reading in one thread in order keeps
        the kernel's readahead streaming on a cold file where reading is the
        work: with two threads reading, a cold 100 MB array of noise at
        ``compress=3`` (every chunk stored as is) loaded in 59.8 ms against
        43.6 ms, and a cold raw load in 54 ms against 43 ms.
        """
        out = memoryview(out).cast("B")
        if len(out) != section.raw_size:
            raise self.error(
                f"section {section.index} holds {section.raw_size} bytes, "
                f"{len(out)} expected"
            )
        if section.is_raw and not verify:
            self.file.seek(self.base + section.offset)
            if _readinto_full(self.file, out) != len(out):
                raise self.error(f"truncated in section {section.index}")
            return
        codec = section.codec
        if n_threads > 1 and self._fd is not None and len(section.chunks) > 1 and (
                2 * sum(c[2] for c in section.chunks if c[4] == STORED) < section.raw_size):
            self._decode_claimed(section, out, verify, n_threads)
            return

        def work(item):
            (_, _, _, crc, flag), data, target, buffer = item
            if verify and checksum(data) != crc:
                raise self.error(f"checksum mismatch in section {section.index}: damaged data")
            if flag != STORED:  # a stored chunk was read into place
                try:
                    codec.decode_into(data, target)
                except CorruptFileError as exc:
                    raise self.error(f"section {section.index}: {exc}") from None
                READ_BUFFERS.give(buffer)

        ordered_map(work, self._stored_chunks(section, out), n_threads, _ignore)

    def _decode_claimed(self, section, out, verify, n_threads):
        """Read, check and decode ``section`` into ``out`` on ``n_threads``
        threads, this one and ``n_threads - 1`` pool workers.

        Each thread claims the next chunk in file order, reads it with
        ``pread`` into a buffer of its own, checksums it while it is in its
        cache and decodes it into place; no thread waits for another until
        the end. With this thread reading every chunk and handing it to two
        workers, 2 threads loaded the 100 MB time series in 33.0 ms (1.11x
        one thread) and the atlas in 35.2 ms (1.28x); this way, in 23.2 ms
        (1.69x) and 28.3 ms (1.66x), median of 61 pairs, and cold from disk
        the atlas in 45.4 ms against 52.4 ms.
        """
        chunks = section.chunks
        starts = list(itertools.accumulate((c[2] for c in chunks), initial=0))
        largest = max((c[1] for c in chunks if c[4] != STORED), default=0)
        codec = section.codec

        def task(claims):
            buffer = READ_BUFFERS.take(largest)
            try:
                for i in claims:
                    offset, stored, raw, crc, flag = chunks[i]
                    target = out[starts[i]:starts[i] + raw]
                    data = target if flag == STORED else memoryview(buffer)[:stored]
                    if _pread_full(self._fd, data, self.base + offset) != stored:
                        raise self.error(f"truncated in section {section.index}")
                    if verify and checksum(data) != crc:
                        raise self.error(
                            f"checksum mismatch in section {section.index}: damaged data")
                    if flag != STORED:
                        try:
                            codec.decode_into(data, target)
                        except CorruptFileError as exc:
                            raise self.error(f"section {section.index}: {exc}") from None
            finally:
                # Safe even after a failure: no one else uses this buffer.
                READ_BUFFERS.give(buffer)

        run_claimed(task, len(chunks), n_threads)

    def check_claimed_sizes(self, section):
        """Check a section's claimed decoded size before allocating for it.

        The chunk table is checked first (against the file's size, the
        section's totals and, for codecs with a bounded expansion, each
        chunk's stored size). For sections claiming more than
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
        for offset, stored, raw, _, flag in chunks:
            if flag != ENCODED:
                continue
            head = self._read_exact(offset, min(stored, codec.header_size))
            try:
                codec.check_header(head, stored, raw)
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
        for offset, stored, raw, crc, flag in section.chunks:
            data = self._read_exact(offset, stored)
            if verify and checksum(data) != crc:
                raise self.error(f"checksum mismatch in section {section.index}: damaged data")
            if flag == STORED:
                yield bytearray(data)
                continue
            out = bytearray(raw)
            try:
                section.codec.decode_into(data, memoryview(out))
            except CorruptFileError as exc:
                raise self.error(f"section {section.index}: {exc}") from None
            yield out

    def verify_section(self, section):
        """Check every chunk's checksum (and that encoded chunks decode)."""
        if section.is_raw:
            self.file.seek(self.base + section.offset)
            for _, stored, _, crc, _ in section.chunks:
                if checksum(self.file.read(stored)) != crc:
                    raise self.error(
                        f"checksum mismatch in section {section.index}: damaged data"
                    )
            return
        # Decoded chunks are dropped as they come: memory stays at one chunk
        # whatever the section's size.
        for _ in self.iter_section_chunks(section, verify=True):
            pass


def encode_chunk(codec, chunk, typesize=1):
    """Encode one chunk for storage: ``(stored bytes, crc, flag)``.

    A chunk is stored as is (flag ``STORED``) when there is no codec, when a
    probe says compressing will not pay, or when the result does not shrink:
    reading it back is then a plain copy.
    """
    pays, hint = (False, None) if codec is None else _probe(codec, chunk, typesize)
    if not pays:
        return chunk, checksum(chunk), STORED
    encoded = codec.encode(chunk, typesize, hint)
    if len(encoded) >= len(chunk):
        return chunk, checksum(chunk), STORED
    return encoded, checksum(encoded), ENCODED


class EncodedStream:
    """A write-only file object that encodes what it receives, chunk by chunk.

    The pickler writes its stream here. Pieces gather until a batch of
    chunks is full; the batch is then encoded by this thread and the pool's
    workers together (:func:`run_claimed`), and pickling resumes. The
    encoded chunks wait in memory until
    :meth:`ContainerWriter.add_encoded_section` places them in the file
    (after the array sections the pickler writes meanwhile).

    Pickling and encoding take turns rather than overlap: a worker must take
    the GIL to start or finish a chunk, and the C pickler holds it for a
    whole switch interval (5 ms) at a time. Overlapped, the first of a
    forest's six stream chunks was handed over at 1.1 ms and started at
    5.2 ms, when the pickler blocked. Taking turns (with each thread joining
    its own chunk and small arrays pickled without a copy), the forest's
    dump at ``compress=3`` on 2 threads went from 19.0 ms to 15.5 ms.

    Parameters
    ----------
    codec : Codec or None
    chunk_size : int
    n_threads : int
    """

    def __init__(self, codec, chunk_size, n_threads):
        self._codec = codec
        self._chunk_size = chunk_size
        self._n_threads = n_threads
        parallel = codec is not None and n_threads > 1
        self._batch_size = chunk_size * (min(BATCH_CHUNKS * n_threads, MAX_BATCH_CHUNKS)
                                         if parallel else 1)
        self._pieces = []
        self._buffered = 0
        self._done = []

    def write(self, data):
        view = memoryview(data)
        self._pieces.append(view)
        self._buffered += view.nbytes
        if self._buffered >= self._batch_size or not _immutable(view):
            # The pickler passes a large bytearray or buffer of the object
            # itself, not a copy: it is encoded (or its tail copied) before
            # pickling goes on and could change it, as pickle.dumps would.
            self._cut(flush=False)
        return view.nbytes

    def _cut(self, flush):
        """Encode every full chunk buffered (and, on ``flush``, the rest)."""
        size = self._chunk_size
        chunks = []  # each a list of the pieces (views) that make it up
        current, filled = [], 0
        for piece in self._pieces:
            while piece.nbytes:
                take = min(size - filled, piece.nbytes)
                current.append(piece[:take])
                filled += take
                piece = piece[take:]
                if filled == size:
                    chunks.append(current)
                    current, filled = [], 0
        if flush and current:
            chunks.append(current)
            current, filled = [], 0
        if not all(_immutable(piece) for piece in current):
            current = [memoryview(b"".join(current))]
        self._pieces, self._buffered = current, filled
        self._encode(chunks)

    def _encode(self, chunks):
        codec = self._codec

        def encode(pieces):
            # Each thread joins its own chunk, which is then in its cache to
            # encode (joining the forest's whole stream first, on this
            # thread, took 2.7 ms of a 14.5 ms dump). A single piece is used
            # as is only if the pickler's own bytes back it: a chunk stored
            # as is stays in memory until it is written.
            one = len(pieces) == 1 and _immutable(pieces[0])
            chunk = pieces[0] if one else b"".join(pieces)
            return _with_length(encode_chunk(codec, chunk), chunk)

        if self._n_threads <= 1 or codec is None or len(chunks) < 2:
            # A raw chunk needs only its checksum, and xxhash holds the GIL:
            # on the pool it ran no faster, and paid a round trip.
            self._done.extend(encode(pieces) for pieces in chunks)
            return
        encoded = [None] * len(chunks)

        def task(claims):
            for i in claims:
                encoded[i] = encode(chunks[i])

        run_claimed(task, len(chunks), self._n_threads)
        self._done.extend(encoded)

    def encoded_chunks(self):
        """Encode what is left (the last chunk may be partial) and return all
        encoded chunks, in order."""
        if self._buffered:
            self._cut(flush=True)
        return self._done


def _immutable(view):
    """True if ``view``'s bytes cannot change (a view of a ``bytes``)."""
    return type(view.obj) is bytes


def _with_length(result, chunk):
    stored, crc, flag = result
    return stored, len(chunk), crc, flag


def _regular_file_fd(file):
    """(fd, current offset) of a regular file behind ``file``, else (None, 0)."""
    try:
        fd = file.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, 0
        return fd, file.tell()
    except (AttributeError, OSError, ValueError):
        return None, 0


def _probe(codec, chunk, typesize):
    """Cheap probe: ``(pays, hint)`` from a sample in the middle of ``chunk``.

    Incompressible data (noise, already-compressed images) would otherwise
    cost a full compression pass for nothing; the probe costs about
    ``PROBE_SIZE / len(chunk)`` of one (1.6% of a 4 MiB chunk). ``hint`` is
    the codec's own verdict on the sample (see :meth:`Codec.probe`).
    """
    if len(chunk) < 4 * PROBE_SIZE:
        return True, None
    sample = middle_sample(chunk, typesize, PROBE_SIZE)
    size, hint = codec.probe(sample, typesize)
    min_saving = MIN_SAVING_FAST if codec.level <= 5 else MIN_SAVING_SMALL
    return size <= len(sample) * (1 - min_saving), hint


def _table_text(table):
    """A chunk table (lists of 4 ints) as compact JSON text.

    Formatted by hand: json.dumps cost 6.7 us per section, a fifth of the
    dump time of a random forest's 400 small arrays.
    """
    return "[" + ",".join("[%d,%d,%d,%d]" % tuple(entry) for entry in table) + "]"


def _ignore(item, result):
    pass


def _uint(value):
    if type(value) is not int or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value


def _pread_fd(file):
    """The descriptor to ``pread`` ``file``'s bytes from, else None.

    Only for plain file objects on a regular file (see
    :func:`plain_file_fd`); anything else is read through its ``readinto``.
    """
    fd = plain_file_fd(file)
    if fd is None or not hasattr(os, "preadv"):  # Windows has no pread
        return None
    try:
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None


def _pread_full(fd, view, offset):
    """pread until ``view`` is full or the file ends; return bytes read."""
    total = 0
    while total < len(view):
        n = os.preadv(fd, [view[total:]], offset + total)
        if not n:
            break
        total += n
    return total


def _readinto_full(file, view):
    """readinto until ``view`` is full or the file ends; return bytes read."""
    total = 0
    while total < len(view):
        n = file.readinto(view[total:])
        if not n:
            break
        total += n
    return total
