"""``cpersist compact``: a growing object file rewritten with only what its
last commit uses, streaming, chunk by chunk, to a temporary file renamed
onto it under the writers' lock; and how many bytes that would reclaim.

The copy keeps every chunk as it is stored (nothing is decoded or encoded
again), each checked against its checksum on the way; each section's
chunks become one run again, so that a grown raw array can be mapped.
"""

import os

from ..container.atomic import AtomicFile
from ..container.frames import FRAME_TRAILER, OBJECT_FILE_START, OBJECT_FRAMES_AT
from ..container.framing import record_header
from ..container.layout import (ALIGN, RECORD_SIZE, TRAILER, chunk_table_text,
                                checksum_state, index_text)
from ..exceptions import CorruptFileError
from ..container.commits import CommitWriter
from .writer import GrowingWriter

#: Bytes copied at once: a chunk of a raw array may be up to 2 GiB.
COPY_STEP = 1 << 20


def compacted_entry(section):
    """The index entry of ``section`` (read from a commit) once its chunks
    are copied into one run: its offset left to the writer."""
    chunks = section.chunks
    entry = {
        "offset": 0,
        "raw_size": section.raw_size,
        "stored_size": section.stored_size,
        "codec": None if section.codec is None else section.codec.get_config(),
        "typesize": section.typesize,
        "chunks": chunk_table_text([c[1:] for c in chunks]),
        "meta": section.meta,
    }
    if section._pieces is not None:
        fields = section._pieces[0]
        entry["piece_size"] = section.piece_size
        entry["pieces"] = fields if type(fields) is str else ",".join(fields)
    return entry


def compacted_size(reader):
    """The size of the file :func:`compact` would write from the commit
    ``reader`` reads."""
    position = OBJECT_FRAMES_AT + RECORD_SIZE
    position += -position % ALIGN  # the commit's payload
    entries = []
    for section in reader.sections:
        entry = compacted_entry(section)
        head = record_header(2 if section.codec is None else 1, entry["stored_size"], position)
        entry["offset"] = position = position + len(head)
        position += entry["stored_size"]
        entries.append(entry)
    index = index_text(reader.root, entries, reader.info, reader.minor, pack=False)
    return position + RECORD_SIZE + len(index) + TRAILER.size + FRAME_TRAILER.size


def reclaimable_bytes(reader):
    """Bytes of a growing object file that :func:`compact` would reclaim:
    superseded chunks and commits (a torn tail not counted)."""
    return max(0, reader.commit_end - compacted_size(reader))


def compact(path, *, fsync=False, timeout=None):
    """Rewrite the growing object file at ``path`` without the data its
    changes superseded: replaced arrays, earlier commits.

    The file's last commit is copied, chunk by chunk (memory stays at
    about 1 MiB), each chunk checked against its checksum, to a temporary
    file beside it, renamed onto ``path`` once complete; the writers' lock
    is held throughout, so that no change is lost. A process killed at any
    moment leaves ``path`` as it was, or compacted. Readers that have the
    file open read on the file they opened. A grown raw array is one run
    again afterwards, and memory-maps.

    Parameters
    ----------
    path : str or os.PathLike
        A growing object file (``cpersist.dump(obj, path, growing=True)``).
    fsync : bool, default False
        Flush the new file to disk before renaming it onto ``path``.
    timeout : float, optional
        Seconds to wait for another writer's lock.

    Returns
    -------
    dict
        ``"bytes_before"``, ``"bytes_after"`` (the file's committed sizes)
        and ``"reclaimed_bytes"``.

    Raises
    ------
    CorruptFileError
        If a chunk does not match its checksum: nothing is changed.
    UnwritableTargetError
        If ``path`` is not a growing object file.
    FileLockedError
        If another writer held the lock longer than ``timeout``.
    """
    from .._args import check_log_path

    check_log_path(path)
    writer = GrowingWriter(path, timeout=timeout, fsync=fsync)
    try:
        reader = writer.reader
        name = writer.name
        before = writer.end
        with AtomicFile(path, fsync) as target:
            file = target.file()
            file.write(OBJECT_FILE_START)
            out = CommitWriter(file, OBJECT_FRAMES_AT, name=name)
            for section in reader.sections:
                out.add_copied_section(compacted_entry(section),
                                       _checked_parts(writer.fd, section, name))
            out.finish(reader.root, reader.info)
            after = out.commit()
        # Renamed while the lock on the old file is held: a writer waiting
        # for it finds the path names another file, and locks that one.
    finally:
        writer.close()
    return {"bytes_before": before, "bytes_after": after, "reclaimed_bytes": before - after}


def _checked_parts(fd, section, name):
    """The stored bytes of ``section``'s chunks, :data:`COPY_STEP` at a
    time, each chunk's checksum checked once its last part is read."""
    for i, chunk in enumerate(section.chunks):
        state = checksum_state()
        for at in range(0, chunk.length, COPY_STEP):
            n = min(COPY_STEP, chunk.length - at)
            part = os.pread(fd, n, chunk.offset + at)
            if len(part) != n:
                raise CorruptFileError(f"{name}: truncated in section {section.index}")
            state.update(part)
            if at + n == chunk.length and state.intdigest() != chunk.checksum:
                raise CorruptFileError(
                    f"{name}: checksum mismatch in section {section.index}, chunk {i}: "
                    f"damaged data; nothing was compacted")
            yield part
