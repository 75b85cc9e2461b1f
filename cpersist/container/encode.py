"""How chunks are encoded for storage: whether compressing a chunk pays, and
:class:`EncodedStream`, which encodes a stream (the pickle stream) chunk by
chunk on the thread pool while it is written."""

import threading

from .._runtime.fork import renew_after_fork
from .._runtime.parallel import run_claimed
from .buffers import BufferPool
from ..codecs.abc import middle_sample
from .layout import ENCODED, VERBATIM, checksum, checksum_state, verbatim_checksums

#: Bytes of each large chunk compressed first to decide whether compressing
#: the whole chunk pays.
PROBE_SIZE = 64 << 10
#: The saving the probe must show for a chunk to be compressed, by level
#: range, when the codec's form of it decodes at the codec's usual cost
#: (:meth:`Codec.decode_cost` 1; about 1 GB/s per core for Zstandard on
#: barely compressible data, where 15% of the bytes read back at about
#: 150 MB/s take as long). Compressing a chunk costs its decoding at every
#: read; the bytes it saves are worth more the more the level says size
#: matters: at the fast levels 1-5 a small saving costs more time than the
#: space is worth, at levels 6-9 size matters most.
SAVING_NEEDED_LEVELS_1_TO_5 = 0.15
SAVING_NEEDED_LEVELS_6_TO_9 = 0.05
#: Chunks of the pickle stream encoded together, per thread (see
#: :class:`EncodedStream`), and at most in all: with several chunks each,
#: the threads finish together; the cap bounds the raw bytes held.
BATCH_CHUNKS = 4
MAX_BATCH_CHUNKS = 32
#: A raw pickle stream's chunk buffers kept between dumps (see
#: :meth:`EncodedStream.release`), in bytes.
KEEP_CHUNK_BYTES = 16 << 20

CHUNK_BUFFERS = BufferPool(KEEP_CHUNK_BYTES)
renew_after_fork(CHUNK_BUFFERS, _lock=threading.Lock)


def encode_chunk(codec, chunk, typesize=1):
    """Encode one chunk for storage: ``(bytes to store, checksum, flag)``.

    A chunk is kept verbatim (flag ``VERBATIM``) when there is no codec, when
    a probe says compressing will not pay, or when the result does not
    shrink: reading it back is then a plain copy.
    """
    encoded = _compressed(codec, chunk, typesize)
    if encoded is None:
        return chunk, checksum(chunk), VERBATIM
    return encoded, checksum(encoded), ENCODED


def encode_array_chunk(codec, chunk, typesize=1):
    """:func:`encode_chunk` for a chunk of an array: ``(bytes to store,
    checksum, flag, pieces)``, ``pieces`` being the checksums of the pieces
    of a chunk kept verbatim (see :func:`.layout.verbatim_checksums`), or
    None."""
    encoded = _compressed(codec, chunk, typesize)
    if encoded is None:
        digest, pieces = verbatim_checksums(chunk)
        return chunk, digest, VERBATIM, pieces
    return encoded, checksum(encoded), ENCODED, None


def _compressed(codec, chunk, typesize):
    """``chunk`` encoded with ``codec``, or None if it is to be kept verbatim."""
    pays, hint = (False, None) if codec is None else _probe(codec, chunk, typesize)
    if not pays:
        return None
    encoded = codec.encode(chunk, typesize, hint)
    return encoded if len(encoded) < len(chunk) else None


def _probe(codec, chunk, typesize):
    """Cheap probe: ``(pays, hint)`` from a sample in the middle of ``chunk``.

    Incompressible data (noise, already-compressed images) would otherwise
    cost a full compression pass for nothing; the probe costs about
    ``PROBE_SIZE / len(chunk)`` of one. ``hint`` is the codec's own verdict
    on the sample (see :meth:`Codec.probe`).
    """
    if len(chunk) < 4 * PROBE_SIZE:
        return True, None
    sample = middle_sample(chunk, typesize, PROBE_SIZE)
    size, hint = codec.probe(sample, typesize)
    return size <= len(sample) * (1 - saving_needed(codec, hint, typesize)), hint


def saving_needed(codec, hint, typesize=1):
    """The fraction of its size a chunk's sample must save for the chunk to
    be stored compressed by ``codec`` in the form ``hint`` (what its probe
    chose): the level's saving (:data:`SAVING_NEEDED_LEVELS_1_TO_5`,
    :data:`SAVING_NEEDED_LEVELS_6_TO_9`) times what decoding that form costs
    (:meth:`Codec.decode_cost`). Blosc's byte shuffle, for one, stores the
    noisy low bytes of floats as plain copies, so a chunk of noisy float32
    that saves 14% that way decodes in under half the time Zstandard takes
    on it and is worth keeping compressed; the same saving from a plain
    Zstandard frame is not."""
    level_saving = SAVING_NEEDED_LEVELS_1_TO_5 if codec.level <= 5 else SAVING_NEEDED_LEVELS_6_TO_9
    return level_saving * codec.decode_cost(hint, typesize)


