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

A caller that knows its data gains much speed for little space (the
pickling layer, for bfloat16 weights) asks for :meth:`ZstdAuto.favouring_speed`:
at levels 1-3 that codec also tries Blosc's bit shuffle with LZ4 behind it,
which writes several times and reads about twice as fast as the filtered
Zstandard form, and a plain frame at Zstandard level 1; it keeps the fast
form unless it is more than :data:`FAST_SLACK` larger than the smallest,
else the level-1 frame if it is within :data:`QUICK_PLAIN_SLACK` of the
smallest; chunks of up to :data:`_FAST_SAMPLE_SIZE` bytes
it writes as plain Zstandard frames, without trying the others. Its chunks
are Blosc2 chunks or Zstandard frames too, so the same decoder reads them
and files record the same codec.

The user guide (docs/user_guide.rst) says when to choose it; the published
benchmark run (docs/benchmark_results.rst) compares it with plain Zstandard
on the benchmark's datasets.
"""

from .abc import Codec, middle_sample
from .blosc import check_blosc_chunk, decode_blosc_chunk, decode_blosc_part, shuffles
from .libblosc2 import BITSHUFFLE, BYTEDELTA, SHUFFLE, compress
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
#: Hint of the fast form (bit shuffle, then LZ4), and the levels that try
#: it when favouring speed.
FAST = "fast"
FAST_LEVELS = range(1, 4)
#: The fast form bit-shuffles items of this many bytes, whole numbers of
#: the data's items: every bit plane of a 2-byte item is still a plane of
#: its own, and Blosc's bit unshuffle runs its AVX2 code only on items of a
#: multiple of 4 bytes (on 2-byte items, SSE2 code). Pairs of bfloat16
#: values decode a quarter faster than single ones and encode nearly as
#: fast; 8-byte items decode a little faster still, but encode slower.
_FAST_ITEM = 4
#: When favouring speed, the fast form is kept if it is at most this much
#: larger than the smallest form: on bfloat16 weights it is a little larger,
#: and writes and reads several times faster.
FAST_SLACK = 0.10
#: Hint of a plain Zstandard frame at level 1, which levels 2-3 also try
#: when favouring speed: on bfloat16 weights and optimiser moments level
#: 3's deeper search finds nothing more than level 1 does (the sizes differ
#: by under 0.2%) and takes up to four times as long.
QUICK_PLAIN = "plain at level 1"
#: When favouring speed and the fast form is not kept, the level-1 frame
#: is kept if it is at most this much larger than the smallest form: it
#: writes about twice as fast as the filtered form, but on weights reads up
#: to a third slower, so only where it is about as small. On an Adam
#: optimiser's second moment computed in bfloat16 (small positive values
#: whose exponents vary) the fast form is about 11% larger than the others,
#: and the level-1 frame is as small as any and reads as fast.
QUICK_PLAIN_SLACK = 0.01
#: What decoding a barely compressible chunk costs, relative to a plain
#: Zstandard frame (see :meth:`ZstdAuto.decode_cost`), of the filtered form
#: of items of 4 bytes or more, and of the fast form. Blosc compresses each
#: byte of an item as a stream of its own and stores a stream that does not
#: shrink as a plain copy: in noisy float32 and float64 data, the low
#: mantissa bytes, half of the data or more, decode as copies and the
#: filtered chunk decodes in about 0.4 of the time of a Zstandard frame of
#: the same data. Items of 2 bytes gain less (1 is assumed). LZ4 behind the
#: bit shuffle decodes bfloat16 weights about 2.5 times as fast as
#: Zstandard.
_FILTERED_DECODE_COST = 0.4
_FAST_DECODE_COST = 0.4
#: When favouring speed, whether the fast form is kept is judged on this
#: much of the sample (from its middle): compressing the whole sample every
#: way is a large part of a bfloat16 dump, and the smaller part gives the
#: same verdict on weights, sparse, quantized and constant data.
_FAST_SAMPLE_SIZE = 16 << 10
#: Hint of the shuffled form: Blosc's byte shuffle without the byte delta,
#: Zstandard inside at the level of plain frames (see
#: :meth:`ZstdAuto.trying_shuffle_alone`).
SHUFFLE_ALONE = "shuffle alone"


class ZstdAuto(Codec):
    """Zstandard, behind Blosc's shuffle + byte delta on chunks where it pays.

    Parameters
    ----------
    level : int
        1–9. Plain chunks use Zstandard at this level; filtered chunks use
        the level in ``_FILTERED_ZSTD_LEVEL`` (1 for levels 1–3) or level 1,
        whichever compresses the sample smaller.
    favour_speed : bool
        At levels 1–3, also try the fast form (see :meth:`favouring_speed`).
        A choice of the writer only: the recorded configuration
        (:meth:`get_config`) and decoding are the same either way.
    shuffle_alone : bool
        Also try the byte shuffle without the byte delta (see
        :meth:`trying_shuffle_alone`); a choice of the writer only, too.
    """

    codec_id = "zstd-auto"
    #: Blosc chunks have no static bound (see :mod:`.blosc`); both kinds of
    #: chunk state their size in a header, which is checked instead.
    max_expansion = None
    header_size = 32

    def __init__(self, level=3, *, favour_speed=False, shuffle_alone=False):
        super().__init__(level)
        self.favour_speed = bool(favour_speed)
        self.shuffle_alone = bool(shuffle_alone)
        self._fast = self.favour_speed and level in FAST_LEVELS
        self._zstd = Zstd(level)
        self._quick_zstd = Zstd(1) if self._fast and level != 1 else None
        # Favouring speed, the forms from the fastest to write and read, each
        # kept if at most its slack larger than the smallest. At level 1 the
        # plain frame is the level-1 one.
        self._speed_order = ((FAST, FAST_SLACK),
                             (PLAIN if level == 1 else QUICK_PLAIN, QUICK_PLAIN_SLACK))
        # Blosc's clevel c runs Zstandard at level 2c - 1. The hint a probe
        # returns is PLAIN, the clevel that won, SHUFFLE_ALONE or FAST.
        self._clevels = sorted({1, (_FILTERED_ZSTD_LEVEL[level] + 1) // 2})
        # The shuffled form's clevel: Zstandard at the plain frames' level
        # (rounded down to an odd one).
        self._shuffle_clevel = (level + 1) // 2

    def favouring_speed(self):
        """This codec, trying at levels 1–3 a form that writes several times
        and reads about twice as fast for a little more space: Blosc's bit
        shuffle with LZ4 behind it; plain frames at Zstandard level 1 are
        tried too. A chunk gets the fast form unless it is more than
        :data:`FAST_SLACK` larger than the smallest, else the level-1 frame
        if it is within :data:`QUICK_PLAIN_SLACK` of the smallest.

        The bit shuffle pays on 16-bit floats whose exponent bits barely
        vary (bfloat16 weights); on other data it gives up more space,
        which is why it is asked for rather than tried on every chunk.
        """
        if self.favour_speed or self.level not in FAST_LEVELS:
            return self  # at levels 4-9 size comes first
        return ZstdAuto(self.level, favour_speed=True, shuffle_alone=self.shuffle_alone)

    def trying_shuffle_alone(self):
        """This codec, also trying on every chunk of items of 2 to 255
        bytes Blosc's byte shuffle without the byte delta, Zstandard behind
        it at the level of plain frames (Blosc level ``(level + 1) // 2``,
        Zstandard ``2 * that - 1``).

        The delta turns bytes that change little from one item to the next
        into runs of zeros; where neighbouring items are not close, but
        their bytes repeat further on (rows that hold smooth columns and
        noisy ones side by side, each row much like the one before), it
        adds noise instead, and the shuffle alone compresses better (as on
        the append benchmark's rows, half smooth and half noise). Its
        chunks decode as the other Blosc chunks do, so files record the
        same :meth:`get_config`.
        """
        if self.shuffle_alone:
            return self
        return ZstdAuto(self.level, favour_speed=self.favour_speed, shuffle_alone=True)

    def _filtered(self, buf, typesize, clevel):
        # On this thread: cpersist already runs one chunk per core.
        if clevel == SHUFFLE_ALONE:
            return compress(buf, typesize, self._shuffle_clevel, "zstd", [SHUFFLE], _BLOCK_SIZE)
        if clevel == FAST:
            item = _FAST_ITEM if _FAST_ITEM % typesize == 0 and len(buf) % _FAST_ITEM == 0 \
                else typesize
            return compress(buf, item, self.level, "lz4", [BITSHUFFLE], _BLOCK_SIZE)
        return compress(buf, typesize, clevel, "zstd", [SHUFFLE, BYTEDELTA], _BLOCK_SIZE)

    def _candidates(self, buf, typesize):
        """(encoded, hint) of ``buf`` in every form this codec may choose."""
        yield self._zstd.encode(buf), PLAIN
        if self._quick_zstd is not None:
            yield self._quick_zstd.encode(buf), QUICK_PLAIN
        if shuffles(buf, typesize):
            for clevel in self._clevels:
                yield self._filtered(buf, typesize, clevel), clevel
            if self.shuffle_alone:
                yield self._filtered(buf, typesize, SHUFFLE_ALONE), SHUFFLE_ALONE
            if self._fast:
                yield self._filtered(buf, typesize, FAST), FAST

    def _choice(self, buf, typesize):
        """``(encoded, hint)`` of the form kept for ``buf``: the smallest
        (ties to the first, plain zstd, the faster to decode), or, favouring
        speed, the fast form or else the level-1 frame, if within its slack
        (:data:`FAST_SLACK`, :data:`QUICK_PLAIN_SLACK`) of it."""
        candidates = list(self._candidates(buf, typesize))
        best = min(candidates, key=lambda candidate: len(candidate[0]))
        if self._fast:
            forms = {hint: encoded for encoded, hint in candidates}
            for hint, slack in self._speed_order:
                if hint in forms and len(forms[hint]) <= len(best[0]) * (1 + slack):
                    return forms[hint], hint
        return best

    def _fast_kept(self, sample, typesize):
        """Whether the fast form is kept for ``sample``, judged on its middle
        :data:`_FAST_SAMPLE_SIZE` bytes."""
        if self._fast and len(sample) > _FAST_SAMPLE_SIZE and shuffles(sample, typesize):
            part = middle_sample(sample, typesize, _FAST_SAMPLE_SIZE)
            return self._choice(part, typesize)[1] == FAST
        return False

    def probe(self, sample, typesize=1):
        if self._fast_kept(sample, typesize):
            return len(self._filtered(sample, typesize, FAST)), FAST
        encoded, hint = self._choice(sample, typesize)
        return len(encoded), hint

    def decode_cost(self, hint, typesize=1):
        """1 for a plain Zstandard frame; :data:`_FILTERED_DECODE_COST` for
        the filtered forms, with the byte delta or without, of items of 4
        bytes or more (1 for smaller ones), :data:`_FAST_DECODE_COST` for
        the fast form."""
        if hint == FAST:
            return _FAST_DECODE_COST
        if hint in (None, PLAIN, QUICK_PLAIN) or typesize < 4:
            return 1.0
        return _FILTERED_DECODE_COST

    def encode(self, buf, typesize=1, hint=None):
        if not shuffles(buf, typesize) or self._fast and len(buf) <= _FAST_SAMPLE_SIZE:
            # Favouring speed, a chunk no larger than the fast form's sample
            # (a model's biases and norms) is not judged: compressing it
            # every way would cost more than the few bytes it could save.
            return self._zstd.encode(buf)
        if hint is None and len(buf) <= _WHOLE_CHOICE:
            return self._choice(buf, typesize)[0]
        if hint is None:
            # The form only, not the sample's size in it (probe's).
            sample = middle_sample(buf, typesize, _SAMPLE_SIZE)
            hint = FAST if self._fast_kept(sample, typesize) else self._choice(sample, typesize)[1]
        if hint == PLAIN:
            return self._zstd.encode(buf)
        if hint == QUICK_PLAIN:
            return self._quick_zstd.encode(buf)
        return self._filtered(buf, typesize, hint)

    def __repr__(self):
        options = "".join(f", {name}=True" for name in ("favour_speed", "shuffle_alone")
                          if getattr(self, name))
        return f"ZstdAuto(level={self.level}{options})"

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
