"""Blosc codecs (through the ``blosc2`` package): shuffle + a fast compressor.

Blosc splits each chunk into blocks, applies a byte-shuffle filter that groups
the n-th byte of every element together (this is what makes it shine on
numeric arrays), then compresses with one of several inner codecs, exposed
here as ``blosc:lz4``, ``blosc:zstd``, ``blosc:zlib`` and ``blosc:blosclz``.
"""

import os
import threading

from .._threads import thread_share
from .abc import Codec
from .blosc_blocks import blocks_stand_alone, cbuffer_sizes, decode_blocks, decode_range

_blosc2 = None
_INNER = {}


def blosc2():
    """The ``blosc2`` module, imported on first use and set up for cpersist.

    Imported here rather than at module level because ``import blosc2`` pulls
    in far more than compression (an HTTP client, numexpr...), a cost only
    writing Blosc chunks should pay: reading goes through the library
    itself (:mod:`.blosc_blocks`) wherever it can.
    """
    global _blosc2
    if _blosc2 is None:
        import blosc2 as module

        # python-blosc2 holds the GIL while it compresses unless told
        # otherwise, so chunks on cpersist's thread pool would run one at a
        # time. The setting is process-wide; it costs something only with
        # tiny blocks.
        module.set_releasegil(True)
        _INNER.update(lz4=module.Codec.LZ4, zstd=module.Codec.ZSTD,
                      zlib=module.Codec.ZLIB, blosclz=module.Codec.BLOSCLZ)
        _blosc2 = module
    return _blosc2


#: Largest typesize Blosc's shuffle accepts; larger items are not shuffled.
_MAX_TYPESIZE = 255


def shuffles(buf, typesize):
    """Whether Blosc's byte shuffle applies to ``buf`` of ``typesize`` items."""
    return 1 < typesize <= _MAX_TYPESIZE and len(buf) % typesize == 0


def check_blosc_chunk(codec, head, length, raw_length):
    """Check a Blosc chunk header against the sizes the index claims;
    returns the chunk's block size.

    Raises
    ------
    CorruptFileError
        Naming ``codec``, if the header is unreadable or disagrees.
    """
    try:
        sizes = cbuffer_sizes(head)
        # python-blosc2 only where the library cannot be used directly.
        nbytes, cbytes, blocksize = sizes or blosc2().get_cbuffer_sizes(head)
    except Exception as exc:  # blosc2 raises bare Exceptions/ValueErrors
        raise codec._invalid(exc) from None
    if cbytes != length:
        raise codec._invalid(f"header says {cbytes} stored bytes, the index {length}")
    if nbytes != raw_length:
        raise codec._wrong_size(nbytes, raw_length)
    return blocksize


