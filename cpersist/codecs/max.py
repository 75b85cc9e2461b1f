"""The ``"max"`` codec: the smallest chunk cpersist can make, whatever the time.

Each chunk is tried under several filters (none, byte shuffle, byte shuffle +
byte delta, integer delta, zigzag integer delta + byte shuffle, split of the
most common item, byte reversal) and three
back ends (Zstandard 22, LZMA2 at preset 9 extreme, bzip2 9). Every pair is
run on a sample of the chunk; the best two, and the best of each back end,
are run on the whole chunk and the smallest kept. Each stored chunk starts
with a 12-byte header naming what won (layout in docs/format.rst), so
decoding needs no search.
"""

import struct

import numpy as np

from .abc import Codec, middle_sample

#: back end, filter, element size, reserved (0), decoded size.
HEADER = struct.Struct("<BBBBQ")
ZSTD, LZMA, BZ2 = 1, 2, 3
NONE, SHUFFLE, SHUFFLE_BYTEDELTA, DELTA, ZIGZAG_SHUFFLE, SPLIT, SPLIT_BYTESWAP, REVERSE = range(8)
#: Filters that work on items as unsigned integers (sizes 1, 2, 4, 8 only).
_INTEGER_FILTERS = (DELTA, ZIGZAG_SHUFFLE, SPLIT, SPLIT_BYTESWAP)
_BACKENDS = (ZSTD, LZMA, BZ2)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
#: Chunks up to this size are compressed every way in full to choose.
_WHOLE_CHOICE = 256 << 10
#: Sample every way is tried on for larger chunks, and how many of the best
#: ways are then run on the whole chunk (a sample ranks close ways
#: unreliably), besides the best way of each back end.
_SAMPLE_SIZE = 256 << 10
_FINALISTS = 2
_ZSTD_LEVEL = 22


def _filters(typesize):
    """(filter, element size) pairs worth trying for items of ``typesize``."""
    if typesize > 255:  # the header holds the element size in one byte
        typesize = 1
    if typesize == 1:
        # Bytes may still be interleaved records: RGB and RGBA pixels.
        return [(NONE, 1), (REVERSE, 1), (DELTA, 1), (SHUFFLE, 3), (SHUFFLE_BYTEDELTA, 3),
                (SHUFFLE, 4), (SHUFFLE_BYTEDELTA, 4)]
    pairs = [(NONE, typesize), (REVERSE, 1), (SHUFFLE, typesize),
             (SHUFFLE_BYTEDELTA, typesize)]
    if typesize in _UINT:
        pairs += [(f, typesize) for f in _INTEGER_FILTERS]
    return pairs


def _bytes(buf):
    return np.frombuffer(buf, np.uint8)


def _shuffle(a, size):
    n = len(a) // size
    return a[:n * size].reshape(n, size).T


