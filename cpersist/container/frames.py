"""The byte layout of a growing file (format 2.3): a file that grows by
commits, each one *frame* appended after the others, whose state is every
frame up to the last one complete. A record log is the first kind of
growing file: one frame per record.

The layout is specified in ``docs/format.rst``::

    header      64 bytes   magic, format 2.3, flags = GROWING
    preamble    END record: a stub index that readers of format 2.2 and
                earlier refuse, naming a codec they lack, then a trailer
    frames      each: record header (kind, length), payload, frame trailer
                (where the frame starts, XXH3-64 of what it covers)

A frame is complete when its bytes are all there and its trailer checks
out; anything after the last complete frame is a torn tail (an append cut
short), which readers ignore and writers cut off. Nothing here reads or
writes a file: callers hand over bytes, or a ``read(offset, length)``.
"""

import struct

from xxhash import xxh3_64_intdigest as _xxh3_64

from ..exceptions import CorruptFileError, UnsupportedVersionError
from .framing import END, RECORD
from .layout import ALIGN, END_MAGIC, HEADER, MAGIC, RECORD_SIZE, TRAILER

#: The format version a growing file's header states.
GROWING_MINOR = 3
#: Header flag: the file is a growing file (a record log).
GROWING = 4
#: Frame kinds. ENTRY: one record whose payload is its pickle stream (a
#: record without arrays to store as sections). ENTRY_DUMP: one record
#: whose payload, at the next multiple of 64 after the record header, is a
#: whole dump of the record, its arrays sections that can be mapped.
ENTRY, ENTRY_DUMP = 4, 5
ENTRY_KINDS = (ENTRY, ENTRY_DUMP)
#: Frame kind of a growing object file (format 2.4): a *commit*, whose
#: payload, at the next multiple of 64 after the record header, holds the
#: records of the chunks it adds, then an END record: the index of the
#: object's whole state (offsets from the start of the file) and a dump's
#: trailer. The last complete commit is the file's state.
COMMIT = 6
COMMIT_KINDS = (COMMIT,)
#: Frame kinds whose payload starts on a 64-byte boundary.
_ALIGNED_KINDS = (ENTRY_DUMP, COMMIT)
#: The format version a growing object file's header states.
OBJECT_MINOR = 4
_LENGTH_BITS = 56
_LENGTH_MASK = (1 << _LENGTH_BITS) - 1
#: The length an ENTRY_DUMP frame's header holds while its dump is being
#: written (its length is not known before): no reader takes it as complete.
PENDING = _LENGTH_MASK
#: Where the frame starts (from the start of the file), then the XXH3-64 of
#: what the frame's checksum covers (see :func:`frame_digest`).
FRAME_TRAILER = struct.Struct("<QQ")
#: The stub index of the preamble: one section of a codec no reader of
#: format 2.2 or earlier has, so that such a reader refuses the file naming
#: it (as for any codec it lacks) rather than reading anything.
STUB_INDEX = (b'{"edited":false,"format":[2,3],"root":0,"sections":[{"offset":64,'
              b'"codec":{"id":"format-2.3-record-log","level":1}}],"info":{"layout":'
              b'"record log: read it with a cpersist that reads format 2.3"}}')
_PREAMBLE_AT = HEADER.size + RECORD_SIZE
#: The stub index of a growing object file's preamble (format 2.4), which
#: readers of format 2.2 and earlier refuse as the record log's.
OBJECT_STUB_INDEX = (b'{"edited":false,"format":[2,4],"root":0,"sections":[{"offset":64,'
                     b'"codec":{"id":"format-2.4-growing-object","level":1}}],"info":'
                     b'{"layout":"growing object: read it with a cpersist that reads '
                     b'format 2.4"}}')


def _file_start(minor, stub):
    return b"".join((
        HEADER.pack(MAGIC, 2, minor, GROWING),
        RECORD.pack(END << _LENGTH_BITS | (len(stub) + TRAILER.size)),
        stub,
        TRAILER.pack(_PREAMBLE_AT, len(stub), _xxh3_64(stub), END_MAGIC)))


#: The first bytes of every record log: the header and the preamble.
FILE_START = _file_start(GROWING_MINOR, STUB_INDEX)
#: Where the first frame starts.
FRAMES_AT = len(FILE_START)
#: The first bytes of every growing object file, and where its first commit starts.
OBJECT_FILE_START = _file_start(OBJECT_MINOR, OBJECT_STUB_INDEX)
OBJECT_FRAMES_AT = len(OBJECT_FILE_START)
_ENTRY_HEAD = RECORD.pack
_join = b"".join
_pack_trailer = FRAME_TRAILER.pack


class GrowingFileFound(CorruptFileError):
    """Raised by the dump reader on meeting a growing file, which the callers
    that read record logs catch to read it as one."""


class DumpsFollow(GrowingFileFound):
    """Raised by the dump reader of a path on meeting another dump (or the
    start of one) after the first: the file is read as a sequence of dumps,
    record by record, as a record log is."""


