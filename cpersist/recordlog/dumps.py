"""Files of several plain dumps written one after another (a file opened
``"ab"`` and dumped to again and again): where each dump lies, so that
:class:`.reader.RecordLog` reads them as its records.

A dump cut short at the end of the file (a dump interrupted) is a torn
tail, as a record log's is: readers ignore it and report its size. Bytes
that are no dump, or a dump damaged so that where it ends cannot be found,
anywhere else are damage, and raise.
"""

import os

from ..container.frames import GROWING, Walk
from ..container.framing import TruncatedDump, walk_records
from ..container.index import parse_header
from ..container.layout import HEADER, MAGIC, TRAILER
from ..container.tiny import TINY_MAGIC, tiny_size
from ..exceptions import CorruptFileError


def starts_with_dump(head):
    """Whether ``head``, a file's first bytes, is the start of a plain dump
    (not a growing file)."""
    head = bytes(head)
    if head[:len(TINY_MAGIC)] == TINY_MAGIC:
        return True
    return (head[:len(MAGIC)] == MAGIC and len(head) >= HEADER.size
            and not HEADER.unpack(head[:HEADER.size])[3] & GROWING)


def _cut_short(head, rest):
    """Whether the ``rest`` bytes left, starting with ``head``, can only be
    the start of a dump cut short."""
    return rest < HEADER.size and (MAGIC.startswith(head[:len(MAGIC)])
                                   or TINY_MAGIC.startswith(head[:len(TINY_MAGIC)]))


def _dump_size(read, position, rest, name):
    """The size of the dump at ``position``, ``rest`` bytes before the end
    of the file; None if it is cut short there."""
    head = bytes(read(position, min(rest, HEADER.size)))

    def at(offset, length):
        return read(position + offset, length)

    try:
        if head[:len(TINY_MAGIC)] == TINY_MAGIC:
            size = tiny_size(head, name)
            return None if size > rest else size
        if head[:len(MAGIC)] != MAGIC:
            if _cut_short(head, rest):
                return None
            raise CorruptFileError(f"{name}: damaged file of dumps: the bytes at offset "
                                   f"{position} ({rest} up to the end) are not a dump")
        if rest < HEADER.size + TRAILER.size:  # no dump is shorter
            return None
        _, _, flags = parse_header(head, rest, name)
        if flags & GROWING:
            raise CorruptFileError(f"{name}: damaged file of dumps: a record log starts at "
                                   f"offset {position}")
        return walk_records(at, rest, name, position)
    except TruncatedDump:
        return None
    except CorruptFileError:
        # A tiny dump's head cut short looks damaged: it is torn only where
        # nothing follows it.
        if head[:len(TINY_MAGIC)] == TINY_MAGIC and rest <= len(head):
            return None
        raise


#: Bytes read at once while walking dumps: the records of many small
#: dumps come in one read.
WALK_BLOCK = 64 << 10


class _Blocks:
    """``read(offset, length)`` served from one block of the file read at a
    time: each dump's walk asks for a window from its own start, which for
    small dumps lies in the block already read. A window given may be
    shorter than asked for (the walk reads on where it ends), but holds a
    record header at least."""

    def __init__(self, read, size):
        self._read, self._size = read, size
        self._block, self._at = b"", 0

    def __call__(self, offset, length):
        start = offset - self._at
        if 0 <= start and start + min(length, HEADER.size) <= len(self._block):
            return memoryview(self._block)[start:start + length]
        if length > WALK_BLOCK:
            return self._read(offset, length)
        self._at = offset
        self._block = self._read(offset, min(WALK_BLOCK, self._size - offset))
        return memoryview(self._block)[:length]


def walk_dumps(read, size, name, begin=0, starts=None):
    """Walk the dumps of a file of ``size`` bytes from ``begin``, which
    starts one; ``read(offset, length)`` reads it. Returns a
    :class:`~cpersist.container.frames.Walk`, its frames the dumps;
    ``starts`` continues an earlier walk's list.

    Raises
    ------
    CorruptFileError
        For bytes that are no dump, or a dump whose end cannot be found,
        other than at the end of the file.
    """
    starts = [] if starts is None else starts
    position = begin
    read = _Blocks(read, size)
    while position < size:
        length = _dump_size(read, position, size - position, name)
        if length is None:
            break
        starts.append(position)
        position += length
    return Walk(starts, position, size, None)


def cut_torn_dump(path, name):
    """What ``cpersist repair`` does to a file of dumps: cut off a dump cut
    short at its end. Returns ``{"records", "cut_bytes"}``, or None for a
    file that does not start with a dump (a record log, or no cpersist
    file). Writers of dumps take no lock: run while no dump is being
    written to the file.

    Raises
    ------
    CorruptFileError
        For damage, which is not cut; for a file whose only dump is cut
        short, which would be cut whole.
    """
    with open(path, "r+b") as file:
        fd = file.fileno()
        if not starts_with_dump(os.pread(fd, HEADER.size, 0)):
            return None
        walk = walk_dumps(lambda offset, length: os.pread(fd, length, offset),
                          os.fstat(fd).st_size, name)
        if not walk.starts:
            raise CorruptFileError(f"{name}: truncated: its only dump is cut short, and "
                                   f"repair would leave nothing; nothing was cut")
        if walk.torn:
            os.ftruncate(fd, walk.end)
    return {"records": len(walk.starts), "cut_bytes": walk.torn}
