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


def write_commit(file, start, body, *, n_threads=1, name=None, fsync=False):
    """Write a commit frame at ``start``, the end of ``file``'s committed
    frames; returns where it ends.

    ``body(writer)`` writes the records of the chunks the commit adds
    through ``writer`` (a :class:`~cpersist.container.writer.ContainerWriter`
    whose offsets count from the start of the file) and returns ``(root,
    sections, info)``, the index of the new state; or None when it wrote
    the index itself (``writer.finish``).
    """
    fd = file.fileno()
    payload = start + RECORD_SIZE
    payload += -payload % ALIGN
    file.seek(start)
    file.write(RECORD.pack(COMMIT << _LENGTH_BITS | PENDING) + bytes(payload - start - RECORD_SIZE))
    writer = ContainerWriter(file, n_threads, name, start=payload, minor=OBJECT_MINOR)
    state = body(writer)
    if state is not None:
        root, sections, info = state
        writer.finish(root, info, sections)
    file.flush()
    dump_end = writer.position
    size = dump_end - payload
    trailer = os.pread(fd, TRAILER.size, dump_end - TRAILER.size)
    header = commit_header(size)
    _write_all(fd, FRAME_TRAILER.pack(start, frame_digest(header, trailer, start)), dump_end)
    if fsync:
        os.fsync(fd)  # the frame's bytes before the header that commits it
    _write_all(fd, header, start)
    if fsync:
        os.fsync(fd)
    end = dump_end + FRAME_TRAILER.size
    file.seek(end)
    return end


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
