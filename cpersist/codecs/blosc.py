"""Blosc codecs (through the ``blosc2`` package): shuffle + a fast compressor.

Blosc splits each chunk into blocks, applies a byte-shuffle filter that groups
the n-th byte of every element together (this is what makes it shine on
numeric arrays), then compresses with one of several inner codecs, exposed
here as ``blosc:lz4``, ``blosc:zstd``, ``blosc:zlib`` and ``blosc:blosclz``.
"""

import blosc2 as _blosc2

from .abc import Codec

_INNER = {
    "lz4": _blosc2.Codec.LZ4,
    "zstd": _blosc2.Codec.ZSTD,
    "zlib": _blosc2.Codec.ZLIB,
    "blosclz": _blosc2.Codec.BLOSCLZ,
}
# python-blosc2 holds the GIL while it compresses unless told otherwise, so
# chunks compressed on cpersist's thread pool ran one at a time: 2 threads
# gave 1.0x one thread (1350 vs 1390 MB/s); releasing it gives 2.0x. The
# setting is process-wide; its cost is only felt with tiny blocks.
_blosc2.set_releasegil(True)

#: Largest typesize Blosc's shuffle accepts; larger items are not shuffled.
_MAX_TYPESIZE = 255


def shuffles(buf, typesize):
    """Whether Blosc's byte shuffle applies to ``buf`` of ``typesize`` items."""
    return 1 < typesize <= _MAX_TYPESIZE and len(buf) % typesize == 0


def check_blosc_chunk(codec, head, stored, raw):
    """Check a Blosc chunk header against the sizes the index claims.

    Raises
    ------
    CorruptFileError
        Naming ``codec``, if the header is unreadable or disagrees.
    """
    try:
        nbytes, cbytes, _ = _blosc2.get_cbuffer_sizes(head)
    except Exception as exc:  # blosc2 raises bare Exceptions/ValueErrors
        raise codec._invalid(exc) from None
    if cbytes != stored:
        raise codec._invalid(f"header says {cbytes} stored bytes, the index {stored}")
    if nbytes != raw:
        raise codec._wrong_size(nbytes, raw)


def decode_blosc_chunk(codec, src, out):
    """Decode one Blosc chunk into ``out``; errors name ``codec``.

    The sizes Blosc claims are checked before it writes anything into
    ``out``: blosc2.decompress trusts the header's compressed size, so a
    truncated buffer would make it read past its end (a segfault).
    """
    check_blosc_chunk(codec, src, len(src), len(out))
    try:
        _blosc2.decompress2(src, dst=out, nthreads=1)
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

    def check_header(self, head, stored, raw):
        check_blosc_chunk(self, head, stored, raw)

    def encode(self, buf, typesize=1, hint=None):
        shuffle = shuffles(buf, typesize)
        # nthreads=1: cpersist already runs one chunk per core; Blosc's own
        # threads on top would oversubscribe the CPUs.
        return _blosc2.compress2(
            buf,
            typesize=typesize if shuffle else 1,
            clevel=self.level,
            filters=[_blosc2.Filter.SHUFFLE if shuffle else _blosc2.Filter.NOFILTER],
            codec=_INNER[self.inner],
            nthreads=1,
        )

    def decode_into(self, src, out):
        decode_blosc_chunk(self, src, out)


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
