"""Where a dump ends: the records of format 2, walked over a random-access
source or copied out of a stream, so that a reader at the start of a dump
reads exactly its bytes and leaves whatever follows it.

After the 64-byte header, a format-2 dump is a sequence of records, each an
8-byte little-endian record header (kind in the top byte, payload length in
the low 56 bits) and its payload; the END record, whose payload is the
index and the trailer, is the last. A reader that has read a record header
knows where the next one is, so it never needs the end of the stream.
"""

import struct

from ..exceptions import CorruptFileError
from .layout import (ALIGN, END_MAGIC, FORMAT_MAJOR, HEADER, MAGIC, PAGE, RECORD_SIZE, TRAILER,
                     corrupt)
from .tiny import TINY_MAGIC, head_bytes_needed, tiny_size

RECORD = struct.Struct("<Q")
assert RECORD.size == RECORD_SIZE
#: Record kinds. DATA: the payload follows the record header. ALIGNED: zero
#: bytes follow the header up to the next multiple of 64, where the payload
#: starts (raw arrays, which a memory map views). END: the index and the
#: trailer, the last record of a dump.
DATA, ALIGNED, END = 1, 2, 3
_KINDS = (DATA, ALIGNED, END)
_LENGTH_BITS = 56
_LENGTH_MASK = (1 << _LENGTH_BITS) - 1
_unpack_record = RECORD.unpack_from
#: Bytes copied from a stream at a time.
COPY_BLOCK = 1 << 20
#: Bytes read at once while walking a random-access source's records: the
#: record headers of small sections (a model's many small arrays) come
#: several to a read.
WALK_BLOCK = 64 << 10
#: Bytes read at once at the header of a record after one longer than
#: :data:`WALK_BLOCK`: the header and an aligned record's zeros. The record
#: after a large section is as likely to be large, and a block of its
#: payload read with its header costs more than the read.
WALK_AFTER_LARGE = ALIGN


#: For each position modulo 64, the struct packing an aligned record's header
#: and the zeros after it in one call: a file of many small arrays opens a
#: record per array.
_ALIGNED_HEADS = [struct.Struct(f"<Q{-(at + RECORD_SIZE) % ALIGN}x") for at in range(ALIGN)]


def record_header(kind, length, position):
    """The bytes that open a record at ``position``: its header, then for an
    ALIGNED record the zeros up to its payload."""
    if kind == ALIGNED:
        return _ALIGNED_HEADS[position % ALIGN].pack(ALIGNED << _LENGTH_BITS | length)
    return RECORD.pack(kind << _LENGTH_BITS | length)


def padding_before(position):
    """The bytes to write at ``position`` so that an ALIGNED record opened
    right after them has its payload at a multiple of :data:`PAGE`: nothing
    where it already would, else a DATA record of zeros that no section
    refers to (readers walk over it as over any record)."""
    # An ALIGNED header at q has its payload at the multiple of 64 at or
    # after q + 8: q = k * PAGE - 8 puts it at k * PAGE.
    if (position + RECORD_SIZE + ALIGN - 1) // ALIGN * ALIGN % PAGE == 0:
        return b""
    length = -(position + 2 * RECORD_SIZE) % PAGE
    return RECORD.pack(DATA << _LENGTH_BITS | length) + bytes(length)


def parse_record(data, position, name, base=0, at=0):
    """``(kind, payload start, payload end)`` of the record at ``position``
    (from the start of the dump, which is at ``base`` in its file: messages
    give file offsets), whose header is at ``at`` in ``data``."""
    (value,) = _unpack_record(data, at)
    kind = value >> _LENGTH_BITS
    if kind not in _KINDS:
        raise corrupt(name, f"damaged record header at offset {base + position} "
                            f"(kind {kind})")
    start = position + RECORD_SIZE
    if kind == ALIGNED:
        start += -start % ALIGN
    return kind, start, start + (value & _LENGTH_MASK)


def parse_record_quietly(head):
    """``(kind, payload length)`` of a record header."""
    (value,) = RECORD.unpack(head)
    return value >> _LENGTH_BITS, value & _LENGTH_MASK


class TruncatedDump(CorruptFileError):
    """A dump whose records run past the end of its source: cut short, as a
    write interrupted leaves it (rather than damaged)."""


