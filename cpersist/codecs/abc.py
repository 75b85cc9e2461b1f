"""The abstract codec every cpersist compressor implements.

A codec turns one chunk of bytes into a compressed buffer and back. It knows
nothing of numpy objects, pickling or the file layout: the container asks it to
``encode`` a chunk and to ``decode_into`` a preallocated slice of the final
array, so that loading never needs a second full-size buffer.
"""

from abc import ABC, abstractmethod

from ..exceptions import CorruptFileError

#: Levels a user may ask for. Each codec maps them onto its own native scale.
LEVELS = range(1, 10)


def middle_sample(buf, typesize, size):
    """``size`` bytes from the middle of ``buf``, starting on an element boundary.

    What a chunk is judged by before it is compressed (see :meth:`Codec.probe`).
    """
    start = (len(buf) // 2) // typesize * typesize
    return buf[start:start + size]


#: Bytes a streaming decompressor hands over per call in
#: :func:`fill_stepwise`: output goes to the chunk's slice of the array a
#: step at a time, so that no chunk is ever held twice, and a chunk that
#: decodes to more than its slice stops one step past it.
DECODE_STEP = 1 << 20


def fill_stepwise(decode, out):
    """Fill ``out`` with what ``decode(max_length)`` returns, call after call.

    ``decode`` returns at most ``max_length`` more decoded bytes, and
    ``b""`` once it has no more to give. It is asked for one byte more than
    ``out`` has room for, so that a chunk decoding to more is caught
    without writing past ``out``.

    Returns
    -------
    int
        Bytes decoded: ``len(out)`` when the chunk fits exactly, more
        (nothing past ``out`` written) or fewer otherwise.
    """
    n = len(out)
    filled = 0
    while True:
        piece = decode(min(DECODE_STEP, n - filled + 1))
        if not piece:
            return filled
        if len(piece) > n - filled:
            return filled + len(piece)
        out[filled:filled + len(piece)] = piece
        filled += len(piece)


def fill_from_decompressor(decompressor, src, out):
    """:func:`fill_stepwise` from a :mod:`bz2` / :mod:`lzma` style
    ``decompressor`` (``decompress(data, max_length)``, ``eof``,
    ``needs_input``) fed ``src``; returns the bytes decoded. The caller
    checks ``eof`` and ``unused_data``: a whole chunk, nothing after it."""
    pending = [src]

    def decode(max_length):
        # max_length bounds each call's output to what the slice has
        # room for; the decompressor keeps the input it has not used.
        for _ in range(3):  # a call may only take in input, never more than twice
            if decompressor.eof or decompressor.needs_input and not pending[0]:
                break
            piece = decompressor.decompress(pending[0], max_length)
            pending[0] = b""
            if piece:
                return piece
        return b""

    return fill_stepwise(decode, out)


class Codec(ABC):
    """Compress and decompress independent chunks of bytes.

    Parameters
    ----------
    level : int
        Compression level from 1 (fastest) to 9 (smallest).

    Notes
    -----
    Subclasses set :attr:`codec_id`, the name used in files and in the
    registry, and implement :meth:`encode` and :meth:`decode_into`. Both must
    be safe to call from several threads at once and should release the GIL
    on large buffers, since cpersist compresses chunks on a thread pool.
    """

    #: Name under which the codec is registered and recorded in files.
    codec_id = None

    def __init__(self, level=3):
        if isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS:
            raise ValueError(
                f"{self.codec_id} level must be an int from 1 to 9, got {level!r}"
            )
        self.level = level

    @abstractmethod
    def encode(self, buf, typesize=1, hint=None):
        """Compress one chunk.

        Parameters
        ----------
        buf : memoryview
            Contiguous bytes (format ``B``) to compress.
        typesize : int
            Size in bytes of one element of the array the chunk comes from;
            codecs with a shuffle filter use it, others ignore it.
        hint : object, optional
            What :meth:`probe` returned for a sample of this chunk, so that a
            codec that chooses between encodings need not probe again.

        Returns
        -------
        bytes-like
            The compressed chunk.
        """

    @abstractmethod
    def decode_into(self, src, out):
        """Decompress one chunk into a preallocated buffer.

        A codec whose chunks state their decoded size in a header
        (``header_size``) compares it with ``len(out)`` before writing
        anything: a load allocates an array of the size the index claims
        before reading the chunks, relying on this check.

        Parameters
        ----------
        src : bytes-like
            A chunk produced by :meth:`encode`.
        out : memoryview
            Writable contiguous bytes that must be filled exactly.

        Raises
        ------
        CorruptFileError
            If ``src`` is not a valid chunk or does not decompress to exactly
            ``len(out)`` bytes.
        """

    def decode_part_into(self, src, skip, out, whole):
        """Decompress the part of one chunk a reader of a slice needs.

        Fills ``out`` with the decoded bytes ``skip:skip + len(out)`` of the
        chunk. This default decodes all of it into ``whole`` and copies the
        part; codecs that can stop early or decode blocks of a chunk
        override it to do less.

        Parameters
        ----------
        src : bytes-like
            A chunk produced by :meth:`encode`.
        skip : int
        out : memoryview
            Writable contiguous bytes to fill exactly.
        whole : memoryview
            Writable bytes of the chunk's decoded size, free to overwrite.

        Raises
        ------
        CorruptFileError
            As :meth:`decode_into`.
        """
        self.decode_into(src, whole)
        out[:] = whole[skip:skip + len(out)]

    def probe(self, sample, typesize=1):
        """Compress a sample of a chunk, to see whether compressing pays.

        Parameters
        ----------
        sample : memoryview
            A slice of the chunk (the container takes 64 KiB from its middle).
        typesize : int

        Returns
        -------
        size : int
            Compressed size of the sample.
        hint : object
            Passed back to :meth:`encode` for the whole chunk; ``None`` here.
        """
        return len(self.encode(sample, typesize)), None

    def decode_cost(self, hint, typesize=1):
        """What decoding a barely compressible chunk in the form :meth:`probe`
        chose (``hint``) costs, relative to the codec's usual form.

        A chunk is stored compressed only if its sample saves at least 15%
        (levels 1-5) or 5% (levels 6-9) times this cost: a form that
        decodes in half the time pays with half the saving. This default
        is 1: the codec has one form.

        Parameters
        ----------
        hint : object
            As returned by :meth:`probe`.
        typesize : int

        Returns
        -------
        float
        """
        return 1.0

    #: Largest ratio of decoded size to encoded length one chunk can reach,
    #: from the format's own limits; ``None`` when the format has no such
    #: limit (the chunk header states its size: see :meth:`check_header`).
    #: Readers use it to reject an index that claims more data than its
    #: chunks can hold, before allocating anything.
    max_expansion = None
    #: Bytes at the start of a chunk that :meth:`check_header` needs (0: the
    #: format does not state the decoded size).
    header_size = 0

    def max_raw_size(self, length):
        """Upper bound of the decoded size of a ``length``-byte chunk, or None."""
        if self.max_expansion is None:
            return None
        return self.max_expansion * length + 1024

    def check_header(self, head, length, raw_length):
        """Check a chunk's self-declared sizes against the index, decoding nothing.

        Parameters
        ----------
        head : bytes
            The first ``min(header_size, length)`` bytes of the chunk.
        length, raw_length : int
            Encoded and decoded sizes the index claims for it.

        Raises
        ------
        CorruptFileError
            If the header contradicts the index.
        """

    def favouring_speed(self):
        """This codec configured to favour speed over a little space.

        Asked for by a caller that knows its data gains much speed for
        little space in a codec's faster form (cpersist's pickling layer
        asks for it for bfloat16 tensors). The chunks it makes decode as
        this codec's do, so files record the same :meth:`get_config`. This
        default returns the codec itself: a codec with no such form needs
        nothing more.

        Returns
        -------
        Codec
        """
        return self

    def trying_shuffle_alone(self):
        """This codec, also trying a byte shuffle without further filters
        on the chunks it may shuffle, if it has such a form besides its own.

        Asked for by the writers of growing files. The chunks it makes
        decode as this codec's do, so files record the same
        :meth:`get_config`. This default returns the codec itself: a codec
        with no such form needs nothing more.

        Returns
        -------
        Codec
        """
        return self

    def get_config(self):
        """Return the JSON-serialisable configuration recorded in files."""
        return {"id": self.codec_id, "level": self.level}

    def __repr__(self):
        return f"{type(self).__name__}(level={self.level})"

    def __eq__(self, other):
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash(tuple(sorted(self.get_config().items())))

    def _wrong_size(self, got, expected):
        return CorruptFileError(
            f"{self.codec_id} chunk decompressed to {got} bytes, expected {expected}"
        )

    def _invalid(self, exc):
        return CorruptFileError(f"invalid {self.codec_id} chunk: {exc}")