class EncodedStream:
    """A write-only file object that encodes what it receives, chunk by chunk.

    The pickler writes its stream here. Pieces gather until a batch of
    chunks is full; the batch is then encoded by this thread and the pool's
    workers together (:func:`run_claimed`), and pickling resumes. The
    encoded chunks wait in memory until
    :meth:`ContainerWriter.add_encoded_section` places them in the file
    (after the array sections the pickler writes meanwhile).

    Pickling and encoding take turns rather than overlap: a worker must take
    the GIL to start or finish a chunk, and the C pickler holds it for a
    whole switch interval at a time, so a chunk handed over during pickling
    would mostly wait for the pickler to block.

    Parameters
    ----------
    codec : Codec or None
    chunk_size : int
    n_threads : int
    """

    def __init__(self, codec, chunk_size, n_threads):
        self._codec = codec
        self._chunk_size = chunk_size
        self._n_threads = n_threads
        parallel = codec is not None and n_threads > 1
        self._batch_size = chunk_size * (min(BATCH_CHUNKS * n_threads, MAX_BATCH_CHUNKS)
                                         if parallel else 1)
        self._pieces = []
        self._buffered = 0
        self._done = []
        self._held = []  # the raw stream's buffers, given back by release()

    def write(self, data):
        view = memoryview(data)
        if self._codec is None:
            return self._write_raw(view)
        self._pieces.append(view)
        self._buffered += view.nbytes
        if self._buffered >= self._batch_size or not _immutable(view):
            # The pickler passes a large bytearray or buffer of the object
            # itself, not a copy: it is encoded (or its tail copied) before
            # pickling goes on and could change it, as pickle.dumps would.
            self._cut(flush=False)
        return view.nbytes

    def _cut(self, flush):
        """Encode every full chunk buffered (and, on ``flush``, the rest)."""
        size = self._chunk_size
        chunks = []  # each a list of the pieces (views) that make it up
        current, filled = [], 0
        for piece in self._pieces:
            while piece.nbytes:
                take = min(size - filled, piece.nbytes)
                current.append(piece[:take])
                filled += take
                piece = piece[take:]
                if filled == size:
                    chunks.append(current)
                    current, filled = [], 0
        if flush and current:
            chunks.append(current)
            current, filled = [], 0
        if not all(_immutable(piece) for piece in current):
            current = [memoryview(b"".join(current))]
        self._pieces, self._buffered = current, filled
        self._encode(chunks)

    def _encode(self, chunks):
        codec = self._codec

        def encode(pieces):
            # Each thread joins its own chunk, which is then in its cache to
            # encode. A single piece is used as is only if the pickler's own
            # bytes back it: a chunk kept verbatim stays in memory until it
            # is written.
            one = len(pieces) == 1 and _immutable(pieces[0])
            chunk = pieces[0] if one else b"".join(pieces)
            stored, digest, flag = encode_chunk(codec, chunk)
            return stored, len(chunk), digest, flag

        if self._n_threads <= 1 or codec is None or len(chunks) < 2:
            # A raw chunk needs only its checksum, of bytes the pickler has
            # just written (in the CPU's caches): a pool round trip costs
            # more than hashing it.
            self._done.extend(encode(pieces) for pieces in chunks)
            return
        encoded = [None] * len(chunks)

        def task(claims):
            for i in claims:
                encoded[i] = encode(chunks[i])

        run_claimed(task, len(chunks), self._n_threads)
        self._done.extend(encoded)

    def _write_raw(self, view):
        """Copy a raw stream's bytes into chunk buffers kept between dumps.

        Each part is checksummed as it is copied, while in the CPU's cache.
        Kept as the pickler writes them, its frames (each a new ``bytes``) would
        take fresh memory, which the kernel backs page by page: for the
        stream of a model of many small arrays, that costs several times
        the copy into memory used before.
        """
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")  # a C-contiguous buffer of an array
        total = view.nbytes
        size = self._chunk_size
        at = 0
        while at < total:
            if not self._pieces:
                self._held.append(CHUNK_BUFFERS.take(size))
                self._pieces += self._held[-1], checksum_state()
            buffer, state = self._pieces
            filled = self._buffered
            take = min(size - filled, total - at)
            part = view[at:at + take]
            buffer[filled:filled + take] = part
            state.update(part)  # while it is in the CPU's cache
            at += take
            self._buffered = filled + take
            if self._buffered == size:
                self._close_raw_chunk()
        return total

    def _close_raw_chunk(self):
        buffer, state = self._pieces
        self._pieces = []
        chunk = memoryview(buffer)[:self._buffered]
        self._done.append((chunk, self._buffered, state.intdigest(), VERBATIM))
        self._buffered = 0

    def take_raw_chunk(self, fill, digest):
        """Add a whole chunk of a raw stream at once, before any byte is
        written: ``fill(view)`` fills a chunk buffer, whose checksum is
        ``digest``."""
        size = self._chunk_size
        self._held.append(CHUNK_BUFFERS.take(size))
        chunk = memoryview(self._held[-1])[:size]
        fill(chunk)
        self._done.append((chunk, size, digest, VERBATIM))

    def release(self):
        """Give the raw stream's buffers back for the next dump, once its
        chunks are written: nothing may use them after."""
        held, self._held = self._held, []
        for buffer in held:
            CHUNK_BUFFERS.give(buffer)

    def encoded_chunks(self):
        """Encode what is left (the last chunk may be partial) and return all
        encoded chunks, in order, as ``(bytes to store, raw length, checksum,
        flag)``."""
        if self._buffered:
            if self._codec is None:
                self._close_raw_chunk()
            else:
                self._cut(flush=True)
        return self._done


def _immutable(view):
    """True if ``view``'s bytes cannot change (a view of a ``bytes``)."""
    return type(view.obj) is bytes