def _delta(a, size):
    items = a[:len(a) // size * size].view(_UINT[size])
    out = np.empty_like(items)
    out[:1] = items[:1]
    np.subtract(items[1:], items[:-1], out=out[1:])
    return out


def apply_filter(buf, flt, size):
    """The bytes ``flt`` makes of ``buf`` (a tail shorter than ``size`` kept as is)."""
    a = _bytes(buf)
    body = len(a) // size * size
    if flt == NONE or not body:
        return a
    if flt == REVERSE:
        # bzip2 predicts each byte from the bytes after it; reversed, from
        # those before it, which on text (pickled strings) predict better.
        return a[::-1].copy()
    if flt in (SPLIT, SPLIT_BYTESWAP):
        return _split(a, size, flt == SPLIT_BYTESWAP)
    if flt in (SHUFFLE, SHUFFLE_BYTEDELTA):
        # A copy always (ascontiguousarray would return the caller's own
        # bytes when there is one item, and the delta below would write them).
        planes = _shuffle(a, size).copy().ravel()
        if flt == SHUFFLE_BYTEDELTA:
            planes[1:] = np.diff(planes)
    else:
        d = _delta(a, size)
        if flt == ZIGZAG_SHUFFLE:
            bits = 8 * size
            # Small negative steps become small numbers instead of 0xff..
            # bytes repeated in every plane.
            d = (d << d.dtype.type(1)) ^ (d.view(d.dtype.str.replace("u", "i")) >> (bits - 1)).view(d.dtype)
            planes = np.ascontiguousarray(_shuffle(d.view(np.uint8), size)).ravel()
        else:
            planes = d.view(np.uint8)
    return np.concatenate([planes, a[body:]])


def _bitmap_size(n, size):
    """Bytes of the bitmap of ``n`` items, padded to whole items."""
    m = (n + 7) // 8
    return m + -m % size


def _split(a, size, byteswap):
    """The most common item, a bitmap of the others, then the others.

    Sparse data (zeros outside a mask, NaN in a table) then leaves the back
    end a dense bitmap and the values alone, each compressing better than
    the two interleaved. Byte-swapped, the others put their high bytes
    first, which bzip2's sort groups better on floats.
    """
    body = len(a) // size * size
    items = a[:body].view(_UINT[size])
    values, counts = np.unique(items, return_counts=True)
    common = values[counts.argmax()]
    mask = items != common
    bitmap = np.zeros(_bitmap_size(len(items), size), np.uint8)
    packed = np.packbits(mask)
    bitmap[:len(packed)] = packed
    rest = items[mask]
    if byteswap:
        rest = rest.byteswap()
    return np.concatenate([common.reshape(1).view(np.uint8), bitmap, rest.view(np.uint8), a[body:]])


def _unsplit(data, size, byteswap, o, body):
    n = body // size
    bitmap_end = size + _bitmap_size(n, size)
    if len(data) < bitmap_end:
        raise ValueError("split chunk shorter than its bitmap")
    mask = np.unpackbits(data[size:bitmap_end], count=n).view(bool)
    end = bitmap_end + int(np.count_nonzero(mask)) * size
    if len(data) != end + len(o) - body:
        raise ValueError(f"split chunk of {len(data)} bytes, its bitmap says {end + len(o) - body}")
    rest = data[bitmap_end:end].view(_UINT[size])
    items = o[:body].view(_UINT[size])
    items[:] = data[:size].view(_UINT[size])[0]
    items[mask] = rest.byteswap() if byteswap else rest
    o[body:] = data[end:]


def filtered_bound(decoded, size):
    """Most bytes any filter makes of a ``decoded``-byte chunk."""
    return decoded + size + _bitmap_size(decoded // size, size)


def undo_filter(data, flt, size, out):
    """Write into ``out`` (bytes) what ``flt`` made ``data`` from.

    Raises
    ------
    ValueError
        If ``data`` is not the length ``flt`` makes.
    """
    o = _bytes(out)
    body = len(o) // size * size
    if flt in (SPLIT, SPLIT_BYTESWAP) and body:
        _unsplit(data, size, flt == SPLIT_BYTESWAP, o, body)
        return
    if len(data) != len(o):
        raise ValueError(f"filtered chunk of {len(data)} bytes, expected {len(o)}")
    if flt == NONE or not body:
        o[:] = data
        return
    if flt == REVERSE:
        o[:] = data[::-1]
        return
    n = body // size
    o[body:] = data[body:]
    data = data[:body]
    if flt in (SHUFFLE, SHUFFLE_BYTEDELTA):
        if flt == SHUFFLE_BYTEDELTA:
            data = np.cumsum(data, dtype=np.uint8)
        o[:body].reshape(n, size)[...] = data.reshape(size, n).T
        return
    if flt == ZIGZAG_SHUFFLE:
        z = np.ascontiguousarray(data.reshape(size, n).T).view(_UINT[size]).ravel()
        one = z.dtype.type(1)
        data = ((z >> one) ^ np.negative(z & one)).view(np.uint8)
    items = np.cumsum(data.view(_UINT[size]), dtype=_UINT[size])
    o[:body] = items.view(np.uint8)


def _lzma_filters(decoded, size):
    """The raw LZMA2 filter chain for a chunk. The decoder needs only the
    dictionary size: the smallest power of two that holds what the filter
    can make of the chunk, which the decoded size in the header gives."""
    import lzma

    bound = filtered_bound(decoded, size)
    return lzma, [{"id": lzma.FILTER_LZMA2,
                   "dict_size": max(4096, 1 << (bound - 1).bit_length())}]


def _compress(backend, data, flt, size, decoded):
    if backend == ZSTD:
        import zstandard

        return zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data)
    if backend == BZ2:
        import bz2

        return bz2.compress(data, 9)
    lzma, filters = _lzma_filters(decoded, size)
    # The preset first: it sets every option, dict_size included.
    filters[0] = {"preset": 9 | lzma.PRESET_EXTREME, **filters[0]}
    if flt in (NONE, DELTA, SPLIT) and size in (2, 4, 8):
        # Numbers left unshuffled: literal and position contexts aligned
        # to items rather than to text.
        bits = size.bit_length() - 1
        filters[0].update(lc=0, lp=bits, pb=bits)
    return lzma.compress(data, format=lzma.FORMAT_RAW, filters=filters)


class Max(Codec):
    """Per chunk, the smallest of every filter and back end cpersist knows.

    Parameters
    ----------
    level : int
        1–9, default 9. Every level searches the same ways; the level only
        sets the saving a chunk's sample must show to be compressed at all
        (as for every codec of one form: 15% below level 6, 5% from 6
        on). A whole
        object written as one chunk (see :func:`cpersist.dump`) is
        compressed whatever its sample shows.
    """

    codec_id = "max"
    header_size = HEADER.size

    def __init__(self, level=9):
        super().__init__(level)

    def _encode_with(self, buf, way):
        backend, flt, size = way
        data = apply_filter(buf, flt, size)
        return HEADER.pack(backend, flt, size, 0, len(buf)) + _compress(
            backend, data, flt, size, len(buf))

    def _ways(self, typesize):
        # Reversing only changes what bzip2's sort sees.
        return [(b, f, s) for f, s in _filters(typesize) for b in _BACKENDS
                if f != REVERSE or b == BZ2]

    def _rank(self, buf, typesize):
        """Every way, best first, with what it made of ``buf``."""
        sized = [(self._encode_with(buf, way), way) for way in self._ways(typesize)]
        return sorted(sized, key=lambda c: len(c[0]))

    def encode(self, buf, typesize=1, hint=None):
        # The hint of the container's probe is not used: its 64 KiB sample
        # ranks close ways less reliably than this codec's larger one.
        if len(buf) <= _WHOLE_CHOICE:
            return self._rank(buf, typesize)[0][0]
        ranked = [way for _, way in self._rank(middle_sample(buf, typesize, _SAMPLE_SIZE),
                                               typesize)]
        # The best way of each back end too: what a sample cannot show (data
        # repeated further apart than the sample is long, which only LZMA2's
        # and Zstandard's windows reach) can reverse their order.
        finalists = ranked[:_FINALISTS]
        for backend in _BACKENDS:
            way = next(w for w in ranked if w[0] == backend)
            if way not in finalists:
                finalists.append(way)
        return min((self._encode_with(buf, way) for way in finalists), key=len)

    def check_header(self, head, stored, raw):
        if len(head) < HEADER.size:
            raise self._invalid(f"{len(head)}-byte chunk, shorter than its header")
        backend, flt, size, reserved, decoded = HEADER.unpack_from(head)
        if backend not in _BACKENDS or flt > REVERSE or not size or reserved:
            raise self._invalid(f"unknown method {bytes(head[:4]).hex()}")
        if flt in _INTEGER_FILTERS and size not in _UINT:
            raise self._invalid(f"integer filter over {size}-byte items")
        if decoded != raw:
            raise self._wrong_size(decoded, raw)

    def decode_into(self, src, out):
        src = memoryview(src).cast("B")
        self.check_header(src[:HEADER.size], len(src), len(out))
        backend, flt, size, _, decoded = HEADER.unpack_from(src)
        payload = src[HEADER.size:]
        import lzma

        import zstandard

        try:
            data = _decompress(backend, payload, size, decoded)
            undo_filter(_bytes(data), flt, size, out)
        except (OSError, ValueError, EOFError, lzma.LZMAError, zstandard.ZstdError) as exc:
            raise self._invalid(exc) from None


def _decompress(backend, payload, size, decoded):
    """The filtered bytes of a chunk (one more than any filter makes, at most)."""
    limit = filtered_bound(decoded, size) + 1
    if backend == ZSTD:
        import zstandard

        pieces, got = [], 0
        with zstandard.ZstdDecompressor().stream_reader(
                payload, read_across_frames=False) as reader:
            while got < limit:
                piece = reader.read(limit - got)
                if not piece:
                    break
                pieces.append(piece)
                got += len(piece)
        return b"".join(pieces)
    if backend == LZMA:
        lzma, filters = _lzma_filters(decoded, size)
        decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=filters)
    else:
        import bz2

        decompressor = bz2.BZ2Decompressor()
    data = decompressor.decompress(payload, limit)
    if not decompressor.eof or decompressor.unused_data:
        raise ValueError("stream truncated or followed by extra bytes")
    return data