def entry_frame(stream, start):
    """The bytes of an ENTRY frame at ``start`` holding the pickle stream
    ``stream``."""
    covered = _join((_ENTRY_HEAD(ENTRY << _LENGTH_BITS | (len(stream) + FRAME_TRAILER.size)),
                     stream, start.to_bytes(8, "little")))
    return covered + _xxh3_64(covered).to_bytes(8, "little")


def dump_frame_head(start):
    """``(bytes, payload start)``: an ENTRY_DUMP frame's header, its length
    :data:`PENDING`, and the zeros up to its payload's 64-byte boundary."""
    payload = start + RECORD_SIZE
    payload += -payload % ALIGN
    return _ENTRY_HEAD(ENTRY_DUMP << _LENGTH_BITS | PENDING) + bytes(
        payload - start - RECORD_SIZE), payload


def dump_frame_header(dump_size):
    """The header of a finished ENTRY_DUMP frame whose dump is
    ``dump_size`` bytes long."""
    return _ENTRY_HEAD(ENTRY_DUMP << _LENGTH_BITS | (dump_size + FRAME_TRAILER.size))


def dump_frame_trailer(start, dump_size, dump_trailer):
    """The frame trailer of an ENTRY_DUMP frame at ``start``: its checksum
    covers the frame's header, the dump's own trailer (which covers its
    index, which covers every chunk) and the frame's start."""
    return _pack_trailer(start, frame_digest(dump_frame_header(dump_size), dump_trailer, start))


def frame_digest(header, covered, start):
    """The checksum of a frame: XXH3-64 of its header, the bytes it covers
    and its start as 8 little-endian bytes."""
    return _xxh3_64(_join((header, covered, start.to_bytes(8, "little"))))


def parse_frame_head(head, start):
    """``(kind, payload start, frame end)`` of the frame whose record header
    ``head`` is at ``start``; the end is None while the frame's length is
    :data:`PENDING`."""
    (value,) = RECORD.unpack(head)
    kind, length = value >> _LENGTH_BITS, value & _LENGTH_MASK
    payload = start + RECORD_SIZE
    if kind in _ALIGNED_KINDS:
        payload += -payload % ALIGN
    if length == PENDING or length < FRAME_TRAILER.size:
        return kind, payload, None
    return kind, payload, payload + length


def check_file_start(data, name):
    """Check the header and preamble of a growing file (``data``: its first
    :data:`FRAMES_AT` bytes or fewer). Raises CorruptFileError, or
    UnsupportedVersionError for a growing file of a later minor version,
    whose frames this version may not know."""
    if len(data) < HEADER.size or bytes(data[:len(MAGIC)]) != MAGIC:
        raise CorruptFileError(f"{name}: not a cpersist record log")
    _, major, minor, flags = HEADER.unpack(bytes(data[:HEADER.size]))
    if major > 2 or (major == 2 and minor > OBJECT_MINOR and flags & GROWING):
        # A later version may add frames this one would take for a torn tail.
        raise UnsupportedVersionError(
            f"{name}: written in cpersist format {major}.{minor}, newer than the 2.4 this "
            f"version reads and appends to as a growing file; upgrade cpersist")
    if not flags & GROWING:
        raise CorruptFileError(f"{name}: a cpersist dump, not a record log")
    if minor == OBJECT_MINOR:
        raise CorruptFileError(f"{name}: a growing object file (format 2.4), not a record "
                               f"log: cpersist.open(path, 'a') appends rows to its arrays")
    if bytes(data[:FRAMES_AT]) != FILE_START:
        raise CorruptFileError(f"{name}: damaged record log: its header or preamble is not "
                               f"the one format 2.3 writes")


class Walk:
    """Where the frames of a growing file lie, found by reading their record
    headers only (their payloads are not read).

    Attributes
    ----------
    starts : list of int
        Where each complete frame starts; frame ``i`` ends where frame
        ``i + 1`` starts, the last at :attr:`end`.
    end : int
        Where the last complete frame ends: the file's committed size.
    size : int
        The file's size when walked: bytes from :attr:`end` to it are a torn
        tail (an append cut short), or bytes that are not frames.
    foreign_at : int or None
        Where a frame of a kind this version does not know starts, if the
        walk stopped at one that is complete (damage, or bytes appended by
        something else); None if it stopped at an incomplete frame.
    """

    __slots__ = ("starts", "end", "size", "foreign_at")

    def __init__(self, starts, end, size, foreign_at):
        self.starts, self.end, self.size, self.foreign_at = starts, end, size, foreign_at

    @property
    def torn(self):
        """Bytes after the last complete frame."""
        return self.size - self.end


#: Bytes read at once while walking frames: the headers of many small
#: records come in one read, while a frame longer than this costs a read of
#: this much for its header alone.
WALK_BLOCK = 64 << 10
#: Bytes read for a frame's header when the frame before it was longer than
#: the last read.
HEADS_READ = 512
#: Longest pickle stream writers store as an ENTRY frame: a longer one is an
#: ENTRY_DUMP, whose trailer is checked without reading the stream, so that
#: checking the frame at a log's end (at every append) reads at most this.
ENTRY_UP_TO = 1 << 20


