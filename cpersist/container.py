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
    trailer  32 bytes   index offset and length, CRC-32 of the index, end magic

Writing is strictly sequential (a pipe or socket can be the target); reading
needs random access (the loader spools a non-seekable source to a temporary
file first).
"""

import json
import struct
import zlib

from ._threads import ordered_map
from .codecs import codec_from_config
from .exceptions import CorruptFileError, UnsupportedVersionError

MAGIC = b"\x89CPS\r\n\x1a\n"
END_MAGIC = b"CPSEND\r\n"
FORMAT_MAJOR = 1
FORMAT_MINOR = 0
#: magic, major, minor, then zero padding up to 64 bytes.
HEADER = struct.Struct("<8sHH52x")
#: index offset, index length, CRC-32 of the index, reserved, end magic.
TRAILER = struct.Struct("<QQII8s")
ALIGN = 64
#: Chunk flags: encoded with the section's codec, or stored as is.
ENCODED, STORED = 0, 1
#: Upper bound of a chunk's size: chunk tables use it to reject forged sizes.
MAX_CHUNK_SIZE = 1 << 31

_ZEROS = bytes(ALIGN)


def crc32(data):
    """CRC-32 of a bytes-like object (zlib's, which releases the GIL)."""
    return zlib.crc32(data)


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
        absolute.
    meta : dict
        What the writer said the section holds.
    """

    __slots__ = ("index", "offset", "codec", "typesize", "raw_size", "stored_size",
                 "chunks", "meta")

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
        self._write(HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR))

    def _write(self, data):
        view = memoryview(data).cast("B")
        total = len(view)
        written = 0
        while written < total:
            n = self._file.write(view[written:])
            # Raw (unbuffered) streams may write less than asked; buffered
            # ones return None or the full length.
            written = total if n is None else written + n
        self._pos += total

    def _align(self):
        pad = -self._pos % ALIGN
        if pad:
            self._write(_ZEROS[:pad])

    def add_section(self, chunks, *, codec=None, typesize=1, meta=None):
        """Append a section made of ``chunks`` and return its number.

        Parameters
        ----------
        chunks : iterable of memoryview
            Contiguous byte chunks (format ``B``), each at most
            ``MAX_CHUNK_SIZE`` long, whose concatenation is the section.
        codec : Codec or None
            None stores the bytes as one contiguous raw run.
        typesize : int
            Element size, passed to the codec (Blosc shuffles by it).
        meta : dict, optional
            JSON-serialisable description kept in the index.
        """
        self._align()
        offset = self._pos
        table = []

        if codec is None:
            def work(chunk):
                return crc32(chunk)

            def consume(chunk, crc):
                self._write(chunk)
                table.append([len(chunk), len(chunk), crc, STORED])
        else:
            def work(chunk):
                encoded = codec.encode(chunk, typesize)
                # A chunk that does not shrink is stored as is: reading it
                # back is then a plain copy.
                if len(encoded) >= len(chunk):
                    return chunk, crc32(chunk), STORED
                return encoded, crc32(encoded), ENCODED

            def consume(chunk, result):
                stored, crc, flag = result
                self._write(stored)
                table.append([len(stored), len(chunk), crc, flag])

        ordered_map(work, (c for c in chunks if len(c)), self._n_threads, consume)
        self._sections.append({
            "offset": offset,
            "codec": None if codec is None else codec.get_config(),
            "typesize": typesize,
            "chunks": table,
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
        self._write(TRAILER.pack(offset, len(data), crc32(data), 0, END_MAGIC))
        return self._pos


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
        trailer = self._read_exact(self.size - TRAILER.size, TRAILER.size)
        offset, length, crc, _, end = TRAILER.unpack(trailer)
        if end != END_MAGIC:
            raise self.error("truncated or damaged: no end marker (an interrupted write?)")
        if offset < HEADER.size or offset + length != self.size - TRAILER.size:
            raise self.error(f"damaged trailer: index at {offset}+{length} in {self.size} bytes")
        data = self._read_exact(offset, length)
        if crc32(data) != crc:
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
            raise self.error(f"damaged index ({type(exc).__name__}: {exc})") from None
        if not (isinstance(self.root, int) and 0 <= self.root < len(self.sections)):
            raise self.error(f"damaged index: bad root section {self.root!r}")

    def _check_section(self, i, s, end):
        section = Section()
        section.index = i
        section.offset = pos = _uint(s["offset"])
        if pos < HEADER.size or pos % ALIGN:
            raise self.error(f"section {i} at a bad offset {pos}")
        section.codec = None if s["codec"] is None else codec_from_config(s["codec"])
        section.typesize = _uint(s["typesize"])
        section.meta = s["meta"]
        if not isinstance(section.meta, dict):
            raise self.error(f"section {i} meta is not a mapping")
        chunks = []
        raw_size = 0
        for entry in s["chunks"]:
            stored, raw, crc, flag = (_uint(v) for v in entry)
            if not 0 < raw <= MAX_CHUNK_SIZE or flag not in (ENCODED, STORED):
                raise self.error(f"section {i} has a bad chunk entry {entry}")
            if flag == STORED and stored != raw or flag == ENCODED and section.codec is None:
                raise self.error(f"section {i} has an inconsistent chunk entry {entry}")
            chunks.append((pos, stored, raw, crc, flag))
            pos += stored
            raw_size += raw
        if pos > end:
            raise self.error(
                f"section {i} runs to offset {pos}, past the data end {end} (truncated?)"
            )
        section.chunks = chunks
        section.raw_size = raw_size
        section.stored_size = pos - section.offset
        return section

    # -- reading sections -------------------------------------------------

    def _stored_chunks(self, section, out_view):
        """Yield (chunk, stored bytes, output slice) reading sequentially."""
        self.file.seek(self.base + section.offset)
        start = 0
        for chunk in section.chunks:
            _, stored, raw, _, _ = chunk
            data = self.file.read(stored)
            if len(data) != stored:
                raise self.error(f"truncated in section {section.index}")
            yield chunk, data, out_view[start:start + raw]
            start += raw

    def read_into(self, section, out, *, verify=True, n_threads=1):
        """Fill ``out`` (writable bytes of ``section.raw_size``) with the section.

        Raw sections are read straight into ``out``; encoded chunks are read
        on this thread and decoded into their slice of ``out`` on the pool.
        """
        out = memoryview(out).cast("B")
        if len(out) != section.raw_size:
            raise self.error(
                f"section {section.index} holds {section.raw_size} bytes, "
                f"{len(out)} expected"
            )
        if section.is_raw:
            self._read_raw_into(section, out, verify, n_threads)
            return
        codec = section.codec

        def work(item):
            (_, _, _, crc, flag), data, target = item
            if verify and crc32(data) != crc:
                raise self.error(f"checksum mismatch in section {section.index}: damaged data")
            if flag == STORED:
                target[:] = data
            else:
                try:
                    codec.decode_into(data, target)
                except CorruptFileError as exc:
                    raise self.error(f"section {section.index}: {exc}") from None

        ordered_map(work, self._stored_chunks(section, out), n_threads, _ignore)

    def _read_raw_into(self, section, out, verify, n_threads):
        self.file.seek(self.base + section.offset)

        def chunks():
            start = 0
            for _, _, raw, crc, _ in section.chunks:
                target = out[start:start + raw]
                got = _readinto_full(self.file, target)
                if got != raw:
                    raise self.error(f"truncated in section {section.index}")
                start += raw
                yield target, crc

        def work(item):
            target, crc = item
            if verify and crc32(target) != crc:
                raise self.error(f"checksum mismatch in section {section.index}: damaged data")

        ordered_map(work, chunks(), n_threads, _ignore)

    def read_bytes(self, section, *, verify=True, n_threads=1):
        """Return the section's bytes as a new bytearray."""
        out = bytearray(section.raw_size)
        self.read_into(section, out, verify=verify, n_threads=n_threads)
        return out

    def verify_section(self, section):
        """Check every chunk's checksum (and that encoded chunks decode)."""
        if section.is_raw:
            self.file.seek(self.base + section.offset)
            for _, stored, _, crc, _ in section.chunks:
                if crc32(self.file.read(stored)) != crc:
                    raise self.error(
                        f"checksum mismatch in section {section.index}: damaged data"
                    )
            return
        largest = max((c[2] for c in section.chunks), default=0)
        scratch = memoryview(bytearray(largest))
        # Decode chunk by chunk into one scratch buffer: memory stays at one
        # chunk whatever the section's size.
        self.file.seek(self.base + section.offset)
        for _, stored, raw, crc, flag in section.chunks:
            data = self.file.read(stored)
            if len(data) != stored or crc32(data) != crc:
                raise self.error(f"checksum mismatch in section {section.index}: damaged data")
            if flag == ENCODED:
                try:
                    section.codec.decode_into(data, scratch[:raw])
                except CorruptFileError as exc:
                    raise self.error(f"section {section.index}: {exc}") from None


def _ignore(item, result):
    pass


def _uint(value):
    if type(value) is not int or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value


def _readinto_full(file, view):
    """readinto until ``view`` is full or the file ends; return bytes read."""
    total = 0
    while total < len(view):
        n = file.readinto(view[total:])
        if not n:
            break
        total += n
    return total
