"""Marking a dump as edited before a writable map changes its raw arrays
(the layout of the mark is :mod:`.layout`; clearing it is :mod:`.reseal`).

The mark is changed in place, in one commit: under the file's exclusive
lock (so that markers and re-sealers of one file take turns, and a reader
that caught the change half made reads it again once it is whole), and in
writes ordered so that the dump is whole after each of them, should the
process die there: the index's mark, which readers accept while the
trailer still holds the checksum of the unmarked index
(:func:`~.layout.index_checks_out`); then that checksum; then the header's flag,
for readers of format 2.0. Each write leaves bytes that are already right as
they are, so several processes marking one dump at once write the same
bytes, in any interleaving.
"""

import os

from .index import parse_trailer
from .layout import (EDITED, FLAGS_AT, INDEX_EDITED, INDEX_UNEDITED, TRAILER, checksum,
                     index_checks_out)


def mark_edited(source, reader):
    """Mark the dump ``reader`` read from the local file of ``source`` (a
    :class:`~.sources.local.LocalFileSource` open for writing) as edited.

    From format 2.1 the mark is the index's ``"edited"`` field, covered by
    the index's checksum; the header's flag is set too, for readers of
    format 2.0. The index is read again under the lock, at the end of the
    dump as it is then: another process may have marked or re-sealed the
    dump since ``reader`` read it.

    Raises
    ------
    CorruptFileError
        If the dump's index, read again, is damaged (the file changed under
        the load into something else).
    """
    fd, base = source.fd, source.base
    with source.locked():
        if (reader.major, reader.minor) >= (2, 1) and not (reader.compact or reader.tiny):
            if reader.whole:  # a re-seal may have changed the dump's length
                source.refresh()
                size = source.size
            else:
                size = reader.size
            offset, length, digest = parse_trailer(
                source.read(size - TRAILER.size, TRAILER.size), size, reader.name, base)
            index = bytes(source.read(offset, length))
            if not index_checks_out(index, digest):
                raise reader.error("index checksum mismatch: the file is damaged")
            if index.startswith(INDEX_UNEDITED):
                os.pwrite(fd, INDEX_EDITED, base + offset)
                index = INDEX_EDITED + index[len(INDEX_EDITED):]
            elif not index.startswith(INDEX_EDITED):
                raise reader.error("damaged index: no edited mark where format 2.1 has it")
            marked = checksum(index)
            if marked != digest:
                os.pwrite(fd, marked.to_bytes(8, "little"), base + size - TRAILER.size + 16)
        flags = int.from_bytes(source.read(FLAGS_AT, 4), "little")
        if not flags & EDITED:
            os.pwrite(fd, (flags | EDITED).to_bytes(4, "little"), base + FLAGS_AT)
    reader.edited = True