def walk_frames(read, size, begin=FRAMES_AT, starts=None, kinds=ENTRY_KINDS):
    """Walk the frames of a growing file of ``size`` bytes from ``begin``;
    ``read(offset, length)`` reads it. The last frame's trailer is checked:
    a frame being written, or cut short, is not counted. Returns a
    :class:`Walk`; ``starts`` continues an earlier walk's list.

    A frame of a kind other than ``kinds`` (a record log's, or
    :data:`COMMIT_KINDS` for a growing object file) ends the walk: the
    caller has checked the header's version, in which such a frame is
    damage or bytes that are no frame."""
    starts = [] if starts is None else starts
    append = starts.append
    position = begin
    window, window_at = b"", position
    unpack = RECORD.unpack_from
    foreign_at = None
    shortest = FRAME_TRAILER.size
    block = WALK_BLOCK
    while position + RECORD_SIZE <= size:
        at = position - window_at
        if at + RECORD_SIZE > len(window):
            # Frames longer than a block (dumps, commits) are stepped over
            # reading little more than their headers.
            block = WALK_BLOCK if position < window_at + 2 * len(window) else HEADS_READ
            window_at, at = position, 0
            window = read(position, min(block, size - position))
            if len(window) < RECORD_SIZE:  # the file was cut meanwhile
                break
        (value,) = unpack(window, at)
        kind, length = value >> _LENGTH_BITS, value & _LENGTH_MASK
        if kind not in kinds:
            foreign_at = position
            break
        if kind == ENTRY:
            end = position + RECORD_SIZE + length
        elif kind in _ALIGNED_KINDS:
            end = position + RECORD_SIZE
            end += -end % ALIGN + length
        if length == PENDING or length < shortest or end > size:
            break
        append(position)
        position = end
    walk = Walk(starts, position, size, foreign_at)
    if walk.starts and not frame_checks_out(read, walk.starts[-1], walk.end):
        # The last frame was cut short with its bytes in place (as after a
        # power loss) or is damaged: the state is the one before it. Only
        # the last: any other frame that does not check out is damage, which
        # reading that record reports.
        walk.end = walk.starts.pop()
        walk.foreign_at = None
    return walk


def frame_checks_out(read, start, end):
    """Whether the frame from ``start`` to ``end`` has its own start and
    checksum in its trailer."""
    head = bytes(read(start, RECORD_SIZE))
    if len(head) < RECORD_SIZE:  # cut meanwhile
        return False
    kind = RECORD.unpack(head)[0] >> _LENGTH_BITS
    if kind == ENTRY:
        data = bytes(read(start, end - start))
        if len(data) != end - start:
            return False
        stored_start, digest = FRAME_TRAILER.unpack_from(data, len(data) - FRAME_TRAILER.size)
        return stored_start == start and _xxh3_64(
            memoryview(data)[:len(data) - 8]) == digest
    tail = bytes(read(end - FRAME_TRAILER.size - TRAILER.size,
                      FRAME_TRAILER.size + TRAILER.size))
    if len(tail) != FRAME_TRAILER.size + TRAILER.size:
        return False
    stored_start, digest = FRAME_TRAILER.unpack_from(tail, TRAILER.size)
    return stored_start == start and frame_digest(head, tail[:TRAILER.size], start) == digest


def entry_stream(data, start, name, check=True):
    """The pickle stream of the ENTRY frame ``data`` (its bytes, a view)
    that starts at ``start``, its trailer checked when ``check``."""
    n = len(data) - FRAME_TRAILER.size
    if check:
        stored_start, digest = FRAME_TRAILER.unpack_from(data, n)
        if stored_start != start or _xxh3_64(data[:n + 8]) != digest:
            raise CorruptFileError(f"{name}: damaged record frame at offset {start}: "
                                   f"its checksum does not match")
    return data[RECORD_SIZE:n]


def last_commit(read, size):
    """Where the last complete commit of a growing object file of ``size``
    bytes ends, or None if it has none. One read of its tail when the file
    ends with a complete commit (no commit being written, no torn tail);
    else a walk of the commits' record headers."""
    shortest = OBJECT_FRAMES_AT + RECORD_SIZE + FRAME_TRAILER.size + TRAILER.size
    tail = bytes(read(size - FRAME_TRAILER.size, FRAME_TRAILER.size)) if size >= shortest \
        else b""
    if len(tail) == FRAME_TRAILER.size:
        start = FRAME_TRAILER.unpack(tail)[0]
        if OBJECT_FRAMES_AT <= start <= size - shortest + OBJECT_FRAMES_AT:
            head = bytes(read(start, RECORD_SIZE))
            if len(head) == RECORD_SIZE:
                kind, _, end = parse_frame_head(head, start)
                if kind == COMMIT and end == size and frame_checks_out(read, start, size):
                    return size
    walk = walk_frames(read, size, OBJECT_FRAMES_AT, kinds=COMMIT_KINDS)
    return walk.end if walk.starts else None
