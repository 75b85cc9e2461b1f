"""Zstandard with a byte-shuffle + byte-delta filter where a probe says it pays.

Numeric arrays whose neighbouring values are close (counters, time series,
integer images) compress far better once the n-th byte of every element is
grouped together and each byte replaced by its difference from the previous
one. Smooth float maps and sparse tables, on the other hand, compress better
as they are. This codec decides per chunk: it compresses a sample in each
form (plain; filtered at zstd level 1 and, at levels 4-9, a stronger one)
and keeps the smallest. Each stored chunk says which way it went: a plain
Zstandard frame, or a Blosc2 chunk (shuffle, byte delta, Zstandard inside)
that Blosc's own decoder undoes.

The user guide (docs/user_guide.rst) says when to choose it; the published
benchmark run (docs/benchmark_results.rst) compares it with plain Zstandard
on the benchmark's datasets.
"""

from .abc import Codec, middle_sample
from .blosc import check_blosc_chunk, decode_blosc_chunk, decode_blosc_part, shuffles
from .libblosc2 import BYTEDELTA, SHUFFLE, compress
from .zstd import Zstd

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Zstandard level used behind the filters, for each cpersist level. After
#: shuffle + delta, numeric data is mostly long runs that zstd's fastest
#: strategy already finds, and finds much faster than level 3, for a ratio as
#: good or better: so levels 1-3 use 1. Higher levels also try level 1 on the
#: sample, since a stronger zstd is not always smaller after the filters (on a
#: random walk it is not; on small-integer images it is).
_FILTERED_ZSTD_LEVEL = {1: 1, 2: 1, 3: 1, 4: 3, 5: 3, 6: 5, 7: 5, 8: 7, 9: 9}
#: Blosc block size: 256 KiB fits in L2 with its compressed copy.
_BLOCK_SIZE = 256 << 10
#: Chunks up to this size are compressed every way in full to choose.
_WHOLE_CHOICE = 128 << 10
#: Sample compressed every way to choose for larger chunks.
_SAMPLE_SIZE = 64 << 10
PLAIN = "plain"


class ZstdAuto(Codec):
    """Zstandard, behind Blosc's shuffle + byte delta on chunks where it pays.

    Parameters
    ----------
    level : int
        1–9. Plain chunks use Zstandard at this level; filtered chunks use
        the level in ``_FILTERED_ZSTD_LEVEL`` (1 for levels 1–3) or level 1,
        whichever compresses the sample smaller.
    """

    codec_id = "zstd-auto"
    #: Blosc chunks have no static bound (see :mod:`.blosc`); both kinds of
    #: chunk state their size in a header, which is checked instead.
    max_expansion = None
    header_size = 32

    def __init__(self, level=3):
        super().__init__(level)
        self._zstd = Zstd(level)
        # Blosc's clevel c runs Zstandard at level 2c - 1. The hint a probe
        # returns is PLAIN or the clevel that won.
        self._clevels = sorted({1, (_FILTERED_ZSTD_LEVEL[level] + 1) // 2})

    def _filtered(self, buf, typesize, clevel):
        # On this thread: cpersist already runs one chunk per core.
        return compress(buf, typesize, clevel, "zstd", [SHUFFLE, BYTEDELTA], _BLOCK_SIZE)

    def _candidates(self, buf, typesize):
        """(encoded, hint) of ``buf`` in every form this codec may choose."""
        yield self._zstd.encode(buf), PLAIN
        if shuffles(buf, typesize):
            for clevel in self._clevels:
                yield self._filtered(buf, typesize, clevel), clevel

    def probe(self, sample, typesize=1):
        # Ties go to the first candidate, plain zstd (the faster to decode).
        return min(((len(encoded), hint) for encoded, hint in
                    self._candidates(sample, typesize)), key=lambda size_hint: size_hint[0])

    def encode(self, buf, typesize=1, hint=None):
        if not shuffles(buf, typesize):
            return self._zstd.encode(buf)
        if hint is None and len(buf) <= _WHOLE_CHOICE:
            encoded, _ = min(self._candidates(buf, typesize),
                             key=lambda candidate: len(candidate[0]))
            return encoded
        if hint is None:
            _, hint = self.probe(middle_sample(buf, typesize, _SAMPLE_SIZE), typesize)
        if hint == PLAIN:
            return self._zstd.encode(buf)
        return self._filtered(buf, typesize, hint)

    def check_header(self, head, length, raw_length):
        if bytes(head[:4]) == _ZSTD_MAGIC:
            self._zstd.check_header(head, length, raw_length)
        else:
            check_blosc_chunk(self, head, length, raw_length)

    def decode_into(self, src, out):
        if bytes(src[:4]) == _ZSTD_MAGIC:
            self._zstd.decode_into(src, out)
            return
        decode_blosc_chunk(self, src, out)

    def decode_part_into(self, src, skip, out, whole):
        if bytes(src[:4]) == _ZSTD_MAGIC:
            self._zstd.decode_part_into(src, skip, out, whole)
            return
        decode_blosc_part(self, src, skip, out, whole)
