"""Parsing and checking a cpersist file's header, trailer and index (the
layout is :mod:`.layout`): each section of the index becomes a
:class:`Section`, its chunk table checked against the file when first used.
Nothing here reads a file: the reader hands over the bytes it read.
"""

import binascii
import json
import re
import struct

from .._runtime.gc import collector_paused
from ..codecs import codec_from_config
from ..exceptions import CorruptFileError, UnsupportedVersionError
from .layout import (ALIGN, BLOCKS_STUB, ENCODED, END_MAGIC, FORMAT_MAJOR, HEADER, MAGIC,
                     MAX_CHUNK_SIZE, PACK_SECTIONS_UP_TO, RECORD_SIZE, SECTIONS_CODEC, SECTIONS_EXPANSION,
                     TRAILER, VERBATIM, Chunk, new_chunk, corrupt, index_checks_out,
                     packed_sections_accepted)


class Section:
    """One section as read from a file's index.

    Attributes
    ----------
    index : int
        Position in the file's section list.
    offset : int
        Offset of the first chunk, relative to the start of the cpersist data.
    codec : Codec or None
        None for a raw section, whose bytes are one contiguous run.
    typesize : int
    raw_size : int
        Bytes of the section's decoded data.
    stored_size : int
        Bytes its chunks occupy in the file.
    gap : int or None
        Bytes between one chunk and the next: 0 when the chunks are one
        contiguous run, the size of a record header when each chunk is a
        record of its own (``"layout": "records"``), None when the chunk
        table gives each chunk's offset (``"layout": "placed"``, a grown or
        replaced array of a growing object file).
    chunks : list of Chunk
        Checked on first use when the index states the section's totals, so
        that opening a file costs the same whatever its size (a memmapped
        load never needs the chunk table).
    meta : dict
        What the writer said the section holds.
    piece_size : int or None
        Bytes per piece of the chunks whose pieces have checksums of their
        own (see :meth:`pieces`); None when none has.
    """

    __slots__ = ("index", "offset", "codec", "typesize", "raw_size", "stored_size",
                 "gap", "_chunks", "_check_chunks", "meta", "piece_size", "_pieces")

    @property
    def chunks(self):
        if self._chunks is None:
            self._chunks = _checked_chunks(self, *self._check_chunks)
        return self._chunks

    def pieces(self, i):
        """The checksums of the pieces of chunk ``i`` (each
        :attr:`piece_size` bytes of its stored bytes, the last maybe
        shorter), or None if the index gives none. A chunk's entry is
        decoded and checked against the chunk when asked for: a slice needs
        one or two of thousands.

        Raises
        ------
        CorruptFileError
        """
        if self._pieces is None:
            return None
        fields, name = self._pieces
        if type(fields) is str:  # the index's text: not split yet
            fields = fields.split(",")
            if len(fields) != len(self.chunks):
                raise _bad_pieces(self, name)
            self._pieces = fields, name
        field = fields[i]
        if not field:
            return None
        chunk = self.chunks[i]
        n = -(-chunk.length // self.piece_size)
        try:
            digests = binascii.a2b_base64(field, strict_mode=True)
        except (binascii.Error, ValueError):
            digests = b""
        if chunk.flag != VERBATIM or len(digests) != 8 * n:
            raise _bad_pieces(self, name)
        return list(struct.unpack(">%dQ" % n, digests))

    @property
    def is_raw(self):
        return self.codec is None

    @property
    def contiguous(self):
        """Whether the section's bytes are one run in the file (a raw
        section that can be mapped). Writers give a section whose chunks are
        not one run, and only such a one, the placed layout."""
        return self.gap == 0

    def one_chunk_checksum(self):
        """The checksum of a raw section stored as one chunk, read from the
        text of its chunk table as writers write it, which
        :attr:`chunks` would parse into the same entry, for less than its
        cost (a model's small arrays); None for any other section or text."""
        n = self.raw_size
        if self._chunks is not None or self.codec is not None or not 0 < n <= MAX_CHUNK_SIZE:
            return None
        table = _one_verbatim_chunk(self._check_chunks[0])
        if table is None or table[1] != str(n):
            return None
        return int(table[2])


#: The text of a one-chunk raw section's table as writers write it: its
#: size twice, its checksum (at most 20 digits), the flag of a verbatim chunk.
_one_verbatim_chunk = re.compile(
    rf"\[\[([1-9][0-9]{{0,19}}),\1,(0|[1-9][0-9]{{0,19}}),{VERBATIM}\]\]").fullmatch


def parse_header(head, size, name):
    """``(major, minor, flags)`` from the first bytes of a file of ``size`` bytes."""
    head = bytes(head)
    if not head.startswith(MAGIC[: len(head)]) or len(head) < len(MAGIC):
        if not head:
            raise corrupt(name, "empty file, not a cpersist file")
        raise corrupt(name, f"not a cpersist file (it starts with {bytes(head[:8])!r})")
    if len(head) < HEADER.size or size < HEADER.size + TRAILER.size:
        raise corrupt(name, f"truncated: only {size} bytes")
    _, major, minor, flags = HEADER.unpack(head)
    if major > FORMAT_MAJOR:
        raise UnsupportedVersionError(
            f"{name}: written in cpersist format {major}.{minor}, "
            f"newer than the {FORMAT_MAJOR}.x this version reads; upgrade cpersist"
        )
    if major == 1:
        raise UnsupportedVersionError(
            f"{name}: written in cpersist format {major}.{minor}, which only development "
            f"versions before 0.1.0 wrote; this version reads format 2.0 and later. Load it "
            f"with the version that wrote it and dump the object again")
    if major < 1:
        raise corrupt(name, f"unknown format version {major}.{minor}")
    return major, minor, flags


def parse_trailer(trailer, size, name, base=0):
    """``(index offset, index length, index checksum)`` from the trailer of
    a dump of ``size`` bytes at ``base`` in its file (messages give file
    offsets)."""
    offset, length, digest, end = TRAILER.unpack(trailer)
    if end != END_MAGIC:
        raise corrupt(name, "truncated or damaged: no end marker (an interrupted write?)")
    if offset < HEADER.size or offset + length != size - TRAILER.size:
        raise corrupt(name, f"damaged trailer: an index of {length} bytes at offset "
                            f"{base + offset}, in a dump of {size} bytes at offset {base}")
    return offset, length, digest


def parse_index(data, digest, end, name, base=0):
    """Check and parse the index: ``(root, info, sections, edited)``.

    ``end`` is where the index starts, which no section may pass; ``base``
    where the dump starts in its file (messages give file offsets).
    ``edited`` is the index's ``"edited"`` field (format 2.1), or None for
    an index without one (format 2.0, whose header says). An index whose
    checksum is that of the same index with its mark the other way round
    is whole too (:func:`~.layout.index_checks_out`): it was caught between
    the two writes that mark it, and its mark is taken as it reads.
    """
    if not index_checks_out(data, digest):
        raise corrupt(name, "index checksum mismatch: the file is damaged")
    try:
        with collector_paused():
            index = _parse_json(data)
            root = index["root"]
            info = index.get("info", {})
            edited = index.get("edited")
            if edited not in (None, True, False):
                raise corrupt(name, f"damaged index: bad edited mark {edited!r}")
            listed = listed_sections(index, name)
            if listed and listed[-1] == BLOCKS_STUB:  # for older readers (format 2.5)
                listed = listed[:-1]
            sections = [_parse_section(i, s, end, name, base) for i, s in enumerate(listed)]
    except CorruptFileError:
        raise
    except Exception as exc:  # malformed JSON, wrong types, bad codec...
        raise _damaged_index(name, exc) from None
    if not (isinstance(root, int) and 0 <= root < len(sections)):
        raise corrupt(name, f"damaged index: bad root section {root!r}")
    return root, info, sections, edited


def listed_sections(index, name):
    """The section list of the parsed index ``index``: its ``"sections"``,
    or its ``"packed_sections"`` decoded (format 2.2; its ``"sections"``
    is then :data:`~.layout.PACKED_STUB`, for older readers).

    Raises
    ------
    CorruptFileError
        For a packed list that is damaged, or claims to decode to more than
        :data:`~.layout.SECTIONS_EXPANSION` times its size or than
        :data:`~.layout.PACK_SECTIONS_UP_TO` (refused before decoding).
    """
    if "packed_sections" not in index:
        return index["sections"]
    packed, size = index["packed_sections"], index.get("sections_size")
    if type(packed) is not str or type(size) is not int or size < 0:
        raise corrupt(name, "damaged index: a bad packed section list")
    try:
        stored = binascii.a2b_base64(packed, strict_mode=True)
    except binascii.Error as exc:
        raise corrupt(name, f"damaged index: a packed section list that is not base64 "
                            f"({exc})") from None
    if not packed_sections_accepted(size, len(stored)):
        raise corrupt(name, f"damaged index: a packed section list of {len(stored)} bytes "
                            f"claims to decode to {size}, more than writers pack (at most "
                            f"{SECTIONS_EXPANSION} times its size, and {PACK_SECTIONS_UP_TO} "
                            f"bytes): forged or damaged")
    listed = bytearray(size)
    try:
        codec_from_config(SECTIONS_CODEC).decode_into(stored, memoryview(listed))
    except CorruptFileError as exc:
        raise corrupt(name, f"damaged index: its packed section list ({exc})") from None
    return json.loads(listed)


def _damaged_index(name, exc):
    return corrupt(name, f"damaged index ({type(exc).__name__}: {exc})")


def _uint(value):
    if type(value) is not int or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value


def _parse_section(i, s, end, name, base):
    # Run once per section of the index (a model may hold thousands): the
    # checks are inline, with _uint called only to word a failure.
    section = Section()
    section.index = i
    section.offset = offset = s["offset"]
    if type(offset) is not int or offset < 0:
        _uint(offset)
    config = s["codec"]
    section.codec = codec = None if config is None else codec_from_config(config)
    # Only raw data is aligned (the sections a map may view).
    aligned = codec is None and s.get("raw_size", 1)
    layout = s.get("layout", "run")
    if offset < HEADER.size or aligned and offset % ALIGN and layout != "placed":
        raise corrupt(name, f"section {i} at a bad offset {base + offset}")
    if layout == "run":
        section.gap = 0
    elif layout == "records" and codec is not None:
        section.gap = RECORD_SIZE
    elif layout == "placed":
        section.gap = None
    else:
        raise corrupt(name, f"section {i} has a bad layout {layout!r}")
    section.typesize = typesize = s["typesize"]
    if type(typesize) is not int or typesize < 0:
        _uint(typesize)
    section.meta = meta = s["meta"]
    if type(meta) is not dict:
        raise corrupt(name, f"section {i} meta is not a mapping")
    section.piece_size = section._pieces = None
    table = s["chunks"]
    if type(table) is not str:
        raise corrupt(name, f"section {i} has no chunk table")
    section.raw_size = raw_size = s["raw_size"]
    if type(raw_size) is not int or raw_size < 0:
        _uint(raw_size)
    section.stored_size = stored_size = s["stored_size"]
    if type(stored_size) is not int or stored_size < 0:
        _uint(stored_size)
    if codec is None and raw_size != stored_size:
        raise corrupt(name,
                      f"section {i} is inconsistent: raw, yet {raw_size} bytes "
                      f"stored in {stored_size}")
    if offset + stored_size > end and section.gap is not None:
        raise corrupt(name,
                      f"section {i} runs to offset {base + offset + stored_size}, "
                      f"past the data end at offset {base + end} (truncated?)")
    section._chunks = None
    section._check_chunks = (table, end, name, base)
    pieces = s.get("pieces")
    if pieces is None:
        return section
    section.piece_size = piece_size = s.get("piece_size")
    if type(pieces) is not str or type(piece_size) is not int or not 0 < piece_size:
        raise corrupt(name, f"section {i} has bad piece checksums")
    section._pieces = (pieces, name)
    return section


def _bad_pieces(section, name):
    return corrupt(name, f"damaged index: section {section.index}'s piece checksums do "
                         f"not match its chunks")


#: The JSON decoder's own scanner: a section's table is a short text, on
#: which ``json.loads`` spends more in Python than in decoding.
_scan_json = json.JSONDecoder().scan_once


def _parse_json(data):
    """The JSON text ``data`` (bytes) parsed: by the decoder's own scanner
    when it is UTF-8 that the scanner reads to its end, else (another
    encoding, surrounding whitespace, an error to word) by ``json.loads``,
    whose Python layers cost more than the scan of a small index."""
    try:
        text = str(data, "utf-8")
        parsed, stop = _scan_json(text, 0)
        if stop == len(text):
            return parsed
    except Exception:  # noqa: BLE001, S110 - json.loads decides, and says what is wrong
        pass
    return json.loads(bytes(data))


def _checked_chunks(section, table, end, name, base):
    """The chunks of a section whose table was left as text: checked now."""
    try:
        try:
            parsed, stop = _scan_json(table, 0)
            if stop != len(table):
                raise ValueError
        except Exception:  # noqa: BLE001 - json.loads says what is wrong
            parsed = json.loads(table)
        chunks, raw_size, stored_size = _parse_table(section, parsed, end, name, base)
    except CorruptFileError:
        raise
    except Exception as exc:  # wrong types in the table
        raise _damaged_index(name, exc) from None
    if (raw_size, stored_size) != (section.raw_size, section.stored_size):
        raise corrupt(name,
                      f"damaged index: section {section.index}'s chunks hold {raw_size} "
                      f"bytes in {stored_size}, its totals say {section.raw_size} in "
                      f"{section.stored_size}")
    return chunks


def _parse_table(section, table, end, name, base):
    """Check a chunk table: ``(chunks, raw_size, stored_size)``."""
    i = section.index
    pos = section.offset
    chunks = []
    raw_size = stored_size = 0
    placed = section.gap is None
    for entry in table:
        if placed:
            # Each chunk where its own entry says (format 2.4).
            length, raw_length, digest, flag, pos = entry
            if type(pos) is not int or pos < HEADER.size or pos + length > end:
                raise corrupt(name, f"section {i} has a chunk outside the data: {entry}")
        else:
            length, raw_length, digest, flag = entry
        # Inline checks (a table may list thousands of chunks); _uint words a failure.
        if not (type(length) is int and type(raw_length) is int and type(digest) is int
                and type(flag) is int and length >= 0 and digest >= 0):
            length, raw_length, digest, flag = (_uint(v) for v in entry)
        if not 0 < raw_length <= MAX_CHUNK_SIZE or flag not in (ENCODED, VERBATIM):
            raise corrupt(name, f"section {i} has a bad chunk entry {entry}")
        if (flag == VERBATIM and length != raw_length
                or flag == ENCODED and section.codec is None):
            raise corrupt(name, f"section {i} has an inconsistent chunk entry {entry}")
        if flag == ENCODED:
            bound = section.codec.max_raw_size(length)
            if bound is not None and raw_length > bound:
                raise corrupt(name,
                              f"section {i} claims a {section.codec.codec_id} chunk of "
                              f"{length} bytes decodes to {raw_length}, more than that "
                              f"codec can produce ({bound}): forged or damaged index")
        chunks.append(new_chunk(Chunk, (pos, length, raw_length, digest, flag)))
        raw_size += raw_length
        stored_size += length
        if placed:
            continue
        pos += length + section.gap
    if placed:
        return chunks, raw_size, stored_size
    if chunks:
        pos -= section.gap
    if pos > end:
        raise corrupt(name, f"section {i} runs to offset {base + pos}, past the data end "
                            f"at offset {base + end} (truncated?)")
    return chunks, raw_size, stored_size