def walk_records(read, available, name, base=0):
    """Where the dump ends, found by walking its records from the header.

    ``read(offset, length)`` reads the source; ``available`` is how many
    bytes it has, from the start of the dump; ``base`` is where the dump
    starts in its file, to give file offsets in messages.
    """
    position = HEADER.size
    window, window_at, block = b"", position, WALK_BLOCK
    while True:
        if position + RECORD_SIZE > available:
            raise TruncatedDump(f"{name}: truncated: the dump's records stop at offset "
                                f"{base + position} without an end record (an "
                                f"interrupted write?)")
        at = position - window_at
        if at + RECORD_SIZE > len(window):
            window_at, at = position, 0
            window = read(position, min(block, available - position))
        kind, _, end = parse_record(window, position, name, base, at)
        if end > available:
            raise TruncatedDump(f"{name}: truncated: a record at offset {base + position} "
                                f"runs to offset {base + end}, past the end of the file at offset "
                                f"{base + available} (an interrupted write?)")
        if kind == END:
            if end - position < RECORD_SIZE + TRAILER.size:
                raise corrupt(name, f"damaged end record at offset {base + position}")
            _check_end(read, window, window_at, position, end, name, base)
            return end
        block = WALK_BLOCK if end - position <= WALK_BLOCK else WALK_AFTER_LARGE
        position = end


def _check_end(read, window, window_at, position, end, name, base):
    """Refuse an END record at ``position`` whose payload does not end with
    the trailer's magic: a record header damaged into an END's, or an END's
    length changed, which a reader would otherwise take for the dump's end
    and report what lies there (a damaged trailer, or bytes that are not
    the next dump) rather than the header."""
    at = end - len(END_MAGIC)
    if at + len(END_MAGIC) <= window_at + len(window):
        magic = window[at - window_at:at - window_at + len(END_MAGIC)]
    else:
        magic = read(at, len(END_MAGIC))
    if bytes(magic) != END_MAGIC:
        raise corrupt(name, f"damaged record header at offset {base + position} (an end "
                            f"record not ended by a trailer)")


def copy_dump(stream, out, name):
    """Copy one dump from the non-seekable ``stream`` into ``out``.

    Reads exactly the dump's bytes: the header, then record by record up to
    the END record, each record's header saying how long it is. Memory
    stays at one block. What is not a cpersist dump, a dump of a format this
    version does not read, or one with a damaged record header is copied to
    the end of the stream, for the reader to report on (as pickle would, for a
    stream it cannot parse).
    """
    head = _read_up_to(stream, len(TINY_MAGIC))
    if head == TINY_MAGIC:
        _copy_tiny(stream, out, head, name)
        return
    head += _read_up_to(stream, HEADER.size - len(head))
    out.write(head)
    if len(head) < HEADER.size:
        return
    major = HEADER.unpack(head)[1]
    if not head.startswith(MAGIC) or major < 2 or major > FORMAT_MAJOR:
        _copy(stream, out, None)  # the reader refuses its version
        return
    position = HEADER.size
    while True:
        head = _read_up_to(stream, RECORD_SIZE)
        out.write(head)
        if len(head) < RECORD_SIZE:
            return
        try:
            kind, _, end = parse_record(head, position, name)
        except CorruptFileError:
            _copy(stream, out, None)
            return
        if _copy(stream, out, end - position - RECORD_SIZE) or kind == END:
            return
        position = end


def _copy_tiny(stream, out, head, name):
    """Copy the rest of a tiny dump whose magic, ``head``, was read: its
    length is read byte by byte, so that nothing after it is."""
    while len(head) < head_bytes_needed():
        byte = _read_up_to(stream, 1)
        head += byte
        if not byte or len(head) > len(TINY_MAGIC) + 1 and not byte[0] & 0x80:
            break
    out.write(head)
    try:
        size = tiny_size(head, name)
    except CorruptFileError:
        _copy(stream, out, None)  # for the reader to report on
        return
    _copy(stream, out, size - len(head))


def _read_up_to(stream, size):
    """Up to ``size`` bytes of ``stream``, fewer only at its end."""
    data = b""
    while len(data) < size:
        piece = stream.read(size - len(data))
        if not piece:
            break
        data += piece
    return data


def _copy(stream, out, size):
    """Copy ``size`` bytes (all, if None); True if the stream ended first."""
    while size is None or size > 0:
        piece = stream.read(COPY_BLOCK if size is None else min(size, COPY_BLOCK))
        if not piece:
            return size is not None
        out.write(piece)
        if size is not None:
            size -= len(piece)
    return False