def decode_blosc_chunk(codec, src, out):
    """Decode one Blosc chunk into ``out``; errors name ``codec``.

    The sizes Blosc claims are checked before it writes anything into
    ``out``: blosc2.decompress trusts the header's compressed size, so a
    truncated buffer would make it read past its end (a segfault).
    """
    blocksize = check_blosc_chunk(codec, src, len(src), len(out))
    try:
        # Through this thread's kept context, which keeps Blosc's work
        # buffers between chunks (python-blosc2 allocates them at every
        # call: with distributed's workers' malloc settings, pages faulted in
        # again at every chunk); a chunk read alone spreads its blocks over
        # the threads left idle.
        if blocksize > 0 and len(out) and decode_blocks(
                src, out, 0, (len(out) - 1) // blocksize, blocksize, thread_share()):
            return
        blosc2().decompress2(src, dst=out, nthreads=1)
    except Exception as exc:  # blosc2 raises bare Exceptions/ValueErrors
        raise codec._invalid(exc) from None


_local = threading.local()
#: Blosc's own threads for the blocks of a part: a reader decodes parts of
#: at most two chunks of a slice on one thread of its own (Blosc holds the
#: GIL while it decodes a part), so Blosc's threads are the only parallelism.
_PART_THREADS = min(8, os.cpu_count() or 1)


def _one_chunk(chunksize, typesize, src):
    """A super-chunk holding only ``src``: the only Python interface to
    Blosc's getitem, which decodes just the blocks a range of items needs.
    One per thread and shape is kept, its chunk replaced each time (making
    one costs about as much as decoding a block)."""
    cache = getattr(_local, "schunks", None)
    if cache is None:
        cache = _local.schunks = {}
    schunk = cache.get((chunksize, typesize))
    if schunk is None:
        schunk = blosc2().SChunk(chunksize=chunksize, cparams={"typesize": typesize},
                                 dparams={"nthreads": _PART_THREADS})
        schunk.append_data(bytes(chunksize))
        if len(cache) > 4:
            cache.clear()
        cache[(chunksize, typesize)] = schunk
    schunk.update_chunk(0, bytes(src))
    return schunk


def decode_blosc_part(codec, src, skip, out, whole):
    """Decode bytes ``skip:skip + len(out)`` of a Blosc chunk into ``out``,
    decompressing only the Blosc blocks that hold them: with the GIL released
    where :mod:`.blosc_blocks` can, else through ``SChunk.get_slice``."""
    blocksize = check_blosc_chunk(codec, src, len(src), len(whole))
    if blocksize > 0 and len(out):
        share = thread_share()
        try:
            # Straight into out, the blocks spread over the threads free to help.
            if decode_range(src, skip, out, blocksize):
                return
            decoded = decode_blocks(src, whole, skip // blocksize,
                                    (skip + len(out) - 1) // blocksize, blocksize, share)
        except ValueError as exc:
            raise codec._invalid(exc) from None
        if decoded:
            out[:] = whole[skip:skip + len(out)]
            return
    typesize = src[3]
    # Blosc's getitem reads whole items, and decodes right only blocks that
    # stand alone.
    if skip % typesize or len(out) % typesize or not blocks_stand_alone(src):
        decode_blosc_chunk(codec, src, whole)
        out[:] = whole[skip:skip + len(out)]
        return
    try:
        schunk = _one_chunk(len(whole), typesize, src)
        schunk.get_slice(skip // typesize, (skip + len(out)) // typesize,
                         out=memoryview(out).cast("B"))
    except Exception as exc:  # blosc2 raises bare Exceptions/ValueErrors
        raise codec._invalid(exc) from None


class _Blosc(Codec):
    """Blosc with byte shuffle; ``inner`` names the compressor behind it."""

    inner = None
    #: No static bound: Blosc encodes a chunk of one repeated value (zeros,
    #: NaNs) in a 32-byte header whatever its size, so the header's sizes
    #: are checked instead.
    max_expansion = None
    header_size = 32

    def check_header(self, head, length, raw_length):
        check_blosc_chunk(self, head, length, raw_length)

    def encode(self, buf, typesize=1, hint=None):
        shuffle = shuffles(buf, typesize)
        # nthreads=1: cpersist already runs one chunk per core; Blosc's own
        # threads on top would oversubscribe the CPUs.
        blosc = blosc2()
        return blosc.compress2(
            buf,
            typesize=typesize if shuffle else 1,
            clevel=self.level,
            filters=[blosc.Filter.SHUFFLE if shuffle else blosc.Filter.NOFILTER],
            codec=_INNER[self.inner],
            nthreads=1,
        )

    def decode_into(self, src, out):
        decode_blosc_chunk(self, src, out)

    def decode_part_into(self, src, skip, out, whole):
        decode_blosc_part(self, src, skip, out, whole)


class BloscLZ4(_Blosc):
    codec_id = "blosc:lz4"
    inner = "lz4"


class BloscZstd(_Blosc):
    codec_id = "blosc:zstd"
    inner = "zstd"


class BloscZlib(_Blosc):
    codec_id = "blosc:zlib"
    inner = "zlib"


class BloscBloscLZ(_Blosc):
    codec_id = "blosc:blosclz"
    inner = "blosclz"
