"""Re-seal a dump whose raw sections were changed through a writable map:
compute their chunks' checksums again, rewrite the index (with its edited
mark cleared, in format 2.1) and trailer, and clear the header's edited
flag."""

import json
import os

from .framing import END, record_header
from .index import listed_sections
from .layout import (EDITED, END_MAGIC, FLAGS_AT, RECORD_SIZE, TRAILER, checksum,
                     chunk_table_text, index_text, piece_fields, verbatim_checksums)


def reseal(file, reader):
    """Re-seal the dump ``reader`` reads from the start of ``file``.

    ``file`` is the same local file open ``'r+b'``; nothing may follow the
    dump in it. Every section other than the edited raw ones must have been
    verified by the caller: a re-sealed file vouches for all of it. The
    caller holds the file's lock (:meth:`.sources.abc.ByteSource.locked`)
    from reading the index to the end, as every change in place does.

    The index is rewritten in place (its length may change by a few bytes,
    the file is cut or extended to fit), then flushed to disk, and only then
    is the flag cleared; an interruption in between leaves the flag set and
    the index damaged, never a file whose checksums pass over bytes that
    were not checked.

    Returns
    -------
    list of int
        The numbers of the sections whose checksums were computed again.
    """
    source = reader.source
    offset, length, _, _ = TRAILER.unpack(source.read(reader.size - TRAILER.size, TRAILER.size))
    index = json.loads(bytes(source.read(offset, length)))
    sections = listed_sections(index, reader.name)
    resealed = []
    for section in reader.sections:
        if not reader.unchecked(section):
            continue
        entry = sections[section.index]
        table, pieces = [], []
        for c in section.chunks:
            digest, chunk_pieces = verbatim_checksums(source.read(c.offset, c.length))
            table.append([c.length, c.raw_length, digest, c.flag])
            pieces.append(chunk_pieces)
        entry["chunks"] = chunk_table_text(table)
        entry.pop("pieces", None)
        entry.pop("piece_size", None)
        entry.update(piece_fields(pieces))
        resealed.append(section.index)
    if "packed_sections" in index:  # format 2.2, unedited once written again
        data = index_text(index["root"], sections, index.get("info", {}),
                          minor=index["format"][1])
    else:
        if "edited" in index:  # format 2.1: the mark is the index's (INDEX_UNEDITED, first)
            index["edited"] = False
        data = json.dumps(index, separators=(",", ":")).encode()
    fd = file.fileno()
    base = reader.base
    if reader.major >= 2:
        start = offset - RECORD_SIZE  # the END record's header
        tail = record_header(END, len(data) + TRAILER.size, start) + data
    else:
        start = offset
        tail = data
    tail += TRAILER.pack(offset, len(data), checksum(data), END_MAGIC)
    end = start + len(tail)
    os.pwrite(fd, tail, base + start)
    os.ftruncate(fd, base + end)
    os.fsync(fd)
    flags = int.from_bytes(source.read(FLAGS_AT, 4), "little") & ~EDITED
    os.pwrite(fd, flags.to_bytes(4, "little"), base + FLAGS_AT)
    os.fsync(fd)
    return resealed
