"""Blosc codecs: shuffle + a fast compressor, through C-Blosc2.

Blosc splits each chunk into blocks, applies a byte-shuffle filter that groups
the n-th byte of every element together (this is what makes it shine on
numeric arrays), then compresses with one of several inner codecs, exposed
here as ``blosc:lz4``, ``blosc:zstd``, ``blosc:zlib`` and ``blosc:blosclz``.
Chunks are made and read by the library the ``blosc2`` wheel ships
(:mod:`.libblosc2`, :mod:`.blosc_blocks`), without importing python-blosc2.
"""

from .._runtime.parallel import thread_share
from .abc import Codec
from .blosc_blocks import cbuffer_sizes, decode_blocks, decode_range
from .libblosc2 import NOFILTER, SHUFFLE, compress

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
        nbytes, cbytes, blocksize = cbuffer_sizes(head)
    except ValueError as exc:
        raise codec._invalid(exc) from None
    if cbytes != length:
        raise codec._invalid(f"header says {cbytes} stored bytes, the index {length}")
    if nbytes != raw_length:
        raise codec._wrong_size(nbytes, raw_length)
    return blocksize


def decode_blosc_chunk(codec, src, out):
    """Decode one Blosc chunk into ``out``; errors name ``codec``.

    The sizes Blosc claims are checked before it writes anything into
    ``out``: Blosc trusts the header's compressed size, so a truncated
    buffer would make it read past its end (a segfault).
    """
    blocksize = check_blosc_chunk(codec, src, len(src), len(out))
    if not len(out):
        return
    try:
        # Through this thread's kept context, which keeps Blosc's work
        # buffers between chunks (a new context at every call faults their
        # pages in again at every chunk); a chunk read alone spreads its
        # blocks over the threads left idle.
        blocksize = blocksize if blocksize > 0 else len(out)
        decode_blocks(src, out, 0, (len(out) - 1) // blocksize, blocksize, thread_share())
    except ValueError as exc:
        raise codec._invalid(exc) from None


def decode_blosc_part(codec, src, skip, out, whole):
    """Decode bytes ``skip:skip + len(out)`` of a Blosc chunk into ``out``,
    decompressing only the Blosc blocks that hold them, with the GIL released."""
    blocksize = check_blosc_chunk(codec, src, len(src), len(whole))
    if not len(out):
        return
    try:
        # Straight into out, the blocks spread over the threads free to help.
        if blocksize > 0 and decode_range(src, skip, out, blocksize):
            return
        # Not on whole items, or blocks that do not decode alone: into
        # ``whole``, then copied.
        blocksize = blocksize if blocksize > 0 else len(whole)
        decode_blocks(src, whole, skip // blocksize, (skip + len(out) - 1) // blocksize,
                      blocksize, thread_share())
    except ValueError as exc:
        raise codec._invalid(exc) from None
    out[:] = whole[skip:skip + len(out)]


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
        # One thread: cpersist already runs one chunk per core.
        return compress(buf, typesize if shuffle else 1, self.level, self.inner,
                        [SHUFFLE if shuffle else NOFILTER])

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
