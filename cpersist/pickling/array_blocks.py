"""Small raw arrays read many at a time: the raw sections of neighbouring
small arrays, read into memory, are read by one ``pread`` into one block,
and each array views its part of it.

A model holds hundreds of small arrays; read one by one, each costs an
allocation, a read and the Python layers around them, about as much as
copying its 70 KB does. Read in blocks of :data:`BLOCK_BYTES`, those costs
are paid once per block. Each array views bytes no other array views (the
bytes between two sections, record headers and alignment, are viewed by
none): writing one changes no other. An array keeps its block alive (its
``base``), as an array pickle loads keeps the bytearray it was read into:
at most :data:`BLOCK_BYTES` stay in memory for a small array kept alone.
"""

import numpy as np

from ..container.sources import ShortReadError

#: Raw array sections up to this many bytes are read in blocks; a larger
#: one costs little beside its copy, and is read into an array of its own.
BLOCK_ARRAYS_UP_TO = 256 << 10
#: Most bytes of one block: what a small array kept alone may keep in memory.
BLOCK_BYTES = 1 << 20
#: Most bytes between two sections of one block (a record header and the
#: alignment padding lie between neighbouring sections of a dump).
BLOCK_GAP = 4 << 10
#: Bytes read before a block's first section: its record header and the
#: padding after it (at most 71 bytes), which the walk of the dump's
#: records then reads from the block (see
#: :meth:`~cpersist.container.ContainerReader.check_records`).
HEAD_ROOM = 128


def blockable(section, nbytes):
    """Whether the array of ``section`` (``nbytes``, not 0) may be read in a
    block, from a local source (a remote one reads many ranges at once)."""
    # Attributes rather than is_raw and contiguous: checked for each array.
    return nbytes <= BLOCK_ARRAYS_UP_TO and section.codec is None and section.gap == 0


def plan_blocks(small):
    """``[(start, stop, [(index, section, dtype, shape, order), ...]), ...]``:
    the arrays of ``small`` (such tuples of blockable sections), in file
    order, grouped into runs of at most :data:`BLOCK_BYTES` whose sections
    lie at most :data:`BLOCK_GAP` bytes apart; a run of one is a block too.
    A block starts :data:`HEAD_ROOM` bytes before its first section."""
    blocks = []
    run, start, stop = [], 0, 0
    for item in sorted(small, key=lambda item: item[1].offset):
        section = item[1]
        end = section.offset + section.raw_size
        if run and (section.offset - stop > BLOCK_GAP or end - start > BLOCK_BYTES
                    or section.offset < stop):
            blocks.append((start, stop, run))
            run = []
        if not run:
            start = max(section.offset - HEAD_ROOM, 0)
        run.append(item)
        stop = end
    if run:
        blocks.append((start, stop, run))
    return blocks


def allocate_block(start, stop, run):
    """``(block, [(index, array), ...])``: uninitialised memory for the bytes
    from ``start`` to ``stop``, and each array of ``run`` viewing its part."""
    block = np.empty(stop - start, dtype=np.uint8)
    # frombuffer, reshaped unless 1-D: cheaper than a slice viewed and
    # reshaped, or ndarray(buffer=block), for each of many small arrays.
    arrays = []
    for index, section, dtype, shape, order in run:
        arr = np.frombuffer(block, dtype, section.raw_size // dtype.itemsize,
                            section.offset - start)
        arrays.append((index, arr if len(shape) == 1 else arr.reshape(shape, order=order)))
    return block, arrays


def read_block(reader, start, block, run, verify):
    """Read the bytes from ``start`` into ``block`` with one read, and check
    each section's chunks against their checksums; return ``({index:
    exception}, whole)``: the sections that fail, and whether ``block``
    holds the file's bytes from ``start``. Cut short (the file ends
    first), each section is read again alone, which says where."""
    try:
        reader.source.read_into(start, block)
        whole = True
    except ShortReadError:
        whole = False
    failed = {}
    if whole and not verify:
        return failed, whole
    view = memoryview(block)
    for index, section, *_ in run:
        at = section.offset - start
        part = view[at:at + section.raw_size]
        try:
            if whole:
                reader.check_read(section, part)
            else:
                reader.read_into(section, part, verify=verify)
        except Exception as exc:  # noqa: BLE001 - raised where the stream asks for it
            failed[index] = exc
    return failed, whole
