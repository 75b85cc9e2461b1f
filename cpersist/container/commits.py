"""Writing one commit of a growing object file: a frame whose payload holds
the records of the chunks it adds, then the index of the object's whole
state (an END record and a dump's trailer), then the frame's trailer.

The frame's header says :data:`~cpersist.container.frames.PENDING` until
every other byte of the frame is written; only then is its length written,
which commits it: a process killed before leaves the state as it was (a
torn tail), after, the new state.
"""

import json
import os

from .frames import (COMMIT, FRAME_TRAILER, OBJECT_MINOR, PENDING, RECORD,
                                frame_digest)
from .layout import ALIGN, RECORD_SIZE, TRAILER
from .writer import ContainerWriter

_LENGTH_BITS = 56


def commit_header(payload_size):
    """The header of a finished commit frame whose payload (without the
    frame trailer) is ``payload_size`` bytes."""
    return RECORD.pack(COMMIT << _LENGTH_BITS | (payload_size + FRAME_TRAILER.size))


class Commit:
    """A commit frame to write at ``start``, the end of ``file``'s committed
    frames.

    As a context manager it writes the frame's header, still
    :data:`~cpersist.container.frames.PENDING`, and gives the
    :class:`~cpersist.container.writer.ContainerWriter` of its payload: the
    chunks' records, then (``writer.finish``) the index of the object's
    whole state, its offsets counted from the start of the file. A block
    that ends without an exception commits the frame: its trailer, then
    its header's length. :attr:`end` is then where the frame ends.
    """

    def __init__(self, file, start, n_threads=1, name=None, fsync=False):
        self._file = file
        self._start = start
        self._n_threads = n_threads
        self._name = name
        self._fsync = fsync
        self._fd = self._payload = self._writer = None
        self.end = None

    def __enter__(self):
        file, start = self._file, self._start
        self._fd = file.fileno()
        payload = start + RECORD_SIZE
        payload += -payload % ALIGN
        file.seek(start)
        file.write(RECORD.pack(COMMIT << _LENGTH_BITS | PENDING)
                   + bytes(payload - start - RECORD_SIZE))
        self._payload = payload
        self._writer = ContainerWriter(file, self._n_threads, self._name, start=payload,
                                       minor=OBJECT_MINOR)
        return self._writer

    def __exit__(self, kind, exc, traceback):
        if kind is None:
            self._commit()
        return False

    def _commit(self):
        file, fd, start, fsync = self._file, self._fd, self._start, self._fsync
        file.flush()
        dump_end = self._writer.position
        trailer = os.pread(fd, TRAILER.size, dump_end - TRAILER.size)
        header = commit_header(dump_end - self._payload)
        _write_all(fd, FRAME_TRAILER.pack(start, frame_digest(header, trailer, start)), dump_end)
        if fsync:
            os.fsync(fd)  # the frame's bytes before the header that commits it
        _write_all(fd, header, start)
        if fsync:
            os.fsync(fd)
        self.end = dump_end + FRAME_TRAILER.size
        file.seek(self.end)


def read_index(read, end, name):
    """``(root, sections, info)`` of the commit that ends at ``end``: the
    index's JSON, its sections as the dicts it lists (checked by the
    reader that read the same commit)."""
    from ..container.index import listed_sections

    dump_end = end - FRAME_TRAILER.size
    offset, length, _, _ = TRAILER.unpack(bytes(read(dump_end - TRAILER.size, TRAILER.size)))
    index = json.loads(bytes(read(offset, length)))
    return index["root"], listed_sections(index, name), index.get("info", {})


def _write_all(fd, data, offset):
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
