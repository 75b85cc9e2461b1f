"""Read Blosc chunks through the C library the ``blosc2`` wheel ships
(:mod:`.libblosc2`): their headers, and all or some of their blocks, with
the GIL released.

python-blosc2 decodes part of a chunk only through ``SChunk.get_slice``,
which decodes the blocks one after another while holding the GIL, so the
parts of two chunks a slice needs cannot decode at once. The C library can:
``blosc2_set_maskout`` names the blocks that ``blosc2_decompress_ctx``
skips, and ``blosc2_getitem_ctx`` decodes a range of items. Functions here
raise :class:`~cpersist.CodecLibraryError` when the library cannot be used.
"""

import ctypes
import threading

import numpy as np

from .._runtime.fork import renew_after_fork
from .._runtime.parallel import spread
from .libblosc2 import Context, DParams, library

#: Most threads one chunk's blocks are spread over.
_MAX_THREADS = 8
#: Bytes of the smallest run of a range that threads share out: whole
#: blocks, enough that handing one out costs little beside decoding it.
_CLAIM_BYTES = 1 << 18

_local = threading.local()


def _context(lib, n_threads):
    """This thread's decompression context running ``n_threads`` threads,
    made once (it keeps its threads between calls); freed with the thread."""
    contexts = getattr(_local, "contexts", None)
    if contexts is None:
        contexts = _local.contexts = {}
    context = contexts.get(n_threads)
    if context is None:
        handle = lib.blosc2_create_dctx(DParams(n_threads, None, None, None, 0))
        context = contexts[n_threads] = Context(lib, handle)
    return context.handle


# In a forked child the parent's contexts (and their threads) are not usable:
# every thread makes its own again.
renew_after_fork(globals(), _local=threading.local)


#: Blosc2 chunk header: flags at byte 2, typesize at 3; with both shuffle
#: flag bits set (byte and bit shuffle) the header is extended, and bytes
#: 16-21 name its filters.
_EXTENDED = 0x5
_FILTERS = slice(16, 22)
#: Blosc's delta filter encodes every block against the chunk's first: a
#: part of such a chunk decodes right only with that block.
_DELTA = 3


#: Bytes of a Blosc chunk header: 16, extended to 32 in Blosc2's chunks.
_HEADER_MIN, _HEADER_MAX = 16, 32


def cbuffer_sizes(head):
    """``(nbytes, cbytes, blocksize)`` that the Blosc chunk header ``head``
    (the chunk's first bytes) states, as the library reads them.

    Raises
    ------
    ValueError
        If the header is too short or Blosc rejects it.
    """
    lib = library()
    header = bytes(head[:_HEADER_MAX])
    if len(header) < _HEADER_MIN:
        raise ValueError(f"a Blosc chunk starts with a {_HEADER_MIN}-byte header, "
                         f"got {len(header)} bytes")
    sizes = getattr(_local, "sizes", None)
    if sizes is None:  # made once per thread: this runs for every chunk read
        values = [ctypes.c_int32() for _ in range(3)]
        sizes = _local.sizes = values, [ctypes.byref(value) for value in values]
    values, pointers = sizes
    # Padded: the library reads an extended header's 32 bytes whatever we hold.
    done = lib.blosc2_cbuffer_sizes(header.ljust(_HEADER_MAX, b"\0"), *pointers)
    if done < 0:
        raise ValueError(f"Blosc error {done} reading the chunk header")
    return values[0].value, values[1].value, values[2].value


def blocks_stand_alone(src):
    """Whether each block of the Blosc chunk ``src`` decodes by itself: an
    extended header that names no delta filter (cpersist writes no other)."""
    head = bytes(src[:_FILTERS.stop])
    return (len(head) == _FILTERS.stop and head[2] & _EXTENDED == _EXTENDED
            and _DELTA not in head[_FILTERS])


def decode_blocks(src, whole, first, last, blocksize, n_threads=1):
    """Decode blocks ``first`` to ``last`` of the Blosc chunk ``src`` into
    ``whole`` (writable, the chunk's decoded size), at their own offsets,
    on ``n_threads`` threads. A chunk whose blocks do not decode alone (an
    old header, or the delta filter, which encodes each block against the
    first) is decoded whole.

    The caller has checked the chunk's header against ``len(src)`` and
    ``len(whole)``.

    Raises
    ------
    ValueError
        If Blosc reports an error decoding.
    """
    lib = library()
    nblocks = -(-len(whole) // blocksize)
    source = np.frombuffer(src, dtype=np.uint8)
    target = np.frombuffer(whole, dtype=np.uint8)
    context = _context(lib, max(1, min(n_threads, last - first + 1, _MAX_THREADS)))
    if (first > 0 or last < nblocks - 1) and blocks_stand_alone(src):
        # A mask holds for the next decompression only: a whole chunk needs
        # none, and a chunk whose blocks depend on its first decodes whole.
        mask = np.ones(nblocks, dtype=np.bool_)  # True: skipped
        mask[first:last + 1] = False
        if lib.blosc2_set_maskout(context, mask.ctypes.data, nblocks) < 0:
            raise ValueError("blosc2_set_maskout failed")
    done = lib.blosc2_decompress_ctx(context, source.ctypes.data, len(source),
                                     target.ctypes.data, len(target))
    if done < 0:
        raise ValueError(f"Blosc error {done} while decoding blocks {first}-{last}")


def decode_range(src, skip, out, blocksize):
    """Decode bytes ``skip:skip + len(out)`` of the Blosc chunk ``src``
    straight into ``out``: Blosc decodes each block that holds them into its
    own work memory, which stays in the CPU's cache, and copies the bytes
    wanted out of it. A range of several blocks is cut on block boundaries
    and its runs of blocks are decoded on the threads free to help
    (:func:`cpersist._runtime.parallel.spread`), each into its own part of ``out``:
    no block is decoded twice, and nothing is copied from scratch memory.

    The caller has checked the chunk's header against ``len(src)``, and
    read its ``blocksize`` there. Returns False, having done nothing, when
    the range does not fall on whole items, or the chunk's blocks do not
    decode alone (see :func:`decode_blocks`).

    Raises
    ------
    ValueError
        If Blosc reports an error decoding.
    """
    if not blocks_stand_alone(src):
        return False
    lib = library()
    typesize = src[3]
    if not typesize or skip % typesize or len(out) % typesize:
        return False
    # Addresses of the buffers, which the caller keeps until this returns.
    stored = np.frombuffer(src, dtype=np.uint8)
    source, size = stored.ctypes.data, stored.size
    target = np.frombuffer(out, dtype=np.uint8).ctypes.data - skip
    end = skip + len(out)

    def decode(lo, hi):
        done = lib.blosc2_getitem_ctx(_context(lib, 1), source, size, lo // typesize,
                                      (hi - lo) // typesize, target + lo, hi - lo)
        if done != hi - lo:
            raise ValueError(f"Blosc error {done} while decoding bytes {lo}-{hi}")

    run = blocksize * max(1, _CLAIM_BYTES // blocksize) if blocksize else 0
    if not run or run % typesize:
        decode(skip, end)
        return True
    first = skip // run

    def decode_runs(start, stop):
        decode(max(skip, (first + start) * run), min(end, (first + stop) * run))

    spread(decode_runs, (end - 1) // run - first + 1)
    return True
