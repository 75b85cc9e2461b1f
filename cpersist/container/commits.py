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


def pending_frame(start):
    """``(head, payload)``: the bytes of a commit frame at ``start`` up to
    its payload (its header, still :data:`~cpersist.container.frames.PENDING`,
    and the padding after it), and where its payload starts."""
    payload = start + RECORD_SIZE
    payload += -payload % ALIGN
    head = RECORD.pack(COMMIT << _LENGTH_BITS | PENDING) + bytes(payload - start - RECORD_SIZE)
    return head, payload


def commit_frame(file, start, payload, dump_end, fsync=False):
    """Commit the frame at ``start`` of ``file`` whose payload, from
    ``payload`` to ``dump_end``, is written (its records, then the index of
    the object's whole state): write the frame's trailer, then its header's
    length. Returns where the frame ends."""
    fd = file.fileno()
    file.flush()
    trailer = os.pread(fd, TRAILER.size, dump_end - TRAILER.size)
    header = commit_header(dump_end - payload)
    _write_all(fd, FRAME_TRAILER.pack(start, frame_digest(header, trailer, start)), dump_end)
    if fsync:
        os.fsync(fd)  # the frame's bytes before the header that commits it
    _write_all(fd, header, start)
    if fsync:
        os.fsync(fd)
    end = dump_end + FRAME_TRAILER.size
    file.seek(end)
    return end


class CommitWriter(ContainerWriter):
    """The writer of a commit frame at ``start``, the end of ``file``'s
    committed frames.

    Made, it writes the frame's head (:func:`pending_frame`); then, as any
    :class:`~cpersist.container.writer.ContainerWriter`, the chunks'
    records of the payload and (``finish``) the index of the object's
    whole state, its offsets counted from the start of the file.
    :meth:`commit` then commits the frame. A frame that is not committed
    stays pending: the state is as it was.
    """

    def __init__(self, file, start, n_threads=1, name=None, fsync=False):
        head, payload = pending_frame(start)
        file.seek(start)
        file.write(head)
        super().__init__(file, n_threads, name, start=payload, minor=OBJECT_MINOR)
        self._frame = file, start, payload, fsync

    def commit(self):
        """Commit the frame, its payload finished (:func:`commit_frame`);
        return where it ends."""
        file, start, payload, fsync = self._frame
        return commit_frame(file, start, payload, self.position, fsync)


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
