"""Compact dumps: a dump holding nothing but a raw pickle stream in one chunk,
described by its place alone rather than by a JSON index.

Small objects without arrays (a message, a request's log record) are the
case: a JSON index would outweigh the pickle stream several times over, and
building and parsing it would cost more than pickling. The layout is a
format-2 dump like any other (``docs/format.rst``)::

    header        64 bytes   flags = COMPACT
    DATA record   8 + n      the pickle stream, n bytes (one verbatim chunk)
    END record    8 + 32     an empty index, then the trailer, whose checksum
                             field holds the XXH3-64 of the pickle stream

The stream is covered by a checksum as in the JSON form; the index, being
empty, needs none.
"""

import struct

# The C function itself, not layout.checksum (the same XXH3-64): the quick
# path below is a handful of calls, and a Python wrapper would add one.
from xxhash import xxh3_64_intdigest as _xxh3_64

from .framing import DATA, END, RECORD
from .index import Section
from .layout import (END_MAGIC, FORMAT_MAJOR, FORMAT_MINOR, HEADER, MAGIC, MAX_CHUNK_SIZE,
                     RECORD_SIZE, TRAILER, VERBATIM, Chunk, corrupt)

#: Header flag: the index is empty, the dump holds one raw pickle stream.
COMPACT = 2
#: Where the pickle stream starts: after the header and its record header.
STREAM_AT = HEADER.size + RECORD_SIZE
#: Bytes a compact dump adds to its pickle stream.
OVERHEAD = STREAM_AT + RECORD_SIZE + TRAILER.size

_HEAD = HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, COMPACT)
_HEAD16 = _HEAD[:16]  # magic, version, flags
#: The first 16 bytes that sort after those of every compact dump: ``bytes``
#: ``b`` of 16 bytes or more start with _HEAD16 exactly when
#: ``_HEAD16 <= b < _AFTER_HEAD16``, compared without slicing ``b``.
_AFTER_HEAD16 = (int.from_bytes(_HEAD16, "big") + 1).to_bytes(16, "big")
#: The DATA record's header, from the stream's length (below 2**32) and the
#: record type (in the top byte): two small ints pack quicker than one large.
_DATA = struct.Struct("<I3xB")
assert _DATA.size == RECORD_SIZE and MAX_CHUNK_SIZE < 1 << 32
# Packed as bytes: packing a large int costs more than copying 8 bytes.
_END = RECORD.pack(END << 56 | TRAILER.size)
#: What follows the stream: the END record header, then the trailer (index
#: offset, index length 0 as padding, checksum, end magic).
_BACK = struct.Struct("<8sQ8xQ8s")
assert _BACK.size == RECORD_SIZE + TRAILER.size
#: A compact dump's (empty) index starts here plus the stream's length.
_INDEX_AT = STREAM_AT + RECORD_SIZE
#: Up to this size a stream is sliced (copied) out of a ``bytes``, rather
#: than viewed: unpickling a small ``bytes`` is quicker.
COPY_UP_TO = 1 << 16
#: The header and the DATA record's header, packed at once.
_HEAD_AND_DATA = struct.Struct(f"<{HEADER.size}s{_DATA.format[1:]}")
assert _HEAD_AND_DATA.size == STREAM_AT
#: :func:`compact_dump` joins the parts of a stream this long or longer.
_JOIN_FROM = 4096
# Bound once: these are most of a small object's framing, called per dump.
_join = b"".join
_pack_head = _HEAD_AND_DATA.pack
_pack_back = _BACK.pack


def compact_dump(pickled):
    """The bytes of a compact dump of the pickle stream ``pickled``.

    Specialised for speed, as :func:`cpersist.dumps` of a small object
    calls it: a short stream is concatenated (quicker than a join, which a
    long one needs: concatenating copies it twice)."""
    n = len(pickled)
    if n < _JOIN_FROM:
        return (_pack_head(_HEAD, n, DATA) + pickled
                + _pack_back(_END, _INDEX_AT + n, _xxh3_64(pickled), END_MAGIC))
    return _join((_pack_head(_HEAD, n, DATA), pickled,
                  _pack_back(_END, _INDEX_AT + n, _xxh3_64(pickled), END_MAGIC)))


#: The sizes of the dumps :func:`small_bytes_stream` takes: a stream of 1 to
#: :data:`COPY_UP_TO` bytes.
_SMALLEST, _LARGEST_COPIED = OVERHEAD + 1, OVERHEAD + COPY_UP_TO
# small_bytes_stream writes these as literals, a constant being quicker to
# load than a global: where the stream starts, where it ends counted from the
# end, the trailer's size, the sizes above, and where the DATA record's header
# is and its value less the dump's size.
assert (STREAM_AT, -_BACK.size, TRAILER.size) == (72, -40, 32)
assert (_SMALLEST, _LARGEST_COPIED) == (113, 65648)
assert (STREAM_AT - RECORD_SIZE, (DATA << 56) - OVERHEAD) == (64, (1 << 56) - 112)
#: A record header read in place: quicker than a slice compared with a packed one.
_record_at = RECORD.unpack_from


