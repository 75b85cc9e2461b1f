"""Compact dumps: a dump holding nothing but a raw pickle stream in one chunk,
whose index is that chunk's checksum rather than JSON.

Small objects without arrays (a message, a request's log record) are the
case: a JSON index would outweigh the pickle stream several times over, and
building and parsing it would cost more than pickling. The layout is a
format-2 dump like any other (``docs/format.rst``)::

    header        64 bytes   flags = COMPACT
    DATA record   8 + n      the pickle stream, n bytes (one verbatim chunk)
    END record    8 + 40     index: XXH3-64 of the pickle stream (8 bytes);
                             trailer (index offset and length, its checksum)

Every byte that carries information is covered by a checksum, as in the
JSON form: the stream by the index, the index by the trailer.
"""

import struct

from .framing import DATA, END, RECORD
from .layout import (END_MAGIC, FORMAT_MAJOR, FORMAT_MINOR, HEADER, MAGIC, RECORD_SIZE,
                     TRAILER, VERBATIM, Chunk, Section, checksum, corrupt)

#: Header flag: the index is :data:`INDEX`, the dump holds one raw pickle stream.
COMPACT = 2
#: The compact index: the XXH3-64 checksum of the pickle stream.
INDEX = struct.Struct("<Q")
#: Where the pickle stream starts: after the header and its record header.
STREAM_AT = HEADER.size + RECORD_SIZE
#: Bytes a compact dump adds to its pickle stream.
OVERHEAD = STREAM_AT + RECORD_SIZE + INDEX.size + TRAILER.size

_HEAD = HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, COMPACT)
_DATA = DATA << 56
_END_RECORD = RECORD.pack(END << 56 | INDEX.size + TRAILER.size)
_LAST = struct.Struct("<8sQ")  # the END record's header and the index


def compact_dump(pickled):
    """The bytes of a compact dump of the pickle stream ``pickled``."""
    n = len(pickled)
    index = INDEX.pack(checksum(pickled))
    at = STREAM_AT + n + RECORD_SIZE  # where the index starts
    return b"".join((_HEAD, RECORD.pack(_DATA | n), pickled, _END_RECORD, index,
                     TRAILER.pack(at, INDEX.size, checksum(index), END_MAGIC)))


def compact_stream(data, verify=True):
    """The pickle stream of ``data`` if it is exactly one intact compact
    dump (a slice of ``data``), else None.

    The quick path of :func:`cpersist.loads`: anything else, damage
    included, is left to the container reader, which says what is wrong.
    """
    size = len(data)
    if size < OVERHEAD or data[:16] != _HEAD[:16]:
        return None
    (record,) = RECORD.unpack_from(data, HEADER.size)
    n = record ^ _DATA
    at = STREAM_AT + n + RECORD_SIZE
    if n >= 1 << 56 or at + INDEX.size + TRAILER.size != size:
        return None
    end_record, digest = _LAST.unpack_from(data, at - RECORD_SIZE)
    trailer = TRAILER.unpack_from(data, at + INDEX.size)
    if end_record != _END_RECORD or trailer[:2] != (at, INDEX.size) or trailer[3] != END_MAGIC:
        return None
    stream = data[STREAM_AT:STREAM_AT + n]
    if verify and (checksum(data[at:at + INDEX.size]) != trailer[2]
                   or checksum(stream) != digest):
        return None
    return stream


def parse_compact_index(data, digest, offset, name):
    """``(root, info, sections)`` of a compact dump whose index, ``data``,
    starts at ``offset``: one raw section, the pickle stream."""
    if checksum(data) != digest or len(data) != INDEX.size:
        raise corrupt(name, "damaged index (checksum mismatch)")
    n = offset - RECORD_SIZE - STREAM_AT
    if n < 1:
        raise corrupt(name, f"damaged trailer: a compact index at {offset}")
    section = Section()
    section.index = 0
    section.offset = STREAM_AT
    section.codec = None
    section.typesize = 1
    section.raw_size = section.stored_size = n
    section.gap = 0
    section._chunks = [Chunk(STREAM_AT, n, n, INDEX.unpack(data)[0], VERBATIM)]
    section._check_chunks = None
    section.meta = {"kind": "pickle"}
    return 0, {}, [section]
