"""A dump of one raw array and its pickle stream in a local regular file,
read from the file's two ends and checked: what a trusted load of such a
file needs (:func:`cpersist.load`), without a byte source and a
:class:`~.reader.ContainerReader`, whose layers would cost such a load of
a megabyte more than checking its bytes does.

It parses with the reader's own functions (:mod:`.index`, :mod:`.framing`)
and takes a file only when every check the reader makes holds; any other
file, damaged ones included, is left to the reader, which says what is
wrong with it.
"""

import os

from .._runtime.pages import fault_in_fresh
from ..exceptions import CpersistError
from .framing import ALIGNED, DATA, parse_record, walk_records
from .index import parse_header, parse_index, parse_trailer
from .layout import HEADER, PAGE, RECORD_SIZE, TRAILER, checksum
from .reader import TAIL_READ
from .sections import READ_PART


#: Larger files are left to the reader unread: their array would be read
#: and checksummed in one call each, where the reader reads a large chunk
#: in parts, each checksummed while it is in the CPU's cache.
SINGLE_UP_TO = READ_PART + TAIL_READ
#: An index of more bytes is left to the reader unparsed: one of two
#: sections takes a few hundred, one of many (a model's) many more.
INDEX_UP_TO = 4096


class _NotRead(Exception):
    """A record header outside the bytes read from the file's two ends."""


def single_raw_array(fd, size, name):
    """``(stream, section, checksum)`` of the dump that fills the regular
    file open as ``fd`` (``size`` bytes), when it holds two sections: an
    array stored raw as one chunk (``section``, a :class:`~.index.Section`,
    whose chunk has ``checksum``) and a pickle stream stored as it is within
    the file's last :data:`.reader.TAIL_READ` bytes (``stream``, bytes, its
    checksum checked); else None.

    Its records are walked in the bytes read from its two ends (none is
    read in between), as the reader walks them; a file whose records are
    not all there is left to the reader, as is a growing, compact, tiny or
    edited one, and one larger than :data:`SINGLE_UP_TO` bytes.
    """
    if size > SINGLE_UP_TO:
        return None
    tail_start = max(0, size - TAIL_READ)
    try:
        head = os.pread(fd, PAGE, 0)
        _, _, flags = parse_header(head[:HEADER.size], size, name)
        if flags or len(head) != min(PAGE, size):  # grows, compact or edited (format 2.0)
            return None
        # The array's record (after a padding record when it starts on a
        # page), whose successor, the stream's, is in the tail: any other
        # file is left before its tail is read.
        kind, _, end = parse_record(head, HEADER.size, name, 0, HEADER.size)
        if kind == DATA and end + RECORD_SIZE <= len(head):
            kind, _, end = parse_record(head, end, name, 0, end)
        if kind != ALIGNED or end < tail_start:
            return None
        tail = os.pread(fd, size - tail_start, tail_start)
        if len(tail) != size - tail_start:
            return None
        offset, length, digest = parse_trailer(tail[-TRAILER.size:], size, name)
        if offset < tail_start or length > INDEX_UP_TO:
            return None
        near_head, near_tail = memoryview(head), memoryview(tail)

        def read(at, length):
            if at + RECORD_SIZE <= len(head):
                return near_head[at:]
            if at >= tail_start:
                return near_tail[at - tail_start:]
            raise _NotRead

        if walk_records(read, size, name) != size:
            return None  # another dump follows this one
        root, _, sections, edited = parse_index(near_tail[offset - tail_start:-TRAILER.size],
                                                digest, offset, name)
        if edited or len(sections) != 2:
            return None
    except (CpersistError, OSError, _NotRead):
        return None
    pickled, array = sections[root], sections[1 - root]
    # Each raw, one chunk: its checksum read from its chunk table's text,
    # which is then checked as a whole (Section.one_chunk_checksum).
    stream_checksum = pickled.one_chunk_checksum()
    array_checksum = array.one_chunk_checksum()
    start = pickled.offset - tail_start
    if (stream_checksum is None or array_checksum is None or not array.contiguous
            or pickled.meta.get("kind") != "pickle" or array.meta.get("kind") != "array"
            or start < 0):
        return None
    stream = tail[start:start + pickled.raw_size]
    if checksum(stream) != stream_checksum:
        return None
    return stream, array, array_checksum


def read_checked(fd, section, digest, view):
    """Read the array ``section`` of :func:`single_raw_array` into ``view``
    (writable bytes of its size, new memory backed in one call first):
    whether every byte was read and has the checksum ``digest``."""
    fault_in_fresh(view)
    try:
        read = os.preadv(fd, [view], section.offset)
    except OSError:
        return False
    return read == len(view) and checksum(view) == digest