def small_bytes_stream(data):
    """:func:`compact_stream` for a ``bytes`` object of at most
    :data:`COPY_UP_TO` bytes of stream, else None: the quick path of
    :func:`cpersist.loads` of a small object, written out for speed (its
    offsets are checked against the layout above)."""
    if 113 <= (size := len(data)) <= 65648 and _HEAD16 <= data < _AFTER_HEAD16:
        stream = data[72:-40]
        if (data[-40:] == _pack_back(_END, size - 32, _xxh3_64(stream), END_MAGIC)
                and _record_at(data, 64)[0] == size + ((1 << 56) - 112)):
            return stream
    return None


#: What a caller that checks a small compact dump of ``bytes`` itself needs
#: (the restricted load's quick path, :func:`cpersist.pickling.quick.compact_quick_load`,
#: which a call to :func:`small_bytes_stream` would cost a tenth of its time):
#: the bytes before the stream, ``struct.pack(HEAD_FORMAT, HEAD, n, DATA)``
#: for a stream of ``n`` bytes, and the rest from :func:`compact_split`, its
#: checks worked out once per size.
HEAD, HEAD_FORMAT = _HEAD, _HEAD_AND_DATA.format
#: The END record and the trailer up to the checksum (index offset, length 0).
_BEFORE_CHECKSUM = _BACK.size - 16
assert _BACK.format[-3:] == "Q8s" and len(END_MAGIC) == 8


def compact_split(n):
    """``(split, before_checksum)`` for a compact dump of a stream of ``n``
    bytes: ``split(data)`` (``data`` of exactly that size) gives ``(stream,
    after, checksum, end_magic)``, the bytes from the stream on; they are
    those of an intact dump exactly when ``after == before_checksum``,
    ``checksum == stream_checksum(stream)`` and ``end_magic == END_MAGIC``:
    every byte after the stream is compared. One call to ``split`` costs less
    than the slices and the packing of :func:`small_bytes_stream`; making it
    costs more, so that the caller keeps it for the next dump of the size."""
    split = struct.Struct(f"<{STREAM_AT}x{n}s{_BEFORE_CHECKSUM}sQ8s").unpack
    before_checksum = _pack_back(_END, _INDEX_AT + n, 0, END_MAGIC)[:_BEFORE_CHECKSUM]
    return split, before_checksum


stream_checksum = _xxh3_64
assert _INDEX_AT == STREAM_AT + RECORD_SIZE
assert struct.calcsize(compact_split(1)[0].__self__.format) == OVERHEAD + 1


def compact_stream(data):
    """The pickle stream of ``data`` if it is exactly one intact compact
    dump (a slice of ``data``, a view where ``data`` is a large ``bytes``),
    else None.

    The quick path of :func:`cpersist.loads`: the header's first 16 bytes
    (magic, version, flags), the DATA record's header and the bytes after
    the stream are compared with those :func:`compact_dump` would write for
    it, which checks its checksum; the header's reserved bytes are not read,
    as the container reader does not. Anything else, damage included, is
    left to the container reader, which says what is wrong.
    """
    n = len(data) - OVERHEAD
    if n < 1 or data[:16] != _HEAD16 or _record_at(data, STREAM_AT - RECORD_SIZE)[0] != (
            DATA << 56 | n):
        return None
    if n > COPY_UP_TO and type(data) is bytes:
        data = memoryview(data)
    stream = data[STREAM_AT:STREAM_AT + n]
    if data[STREAM_AT + n:] != _pack_back(_END, _INDEX_AT + n, _xxh3_64(stream), END_MAGIC):
        return None
    return stream


def parse_compact_index(data, digest, offset, name, base=0):
    """``(root, info, sections)`` of a compact dump whose (empty) index
    starts at ``offset``, ``digest`` being the trailer's checksum: one raw
    section, the pickle stream. ``base``: where the dump starts in its file
    (messages give file offsets)."""
    n = offset - RECORD_SIZE - STREAM_AT
    if len(data) or n < 1:
        raise corrupt(name, f"damaged trailer: a compact index of {len(data)} bytes at "
                            f"offset {base + offset}")
    section = Section()
    section.index = 0
    section.offset = STREAM_AT
    section.codec = None
    section.typesize = 1
    section.raw_size = section.stored_size = n
    section.gap = 0
    section._chunks = [Chunk(STREAM_AT, n, n, digest, VERBATIM)]
    section._check_chunks = None
    section.piece_size = section._pieces = None
    section.meta = {"kind": "pickle"}
    return 0, {}, [section]
